/*
 * huvm: the decisions. SPDX-License-Identifier: MIT
 *
 * Pure functions of (policy, node facts, counters, caller's state): no allocation, no locks, no floating
 * point, no writes to the core. Ties are broken by the lowest GPU index. docs/policy.md describes each.
 *
 * The helpers of pick_peer (eligibility, admission, score) and pick_peer itself are HUVM_ALWAYS_INLINE: they
 * run for every candidate of every eviction and prefetch decision, and as calls they cost more than their
 * work (arguments, spills; the simulator's oversubscribed bench: -4.4 % instructions).
 */
#include "huvm_internal.h"

/* What a candidate peer would get, and why not. */
typedef struct {
    uint32_t peer;          /* chosen GPU or HUVM_DEST_HOST */
    uint32_t reason;        /* HUVM_REASON_PEER or why none */
    uint32_t chunks;        /* prefetch: chunks for the chosen peer */
} huvm_pick_t;

static uint64_t clamp_free(const huvm_core_t *core, const huvm_gpu_state_t *state, uint32_t gpu)
{
    uint64_t free_bytes = state[gpu].free_bytes;
    uint64_t mem = core->gpus[gpu].memory_bytes;

    return free_bytes < mem ? free_bytes : mem;
}

static int within_ms(uint64_t now_ns, uint64_t then_ns, uint32_t ms)
{
    if (ms == 0 || then_ns == 0)
        return 0;
    if (now_ns < then_ns)
        return 1;                   /* clock skew between callers: treat as recent */
    return now_ns - then_ns < (uint64_t)ms * HUVM_NS_PER_MS;
}

/* Static eligibility of holder for owner's data: present, a lender, linked as the policy requires.
 * Returns the holder's policy entry, or NULL when not eligible. */
static HUVM_ALWAYS_INLINE const huvm_gpu_policy_t *peer_eligible(const huvm_core_t *core,
                                                                 uint32_t owner,
                                                                 uint32_t holder)
{
    const huvm_gpu_policy_t *e;
    uint32_t link_type;

    if (holder >= core->gpu_count || holder == owner || !(core->gpus[holder].flags & HUVM_GPU_FLAG_PRESENT))
        return NULL;
    link_type = core->links[owner][holder].link_type;
    if (link_type == HUVM_LINK_NONE || (core->policy.nvlink_only && !huvm_link_is_nvlink(link_type)))
        return NULL;
    e = huvm_policy_gpu(core, holder);
    if (!e || !huvm_role_lends(e->role))
        return NULL;
    return e;
}

/* The lender's slowdown bound T (lend_slowdown_max_pct) weighs two costs of lending, each held within T: guests'
 * copies taking its HBM time, and the stall of giving memory back when its own work returns to its peak. (Each,
 * not their sum: chosen on the tuning half of the scenario matrix, docs/policy.md "Admission".) */

/* The guest-traffic budget of holder in MB/s (0: none): lend_traffic_mbyte_per_s, clamped by what T allows when
 * T and the GPU's HBM bandwidth are known: a memory-bound lender slowed by T gives up the share T / (100 + T)
 * of its HBM time (huvm.budget.lend_traffic_for's formula; never below one chunk per window). T clamps a budget the
 * admin set; it makes none of its own: the core cannot tell a lender with work from an idle one, and a budget on
 * every lender throttled harvesting from idle ones (docs/policy.md "Admission"). */
static uint64_t traffic_budget_mbyte_per_s(const huvm_core_t *core, const huvm_gpu_policy_t *e, uint32_t holder)
{
    uint64_t set = e->lend_traffic_mbyte_per_s;
    uint64_t hbm = core->hbm_mbyte_per_s[holder];
    uint64_t t = e->lend_slowdown_max_pct;
    uint64_t bound;

    if (set == 0 || t == 0 || hbm == 0)
        return set;
    bound = hbm * t / (100 + t);    /* <= 2^24 x 100 */
    if (bound < HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S)
        bound = HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S;
    return set < bound ? set : bound;
}

/* Bytes of its recent peak a LEND_ABOVE_PEAK lender may lend anyway (0 without a bound T): those it can give
 * back, when its own work returns to the peak, within T of its own time between spikes, at its give-back rate
 * (MB/s: bytes per us; the host link's line rate when the caller knows no better). The interval observed
 * (own_spike_ns) holds the stall itself: a stall of T / (100 + T) of it is T of the lender's own time (as the
 * traffic budget's share above), where T of the observed interval would slow it by T (1 + T / 100). A lender that
 * spikes every few ms keeps its whole peak free; one that spikes every few seconds lends part of it; one whose
 * spikes stopped lends it all once the interval has grown long enough. */
