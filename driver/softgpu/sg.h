/*
 * huvm-softgpu: emulated Volta (GV100) GPUs behind nvidia.ko's nvUvmInterface* API.
 * SPDX-License-Identifier: GPL-2.0 OR MIT
 *
 * TEST HARDWARE ONLY. This module stands in for nvidia.ko so that NVIDIA's unmodified nvidia-uvm (and the
 * huvm-patched one) can run in the qemu test bed. It is never built for, or loaded on, a lab server.
 *
 * The shared internal header: the object model every part of the emulator uses. One file per part:
 *   sg_main.c    module load/unload, parameters, PCI binding, topology, /dev/huvm-softgpu (RM-lite +
 *                SM access + knobs), the handle table, counters
 *   sg_rm.c      the nvUvmInterface* exports: sessions, devices, address spaces, RM memory, channels,
 *                TSGs, caps, P2P, fault/access-counter info, retained (user) channels, refusals
 *   sg_pma.c     the physical memory allocator (PMA) of each GPU's framebuffer, eviction callbacks
 *   sg_engine.c  the engines: one scheduler thread per GPU, GPFIFO, host (C36F), CE (C3B5) and SW (C076)
 *                methods
 *   sg_mmu.c     physical address resolution (VID/PEER/SYS), the VER2 page-table walker and the TLB
 *   sg_fault.c   the replayable fault unit: buffer, GET/PUT, interrupts into UVM, replay/cancel, the SM
 *
 * Semantics come from NVIDIA's open-gpu-kernel-modules 535.261.03 (nv_gpu_ops.c, nv_uvm_interface.h,
 * the uvm/ sources): they are emulated here, not copied. docs/softgpu.md describes the design.
 *
 * Lock order (outer first): sg_node.lock (mutex: objects, registration) -> vas->lock (spinlock: RM map
 * table, PDB) ; pma->lock (spinlock) is a leaf and is never held while calling into UVM;
 * fault->sm_lock (mutex: parked SM accesses) -> vas->lock and -> fault->lock; fault->tlb_sem (rwsem,
 * never nested with sm_lock) -> vas->lock; vas->lock and gpu->tlb.lock (spinlock: the TLB's entries,
 * taken after vas->lock is released) are leaves; fault->lock (raw spinlock, IRQ-safe) is a leaf;
 * gpu->rm_fb_lock (mutex) is a leaf; sg_main.c's handle-table spinlock (taken by sg_obj_get_*) is a leaf.
 * Each GPU's engine thread takes sg_node.chan_lock (spinlock) only to walk its channel list. No softgpu
 * lock is held while calling any UVM callback (eviction, top half).
 */
#ifndef _HUVM_SOFTGPU_SG_H
#define _HUVM_SOFTGPU_SG_H

#include <linux/types.h>
#include <linux/atomic.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/kref.h>
#include <linux/rbtree.h>
#include <linux/wait.h>
#include <linux/irq_work.h>
#include <linux/timer.h>
#include <linux/rwsem.h>
#include <linux/pci.h>

/* nv_uvm_interface.h includes RM's nv-linux.h outside the UVM build: the kernel headers above are all
 * the emulator needs, so keep that header out. */
#define _NV_LINUX_H_
#include "nvtypes.h"
#include "nvstatus.h"
#include "nv_uvm_types.h"
#include "nv_uvm_interface.h"
#include "nv-modeset-interface.h"
#include "huvm_softgpu_ioctl.h"
#include "sg_compat.h"

#define SG_MAX_GPUS     SOFTGPU_MAX_GPUS
#define SG_MAX_PEER_IDS 8
#define SG_PAGE_4K      0x1000ULL
#define SG_PAGE_64K     0x10000ULL
#define SG_PAGE_2M      0x200000ULL

#define SG_PAGE_512M 0x20000000ULL

/* Identities the GPUs can emulate (uvm/ctrl2080mc.h; the class headers clc36f.h, clc3b5.h, clc56f.h,
 * clc6b5.h, clc076.h). The host and CE classes of the two share their method offsets; Ampere's CE adds
 * the PEERMEM target (PEER_ID, FLA) to SET_SRC/DST_PHYS_MODE. */
