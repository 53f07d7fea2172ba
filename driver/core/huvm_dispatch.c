/*
 * huvm: control dispatch shared by the kernel glue, the qemu test module and the simulator.
 * SPDX-License-Identifier: MIT
 *
 * The test commands (TEST_SET_NODE, TEST_EVENT) are in huvm_dispatch_test.c, as NVIDIA keeps its tests in
 * uvm_*_test.c: this file reaches them only through huvm_dispatch_test(), behind the test gate
 * (caller->allow_test: uvm_enable_builtin_tests in the kernel, always in the simulator).
 *
 * The caller copies params in (params_size bytes, a private copy), calls huvm_dispatch and copies them
 * out. Each command validates everything first and changes nothing on refusal; error_field and rmStatus
 * (the last 8 bytes of every params struct) say what was refused and why. docs/abi.md has the tables.
 */
#include "huvm_internal.h"

uint32_t huvm_cmd_params_size(uint32_t cmd)
{
    switch (cmd) {
    case HUVM_IOCTL_GET_INFO:       return sizeof(HUVM_GET_INFO_PARAMS);
    case HUVM_IOCTL_GET_POLICY:     return sizeof(HUVM_GET_POLICY_PARAMS);
    case HUVM_IOCTL_SET_POLICY:     return sizeof(HUVM_SET_POLICY_PARAMS);
    case HUVM_IOCTL_GET_STATS:      return sizeof(HUVM_GET_STATS_PARAMS);
    case HUVM_IOCTL_RESET_STATS:    return sizeof(HUVM_RESET_STATS_PARAMS);
    case HUVM_IOCTL_LIST_VA_SPACES: return sizeof(HUVM_LIST_VA_SPACES_PARAMS);
    case HUVM_IOCTL_TEST_SET_NODE:  return sizeof(HUVM_TEST_SET_NODE_PARAMS);
    case HUVM_IOCTL_TEST_EVENT:     return sizeof(HUVM_TEST_EVENT_PARAMS);
    case HUVM_IOCTL_SET_GPU_RATES:  return sizeof(HUVM_SET_GPU_RATES_PARAMS);
    case HUVM_IOCTL_GET_GPU_RATES:  return sizeof(HUVM_GET_GPU_RATES_PARAMS);
    default:                        return 0;
    }
}

uint32_t huvm_cmd_privileged(uint32_t cmd)
{
    switch (cmd) {
    case HUVM_IOCTL_SET_POLICY:
    case HUVM_IOCTL_RESET_STATS:
    case HUVM_IOCTL_SET_GPU_RATES:
    case HUVM_IOCTL_TEST_SET_NODE:
    case HUVM_IOCTL_TEST_EVENT:    return 1;
    default:                       return 0;
    }
}

uint32_t huvm_cmd_reader(uint32_t cmd)
{
    switch (cmd) {
    case HUVM_IOCTL_GET_INFO:
    case HUVM_IOCTL_GET_POLICY:
    case HUVM_IOCTL_GET_STATS:
    case HUVM_IOCTL_GET_GPU_RATES: return 1;
    default:                       return 0;
    }
}

