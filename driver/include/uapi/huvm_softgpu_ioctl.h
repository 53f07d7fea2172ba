/*
 * huvm-softgpu: emulated Volta GPUs behind nvidia.ko's nvUvmInterface* API (test hardware only).
 * SPDX-License-Identifier: MIT
 *
 * The ioctl ABI of /dev/huvm-softgpu: the "RM-lite" control device that user space uses where a real
 * system would use nvidia.ko's RM API (clients, GPU VA-space objects, channels), plus the emulated SM
 * (access batches run "from the GPU") and test knobs. Consumers: driver/softgpu (kernel) and pyctl's
 * huvm.softgpu (cffi).
 *
 * Conventions (those of uvm_huvm_ioctl.h):
 * - Raw command numbers: SOFTGPU_IOCTL_BASE(i) = 1900 + i (far from UVM's 1-78, 200+ and huvm's 1800+).
 * - Fixed-width fields, explicit padding, 64-bit fields 8-byte aligned, every struct a multiple of 8.
 * - Every params struct starts with `abi_version` and `size` (checked before anything else) and ends with
 *   the NV_STATUS `rmStatus`. The ioctl itself returns 0 unless the struct could not be copied (-EFAULT)
 *   or the command is unknown (-ENOTTY); all other errors are in rmStatus.
 *
 * Parsing rules (pyctl feeds the part between the markers to cffi's cdef): only #define NAME <integer>,
 * typedef'd structs of uint8_t/uint16_t/uint32_t/uint64_t/int32_t/int64_t/char fields and arrays, comments.
 */
#ifndef _HUVM_SOFTGPU_IOCTL_H
#define _HUVM_SOFTGPU_IOCTL_H

#if defined(__KERNEL__)
#include <linux/types.h>
#else
#include <stdint.h>
#endif

/* SOFTGPU_ABI_BEGIN */

#define SOFTGPU_ABI_VERSION  0x00010000
#define SOFTGPU_MAX_GPUS     8
#define SOFTGPU_UUID_LEN     16
#define SOFTGPU_NAME_LEN     32
#define SOFTGPU_MAX_ACCESSES 4096

/* Commands (raw numbers). */
#define SOFTGPU_IOCTL_GET_INFO       1901
#define SOFTGPU_IOCTL_CREATE_VASPACE 1902
#define SOFTGPU_IOCTL_CREATE_CHANNEL 1903
#define SOFTGPU_IOCTL_DESTROY_OBJECT 1904
#define SOFTGPU_IOCTL_SM_ACCESS      1905
#define SOFTGPU_IOCTL_FOREIGN_ALLOC  1906
#define SOFTGPU_IOCTL_FOREIGN_FREE   1907
#define SOFTGPU_IOCTL_SET_KNOB       1908
#define SOFTGPU_IOCTL_GET_COUNTERS   1909

/* Link between two emulated GPUs (SOFTGPU_GET_INFO_PARAMS.link_type). */
#define SOFTGPU_LINK_NONE    0
#define SOFTGPU_LINK_PCIE    1
#define SOFTGPU_LINK_NVLINK2 2

/* SM access types (softgpu_access_t.type). */
#define SOFTGPU_ACCESS_READ       0   /* read size bytes: into data (if set) and/or verified against seed */
#define SOFTGPU_ACCESS_WRITE      1   /* write size bytes: from data (if set), else the seed pattern */
#define SOFTGPU_ACCESS_ATOMIC_INC 2   /* 32-bit atomic increment at va (size must be 4) */
#define SOFTGPU_ACCESS_PREFETCH   3   /* translate only; faults are prefetch faults */

/* softgpu_access_t.flags */
#define SOFTGPU_ACCESS_FLAG_VERIFY  1   /* READ: compare every 8-byte word w at VA a with (seed ^ a) */
#define SOFTGPU_ACCESS_FLAG_NO_WAIT 2   /* do not wait for a replay: report the first fault and stop */