#define SG_ARCH_GV100           0x140
#define SG_ARCH_GA100           0x170
#define SG_CLASS_HOST_VOLTA     0xC36F      /* VOLTA_CHANNEL_GPFIFO_A */
#define SG_CLASS_CE_VOLTA       0xC3B5      /* VOLTA_DMA_COPY_A */
#define SG_CLASS_COMPUTE_VOLTA  0xC3C0      /* VOLTA_COMPUTE_A (reported only) */
#define SG_CLASS_HOST_AMPERE    0xC56F      /* AMPERE_CHANNEL_GPFIFO_A */
#define SG_CLASS_CE_AMPERE      0xC6B5      /* AMPERE_DMA_COPY_A */
#define SG_CLASS_COMPUTE_AMPERE 0xC6C0      /* AMPERE_COMPUTE_A (reported only) */
#define SG_CLASS_UVM_SW         0xC076      /* GP100_UVM_SW */

/* The architecture every GPU of the node emulates, chosen at load (module parameter arch=, sg_main.c)
 * and fixed until unload. What differs between the two is here; sg_arch points at one of them. */
struct sg_arch_desc {
    const char *param;            /* "volta" / "ampere" (the arch= value) */
    const char *model;            /* the GPU name's prefix */
    u32 gpu_arch;                 /* UvmGpuInfo.gpuArch (NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_*) */
    u32 gpu_impl;                 /* UvmGpuInfo.gpuImplementation */
    u32 host_class;
    u32 ce_class;
    u32 compute_class;
    u32 gpc_count;                /* enabled GPCs */
    u32 max_gpc_count;
    u32 tpc_count;
    u32 max_tpc_per_gpc;
    u32 nvlink_type;              /* UVM_LINK_TYPE_NVLINK_2 / _3 for NVLink peers */
    u32 nvlink_max_links;         /* links a GPU has */
    u64 max_vidmem_page;          /* GPU_GET_MAX_SUPPORTED_PAGE_SIZE: 2M (Volta), 512M (Ampere) */
    bool ce_peermem;              /* CE physical PEERMEM target (UVM's physical peer copies) */
    bool pde1_pte;                /* 512M PTEs at PDE1 (uvm_ampere_mmu.c) */
    bool clear_faulted_sw;        /* C076 CLEAR_FAULTED_A/B (uvm_ampere_host.c) */
};
extern const struct sg_arch_desc *sg_arch;

/* VA layout of an RM-managed (kernel) address space: RM hands out VAs in [SG_RM_VA_START, SG_RM_VA_END)
 * (below max_channel_va = 2^40, never 0). VAs below the RM range size (128 TB) are RM's; above, UVM's
 * own page tree, walked from the PDB. */
#define SG_RM_VA_START (4ULL << 30)
#define SG_RM_VA_END   (1ULL << 40)

/* Apertures as the CE and MMU see them. */
enum sg_aperture {
    SG_AP_VID = 0,     /* this GPU's framebuffer */
    SG_AP_PEER = 1,     /* a peer GPU's framebuffer (through the peer id) */
    SG_AP_SYS = 2,     /* system memory: a guest physical (= DMA) address */
};

/* PRF_FILTER of the page-fault control register UVM reads and writes through pPrefetchCtrl, and RM through
 * TogglePrefetchFaults on 580 (hwref/pascal/gp100/dev_fb.h NV_PFB_PRI_MMU_PAGE_FAULT_CTRL_PRF_FILTER:
 * 0 SEND_ALL, 3 SEND_NONE). */
#define SG_PRF_FILTER_MASK      0x3u
#define SG_PRF_FILTER_SEND_ALL  0x0u
#define SG_PRF_FILTER_SEND_NONE 0x3u

/* MMU access kinds. */
enum sg_access {
    SG_ACC_READ = 0,
    SG_ACC_WRITE,
    SG_ACC_ATOMIC,
    SG_ACC_PREFETCH,
};