static uint64_t peak_lendable_bytes(const huvm_core_t *core,
                                    const huvm_gpu_state_t *state,
                                    const huvm_gpu_policy_t *e,
                                    uint32_t holder)
{
    uint64_t rate =
        core->giveback_mbyte_per_s[holder] ? core->giveback_mbyte_per_s[holder] : core->gpus[holder].pcie_mbyte_per_s;
    uint64_t interval_us = state[holder].own_spike_ns / 1000;

    if (e->lend_slowdown_max_pct == 0)
        return 0;
    if (interval_us > HUVM_SPIKE_MAX_NS / 1000)
        interval_us = HUVM_SPIKE_MAX_NS / 1000;
    /* stall us (<= 2^30 x 100 / 100) x MB/s (<= 2^24): no overflow */
    return interval_us * e->lend_slowdown_max_pct / (100 + e->lend_slowdown_max_pct) *
           (rate < HUVM_MAX_MBYTE_PER_S ? rate : HUVM_MAX_MBYTE_PER_S);
}

/* Capacity and timing admission of a statically eligible holder; inflight: bytes reserved on it by moves in
 * flight (huvm_lend_reserve), counted as lent and not free. */
static HUVM_ALWAYS_INLINE uint32_t admit_inflight(const huvm_core_t *core,
                                                  const huvm_gpu_state_t *state,
                                                  const huvm_gpu_policy_t *e,
                                                  uint32_t holder,
                                                  uint64_t bytes,
                                                  uint64_t now_ns,
                                                  uint64_t inflight)
{
    uint64_t mem = core->gpus[holder].memory_bytes;
    uint64_t free_bytes = clamp_free(core, state, holder);
    uint64_t reserve = e->lend_reserve_bytes;
    uint64_t limit = e->lend_limit_bytes;
    uint64_t lent = huvm_atomic64_read(&core->counters[holder].lent_bytes);
    uint64_t used_after, budget_mbyte_per_s;

    if (e->flags & HUVM_GPU_POLICY_LEND_ABOVE_PEAK) {
        /* Keep room for the lender's own work to return to its recent peak: memory it used lately is not
         * lent, so its next spike finds it free instead of waiting for a give-back; under a bound T, less the
         * part it can give back within T (peak_lendable_bytes). */
        uint64_t used = mem - free_bytes;
        uint64_t own = used > lent ? used - lent : 0;
        uint64_t peak = state[holder].own_peak_bytes < mem ? state[holder].own_peak_bytes : mem;

        if (peak > own) {
            uint64_t room = peak - own;     /* both <= 2^50: no overflow */
            uint64_t lendable = peak_lendable_bytes(core, state, e, holder);

            reserve += room > lendable ? room - lendable : 0;
        }
    }
    free_bytes = free_bytes > inflight ? free_bytes - inflight : 0;
    lent = lent + inflight < lent ? HUVM_UNLIMITED : lent + inflight;

    /* free - bytes >= reserve, without overflow */
    if (bytes > free_bytes || free_bytes - bytes < reserve)
        return HUVM_REASON_PEER_FULL;
    if (lent > limit || bytes > limit - lent)
        return HUVM_REASON_PEER_FULL;
    /* usage after admission <= peer_usage_max_pct of memory (mem <= 2^50, so no overflow) */
    used_after = mem - free_bytes + bytes;
    if (used_after * 100 > (uint64_t)core->policy.peer_usage_max_pct * mem)
        return HUVM_REASON_PEER_FULL;
    budget_mbyte_per_s = traffic_budget_mbyte_per_s(core, e, holder);
    if (budget_mbyte_per_s != 0) {
        /* The guest-traffic budget: the window's copies, those in flight and this one within MB/s x window
         * (1 MB/s for 1 ms is 1000 bytes; <= 2^24 x 2^16 x 1000: no overflow). The caller's level and the
         * bytes in flight are each bounded by memory sizes, so their sum does not overflow either. */
        uint64_t budget = budget_mbyte_per_s * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000;
        uint64_t traffic = (state[holder].guest_traffic_bytes & ~HUVM_TRAFFIC_PACED) + inflight;

        if (traffic > budget || bytes > budget - traffic)
            return HUVM_REASON_LENDER_BUSY;
    }
    if (within_ms(now_ns, state[holder].last_evict_ns, core->policy.hysteresis_ms))
        return HUVM_REASON_HYSTERESIS;
    return HUVM_REASON_PEER;
}

static HUVM_ALWAYS_INLINE uint32_t admit_eligible(const huvm_core_t *core,
                                                  const huvm_gpu_state_t *state,
                                                  const huvm_gpu_policy_t *e,
                                                  uint32_t holder,
                                                  uint64_t bytes,
                                                  uint64_t now_ns)
{
    return admit_inflight(core, state, e, holder, bytes, now_ns, huvm_atomic64_read(&core->lend_inflight[holder]));
}

uint32_t huvm_admit_lend_inflight(const huvm_core_t *core,
                                  const huvm_gpu_state_t *state,
                                  uint32_t owner,
                                  uint32_t holder,
                                  uint64_t bytes,
                                  uint64_t now_ns,
                                  uint64_t inflight)
{
    const huvm_gpu_policy_t *e;

    if (!core || !state || owner >= core->gpu_count)
        return HUVM_REASON_NO_PEER;
    e = peer_eligible(core, owner, holder);
    if (!e)
        return HUVM_REASON_NO_PEER;
    return admit_inflight(core, state, e, holder, bytes, now_ns, inflight);
}

