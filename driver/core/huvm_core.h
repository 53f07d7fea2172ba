/*
 * huvm: portable policy core. SPDX-License-Identifier: MIT
 *
 * Every huvm decision and all accounting live here, compiled unchanged into nvidia-uvm.ko, the qemu test
 * module, the simulated node and the Python extension. The callers (UVM glue, simulator, test module)
 * gather facts, ask the core, apply the answer and report what happened back through huvm_account_*.
 *
 * Rules: integer arithmetic only; no allocation; no locks; no sleeping; deterministic (same inputs, same
 * outputs). Decisions are pure functions of the state passed in (they never modify it).
 *
 * LOCKING: the core takes no locks. Callers serialise writers of huvm_core_t (huvm_dispatch, huvm_core_*
 * setters) against readers (decisions) with a lock of their own; the kernel glue uses one rw lock taken
 * below the va_block lock (see docs/driver.md). Counter updates in huvm_account_* are atomic (port
 * primitives), so they need no lock and may run concurrently with each other and with decisions.
 */
#ifndef __HUVM_CORE_H__
#define __HUVM_CORE_H__

#include "huvm_port.h"
#include "uvm_huvm_ioctl.h"

/* HUVM_CORE_API_BEGIN: pyctl/huvm/_build.py feeds the text from here to the end marker to cffi. */

typedef uint32_t huvm_status_t;         /* NV_STATUS values: HUVM_NV_OK, HUVM_NV_ERR_* */

/* Dynamic facts about one GPU at decision time, gathered by the caller. */
typedef struct {
    uint64_t free_bytes;                /* free memory now (kernel: PMA free 2 MiB pages + UVM free lists) */
    uint64_t last_evict_ns;             /* when this GPU last evicted its own data (0 = never) */
    uint64_t last_pressure_ns;          /* when an allocation on this GPU (a fault, a populate, a cudaMalloc)
                                           last had to evict, or would have had to without the chunks that
                                           pre-eviction freed (0 = never) */
    uint64_t burst_chunks;              /* chunks of memory the GPU's last fault batch allocated */
    uint64_t own_peak_bytes;            /* the most memory its own work (not guests) used recently:
                                           huvm_peak_update's level (0 = unknown) */
    uint64_t prefetch_used;             /* its recent prefetched chunks touched before they left it, and */
    uint64_t prefetch_unused;           /* those that left unused (huvm_prefetch_feedback keeps both) */
    uint64_t guest_traffic_bytes;       /* guests' data copied into or out of this GPU over the last
                                           HUVM_LEND_TRAFFIC_WINDOW_MS: huvm_traffic_update's level, with
                                           HUVM_TRAFFIC_PACED while it still pays for the copies it took at
                                           its budget's rate (huvm_traffic_level) */
    uint64_t own_spike_ns;              /* the expected time between rises of its own use (huvm_peak_spike_ns
                                           of its huvm_peak_t; 0 = unknown) */
} huvm_gpu_state_t;

/* A GPU's recent peak of its own memory use (huvm_gpu_state_t.own_peak_bytes) and the cadence of its spikes
 * (huvm_gpu_state_t.own_spike_ns), kept by the caller; all zero to start (huvm_peak_update). */
typedef struct {
    uint64_t bytes;
    uint64_t at_ns;
    uint64_t high_bytes;                /* its highest own use since the last spike began */
    uint64_t low_bytes;                 /* its lowest own use since it fell from high_bytes */
    uint64_t spike_at_ns;               /* when the last spike began (or the tracking did) */
    uint64_t spike_ewma_ns;             /* the intervals between spikes, an EWMA (0 = none yet) */
    uint32_t falling;                   /* 1: it fell HUVM_SPIKE_MIN_BYTES below high_bytes since the last spike */
    uint32_t pad;
} huvm_peak_t;

/* In huvm_gpu_state_t.guest_traffic_bytes: the lender has not yet paid, at its guest-traffic budget's rate, for the
 * guests' copies it took (huvm_traffic_level); a level never reaches this bit (memory <= 2^50). */
