/*
 * huvm: simulated node, the C API as cffi sees it. SPDX-License-Identifier: MIT
 *
 * pyctl/huvm/_build.py #includes this file into the extension and feeds the part between the CDEF markers
 * to cffi's cdef (comments dropped; only integer-literal #defines, plain structs and prototypes in there).
 * driver/sim/huvm_sim.h is the C-side entry point and documents the model.
 */
#ifndef __HUVM_SIM_CDEF_H__
#define __HUVM_SIM_CDEF_H__

#include <stddef.h>
#include <stdint.h>

/* HUVM_SIM_CDEF_BEGIN */
#define HUVM_SIM_MAX_GPUS    16
#define HUVM_SIM_MAX_TENANTS 64
#define HUVM_SIM_NAME_LEN    32

/* Bounds the simulator enforces on a node and its tenants (the Python tools read them from here). */
#define HUVM_SIM_MAX_STEPS             1000000u                /* repetitions of one tenant's trace */
/* 2^48: one op, a start time or a static footprint
 * (bytes) at most ~3 days / 256 TiB: sums stay
 * in 64 bits */
#define HUVM_SIM_MAX_OP_NS             281474976710656ull
#define HUVM_SIM_MAX_MEMORY_BYTES      1125899906842624ull     /* 2^50: 1 PiB per GPU */
#define HUVM_SIM_MAX_MBYTE_PER_S       16777216ull             /* 2^24: 16 TB/s per link or PCIe direction */
#define HUVM_SIM_MAX_COST_NS           1000000000ull           /* any one UVM cost at most 1 s */
#define HUVM_SIM_MAX_FAULT_BATCH       65536u                  /* fault_batch_max */
#define HUVM_SIM_MAX_FAULTS_PER_CHUNK  512u                  /* fault entries per faulted chunk */
#define HUVM_SIM_MAX_LINK_COUNT        64u                     /* NVLink links between two GPUs */
#define HUVM_SIM_MAX_HOST_MEMORY_BYTES 72057594037927936ull /* 2^56 */

/* Partial-block touches (huvm_sim_tenant_spec_t.touch_pages): a 2 MiB block is 32 groups of 64 KiB (the GPU's
 * big page, the granularity a GPU fault is serviced at: uvm_perf_prefetch.c grows faulted 4 KiB pages to it);
 * bit k of a touch's mask is bytes [k, k + 1) x 64 KiB of its block. UVM's density prefetcher
 * (uvm_perf_prefetch.c, compute_prefetch_region) widens a fault to the largest subregion of the block's
 * bitmap tree, on the faulting leaf's path, more than uvm_perf_prefetch_threshold (default 51) % of which is
 * resident on the GPU or faulting (huvm_sim_config_t.prefetch_threshold). */
#define HUVM_SIM_PAGE_GROUPS        32u
#define HUVM_SIM_PAGE_GROUP_BYTES   65536u
#define HUVM_SIM_PAGES_ALL          0xffffffffu
#define HUVM_SIM_PREFETCH_THRESHOLD 51u /* upstream's default uvm_perf_prefetch_threshold */

/* Where a chunk is, in huvm_sim_chunk_where(). */
#define HUVM_SIM_LOC_NONE 0       /* not populated (never touched, or freed) */
#define HUVM_SIM_LOC_GPU  1       /* on a GPU (its owner, or a peer holding it) */
#define HUVM_SIM_LOC_HOST 2       /* in host memory */

/* huvm_sim_config_t.flags */
#define HUVM_SIM_FLAG_UNLIMITED 0x1     /* the "ideal" node: GPUs never run out of memory */
#define HUVM_SIM_FLAG_NVSWITCH  0x2     /* NVLink through NVSwitch: per-GPU ports, not per-pair links */

/* Error report: which field or record was refused, and why. */
typedef struct {
    uint32_t status;                        /* HUVM_NV_* */
    int32_t record;                        /* index of the offending record (op, touch, chunk) or -1 */
    char field[64];                     /* e.g. "gpus[2].reserved_bytes", "tenants[1].touch_chunk" */
    char message[192];
} huvm_sim_error_t;