uint32_t huvm_admit_lend(const huvm_core_t *core,
                         const huvm_gpu_state_t *state,
                         uint32_t owner,
                         uint32_t holder,
                         uint64_t bytes,
                         uint64_t now_ns)
{
    const huvm_gpu_policy_t *e;

    if (!core || !state || owner >= core->gpu_count)
        return HUVM_REASON_NO_PEER;
    e = peer_eligible(core, owner, holder);
    if (!e)
        return HUVM_REASON_NO_PEER;
    return admit_eligible(core, state, e, holder, bytes, now_ns);
}

/* Larger is better; ties go to the lower index. */
static HUVM_ALWAYS_INLINE uint64_t peer_score(const huvm_core_t *core,
                                              const huvm_gpu_state_t *state,
                                              uint32_t owner,
                                              uint32_t holder)
{
    switch (core->policy.peer_select) {
    case HUVM_PEER_SELECT_FEWEST_LENT: return ~huvm_atomic64_read(&core->counters[holder].lent_bytes);
    case HUVM_PEER_SELECT_BW_WEIGHTED:
        /* free MiB (<= 2^30) x MB/s (<= 2^24): fits in 64 bits */
        return (clamp_free(core, state, holder) >> 20) * core->links[owner][holder].mbyte_per_s;
    case HUVM_PEER_SELECT_FASTEST_LINK: {
        /* link MB/s (<= 2^24) above the chunks it already holds for others, fewest first (< 2^30 chunks in
         * 1 PiB): the fastest admitted link, then the least loaded lender. A fault fetches its chunk back over
         * the link it went out on, one block after another, so each chunk behind a slower link costs its whole
         * transfer time; spreading over slower links buys nothing back. Among equal links (an NVSwitch node,
         * p3.8xlarge's two NV1 peers) the one lending least shares the traffic (and the lender's cost of it)
         * out, as the prototype's fewest-lent rule does; the most free memory favoured a peer that was itself
         * about to need it back (two harvesters lending to each other). */
        uint64_t lent = huvm_atomic64_read(&core->counters[holder].lent_bytes) / HUVM_CHUNK_SIZE;
        uint64_t paid = (state[holder].guest_traffic_bytes & HUVM_TRAFFIC_PACED) ? 0 : 1ull << 31;

        /* between the two, a lender that has paid for its last guests' copies (pacing) before one still paying */
        return ((uint64_t)core->links[owner][holder].mbyte_per_s << 32) | paid |
               (0x7fffffffull - (lent < 0x7fffffffull ? lent : 0x7fffffffull));
    }
    case HUVM_PEER_SELECT_ROUND_ROBIN:
        /* the first peer at or after rr_next[owner], wrapping */
        return HUVM_MAX_GPUS -
               ((holder + HUVM_MAX_GPUS - HUVM_READ_ONCE(core->rr_next[owner]) % HUVM_MAX_GPUS) % HUVM_MAX_GPUS);
    case HUVM_PEER_SELECT_MOST_FREE:
    default:                         return clamp_free(core, state, holder);
    }
}

/* Prefetch chunks a peer would take under MULTIPATH: proportional to the PCIe line rates. */
static uint32_t multipath_share(const huvm_core_t *core, uint32_t gpu, uint32_t peer, uint32_t n)
{
    uint64_t local_rate = core->gpus[gpu].pcie_mbyte_per_s;
    uint64_t peer_rate = core->gpus[peer].pcie_mbyte_per_s;

    if (local_rate + peer_rate == 0)
        return n / 2;
    return (uint32_t)((uint64_t)n * peer_rate / (local_rate + peer_rate));
}

/* Pick the best admissible peer for owner among candidates. chunks_each == 0: multipath share of n. */
static HUVM_ALWAYS_INLINE huvm_pick_t pick_peer(const huvm_core_t *core,
                                                const huvm_gpu_state_t *state,
                                                uint32_t owner,
                                                uint32_t candidates,
                                                uint64_t now_ns,
                                                uint64_t chunk_fetched_ns,
                                                uint32_t chunks_each,
                                                uint32_t n)
{
    huvm_pick_t pick = { HUVM_DEST_HOST, HUVM_REASON_NO_PEER, 0 };
    uint64_t best_score = 0;
    uint32_t eligible = 0, full = 0, busy = 0, best_paced = 0, p;

    for (p = 0; p < core->gpu_count; p++) {
        const huvm_gpu_policy_t *e;
        uint32_t chunks, reason, paced;
        uint64_t score;

        if (!(candidates & (1u << p)))
            continue;
        e = peer_eligible(core, owner, p);
        if (!e)
            continue;
        eligible++;
        chunks = chunks_each ? chunks_each : multipath_share(core, owner, p, n);
        if (chunks == 0) {
            full++; /* its PCIe share rounds to nothing */
            continue;
        }
        reason = admit_eligible(core, state, e, p, (uint64_t)chunks * HUVM_CHUNK_SIZE, now_ns);
        if (reason != HUVM_REASON_PEER) {
            full += reason == HUVM_REASON_PEER_FULL;
            busy += reason == HUVM_REASON_LENDER_BUSY;
            continue;
        }
        score = peer_score(core, state, owner, p);
        /* a lender still paying for its last guests' copies (pacing, huvm_traffic_level) only when no lender
         * that has paid admits the chunk; FASTEST_LINK weighs it after the link rate (peer_score) */
        paced = core->policy.peer_select != HUVM_PEER_SELECT_FASTEST_LINK &&
                (state[p].guest_traffic_bytes & HUVM_TRAFFIC_PACED) != 0;
        if (pick.peer == HUVM_DEST_HOST || paced < best_paced || (paced == best_paced && score > best_score)) {
            pick.peer = p;
            pick.chunks = chunks;
            best_score = score;
            best_paced = paced;
        }
    }
    if (eligible == 0)
        return pick;
    /* anti-ping-pong for the chunk itself: it came back from a peer too recently */
    if (within_ms(now_ns, chunk_fetched_ns, core->policy.hysteresis_ms)) {
        pick.peer = HUVM_DEST_HOST;
        pick.chunks = 0;
        pick.reason = HUVM_REASON_HYSTERESIS;
        return pick;
    }
    if (pick.peer != HUVM_DEST_HOST)
        pick.reason = HUVM_REASON_PEER;
    else
        /* the budget first: a lender with room that is over it is the operator's limit, not a full node */
        pick.reason = busy ? HUVM_REASON_LENDER_BUSY : full ? HUVM_REASON_PEER_FULL : HUVM_REASON_HYSTERESIS;
    return pick;
}

