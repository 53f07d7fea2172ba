// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * huvm-softgpu: the physical memory allocator (PMA) of each emulated GPU's framebuffer (test hardware only).
 *
 * RM's PMA hands out the framebuffer below the RM-reserved top, [0, pma_size), in 64 KiB frames: UVM takes
 * 2 MiB root chunks from it (pinned for kernel use, unpinned for user data that PMA may ask UVM to evict),
 * and everybody else (here: "foreign" allocations that stand in for another process's cudaMalloc) takes
 * pinned memory, triggering UVM's eviction callbacks when short. The contract is that of RM's
 * phys_mem_allocator.h as wrapped by nv_gpu_ops.c and nv_uvm_interface.h, and of UVM's callbacks in
 * kernel-open/nvidia-uvm/uvm_pmm_gpu.c (uvm_pmm_gpu_pma_evict_pages / _evict_range).
 *
 * Frame state: FREE, PINNED or UNPINNED, plus an EVICTING attribute on the frames of a contiguous range
 * being evicted through evictRange: such frames can be neither allocated nor pinned (PmaPinPages answers
 * NV_ERR_IN_USE, which UVM expects when it races with eviction), and keep the attribute when UVM frees
 * them, until the eviction finishes. Discontiguous eviction (evictPages) marks nothing: UVM picks the root
 * chunks itself, pins them (PmaPinPages with UVM_PMA_CALLED_FROM_PMA_EVICTION) and returns their addresses,
 * which then go to the requester; the frames the requester already got are held pinned meanwhile.
 *
 * Locking: pma->lock (spinlock) protects the frame map, the counters and the statistics; it is a leaf and is
 * never held while calling UVM. pma->cb_sem (rwsem) is held for read while an eviction callback runs and for
 * write while the callbacks are (un)registered, so unregistering waits for running callbacks. A callback
 * may re-enter PmaPinPages / PmaFreePages (and PmaAllocPages with DONT_EVICT): those take only pma->lock.
 */

#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/mm.h>
#include <linux/rwsem.h>
#include <linux/string.h>
#include <linux/log2.h>

#include "sg.h"
#include "nvmisc.h"      /* NVBIT, used by the UVM_PMA_* flag macros */

#define SG_PMA_FRAME_SHIFT   16
#define SG_PMA_FRAME_SIZE    (1ULL << SG_PMA_FRAME_SHIFT)        /* PMA granularity: 64 KiB */
#define SG_PMA_FRAMES_PER_2M (SG_PAGE_2M >> SG_PMA_FRAME_SHIFT)

/* Frame map byte: a state and attributes. */
#define SG_PMA_FREE       0x0
#define SG_PMA_PINNED     0x1
#define SG_PMA_UNPINNED   0x2
#define SG_PMA_STATE_MASK 0x3
#define SG_PMA_EVICTING   0x4     /* in a range handed to evictRange */

#define SG_PMA_MAGIC 0x414d5053u     /* "SPMA" */

struct sg_pma {
    u32 magic;
    struct sg_gpu *gpu;

    spinlock_t lock;                /* everything below up to cb_sem */
    u64 nframes;                    /* 64 KiB frames in [0, pma_size) */
    u64 nblocks;                    /* whole 2 MiB blocks in [0, pma_size) */
    u8 *frame;                      /* nframes state bytes */
    u8 *blk_free;                   /* free frames in each whole 2 MiB block (0..32) */
    u64 n_free, n_pinned, n_unpinned;
    u64 n_free_2m;
    UvmPmaStatistics stats;         /* what GetPmaObject hands out: kept current under lock */

    struct rw_semaphore cb_sem;     /* read: a callback is running; write: (un)registration */
    uvmPmaEvictPagesCallback evict_pages;
    uvmPmaEvictRangeCallback evict_range;
    void *cb_ctx;
};

static struct sg_pma *sg_pma_from(void *pPma)
{
    struct sg_pma *pma = pPma;

    if (!pma || WARN_ON(pma->magic != SG_PMA_MAGIC))
        return NULL;
    return pma;
}

/* The page sizes RM's PMA accepts (phys_mem_allocator.c: 64K, 128K, 2M, 512M). */
static bool sg_pma_page_size_valid(u64 page_size)
{
    return page_size == SG_PAGE_64K || page_size == 0x20000ULL || page_size == SG_PAGE_2M || page_size == 0x20000000ULL;
}

/* ---- frame map (pma->lock held) --------------------------------------------------------------- */

static u8 sg_pma_state(struct sg_pma *pma, u64 f)
{
    return pma->frame[f] & SG_PMA_STATE_MASK;
}

static u64 *sg_pma_state_ctr(struct sg_pma *pma, u8 state)
{
    switch (state) {
    case SG_PMA_PINNED:   return &pma->n_pinned;
    case SG_PMA_UNPINNED: return &pma->n_unpinned;
    default:              return &pma->n_free;
    }
}

/* Change a frame's state, keeping its attributes, and the counters with it. */
static void sg_pma_set_state(struct sg_pma *pma, u64 f, u8 state)
{
    u8 old = sg_pma_state(pma, f);
    u64 b = f / SG_PMA_FRAMES_PER_2M;

    if (old == state)
        return;

    (*sg_pma_state_ctr(pma, old))--;
    (*sg_pma_state_ctr(pma, state))++;

    if (b < pma->nblocks) {
        if (old == SG_PMA_FREE) {
            if (pma->blk_free[b] == SG_PMA_FRAMES_PER_2M)
                pma->n_free_2m--;
            pma->blk_free[b]--;
        }
        else if (state == SG_PMA_FREE) {
            pma->blk_free[b]++;
            if (pma->blk_free[b] == SG_PMA_FRAMES_PER_2M)
                pma->n_free_2m++;
        }
    }
    pma->frame[f] = (pma->frame[f] & ~SG_PMA_STATE_MASK) | state;
}

static void sg_pma_set_range(struct sg_pma *pma, u64 f0, u64 n, u8 state)
{
    u64 f;

    for (f = f0; f < f0 + n; f++)
        sg_pma_set_state(pma, f, state);
}

static void sg_pma_update_stats(struct sg_pma *pma)
{
    pma->stats.numFreePages64k = pma->n_free;
    pma->stats.numFreePages2m = pma->n_free_2m;
}

/* Allocatable: FREE and not part of a range being evicted. */
static bool sg_pma_frame_allocatable(struct sg_pma *pma, u64 f)
{
    return pma->frame[f] == SG_PMA_FREE;
}

/* Free or evictable (UVM's unpinned memory), and not already being evicted. */
static bool sg_pma_frame_evictable(struct sg_pma *pma, u64 f)
{
    return !(pma->frame[f] & SG_PMA_EVICTING) && sg_pma_state(pma, f) != SG_PMA_PINNED;
}

/* Index of the first frame of [f0, f0 + n) that fails pred, or f0 + n if none does. */
static u64 sg_pma_first_bad(struct sg_pma *pma, u64 f0, u64 n, bool (*pred)(struct sg_pma *, u64))
{
    u64 f;

    for (f = f0; f < f0 + n; f++) {
        if (!pred(pma, f))
            return f;
    }
    return f0 + n;
}

/* A page made of evictable frames of which at least one is UVM's (so evicting it frees something). */
static bool sg_pma_page_needs_eviction(struct sg_pma *pma, u64 f0, u64 n)
{
    bool unpinned = false;
    u64 f;

    for (f = f0; f < f0 + n; f++) {
        if (!sg_pma_frame_evictable(pma, f))
            return false;
        if (sg_pma_state(pma, f) == SG_PMA_UNPINNED)
            unpinned = true;
    }
    return unpinned;
}

/* ---- create / destroy / counters -------------------------------------------------------------- */

NV_STATUS sg_pma_create(struct sg_gpu *gpu)
{
    struct sg_pma *pma;
    u64 b;

    if (!gpu->pma_size || gpu->pma_size % SG_PMA_FRAME_SIZE || gpu->pma_size > gpu->fb_size)
        return NV_ERR_INVALID_ARGUMENT;

    pma = kzalloc(sizeof(*pma), GFP_KERNEL);
    if (!pma)
        return NV_ERR_NO_MEMORY;

    pma->magic = SG_PMA_MAGIC;
    pma->gpu = gpu;
    spin_lock_init(&pma->lock);
    init_rwsem(&pma->cb_sem);
    pma->nframes = gpu->pma_size >> SG_PMA_FRAME_SHIFT;
    pma->nblocks = gpu->pma_size / SG_PAGE_2M;

    pma->frame = vzalloc(pma->nframes);
    pma->blk_free = vzalloc(max_t(u64, pma->nblocks, 1));
    if (!pma->frame || !pma->blk_free) {
        vfree(pma->frame);
        vfree(pma->blk_free);
        kfree(pma);
        return NV_ERR_NO_MEMORY;
    }

    for (b = 0; b < pma->nblocks; b++)
        pma->blk_free[b] = SG_PMA_FRAMES_PER_2M;
    pma->n_free = pma->nframes;
    pma->n_free_2m = pma->nblocks;

    pma->stats.numPages2m = pma->nblocks;
    pma->stats.numPages2mProtected = 0;         /* no protected (confidential computing) region */
    pma->stats.numFreePages64kProtected = 0;
    pma->stats.numFreePages2mProtected = 0;
    sg_pma_update_stats(pma);

    gpu->pma = pma;
    return NV_OK;
}

void sg_pma_destroy(struct sg_gpu *gpu)
{
    struct sg_pma *pma = gpu->pma;

    if (!pma)
        return;

    if (pma->evict_pages)
        pr_warn("huvm-softgpu: GPU%u: PMA destroyed with eviction callbacks registered\n", gpu->index);
    if (pma->n_free != pma->nframes)
        pr_warn("huvm-softgpu: GPU%u: PMA destroyed with %llu pinned and %llu unpinned 64K frames allocated\n",
                gpu->index,
                pma->n_pinned,
                pma->n_unpinned);

    gpu->pma = NULL;
    pma->magic = 0;
    vfree(pma->frame);
    vfree(pma->blk_free);
    kfree(pma);
}

void sg_pma_counters(struct sg_gpu *gpu, u64 *free_b, u64 *pinned_b, u64 *unpinned_b)
{
    struct sg_pma *pma = gpu->pma;

    *free_b = *pinned_b = *unpinned_b = 0;
    if (!pma)
        return;

    spin_lock(&pma->lock);
    *free_b = pma->n_free << SG_PMA_FRAME_SHIFT;
    *pinned_b = pma->n_pinned << SG_PMA_FRAME_SHIFT;
    *unpinned_b = pma->n_unpinned << SG_PMA_FRAME_SHIFT;
    spin_unlock(&pma->lock);
}

/* ---- eviction callbacks ------------------------------------------------------------------------- */

/* Ask UVM to evict and pin count pages of page_size in [begin, end) and return them in pages. No lock. */
static NV_STATUS sg_pma_evict_pages(struct sg_pma *pma, u64 page_size, u64 *pages, u64 count, u64 begin, u64 end)
{
    NV_STATUS status = NV_ERR_NO_MEMORY;

    if (count > U32_MAX)
        return NV_ERR_NO_MEMORY;

    down_read(&pma->cb_sem);
    if (pma->evict_pages) {
        sg_count(pma->gpu, SOFTGPU_CTR_PMA_EVICTIONS, 1);
                /*
                 * UVM reads the end as exclusive (uvm_pmm_gpu.c:uvm_pmm_gpu_pma_evict_pages rejects a chunk with
                 * address + 2M > phys_end), as phys_mem_allocator.h documents the range: pass one past the last
                 * byte, so the topmost root chunk is a valid victim.
                 */
        status = pma->evict_pages(pma->cb_ctx,
                                  page_size,
                                  pages,
                                  (NvU32)count,
                                  begin,
                                  end,
                                  UVM_PMA_GPU_MEMORY_TYPE_UNPROTECTED);
    }
    up_read(&pma->cb_sem);
    return status;
}

/* Ask UVM to evict everything it owns in [begin, last] (inclusive, as UVM's evict_range walks it). */
static NV_STATUS sg_pma_evict_range(struct sg_pma *pma, u64 begin, u64 last)
{
    NV_STATUS status = NV_ERR_NO_MEMORY;

    down_read(&pma->cb_sem);
    if (pma->evict_range) {
        sg_count(pma->gpu, SOFTGPU_CTR_PMA_EVICTIONS, 1);
        status = pma->evict_range(pma->cb_ctx, begin, last, UVM_PMA_GPU_MEMORY_TYPE_UNPROTECTED);
    }
    up_read(&pma->cb_sem);
    return status;
}

NV_STATUS nvUvmInterfacePmaRegisterEvictionCallbacks(void *pPma,
                                                     uvmPmaEvictPagesCallback evictPages,
                                                     uvmPmaEvictRangeCallback evictRange,
                                                     void *callbackData)
{
    struct sg_pma *pma = sg_pma_from(pPma);
    NV_STATUS status = NV_OK;

    if (!pma || !evictPages || !evictRange)
        return NV_ERR_INVALID_ARGUMENT;

    down_write(&pma->cb_sem);
    if (pma->evict_pages) {
        status = NV_ERR_INVALID_STATE;          /* one set at a time (pmaRegisterEvictionCb) */
    }
    else {
        pma->evict_pages = evictPages;
        pma->evict_range = evictRange;
        pma->cb_ctx = callbackData;
    }
    up_write(&pma->cb_sem);
    return status;
}
EXPORT_SYMBOL(nvUvmInterfacePmaRegisterEvictionCallbacks);

void nvUvmInterfacePmaUnregisterEvictionCallbacks(void *pPma)
{
    struct sg_pma *pma = sg_pma_from(pPma);

    if (!pma)
        return;

        /* Taking the semaphore for write waits until no callback is running. */
    down_write(&pma->cb_sem);
    pma->evict_pages = NULL;
    pma->evict_range = NULL;
    pma->cb_ctx = NULL;
    up_write(&pma->cb_sem);
}
EXPORT_SYMBOL(nvUvmInterfacePmaUnregisterEvictionCallbacks);

NV_STATUS nvUvmInterfaceGetPmaObject(uvmGpuDeviceHandle device, void **pPma, const UvmPmaStatistics **pPmaPubStats)
{
    struct sg_gpu *gpu = device ? device->gpu : NULL;

    if (!gpu || !pPma || !pPmaPubStats)
        return NV_ERR_INVALID_ARGUMENT;
    if (!gpu->pma)
        return NV_ERR_NOT_SUPPORTED;

    *pPma = gpu->pma;
    *pPmaPubStats = &gpu->pma->stats;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceGetPmaObject);

/* ---- allocation --------------------------------------------------------------------------------- */

struct sg_pma_request {
    u64 count;                      /* pages wanted */
    u64 page_size;
    u64 align;                      /* contiguous: start alignment (>= page_size) */
    u64 begin, end;                 /* allowed physical range, end exclusive */
    u8 state;                       /* SG_PMA_PINNED or SG_PMA_UNPINNED once allocated */
    bool evict;                     /* may call UVM's eviction callbacks */
    bool partial;                   /* may return fewer pages */
};

/*
 * Discontiguous: take free pages first; if short and eviction is allowed, hold them pinned and have UVM
 * evict and pin the remainder. Returns the number of pages in *allocated (all of them unless partial).
 */
static NV_STATUS sg_pma_alloc_discontig(struct sg_pma *pma, const struct sg_pma_request *r, u64 *pages, u64 *allocated)
{
    const u64 fpp = r->page_size >> SG_PMA_FRAME_SHIFT;
    NV_STATUS status = NV_OK;
    u64 got = 0, evictable = 0, n_evict = 0, addr, i;

    spin_lock(&pma->lock);
    for (addr = round_up(r->begin, r->page_size); addr + r->page_size <= r->end && got < r->count;
         addr += r->page_size) {
        u64 f0 = addr >> SG_PMA_FRAME_SHIFT;

        if (sg_pma_first_bad(pma, f0, fpp, sg_pma_frame_allocatable) == f0 + fpp) {
                        /* Claimed pinned: if the lock is dropped for eviction below, nothing can take or
                         * evict them meanwhile. The final state is set on commit. */
            sg_pma_set_range(pma, f0, fpp, SG_PMA_PINNED);
            pages[got++] = addr;
        }
    }

    if (got < r->count && r->evict) {
        for (addr = round_up(r->begin, r->page_size); addr + r->page_size <= r->end; addr += r->page_size) {
            if (sg_pma_page_needs_eviction(pma, addr >> SG_PMA_FRAME_SHIFT, fpp))
                evictable++;
        }
        /* Evict only if it can satisfy the request (RM predicts out-of-memory otherwise), or as much as
         * there is for a best-effort (partial) request. */
        if (evictable >= r->count - got)
            n_evict = r->count - got;
        else if (r->partial)
            n_evict = evictable;
    }
    sg_pma_update_stats(pma);
    spin_unlock(&pma->lock);

    if (n_evict) {
        status = sg_pma_evict_pages(pma, r->page_size, pages + got, n_evict, r->begin, r->end);

        spin_lock(&pma->lock);
        if (status == NV_OK) {
            /* UVM hands back pages it pinned for us (PmaPinPages from inside the callback). */
            for (i = got; i < got + n_evict; i++) {
                u64 f0 = pages[i] >> SG_PMA_FRAME_SHIFT, f;
                bool ok =
                    IS_ALIGNED(pages[i], r->page_size) && pages[i] >= r->begin && pages[i] + r->page_size <= r->end;

                for (f = f0; ok && f < f0 + fpp; f++)
                    ok = pma->frame[f] == SG_PMA_PINNED;
                if (!ok) {
                    pr_err(
                        "huvm-softgpu: GPU%u: evictPages returned page 0x%llx that is not pinned in [0x%llx, 0x%llx)\n",
                        pma->gpu->index,
                        pages[i],
                        r->begin,
                        r->end);
                    status = NV_ERR_INVALID_STATE;
                    break;
                }
            }
            if (status == NV_OK)
                got += n_evict;
        }
        /* On failure UVM has already freed whatever it evicted (uvm_pmm_gpu_pma_evict_pages). */
    }
    else {
        spin_lock(&pma->lock);
        if (got < r->count)
            status = NV_ERR_NO_MEMORY;
    }

    if (got == r->count) {
        status = NV_OK;
    }
    else if (r->partial && got > 0 && (status == NV_OK || status == NV_ERR_NO_MEMORY)) {
        status = NV_OK; /* best effort: keep what we have */
    }
    else {
        if (status == NV_OK)
            status = NV_ERR_NO_MEMORY;
        for (i = 0; i < got; i++)
            sg_pma_set_range(pma, pages[i] >> SG_PMA_FRAME_SHIFT, fpp, SG_PMA_FREE);
        got = 0;
    }

    for (i = 0; i < got; i++)
        sg_pma_set_range(pma, pages[i] >> SG_PMA_FRAME_SHIFT, fpp, r->state);
    sg_pma_update_stats(pma);
    spin_unlock(&pma->lock);

    *allocated = got;
    return status;
}

/*
 * Find an aligned run of nf frames in [begin, end) that all satisfy pred. pma->lock held.
 * Returns the run's address or U64_MAX.
 */
static u64 sg_pma_find_run(struct sg_pma *pma,
                           const struct sg_pma_request *r,
                           u64 size,
                           bool (*pred)(struct sg_pma *, u64))
{
    const u64 nf = size >> SG_PMA_FRAME_SHIFT;
    u64 addr = round_up(r->begin, r->align);

    while (addr + size <= r->end && addr + size > addr) {
        u64 f0 = addr >> SG_PMA_FRAME_SHIFT;
        u64 bad = sg_pma_first_bad(pma, f0, nf, pred);

        if (bad == f0 + nf)
            return addr;
        /* No run can contain the failing frame: restart past it. */
        addr = round_up((bad + 1) << SG_PMA_FRAME_SHIFT, r->align);
    }
    return U64_MAX;
}

/* Contiguous: one aligned run; if none is free, evict a run holding only free and unpinned frames. */
static NV_STATUS sg_pma_alloc_contig(struct sg_pma *pma, const struct sg_pma_request *r, u64 *pages)
{
    u64 size, nf, addr, f0, f;
    NV_STATUS status;

    if (r->count > (r->end - r->begin) / r->page_size)
        return NV_ERR_NO_MEMORY;
    size = r->count * r->page_size;
    nf = size >> SG_PMA_FRAME_SHIFT;

    spin_lock(&pma->lock);
    addr = sg_pma_find_run(pma, r, size, sg_pma_frame_allocatable);
    if (addr != U64_MAX) {
        sg_pma_set_range(pma, addr >> SG_PMA_FRAME_SHIFT, nf, r->state);
        sg_pma_update_stats(pma);
        spin_unlock(&pma->lock);
        pages[0] = addr;
        return NV_OK;
    }
    addr = r->evict ? sg_pma_find_run(pma, r, size, sg_pma_frame_evictable) : U64_MAX;
    if (addr == U64_MAX) {
        spin_unlock(&pma->lock);
        return NV_ERR_NO_MEMORY;
    }
    /* Mark the run: nobody may allocate or pin in it while UVM evicts (and frees) its chunks there. */
    f0 = addr >> SG_PMA_FRAME_SHIFT;
    for (f = f0; f < f0 + nf; f++)
        pma->frame[f] |= SG_PMA_EVICTING;
    spin_unlock(&pma->lock);

    status = sg_pma_evict_range(pma, addr, addr + size - 1);

    spin_lock(&pma->lock);
    for (f = f0; f < f0 + nf; f++)
        pma->frame[f] &= ~SG_PMA_EVICTING;
    /* UVM evicts every chunk it owns in the range; anything still allocated is not ours to take. */
    if (status == NV_OK && sg_pma_first_bad(pma, f0, nf, sg_pma_frame_allocatable) != f0 + nf)
        status = NV_ERR_NO_MEMORY;
    if (status == NV_OK)
        sg_pma_set_range(pma, f0, nf, r->state);
    sg_pma_update_stats(pma);
    spin_unlock(&pma->lock);

    if (status == NV_OK)
        pages[0] = addr;
    return status;
}

/* pmaAllocatePages for one GPU; eviction callbacks may run (never with a lock held). */
static NV_STATUS sg_pma_alloc(struct sg_pma *pma,
                              NvLength count,
                              NvU64 page_size,
                              UvmPmaAllocationOptions *opts,
                              NvU64 *pages)
{
    struct sg_pma_request r = { 0 };
    u32 flags = opts->flags;
    u64 pma_size = pma->nframes << SG_PMA_FRAME_SHIFT;
    u64 allocated = 0;
    NV_STATUS status;

    if (!count || !pages || !sg_pma_page_size_valid(page_size))
        return NV_ERR_INVALID_ARGUMENT;

    /* No protected (confidential computing) region and one region (id 0) of one speed. */
    if (flags & UVM_PMA_ALLOCATE_PROTECTED_REGION) {
        sg_unemulated(pma->gpu, "PMA allocation in the protected region", flags, 0);
        return NV_ERR_NOT_SUPPORTED;
    }
    if ((flags & UVM_PMA_ALLOCATE_SPECIFY_REGION_ID) && opts->regionId != 0)
        return NV_ERR_NO_MEMORY;
    if ((flags & UVM_PMA_ALLOCATE_TURN_BLACKLIST_OFF) && !(flags & UVM_PMA_ALLOCATE_CONTIGUOUS))
        return NV_ERR_INVALID_ARGUMENT;

    r.count = count;
    r.page_size = page_size;
    r.align = page_size;
    r.begin = 0;
    r.end = pma_size;
    r.state = (flags & UVM_PMA_ALLOCATE_PINNED) ? SG_PMA_PINNED : SG_PMA_UNPINNED;
    r.evict = !(flags & UVM_PMA_ALLOCATE_DONT_EVICT);
    r.partial = !!(flags & UVM_PMA_ALLOCATE_ALLOW_PARTIAL);

    if (flags & UVM_PMA_ALLOCATE_SPECIFY_ADDRESS_RANGE) {
        /* [physBegin, physEnd], inclusive, both ends page aligned (phys_mem_allocator.c). */
        if (!IS_ALIGNED(opts->physBegin, page_size) || !IS_ALIGNED(opts->physEnd + 1, page_size) ||
            opts->physBegin > opts->physEnd)
            return NV_ERR_INVALID_ARGUMENT;
        r.begin = min(opts->physBegin, pma_size);
        r.end = opts->physEnd >= pma_size ? pma_size : opts->physEnd + 1;
    }
    if (flags & UVM_PMA_ALLOCATE_FORCE_ALIGNMENT) {
        if (!IS_ALIGNED(opts->alignment, SG_PAGE_64K) || !is_power_of_2(opts->alignment))
            return NV_ERR_INVALID_ARGUMENT;
        r.align = max_t(u64, page_size, opts->alignment);
        if (!(flags & UVM_PMA_ALLOCATE_CONTIGUOUS) && r.align > page_size)
            return NV_ERR_INVALID_ARGUMENT;
    }

    /* Pages are not scrubbed here: UVM zeroes chunks with the CE when RESULT_IS_ZERO is clear. */
    opts->resultFlags = 0;

    if (r.begin >= r.end) {
        status = NV_ERR_NO_MEMORY;
    }
    else if (flags & UVM_PMA_ALLOCATE_CONTIGUOUS) {
        status = sg_pma_alloc_contig(pma, &r, pages);
        allocated = status == NV_OK ? count : 0;
    }
    else {
        status = sg_pma_alloc_discontig(pma, &r, pages, &allocated);
    }

    if (status == NV_OK) {
        opts->numPagesAllocated = allocated;
        sg_count(pma->gpu, SOFTGPU_CTR_PMA_ALLOC_PAGES, allocated);
    }
    return status;
}

NV_STATUS nvUvmInterfacePmaAllocPages(void *pPma,
                                      NvLength pageCount,
                                      NvU64 pageSize,
                                      UvmPmaAllocationOptions *pPmaAllocOptions,
                                      NvU64 *pPages)
{
    struct sg_pma *pma = sg_pma_from(pPma);
    UvmPmaAllocationOptions defaults = { 0 };

    if (!pma || !pPages)
        return NV_ERR_INVALID_ARGUMENT;

    /* Test knob: fail the next N allocations as if the FB were exhausted. */
    if (atomic_dec_if_positive(&pma->gpu->fail_pma_alloc) >= 0)
        return NV_ERR_NO_MEMORY;

    /* nv_gpu_ops.c uses default options when none are given. */
    return sg_pma_alloc(pma, pageCount, pageSize, pPmaAllocOptions ? pPmaAllocOptions : &defaults, pPages);
}
EXPORT_SYMBOL(nvUvmInterfacePmaAllocPages);

/* ---- pin / unpin / free ------------------------------------------------------------------------ */

static bool sg_pma_page_in_range(struct sg_pma *pma, u64 addr, u64 size)
{
    return IS_ALIGNED(addr, SG_PMA_FRAME_SIZE) && size <= (pma->nframes << SG_PMA_FRAME_SHIFT) &&
           addr <= (pma->nframes << SG_PMA_FRAME_SHIFT) - size;
}

/*
 * Moves whole pages between the unpinned and pinned states, all or nothing (pmaPinPages / pmaUnpinPages):
 * every frame must be in state `from`; pinning also refuses memory picked for eviction (NV_ERR_IN_USE,
 * expected when UVM races with an evictRange). On failure the frames changed so far are put back.
 */
static NV_STATUS sg_pma_repin(struct sg_pma *pma, NvU64 *pPages, NvLength pageCount, NvU64 pageSize, u8 from, u8 to)
{
    const u64 fpp = pageSize >> SG_PMA_FRAME_SHIFT;
    NV_STATUS status = NV_OK;
    u64 i, j, done = 0;

    if (!pma || !pPages || !pageCount || !sg_pma_page_size_valid(pageSize))
        return NV_ERR_INVALID_ARGUMENT;

    spin_lock(&pma->lock);
    for (i = 0; i < pageCount && status == NV_OK; i++) {
        u64 f0 = pPages[i] >> SG_PMA_FRAME_SHIFT;

        if (!sg_pma_page_in_range(pma, pPages[i], pageSize)) {
            status = NV_ERR_INVALID_ARGUMENT;
            break;
        }
        for (j = 0; j < fpp; j++) {
            u8 v = pma->frame[f0 + j];

            if ((v & SG_PMA_STATE_MASK) != from)
                status = NV_ERR_INVALID_STATE;
            if (to == SG_PMA_PINNED && (v & SG_PMA_EVICTING))
                status = NV_ERR_IN_USE;
            if (status != NV_OK)
                break;
            sg_pma_set_state(pma, f0 + j, to);
            done++;
        }
    }
    if (status != NV_OK) {
        for (i = 0; done; i++) {
            u64 f0 = pPages[i] >> SG_PMA_FRAME_SHIFT;

            for (j = 0; j < fpp && done; j++, done--)
                sg_pma_set_state(pma, f0 + j, from);
        }
        if (status == NV_ERR_INVALID_STATE)
            pr_err("huvm-softgpu: GPU%u: PMA %s of memory that is not allocated %s\n",
                   pma->gpu->index,
                   to == SG_PMA_PINNED ? "pin" : "unpin",
                   to == SG_PMA_PINNED ? "unpinned" : "pinned");
    }
    sg_pma_update_stats(pma);
    spin_unlock(&pma->lock);
    return status;
}

NV_STATUS nvUvmInterfacePmaPinPages(void *pPma, NvU64 *pPages, NvLength pageCount, NvU64 pageSize, NvU32 flags)
{
    /*
     * UVM_PMA_CALLED_FROM_PMA_EVICTION only tells RM that its thread state is already set up (we are
     * inside our own eviction callback): nothing here blocks on the callback, so it changes nothing.
     */
    return sg_pma_repin(sg_pma_from(pPma), pPages, pageCount, pageSize, SG_PMA_UNPINNED, SG_PMA_PINNED);
}
EXPORT_SYMBOL(nvUvmInterfacePmaPinPages);

#if SG_NV_BRANCH < 580
/* Removed from the interface in 580. */
NV_STATUS nvUvmInterfacePmaUnpinPages(void *pPma, NvU64 *pPages, NvLength pageCount, NvU64 pageSize)
{
    /* Declared but unused by UVM 535; implemented as pmaUnpinPages: pinned -> unpinned, all or nothing. */
    return sg_pma_repin(sg_pma_from(pPma), pPages, pageCount, pageSize, SG_PMA_PINNED, SG_PMA_UNPINNED);
}
EXPORT_SYMBOL(nvUvmInterfacePmaUnpinPages);
#endif

static void sg_pma_free(struct sg_pma *pma, const NvU64 *pages, u64 count, u64 page_size, u32 flags)
{
    /* With CONTIGUOUS, pages[0] starts one run of count * page_size (nv_gpu_ops.c:nvGpuOpsPmaFreePages). */
    bool contig = flags & UVM_PMA_ALLOCATE_CONTIGUOUS;
    u64 runs = contig ? 1 : count;
    u64 run_size = contig ? count * page_size : page_size;
    bool bad = false, double_free = false;
    u64 i, f;

    if (!pages || !count || !page_size || (contig && run_size / count != page_size))
        return;

    spin_lock(&pma->lock);
    for (i = 0; i < runs; i++) {
        u64 f0 = pages[i] >> SG_PMA_FRAME_SHIFT;

        if (!sg_pma_page_in_range(pma, pages[i], run_size)) {
            bad = true;
            continue;
        }
        for (f = f0; f < f0 + (run_size >> SG_PMA_FRAME_SHIFT); f++) {
            if (sg_pma_state(pma, f) == SG_PMA_FREE)
                double_free = true;
            /* Keeps EVICTING: UVM frees chunks of a range under eviction, which stays reserved for
             * the allocation that asked for it. */
            sg_pma_set_state(pma, f, SG_PMA_FREE);
        }
    }
    sg_pma_update_stats(pma);
    spin_unlock(&pma->lock);

    /* Freeing never fails; misuse is reported, not fatal. */
    if (bad)
        pr_err_ratelimited("huvm-softgpu: GPU%u: PmaFreePages outside [0, PMA size)\n", pma->gpu->index);
    if (double_free)
        pr_err_ratelimited("huvm-softgpu: GPU%u: PmaFreePages of free memory\n", pma->gpu->index);
}

void nvUvmInterfacePmaFreePages(void *pPma, NvU64 *pPages, NvLength pageCount, NvU64 pageSize, NvU32 flags)
{
    struct sg_pma *pma = sg_pma_from(pPma);

    /* UVM_PMA_FREE_IS_ZERO (nothing is scrubbed here) and CALLED_FROM_PMA_EVICTION (RM thread state)
     * need no action. */
    if (pma)
        sg_pma_free(pma, pPages, pageCount, pageSize, flags);
}
EXPORT_SYMBOL(nvUvmInterfacePmaFreePages);

/* ---- foreign allocations (another process's cudaMalloc) ----------------------------------------- */

NV_STATUS sg_pma_foreign_alloc(struct sg_gpu *gpu, u64 bytes, u64 **pages_out, u64 *npages_out)
{
    struct sg_pma *pma = gpu->pma;
    UvmPmaAllocationOptions opts = { 0 };
    NV_STATUS status;
    u64 n, *pages;

    if (!pma || !bytes || bytes % SG_PAGE_2M || !pages_out || !npages_out)
        return NV_ERR_INVALID_ARGUMENT;

    /* Never more pages than the PMA holds: the request is best effort beyond what fits. */
    n = min(bytes / SG_PAGE_2M, pma->nblocks);
    if (!n)
        return NV_ERR_NO_MEMORY;
    pages = kvmalloc_array(n, sizeof(*pages), GFP_KERNEL);
    if (!pages)
        return NV_ERR_NO_MEMORY;

    /*
     * Pinned and without DONT_EVICT, like RM's own client allocations: when PMA is short, UVM's eviction
     * callbacks run and hand over unpinned root chunks. Best effort (ALLOW_PARTIAL): the caller learns
     * how much it got.
     */
    opts.flags = UVM_PMA_ALLOCATE_PINNED | UVM_PMA_ALLOCATE_ALLOW_PARTIAL;
    status = sg_pma_alloc(pma, n, SG_PAGE_2M, &opts, pages);
    if (status != NV_OK) {
        kvfree(pages);
        return status;
    }

    *pages_out = pages;
    *npages_out = opts.numPagesAllocated;
    return NV_OK;
}

void sg_pma_foreign_free(struct sg_gpu *gpu, u64 *pages, u64 npages)
{
    if (gpu->pma && pages && npages)
        sg_pma_free(gpu->pma, pages, npages, SG_PAGE_2M, 0);
    kvfree(pages);
}