#define HUVM_TRAFFIC_PACED (1ULL << 63)

/* A GPU's recent guest traffic (huvm_gpu_state_t.guest_traffic_bytes), kept by the caller. */
typedef struct {
    uint64_t start_ns;                  /* the current window's start (0 = none yet) */
    uint64_t start_total;               /* huvm_guest_traffic_total when it started */
    uint64_t prev_bytes;                /* the traffic of the window before it */
    uint64_t paid_ns;                   /* pacing: when the traffic so far is paid for at the budget's rate */
    uint64_t paid_total;                /* huvm_guest_traffic_total that paid_ns accounts for */
} huvm_traffic_t;

/* Flags of an eviction request. */
#define HUVM_EVICT_FLAG_PMA_CONTEXT 0x1  /* called on behalf of PMA (RM asked UVM to free memory) */
#define HUVM_EVICT_FLAG_GUEST_CHUNK 0x2  /* the chunk holds another GPU's data (harvested here) */
#define HUVM_EVICT_FLAG_PREEVICT    0x4  /* issued by the pre-eviction worker, not by an allocation */

typedef struct {
    uint32_t gpu;                       /* index of the evicting GPU (whose memory is reclaimed) */
    uint32_t flags;                     /* HUVM_EVICT_FLAG_* */
    uint32_t candidates;                /* bitmask of GPU indices usable as peers for this chunk: in the
                                           kernel, NVLink peers registered in the chunk's va_space */
    uint32_t pad;
    uint64_t now_ns;                    /* monotonic time */
    uint64_t chunk_fetched_ns;          /* when this chunk last came back from a peer (0 = never) */
} huvm_evict_request_t;

typedef struct {
    uint32_t dst;                       /* GPU index, or HUVM_DEST_HOST */
    uint32_t reason;                    /* HUVM_REASON_* */
} huvm_decision_t;

typedef struct {
    uint32_t local_chunks;              /* chunks to prefetch host -> faulting GPU */
    uint32_t peer_chunks;               /* chunks to prefetch host -> peer (on the peer's own PCIe link) */
    uint32_t peer;                      /* the peer for peer_chunks (HUVM_DEST_HOST if none) */
    uint32_t stride;                    /* distance in chunks between prefetched chunks */
    uint32_t peer_local_chunks;         /* TWO_STAGE: chunks of the window held by peers, to bring peer ->
                                           faulting GPU over NVLink (a glue that ignores it prefetches less) */
} huvm_prefetch_plan_t;

typedef struct {
    uint32_t guest_chunks[HUVM_MAX_GPUS]; /* harvested chunks to give back, per owner GPU, all to host */
    uint32_t total_guest_chunks;        /* sum of guest_chunks */
    uint32_t own_chunks;                /* chunks of the lender's own data still to evict after that */
} huvm_giveback_plan_t;

/* The core's state for one node. One instance per module, test module or simulated node. */
typedef struct {
    huvm_policy_t policy;                        /* current policy (policy.gpus keyed by UUID) */
    uint32_t backend;                       /* HUVM_BACKEND_* */
    uint32_t gpu_count;                     /* GPUs known to the node (slots 0..gpu_count-1) */
    huvm_gpu_info_t gpus[HUVM_MAX_GPUS];           /* static facts; free_bytes refreshed by callers */
    huvm_link_t links[HUVM_MAX_GPUS][HUVM_MAX_GPUS];
    int32_t policy_slot[HUVM_MAX_GPUS];    /* derived: GPU index -> policy.gpus entry or -1 */
    huvm_gpu_counters_t counters[HUVM_MAX_GPUS];
    huvm_pair_counters_t pairs[HUVM_MAX_GPUS][HUVM_MAX_GPUS];
    uint32_t rr_next[HUVM_MAX_GPUS];        /* round-robin cursor per harvester */
    uint64_t test_now_ns;                   /* clock of the synthetic test node */
    uint64_t lend_inflight[HUVM_MAX_GPUS];  /* bytes reserved on a holder by moves in flight */
    uint32_t single_writer;                 /* 1: one thread at a time updates the counters
                                                           (the simulator): plain relaxed updates */
    uint32_t pad;
    /* What a lender's slowdown bound (lend_slowdown_max_pct) weighs, per GPU (huvm_core_set_gpu_rates: the
     * simulator from its node model, the kernel through SET_GPU_RATES from the admin's measurements; 0 =
     * unknown; cleared when another GPU takes the slot): its HBM bandwidth, MB/s (the guest-traffic budget the
     * bound allows), and the rate at which it gives guests' chunks back to the host, MB/s (0: the host link's
     * line rate, gpus[].pcie_mbyte_per_s). */
    uint32_t hbm_mbyte_per_s[HUVM_MAX_GPUS];
    uint32_t giveback_mbyte_per_s[HUVM_MAX_GPUS];
} huvm_core_t;