static uint32_t candidate_mask(const huvm_core_t *core, uint32_t gpu, uint32_t candidates)
{
    uint32_t all = core->gpu_count >= 32 ? ~0u : ((1u << core->gpu_count) - 1);

    return candidates & all & ~(1u << gpu);
}

huvm_decision_t huvm_decide_evict(const huvm_core_t *core,
                                  const huvm_gpu_state_t *state,
                                  const huvm_evict_request_t *req)
{
    huvm_decision_t d = { HUVM_DEST_HOST, HUVM_REASON_NO_PEER };
    huvm_pick_t pick;
    uint32_t owner;

    if (!core || !state || !req) {
        HUVM_ASSERT(0);
        return d;
    }
    owner = req->gpu;
    if (owner >= core->gpu_count)
        return d;
    if (!huvm_role_harvests(huvm_gpu_role(core, owner))) {
        d.reason = HUVM_REASON_TIER_OFF;
        return d;
    }
    if (req->flags & HUVM_EVICT_FLAG_PMA_CONTEXT) {
        d.reason = HUVM_REASON_PMA_CONTEXT;
        return d;
    }
    if (req->flags & HUVM_EVICT_FLAG_GUEST_CHUNK) {
        d.reason = HUVM_REASON_GUEST_CHUNK;
        return d;
    }
    pick = pick_peer(core,
                     state,
                     owner,
                     candidate_mask(core, owner, req->candidates),
                     req->now_ns,
                     req->chunk_fetched_ns,
                     1,
                     1);
    d.dst = pick.peer;
    d.reason = pick.reason;
    return d;
}

/* How many chunks in a row (at most max, at least 1) huvm_decide_evict's choice of peer stands for in a batch of
 * one owner's evictions at one now (pre-eviction), when each chunk that goes to the peer lowers its free bytes and
 * raises its lent bytes by one chunk and nothing else changes. Then the i-th chunk's admission (one chunk, after
 * i moves) is the admission of i + 1 chunks at the batch's state (admit_inflight: free - bytes, lent + bytes and
 * the usage after admission move together), which is monotone in the bytes: a binary search finds the last one.
 * The peer stays the pick while no other candidate is admissible: their state does not move in the batch, so
 * none becomes admissible and the scores never matter. Else (another admissible candidate could overtake it as
 * the peer's counts move), or when the peer's guest traffic is budgeted (its level is a window, not a count of
 * chunks), or its free bytes are clamped (an inconsistent caller): 1, a decision per chunk. */
static uint32_t evict_run_length(const huvm_core_t *core,
                                 const huvm_gpu_state_t *state,
                                 const huvm_evict_request_t *req,
                                 uint32_t peer,
                                 uint32_t max)
{
    const huvm_gpu_policy_t *e = peer_eligible(core, req->gpu, peer);
    uint32_t candidates = candidate_mask(core, req->gpu, req->candidates);
    uint64_t lo = 1, hi = max, room;
    uint32_t p;

    if (!e || max <= 1 || !(candidates & (1u << peer)) || traffic_budget_mbyte_per_s(core, e, peer) != 0 ||
        state[peer].free_bytes > core->gpus[peer].memory_bytes)
        return 1;
    for (p = 0; p < core->gpu_count; p++) {
        const huvm_gpu_policy_t *o;

        if (p == peer || !(candidates & (1u << p)))
            continue;
        o = peer_eligible(core, req->gpu, p);
        if (o && admit_eligible(core, state, o, p, HUVM_CHUNK_SIZE, req->now_ns) == HUVM_REASON_PEER)
            return 1;
    }
    room = state[peer].free_bytes / HUVM_CHUNK_SIZE; /* no admission past the free bytes */
    if (hi > room)
        hi = room;
    if (hi <= 1 || admit_eligible(core, state, e, peer, HUVM_CHUNK_SIZE, req->now_ns) != HUVM_REASON_PEER)
        return 1;
    /* admitted: lo chunks; invariant admit(lo) and lo <= hi */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;

        if (admit_eligible(core, state, e, peer, mid * HUVM_CHUNK_SIZE, req->now_ns) == HUVM_REASON_PEER)
            lo = mid;
        else
            hi = mid - 1;
    }
    return (uint32_t)lo;
}

