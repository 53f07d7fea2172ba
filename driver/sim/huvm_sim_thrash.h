/*
 * huvm: UVM's thrashing detection and mitigation, as the simulated node models it. SPDX-License-Identifier: MIT
 *
 * An emulation of the semantics of upstream's uvm_perf_thrashing.c (open-gpu-kernel-modules, tags 535.261.03
 * and 580.142; the prototype's 460.x-based tree, casys-kaist/HUVM driver/nvidia-uvm/uvm_perf_thrashing.c, has
 * the same rules and defaults and is unchanged by the prototype), not a copy of it:
 *
 *  - Detection. Only migrations caused by a replayable fault, an access counter or the prefetcher are events;
 *    evictions are not (thrashing_event_cb returns on UVM_MAKE_RESIDENT_CAUSE_EVICTION). A block starts
 *    per-page tracking only when an event's destination processor differs from the block's previous event's
 *    and follows it within the lapse. Then each event within the lapse of the page's previous one counts; at
 *    `threshold` counts the page is thrashing; an event after a longer gap resets a thrashing, unpinned page.
 *  - Hint, asked on each fault (uvm_perf_thrashing_get_hint): if the block's last thrashing event is older than
 *    the epoch, nothing is pinned and the block was reset fewer than max_resets times, the block's tracking is
 *    dropped. A thrashing page's faulting processor is THROTTLEd (its fault is not serviced for the nap; the
 *    processor that is not throttled alternates between throttling periods) until the page was throttled
 *    `pin_threshold` times; then the page is PINned where the non-throttled requester is, and the other
 *    thrashing processors map it remotely. A pinned page is unpinned after the pin time (the next remote
 *    access faults and migrates it again).
 *
 * Granularity: UVM tracks 4 KiB pages; the model tracks one state per 2 MiB block (every 64 KiB group of a
 * block moves by the same fault/prefetch events in the simulator, so per-group counters would be equal).
 * Not modelled (the simulator has no such events): revocation thrashing (system-wide atomics), preferred
 * location / accessed-by policies, the NVLink "fast access" pin path, read duplication.
 *
 * Integer nanoseconds throughout (no floats: the model is portable C like driver/core).
 */
#ifndef __HUVM_SIM_THRASH_H__
#define __HUVM_SIM_THRASH_H__

#include <stdint.h>

/* Processor ids: GPUs 0..30, the CPU (host memory) 31. */
#define HUVM_SIM_THR_CPU  31u
#define HUVM_SIM_THR_NONE 0xffu

/* huvm_sim_thr_gate_t.slot of a block not tracked (its hint is NONE: callers may skip asking). */
#define HUVM_SIM_THR_UNTRACKED 0xffffffffu

/* Hint types (UVM_PERF_THRASHING_HINT_TYPE_*). */
#define HUVM_SIM_THR_HINT_NONE     0
#define HUVM_SIM_THR_HINT_THROTTLE 1
#define HUVM_SIM_THR_HINT_PIN      2

/* Module-parameter defaults of uvm_perf_thrashing.c (535.261.03, 580.142 and the prototype's 460.x tree):
 * uvm_perf_thrashing_threshold 3, _pin_threshold 10, _lapse_usec 500, _nap 1 (x lapse), _epoch 2000 (x lapse),
 * _pin 300 (x lapse), _max_resets 4. */
#define HUVM_SIM_THR_THRESHOLD_DEFAULT     3u
#define HUVM_SIM_THR_PIN_THRESHOLD_DEFAULT 10u
#define HUVM_SIM_THR_LAPSE_NS_DEFAULT      500000ull
#define HUVM_SIM_THR_NAP_DEFAULT           1u
#define HUVM_SIM_THR_EPOCH_DEFAULT         2000u
#define HUVM_SIM_THR_PIN_DEFAULT           300u
#define HUVM_SIM_THR_MAX_RESETS_DEFAULT    4u

typedef struct {
    uint32_t threshold, pin_threshold, max_resets;
    uint64_t lapse_ns, nap_ns, epoch_ns, pin_ns; /* pin_ns 0: pinned for good (as upstream) */
} huvm_sim_thr_params_t;