/* Fault types as in the C369 fault packet (uvm/hwref/volta/gv100/dev_fault.h, uvm_fault_type_t). */
#define SG_FAULT_NONE     (-1)
#define SG_FAULT_PDE      0x0
#define SG_FAULT_PDE_SIZE 0x1
#define SG_FAULT_PTE      0x2
#define SG_FAULT_VA_LIMIT 0x3
#define SG_FAULT_PRIV     0x5
#define SG_FAULT_RO       0x6
#define SG_FAULT_APERTURE 0xa         /* UNSUPPORTED_APERTURE: no memory behind the PTE (fatal) */
#define SG_FAULT_ATOMIC   0xf

struct sg_gpu;
struct sg_vaspace;
struct sg_user_channel;

/* ---- PMA (sg_pma.c) -------------------------------------------------------------------------- */
struct sg_pma;

NV_STATUS sg_pma_create(struct sg_gpu *gpu);           /* at module load, for [0, gpu->pma_size) */
void sg_pma_destroy(struct sg_gpu *gpu);
/* A "foreign" (non-UVM, e.g. another process's cudaMalloc) pinned allocation of whole 2 MiB pages:
 * allocations without DONT_EVICT, so UVM's eviction callbacks run when PMA is short. */
NV_STATUS sg_pma_foreign_alloc(struct sg_gpu *gpu, u64 bytes, u64 **pages_out, u64 *npages_out);
/* Frees the pages and takes back the array too (*pages_out of sg_pma_foreign_alloc); the caller never
 * frees it. */
void sg_pma_foreign_free(struct sg_gpu *gpu, u64 *pages, u64 npages);
void sg_pma_counters(struct sg_gpu *gpu, u64 *free_b, u64 *pinned_b, u64 *unpinned_b);

/* ---- fault unit (sg_fault.c) ----------------------------------------------------------------- */
/* The interrupt bits UVM writes to pPmcIntrEnSet/EnClear (replayableFaultMask, set by InitFaultInfo) and
 * to pHubIntrEnSet/EnClear (accessCounterMask, set by InitAccessCntrInfo). Any distinct non-zero bits
 * work; these mirror the PMC/HUB interrupt positions of the real parts only loosely. */
#define SG_INTR_REPLAYABLE_FAULT (1u << 9)
#define SG_INTR_ACCESS_CNTR      (1u << 27)

/* The "registers" UVM reads and writes through pointers (UvmGpuFaultInfo, UvmGpuAccessCntrInfo,
 * AddressSpaceCreate's time offsets): plain words in one zeroed page per GPU. */
struct sg_regs {
    u32 fault_get;
    u32 fault_put;
    u32 fault_info;
    u32 pmc_intr;
    u32 pmc_intr_en_set;
    u32 pmc_intr_en_clear;
    u32 prefetch_ctrl;
    u32 ac_get;
    u32 ac_put;
    u32 ac_full;
    u32 ac_hub_intr;
    u32 ac_en_set;
    u32 ac_en_clear;
    u32 pad;
    u64 time;                     /* TIME_0 (low) / TIME_1 (high) */
};

struct sg_fault_unit {
    struct sg_regs *regs;         /* one page, vzalloc'd by sg_main.c */
    void *buffer;                 /* replayable fault ring: entries * 32 bytes */
    u32 entries;
    void *nr_shadow;              /* non-replayable shadow buffer (never filled) */
    u32 nr_size;
    void *ac_buffer;              /* access-counter buffer (never filled) */
    u32 ac_size;
    bool info_initialised;        /* InitFaultInfo done */
    bool uvm_owns_intr;           /* OwnPageFaultIntr(TRUE) */
    bool ac_initialised;
    raw_spinlock_t lock;          /* fault ring writes (entries, PUT) */
    struct mutex sm_lock;         /* pending and the state of every parked SM access (sg_fault.c) */
    struct list_head pending;     /* SM accesses parked on a fault (sg_fault.c), under sm_lock */
    atomic_t replay_gen;          /* bumped by every replay method */
    wait_queue_head_t wq;         /* parked SM accesses wait here */
    struct irq_work irq;          /* calls UVM's isrTopHalf in hard-IRQ context */
    u64 last_irq_ns;
    struct timer_list timer;      /* re-raises the interrupt while the ring holds work; GET upkeep */
    struct rw_semaphore tlb_sem;  /* SM page accesses in flight (read) vs TLB invalidates (write) */
    bool regs_owned;              /* sg_fault_init allocated regs (sg_main.c had not) */
    bool shutdown;                /* sg_fault_fini has begun: no more timers or interrupts */
};

