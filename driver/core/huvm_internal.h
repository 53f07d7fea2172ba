/*
 * huvm: helpers shared by the core's files (not part of the core API). SPDX-License-Identifier: MIT
 */
#ifndef __HUVM_INTERNAL_H__
#define __HUVM_INTERNAL_H__

#include "huvm_core.h"

#define HUVM_UPSTREAM_VERSION "535.261.03"

/* The bounds of policy values and node descriptions (HUVM_PREEVICT_MAX_*, HUVM_MAX_MEMORY_BYTES, ...) are
 * in the ABI header, where the Python tools read them. */
#define HUVM_TEST_MAX_COUNT           4096u
#define HUVM_TEST_NS_PER_EVENT        1000000ULL      /* the synthetic node's clock advances 1 ms/event */
#define HUVM_NS_PER_MS                1000000ULL
/* HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE (docs/policy.md, "Pre-eviction"; both chosen on the tuning half of the
 * scenario matrix, `make eval`): a GPU is under pressure for this long after an allocation on it had to evict,
 * and its pre-eviction reserve is at most this many times the chunks its last fault batch allocated. The same
 * window gates every prefetch to a peer (huvm_decide_prefetch). */
#define HUVM_PREEVICT_PRESSURE_MS     200u
#define HUVM_PREEVICT_BURST_MULT      4u
/* HUVM_GPU_POLICY_LEND_ABOVE_PEAK: how long a lender's own peak is remembered (huvm_peak_update). */
#define HUVM_OWN_PEAK_WINDOW_MS       10000u
/* huvm_peak_update's spikes: a rise or fall of the GPU's own use by at least this much (32 chunks: far above a
 * fault batch's allocation noise, far below the spikes of the simulator's spiky lenders, 60 % of a GPU); the
 * longest interval the core weighs (about 18 minutes: keeps its products within 64 bits). Assumptions, not
 * measurements (docs/policy.md "Lending above the peak"). */
#define HUVM_SPIKE_MIN_BYTES          (32ULL * HUVM_CHUNK_SIZE)
#define HUVM_SPIKE_MAX_NS             (1ULL << 40)
/* HUVM_GPU_POLICY_PREFETCH_FEEDBACK: prefetched chunks the used/unused counts remember (huvm_prefetch_feedback). */
#define HUVM_PREFETCH_FEEDBACK_WINDOW 64u

#define HUVM_GPU_FLAGS_KNOWN (HUVM_GPU_FLAG_PRESENT | HUVM_GPU_FLAG_REPLAYABLE_FAULTS | HUVM_GPU_FLAG_PMA_EVICTION)

#define HUVM_GPU_FIELD(index, field) (HUVM_FIELD_GPU_BASE + HUVM_FIELD_GPU_STRIDE * (index) + (field))

static inline int huvm_uuid_is_zero(const uint8_t *uuid)
{
    uint32_t i;

    for (i = 0; i < HUVM_UUID_LEN; i++) {
        if (uuid[i])
            return 0;
    }
    return 1;
}

static inline int huvm_uuid_eq(const uint8_t *a, const uint8_t *b)
{
    return huvm_memcmp(a, b, HUVM_UUID_LEN) == 0;
}

static inline int huvm_role_harvests(uint32_t role)
{
    return role == HUVM_ROLE_HARVESTER || role == HUVM_ROLE_BOTH;
}

static inline int huvm_role_lends(uint32_t role)
{
    return role == HUVM_ROLE_LENDER || role == HUVM_ROLE_BOTH;
}

static inline int huvm_link_is_nvlink(uint32_t link_type)
{
    return (link_type >= HUVM_LINK_NVLINK_1 && link_type <= HUVM_LINK_C2C) || link_type == HUVM_LINK_NVLINK_5;
}

static inline uint64_t huvm_chunks_of(uint64_t bytes)
{
    return (bytes + HUVM_CHUNK_SIZE - 1) / HUVM_CHUNK_SIZE;
}

/* Role of GPU index gpu under the current policy (NONE without an entry). */
static inline uint32_t huvm_gpu_role(const huvm_core_t *core, uint32_t gpu)
{
    const huvm_gpu_policy_t *p = huvm_policy_gpu(core, gpu);

    return p ? p->role : HUVM_ROLE_NONE;
}

static inline int huvm_gpu_present(const huvm_core_t *core, uint32_t gpu)
{
    return gpu < core->gpu_count && (core->gpus[gpu].flags & HUVM_GPU_FLAG_PRESENT);
}

/* huvm_policy.c */
void huvm_policy_refresh_slots(huvm_core_t *core);
/* Make sure the UUID has a policy entry (default of the current preset); returns 1 if one was added. */
int huvm_policy_ensure_entry(huvm_core_t *core, const uint8_t *uuid, uint64_t memory_bytes);
/* Under a named preset, refit its pre-eviction reserve to the node's GPUs (a smaller GPU appeared);
 * returns 1 if the policy changed. */
int huvm_policy_fit_node(huvm_core_t *core);
/* Checks of one GPU's static facts (field_in_gpu: HUVM_FIELD_GPU_*) and of one link. */
huvm_status_t huvm_core_check_gpu_info(const huvm_gpu_info_t *info, uint32_t *field_in_gpu);
huvm_status_t huvm_core_check_link(uint32_t a, uint32_t b, const huvm_link_t *link);

/* huvm_dispatch_test.c: TEST_SET_NODE and TEST_EVENT, called by huvm_dispatch() once the test gate passed. */
huvm_status_t huvm_dispatch_test(huvm_core_t *core,
                                 const huvm_caller_t *caller,
                                 uint32_t cmd,
                                 void *params,
                                 uint32_t *error_field);

/* huvm_admit_lend with the bytes in flight to holder given (huvm_lend_reserve reads them once). */
uint32_t huvm_admit_lend_inflight(const huvm_core_t *core,
                                  const huvm_gpu_state_t *state,
                                  uint32_t owner,
                                  uint32_t holder,
                                  uint64_t bytes,
                                  uint64_t now_ns,
                                  uint64_t inflight);

#endif /* __HUVM_INTERNAL_H__ */
