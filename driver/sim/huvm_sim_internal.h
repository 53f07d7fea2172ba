/*
 * huvm: simulated node, internal state shared by the driver/sim sources. SPDX-License-Identifier: MIT
 */
#ifndef __HUVM_SIM_INTERNAL_H__
#define __HUVM_SIM_INTERNAL_H__

#include "huvm_sim.h"
#include "huvm_core.h"
#include "huvm_sim_thrash.h"

#define SIM_NIL              0xffffffffu
#define SIM_CHUNK            ((uint64_t)HUVM_CHUNK_SIZE)
#define SIM_UNLIMITED_CHUNKS (1ull << 36)        /* "ideal" node: 128 PiB, never reached */
#define SIM_MAX_OP_NS        HUVM_SIM_MAX_OP_NS  /* one op at most ~3 days: sums stay in 64 bits */
#define SIM_MAX_STEPS        HUVM_SIM_MAX_STEPS

/* The paging model's per-chunk steps (a refresh of the decisions' view, an eviction, a fault's room, its
 * prefetch) are inlined into their few callers whatever the compiler's heuristics say: as calls, their
 * arguments and spills cost more than much of their work (the oversubscribed bench: -5.5 % instructions). */
#define SIM_ALWAYS_INLINE inline __attribute__((always_inline))

/* sim_chunk_t.flags */
#define SIM_CF_LIVE       0x1                 /* allocated (between its alloc and free op) */
#define SIM_CF_REMOTE     0x2                 /* remote-mapped by its owner while on a peer */
#define SIM_CF_PINNED     0x4                 /* cudaMalloc memory: resident, never evicted */
#define SIM_CF_PREFETCHED 0x8                 /* prefetched, not touched since (prefetch feedback) */

/* Tenant states. */
#define SIM_T_PENDING 0                   /* not started: static allocation to do */
#define SIM_T_RUNNING 1
#define SIM_T_DONE    2

typedef struct {
    uint32_t head, tail, count;
} sim_list_t;

/* One 2 MiB chunk of some tenant's address space (32 bytes, two to a cache line in an array aligned to one: a
 * touch reads one line; lists are intrusive). Its last fetch-back from a peer, read only by an eviction's
 * decision, is beside it (huvm_sim.fetched). */
typedef struct {
    uint32_t prev, next; /* links in the list of the GPU holding it (SIM_NIL) */
    uint64_t ready_ns; /* its data is usable where it is from this time (async copy) */
    uint8_t loc; /* HUVM_SIM_LOC_* */
    uint8_t holder; /* GPU holding it when loc == GPU */
    uint8_t owner; /* GPU of its tenant */
    uint8_t flags; /* SIM_CF_* */
    uint32_t tenant;
    uint32_t xfer; /* sequence number of its latest copy (in-flight tokens name it) */
    uint32_t pages; /* loc == GPU: the 64 KiB groups resident on the holder (the rest of the
                                       block is in host memory); 0 otherwise */
} sim_chunk_t;

_Static_assert(sizeof(sim_chunk_t) == 32, "a chunk is half a cache line");

/* Traffic classes sharing a link: demand transfers (faults, synchronous evictions, give-back, remote
 * accesses) and background ones (prefetch, pre-eviction). */
#define SIM_FG 0
#define SIM_BG 1

/* A background copy still queued on a link direction: later demand traffic that delays the background class
 * delays it (its chunk's ready_ns and, for a copy out of a GPU, when that GPU gets the memory back). */
typedef struct {
    uint64_t fin; /* when it ends on this link, latency included */
    uint32_t chunk; /* the chunk copied (SIM_NIL: none) */
    uint32_t xfer; /* the chunk's xfer at issue (a later copy of it supersedes this one) */
    uint32_t release; /* GPU + 1 whose memory the copy frees when it ends; 0: none */
    uint32_t pad;
} sim_tok_t;

/* One direction of a link (PCIe H2D or D2H of a GPU, an NVLink pair direction, an NVSwitch port, a PCIe
 * switch's uplink). */