NV_STATUS sg_fault_init(struct sg_gpu *gpu);           /* at module load */
void sg_fault_fini(struct sg_gpu *gpu);
/* Called by the engine thread for host MEM_OP / SW methods, in process context (they take a mutex and
 * translate), with no softgpu spinlock held. Arguments are the raw method fields:
 * - replay: MEM_OP_C REPLAY START or START_ACK_ALL. Every parked access is translated again before this
 *   returns: those still faulting write their fault entries again (so they are in the buffer when the
 *   replay's push completes, as uvm_gpu_replayable_faults.c expects), the others resume.
 * - cancel_va: REPLAY CANCEL_VA_GLOBAL. pdb_aperture = MEM_OP_C PDB_APERTURE (0 VID, 2/3 SYS), pdb_pa =
 *   the PDB byte address, va = the target VA (4K page), access_mode = MEM_OP_C ACCESS_TYPE (9:7; 7
 *   VIRT_ALL, 6 VIRT_WRITE_AND_ATOMIC, 5 ATOMIC_ALL, 2 ATOMIC_STRONG, 1 WRITE, 0 READ).
 * - cancel_targeted / cancel_global: REPLAY CANCEL_TARGETED (uTLB of gpc/client) / CANCEL_GLOBAL.
 * - cancel_inst: C076 FAULT_CANCEL_A/B/C: inst_aperture = A[1:0] (0 VID, 2/3 SYS), inst_pa = the
 *   instance block byte address, global = C.MODE GLOBAL, else gpc = C.GPC_ID and client = C.CLIENT_ID.
 * Cancelled accesses fail with NV_ERR_INVALID_ADDRESS; UVM replays after cancelling. */
void sg_fault_replay(struct sg_gpu *gpu);
void sg_fault_cancel_va(struct sg_gpu *gpu, u32 pdb_aperture, u64 pdb_pa, u64 va, u32 access_mode);
void sg_fault_cancel_targeted(struct sg_gpu *gpu, u32 gpc, u32 client);
void sg_fault_cancel_global(struct sg_gpu *gpu);
void sg_fault_cancel_inst(struct sg_gpu *gpu, u32 inst_aperture, u64 inst_pa, bool global, u32 gpc, u32 client);
/* The last step of a TLB invalidate (sg_tlb_invalidate, after it dropped the entries): returns once no SM
 * access still uses a translation made before the call, so that UVM may reuse the memory an invalidated
 * PTE mapped. Process context (the GPU's engine thread); takes no spinlock. */
void sg_fault_tlb_invalidate(struct sg_gpu *gpu);
/* Raise UVM's top half if the ring holds work (level-triggered emulation, rate-limited; a timer raises
 * it again while the condition lasts). Any context but hard IRQ. */
void sg_fault_kick(struct sg_gpu *gpu);
/* Stop a user channel: sets uch->stopped and fails its parked accesses (StopChannel / ReleaseChannel /
 * destruction). Process context. */
void sg_fault_stop_channel(struct sg_gpu *gpu, struct sg_user_channel *uch);
/* The SM: run a batch of accesses on a user channel in the caller's thread (sg_main.c's ioctl; process
 * context, no lock held; sleeps while accesses wait for replays). Unless it returns
 * NV_ERR_INVALID_ARGUMENT or NV_ERR_NO_MEMORY, every acc[i] gets its results and *completed the number
 * with status NV_OK (also when it returns NV_ERR_SIGNAL_PENDING). Per-access status: NV_OK;
 * NV_ERR_INVALID_ADDRESS (cancelled by UVM, or a PREFETCH page that stayed unmapped);
 * NV_ERR_TIMEOUT (no replay within timeout_ms); NV_ERR_INVALID_CHANNEL (channel stopped);
 * NV_ERR_BUSY_RETRY (FLAG_NO_WAIT: the fault was reported, the access not retried);
 * NV_ERR_INVALID_ARGUMENT (bad type/flags/size/alignment or data pointer); NV_ERR_SIGNAL_PENDING. */