/* Who is calling (filled by the glue from the task; by the simulator as privileged). */
typedef struct {
    uint32_t privileged;                /* CAP_SYS_ADMIN (kernel); audited only for privileged commands */
    uint32_t allow_test;                /* test commands allowed (uvm_enable_builtin_tests, sim) */
    uint32_t live_gpus;                 /* real (or emulated) GPUs are registered: test commands refused */
    uint32_t uid;
    uint32_t pid;
    uint64_t now_ns;
} huvm_caller_t;

/* Callbacks for what only the caller knows. Any may be NULL (then the command reports no data). */
typedef struct {
    /* GET_INFO's free memory: gpus[i].free_bytes (the answer's copy of core->gpus[], gpu_count entries) for
     * each present GPU. The core is not written: GET_INFO is a reader (huvm_cmd_reader()). */
    void (*refresh_free)(void *ctx, const huvm_core_t *core, huvm_gpu_info_t *gpus);
    /* Fill params->entries from start_index, visible to caller (own processes unless privileged). */
    huvm_status_t (*list_va_spaces)(void *ctx, const huvm_caller_t *caller, HUVM_LIST_VA_SPACES_PARAMS *params);
    /* Called after a policy change was applied (e.g. to kick pre-eviction workers). */
    void (*policy_changed)(void *ctx, const huvm_core_t *core);
} huvm_core_ops_t;

/* ---- Setup (huvm_policy.c) ---- */

/* Initialise: no GPUs, the given preset, zero counters. */
void huvm_core_init(huvm_core_t *core, uint32_t backend, uint32_t preset);

/* Add or replace the GPU at index gpu (0..HUVM_MAX_GPUS-1); creates a default policy entry for its UUID if
 * none exists (entries outlive GPUs). Returns HUVM_NV_ERR_* on bad input. */
huvm_status_t huvm_core_set_gpu(huvm_core_t *core, uint32_t gpu, const huvm_gpu_info_t *info);
/* Mark the GPU at index gpu absent (policy entry and counters stay). */
void huvm_core_remove_gpu(huvm_core_t *core, uint32_t gpu);
huvm_status_t huvm_core_set_link(huvm_core_t *core, uint32_t a, uint32_t b, const huvm_link_t *link);
/* The rates of GPU index gpu that its slowdown bound weighs (huvm_core_t.hbm_mbyte_per_s,
 * .giveback_mbyte_per_s; 0 = unknown); each at most HUVM_MAX_MBYTE_PER_S. */
huvm_status_t huvm_core_set_gpu_rates(huvm_core_t *core,
                                      uint32_t gpu,
                                      uint32_t hbm_mbyte_per_s,
                                      uint32_t giveback_mbyte_per_s);

