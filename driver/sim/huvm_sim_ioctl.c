/*
 * huvm: simulated node, the "ioctl" entry: the ABI's commands through the core's dispatch.
 * SPDX-License-Identifier: MIT
 *
 * The simulator is the caller the kernel glue would be: it refreshes free memory before GET_INFO and lists
 * its tenants as va_spaces (one per tenant; counters are the tenant's own).
 */
#include <stdio.h>
#include <string.h>

#include "huvm_sim_internal.h"

static inline uint64_t free_bytes_of(const huvm_sim_t *sim, uint32_t g)
{
    const sim_gpu_t *gg = &sim->gpus[g];
    uint64_t used = gg->pinned_chunks + gg->own.count + gg->guest_chunks;

    if (sim->cfg.flags & HUVM_SIM_FLAG_UNLIMITED)
        return sim->core.gpus[g].memory_bytes;
    return used < gg->capacity_chunks ? (gg->capacity_chunks - used) * SIM_CHUNK : 0;
}

static void sim_refresh_free(void *ctx, const huvm_core_t *core, huvm_gpu_info_t *gpus)
{
    const huvm_sim_t *sim = ctx;
    uint32_t g;

    for (g = 0; g < sim->cfg.gpu_count && g < core->gpu_count; g++)
        gpus[g].free_bytes = free_bytes_of(sim, g);
}

static huvm_status_t sim_list_va_spaces(void *ctx, const huvm_caller_t *caller, HUVM_LIST_VA_SPACES_PARAMS *params)
{
    const huvm_sim_t *sim = ctx;
    uint32_t i, n = 0;

    (void)caller;
    params->total = sim->n_tenants;
    params->count = 0;
    if (params->start_index > sim->n_tenants)
        return HUVM_NV_ERR_OUT_OF_RANGE;
    for (i = params->start_index; i < sim->n_tenants && n < HUVM_MAX_VA_SPACES_PER_CALL; i++, n++) {
        const sim_tenant_t *tt = &sim->tenants[i];
        huvm_va_space_info_t *e = &params->entries[n];
        const sim_gpu_t *gg = &sim->gpus[tt->spec.gpu];
        uint64_t harvested = 0;
        uint32_t c;

        memset(e, 0, sizeof(*e));
        e->id = (uint64_t)i + 1;
        e->pid = 100000u + i;           /* simulated processes: stable fake ids */
        e->uid = 0;
        memcpy(e->comm, tt->spec.name, sizeof(e->comm) - 1);
        e->registered_gpus = (uint32_t)((1u << sim->cfg.gpu_count) - 1);
        e->evict_to_peer = tt->vacnt.evict_to_peer;
        e->evict_to_host = tt->vacnt.evict_to_host;
        e->fetch_from_peer = tt->vacnt.fetch_from_peer;
        e->fetch_from_host = tt->vacnt.fetch_from_host;
        e->prefetch = tt->vacnt.prefetch;
        if (gg->peer_chunks) {
            for (c = 0; c < tt->spec.n_chunks; c++) {
                const sim_chunk_t *ch = &sim->chunks[tt->chunk_base + c];

                if (ch->loc == HUVM_SIM_LOC_GPU && ch->holder != ch->owner)
                    harvested += SIM_CHUNK;
            }
        }
        e->harvested_bytes = harvested;
    }
    params->count = n;
    return HUVM_NV_OK;
}

void sim_core_ops(huvm_core_ops_t *ops)
{
    memset(ops, 0, sizeof(*ops));
    ops->refresh_free = sim_refresh_free;
    ops->list_va_spaces = sim_list_va_spaces;
    ops->policy_changed = NULL;
}

uint32_t huvm_sim_ioctl(huvm_sim_t *sim, uint32_t cmd, void *params, uint32_t params_size)
{
    huvm_core_ops_t ops;
    huvm_caller_t caller;

    if (!sim || !params)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    if (params_size < sizeof(huvm_hdr_t))
        return HUVM_NV_ERR_INVALID_PARAM_STRUCT;
    /* The simulated node's GPUs, links and chunks are its model: TEST_SET_NODE and TEST_EVENT would move the
     * core's state (nodes, gauges) away from the model's, so the simulator refuses them (the qemu test module
     * implements them). The refusal is written into the params like any other. */
    if (cmd == HUVM_IOCTL_TEST_SET_NODE || cmd == HUVM_IOCTL_TEST_EVENT) {
        if (huvm_cmd_params_size(cmd) == params_size) {
            uint32_t tail[2] = { HUVM_FIELD_NONE, HUVM_NV_ERR_NOT_SUPPORTED };

            ((huvm_hdr_t *)params)->module_abi_version = HUVM_ABI_VERSION;
            memcpy((uint8_t *)params + params_size - sizeof(tail), tail, sizeof(tail));
        }
        return HUVM_NV_ERR_NOT_SUPPORTED;
    }
    sim_core_ops(&ops);
    memset(&caller, 0, sizeof(caller));
    caller.privileged = 1;
    caller.allow_test = 1;
    caller.now_ns = sim->now;
    return huvm_dispatch(&sim->core, &ops, sim, &caller, cmd, params, params_size);
}