/* The node. Bandwidths in MB/s (10^6 bytes per second) per direction, like the ABI. */
typedef struct {
    uint32_t gpu_count;                     /* 1..HUVM_SIM_MAX_GPUS */
    uint32_t flags;                         /* HUVM_SIM_FLAG_* */
    char gpu_name[16][32];
    uint64_t gpu_memory_bytes[16];          /* framebuffer */
    uint64_t gpu_reserved_bytes[16];        /* not usable by UVM (CUDA context, driver); < memory */
    uint64_t pcie_mbyte_per_s[16];          /* effective host link bandwidth, each direction */
    uint32_t link_type[16][16];             /* HUVM_LINK_* (NONE: no direct peer path) */
    uint32_t link_count[16][16];            /* NVLink links between the pair */
    uint64_t link_mbyte_per_s[16][16];      /* total per direction between the pair */
    uint64_t nvswitch_port_mbyte_per_s[16]; /* FLAG_NVSWITCH: a GPU's NVLink bandwidth, each direction */
    uint64_t host_memory_bytes;             /* host memory for evicted data; 0 = unlimited */
    /* UVM costs (docs/simulator.md) */
    uint64_t fault_batch_ns;                /* fixed cost of one replayable fault batch (fetch, replay) */
    uint64_t fault_service_ns;              /* per faulted 2 MiB VA block: service, map, unmap */
    uint64_t populate_ns;                   /* first touch: zero-fill a new chunk on the GPU */
    uint64_t pcie_latency_ns;               /* per transfer setup over PCIe */
    uint64_t nvlink_latency_ns;             /* per transfer setup over NVLink */
    uint32_t fault_batch_max;               /* faults per batch (uvm_perf_fault_batch_count, 256) */
    uint32_t faults_per_chunk;              /* fault buffer entries per faulted chunk (>= 1) */
    uint64_t sample_interval_ns;            /* memory-over-time sampling period; 0 = no samples */
    uint32_t max_samples;                   /* when reached, samples are thinned 2:1 and the period doubles */
    uint32_t pad;
    /* PCIe switches: GPUs with the same nonzero pcie_switch[g] (1..16) share that switch's uplink to the
     * host, pcie_switch_mbyte_per_s[id - 1] each direction; 0 = the GPU has its own full link. */
    uint32_t pcie_switch[16];
    uint64_t pcie_switch_mbyte_per_s[16];
    uint64_t peer_fault_service_ns;         /* per faulted 2 MiB block whose data is on a peer (service,
                                               unmap on the holder, map on the owner) */
    uint64_t lend_chunk_ns;                 /* what a lender's running tenants lose per guest chunk copied
                                               into or out of its memory (HBM time of the copy) */
    uint64_t migrate_service_ns;            /* per 2 MiB block migrated without a fault (prefetch, to or
                                               from a peer ahead of need), besides its copy */
    uint64_t evict_service_ns;              /* per 2 MiB block moved GPU -> host (eviction, give-back),
                                               besides its copy */
    uint32_t prefetch_threshold;            /* uvm_perf_prefetch_threshold, 1..100 (upstream's default 51;
                                               the HUVM prototype's driver: 1) */
    uint32_t fault_entries_per_group;       /* what fills a fault batch of fault_batch_max entries: 0, each
                                               faulted block is one entry (the model's default); 1..16, each
                                               64 KiB group a fault brings is this many entries (16: one per
                                               4 KiB page, as the fault buffer holds them) */
} huvm_sim_config_t;

/* One workload on one GPU. Arrays are copied by huvm_sim_add_tenant. A tenant with n_ops == 0 is idle:
 * it only holds static_bytes. Chunk ids are in the tenant's own space (2 MiB units from va_base). */