/* Knobs (SOFTGPU_SET_KNOB_PARAMS.knob); per GPU unless noted. */
#define SOFTGPU_KNOB_COPY_MBPS            1   /* CE bandwidth throttle in MB/s, 0 = off */
#define SOFTGPU_KNOB_LINK_LATENCY_US      2   /* extra latency per peer CE launch, 0 = off */
#define SOFTGPU_KNOB_FAIL_PMA_ALLOC       3   /* fail the next N PMA allocations of this GPU with NO_MEMORY */
#define SOFTGPU_KNOB_TLB_DROP_INVALIDATES 4 /* 1: this GPU's TLB invalidates keep the SM's (user VA space) entries */

/* Counters (SOFTGPU_GET_COUNTERS_PARAMS.gpus[g].counters[i]). */
#define SOFTGPU_CTR_GPFIFO_ENTRIES   0   /* GPFIFO entries executed */
#define SOFTGPU_CTR_METHODS          1   /* methods executed */
#define SOFTGPU_CTR_CE_LAUNCHES      2   /* CE LAUNCH_DMA executed */
#define SOFTGPU_CTR_CE_BYTES         3   /* bytes copied or set by the CE */
#define SOFTGPU_CTR_PEER_BYTES       4   /* CE bytes that went to or came from a peer FB */
#define SOFTGPU_CTR_SEM_RELEASES     5   /* semaphore releases (host + CE) */
#define SOFTGPU_CTR_ACQUIRE_PARKS    6   /* times a channel parked on an unsatisfied acquire */
#define SOFTGPU_CTR_FAULTS           7   /* replayable fault entries written */
#define SOFTGPU_CTR_REPLAYS          8   /* replay methods executed */
#define SOFTGPU_CTR_CANCELS          9   /* cancel methods executed */
#define SOFTGPU_CTR_INTERRUPTS       10  /* top-half calls into UVM */
#define SOFTGPU_CTR_RC_ERRORS        11  /* channels stopped with an RC error */
#define SOFTGPU_CTR_UNEMULATED       12  /* methods / calls refused as not emulated */
#define SOFTGPU_CTR_PMA_ALLOC_PAGES  13  /* PMA pages allocated */
#define SOFTGPU_CTR_PMA_EVICTIONS    14  /* evictPages/evictRange callbacks made into UVM */
#define SOFTGPU_CTR_SM_ACCESSES      15  /* SM accesses completed */
#define SOFTGPU_CTR_PEER_PHYS_COPIES 16 /* CE launches with a physical PEERMEM source or destination (Ampere) */
#define SOFTGPU_CTR_TLB_HITS         17  /* translations served by the TLB */
#define SOFTGPU_CTR_TLB_MISSES       18  /* translations walked (page tables; RM's range is not cached) */
#define SOFTGPU_CTR_TLB_INVAL_ALL    19  /* TLB invalidates of every PDB (MEM_OP_C PDB ALL) */
#define SOFTGPU_CTR_TLB_INVAL_PDB    20  /* TLB invalidates of one PDB, every VA */
#define SOFTGPU_CTR_TLB_INVAL_VA     21  /* targeted TLB invalidates (one PDB, a VA range) */
#define SOFTGPU_CTR_TLB_INVAL_LINK   22  /* Ampere invalidates of the link TLBs only (none emulated: no effect) */
#define SOFTGPU_CTR_TLB_DROPPED      23  /* TLB entries an invalidate dropped */
#define SOFTGPU_CTR_TLB_KEPT         24  /* entries an invalidate matched but kept (knob TLB_DROP_INVALIDATES) */
#define SOFTGPU_CTR_COUNT            25

/* softgpu_gpu_info_t.gpu_arch: NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_* of the emulated GPUs. */
#define SOFTGPU_ARCH_GV100 0x140    /* Volta V100 (arch=volta) */
#define SOFTGPU_ARCH_GA100 0x170    /* Ampere A100 (arch=ampere) */