huvm_status_t huvm_check_hdr(uint32_t cmd, huvm_hdr_t *hdr, uint32_t params_size, uint32_t *error_field)
{
    uint32_t dummy;
    uint32_t expected = huvm_cmd_params_size(cmd);

    if (!error_field)
        error_field = &dummy;
    *error_field = HUVM_FIELD_NONE;
    if (!hdr)
        return HUVM_NV_ERR_INVALID_PARAM_STRUCT;
    hdr->module_abi_version = HUVM_ABI_VERSION;
    if (expected == 0)
        return HUVM_NV_ERR_INVALID_COMMAND;
    if ((hdr->abi_version >> 16) != HUVM_ABI_VERSION_MAJOR) {
        *error_field = HUVM_FIELD_HDR_ABI_VERSION;
        return HUVM_NV_ERR_NOT_COMPATIBLE;
    }
    if (hdr->size != expected || params_size != expected) {
        *error_field = HUVM_FIELD_HDR_SIZE;
        return HUVM_NV_ERR_INVALID_PARAM_STRUCT;
    }
    if (hdr->flags != 0) {
        *error_field = HUVM_FIELD_HDR_FLAGS;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    return HUVM_NV_OK;
}

/* The last two uint32_t of every params struct. */
static void set_tail(void *params, uint32_t size, uint32_t error_field, huvm_status_t status)
{
    uint32_t *tail = (uint32_t *)((uint8_t *)params + size - 2 * sizeof(uint32_t));

    tail[0] = error_field;
    tail[1] = status;
}

/* Zero the output part of params (between the header and the tail). */
static void clear_body(void *params, uint32_t size)
{
    huvm_memset((uint8_t *)params + sizeof(huvm_hdr_t), 0, size - sizeof(huvm_hdr_t) - 2 * sizeof(uint32_t));
}

/* A reader (huvm_cmd_reader()): writes only p. */
static huvm_status_t cmd_get_info(const huvm_core_t *core,
                                  const huvm_core_ops_t *ops,
                                  void *ctx,
                                  HUVM_GET_INFO_PARAMS *p)
{
    uint32_t i;

    clear_body(p, sizeof(*p));
    p->huvm_version = HUVM_VERSION;
    p->backend = core->backend;
    p->gpu_count = core->gpu_count;
    p->max_gpus = HUVM_MAX_GPUS;
    huvm_memcpy(p->upstream_version, HUVM_UPSTREAM_VERSION, sizeof(HUVM_UPSTREAM_VERSION));
    for (i = 0; i < core->gpu_count; i++)
        p->gpus[i] = core->gpus[i];
    huvm_memcpy(p->links, core->links, sizeof(p->links));
    if (ops && ops->refresh_free)
        ops->refresh_free(ctx, core, p->gpus);
    return HUVM_NV_OK;
}

static huvm_status_t cmd_get_stats(const huvm_core_t *core, const huvm_caller_t *caller, HUVM_GET_STATS_PARAMS *p)
{
    const uint32_t n = sizeof(huvm_gpu_counters_t) / sizeof(uint64_t);
    const uint32_t pn = sizeof(huvm_pair_counters_t) / sizeof(uint64_t);
    uint32_t g, h, i;

    clear_body(p, sizeof(*p));
    p->timestamp_ns = caller->now_ns;
    p->generation = core->policy.generation;
    p->gpu_count = core->gpu_count;
    for (g = 0; g < core->gpu_count; g++) {
        const uint64_t *src = (const uint64_t *)&core->counters[g];
        uint64_t *dst = (uint64_t *)&p->gpus[g];

        for (i = 0; i < n; i++)
            dst[i] = huvm_atomic64_read(&src[i]);
        for (h = 0; h < core->gpu_count; h++) {
            const uint64_t *ps = (const uint64_t *)&core->pairs[g][h];
            uint64_t *pd = (uint64_t *)&p->pairs[g][h];

            for (i = 0; i < pn; i++)
                pd[i] = huvm_atomic64_read(&ps[i]);
        }
    }
    return HUVM_NV_OK;
}

static huvm_status_t cmd_list_va_spaces(huvm_core_t *core,
                                        const huvm_core_ops_t *ops,
                                        void *ctx,
                                        const huvm_caller_t *caller,
                                        HUVM_LIST_VA_SPACES_PARAMS *p,
                                        uint32_t *error_field)
{
    uint32_t start = p->start_index;
    huvm_status_t status;

    (void)core;
    if (p->pad != 0) {
        *error_field = HUVM_FIELD_RESERVED;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    clear_body(p, sizeof(*p));
    p->start_index = start;
    if (!ops || !ops->list_va_spaces)
        return start == 0 ? HUVM_NV_OK : (*error_field = HUVM_FIELD_START_INDEX, HUVM_NV_ERR_OUT_OF_RANGE);
    status = ops->list_va_spaces(ctx, caller, p);
    p->start_index = start;
    if (status != HUVM_NV_OK) {
        clear_body(p, sizeof(*p));
        p->start_index = start;
        return status;
    }
    HUVM_ASSERT(p->count <= HUVM_MAX_VA_SPACES_PER_CALL);
    if (p->count > HUVM_MAX_VA_SPACES_PER_CALL)
        p->count = HUVM_MAX_VA_SPACES_PER_CALL;
    if (start > p->total) {
        /* past the end (paging raced with va_spaces going away: start again at 0) */
        clear_body(p, sizeof(*p));
        p->start_index = start;
        *error_field = HUVM_FIELD_START_INDEX;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    return HUVM_NV_OK;
}

/* SET_GPU_RATES: validated whole before anything changes (the GPU present, each rate in range). */
static huvm_status_t cmd_set_gpu_rates(huvm_core_t *core, const HUVM_SET_GPU_RATES_PARAMS *p, uint32_t *error_field)
{
    uint32_t i;

    if (p->hbm_mbyte_per_s > HUVM_MAX_MBYTE_PER_S) {
        *error_field = HUVM_FIELD_RATES_HBM;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    if (p->giveback_mbyte_per_s > HUVM_MAX_MBYTE_PER_S) {
        *error_field = HUVM_FIELD_RATES_GIVEBACK;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    for (i = 0; i < core->gpu_count; i++) {
        if (!huvm_uuid_is_zero(p->uuid) && huvm_uuid_eq(core->gpus[i].uuid, p->uuid) &&
            (core->gpus[i].flags & HUVM_GPU_FLAG_PRESENT))
            return huvm_core_set_gpu_rates(core, i, p->hbm_mbyte_per_s, p->giveback_mbyte_per_s);
    }
    *error_field = HUVM_FIELD_RATES_GPU;
    return HUVM_NV_ERR_GPU_UUID_NOT_FOUND;
}

/* A reader (huvm_cmd_reader()): writes only p. */
static void cmd_get_gpu_rates(const huvm_core_t *core, HUVM_GET_GPU_RATES_PARAMS *p)
{
    uint32_t i;

    clear_body(p, sizeof(*p));
    p->gpu_count = core->gpu_count;
    for (i = 0; i < core->gpu_count; i++) {
        p->hbm_mbyte_per_s[i] = core->hbm_mbyte_per_s[i];
        p->giveback_mbyte_per_s[i] = core->giveback_mbyte_per_s[i];
    }
}

huvm_status_t huvm_dispatch(huvm_core_t *core,
                            const huvm_core_ops_t *ops,
                            void *ops_ctx,
                            const huvm_caller_t *caller,
                            uint32_t cmd,
                            void *params,
                            uint32_t params_size)
{
    uint32_t error_field = HUVM_FIELD_NONE;
    uint32_t expected = huvm_cmd_params_size(cmd);
    huvm_status_t status;

    if (!core || !caller || !params || params_size < sizeof(huvm_hdr_t))
        return expected ? HUVM_NV_ERR_INVALID_PARAM_STRUCT : HUVM_NV_ERR_INVALID_COMMAND;
    status = huvm_check_hdr(cmd, (huvm_hdr_t *)params, params_size, &error_field);
    if (status != HUVM_NV_OK) {
        /* The tail can be written only where the buffer has the expected layout. */
        if (expected != 0 && params_size == expected)
            set_tail(params, params_size, error_field, status);
        return status;
    }

    /* Test commands: only where tests are enabled, only for a privileged caller, and never on a live node
     * (a synthetic node would replace, and synthetic events would move the counters of, GPUs in use). */
    if (cmd == HUVM_IOCTL_TEST_SET_NODE || cmd == HUVM_IOCTL_TEST_EVENT) {
        if (!caller->allow_test)
            status = HUVM_NV_ERR_NOT_SUPPORTED;
        else if (!caller->privileged)
            status = HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS;
        else if (caller->live_gpus)
            status = HUVM_NV_ERR_STATE_IN_USE;
    }
    else if (huvm_cmd_privileged(cmd) && !caller->privileged) {
        status = HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS;
    }
    if (status != HUVM_NV_OK)
        goto done;

    switch (cmd) {
    case HUVM_IOCTL_GET_INFO:   status = cmd_get_info(core, ops, ops_ctx, (HUVM_GET_INFO_PARAMS *)params); break;
    case HUVM_IOCTL_GET_POLICY: {
        HUVM_GET_POLICY_PARAMS *p = (HUVM_GET_POLICY_PARAMS *)params;

        clear_body(p, sizeof(*p));
        p->policy = core->policy;
        break;
    }
    case HUVM_IOCTL_SET_POLICY: {
        HUVM_SET_POLICY_PARAMS *p = (HUVM_SET_POLICY_PARAMS *)params;

        status = huvm_policy_apply(core, &p->policy, &error_field);
        if (status == HUVM_NV_OK) {
            p->policy.generation = core->policy.generation;
            huvm_account_policy(core);
            if (ops && ops->policy_changed)
                ops->policy_changed(ops_ctx, core);
        }
        break;
    }
    case HUVM_IOCTL_GET_STATS:   status = cmd_get_stats(core, caller, (HUVM_GET_STATS_PARAMS *)params); break;
    case HUVM_IOCTL_RESET_STATS: {
        HUVM_RESET_STATS_PARAMS *p = (HUVM_RESET_STATS_PARAMS *)params;

        if (p->pad != 0) {
            error_field = HUVM_FIELD_RESERVED;
            status = HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        else if (p->reset_flags & ~(uint32_t)HUVM_RESET_COUNTERS) {
            error_field = HUVM_FIELD_RESET_FLAGS;
            status = HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        else {
            huvm_account_reset(core, p->reset_flags);
        }
        break;
    }
    case HUVM_IOCTL_SET_GPU_RATES:
        status = cmd_set_gpu_rates(core, (const HUVM_SET_GPU_RATES_PARAMS *)params, &error_field);
        break;
    case HUVM_IOCTL_GET_GPU_RATES: cmd_get_gpu_rates(core, (HUVM_GET_GPU_RATES_PARAMS *)params); break;
    case HUVM_IOCTL_LIST_VA_SPACES:
        status = cmd_list_va_spaces(core, ops, ops_ctx, caller, (HUVM_LIST_VA_SPACES_PARAMS *)params, &error_field);
        break;
    case HUVM_IOCTL_TEST_SET_NODE:
    case HUVM_IOCTL_TEST_EVENT:    status = huvm_dispatch_test(core, caller, cmd, params, &error_field); break;
    default:                       status = HUVM_NV_ERR_INVALID_COMMAND; break;
    }

done:
    set_tail(params, params_size, error_field, status);
    return status;
}
