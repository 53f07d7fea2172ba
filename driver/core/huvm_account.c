/*
 * huvm: accounting. SPDX-License-Identifier: MIT
 *
 * Every event updates the counters of docs/counters.md with relaxed atomics (no lock) and fires the
 * tracepoint (kernel) or USDT probe (user space) of the same name (huvm_events.h).
 *
 * Conservation: every byte added to pairs[owner][holder].held_bytes is added to counters[holder].lent_bytes
 * and counters[owner].harvested_bytes, and every byte removed from it (saturating at zero) is removed from
 * both; so at rest lent_bytes[h] == sum over o of held[o][h] and harvested_bytes[o] == sum over h of
 * held[o][h].
 */
#include "huvm_internal.h"

#define CTR(core, gpu, field) (&(core)->counters[gpu].field)

/* Counter updates. Callers that update one core from one thread at a time (the simulator's event loop) set
 * core->single_writer: the read-modify-writes are then plain relaxed loads and stores, with the same results,
 * still readable from other threads (a 64-bit relaxed access is atomic). Otherwise (the kernel: several fault
 * and eviction paths at once) they are atomic. sw is core->single_writer, read once per event. */
static inline void ctr_add(int sw, uint64_t *p, uint64_t v)
{
    if (sw)
        huvm_atomic64_set(p, huvm_atomic64_read(p) + v);
    else
        huvm_atomic64_add(p, v);
}

static inline void ctr_max(int sw, uint64_t *p, uint64_t v)
{
    if (!sw)
        huvm_atomic64_max(p, v);
    else if (huvm_atomic64_read(p) < v)
        huvm_atomic64_set(p, v);
}

static inline uint64_t ctr_sub_sat(int sw, uint64_t *p, uint64_t v)
{
    uint64_t old, take;

    if (!sw)
        return huvm_atomic64_sub_sat(p, v);
    old = huvm_atomic64_read(p);
    take = old < v ? old : v;
    huvm_atomic64_set(p, old - take);
    return take;
}

static int valid_gpu(const huvm_core_t *core, uint32_t gpu)
{
    return core && gpu < HUVM_MAX_GPUS && gpu < core->gpu_count;
}

/* Gauges grow before the pair and shrink after it, so that even while updates race a pair never holds
 * more than its gauges count and the saturating subtraction never clamps a gauge. */
static inline void held_add(int sw, huvm_core_t *core, uint32_t owner, uint32_t holder, uint64_t bytes)
{
    ctr_add(sw, CTR(core, owner, harvested_bytes), bytes);
    ctr_add(sw, CTR(core, holder, lent_bytes), bytes);
    ctr_max(sw, CTR(core, holder, lent_peak_bytes), huvm_atomic64_read(CTR(core, holder, lent_bytes)));
    ctr_add(sw, &core->pairs[owner][holder].held_bytes, bytes);
}

static inline void held_sub(int sw, huvm_core_t *core, uint32_t owner, uint32_t holder, uint64_t bytes)
{
    uint64_t taken = ctr_sub_sat(sw, &core->pairs[owner][holder].held_bytes, bytes);

    ctr_sub_sat(sw, CTR(core, owner, harvested_bytes), taken);
    ctr_sub_sat(sw, CTR(core, holder, lent_bytes), taken);
}

/* The events on the hot paths are written once with sw a parameter and called with a constant (below): each
 * caller gets its own copy without a test per counter (the simulator's plain stores, the kernel's atomics). */
static HUVM_ALWAYS_INLINE void account_evict(int sw,
                                             huvm_core_t *core,
                                             uint32_t owner,
                                             uint32_t dst,
                                             uint32_t reason,
                                             int pre,
                                             uint64_t bytes,
                                             uint64_t va)
{
    uint64_t chunks = huvm_chunks_of(bytes);

    if (dst == HUVM_DEST_HOST) {
        HUVM_ASSERT(reason != HUVM_REASON_PEER && reason < HUVM_REASON_COUNT);
        if (reason == HUVM_REASON_PEER || reason >= HUVM_REASON_COUNT)
            reason = HUVM_REASON_NO_PEER;
        ctr_add(sw, CTR(core, owner, evict_to_host), chunks);
        ctr_add(sw, CTR(core, owner, host_reason[reason]), chunks);
        if (pre)
            ctr_add(sw, CTR(core, owner, preevict_to_host), chunks);
        ctr_add(sw, CTR(core, owner, bytes_to_host), bytes);
    }
    else {
        reason = HUVM_REASON_PEER;
        ctr_add(sw, CTR(core, owner, evict_to_peer), chunks);
        if (pre)
            ctr_add(sw, CTR(core, owner, preevict_to_peer), chunks);
        ctr_add(sw, CTR(core, owner, bytes_to_peer), bytes);
        ctr_add(sw, CTR(core, dst, bytes_from_peer), bytes);
        ctr_add(sw, &core->pairs[owner][dst].evict_chunks, chunks);
        held_add(sw, core, owner, dst, bytes);
        /* round robin: the next search starts after the peer just used (a benign race if concurrent) */
        HUVM_WRITE_ONCE(core->rr_next[owner], (dst + 1) % HUVM_MAX_GPUS);
    }
    if (pre)
        HUVM_TRACE(preevict, owner, dst, reason, bytes, va);
    else
        HUVM_TRACE(evict, owner, dst, reason, bytes, va);
}