NV_STATUS sg_sm_run(struct sg_user_channel *uch, softgpu_access_t *acc, u32 count, u32 timeout_ms, u32 *completed);

/* ---- TLB (sg_mmu.c) ---------------------------------------------------------------------------- */
/* Completed translations of one GPU, tagged by the PDB they were walked from (as the hardware tags them)
 * and by the client that filled them: GPC (the SM) or HUB (the copy engines and the host's pushbuffer and
 * semaphore accesses). Set-associative, SG_TLB_WAYS ways, round-robin replacement per set; one entry per
 * page (4K, 64K, 2M or 512M: a lookup probes every page size). The size is an assumption (NVIDIA does not
 * publish its GPUs' TLB sizes): small enough that the suite's working sets also exercise replacement. */
#define SG_TLB_SET_BITS 7
#define SG_TLB_SETS     (1u << SG_TLB_SET_BITS)
#define SG_TLB_WAYS     4

#define SG_TLBF_GPC        0x01   /* filled by the SM (GPC uTLBs); else by the HUB clients (CE, host) */
#define SG_TLBF_USER       0x02   /* walked in a user (not UVM's kernel) VA space */
#define SG_TLBF_RO         0x04
#define SG_TLBF_ATOMIC_DIS 0x08
#define SG_TLBF_PRIV       0x10

struct sg_tlb_entry {
    u64 va;                       /* page base */
    u64 pa;                       /* page base in the aperture */
    u64 pdb_pa;
    struct sg_gpu *owner;         /* FB owner (VID/PEER), NULL for SYS */
    u8 page_shift;                /* 12, 16, 21 or 29; 0: empty */
    u8 pdb_aperture;              /* SG_AP_VID or SG_AP_SYS */
    u8 aperture;                  /* SG_AP_VID / SG_AP_PEER / SG_AP_SYS */
    u8 flags;                     /* SG_TLBF_* */
};

struct sg_tlb {
    spinlock_t lock;              /* the entries and next[]; a leaf */
    u8 next[SG_TLB_SETS];         /* round-robin victim per set */
    struct sg_tlb_entry e[SG_TLB_SETS][SG_TLB_WAYS];
};

/* One TLB invalidate as the host's MEM_OP methods state it (clc36f.h / clc56f.h MEM_OP_A-D). */
struct sg_tlb_inval {
    bool all_pdbs;                /* MEM_OP_C PDB ALL; else pdb_aperture/pdb_pa name one PDB */
    u32 pdb_aperture;             /* SG_AP_VID or SG_AP_SYS */
    u64 pdb_pa;
    bool targeted;                /* MMU_TLB_INVALIDATE_TARGETED: only [va, va + size) */
    u64 va;
    u64 size;
    bool gpc;                     /* MEM_OP_C GPC ENABLE: the SM's (GPC) entries too */
    bool non_link;                /* Ampere INVAL_SCOPE ALL_TLBS or NON_LINK_TLBS (Volta: always) */
};

/* At GPU creation (sg_main.c), before anything translates. */
void sg_tlb_init(struct sg_gpu *gpu);
/* Drops the matching entries (unless the tlb_drop_invalidates knob keeps the SM's user-VA-space ones),
 * counts the invalidate by scope, then waits for SM accesses in flight (sg_fault_tlb_invalidate).
 * Process context (the GPU's engine thread), no softgpu lock held. */
void sg_tlb_invalidate(struct sg_gpu *gpu, const struct sg_tlb_inval *inv);
/* Drops every entry walked from one PDB (RM's side of SetPageDirectory/UnsetPageDirectory, which binds
 * and unbinds a root): not counted as an invalidate. Any context but hard IRQ. */
void sg_tlb_flush_pdb(struct sg_gpu *gpu, u32 pdb_aperture, u64 pdb_pa);
/* Drops every entry (the knob switched off): not counted. Any context but hard IRQ. */
void sg_tlb_flush_all(struct sg_gpu *gpu);