/* Fill *policy with preset (gpu entries: the given GPUs' UUIDs with that preset's per-GPU defaults). */
huvm_status_t huvm_policy_preset(uint32_t preset, const huvm_core_t *core, huvm_policy_t *policy);
/* Full validation of a policy against the node; on error *error_field says which field. */
huvm_status_t huvm_policy_validate(const huvm_core_t *core, const huvm_policy_t *policy, uint32_t *error_field);
/* Validate, then merge into the current policy atomically (all or nothing); bumps generation. */
huvm_status_t huvm_policy_apply(huvm_core_t *core, const huvm_policy_t *policy, uint32_t *error_field);
/* Per-GPU policy entry of GPU index gpu, or NULL. */
const huvm_gpu_policy_t *huvm_policy_gpu(const huvm_core_t *core, uint32_t gpu);
const char *huvm_preset_name(uint32_t preset);
const char *huvm_reason_name(uint32_t reason);

/* One policy field, from its row of HUVM_POLICY_FIELDS / HUVM_GPU_POLICY_FIELDS (uvm_huvm_ioctl.h): the
 * descriptor validation and the presets loop over, and that pyctl reads through cffi. */
typedef struct {
    const char *name;                   /* the struct member: the field's one name */
    const char *choices;                /* ENUM, FLAGS: the constants are HUVM_<choices>*; else "" */
    uint32_t scope;                     /* HUVM_POLICY_SCOPE_* */
    uint32_t field;                     /* error_field: HUVM_FIELD_* (node), HUVM_FIELD_GPU_* (in an entry) */
    uint32_t offset;                    /* in huvm_policy_t (node) or huvm_gpu_policy_t (GPU) */
    uint32_t size;                      /* 4 or 8 bytes */
    uint32_t unit;                      /* HUVM_UNIT_* */
    uint32_t special;                   /* HUVM_POLICY_FIELD_* */
    uint64_t min;
    uint64_t max;                       /* FLAGS: the known bits */
    uint64_t preset[3];                 /* value in HUVM_PRESET_STOCK, _ATC22, _HUVM */
} huvm_policy_field_t;

/* The descriptors, node fields then GPU fields, each in struct order; NULL past the last. */
uint32_t huvm_policy_field_count(void);
const huvm_policy_field_t *huvm_policy_field(uint32_t index);
/* A field's value in a huvm_policy_t (node) or huvm_gpu_policy_t (GPU). */
uint64_t huvm_policy_field_get(const huvm_policy_field_t *d, const void *base);

/* ---- Decisions (huvm_decide.c): pure, read-only ---- */

/* Where should one root chunk of req->gpu go? state[] has core->gpu_count entries. */
huvm_decision_t huvm_decide_evict(const huvm_core_t *core,
                                  const huvm_gpu_state_t *state,
                                  const huvm_evict_request_t *req);
/* A batch of one owner's evictions at one now (the pre-eviction worker's): huvm_decide_evict for each chunk,
 * with the peer's admission checked once per run instead of the whole choice per chunk. Same decisions as
 * huvm_decide_evict per chunk when, between two calls, the caller changes nothing but what a chunk that went to
 * run->peer changes (its free bytes down and its lent bytes up by HUVM_CHUNK_SIZE, through huvm_account_evict)
 * and calls huvm_evict_run_moved after each such chunk; req's gpu, flags, candidates and now_ns stay the same.
 * Start a batch with run zeroed; max: the chunks left in the batch (a run never covers more). */
typedef struct {
    uint32_t peer;                      /* the run's peer */
    uint32_t left;                      /* chunks the peer still takes without a new choice; 0: decide afresh */
} huvm_evict_run_t;

huvm_decision_t huvm_decide_evict_run(const huvm_core_t *core,
                                      const huvm_gpu_state_t *state,
                                      const huvm_evict_request_t *req,
                                      huvm_evict_run_t *run,
                                      uint32_t max);
/* A chunk of the batch went to dst (HUVM_DEST_HOST or a GPU). */
void huvm_evict_run_moved(huvm_evict_run_t *run, uint32_t dst);
/* Can holder take `bytes` more of owner's data now? Returns HUVM_REASON_PEER if yes, else the reason. */
uint32_t huvm_admit_lend(const huvm_core_t *core,
                         const huvm_gpu_state_t *state,
                         uint32_t owner,
                         uint32_t holder,
                         uint64_t bytes,
                         uint64_t now_ns);