typedef struct {
    uint8_t uuid[SOFTGPU_UUID_LEN];
    char name[SOFTGPU_NAME_LEN];
    uint64_t fb_bytes;            /* whole framebuffer */
    uint64_t pma_bytes;           /* the part PMA (UVM) manages: [0, pma_bytes) */
    uint32_t pci_domain;
    uint32_t pci_bdf;             /* bus << 8 | devfn */
    uint32_t link_type[SOFTGPU_MAX_GPUS];   /* SOFTGPU_LINK_* to GPU j */
    uint32_t link_count[SOFTGPU_MAX_GPUS];  /* NVLink links (width) to GPU j */
    uint32_t registered;          /* nvUvmInterfaceRegisterGpu references */
    uint32_t gpu_arch;            /* the architecture UVM is told (module parameter arch=): SOFTGPU_ARCH_* */
} softgpu_gpu_info_t;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t gpu_count;
    uint32_t client;              /* out: this open file's client handle (hClient for UVM) */
    softgpu_gpu_info_t gpus[SOFTGPU_MAX_GPUS];
    uint32_t rmStatus;
    uint32_t pad;
} SOFTGPU_GET_INFO_PARAMS;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t gpu_index;
    uint32_t handle;              /* out: hVaSpace (externally owned, big page 64K) */
    uint32_t rmStatus;
    uint32_t pad;
} SOFTGPU_CREATE_VASPACE_PARAMS;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t va_space;            /* hVaSpace from CREATE_VASPACE */
    uint32_t handle;              /* out: hChannel (GR engine, no subcontext, no TSG) */
    uint64_t instance_pa;         /* out: the channel's instance pointer (sysmem, 4K aligned) */
    uint32_t rmStatus;
    uint32_t pad;
} SOFTGPU_CREATE_CHANNEL_PARAMS;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t handle;
    uint32_t rmStatus;
} SOFTGPU_DESTROY_OBJECT_PARAMS;

typedef struct {
    uint64_t va;
    uint64_t size;                /* bytes; READ/WRITE any size, ATOMIC_INC 4 */
    uint64_t data;                /* user pointer (optional): READ destination, WRITE source */
    uint64_t seed;                /* pattern: 8-byte word at VA a is (seed ^ a) */
    uint32_t type;                /* SOFTGPU_ACCESS_* */
    uint32_t flags;               /* SOFTGPU_ACCESS_FLAG_* */
    uint32_t status;              /* out: NV_STATUS (NV_ERR_INVALID_ADDRESS when the fault was cancelled) */
    uint32_t faults;              /* out: fault entries this access raised */
    uint64_t mismatches;          /* out: VERIFY: words that differ */
    uint64_t first_mismatch_va;   /* out: VERIFY: VA of the first differing word (0 if none) */
    uint64_t value;               /* out: ATOMIC_INC: the value before the increment */
} softgpu_access_t;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t channel;             /* hChannel: the accesses run in its VA space on its GPU */
    uint32_t count;               /* entries at accesses (<= SOFTGPU_MAX_ACCESSES) */
    uint64_t accesses;            /* user pointer to softgpu_access_t[count] */
    uint32_t timeout_ms;          /* per access wait for a replay; 0 = 10000 */
    uint32_t completed;           /* out: accesses with status NV_OK */
    uint32_t rmStatus;
    uint32_t pad;
} SOFTGPU_SM_ACCESS_PARAMS;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t gpu_index;
    uint32_t handle;              /* out */
    uint64_t bytes;               /* multiple of 2 MiB: pinned like another process's cudaMalloc */
    uint64_t allocated;           /* out: bytes obtained (UVM may have evicted to make room) */
    uint32_t rmStatus;
    uint32_t pad;
} SOFTGPU_FOREIGN_ALLOC_PARAMS;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t handle;
    uint32_t rmStatus;
} SOFTGPU_FOREIGN_FREE_PARAMS;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t knob;                /* SOFTGPU_KNOB_* */
    uint32_t gpu_index;
    uint64_t value;
    uint32_t rmStatus;
    uint32_t pad;
} SOFTGPU_SET_KNOB_PARAMS;

typedef struct {
    uint64_t counters[SOFTGPU_CTR_COUNT];
    uint64_t pma_free_bytes;
    uint64_t pma_pinned_bytes;
    uint64_t pma_unpinned_bytes;
} softgpu_gpu_counters_t;

typedef struct {
    uint32_t abi_version;
    uint32_t size;
    uint32_t gpu_count;
    uint32_t pad0;
    softgpu_gpu_counters_t gpus[SOFTGPU_MAX_GPUS];
    uint32_t rmStatus;
    uint32_t pad;
} SOFTGPU_GET_COUNTERS_PARAMS;

/* SOFTGPU_ABI_END */

#endif /* _HUVM_SOFTGPU_IOCTL_H */