/* ---- GPU --------------------------------------------------------------------------------------- */
struct sg_gpu {
    unsigned index;
    NvProcessorUuid uuid;
    char name[SOFTGPU_NAME_LEN];
    struct pci_dev *pdev;         /* the qemu device this GPU is bound to (DMA API target) */

    u64 fb_size;                  /* whole framebuffer */
    u64 pma_size;                 /* PMA owns [0, pma_size); RM-reserved FB is [pma_size, fb_size) */
    u8 *fb;                       /* vmalloc'd backing: VID physical address == offset */

        /* RM-reserved FB allocator (MemoryAllocFB backing), in [pma_size, fb_size): sg_rm.c */
    struct mutex rm_fb_lock;
    unsigned long *rm_fb_bitmap;  /* one bit per 4K page of the reserved part */

    struct sg_pma *pma;
    struct sg_fault_unit fault;

        /* topology (sg_main.c at load) */
    u32 link_type[SG_MAX_GPUS];   /* SOFTGPU_LINK_* */
    u32 link_count[SG_MAX_GPUS];
    int peer_id_of[SG_MAX_GPUS];  /* the 3-bit peer id this GPU uses for GPU j, -1 if none */
    struct sg_gpu *peer_by_id[SG_MAX_PEER_IDS];

        /* nvUvmInterface state (sg_rm.c, under sg_node.lock) */
    int registered;               /* RegisterGpu references */
    struct uvmGpuDevice_tag *device;  /* the one device UVM created, or NULL */
    NvBool nvlink_error_notifier; /* GetNvlinkInfo's notifier (580): never set, nothing is uncontained */

        /* knobs */
    u64 copy_mbps;
    u64 link_latency_us;
    atomic_t fail_pma_alloc;
    u32 tlb_drop_invalidates;     /* test knob: invalidates keep the SM's user-VA-space entries */

    struct sg_tlb tlb;            /* sg_tlb_init at GPU creation */

    atomic64_t ctr[SOFTGPU_CTR_COUNT];
};

static inline void sg_count(struct sg_gpu *gpu, unsigned ctr, u64 n)
{
    atomic64_add(n, &gpu->ctr[ctr]);
}

/* Says once per (what) in dmesg that something is not emulated, and counts it. */
void sg_unemulated(struct sg_gpu *gpu, const char *what, u32 a, u32 b);

/* ---- the node (sg_main.c) ---------------------------------------------------------------------- */
struct sg_node {
    struct mutex lock;
    unsigned gpu_count;
    struct sg_gpu *gpus[SG_MAX_GPUS];
    struct UvmOpsUvmEvents *ops;  /* RegisterUvmCallbacks; read under RCU by the interrupt path */
    bool session_open;
    spinlock_t chan_lock;         /* the engines' channel lists (sg_engine.c, one per GPU) */
};
extern struct sg_node sg_node;

struct sg_gpu *sg_gpu_by_uuid(const NvProcessorUuid *uuid);

/* ---- address spaces ---------------------------------------------------------------------------- */
/* Backing of an RM allocation (MemoryAllocSys/FB): shared by the owner mapping and its dups. */
struct sg_rm_backing {
    struct kref ref;
    struct sg_gpu *gpu;           /* FB owner (vid) */
    bool vid;
    u64 fb_offset;                /* vid: VID physical address */
    void *kva;                    /* CPU address of the first byte (vid: gpu->fb + fb_offset) */
    u64 size;                     /* page-rounded */
};

struct sg_rm_map {
    struct list_head node;        /* vas->rm_maps, sorted by va (first-fit VA search) */
    struct rb_node rb;            /* vas->rm_tree, keyed by va (sg_rm_lookup) */
    u64 va;
    u64 size;
    struct sg_rm_backing *b;
};

/* A GPU VA space (an RM "FERMI_VASPACE_A" object). Kernel ones come from AddressSpaceCreate (RM manages
 * [0, rm_va_size)); user ones from /dev/huvm-softgpu CREATE_VASPACE (externally owned, UVM dups them). */