/* A run's first chunk: the whole choice, and how many chunks in a row it stands for. Out of line: the run's
 * other chunks (huvm_decide_evict_run's own path) are most of the calls and small enough to inline. */
static HUVM_NOINLINE huvm_decision_t evict_run_start(const huvm_core_t *core,
                                                     const huvm_gpu_state_t *state,
                                                     const huvm_evict_request_t *req,
                                                     huvm_evict_run_t *run,
                                                     uint32_t max)
{
    huvm_decision_t d = huvm_decide_evict(core, state, req);

    if (d.reason == HUVM_REASON_PEER && d.dst < core->gpu_count) {
        run->peer = d.dst;
        run->left = evict_run_length(core, state, req, d.dst, max ? max : 1);
    }
    return d;
}

huvm_decision_t huvm_decide_evict_run(const huvm_core_t *core,
                                      const huvm_gpu_state_t *state,
                                      const huvm_evict_request_t *req,
                                      huvm_evict_run_t *run,
                                      uint32_t max)
{
    huvm_decision_t d;

    if (!run)
        return huvm_decide_evict(core, state, req);
    if (!run->left)
        return evict_run_start(core, state, req, run, max);
    /* the run's peer; pick_peer's anti-ping-pong for the chunk itself (an eligible peer exists) */
    if (within_ms(req->now_ns, req->chunk_fetched_ns, core->policy.hysteresis_ms)) {
        d.dst = HUVM_DEST_HOST;
        d.reason = HUVM_REASON_HYSTERESIS;
    }
    else {
        d.dst = run->peer;
        d.reason = HUVM_REASON_PEER;
    }
    return d;
}

void huvm_evict_run_moved(huvm_evict_run_t *run, uint32_t dst)
{
    if (run && run->left && dst == run->peer)
        run->left--;
}

/* Chunks to pre-evict so that gpu has min(preevict_chunks, 1/16 of its memory, cap) chunks free. */
uint32_t huvm_preevict_target(const huvm_core_t *core, uint32_t gpu)
{
    uint64_t target, mem_chunks;

    if (!core || gpu >= core->gpu_count || !huvm_gpu_present(core, gpu))
        return 0;
    /* Pre-eviction is a harvester's: a GPU with role none (or a lender only) keeps UVM's own eviction. */
    if (!huvm_role_harvests(huvm_gpu_role(core, gpu)))
        return 0;
    target = core->policy.preevict_chunks;
    /* Adaptive bound: never keep more than 1/16 of the GPU free for pre-eviction. */
    mem_chunks = core->gpus[gpu].memory_bytes / HUVM_CHUNK_SIZE;
    if (target > mem_chunks / 16)
        target = mem_chunks / 16;
    return (uint32_t)target;
}

static uint32_t preevict_count(const huvm_core_t *core, const huvm_gpu_state_t *state, uint32_t gpu, uint64_t cap)
{
    uint64_t target, free_chunks;

    if (!state)
        return 0;
    target = huvm_preevict_target(core, gpu);
    if (target > cap)
        target = cap;
    if (target == 0)
        return 0;
    free_chunks = clamp_free(core, state, gpu) / HUVM_CHUNK_SIZE;
    if (free_chunks >= target)
        return 0;
    target -= free_chunks;
    return (uint32_t)(target < core->policy.preevict_batch ? target : core->policy.preevict_batch);
}

uint32_t huvm_decide_preevict(const huvm_core_t *core, const huvm_gpu_state_t *state, uint32_t gpu)
{
    return preevict_count(core, state, gpu, ~0ULL);
}

void huvm_prefetch_feedback(uint64_t *used, uint64_t *unused, uint32_t was_used)
{
    if (!used || !unused)
        return;
    if (was_used)
        (*used)++;
    else
        (*unused)++;
    if (*used + *unused >= HUVM_PREFETCH_FEEDBACK_WINDOW) {
        *used /= 2;
        *unused /= 2;
    }
}