/* The free reserve gpu's pre-eviction keeps, in chunks: preevict_chunks, at most 1/16 of the GPU; 0 for a GPU
 * whose role does not harvest (none, lender) or that is absent. */
uint32_t huvm_preevict_target(const huvm_core_t *core, uint32_t gpu);
/* How many chunks should gpu pre-evict to restore its free reserve (0 = none), from free memory alone (no
 * pressure gate, no order: huvm_decide_preevict_plan is the whole decision). */
uint32_t huvm_decide_preevict(const huvm_core_t *core, const huvm_gpu_state_t *state, uint32_t gpu);
/* Pre-eviction of gpu at now_ns: huvm_decide_preevict's count; when the GPU's entry has
 * HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE, 0 unless the GPU is under pressure (last_pressure_ns within
 * HUVM_PREEVICT_PRESSURE_MS) and the reserve at most the last fault batch's burst (burst_chunks). Planned like
 * a give-back: the guests' chunks the GPU holds go first (to host), its own data (own_chunks, by the normal
 * eviction decision) only after every guest chunk: a lender's own data never leaves ahead of a guest's. */
void huvm_decide_preevict_plan(const huvm_core_t *core,
                               const huvm_gpu_state_t *state,
                               uint32_t gpu,
                               uint64_t now_ns,
                               huvm_giveback_plan_t *plan);
/* Note the GPU's own memory use now (memory in use less guests' data): the peak is the highest level seen
 * within HUVM_OWN_PEAK_WINDOW_MS; a peak older than that gives way to the present level. A spike begins when the
 * use rises HUVM_SPIKE_MIN_BYTES above its low after having fallen that far below its high (hysteresis: one
 * spike per rise and fall, however many steps it takes); the intervals between spikes feed an integer EWMA
 * (1/4 weight to the newest). Callers note it at every decision (the kernel and the simulator alike). */
void huvm_peak_update(huvm_peak_t *peak, uint64_t own_bytes, uint64_t now_ns);
/* huvm_gpu_state_t.own_spike_ns at now_ns: the EWMA of the spike intervals, or the time since the last spike
 * began when that is longer (a lender that stopped spiking becomes a slow one); at most HUVM_SPIKE_MAX_NS; 0
 * before the first huvm_peak_update. */
uint64_t huvm_peak_spike_ns(const huvm_peak_t *peak, uint64_t now_ns);
/* Bytes lender wants back from its guests now: its lend reserve less its free memory, while it holds guests'
 * chunks (0 otherwise). The kernel's worker gives them back through huvm_decide_giveback's plan. */
uint64_t huvm_giveback_need(const huvm_core_t *core, const huvm_gpu_state_t *state, uint32_t lender);
/* Guests' data copied into or out of holder so far, in bytes: the chunks evicted or prefetched onto it and
 * fetched or given back from it (pair counters; whole chunks). Counters reset by RESET_STATS restart it. */
uint64_t huvm_guest_traffic_total(const huvm_core_t *core, uint32_t holder);
/* Fold holder's huvm_guest_traffic_total (total_bytes) into its window at now_ns and return the traffic of the
 * HUVM_LEND_TRAFFIC_WINDOW_MS ending now: the current fixed window's bytes plus the previous window's, weighted by
 * the part of it still inside (a sliding window from two fixed ones). A total below the last one (a counter
 * reset) starts over. */
uint64_t huvm_traffic_update(huvm_traffic_t *traffic, uint64_t total_bytes, uint64_t now_ns);
/* huvm_gpu_state_t.guest_traffic_bytes of gpu at now_ns: huvm_traffic_update of its huvm_guest_traffic_total when
 * it has a guest-traffic budget (its entry's, or the one its slowdown bound allows); otherwise 0, and *traffic starts over (the pair counters are not
 * summed for a GPU without a budget; a window starts when one is set). With HUVM_TRAFFIC_PACED while the guest
 * copies so far are not yet paid for at the budget's rate (huvm_traffic_paid_ns): a new guest chunk then goes to a
 * lender that has paid, if one admits it, so that the budget is spent evenly rather than in bursts inside the
 * lender's own work (a serving lender's tokens). */