struct sg_vaspace {
    struct kref ref;
    struct sg_gpu *gpu;
    bool kernel;
    u64 rm_va_size;               /* kernel: VAs below this are resolved through rm_maps */
    spinlock_t lock;              /* rm_maps, rm_tree, next_va, PDB */
    struct list_head rm_maps;
    struct rb_root rm_tree;       /* the same maps, for O(log n) lookups from the engine thread */
    u64 next_va;                  /* unused: RM VAs are found first-fit in rm_maps */
    bool pdb_set;
    u32 pdb_aperture;             /* SG_AP_VID or SG_AP_SYS */
    u64 pdb_pa;
};

/* The handle UVM holds (AddressSpaceCreate / DupAddressSpace). */
struct uvmGpuAddressSpace_tag {
    struct uvmGpuDevice_tag *device;
    struct sg_vaspace *vas;
    bool dup;
};

struct uvmGpuSession_tag {
    int unused;
};

struct uvmGpuDevice_tag {
    struct uvmGpuSession_tag *session;
    struct sg_gpu *gpu;
};

void sg_vaspace_put(struct sg_vaspace *vas);
struct sg_vaspace *sg_vaspace_create(struct sg_gpu *gpu, bool kernel, u64 rm_va_size);
/* RM-table lookup for a kernel VA space: CPU pointer for va and the bytes valid from it (0 if none).
 * Callable from the engine thread (takes vas->lock). */
void *sg_rm_lookup(struct sg_vaspace *vas, u64 va, u64 *len, struct sg_gpu **owner);
/* Per-GPU state of sg_rm.c (the RM-reserved FB allocator): sg_main.c calls sg_rm_gpu_init at GPU
 * creation (after fb/fb_size/pma_size are set) and sg_rm_gpu_fini at destruction. */
NV_STATUS sg_rm_gpu_init(struct sg_gpu *gpu);
void sg_rm_gpu_fini(struct sg_gpu *gpu);

/* ---- MMU (sg_mmu.c) ---------------------------------------------------------------------------- */
struct sg_xlate {
    struct sg_gpu *gpu;           /* FB owner for VID/PEER, NULL for SYS */
    u32 aperture;                 /* after PEER resolution: SG_AP_VID (of gpu), SG_AP_PEER, SG_AP_SYS */
    u64 pa;
    void *kva;                    /* CPU pointer to the byte at va */
    u64 len;                      /* bytes valid from kva: to the end of the page or RM allocation
 * (SYS pages: of the 4K page, as RAM is checked pfn by pfn) */
    u64 page_size;
    bool read_only;
    bool atomic_disabled;
    bool sparse;                  /* reads return 0, writes are dropped */
};

/* CPU pointer for [pa, pa+len) in an aperture of gpu (SG_AP_VID: gpu's FB bounds-checked; SG_AP_SYS:
 * guest physical memory through the direct map). NULL when out of range. */
void *sg_phys_ptr(struct sg_gpu *gpu, u32 aperture, u64 pa, u64 len);
/* Translate va in vas for an access. ce: a copy-engine access (ignores PRIV; RO violations are RC).
 * Returns SG_FAULT_NONE with *x filled, or the fault type (SG_FAULT_APERTURE: the PTE names memory that
 * does not exist). A sparse mapping is SG_FAULT_NONE with x->sparse, x->len and x->page_size only.
 * Process context, no softgpu spinlock held (takes vas->lock, then gpu->tlb.lock). Beyond RM's range a
 * translation comes from vas->gpu's TLB when it holds one for the VA space's PDB, the page and the client
 * (ce: HUB, else GPC); a walk that succeeds fills an entry. */
int sg_mmu_translate(struct sg_vaspace *vas, u64 va, enum sg_access acc, bool ce, struct sg_xlate *x);

/* ---- channels and the engines (sg_engine.c) ---------------------------------------------------- */
/* Per-channel execution state; owned by sg_engine.c (only the engine thread touches it after
 * sg_engine_add_channel, which zeroes it). */