typedef struct {
    uint64_t mbyte_per_s;
    uint64_t latency_ns;
    uint64_t busy_until[2]; /* per class: when its queued work ends */
    uint64_t busy_ns;
    uint64_t bytes;
    sim_tok_t *q; /* background copies in flight, in order (ring) */
    uint32_t qhead, qlen, qcap, pad;
    uint64_t chunk_ns; /* a 2 MiB copy's time on it, as res_xfer rounds it (0: rate not set) */
} sim_res_t;

/* One of the prototype's prefetch kthreads on a GPU (huvm-atc22; huvm_sim.c "The prototype's prefetch"): it
 * works through its queue one item at a time; an item queued behind a running one is pending, and the next
 * fault batch replaces it (the prototype kills a pending item, never a running one). */
typedef struct {
    uint64_t busy_ns; /* the running item ends then */
    uint64_t start_ns; /* pend: the pending item starts then (= busy_ns when it was queued) */
    uint64_t base; /* pend: the chunk its window starts from (a global chunk index) */
    uint32_t pend; /* an item is pending */
    uint32_t tenant; /* pend: whose faults queued it */
    int32_t dir; /* pend: +1 forward, -1 backward (the prototype's fault direction) */
    uint32_t pad;
} sim_pfq_t;

#define SIM_PFQ_FETCH 0 /* the prototype's fetch queue: the window's host-resident blocks */
#define SIM_PFQ_BACK  1 /* its parallel prefetch queue: the window's peer-resident blocks */

typedef struct {
    /* the fields every refresh and eviction reads first, together (a cache line or two) */
    uint64_t capacity_chunks; /* usable by UVM: (memory - reserved) / 2 MiB */
    uint64_t pinned_chunks; /* cudaMalloc'd by its tenants (not evictable) */
    sim_list_t own; /* its tenants' managed chunks resident here, LRU by residency change */
    uint32_t candidates; /* peers with a direct path (bit per GPU) */
    uint64_t guest_chunks;
    uint64_t inflight; /* chunks of memory held by copies out of it still in flight */
    uint64_t inflight_lb; /* no copy out of it ends before this (a lower bound on the first end of
                                       its queues: sim_gpu_retire has nothing to do before it) */
    uint64_t last_evict_ns;
    uint64_t last_pressure_ns; /* an allocation here last had to evict (huvm_gpu_state_t) */
    uint64_t burst_chunks; /* chunks the last fault batch on this GPU allocated */
    huvm_peak_t own_peak; /* recent peak of its own memory use (huvm_gpu_state_t.own_peak_bytes) */
    uint64_t noted_ns,
        noted_own; /* refresh_gpus's last note of own_peak, at noted_ns - 1 (0: none since note_own): noting
                                       the same own use at the same time again changes nothing */
    uint64_t pf_used, pf_unused; /* its recent prefetches: touched, or left unused (huvm_prefetch_feedback) */
    uint64_t peer_chunks; /* its data held by peers */
    uint64_t host_chunks; /* its data in host memory */
    uint64_t fault_free_ns; /* the GPU's fault servicing is busy until then (serial per GPU) */
    uint64_t preevicted; /* free chunks pre-eviction made and no allocation has used yet */
    uint64_t batch_allocs; /* chunks allocated by the fault batch in progress */
    sim_list_t guest[HUVM_SIM_MAX_GPUS]; /* harvested chunks of other owners held here, per owner */
    huvm_traffic_t guest_traffic; /* its recent guest traffic (huvm_gpu_state_t.guest_traffic_bytes) */
    uint64_t traffic_ns; /* the time guest_traffic was last read at (monotonic: refresh_gpus) */
    uint64_t lend_debt_ns; /* HBM time guests' copies took from its tenants, not yet charged */
    sim_res_t h2d, d2h; /* PCIe */
    sim_res_t port_out, port_in; /* NVSwitch ports */
    sim_pfq_t pfq[2]; /* huvm-atc22: the prototype's prefetch kthreads (SIM_PFQ_*) */
    uint64_t pf_prev; /* huvm-atc22: the previous fault batch's reference chunk + 1 (0: none) */
} sim_gpu_t;