uint64_t huvm_traffic_level(const huvm_core_t *core, uint32_t gpu, huvm_traffic_t *traffic, uint64_t now_ns);
/* Pacing at rate_mbyte_per_s (> 0): fold total_bytes into traffic's paid-for time at now_ns (the copies since the
 * last call are paid for after those before them, each at the rate: a virtual clock) and return it; a time after
 * now_ns means the lender is still paying for copies it took. A total below the last one starts over. */
uint64_t huvm_traffic_paid_ns(huvm_traffic_t *traffic,
                              uint64_t total_bytes,
                              uint64_t rate_mbyte_per_s,
                              uint64_t now_ns);
/* A prefetched chunk of the GPU was touched (used = 1) or left unused (evicted, freed): count it in its
 * huvm_gpu_state_t.prefetch_used / prefetch_unused; both are halved once they reach
 * HUVM_PREFETCH_FEEDBACK_WINDOW together, so they describe the recent prefetches. */
void huvm_prefetch_feedback(uint64_t *used, uint64_t *unused, uint32_t was_used);
/* On a fault of owner's data held by holder: HUVM_FETCH_MIGRATE or HUVM_FETCH_REMOTE_MAP. */
uint32_t huvm_decide_fetch(const huvm_core_t *core, uint32_t owner, uint32_t holder);
/* Prefetch plan for a fault of gpu; candidates as in huvm_evict_request_t. The host -> peer part (PEER,
 * TWO_STAGE's first stage, MULTIPATH's peer share) only while gpu is under pressure (last_pressure_ns within
 * HUVM_PREEVICT_PRESSURE_MS); otherwise MULTIPATH prefetches all of it locally, TWO_STAGE only brings
 * peer-held chunks back (peer_local_chunks), PEER prefetches nothing. */
void huvm_decide_prefetch(const huvm_core_t *core,
                          const huvm_gpu_state_t *state,
                          uint32_t gpu,
                          uint32_t candidates,
                          uint64_t now_ns,
                          huvm_prefetch_plan_t *plan);
/* 0 when huvm_decide_prefetch() plans nothing for gpu whatever the node's state (prefetch off, as in the stock
 * preset, or no such GPU): the fault path then gathers no state at all. */
uint32_t huvm_prefetch_active(const huvm_core_t *core, uint32_t gpu);
/* Lender needs need_bytes: harvested chunks go first (to host), then its own data. */
void huvm_decide_giveback(const huvm_core_t *core,
                          const huvm_gpu_state_t *state,
                          uint32_t lender,
                          uint64_t need_bytes,
                          huvm_giveback_plan_t *plan);

/* ---- Accounting (huvm_account.c): counters + tracepoint/USDT probe; atomic, lock-free ---- */

/* owner's chunk evicted to dst (GPU index or HUVM_DEST_HOST) for reason; flags HUVM_EVICT_FLAG_PREEVICT. */
void huvm_account_evict(huvm_core_t *core,
                        uint32_t owner,
                        uint32_t dst,
                        uint32_t reason,
                        uint32_t flags,
                        uint64_t bytes,
                        uint64_t va);
/* owner's data brought back from src (GPU index or HUVM_DEST_HOST); mode HUVM_FETCHED_*: a whole chunk moved
 * (bytes and chunk counters, gauges), remote-mapped (chunk counter only), pages copied (bytes only; from
 * host also the whole chunks among them), or a peer's chunk released after its pages came back (chunk
 * counters and gauges, no bytes). From host, REMOTE_MAP and RELEASED count as MOVED. */