struct sg_exec {
    u32 gp_get;                   /* next GPFIFO entry to execute (published to userd[GP_GET]) */
    u32 gp_put;                   /* last GP_PUT read from userd */
    u64 seg_va;                   /* current segment (pushbuffer VA) being executed */
    u32 seg_len;                  /* dwords */
    u32 seg_pos;                  /* next dword */
    bool in_segment;
    u32 method;                   /* pending method header state: byte offset of the next data dword */
    u32 count;                    /* data dwords left */
    u32 subch;
    u32 sec_op;                   /* NVB06F_DMA_SEC_OP_* */
    u32 subch_class[8];
    u32 host[64];                 /* host method registers, by (offset >> 2) for offsets < 0x100 */
    u32 ce[0x800 >> 2];           /* CE method registers, by (offset >> 2) */
    u32 sw[0x200 >> 2];           /* SW method registers */
    bool parked;                  /* waiting on an acquire (the acquire method is already consumed) */
    bool acq_64;                  /* 64-bit payload (SEM_EXECUTE PAYLOAD_SIZE_64BIT) */
    bool park_reported;           /* the >10 s watchdog line was printed */
    u32 acq_op;                   /* sg_engine.c's acquire kind */
    u64 acq_va;
    u64 acq_payload;
    u64 park_ns;                  /* when the channel parked (ktime_get_ns) */
};

struct uvmGpuTsg_tag {
    struct uvmGpuAddressSpace_tag *as;
    struct sg_vaspace *vas;
    struct sg_gpu *gpu;
    u32 engine_type;
    u32 engine_index;
    int channels;
};

struct uvmGpuChannel_tag {
    struct list_head node;        /* its GPU's engine's channel list (sg_engine.c) */
    struct uvmGpuTsg_tag *tsg;
    struct sg_gpu *gpu;
    struct sg_vaspace *vas;       /* the TSG's VA space: pushbuffer and CE virtual addresses */
    u32 id;
    u32 num_entries;
    u64 *gpfifo;                  /* numGpFifoEntries entries, kvzalloc'd */
    u32 *userd;                   /* one page: [0] GP_PUT, [1] GP_GET, [2] doorbell, [3] token */
    NvNotification *error_notifier;
    bool stopped;                 /* RC error: executes nothing more */
    bool dying;                   /* ChannelDestroy in progress: the engine skips it */
    struct sg_exec exec;
};

#define SG_USERD_GP_PUT   0
#define SG_USERD_GP_GET   1
#define SG_USERD_DOORBELL 2
#define SG_USERD_TOKEN    3
#define SG_DOORBELL_IDLE  0xffffffffu

/* One engine thread per GPU ("sg-engine/N"): started after the GPUs exist, stopped before they go. */
int sg_engine_start(void);
void sg_engine_stop(void);
/* Add a channel to the scheduler / remove it (returns once the engine no longer touches it). */
void sg_engine_add_channel(struct uvmGpuChannel_tag *ch);
void sg_engine_remove_channel(struct uvmGpuChannel_tag *ch);
/* Wake every GPU's engine (new work hint). */
void sg_engine_kick(void);
/* Strictly increasing GPU time in ns (semaphore and fault timestamps, TIME_0/1). */
u64 sg_gpu_time_ns(void);

/* ---- user objects (/dev/huvm-softgpu, sg_main.c) ----------------------------------------------- */
/* A GR channel created from user space: what UVM retains (RetainChannel) and the SM runs on. */
struct sg_user_channel {
    struct kref ref;
    u32 handle;
    u32 client;
    struct sg_gpu *gpu;
    struct sg_vaspace *vas;
    struct page *inst_page;       /* the instance block (4K, sysmem) */
    u64 inst_pa;
    bool stopped;                 /* StopChannel: parked accesses fail, new ones are refused */
    int retained;                 /* RetainChannel references (under sg_node.lock) */
};

/* Look up user objects by (hClient, handle); take a reference. NULL if not found or wrong type.
 * Callable with or without sg_node.lock held (process context). DESTROY_OBJECT refuses a channel whose
 * `retained` > 0, checked under sg_node.lock: RetainChannel should hold sg_node.lock across the lookup
 * and retained++ so that the two cannot race. sg_user_channel_put may call sg_vaspace_put. */
struct sg_vaspace *sg_obj_get_vaspace(u32 client, u32 handle);
struct sg_user_channel *sg_obj_get_channel(u32 client, u32 handle);
void sg_user_channel_put(struct sg_user_channel *uch);

#endif /* _HUVM_SOFTGPU_SG_H */