void huvm_peak_update(huvm_peak_t *peak, uint64_t own_bytes, uint64_t now_ns)
{
    uint64_t now = now_ns ? now_ns : 1;

    if (!peak)
        return;
    if (peak->at_ns == 0) {
        /* the first note: tracking starts here, as if a spike began */
        peak->high_bytes = peak->low_bytes = own_bytes;
        peak->spike_at_ns = now;
        peak->falling = 0;
    }
    else if (!peak->falling) {
        if (own_bytes > peak->high_bytes)
            peak->high_bytes = own_bytes;
        else if (peak->high_bytes - own_bytes >= HUVM_SPIKE_MIN_BYTES) {
            peak->falling = 1;
            peak->low_bytes = own_bytes;
        }
    }
    else if (own_bytes < peak->low_bytes) {
        peak->low_bytes = own_bytes;
    }
    else if (own_bytes - peak->low_bytes >= HUVM_SPIKE_MIN_BYTES) {
        /* a spike begins: fold the interval since the last one into the EWMA */
        uint64_t interval = now > peak->spike_at_ns ? now - peak->spike_at_ns : 0;

        if (interval > HUVM_SPIKE_MAX_NS)
            interval = HUVM_SPIKE_MAX_NS;
        peak->spike_ewma_ns = peak->spike_ewma_ns ? (3 * peak->spike_ewma_ns + interval) / 4 : interval;
        peak->spike_at_ns = now;
        peak->high_bytes = own_bytes;
        peak->falling = 0;
    }
    if (own_bytes >= peak->bytes || peak->at_ns == 0 || !within_ms(now_ns, peak->at_ns, HUVM_OWN_PEAK_WINDOW_MS)) {
        peak->bytes = own_bytes;
        peak->at_ns = now;
    }
}

uint64_t huvm_peak_spike_ns(const huvm_peak_t *peak, uint64_t now_ns)
{
    uint64_t since, ns;

    if (!peak || peak->at_ns == 0)
        return 0;
    since = now_ns > peak->spike_at_ns ? now_ns - peak->spike_at_ns : 0;
    ns = since > peak->spike_ewma_ns ? since : peak->spike_ewma_ns;
    return ns < HUVM_SPIKE_MAX_NS ? ns : HUVM_SPIKE_MAX_NS;
}

uint64_t huvm_guest_traffic_total(const huvm_core_t *core, uint32_t holder)
{
    uint64_t chunks = 0;
    uint32_t o;

    if (!core || holder >= core->gpu_count)
        return 0;
    for (o = 0; o < core->gpu_count; o++) {
        const huvm_pair_counters_t *pc = &core->pairs[o][holder];

        if (o == holder)
            continue;
        chunks += huvm_atomic64_read(&pc->evict_chunks) + huvm_atomic64_read(&pc->prefetch_chunks) +
                  huvm_atomic64_read(&pc->fetch_chunks) + huvm_atomic64_read(&pc->giveback_chunks);
    }
    return chunks * HUVM_CHUNK_SIZE;
}

uint64_t huvm_traffic_update(huvm_traffic_t *traffic, uint64_t total_bytes, uint64_t now_ns)
{
    const uint64_t window = (uint64_t)HUVM_LEND_TRAFFIC_WINDOW_MS * HUVM_NS_PER_MS;
    uint64_t elapsed, cur;

    if (!traffic)
        return 0;
    if (traffic->start_ns == 0 || total_bytes < traffic->start_total || now_ns < traffic->start_ns) {
        /* first use, a counter reset, or a clock behind the window: start over from here */
        traffic->start_ns = now_ns ? now_ns : 1;
        traffic->start_total = total_bytes;
        traffic->prev_bytes = 0;
        return 0;
    }
    elapsed = now_ns - traffic->start_ns;
    if (elapsed >= window) {
        /* the window ended: its traffic becomes the previous window's, unless a whole window passed since */
        traffic->prev_bytes = elapsed < 2 * window ? total_bytes - traffic->start_total : 0;
        traffic->start_ns = now_ns - elapsed % window;
        traffic->start_total = total_bytes;
        elapsed %= window;
    }
    cur = total_bytes - traffic->start_total;
    /* the previous window's share still inside the sliding window, in 1/1024 steps (no 128-bit product) */
    return cur + (traffic->prev_bytes >> 10) * ((window - elapsed) * 1024 / window);
}

uint64_t huvm_traffic_paid_ns(huvm_traffic_t *traffic, uint64_t total_bytes, uint64_t rate_mbyte_per_s, uint64_t now_ns)
{
    uint64_t start;

    if (!traffic || rate_mbyte_per_s == 0)
        return now_ns;
    if (traffic->paid_ns == 0 || total_bytes < traffic->paid_total) {
        /* first use or a counter reset: nothing is owed */
        traffic->paid_ns = now_ns ? now_ns : 1;
        traffic->paid_total = total_bytes;
        return traffic->paid_ns;
    }
    /* the copies since the last call start being paid for when those before them are, or now: 1 MB/s pays one
     * byte per us, so bytes x 1000 / MB/s is ns (bytes <= 2^50 x 2^10: no overflow) */
    start = traffic->paid_ns > now_ns ? traffic->paid_ns : now_ns;
    traffic->paid_ns = start + (total_bytes - traffic->paid_total) * 1000 / rate_mbyte_per_s;
    traffic->paid_total = total_bytes;
    /* what is owed beyond a window is forgotten, as the window forgets (fetch-backs are never refused: without
     * this, a run of them would shut the lender to new guests for as long as they lasted) */
    if (traffic->paid_ns > now_ns + (uint64_t)HUVM_LEND_TRAFFIC_WINDOW_MS * HUVM_NS_PER_MS)
        traffic->paid_ns = now_ns + (uint64_t)HUVM_LEND_TRAFFIC_WINDOW_MS * HUVM_NS_PER_MS;
    return traffic->paid_ns;
}