typedef struct {
    char name[32];
    uint32_t gpu;                    /* GPU index it runs on (owner of its data) */
    uint32_t managed;                /* 1: UVM managed memory (demand paged, evictable);
                                               0: cudaMalloc (resident from allocation, never evicted) */
    uint32_t steps;                  /* repetitions of the trace; 0 = background (loops until every
                                               foreground tenant is done) */
    uint32_t n_ops;
    uint32_t n_chunks;
    uint32_t n_touches;              /* = op_first_touch[n_ops] */
    uint64_t start_ns;               /* when it starts */
    uint64_t static_bytes;           /* cudaMalloc'd at start and held (idle footprint) */
    uint64_t va_base;                /* VA of chunk 0 (probes); 0 = (tenant index + 1) << 40 */
    const uint64_t *op_time_ns;             /* [n_ops] compute time of each op */
    const uint32_t *op_first_touch;         /* [n_ops + 1] CSR offsets into touch_* */
    const uint32_t *touch_chunk;            /* [n_touches] */
    const uint8_t *touch_mode;             /* [n_touches] 0 read, 1 write-new, 2 read-modify-write */
    const int32_t *chunk_alloc_op;         /* [n_chunks] -1 = live before the first op */
    const int32_t *chunk_free_op;          /* [n_chunks] -1 = live after the last op */
    uint32_t host_resident;          /* 1 (managed only): the chunks live before the first op start in
                                               host memory, first written by the CPU, as a buffer a program
                                               fills before its kernels run */
    uint32_t pad;
    /* Collectives (NCCL all-reduce, expert-parallel all-to-all): op k sends op_link_bytes[k] to every GPU of
     * link_send_mask and receives as much from every GPU of link_recv_mask, over the links peer eviction uses
     * (a pair without a peer path: through the host, both GPUs' PCIe); the op ends when its compute and
     * these copies have (overlapped). NULL or both masks 0: no collectives. */
    const uint64_t *op_link_bytes;         /* [n_ops] */
    uint32_t link_send_mask;         /* bit g: GPU g (never the tenant's own) */
    uint32_t link_recv_mask;
    uint32_t record_ops;             /* 1: keep every op's end time (huvm_sim_tenant_ops) */
    uint32_t pad2;
    /* [n_touches] the 64 KiB groups of its block each touch reads or writes (HUVM_SIM_PAGE_GROUPS bits,
     * nonzero); NULL: every touch is the whole block (HUVM_SIM_PAGES_ALL). A touch faults unless all its
     * groups are resident on the GPU; the fault copies only the missing groups the density prefetcher's
     * region holds (GPU memory is still taken per 2 MiB block). */
    const uint32_t *touch_pages;
} huvm_sim_tenant_spec_t;

/* Per-tenant outcome. Times are simulated ns. */
typedef struct {
    uint64_t start_ns;
    uint64_t end_ns;                        /* when its last foreground step ended (0 if not done) */
    uint64_t runtime_ns;                    /* end - start (foreground) or time run (background) */
    uint64_t steps_done;
    uint64_t ops_done;
    uint64_t touches;                       /* chunk touches processed */
    uint64_t compute_ns;                    /* sum of op compute times */
    uint64_t fault_stall_ns;                /* time stalled servicing faults (incl. sync evictions) */
    uint64_t remote_stall_ns;               /* extra time from remote-mapped accesses beyond compute */
    uint64_t inflight_wait_ns;              /* waits for prefetches still in flight */
    uint64_t faults;                        /* faulted chunks */
    uint64_t fault_batches;
    uint64_t first_touches;                 /* faults that populated a new chunk */
    uint64_t remote_touches;                /* touches served by a remote mapping */
    uint64_t resident_chunks;               /* its GPU-resident chunks at the end (own GPU) */
    uint64_t peer_chunks;                   /* its chunks on peers at the end */
    uint64_t host_chunks;                   /* its chunks in host memory at the end */
    uint32_t done;
    uint32_t pad;
    uint64_t alloc_stall_ns;                /* time stalled making room for its cudaMalloc allocations
                                               (evictions, give-back), its start-up included */
    uint64_t lend_stall_ns;                 /* time its ops lost to guests' copies in its GPU's memory
                                               (lend_chunk_ns per guest chunk moved in or out) */
    uint64_t link_stall_ns;                 /* time its ops waited for their collectives beyond compute */
} huvm_sim_tenant_result_t;

/* Bytes moved per path, and how long each link direction was busy. */
typedef struct {
    uint64_t host_to_gpu[16];               /* over each GPU's PCIe, host -> GPU */
    uint64_t gpu_to_host[16];               /* over each GPU's PCIe, GPU -> host */
    uint64_t gpu_to_gpu[16][16];            /* [src][dst] over NVLink (migrations) */
    uint64_t remote_read[16][16];           /* [holder][user] remote-mapped accesses over NVLink */
    uint64_t pcie_h2d_busy_ns[16];
    uint64_t pcie_d2h_busy_ns[16];
    uint64_t nvlink_busy_ns[16][16];        /* per-pair link, or [g][g] = NVSwitch port of g (egress) */
    uint64_t collective[16][16];            /* [src][dst] tenants' own collectives (all-reduce, all-to-all) */
} huvm_sim_traffic_t;

/* One memory sample (bytes per GPU). */
typedef struct {
    uint64_t t_ns;
    uint64_t own_bytes[16];                 /* GPU's own tenants' data resident on it (managed + pinned) */
    uint64_t guest_bytes[16];               /* other GPUs' data held on it (lent) */
    uint64_t free_bytes[16];
    uint64_t peer_bytes[16];                /* GPU's data held on peers (harvested) */
    uint64_t host_bytes[16];                /* GPU's data evicted to host */
} huvm_sim_sample_t;

typedef struct huvm_sim huvm_sim_t;