/* One block's tracking, created lazily (upstream's block_thrashing->pages). */
typedef struct {
    uint64_t page_ts; /* the page's last event */
    uint64_t last_thrashing_ts; /* the block's last event while thrashing (0: none) */
    uint64_t throttle_end; /* current throttling period's end (0: none) */
    uint64_t pin_deadline; /* pinned: unpinned at this time (0: for good) */
    uint32_t processors; /* the processors taking part (bit per id) */
    uint32_t throttled; /* the processors throttled in this period */
    uint16_t events; /* thrashing events (saturating) */
    uint16_t throttling_count; /* throttling periods while not pinned (saturating) */
    uint8_t dnt; /* the processor not to throttle in this period (HUVM_SIM_THR_NONE) */
    uint8_t pinned; /* pinned at pinned_res */
    uint8_t pinned_res;
    uint8_t pad;
} huvm_sim_thr_page_t;

/* Per block: the gate that decides whether tracking starts, and the tracking slot. */
typedef struct {
    uint64_t last_ts; /* the block's last event (0: none) */
    uint32_t slot; /* index into the pool, or 0xffffffff: not tracked */
    uint8_t last_proc; /* the block's last event's destination */
    uint8_t resets; /* times the block was reset after an epoch without thrashing */
    uint16_t pad;
} huvm_sim_thr_gate_t;

typedef struct {
    huvm_sim_thr_params_t p;
    huvm_sim_thr_gate_t *gate; /* [n_blocks] */
    huvm_sim_thr_page_t *pool;
    uint32_t n_blocks, pool_n, pool_cap, free_head; /* free slots chained through page_ts */
    uint64_t detected, throttled, pinned; /* counters: pages found thrashing, throttle and pin hints */
} huvm_sim_thr_t;

typedef struct {
    int type; /* HUVM_SIM_THR_HINT_* */
    uint8_t residency; /* PIN: where the page stays */
    uint64_t end_ns; /* THROTTLE: the fault may be serviced from then */
} huvm_sim_thr_hint_t;

void huvm_sim_thr_default_params(huvm_sim_thr_params_t *p);
void huvm_sim_thr_init(huvm_sim_thr_t *thr, const huvm_sim_thr_params_t *p);
/* Track blocks 0..n_blocks-1 (new ones untracked): 0, or -1 out of memory. */
int huvm_sim_thr_grow(huvm_sim_thr_t *thr, uint32_t n_blocks);
void huvm_sim_thr_destroy(huvm_sim_thr_t *thr);
/* A migration of block `blk` to processor `dst` at time t caused by a fault, an access counter or the
 * prefetcher (never call it for an eviction). 0, or -1 out of memory (tracking then stays off, as upstream). */
int huvm_sim_thr_migrated_tracked(huvm_sim_thr_t *thr, uint32_t blk, uint8_t dst, uint64_t t);

static inline int huvm_sim_thr_migrated(huvm_sim_thr_t *thr, uint32_t blk, uint8_t dst, uint64_t t)
{
    huvm_sim_thr_gate_t *g = &thr->gate[blk];

    /* inline, the common case: an untracked block whose event starts no tracking (its first, one towards its
     * last destination, or one past the lapse) only becomes the block's last event */
    if (g->slot == HUVM_SIM_THR_UNTRACKED &&
        (g->last_ts == 0 || g->last_proc == dst || t - g->last_ts > thr->p.lapse_ns)) {
        g->last_ts = t;
        g->last_proc = dst;
        return 0;
    }
    return huvm_sim_thr_migrated_tracked(thr, blk, dst, t);
}
/* The hint for a fault of `requester` on block `blk` at time t (upstream's uvm_perf_thrashing_get_hint). */
huvm_sim_thr_hint_t huvm_sim_thr_hint(huvm_sim_thr_t *thr, uint32_t blk, uint8_t requester, uint64_t t);
/* Whether block `blk` is pinned at time t (an expired pin is dropped here); *res: where. */
int huvm_sim_thr_is_pinned(huvm_sim_thr_t *thr, uint32_t blk, uint64_t t, uint8_t *res);
/* The block's thrashing events so far (0 when not tracked); tests and reports. */
uint32_t huvm_sim_thr_events(const huvm_sim_thr_t *thr, uint32_t blk);

#endif /* __HUVM_SIM_THRASH_H__ */