uint64_t huvm_traffic_level(const huvm_core_t *core, uint32_t gpu, huvm_traffic_t *traffic, uint64_t now_ns)
{
    const huvm_gpu_policy_t *e = core ? huvm_policy_gpu(core, gpu) : NULL;
    uint64_t rate, total, level;

    if (!traffic)
        return 0;
    rate = e ? traffic_budget_mbyte_per_s(core, e, gpu) : 0;
    if (rate == 0) {
        huvm_memset(traffic, 0, sizeof(*traffic));
        return 0;
    }
    total = huvm_guest_traffic_total(core, gpu);
    level = huvm_traffic_update(traffic, total, now_ns);
    /* Pacing: a window's budget spent in one burst lands inside a few of the lender's ops (a serving lender's
     * tokens: its p99). While the copies it took (fetch-backs and give-backs included) are not yet paid for at
     * the budget's rate, the lender is marked paced: the eviction's choice sends a new chunk to a lender that has
     * paid when one admits it (pick_peer), and to this one only when none does, as without pacing. */
    if (huvm_traffic_paid_ns(traffic, total, rate, now_ns) > now_ns)
        return level | HUVM_TRAFFIC_PACED;
    return level;
}

uint32_t huvm_decide_fetch(const huvm_core_t *core, uint32_t owner, uint32_t holder)
{
    if (!core || owner >= core->gpu_count || holder >= core->gpu_count || owner == holder)
        return HUVM_FETCH_MIGRATE;
    if (core->policy.fetch_mode == HUVM_FETCH_REMOTE_MAP && huvm_link_is_nvlink(core->links[owner][holder].link_type) &&
        huvm_gpu_present(core, holder))
        return HUVM_FETCH_REMOTE_MAP;
    return HUVM_FETCH_MIGRATE;
}

uint32_t huvm_prefetch_active(const huvm_core_t *core, uint32_t gpu)
{
    return core && gpu < core->gpu_count && core->policy.prefetch_mode != HUVM_PREFETCH_OFF &&
           core->policy.prefetch_chunks != 0;
}

/* PREFETCH_PROPORTIONAL: the window n times the used share of the recent prefetched chunks, rounded up and at
 * least 1; the full window while there is no history. Integer only: both counts are scaled below 2^32 first, so
 * that n * used cannot overflow whatever the caller's counts are. */
static uint32_t prefetch_scaled(uint32_t n, uint64_t used, uint64_t unused)
{
    uint64_t all = used + unused, scaled;

    if (all < used)
        all = ~0ULL; /* the sum overflowed: the share is used / 2^64, scaled as such below */
    if (n == 0 || all == 0)
        return n;
    while (all > 0xffffffffULL) {
        used >>= 1;
        all >>= 1;
    }
    scaled = ((uint64_t)n * used + all - 1) / all;
    return scaled == 0 ? 1 : (uint32_t)scaled;
}

void huvm_decide_prefetch(const huvm_core_t *core,
                          const huvm_gpu_state_t *state,
                          uint32_t gpu,
                          uint32_t candidates,
                          uint64_t now_ns,
                          huvm_prefetch_plan_t *plan)
{
    const huvm_gpu_policy_t *e;
    huvm_pick_t pick;
    uint32_t n, mode;

    if (!plan)
        return;
    plan->local_chunks = 0;
    plan->peer_chunks = 0;
    plan->peer = HUVM_DEST_HOST;
    plan->stride = 1;
    plan->peer_local_chunks = 0;
    if (!core || !state || gpu >= core->gpu_count)
        return;
    plan->stride = core->policy.prefetch_stride ? core->policy.prefetch_stride : 1;
    if (!huvm_prefetch_active(core, gpu))
        return;
    mode = core->policy.prefetch_mode;
    n = core->policy.prefetch_chunks;
    e = huvm_policy_gpu(core, gpu);
    if (e && (e->flags & HUVM_GPU_POLICY_PREFETCH_FEEDBACK) && state[gpu].prefetch_unused > state[gpu].prefetch_used)
        n = 1; /* most recent prefetches were wasted: probe with one chunk until they pay again */
    else if (e && (e->flags & HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL))
        n = prefetch_scaled(n, state[gpu].prefetch_used, state[gpu].prefetch_unused);
    /* As the prototype's uvm_prefetch_flags: LOCAL (1) brings the window's chunks to the faulting GPU from
     * host and from peers; TWO_STAGE (3) sends the host-resident ones to a peer (as PEER) and brings the
     * peer-resident ones to the faulting GPU. */
    if (mode == HUVM_PREFETCH_LOCAL || mode == HUVM_PREFETCH_TWO_STAGE)
        plan->peer_local_chunks = n;
    if (mode == HUVM_PREFETCH_LOCAL) {
        plan->local_chunks = n;
        return;
    }
    /* PEER, TWO_STAGE and MULTIPATH put data on a peer: the GPU must be a harvester under real memory pressure
     * (an allocation on it had to evict, or would have without the chunks pre-eviction freed, within
     * HUVM_PREEVICT_PRESSURE_MS: its free memory fell short of what its work needs), and the peer must admit
     * it. A GPU with room keeps its prefetch local (MULTIPATH) or brings only peer-held chunks back
     * (TWO_STAGE); its data has no reason to take a lender's memory. */
    pick.peer = HUVM_DEST_HOST;
    pick.chunks = 0;
    if (huvm_role_harvests(huvm_gpu_role(core, gpu)) &&
        within_ms(now_ns, state[gpu].last_pressure_ns, HUVM_PREEVICT_PRESSURE_MS)) {
        pick = pick_peer(core,
                         state,
                         gpu,
                         candidate_mask(core, gpu, candidates),
                         now_ns,
                         0,
                         mode == HUVM_PREFETCH_MULTIPATH ? 0 : n,
                         n);
    }
    if (pick.peer != HUVM_DEST_HOST) {
        plan->peer = pick.peer;
        plan->peer_chunks = pick.chunks;
    }
    /* PEER and TWO_STAGE never prefetch host -> local; MULTIPATH keeps the local share (all of it without a
     * peer). */
    if (mode == HUVM_PREFETCH_MULTIPATH)
        plan->local_chunks = n - plan->peer_chunks;
}