/* Fill cfg with the C tests' defaults (zero GPUs; the earlier published-figure costs, no per-path services;
 * the model's measured defaults are huvm.sim.config.Costs, docs/simulator.md). */
void huvm_sim_config_defaults(huvm_sim_config_t *cfg);
/* Validate cfg and create the node with the core in preset (HUVM_PRESET_*). NULL on error (*err filled). */
huvm_sim_t *huvm_sim_create(const huvm_sim_config_t *cfg, uint32_t preset, huvm_sim_error_t *err);
void huvm_sim_destroy(huvm_sim_t *sim);
/* Validate and copy a tenant; returns its index or -1 (*err filled). Only before the run starts. */
int32_t huvm_sim_add_tenant(huvm_sim_t *sim, const huvm_sim_tenant_spec_t *spec, huvm_sim_error_t *err);
/* Run until every foreground tenant is done or simulated time reaches until_ns (HUVM_UNLIMITED: no limit).
 * Returns HUVM_NV_OK, or an error (*err: e.g. a cudaMalloc that cannot fit). Can be called again. */
uint32_t huvm_sim_run(huvm_sim_t *sim, uint64_t until_ns, huvm_sim_error_t *err);
/* 1 when every foreground tenant is done. */
uint32_t huvm_sim_finished(const huvm_sim_t *sim);
uint64_t huvm_sim_now(const huvm_sim_t *sim);
/* The ABI's commands through the core's dispatch (as privileged, tests allowed). params is a params struct
 * of params_size bytes; the status is also in its rmStatus. */
uint32_t huvm_sim_ioctl(huvm_sim_t *sim, uint32_t cmd, void *params, uint32_t params_size);
uint32_t huvm_sim_tenant_count(const huvm_sim_t *sim);
uint32_t huvm_sim_tenant_result(const huvm_sim_t *sim, uint32_t tenant, huvm_sim_tenant_result_t *out);
/* End time of each completed step of a tenant; returns the number written (at most n). */
uint32_t huvm_sim_tenant_steps(const huvm_sim_t *sim, uint32_t tenant, uint64_t *out, uint32_t n);
/* End time of each op a tenant with record_ops ran, in order (at most HUVM_SIM_MAX_OP_RECORDS kept); returns
 * the number written (at most n). */
#define HUVM_SIM_MAX_OP_RECORDS 4194304u
uint32_t huvm_sim_tenant_ops(const huvm_sim_t *sim, uint32_t tenant, uint64_t *out, uint32_t n);
void huvm_sim_traffic(const huvm_sim_t *sim, huvm_sim_traffic_t *out);
uint32_t huvm_sim_sample_count(const huvm_sim_t *sim);
uint32_t huvm_sim_samples(const huvm_sim_t *sim, huvm_sim_sample_t *out, uint32_t n);
/* Where chunk `chunk` of tenant is: HUVM_SIM_LOC_*; *holder = GPU index when on a GPU. */
uint32_t huvm_sim_chunk_where(const huvm_sim_t *sim, uint32_t tenant, uint32_t chunk, uint32_t *holder);
/* Self-check of the model's invariants (list counts vs chunk states, memory bounds); 0 = consistent,
 * else the number of violations (details in *err). */
uint32_t huvm_sim_check(const huvm_sim_t *sim, huvm_sim_error_t *err);
/* Calibration: the time (ns) `chunks` back-to-back 2 MiB moves of one path take through the link model from
 * time 0 on GPU gpu, as background copies (HUVM_SIM_PATH_*). Only on a node that has not run (it occupies the
 * links): 0 when the node has run, the GPU or the path is unknown, or chunks is 0. */
#define HUVM_SIM_PATH_COPY     0       /* host -> GPU copy, no per-block service (cudaMemcpy, pinned) */
#define HUVM_SIM_PATH_PREFETCH 1       /* host -> GPU migration without a fault (migrate_service_ns) */
#define HUVM_SIM_PATH_EVICT    2       /* GPU -> host migration (evict_service_ns) */
uint64_t huvm_sim_path_probe(huvm_sim_t *sim, uint32_t path, uint32_t gpu, uint32_t chunks);
/* UVM's density prefetcher on one block: the 64 KiB groups a fault on `faulted` brings to a GPU that holds
 * `resident` (faulted, widened by uvm_perf_prefetch.c's tree rule at `threshold` %, 1..100; upstream's
 * default is HUVM_SIM_PREFETCH_THRESHOLD). */
uint32_t huvm_sim_prefetch_region(uint32_t resident, uint32_t faulted, uint32_t threshold);

/* HUVM_SIM_CDEF_END */

#endif /* __HUVM_SIM_CDEF_H__ */
