/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03.
 * SPDX-License-Identifier: MIT
 *
 * The ioctl ABI: the one contract between the patched nvidia-uvm module, the qemu test module, the
 * simulated node and the Python control plane (cffi). Everything a number means is defined here.
 *
 * Conventions (those of uvm_ioctl.h):
 * - Raw command numbers (UVM_IOCTL_BASE(i) is i), in a block far from upstream's 1-78 and the test
 *   ioctls' 200+: HUVM_IOCTL_BASE(i) = 1800 + i.
 * - Fixed-width fields, explicit padding, 64-bit fields 8-byte aligned, every struct a multiple of 8.
 * - Every params struct starts with huvm_hdr_t (ABI version and size, checked before anything else) and
 *   ends with `error_field` (which field was refused, a HUVM_FIELD_* value) and the NV_STATUS `rmStatus`.
 * - Status values are NV_STATUS values (nvstatuscodes.h) so the kernel returns them unchanged.
 *
 * Parsing rules (pyctl/huvm/_build.py feeds the part between the ABI markers to cffi's cdef):
 * - between the markers only #define NAME <integer literal or expression>, typedef'd structs of
 *   uint8_t/uint16_t/uint32_t/uint64_t/int32_t/int64_t/char fields and arrays, and comments;
 * - a field comment of the form  `counter|gauge UNIT: help`  declares a statistic: the Python metric table,
 *   the Prometheus exporter, the TUI and docs/counters.md are generated from these comments.
 */
#ifndef _UVM_HUVM_IOCTL_H
#define _UVM_HUVM_IOCTL_H

#if defined(__KERNEL__)
#include <linux/types.h>
#else
#include <stdint.h>
#endif

/* HUVM_ABI_BEGIN */

/* Versions. A tool and a module talk if their ABI major versions are equal; minor versions only add. */
#define HUVM_ABI_VERSION_MAJOR 2
#define HUVM_ABI_VERSION_MINOR 3
#define HUVM_ABI_VERSION       ((HUVM_ABI_VERSION_MAJOR << 16) | HUVM_ABI_VERSION_MINOR)
#define HUVM_VERSION_MAJOR     0
#define HUVM_VERSION_MINOR     1
#define HUVM_VERSION_PATCH     0
#define HUVM_VERSION           ((HUVM_VERSION_MAJOR << 16) | (HUVM_VERSION_MINOR << 8) | HUVM_VERSION_PATCH)

/* Sizes. */
#define HUVM_MAX_GPUS                     16
#define HUVM_UUID_LEN                     16
#define HUVM_NAME_LEN                     32
#define HUVM_CHUNK_SIZE                   2097152
#define HUVM_MAX_VA_SPACES_PER_CALL       64
#define HUVM_PREFETCH_MAX_CHUNKS          64
#define HUVM_PREFETCH_MAX_STRIDE          16
#define HUVM_HYSTERESIS_MAX_MS            60000
/* lend_traffic_mbyte_per_s is measured over this window (chosen on the tuning half of the scenario matrix,
 * docs/policy.md); the smallest budget other than 0 moves one 2 MiB chunk per window (2097152 B / 20 ms =
 * 104.9 MB/s, rounded up) */
#define HUVM_LEND_TRAFFIC_WINDOW_MS       20
#define HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S 105
/* Bounds the core enforces on policy values and node descriptions (huvm_policy_validate,
 * huvm_core_set_node); the Python tools read every limit they show or check from here. */
#define HUVM_PREEVICT_MAX_CHUNKS          65536u          /* 128 GiB reserve */
#define HUVM_PREEVICT_MAX_BATCH           4096u
#define HUVM_PEER_USAGE_PCT_MIN           1u              /* peer_usage_max_pct: 1..100 (percent of a */
#define HUVM_PEER_USAGE_PCT_MAX           100u            /* peer's memory; 100 = any usage) */
#define HUVM_PREFETCH_MAX_SPAN_CHUNKS     512u            /* prefetch_chunks * prefetch_stride: a 1 GiB window */
#define HUVM_MAX_MEMORY_BYTES             (1ULL << 50)    /* 1 PiB per GPU: keeps products in 64 bits */
#define HUVM_MAX_MBYTE_PER_S              (1ULL << 24)    /* 16 TB/s per link or PCIe direction */
#define HUVM_UNLIMITED                    0xffffffffffffffffULL

/* Commands: raw numbers, HUVM_IOCTL_BASE(i) = 1800 + i. */
#define HUVM_IOCTL_BASE_NR        1800
#define HUVM_IOCTL_GET_INFO       1801
#define HUVM_IOCTL_GET_POLICY     1802
#define HUVM_IOCTL_SET_POLICY     1803
#define HUVM_IOCTL_GET_STATS      1804
#define HUVM_IOCTL_RESET_STATS    1805
#define HUVM_IOCTL_LIST_VA_SPACES 1806
/* Test-only: refused by the patched nvidia-uvm unless uvm_enable_builtin_tests=1. */
#define HUVM_IOCTL_TEST_SET_NODE  1807
#define HUVM_IOCTL_TEST_EVENT     1808
/* ABI 2.3: the per-GPU rates a lender's slowdown bound weighs (SET is privileged, GET a reader). */
#define HUVM_IOCTL_SET_GPU_RATES  1809
#define HUVM_IOCTL_GET_GPU_RATES  1810
#define HUVM_IOCTL_FIRST          1801
#define HUVM_IOCTL_LAST           1810

/* NV_STATUS values (nvstatuscodes.h) used by huvm. */
#define HUVM_NV_OK                           0x00000000
#define HUVM_NV_ERR_GENERIC                  0x0000FFFF
#define HUVM_NV_ERR_BUSY_RETRY               0x00000003
#define HUVM_NV_ERR_GPU_UUID_NOT_FOUND       0x00000012
#define HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS 0x0000001B
#define HUVM_NV_ERR_INVALID_ARGUMENT         0x0000001F
#define HUVM_NV_ERR_INVALID_COMMAND          0x00000024
#define HUVM_NV_ERR_INVALID_PARAM_STRUCT     0x0000003A
#define HUVM_NV_ERR_INVALID_STATE            0x00000040
#define HUVM_NV_ERR_NO_MEMORY                0x00000051
#define HUVM_NV_ERR_NOT_COMPATIBLE           0x00000054
#define HUVM_NV_ERR_NOT_SUPPORTED            0x00000056
#define HUVM_NV_ERR_OBJECT_NOT_FOUND         0x00000057
#define HUVM_NV_ERR_OUT_OF_RANGE             0x0000005B
#define HUVM_NV_ERR_STATE_IN_USE             0x00000063

/* Which field a refused request got wrong (error_field). GPU entries add HUVM_FIELD_GPU_BASE + 64 * index. */
#define HUVM_FIELD_NONE               0
#define HUVM_FIELD_HDR_ABI_VERSION    1
#define HUVM_FIELD_HDR_SIZE           2
#define HUVM_FIELD_HDR_FLAGS          3
#define HUVM_FIELD_GENERATION         10
#define HUVM_FIELD_PRESET             11
#define HUVM_FIELD_PEER_SELECT        12
#define HUVM_FIELD_NVLINK_ONLY        13
#define HUVM_FIELD_PEER_USAGE_MAX_PCT 14
#define HUVM_FIELD_PREEVICT_CHUNKS    15
#define HUVM_FIELD_PREEVICT_BATCH     16
#define HUVM_FIELD_FETCH_MODE         17
#define HUVM_FIELD_PREFETCH_MODE      18
#define HUVM_FIELD_PREFETCH_CHUNKS    19
#define HUVM_FIELD_PREFETCH_STRIDE    20
#define HUVM_FIELD_HYSTERESIS_MS      21
#define HUVM_FIELD_GPU_COUNT          22
#define HUVM_FIELD_RESERVED           23
#define HUVM_FIELD_START_INDEX        24
#define HUVM_FIELD_TEST_EVENT         25
#define HUVM_FIELD_TEST_GPU           26
#define HUVM_FIELD_TEST_PEER          27
#define HUVM_FIELD_TEST_COUNT         28
#define HUVM_FIELD_NODE_LINK          29
#define HUVM_FIELD_RESET_FLAGS        30
#define HUVM_FIELD_TEST_FLAGS         31
#define HUVM_FIELD_RATES_GPU          32
#define HUVM_FIELD_RATES_HBM          33
#define HUVM_FIELD_RATES_GIVEBACK     34
#define HUVM_FIELD_GPU_BASE           1000
#define HUVM_FIELD_GPU_STRIDE         64
#define HUVM_FIELD_GPU_UUID           0
#define HUVM_FIELD_GPU_ROLE           1
#define HUVM_FIELD_GPU_LEND_LIMIT     2
#define HUVM_FIELD_GPU_LEND_RESERVE   3
#define HUVM_FIELD_GPU_FLAGS          4
#define HUVM_FIELD_GPU_MEMORY         5
#define HUVM_FIELD_GPU_FREE           6
#define HUVM_FIELD_GPU_LEND_TRAFFIC   7
#define HUVM_FIELD_GPU_LEND_SLOWDOWN  8

/* The policy field table (HUVM_POLICY_FIELDS / HUVM_GPU_POLICY_FIELDS below the ABI block): each field's
 * unit, which says how it is written and checked, and the markers of its special values. */
#define HUVM_UNIT_CHUNKS            0   /* a number of 2 MiB chunks */
#define HUVM_UNIT_PERCENT           1
#define HUVM_UNIT_MS                2   /* milliseconds */
#define HUVM_UNIT_BYTES             3
#define HUVM_UNIT_MBYTE_PER_S       4   /* 10^6 bytes per second */
#define HUVM_UNIT_ENUM              5   /* one of the constants HUVM_<choices>*, min..max */
#define HUVM_UNIT_FLAGS             6   /* a set of the constants HUVM_<choices>*; max: the known bits */
#define HUVM_UNIT_BOOL              7   /* 0 or 1 */
#define HUVM_UNIT_COUNT             8
#define HUVM_POLICY_FIELD_UNLIMITED 0x1 /* max is HUVM_UNLIMITED, written "unlimited" */
#define HUVM_POLICY_FIELD_ZERO_OFF  0x2 /* 0 (off) is allowed besides min..max */
#define HUVM_POLICY_SCOPE_NODE      0   /* a field of huvm_policy_t */
#define HUVM_POLICY_SCOPE_GPU       1   /* a field of huvm_gpu_policy_t */

/* Where an eviction goes, and why (the reason codes of huvm_decide_evict, also USDT/tracepoint args). */
#define HUVM_REASON_PEER         0   /* a peer was chosen */
#define HUVM_REASON_TIER_OFF     1   /* policy: peer tier off (stock preset) or the GPU's role forbids */
#define HUVM_REASON_PMA_CONTEXT  2   /* eviction on behalf of PMA (RM) never uses the peer tier */
#define HUVM_REASON_GUEST_CHUNK  3   /* the chunk is itself harvested data: to host, never cascade */
#define HUVM_REASON_NO_PEER      4   /* no eligible peer: none registered, not NVLink, or not lenders */
#define HUVM_REASON_PEER_FULL    5   /* every candidate is at its lending limit, reserve or usage cap */
#define HUVM_REASON_HYSTERESIS   6   /* anti-ping-pong: the chunk or the peer moved too recently */
#define HUVM_REASON_ALLOC_FAILED 7   /* the peer chunk allocation failed (reported by the glue) */
#define HUVM_REASON_COPY_FAILED  8   /* the copy to the peer failed (reported by the glue) */
#define HUVM_REASON_GIVEBACK     9   /* a lender reclaimed a harvested chunk (give-back) */
/* every candidate with room is at its guest-traffic budget
 * (lend_traffic_mbyte_per_s) */
#define HUVM_REASON_LENDER_BUSY  10
#define HUVM_REASON_COUNT        11

/* Per-GPU roles. */
#define HUVM_ROLE_NONE      0   /* neither evicts to peers nor lends */
#define HUVM_ROLE_HARVESTER 1   /* evicts to peers, does not lend */
#define HUVM_ROLE_LENDER    2   /* lends spare memory, evicts only to host */
#define HUVM_ROLE_BOTH      3
#define HUVM_ROLE_COUNT     4

/* Peer choice. */
#define HUVM_PEER_SELECT_MOST_FREE    0
#define HUVM_PEER_SELECT_FEWEST_LENT  1   /* the published prototype: fewest chunks already harvested */
#define HUVM_PEER_SELECT_BW_WEIGHTED  2   /* most free memory weighted by link bandwidth */
#define HUVM_PEER_SELECT_ROUND_ROBIN  3
#define HUVM_PEER_SELECT_FASTEST_LINK 4   /* the fastest link with room; among equal links, fewest lent */
#define HUVM_PEER_SELECT_COUNT        5

/* Fetch-back of harvested data on a fault. */
#define HUVM_FETCH_MIGRATE    0   /* migrate back to the faulting GPU (upstream peer->local copy) */
#define HUVM_FETCH_REMOTE_MAP 1   /* map the peer's copy remotely over NVLink while it stays there */
#define HUVM_FETCH_COUNT      2

/* How owner's data came back: huvm_account_fetch's mode, the fetch event's reason argument. The first two
 * are the fetch modes above. */
#define HUVM_FETCHED_MOVED      0   /* a whole chunk moved back to its owner (bytes and chunk) */
#define HUVM_FETCHED_REMOTE_MAP 1   /* a harvested chunk mapped remotely instead of moved */
/* pages copied to the owner (kernel: one UVM migration); a peer
 * keeps holding the chunk until HUVM_FETCHED_RELEASED */
#define HUVM_FETCHED_PAGES      2
/* the chunk left the peer after its pages were fetched
 * (HUVM_FETCHED_PAGES): chunk counters and gauges, no bytes */
#define HUVM_FETCHED_RELEASED   3
#define HUVM_FETCHED_COUNT      4

/* Prefetch. */
#define HUVM_PREFETCH_OFF       0
/* host -> faulting GPU, and peer -> faulting GPU for the window's
 * chunks held by peers (plan.peer_local_chunks) */
#define HUVM_PREFETCH_LOCAL     1
#define HUVM_PREFETCH_PEER      2   /* host -> peer, fetched back over NVLink on use */
#define HUVM_PREFETCH_MULTIPATH 3   /* split: host -> local and host -> peer (peer's own PCIe) at once */
/* the prototype's (uvm_prefetch_flags 3): host-resident chunks of the
 * window -> a peer, peer-resident ones -> the faulting GPU */
#define HUVM_PREFETCH_TWO_STAGE 4
#define HUVM_PREFETCH_COUNT     5

/* Presets (huvm_policy_t.preset; HUVM_PRESET_CUSTOM once any field differs from the preset). */
#define HUVM_PRESET_STOCK  0   /* host only: today's UVM */
#define HUVM_PRESET_ATC22  1   /* the published HUVM prototype (USENIX ATC'22) */
#define HUVM_PRESET_HUVM   2   /* ours, the default */
#define HUVM_PRESET_CUSTOM 3
#define HUVM_PRESET_COUNT  4

/* Link types. Not UVM's numbering: 570 inserted UVM_GPU_LINK_NVLINK_5 before C2C, so the module maps
 * UVM's link type to these explicitly (uvm_huvm_link_type()); values never change, new ones are appended. */
#define HUVM_LINK_NONE     0
#define HUVM_LINK_PCIE     1
#define HUVM_LINK_NVLINK_1 2
#define HUVM_LINK_NVLINK_2 3
#define HUVM_LINK_NVLINK_3 4
#define HUVM_LINK_NVLINK_4 5
#define HUVM_LINK_C2C      6
#define HUVM_LINK_NVLINK_5 7   /* Blackwell (UVM 570+); ABI 2.1 */
#define HUVM_LINK_COUNT    8

/* Backends (huvm_info.backend). */
#define HUVM_BACKEND_KERNEL 0   /* patched nvidia-uvm */
/* a bare core that a test drives in-process (tests/c, the
 * kernel-mode check, huvmlab's CoreNode); never a module's answer.
 * Value kept (SIM stays 2); named KTEST before issue 27, after a
 * retired test module */
#define HUVM_BACKEND_CORE   1
#define HUVM_BACKEND_SIM    2   /* simulated node */

/* GPU flags (huvm_gpu_info_t.flags). */
#define HUVM_GPU_FLAG_PRESENT           0x1 /* retained by UVM now (policy entries outlive GPUs) */
#define HUVM_GPU_FLAG_REPLAYABLE_FAULTS 0x2 /* can be a harvester */
#define HUVM_GPU_FLAG_PMA_EVICTION      0x4 /* PMA can ask UVM to evict (lender give-back works) */

/* Test events (HUVM_IOCTL_TEST_EVENT). */
#define HUVM_TEST_EVENT_EVICT    0   /* a root chunk of gpu must be evicted (count chunks) */
#define HUVM_TEST_EVENT_PREEVICT 1   /* run the pre-eviction worker once on gpu */
#define HUVM_TEST_EVENT_FAULT    2   /* faults on harvested data of gpu: fetch back count chunks */
#define HUVM_TEST_EVENT_GIVEBACK 3   /* memory pressure on lender gpu: give back count chunks */
#define HUVM_TEST_EVENT_PREFETCH 4   /* prefetch count chunks for gpu */
#define HUVM_TEST_EVENT_COUNT    5

/* Reset flags. */
#define HUVM_RESET_COUNTERS 0x1 /* counters go to zero; gauges (lent/harvested bytes) stay */

typedef struct {
    uint32_t abi_version;           /* In: HUVM_ABI_VERSION the caller was built with */
    uint32_t size;                  /* In: sizeof the params struct as the caller knows it */
    uint32_t module_abi_version;    /* Out: HUVM_ABI_VERSION of the module (set even on refusal) */
    uint32_t flags;                 /* In: must be 0 */
} huvm_hdr_t;

typedef struct {
    uint8_t uuid[16];
    char name[32];              /* e.g. "Tesla V100-SXM2-16GB" or "sim0" */
    uint64_t memory_bytes;          /* framebuffer usable by UVM */
    uint64_t free_bytes;            /* free now (PMA) */
    uint64_t pcie_mbyte_per_s;      /* line rate of the GPU's own host link, one direction */
    uint32_t flags;                 /* HUVM_GPU_FLAG_* */
    uint32_t pad;
} huvm_gpu_info_t;

typedef struct {
    uint32_t link_type;             /* HUVM_LINK_* */
    uint32_t link_count;            /* NVLink: number of links between the pair */
    uint64_t mbyte_per_s;           /* total line rate, one direction */
} huvm_link_t;

typedef struct {
    huvm_hdr_t hdr;
    uint32_t huvm_version;   /* Out: HUVM_VERSION */
    uint32_t backend;        /* Out: HUVM_BACKEND_* */
    uint32_t gpu_count;      /* Out: entries used in gpus[] and links[][] */
    uint32_t max_gpus;       /* Out: HUVM_MAX_GPUS */
    char upstream_version[16]; /* Out: "535.261.03" */
    huvm_gpu_info_t gpus[16];
    huvm_link_t links[16][16];  /* Out: links[a][b], a != b; HUVM_LINK_NONE when not peers */
    uint32_t error_field;    /* Out */
    uint32_t rmStatus;       /* Out */
} HUVM_GET_INFO_PARAMS;

/* Per-GPU policy flags (huvm_gpu_policy_t.flags). PREEVICT_ON_PRESSURE: the GPU pre-evicts only while it is
 * under real memory pressure (an allocation on it had to evict recently), not merely because its free memory
 * is below the pre-eviction reserve: a job that nearly fits is left alone. LEND_ABOVE_PEAK: as a lender it
 * lends only memory its own work has not used recently (it keeps room to return to its recent peak), so a
 * lender whose footprint spikes finds its memory free instead of waiting for a give-back. PREFETCH_FEEDBACK:
 * while fewer of its recent prefetched chunks were used than were evicted unused, it prefetches one chunk (a
 * probe) instead of prefetch_chunks: prefetching for a random access pattern only displaces its data.
 * PREFETCH_PROPORTIONAL: where that probe does not apply (or without PREFETCH_FEEDBACK), its window is
 * prefetch_chunks times the share of its recent prefetched chunks that were used (rounded up, at least 1): a
 * window that is partly wasted shrinks in proportion. */
#define HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE  0x1
#define HUVM_GPU_POLICY_LEND_ABOVE_PEAK       0x2
#define HUVM_GPU_POLICY_PREFETCH_FEEDBACK     0x4
#define HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL 0x8
#define HUVM_GPU_POLICY_FLAGS_KNOWN           0xf

typedef struct {
    uint8_t uuid[16];              /* the key: entries are kept by UUID, across GPU removal */
    uint32_t role;                  /* HUVM_ROLE_* */
    uint32_t flags;                 /* HUVM_GPU_POLICY_* (other bits must be 0) */
    uint64_t lend_limit_bytes;      /* at most this many bytes of other GPUs' data here; HUVM_UNLIMITED */
    uint64_t lend_reserve_bytes;    /* a lender always keeps this much free for its own work */
    uint32_t lend_traffic_mbyte_per_s; /* guests' data copied into or out of this GPU (evicted or prefetched
                                       onto it, fetched or given back from it) at most this many MB/s over
                                       HUVM_LEND_TRAFFIC_WINDOW_MS: while over it, it takes no new guests'
                                       chunks; 0 = no budget, else HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S ..
                                       HUVM_MAX_MBYTE_PER_S */
    uint32_t lend_slowdown_max_pct; /* the lender's slowdown bound T, % of its own work's speed: its
                                       guest-traffic budget and its lending above its peak keep it within T
                                       (docs/policy.md "Admission"); 0 = no bound, else 1..100 */
} huvm_gpu_policy_t;

typedef struct {
    uint64_t generation;         /* Out on get; In on set: 0 = unconditional, else must match */
    uint32_t preset;             /* HUVM_PRESET_*: the preset it came from, or CUSTOM */
    uint32_t peer_select;        /* HUVM_PEER_SELECT_* */
    uint32_t nvlink_only;        /* 1: only NVLink/C2C peers; 0 also PCIe peers (direct P2P) */
    uint32_t peer_usage_max_pct; /* a peer is eligible while its usage, with the chunk, is at most this % */
    uint32_t preevict_chunks;    /* free 2 MiB chunks a harvester keeps in reserve; 0 = off */
    uint32_t preevict_batch;     /* most chunks one pre-eviction pass evicts; >= 1 */
    uint32_t fetch_mode;         /* HUVM_FETCH_* */
    uint32_t prefetch_mode;      /* HUVM_PREFETCH_* */
    uint32_t prefetch_chunks;    /* chunks per prefetch, <= HUVM_PREFETCH_MAX_CHUNKS */
    uint32_t prefetch_stride;    /* distance between prefetched chunks, 1..HUVM_PREFETCH_MAX_STRIDE */
    uint32_t hysteresis_ms;      /* no peer eviction of a chunk fetched back this recently, nor
                                             onto a peer that itself evicted this recently */
    uint32_t gpu_count;          /* entries used in gpus[] */
    huvm_gpu_policy_t gpus[16];
} huvm_policy_t;

typedef struct {
    huvm_hdr_t hdr;
    huvm_policy_t policy;           /* Out */
    uint32_t error_field;      /* Out */
    uint32_t rmStatus;         /* Out */
} HUVM_GET_POLICY_PARAMS;

typedef struct {
    huvm_hdr_t hdr;
    huvm_policy_t policy;           /* In: node-wide settings replace the current ones; each listed GPU
                                       entry replaces the entry with that UUID; unlisted entries stay.
                                       Out: generation = the new generation */
    uint32_t error_field;      /* Out */
    uint32_t rmStatus;         /* Out */
} HUVM_SET_POLICY_PARAMS;

/* Per-GPU statistics. "this GPU" is the GPU the entry describes. */
typedef struct {
    uint64_t evict_to_peer;         /* counter chunks: 2 MiB chunks of this GPU evicted to a peer GPU */
    uint64_t evict_to_host;         /* counter chunks: 2 MiB chunks of this GPU evicted to host memory */
    uint64_t preevict_to_peer;      /* counter chunks: of evict_to_peer, evicted ahead of need by pre-eviction */
    uint64_t preevict_to_host;      /* counter chunks: of evict_to_host, evicted ahead of need by pre-eviction */
    uint64_t fetch_from_peer;       /* counter chunks: chunks of this GPU's data brought back from a peer */
    uint64_t fetch_from_host;       /* counter chunks: chunks of this GPU's data brought back from host */
    uint64_t remote_map;            /* counter chunks: harvested chunks mapped remotely instead of fetched */
    uint64_t prefetch_local;        /* counter chunks: chunks prefetched host to this GPU */
    uint64_t prefetch_to_peer;      /* counter chunks: chunks prefetched host to a peer on this GPU's behalf */
    uint64_t giveback;              /* counter chunks: harvested chunks this lender gave back (to host) */
    uint64_t host_reason[11];       /* counter chunks: evictions of this GPU that went to host, by reason */
    uint64_t faults;                /* counter faults: replayable faults serviced for this GPU */
    uint64_t fault_batches;         /* counter batches: fault batches serviced for this GPU */
    uint64_t bytes_from_peer;       /* counter bytes: bytes copied into this GPU from peers */
    uint64_t bytes_to_peer;         /* counter bytes: bytes copied from this GPU to peers */
    uint64_t bytes_from_host;       /* counter bytes: bytes copied into this GPU from host */
    uint64_t bytes_to_host;         /* counter bytes: bytes copied from this GPU to host */
    uint64_t lent_bytes;            /* gauge bytes: other GPUs' data held in this GPU's memory now */
    uint64_t harvested_bytes;       /* gauge bytes: this GPU's data held in peers' memory now */
    uint64_t lent_peak_bytes;       /* gauge bytes: highest lent_bytes since the last reset */
} huvm_gpu_counters_t;

/* Per GPU pair: pairs[owner][holder], owner's data held on holder. */
typedef struct {
    uint64_t evict_chunks;          /* counter chunks: owner's chunks evicted onto holder */
    uint64_t fetch_chunks;          /* counter chunks: owner's chunks fetched back from holder */
    uint64_t prefetch_chunks;       /* counter chunks: chunks prefetched host to holder for owner */
    uint64_t giveback_chunks;       /* counter chunks: owner's chunks holder gave back to host */
    uint64_t held_bytes;            /* gauge bytes: owner's data on holder now */
} huvm_pair_counters_t;

typedef struct {
    huvm_hdr_t hdr;
    uint64_t timestamp_ns;  /* Out: monotonic clock of the snapshot (sim: simulated time) */
    uint64_t generation;    /* Out: policy generation at the snapshot */
    uint32_t gpu_count;     /* Out */
    uint32_t pad;
    huvm_gpu_counters_t gpus[16];
    huvm_pair_counters_t pairs[16][16];
    uint32_t error_field;   /* Out */
    uint32_t rmStatus;      /* Out */
} HUVM_GET_STATS_PARAMS;

typedef struct {
    huvm_hdr_t hdr;
    uint32_t reset_flags;         /* In: HUVM_RESET_* */
    uint32_t pad;
    uint32_t error_field;         /* Out */
    uint32_t rmStatus;            /* Out */
} HUVM_RESET_STATS_PARAMS;

typedef struct {
    uint64_t id;                    /* stable id of the va_space (not a kernel pointer) */
    uint32_t pid;                   /* tgid of the process that created it */
    uint32_t uid;                   /* its owner's uid */
    char comm[16];
    uint32_t registered_gpus;       /* bit i: gpus[i] of GET_INFO registered in this va_space */
    uint32_t pad;
    uint64_t evict_to_peer;         /* counter chunks: this va_space's chunks evicted to a peer */
    uint64_t evict_to_host;         /* counter chunks: this va_space's chunks evicted to host */
    uint64_t fetch_from_peer;       /* counter chunks: this va_space's chunks fetched back from a peer */
    uint64_t fetch_from_host;       /* counter chunks: this va_space's chunks fetched back from host */
    uint64_t prefetch;              /* counter chunks: chunks prefetched for this va_space, any path */
    uint64_t harvested_bytes;       /* gauge bytes: this va_space's data on peers now */
} huvm_va_space_info_t;

typedef struct {
    huvm_hdr_t hdr;
    uint32_t start_index;   /* In: first entry to return (paging) */
    uint32_t count;         /* Out: entries filled */
    uint32_t total;         /* Out: va_spaces visible to the caller */
    uint32_t pad;
    huvm_va_space_info_t entries[64];
    uint32_t error_field;   /* Out */
    uint32_t rmStatus;      /* Out */
} HUVM_LIST_VA_SPACES_PARAMS;

/* Test only: describe a synthetic node (the patched module with no GPU registered) or check the sim's.
 * Replaces GPUs and links. */
typedef struct {
    huvm_hdr_t hdr;
    uint32_t gpu_count;      /* In: 1..HUVM_MAX_GPUS */
    uint32_t pad;
    huvm_gpu_info_t gpus[16];       /* In: uuid, name, memory_bytes, free_bytes, pcie, flags */
    huvm_link_t links[16][16];  /* In */
    uint32_t error_field;    /* Out */
    uint32_t rmStatus;       /* Out */
} HUVM_TEST_SET_NODE_PARAMS;

/* Test only: feed node events through the core (decisions, accounting, tracepoints). */
typedef struct {
    huvm_hdr_t hdr;
    uint32_t event;               /* In: HUVM_TEST_EVENT_* */
    uint32_t gpu;                 /* In: index of the GPU the event is about */
    uint32_t count;               /* In: chunks, 1..4096 */
    uint32_t flags;               /* In: EVICT: 1 = PMA-eviction context */
    uint64_t va;                  /* In: address of the first chunk (for traces) */
    uint32_t done;                /* Out: chunks handled */
    uint32_t to_peer;             /* Out: of done, chunks that went to (or came from) a peer */
    uint32_t last_dst;            /* Out: last destination: GPU index, or HUVM_MAX_GPUS for host */
    uint32_t last_reason;         /* Out: last HUVM_REASON_* */
    uint32_t error_field;         /* Out */
    uint32_t rmStatus;            /* Out */
} HUVM_TEST_EVENT_PARAMS;

/* The rates a lender's slowdown bound T (lend_slowdown_max_pct) weighs, per GPU: facts about the node that the
 * admin's tooling measures (`huvmctl rates set`, `huvmctl rates load` from `huvmctl calibrate`'s node file). With
 * the HBM bandwidth, T clamps the GPU's guest-traffic budget to hbm x T / (100 + T); with the give-back rate, T
 * sizes what a LEND_ABOVE_PEAK lender lends above its recent peak (else the host link's line rate is assumed).
 * Rates belong to the GPU in the slot: registering another GPU in it clears them. */
typedef struct {
    huvm_hdr_t hdr;
    uint8_t uuid[16];               /* In: the GPU (GET_INFO's uuid); it must be present */
    uint32_t hbm_mbyte_per_s;       /* In: its HBM bandwidth, MB/s; 0 = unknown, else <= HUVM_MAX_MBYTE_PER_S */
    uint32_t giveback_mbyte_per_s;  /* In: its give-back rate (GPU to host eviction), MB/s; 0 = unknown */
    uint32_t error_field;           /* Out */
    uint32_t rmStatus;              /* Out */
} HUVM_SET_GPU_RATES_PARAMS;

typedef struct {
    huvm_hdr_t hdr;
    uint32_t gpu_count;                 /* Out: entries used (GET_INFO's gpus[] order) */
    uint32_t pad;
    uint32_t hbm_mbyte_per_s[16];       /* Out: 0 = unknown */
    uint32_t giveback_mbyte_per_s[16];  /* Out: 0 = unknown (the host link's line rate is used) */
    uint32_t error_field;               /* Out */
    uint32_t rmStatus;                  /* Out */
} HUVM_GET_GPU_RATES_PARAMS;

/* Destination index meaning "host memory" in decisions, events and probes. */
#define HUVM_DEST_HOST 16

/* HUVM_ABI_END */

/* The policy fields: one row per settable field, the one declaration of its name (the struct member, the key
 * huvmctl, policy files, JSON and huvm-top use), its error_field code (HUVM_FIELD_<id>; GPU fields:
 * HUVM_FIELD_GPU_<id> within the entry), unit (HUVM_UNIT_<unit>), range, special values (HUVM_POLICY_FIELD_*)
 * and its value in each preset (stock, huvm-atc22, huvm). huvm_policy.c builds its descriptor array from the
 * rows (validation and presets loop over it; huvm_policy_field() exports it, to Python through cffi); cross-field
 * rules stay explicit code there. Rows are in struct order; docs/policy.md says how to add one.
 *
 * X(id, member, type, unit, min, max, special, choices, stock, atc22, huvm)
 *   choices: for ENUM and FLAGS, the prefix of the constants after HUVM_ ("ROLE_": HUVM_ROLE_*), else "". */
/* clang-format off: one row per field, its presets' values last */
#define HUVM_POLICY_FIELDS(X)                                                                            \
    X(PEER_SELECT,                                                                                       \
      peer_select,                                                                                       \
      uint32_t,                                                                                          \
      ENUM,                                                                                              \
      0,                                                                                                 \
      HUVM_PEER_SELECT_COUNT - 1,                                                                        \
      0,                                                                                                 \
      "PEER_SELECT_",                                                                                    \
      HUVM_PEER_SELECT_MOST_FREE,                                                                        \
      HUVM_PEER_SELECT_FEWEST_LENT,                                                                      \
      HUVM_PEER_SELECT_FASTEST_LINK)                                                                     \
    X(NVLINK_ONLY, nvlink_only, uint32_t, BOOL, 0, 1, 0, "", 1, 1, 1)                                    \
    X(PEER_USAGE_MAX_PCT,                                                                                \
      peer_usage_max_pct,                                                                                \
      uint32_t,                                                                                          \
      PERCENT,                                                                                           \
      HUVM_PEER_USAGE_PCT_MIN,                                                                           \
      HUVM_PEER_USAGE_PCT_MAX,                                                                           \
      0,                                                                                                 \
      "",                                                                                                \
      100,                                                                                               \
      85,                                                                                                \
      90)                                                                                                \
    X(PREEVICT_CHUNKS, preevict_chunks, uint32_t, CHUNKS, 0, HUVM_PREEVICT_MAX_CHUNKS, 0, "", 0, 50, 64) \
    X(PREEVICT_BATCH, preevict_batch, uint32_t, CHUNKS, 1, HUVM_PREEVICT_MAX_BATCH, 0, "", 1, 50, 64)    \
    X(FETCH_MODE,                                                                                        \
      fetch_mode,                                                                                        \
      uint32_t,                                                                                          \
      ENUM,                                                                                              \
      0,                                                                                                 \
      HUVM_FETCH_COUNT - 1,                                                                              \
      0,                                                                                                 \
      "FETCH_",                                                                                          \
      HUVM_FETCH_MIGRATE,                                                                                \
      HUVM_FETCH_MIGRATE,                                                                                \
      HUVM_FETCH_MIGRATE)                                                                                \
    X(PREFETCH_MODE,                                                                                     \
      prefetch_mode,                                                                                     \
      uint32_t,                                                                                          \
      ENUM,                                                                                              \
      0,                                                                                                 \
      HUVM_PREFETCH_COUNT - 1,                                                                           \
      0,                                                                                                 \
      "PREFETCH_",                                                                                       \
      HUVM_PREFETCH_OFF,                                                                                 \
      HUVM_PREFETCH_TWO_STAGE,                                                                           \
      HUVM_PREFETCH_TWO_STAGE)                                                                           \
    X(PREFETCH_CHUNKS, prefetch_chunks, uint32_t, CHUNKS, 0, HUVM_PREFETCH_MAX_CHUNKS, 0, "", 0, 16, 16) \
    X(PREFETCH_STRIDE, prefetch_stride, uint32_t, CHUNKS, 1, HUVM_PREFETCH_MAX_STRIDE, 0, "", 1, 2, 2)   \
    X(HYSTERESIS_MS, hysteresis_ms, uint32_t, MS, 0, HUVM_HYSTERESIS_MAX_MS, 0, "", 0, 0, 5)
/* clang-format on */

/* huvm's lend_reserve_bytes is computed per GPU (5 % of its memory, huvm_policy.c): the row's 0 stands for it. */
/* clang-format off: one row per field, its presets' values last */
#define HUVM_GPU_POLICY_FIELDS(X)                                                                                     \
    X(ROLE, role, uint32_t, ENUM, 0, HUVM_ROLE_COUNT - 1, 0, "ROLE_", HUVM_ROLE_NONE, HUVM_ROLE_BOTH, HUVM_ROLE_BOTH) \
    X(FLAGS,                                                                                                          \
      flags,                                                                                                          \
      uint32_t,                                                                                                       \
      FLAGS,                                                                                                          \
      0,                                                                                                              \
      HUVM_GPU_POLICY_FLAGS_KNOWN,                                                                                    \
      0,                                                                                                              \
      "GPU_POLICY_",                                                                                                  \
      0,                                                                                                              \
      0,                                                                                                              \
      HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE | HUVM_GPU_POLICY_LEND_ABOVE_PEAK | HUVM_GPU_POLICY_PREFETCH_FEEDBACK |    \
          HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL)                                                                      \
    X(LEND_LIMIT,                                                                                                     \
      lend_limit_bytes,                                                                                               \
      uint64_t,                                                                                                       \
      BYTES,                                                                                                          \
      0,                                                                                                              \
      HUVM_UNLIMITED,                                                                                                 \
      HUVM_POLICY_FIELD_UNLIMITED,                                                                                    \
      "",                                                                                                             \
      HUVM_UNLIMITED,                                                                                                 \
      HUVM_UNLIMITED,                                                                                                 \
      HUVM_UNLIMITED)                                                                                                 \
    X(LEND_RESERVE, lend_reserve_bytes, uint64_t, BYTES, 0, HUVM_MAX_MEMORY_BYTES, 0, "", 0, 0, 0)                    \
    X(LEND_TRAFFIC,                                                                                                   \
      lend_traffic_mbyte_per_s,                                                                                       \
      uint32_t,                                                                                                       \
      MBYTE_PER_S,                                                                                                    \
      HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S,                                                                              \
      HUVM_MAX_MBYTE_PER_S,                                                                                           \
      HUVM_POLICY_FIELD_ZERO_OFF,                                                                                     \
      "",                                                                                                             \
      0,                                                                                                              \
      0,                                                                                                              \
      0)                                                                                                              \
    X(LEND_SLOWDOWN, lend_slowdown_max_pct, uint32_t, PERCENT, 1, 100, HUVM_POLICY_FIELD_ZERO_OFF, "", 0, 0, 2)
/* clang-format on */

/* Layout checks: a change here is an ABI change (bump HUVM_ABI_VERSION_MAJOR). */
#define HUVM_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
HUVM_ABI_ASSERT(sizeof(huvm_hdr_t) == 16, "huvm_hdr_t");
HUVM_ABI_ASSERT(sizeof(huvm_gpu_info_t) == 80, "huvm_gpu_info_t");
HUVM_ABI_ASSERT(sizeof(huvm_link_t) == 16, "huvm_link_t");
HUVM_ABI_ASSERT(sizeof(huvm_gpu_policy_t) == 48, "huvm_gpu_policy_t");
HUVM_ABI_ASSERT(sizeof(huvm_policy_t) == 56 + 16 * 48, "huvm_policy_t");
HUVM_ABI_ASSERT(sizeof(huvm_gpu_counters_t) == 8 * 30, "huvm_gpu_counters_t");
HUVM_ABI_ASSERT(sizeof(huvm_pair_counters_t) == 40, "huvm_pair_counters_t");
HUVM_ABI_ASSERT(sizeof(huvm_va_space_info_t) == 88, "huvm_va_space_info_t");
/* Each row names a member of its struct, of its type's size, and a range its type holds: a row and the struct
 * cannot drift (a row whose member does not exist does not compile). */
#define HUVM_ABI_MEMBER_SIZE(type, field) sizeof(((type *)0)->field)
#define HUVM_ABI_RANGE_OK(lo, hi, stock, atc22, huvm)                                            \
    ((uint64_t)(hi) - (uint64_t)(lo) <= (uint64_t)(hi) && (uint64_t)(stock) <= (uint64_t)(hi) && \
     (uint64_t)(atc22) <= (uint64_t)(hi) && (uint64_t)(huvm) <= (uint64_t)(hi))
#define HUVM_ABI_ASSERT_ROW(st, code, member, type, unit, lo, hi, stock, atc22, huvm)                          \
    HUVM_ABI_ASSERT(HUVM_ABI_MEMBER_SIZE(st, member) == sizeof(type) && (type)(hi) == (hi) &&                  \
                        HUVM_ABI_RANGE_OK(lo, hi, stock, atc22, huvm) && HUVM_UNIT_##unit < HUVM_UNIT_COUNT && \
                        code < HUVM_FIELD_GPU_STRIDE,                                                          \
                    #st " row " #member)
#define HUVM_ABI_ASSERT_NODE_FIELD(id, member, type, unit, lo, hi, special, choices, stock, atc22, huvm) \
    HUVM_ABI_ASSERT_ROW(huvm_policy_t, HUVM_FIELD_##id, member, type, unit, lo, hi, stock, atc22, huvm);
#define HUVM_ABI_ASSERT_GPU_FIELD(id, member, type, unit, lo, hi, special, choices, stock, atc22, huvm) \
    HUVM_ABI_ASSERT_ROW(huvm_gpu_policy_t, HUVM_FIELD_GPU_##id, member, type, unit, lo, hi, stock, atc22, huvm);
HUVM_POLICY_FIELDS(HUVM_ABI_ASSERT_NODE_FIELD)
HUVM_GPU_POLICY_FIELDS(HUVM_ABI_ASSERT_GPU_FIELD)
HUVM_ABI_ASSERT(HUVM_DEST_HOST == HUVM_MAX_GPUS, "host destination index");
#define HUVM_ABI_ARRAY_LEN(type, field) (sizeof(((type *)0)->field) / sizeof(((type *)0)->field[0]))
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(huvm_gpu_counters_t, host_reason) == HUVM_REASON_COUNT, "host_reason[]");
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(HUVM_GET_INFO_PARAMS, gpus) == HUVM_MAX_GPUS, "info gpus[]");
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(HUVM_GET_INFO_PARAMS, links) == HUVM_MAX_GPUS, "info links[]");
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(huvm_policy_t, gpus) == HUVM_MAX_GPUS, "policy gpus[]");
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(HUVM_GET_STATS_PARAMS, pairs) == HUVM_MAX_GPUS, "stats pairs[]");
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(HUVM_LIST_VA_SPACES_PARAMS, entries) == HUVM_MAX_VA_SPACES_PER_CALL, "entries[]");
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(huvm_gpu_info_t, uuid) == HUVM_UUID_LEN, "uuid[]");
HUVM_ABI_ASSERT(sizeof(HUVM_GET_INFO_PARAMS) % 8 == 0, "GET_INFO");
HUVM_ABI_ASSERT(sizeof(HUVM_GET_POLICY_PARAMS) % 8 == 0, "GET_POLICY");
HUVM_ABI_ASSERT(sizeof(HUVM_SET_POLICY_PARAMS) % 8 == 0, "SET_POLICY");
HUVM_ABI_ASSERT(sizeof(HUVM_GET_STATS_PARAMS) % 8 == 0, "GET_STATS");
HUVM_ABI_ASSERT(sizeof(HUVM_RESET_STATS_PARAMS) % 8 == 0, "RESET_STATS");
HUVM_ABI_ASSERT(sizeof(HUVM_LIST_VA_SPACES_PARAMS) % 8 == 0, "LIST_VA_SPACES");
HUVM_ABI_ASSERT(sizeof(HUVM_TEST_SET_NODE_PARAMS) % 8 == 0, "TEST_SET_NODE");
HUVM_ABI_ASSERT(sizeof(HUVM_TEST_EVENT_PARAMS) % 8 == 0, "TEST_EVENT");
HUVM_ABI_ASSERT(sizeof(HUVM_SET_GPU_RATES_PARAMS) == 48, "SET_GPU_RATES");
HUVM_ABI_ASSERT(sizeof(HUVM_GET_GPU_RATES_PARAMS) == 160, "GET_GPU_RATES");
HUVM_ABI_ASSERT(HUVM_ABI_ARRAY_LEN(HUVM_GET_GPU_RATES_PARAMS, hbm_mbyte_per_s) == HUVM_MAX_GPUS, "rates hbm[]");

#endif /* _UVM_HUVM_IOCTL_H */