/* Plan the eviction of need chunks from lender: harvested (guest) chunks first, all to host, owners with the
 * most held data first (ties: lowest index), each contributing up to what it holds; then the lender's own. */
static void plan_guests_first(const huvm_core_t *core, uint32_t lender, uint64_t need, huvm_giveback_plan_t *plan)
{
    uint64_t held[HUVM_MAX_GPUS];
    uint64_t take, total;
    uint32_t taken = 0, o, best;

    for (o = 0; o < HUVM_MAX_GPUS; o++)
        held[o] = (o < core->gpu_count && o != lender)
                      ? huvm_chunks_of(huvm_atomic64_read(&core->pairs[o][lender].held_bytes))
                      : 0;

    total = 0;
    while (need > 0 && taken < HUVM_MAX_GPUS) {
        best = HUVM_MAX_GPUS;
        for (o = 0; o < HUVM_MAX_GPUS; o++) {
            if (held[o] > 0 && (best == HUVM_MAX_GPUS || held[o] > held[best]))
                best = o;
        }
        if (best == HUVM_MAX_GPUS)
            break;
        take = held[best] < need ? held[best] : need;
        if (take > 0xffffffffULL)
            take = 0xffffffffULL;
        plan->guest_chunks[best] = (uint32_t)take;
        total += take;
        need -= take;
        held[best] = 0;
        taken++;
    }
    plan->total_guest_chunks = total > 0xffffffffULL ? 0xffffffffu : (uint32_t)total;
    /* Then the lender's own data (its normal eviction). */
    plan->own_chunks = need > 0xffffffffULL ? 0xffffffffu : (uint32_t)need;
}

void huvm_decide_giveback(const huvm_core_t *core,
                          const huvm_gpu_state_t *state,
                          uint32_t lender,
                          uint64_t need_bytes,
                          huvm_giveback_plan_t *plan)
{
    (void)state;
    if (!plan)
        return;
    huvm_memset(plan, 0, sizeof(*plan));
    if (!core || lender >= core->gpu_count)
        return;
    plan_guests_first(core, lender, huvm_chunks_of(need_bytes), plan);
}

void huvm_decide_preevict_plan(const huvm_core_t *core,
                               const huvm_gpu_state_t *state,
                               uint32_t gpu,
                               uint64_t now_ns,
                               huvm_giveback_plan_t *plan)
{
    const huvm_gpu_policy_t *e;
    uint64_t cap = ~0ULL;
    uint32_t n;

    if (!plan)
        return;
    huvm_memset(plan, 0, sizeof(*plan));
    if (!core || !state || gpu >= core->gpu_count)
        return;
    e = huvm_policy_gpu(core, gpu);
    if (e && (e->flags & HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE)) {
        /* Real pressure only: an allocation on this GPU had to evict (or would have, without the reserve)
         * within the window. Free memory below the reserve alone is not pressure: a job that nearly fits
         * would evict its own working set ahead of a need that never comes, and fault it back. And a reserve
         * much larger than what a fault batch takes only shrinks the working set's memory. */
        if (!within_ms(now_ns, state[gpu].last_pressure_ns, HUVM_PREEVICT_PRESSURE_MS))
            return;
        cap = state[gpu].burst_chunks < (1ULL << 32) ? state[gpu].burst_chunks * HUVM_PREEVICT_BURST_MULT : ~0ULL;
    }
    n = preevict_count(core, state, gpu, cap);
    if (n == 0)
        return;
    plan_guests_first(core, gpu, n, plan);
}

uint64_t huvm_giveback_need(const huvm_core_t *core, const huvm_gpu_state_t *state, uint32_t lender)
{
    const huvm_gpu_policy_t *e;
    uint64_t free_bytes;

    if (!core || !state || lender >= core->gpu_count)
        return 0;
    e = huvm_policy_gpu(core, lender);
    if (!e || huvm_atomic64_read(&core->counters[lender].lent_bytes) == 0)
        return 0;
    free_bytes = clamp_free(core, state, lender);
    return free_bytes < e->lend_reserve_bytes ? e->lend_reserve_bytes - free_bytes : 0;
}