typedef struct {
    uint64_t evict_to_peer, evict_to_host, fetch_from_peer, fetch_from_host, prefetch;
} sim_vacnt_t;

typedef struct {
    huvm_sim_tenant_spec_t spec; /* pointers below are our copies */
    uint64_t *op_time;
    uint32_t *first;
    uint32_t *touch;
    uint8_t *mode;
    int32_t *aop, *fop;
    uint32_t *alloc_first, *alloc_list; /* CSR: chunks allocated at op k */
    uint32_t *free_first, *free_list; /* CSR: chunks freed after op k */
    uint32_t *static_list, n_static; /* chunks live before op 0 (alloc_op == -1) */
    uint32_t chunk_base;
    uint32_t state;
    uint64_t clock;
    uint64_t step_start; /* clock at the start of the current step */
    uint32_t op;
    uint32_t foreground;
    uint64_t static_chunks;
    uint64_t *step_end;
    uint32_t step_end_n, step_end_cap;
    uint64_t *link_bytes; /* [n_ops] collectives' bytes per peer, or NULL */
    uint64_t *op_end; /* record_ops: each op's end time */
    uint32_t op_end_n, op_end_cap;
    huvm_sim_tenant_result_t res;
    sim_vacnt_t vacnt;
    uint32_t batch_lo, batch_hi; /* huvm-atc22: the fault batch in progress, its lowest and highest
                                         faulted chunk (global index; SIM_NIL: none yet) */
    uint64_t batch_start; /* huvm-atc22: when the fault batch in progress was fetched */
    uint32_t *pages; /* [n_touches] touch_pages, or NULL: whole blocks */
    /* An op in progress (sim_run_op yields between its touches when another tenant's clock is behind, so that
     * tenants' faults reach the links and the GPUs' fault servicing in time order): its state at the yield.
     * clock stays the op's start until it ends; at is the time the op has reached. */
    uint32_t in_op;
    uint32_t op_i; /* the next touch */
    uint32_t op_nb; /* faults in the batch in progress */
    uint32_t op_entries; /* fault-buffer entries in the batch in progress (fault_entries_per_group) */
    uint32_t remote_mask; /* holders of remote-mapped chunks the op read */
    uint64_t at;
    uint64_t fault_start;
    uint64_t remote_bytes[HUVM_SIM_MAX_GPUS];
} sim_tenant_t;

struct huvm_sim {
    huvm_sim_config_t cfg;
    huvm_core_t core;
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
    sim_gpu_t gpus[HUVM_SIM_MAX_GPUS];
    sim_res_t nvl[HUVM_SIM_MAX_GPUS][HUVM_SIM_MAX_GPUS];
    sim_res_t sw_h2d[HUVM_SIM_MAX_GPUS], sw_d2h[HUVM_SIM_MAX_GPUS]; /* each GPU's port on its PCIe switch's uplink */
    uint32_t xfer_seq;
    uint32_t traffic_mask; /* GPUs with a guest-traffic budget (refresh_gpus; set by huvm_sim_run) */
    sim_tenant_t tenants[HUVM_SIM_MAX_TENANTS];
    uint32_t n_tenants;
    sim_chunk_t *chunks;
    uint32_t n_chunks;
    uint32_t started;
    uint32_t fg_remaining;
    uint64_t yield_ns; /* sim_run_op: the earliest clock of the other tenants that run (UINT64_MAX: none) */
    uint32_t failed;
    uint32_t per_chunk_evict; /* tests: a decision per pre-evicted chunk (no runs), the reference */
    uint64_t now;
    uint64_t decide_ns; /* the time of the decision being made (a tenant's clock within its op, >= now) */
    uint64_t host_chunks;
    uint64_t host_limit_chunks;
    huvm_sim_traffic_t traffic;
    huvm_sim_sample_t *samples;
    uint32_t n_samples, samples_cap;
    uint64_t sample_interval, next_sample;
    huvm_sim_error_t err; /* first run-time error */
    uint32_t proto_prefetch; /* created as huvm-atc22: prefetch runs as the prototype's kthreads */
    uint64_t *fetched; /* [n_chunks] each chunk's last fetch-back from a peer (hysteresis input), 0 = never */
    uint32_t *pop; /* [n_chunks] the 64 KiB groups of each block that hold data (in host memory or on
                                      a GPU); the others were never touched (a fault zero-fills them) */
    huvm_sim_thr_t thr; /* UVM's thrashing detection, per block (huvm_sim_thrash.h; every policy) */
};