void huvm_account_evict(huvm_core_t *core,
                        uint32_t owner,
                        uint32_t dst,
                        uint32_t reason,
                        uint32_t flags,
                        uint64_t bytes,
                        uint64_t va)
{
    int pre = (flags & HUVM_EVICT_FLAG_PREEVICT) != 0;

    if (!valid_gpu(core, owner) || (dst != HUVM_DEST_HOST && (!valid_gpu(core, dst) || dst == owner))) {
        HUVM_ASSERT(0);
        return;
    }
    if (core->single_writer)
        account_evict(1, core, owner, dst, reason, pre, bytes, va);
    else
        account_evict(0, core, owner, dst, reason, pre, bytes, va);
}

_Static_assert(HUVM_FETCHED_MOVED == HUVM_FETCH_MIGRATE && HUVM_FETCHED_REMOTE_MAP == HUVM_FETCH_REMOTE_MAP,
               "the first fetch event reasons are the fetch modes");

static HUVM_ALWAYS_INLINE void account_fetch(int sw,
                                             huvm_core_t *core,
                                             uint32_t owner,
                                             uint32_t src,
                                             uint32_t mode,
                                             uint64_t bytes,
                                             uint64_t va)
{
    uint64_t chunks = huvm_chunks_of(bytes);

    if (src == HUVM_DEST_HOST) {
        if (mode == HUVM_FETCHED_PAGES)
            chunks = bytes / HUVM_CHUNK_SIZE;       /* whole chunks only: a page run is not a chunk */
        else
            mode = HUVM_FETCHED_MOVED;
        ctr_add(sw, CTR(core, owner, fetch_from_host), chunks);
        ctr_add(sw, CTR(core, owner, bytes_from_host), bytes);
    }
    else if (mode == HUVM_FETCHED_REMOTE_MAP) {
        ctr_add(sw, CTR(core, owner, remote_map), chunks);
    }
    else {
        if (mode != HUVM_FETCHED_RELEASED) {
            ctr_add(sw, CTR(core, owner, bytes_from_peer), bytes);
            ctr_add(sw, CTR(core, src, bytes_to_peer), bytes);
        }
        if (mode != HUVM_FETCHED_PAGES) {
            ctr_add(sw, CTR(core, owner, fetch_from_peer), chunks);
            ctr_add(sw, &core->pairs[owner][src].fetch_chunks, chunks);
            held_sub(sw, core, owner, src, bytes);
        }
    }
    HUVM_TRACE(fetch, owner, src, mode, bytes, va);
}

void huvm_account_fetch(huvm_core_t *core, uint32_t owner, uint32_t src, uint32_t mode, uint64_t bytes, uint64_t va)
{
    if (!valid_gpu(core, owner) || (src != HUVM_DEST_HOST && (!valid_gpu(core, src) || src == owner)) ||
        mode >= HUVM_FETCHED_COUNT) {
        HUVM_ASSERT(0);
        return;
    }
    if (core->single_writer)
        account_fetch(1, core, owner, src, mode, bytes, va);
    else
        account_fetch(0, core, owner, src, mode, bytes, va);
}

void huvm_account_giveback(huvm_core_t *core, uint32_t holder, uint32_t owner, uint64_t bytes, uint64_t va)
{
    int sw;
    uint64_t chunks = huvm_chunks_of(bytes);

    if (!valid_gpu(core, holder) || !valid_gpu(core, owner) || holder == owner) {
        HUVM_ASSERT(0);
        return;
    }
    sw = core->single_writer;
    ctr_add(sw, CTR(core, holder, giveback), chunks);
    ctr_add(sw, CTR(core, holder, bytes_to_host), bytes);
    ctr_add(sw, &core->pairs[owner][holder].giveback_chunks, chunks);
    held_sub(sw, core, owner, holder, bytes);
    HUVM_TRACE(giveback, holder, owner, HUVM_REASON_GIVEBACK, bytes, va);
}

void huvm_account_release(huvm_core_t *core, uint32_t owner, uint32_t holder, uint64_t bytes, uint64_t va)
{
    (void)va;       /* no event: nothing moved and no counter changes (docs/counters.md) */
    if (!valid_gpu(core, owner) || !valid_gpu(core, holder) || holder == owner) {
        HUVM_ASSERT(0);
        return;
    }
    held_sub(core->single_writer, core, owner, holder, bytes);
}