void huvm_account_fetch(huvm_core_t *core, uint32_t owner, uint32_t src, uint32_t mode, uint64_t bytes, uint64_t va);
/* holder gave back owner's harvested data to host. */
void huvm_account_giveback(huvm_core_t *core, uint32_t holder, uint32_t owner, uint64_t bytes, uint64_t va);
/* owner freed data that sat on holder (va_block destroyed, range freed): the held/lent/harvested gauges go
 * down by bytes (saturating, conserved). No data moves, so no counter and no event. */
void huvm_account_release(huvm_core_t *core, uint32_t owner, uint32_t holder, uint64_t bytes, uint64_t va);
/* Data still sits under GPU index gpu: its data held on another GPU (harvested_bytes), another GPU's data held on
 * it (lent_bytes) or a pair naming it. Root chunks carry their owner's index (the glue's huvm_owner), so such an
 * index must not be given to another GPU while it is in use. Returns 1 if in use, 0 if not or out of range. */
int huvm_core_slot_in_use(const huvm_core_t *core, uint32_t gpu);
/* A move of bytes of owner's data to holder is about to start (eviction or prefetch to a peer, decided under a
 * read lock that concurrent movers share): admit it again with the bytes other movers have reserved on holder
 * counted as lent and not free, and reserve them in the same compare-exchange step, so that concurrent movers
 * never overrun the holder's lend limit or reserve. Returns HUVM_REASON_PEER when reserved (end it with
 * huvm_lend_unreserve once the move is accounted or failed), else why not. */
uint32_t huvm_lend_reserve(huvm_core_t *core,
                           const huvm_gpu_state_t *state,
                           uint32_t owner,
                           uint32_t holder,
                           uint64_t bytes,
                           uint64_t now_ns);
void huvm_lend_unreserve(huvm_core_t *core, uint32_t holder, uint64_t bytes);
/* Prefetch for owner into dst (owner itself = local path; another GPU = peer path). */
void huvm_account_prefetch(huvm_core_t *core, uint32_t owner, uint32_t dst, uint64_t bytes, uint64_t va);
void huvm_account_faults(huvm_core_t *core, uint32_t gpu, uint32_t faults);
void huvm_account_policy(huvm_core_t *core);
/* Counters to zero (gauges stay) per HUVM_RESET_* flags. */
void huvm_account_reset(huvm_core_t *core, uint32_t reset_flags);

/* ---- Control dispatch (huvm_dispatch.c), shared by the kernel, the test module and the simulator ---- */

/* sizeof the params struct of cmd, or 0 if cmd is not a huvm command. */
uint32_t huvm_cmd_params_size(uint32_t cmd);
/* 1 if cmd needs a privileged caller (it changes the policy, the counters or the test node): the kernel
 * then checks CAP_SYS_ADMIN with an audited check, and without audit for every other command. */
uint32_t huvm_cmd_privileged(uint32_t cmd);
/* 1 if cmd only reads the core (GET_INFO, GET_POLICY, GET_STATS): its dispatch writes nothing but params and
 * the ops' callbacks get a const core, so the kernel runs it under its lock taken shared (an unprivileged
 * monitor's loop never excludes the eviction and fault paths, which take that lock shared too). */
uint32_t huvm_cmd_reader(uint32_t cmd);
/* Check hdr against cmd (version, size, flags); sets hdr->module_abi_version. */
huvm_status_t huvm_check_hdr(uint32_t cmd, huvm_hdr_t *hdr, uint32_t params_size, uint32_t *error_field);
/* Validate fully, then apply atomically; writes error_field and rmStatus into params and returns the
 * status. params is a kernel-side copy of params_size bytes (the caller copies in and out). */
huvm_status_t huvm_dispatch(huvm_core_t *core,
                            const huvm_core_ops_t *ops,
                            void *ops_ctx,
                            const huvm_caller_t *caller,
                            uint32_t cmd,
                            void *params,
                            uint32_t params_size);

/* HUVM_CORE_API_END */

#endif /* __HUVM_CORE_H__ */