/* ---- small helpers shared by the sources (inline: the hot paths stay as fast as in one file) ---- */

static inline uint64_t u64_max(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static inline uint64_t u64_min(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static inline void list_push_tail(sim_chunk_t *ch, sim_list_t *l, uint32_t i)
{
    ch[i].next = SIM_NIL;
    ch[i].prev = l->tail;
    if (l->tail != SIM_NIL)
        ch[l->tail].next = i;
    else
        l->head = i;
    l->tail = i;
    l->count++;
}

static inline void list_remove(sim_chunk_t *ch, sim_list_t *l, uint32_t i)
{
    uint32_t p = ch[i].prev, n = ch[i].next;

    if (p != SIM_NIL)
        ch[p].next = n;
    else
        l->head = n;
    if (n != SIM_NIL)
        ch[n].prev = p;
    else
        l->tail = p;
    ch[i].prev = ch[i].next = SIM_NIL;
    l->count--;
}

static inline void list_init(sim_list_t *l)
{
    l->head = l->tail = SIM_NIL;
    l->count = 0;
}

static inline uint64_t gpu_used(const sim_gpu_t *g)
{
    return g->pinned_chunks + g->own.count + g->guest_chunks;
}

/* Free memory: not used, and not held by a copy out of the GPU that is still in flight. */
static inline uint64_t gpu_free(const sim_gpu_t *g)
{
    uint64_t used = gpu_used(g) + g->inflight;

    return used < g->capacity_chunks ? g->capacity_chunks - used : 0;
}

/* Set a link direction's rate and latency (and the time of a 2 MiB copy on it, computed once: no division on
 * the transfer path). */
static inline void res_set(sim_res_t *r, uint64_t mbyte_per_s, uint64_t latency_ns)
{
    r->mbyte_per_s = mbyte_per_s;
    r->latency_ns = latency_ns;
    r->chunk_ns = mbyte_per_s ? (SIM_CHUNK * 1000 + mbyte_per_s - 1) / mbyte_per_s : 0;
}

/* The time of `bytes` on r: bytes x 1000 / MB/s, rounded up. */
static inline uint64_t res_ns(const sim_res_t *r, uint64_t bytes)
{
    if (bytes == SIM_CHUNK && r->chunk_ns)
        return r->chunk_ns;
    return (bytes * 1000 + r->mbyte_per_s - 1) / r->mbyte_per_s;
}

/* The bytes of a block's resident groups (what a move of its GPU copy carries). */
static inline uint64_t pages_bytes(uint32_t pages)
{
    return pages == HUVM_SIM_PAGES_ALL ? SIM_CHUNK : (uint64_t)__builtin_popcount(pages) * HUVM_SIM_PAGE_GROUP_BYTES;
}

static inline uint64_t chunk_va(const huvm_sim_t *sim, uint32_t ci)
{
    const sim_tenant_t *t = &sim->tenants[sim->chunks[ci].tenant];

    return t->spec.va_base + (uint64_t)(ci - t->chunk_base) * SIM_CHUNK;
}

/* A prefetched chunk was touched (used) or leaves unused: its owner's prefetch feedback. */
static inline void pf_note(huvm_sim_t *sim, sim_chunk_t *c, uint32_t used)
{
    sim_gpu_t *o = &sim->gpus[c->owner];

    c->flags &= (uint8_t)~SIM_CF_PREFETCHED;
    huvm_prefetch_feedback(&o->pf_used, &o->pf_unused, used);
}

/* GPU g's own use (its tenants' resident and cudaMalloc'd chunks) grew, or may have: note the peak. */
static inline void note_own(huvm_sim_t *sim, uint32_t g, uint64_t t)
{
    sim_gpu_t *gg = &sim->gpus[g];

    huvm_peak_update(&gg->own_peak, (gg->own.count + gg->pinned_chunks) * SIM_CHUNK, t);
    gg->noted_ns = 0;
}

/* Guests' data copied into or out of lender h's memory takes HBM time from its running tenants. */
static inline void lend_charge(huvm_sim_t *sim, uint32_t h, uint64_t chunks)
{
    sim->gpus[h].lend_debt_ns += chunks * sim->cfg.lend_chunk_ns;
}

/* huvm_sim.c: the paging model (faults, eviction, give-back, prefetch, pre-eviction through the core) */
uint64_t sim_service_fault(huvm_sim_t *sim, sim_tenant_t *tt, uint32_t ci, uint32_t want, uint64_t t, int *remote);

uint64_t sim_pin_chunk(huvm_sim_t *sim, uint32_t g, uint32_t ci, uint64_t t);
void sim_release_chunk(huvm_sim_t *sim, uint32_t ci);
/* The GPU's worker at t: give-back down to its lend reserve (huvm_giveback_need) and, unless giveback_only,
 * pre-eviction (huvm_decide_preevict_plan); guests' chunks first, in the background. */
void sim_preevict(huvm_sim_t *sim, uint32_t g, uint64_t t, int giveback_only);
/* huvm-atc22: a fault batch of tenant tt fetched at tt->batch_start ended: queue the prototype's prefetch item. */
void sim_proto_batch(huvm_sim_t *sim, sim_tenant_t *tt);
/* huvm-atc22: run GPU g's prefetch items that have started by t (before a fault looks at residency). */
void sim_proto_flush(huvm_sim_t *sim, uint32_t g, uint64_t t);
/* Take one chunk of host memory (0), or fail the run when host memory is exhausted (-1). */
int host_take_chunk(huvm_sim_t *sim);

/* huvm_sim_xfer.c: links, transfers, PCIe switches, copies in flight */
uint64_t sim_xfer_h2d(huvm_sim_t *sim, uint32_t g, uint64_t t, uint64_t bytes, uint64_t svc_ns, int cls, uint32_t ci);
uint64_t sim_xfer_d2h(huvm_sim_t *sim, uint32_t g, uint64_t t, uint64_t bytes, uint64_t svc_ns, int cls, uint32_t ci);
uint64_t sim_xfer_peer_raw(huvm_sim_t *sim, uint32_t a, uint32_t b, uint64_t t, uint64_t bytes, int cls, uint32_t ci);
uint64_t sim_xfer_collective(huvm_sim_t *sim, uint32_t a, uint32_t b, uint64_t t, uint64_t bytes);
/* a -> b over the pair's direct path (sim_xfer_peer's general case: PCIe peer-to-peer, an NVSwitch). */
uint64_t sim_xfer_peer_path(huvm_sim_t *sim,
                            uint32_t a,
                            uint32_t b,
                            uint64_t t,
                            uint64_t bytes,
                            uint64_t svc_ns,
                            int cls,
                            uint32_t ci);
/* The copy path's rare parts, out of line: a queue's growth, demand traffic delaying queued copies. */
int sim_tok_grow(sim_res_t *r);
void sim_res_delay(huvm_sim_t *sim, sim_res_t *r, uint64_t start, uint64_t shared);
/* Copies out of g still in flight that ended by t give g its memory back (sim_gpu_retire: nothing to do before
 * g's inflight_lb, checked inline; the walk of its queues out of line). */
void sim_gpu_retire_walk(huvm_sim_t *sim, uint32_t g, uint64_t t);
uint64_t sim_gpu_inflight_next(const huvm_sim_t *sim, uint32_t g);
void sim_links_free(huvm_sim_t *sim);

/* huvm_sim_tenant.c: tenants (trace copies, validation) and running their ops */
void sim_tenant_free(sim_tenant_t *t);
void sim_tenant_start(huvm_sim_t *sim, sim_tenant_t *tt);
void sim_run_op(huvm_sim_t *sim, sim_tenant_t *tt);

/* huvm_sim_sample.c: samples and results */
void sim_sample_until(huvm_sim_t *sim, uint64_t t);

/* huvm_sim_node.c */
uint32_t sim_config_validate(const huvm_sim_config_t *cfg, huvm_sim_error_t *err);
void sim_set_error(huvm_sim_error_t *err, uint32_t status, int32_t record, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* huvm_sim_ioctl.c */
void sim_core_ops(huvm_core_ops_t *ops);

static inline void sim_gpu_retire(huvm_sim_t *sim, uint32_t g, uint64_t t)
{
    const sim_gpu_t *gg = &sim->gpus[g];

    if (gg->inflight && t >= gg->inflight_lb)
        sim_gpu_retire_walk(sim, g, t);
}

/* ---- the copy path (huvm_sim_xfer.c), inline: a peer copy over a direct NVLink is one leg, and as a call (its
 * eight arguments, spills, the callee's saved registers) it cost as much as its work ---- */

static inline sim_tok_t *tok_at(sim_res_t *r, uint32_t i)
{
    return &r->q[(r->qhead + i) & (r->qcap - 1)];
}

static inline void tok_pop(huvm_sim_t *sim, sim_res_t *r)
{
    sim_tok_t *k = tok_at(r, 0);

    if (k->release)
        sim->gpus[k->release - 1].inflight--;
    r->qhead = (r->qhead + 1) & (r->qcap - 1);
    r->qlen--;
}

/* Note a background copy on r ending at fin (chunk ci, its copy xfer; freeing GPU release - 1's memory when it
 * ends). If the note cannot be kept (no memory), the copy is not tracked: its memory counts as free at once. */
static SIM_ALWAYS_INLINE void tok_add(huvm_sim_t *sim,
                                      sim_res_t *r,
                                      uint64_t fin,
                                      uint32_t ci,
                                      uint32_t xfer,
                                      uint32_t release)
{
    sim_tok_t *k;

    if (r->qlen == r->qcap && !sim_tok_grow(r))
        return;
    k = &r->q[(r->qhead + r->qlen) & (r->qcap - 1)];
    k->fin = fin;
    k->chunk = ci;
    k->xfer = xfer;
    k->release = release;
    r->qlen++;
    if (release) {
        sim_gpu_t *gg = &sim->gpus[release - 1];

        gg->inflight++;
        if (fin < gg->inflight_lb)
            gg->inflight_lb = fin;
    }
}

/* Processor sharing with the work of class c queued on r: a transfer of dur ns starting at `start` takes
 * min(dur, that work) longer and pushes the work back by as much; delay: its background copies already issued
 * end later too (sim_res_delay). Returns the time taken (res_xfer: the other class; uplink_leg: every class of
 * every port behind the switch). */
static SIM_ALWAYS_INLINE uint64_t
res_share(huvm_sim_t *sim, sim_res_t *r, int c, uint64_t start, uint64_t dur, int delay)
{
    uint64_t sh;

    if (r->busy_until[c] <= start)
        return 0;
    sh = u64_min(dur, r->busy_until[c] - start);
    r->busy_until[c] += sh;
    if (sh && delay && r->qlen)
        sim_res_delay(sim, r, start, sh);
    return sh;
}

/* A transfer of `bytes` of class cls (SIM_FG/SIM_BG) arriving at t, with svc ns of the driver's per-block
 * service (migration or eviction) in front of the copy: the path is busy for both, so back-to-back blocks move
 * at the path's measured rate. Within a class, FIFO; between the two classes, processor sharing: while the
 * other class has queued work, both progress at half the rate until the shorter is done, so this transfer
 * takes min(its work, the other's) longer and pushes the other class's queue back by as much (background
 * copies already issued end later: res_delay). Work conserving: the two classes' work ends no earlier than
 * their sum. */
static SIM_ALWAYS_INLINE uint64_t
res_xfer(huvm_sim_t *sim, sim_res_t *r, uint64_t t, uint64_t bytes, uint64_t svc, int cls)
{
    uint64_t dur = res_ns(r, bytes) + svc;
    uint64_t start = u64_max(t, r->busy_until[cls]);
    uint64_t fin = start + dur + res_share(sim, r, !cls, start, dur, cls == SIM_FG);

    r->busy_until[cls] = fin;
    r->busy_ns += dur;
    r->bytes += bytes;
    return fin + r->latency_ns;
}

/* One leg of a copy: over r, noted as in flight when it is a background copy (xfer: the copy's sequence number,
 * the chunk's xfer; 0 without a chunk). Inlined where a path has one leg (the copy path's calls, arguments and
 * spills cost as much as its work); leg() for the others. */
static SIM_ALWAYS_INLINE uint64_t leg_inline(huvm_sim_t *sim,
                                             sim_res_t *r,
                                             uint64_t t,
                                             uint64_t bytes,
                                             uint64_t svc,
                                             int cls,
                                             uint32_t ci,
                                             uint32_t xfer,
                                             uint32_t release,
                                             int frees)
{
    uint64_t fin;

    /* Copies that ended and free nothing leave the queue here (those that free memory: sim_gpu_retire). A link
     * direction's copies all free memory (a GPU's d2h, port_out, nvl[a][*]: release a + 1) or none do (h2d,
     * port_in, the switches' uplinks: 0; huvm_sim_check), and its legs pass the same: frees (release != 0, a
     * constant where the leg is inlined) says which kind r holds. */
    if (!frees) {
        while (r->qlen && tok_at(r, 0)->fin <= t)
            tok_pop(sim, r);
    }
    fin = res_xfer(sim, r, t, bytes, svc, cls);
    if (cls == SIM_BG)
        tok_add(sim, r, fin, ci, xfer, release);
    return fin;
}

/* A new copy of chunk ci (SIM_NIL: none): its sequence number (0 without a chunk). */
static inline uint32_t new_xfer(huvm_sim_t *sim, uint32_t ci)
{
    if (ci == SIM_NIL)
        return 0;
    sim->chunks[ci].xfer = ++sim->xfer_seq;
    return sim->xfer_seq;
}

/* a -> b (chunk ci or SIM_NIL), svc_ns of per-block service in front of the copy, class cls. */
static SIM_ALWAYS_INLINE uint64_t sim_xfer_peer(huvm_sim_t *sim,
                                                uint32_t a,
                                                uint32_t b,
                                                uint64_t t,
                                                uint64_t bytes,
                                                uint64_t svc_ns,
                                                int cls,
                                                uint32_t ci)
{
    uint32_t x;

    if (sim->cfg.link_type[a][b] == HUVM_LINK_PCIE || (sim->cfg.flags & HUVM_SIM_FLAG_NVSWITCH))
        return sim_xfer_peer_path(sim, a, b, t, bytes, svc_ns, cls, ci);
    sim->traffic.gpu_to_gpu[a][b] += bytes;
    x = new_xfer(sim, ci);
    return leg_inline(sim, &sim->nvl[a][b], t, bytes, svc_ns, cls, ci, x, a + 1, 1);
}

/* A tenant's place in time for the event loop: an op in progress has reached `at`, otherwise its clock. */
static inline uint64_t tenant_clock(const sim_tenant_t *tt)
{
    return tt->in_op ? tt->at : tt->clock;
}

#endif /* __HUVM_SIM_INTERNAL_H__ */