int huvm_core_slot_in_use(const huvm_core_t *core, uint32_t gpu)
{
    uint32_t other;

    if (!core || gpu >= HUVM_MAX_GPUS)
        return 0;
    if (huvm_atomic64_read(&core->counters[gpu].harvested_bytes) || huvm_atomic64_read(&core->counters[gpu].lent_bytes))
        return 1;
    for (other = 0; other < HUVM_MAX_GPUS; other++) {
        if (huvm_atomic64_read(&core->pairs[gpu][other].held_bytes) ||
            huvm_atomic64_read(&core->pairs[other][gpu].held_bytes))
            return 1;
    }
    return 0;
}

void huvm_account_prefetch(huvm_core_t *core, uint32_t owner, uint32_t dst, uint64_t bytes, uint64_t va)
{
    int sw;
    uint64_t chunks = huvm_chunks_of(bytes);

    if (!valid_gpu(core, owner) || !valid_gpu(core, dst)) {
        HUVM_ASSERT(0);
        return;
    }
    sw = core->single_writer;
    ctr_add(sw, CTR(core, dst, bytes_from_host), bytes);
    if (dst == owner) {
        ctr_add(sw, CTR(core, owner, prefetch_local), chunks);
    }
    else {
        ctr_add(sw, CTR(core, owner, prefetch_to_peer), chunks);
        ctr_add(sw, &core->pairs[owner][dst].prefetch_chunks, chunks);
        held_add(sw, core, owner, dst, bytes);
    }
    HUVM_TRACE(prefetch, owner, dst, 0, bytes, va);
}

void huvm_account_faults(huvm_core_t *core, uint32_t gpu, uint32_t faults)
{
    int sw;
    if (!valid_gpu(core, gpu)) {
        HUVM_ASSERT(0);
        return;
    }
    sw = core->single_writer;
    ctr_add(sw, CTR(core, gpu, faults), faults);
    ctr_add(sw, CTR(core, gpu, fault_batches), 1);
}

void huvm_account_policy(huvm_core_t *core)
{
    if (!core)
        return;
    HUVM_TRACE(policy, HUVM_DEST_HOST, HUVM_DEST_HOST, core->policy.preset, core->policy.generation, 0);
}

void huvm_account_reset(huvm_core_t *core, uint32_t reset_flags)
{
    const uint32_t n = sizeof(huvm_gpu_counters_t) / sizeof(uint64_t);
    const uint32_t lent = offsetof(huvm_gpu_counters_t, lent_bytes) / sizeof(uint64_t);
    const uint32_t harvested = offsetof(huvm_gpu_counters_t, harvested_bytes) / sizeof(uint64_t);
    const uint32_t peak = offsetof(huvm_gpu_counters_t, lent_peak_bytes) / sizeof(uint64_t);
    const uint32_t held = offsetof(huvm_pair_counters_t, held_bytes) / sizeof(uint64_t);
    const uint32_t pn = sizeof(huvm_pair_counters_t) / sizeof(uint64_t);
    uint32_t g, h, i;

    if (!core || !(reset_flags & HUVM_RESET_COUNTERS))
        return;
    for (g = 0; g < HUVM_MAX_GPUS; g++) {
        uint64_t *c = (uint64_t *)&core->counters[g];

        for (i = 0; i < n; i++) {
            if (i != lent && i != harvested && i != peak)
                huvm_atomic64_set(&c[i], 0);
        }
        /* the peak restarts from the current level */
        huvm_atomic64_set(&c[peak], huvm_atomic64_read(&c[lent]));
        for (h = 0; h < HUVM_MAX_GPUS; h++) {
            uint64_t *pc = (uint64_t *)&core->pairs[g][h];

            for (i = 0; i < pn; i++) {
                if (i != held)
                    huvm_atomic64_set(&pc[i], 0);
            }
        }
    }
}

uint32_t huvm_lend_reserve(huvm_core_t *core,
                           const huvm_gpu_state_t *state,
                           uint32_t owner,
                           uint32_t holder,
                           uint64_t bytes,
                           uint64_t now_ns)
{
    uint64_t inflight;
    uint32_t reason;

    if (!core || !state || holder >= HUVM_MAX_GPUS)
        return HUVM_REASON_NO_PEER;
    for (;;) {
        inflight = huvm_atomic64_read(&core->lend_inflight[holder]);
        reason = huvm_admit_lend_inflight(core, state, owner, holder, bytes, now_ns, inflight);
        if (reason != HUVM_REASON_PEER)
            return reason;
        /* admitted with exactly this many bytes in flight: reserve, or look again if another mover came */
        if (huvm_atomic64_cas(&core->lend_inflight[holder], inflight, inflight + bytes))
            return HUVM_REASON_PEER;
    }
}

void huvm_lend_unreserve(huvm_core_t *core, uint32_t holder, uint64_t bytes)
{
    uint64_t cur;

    if (!core || holder >= HUVM_MAX_GPUS)
        return;
    do {
        cur = huvm_atomic64_read(&core->lend_inflight[holder]);
        HUVM_ASSERT(cur >= bytes);
    } while (!huvm_atomic64_cas(&core->lend_inflight[holder], cur, cur >= bytes ? cur - bytes : 0));
}
