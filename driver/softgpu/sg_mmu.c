/*
 * huvm-softgpu: the emulated MMU: physical apertures and the VER2 page-table walk.
 * SPDX-License-Identifier: GPL-2.0 OR MIT
 *
 * TEST HARDWARE ONLY (see sg.h). Every access of the emulated engines (the CE in sg_engine.c, the SM in
 * sg_fault.c) is translated here, one page at a time:
 *
 *   - Physical addresses: VID is an offset into a GPU's vmalloc'd framebuffer, PEER is the same on the
 *     GPU a peer id names, SYS is a guest physical address. Without an IOMMU the DMA API returns the
 *     guest physical address (dma-direct), and UVM hands the GPU dma_addr - dma_addressable_start, which
 *     is 0 here (nvUvmInterfaceRegisterGpu's UvmGpuPlatformInfo).
 *
 *   - Virtual addresses of a kernel VA space below rm_va_size (128 TB, uvm_volta.c's rm_va_size) belong
 *     to RM: nvUvmInterfaceSetPageDirectory keeps RM's PDE3[0] in UVM's root and UVM never writes that
 *     entry, so instead of emulating RM's page tables we resolve them through sg_rm.c's allocation table
 *     (sg_rm_lookup). A miss is a fault: the caller stops the channel (RC).
 *
 *   - Every other VA is walked from the PDB exactly as the hardware would read the tables UVM writes with
 *     uvm_pascal_mmu.c / uvm_volta_mmu.c, whose bit layout is hwref/volta/gv100/dev_mmu.h (VER2):
 *
 *       depth  level                          VA bits        entry   table
 *       0      PDE3 (the PDB)                 48:47          8 B     4 entries
 *       1      PDE2                           46:38          8 B     512
 *       2      PDE1                           37:29          8 B     512
 *       3      dual PDE0, or a 2M PTE         28:21          16 B    256
 *       4      64K PTE / 4K PTE               20:16 / 20:12  8 B     32 (256 B) / 512
 *
 *     A dual PDE0 points at a big (64K) and a small (4K) table at once; the big PTE wins when it is valid,
 *     sparse, or "unmapped" (VALID=0 VOL=0 PRIV=1, unmapped_pte_pascal: it hides the 4K PTEs); an invalid
 *     big PTE otherwise lets the 4K PTE decide (the table in uvm_va_block.h above pte_is_2m). PDEs with an
 *     invalid aperture and VOL=1 are sparse (the "sparsePde" template of RM's GM20X+ formats); PTEs with
 *     VALID=0 VOL=1 are sparse (make_sparse_pte_pascal): reads return 0, writes are dropped, no fault.
 *
 * Page tables are read as the MMU reads them: 8-byte loads from FB or sysmem, never through a lock,
 * while the CE (an engine thread) may be rewriting them.
 *
 *   - The TLB. A walk that ends in a valid PTE fills an entry of the GPU's TLB (struct sg_tlb in sg.h:
 *     tagged by the PDB walked from, the page's base and size, and the client: GPC for the SM, HUB for
 *     the copy engines and the host), and later accesses to that page through the same PDB use the entry
 *     without reading the page tables again, until a TLB invalidate drops it. An access through a stale
 *     entry reaches the physical page the old PTE named, as on the hardware. What real GPUs cache where:
 *     SMs translate through per-TPC/GPC uTLBs and the GPC MMU, backed by the shared L2 TLB of the HUB MMU,
 *     which also serves the copy engines and the host; each level also caches PDEs (page-walk caches).
 *     The emulator keeps one structure per GPU with the GPC/HUB tag (so an invalidate with GPC DISABLE
 *     leaves the SM's entries, as it leaves the GPC uTLBs) and caches leaf translations only: no PDE
 *     cache, so PAGE_TABLE_LEVEL (which levels an invalidate reaches) cannot matter here and a missing
 *     PDE invalidate cannot fail. Faults, sparse mappings and RM's range (resolved through RM's table,
 *     not page tables) are never cached. Invalidates (sg_tlb_invalidate) drop by PDB (one or ALL), by VA
 *     range (TARGETED: the range UVM names, INVALIDATION_SIZE 4K pages from the target aligned down), and
 *     by client (GPC ENABLE); Ampere's INVAL_SCOPE LINK_TLBS reaches only the link TLBs, which are not
 *     emulated. Replays are invalidates too: UVM points them at a dummy PDB (VID 0) and VA 0.
 *
 * LOCKING: sg_mmu_translate takes vas->lock briefly to read the PDB (and sg_rm_lookup takes it for RM
 * VAs), then the GPU's tlb.lock (a leaf spinlock) to look up or fill an entry; callable from any process
 * context with no softgpu spinlock held. Concurrent users of one TLB: the GPU's engine thread and any
 * number of SM threads. sg_tlb_invalidate drops entries under tlb.lock, then waits for the SM accesses in
 * flight (fault->tlb_sem), so an access that translated before the invalidate finishes before the
 * invalidate's method completes.
 */

#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/io.h>
#include <linux/string.h>
#include <linux/hash.h>
#include <linux/log2.h>

#include "sg.h"
#include "hwref/volta/gv100/dev_mmu.h"

/* Bit ranges "hi:lo" of NVIDIA's hwref headers: the usual ternary trick. */
#define SG_LO(f)                (0 ? f)
#define SG_HI(f)                (1 ? f)
#define SG_MASK(f)      (~0ULL >> (63 - (SG_HI(f) - SG_LO(f))))
#define SG_WIDTH(f)     (SG_HI(f) - SG_LO(f) + 1)
/* A field of a 64-bit entry, and a field of the second qword of a 16-byte dual PDE (bits 127:64). */
#define SG_FLD(v, f)    (((u64)(v) >> SG_LO(f)) & SG_MASK(f))
#define SG_FLD_HI(v, f) (((u64)(v) >> (SG_LO(f) - 64)) & SG_MASK(f))

/* VER2 VAs are 49 bits wide (uvm_pascal_mmu.c: num_va_bits_pascal). */
#define SG_VA_BITS 49

/* No x86-64 physical address is wider (5-level paging's MAX_PHYSMEM_BITS); pfn_valid does the rest. */
#define SG_PA_BITS_MAX 52

/* ---- physical apertures ------------------------------------------------------------------------- */

void *sg_phys_ptr(struct sg_gpu *gpu, u32 aperture, u64 pa, u64 len)
{
    u64 last;
    unsigned long pfn;

    // A zero-length request still names a byte that must exist.
    if (len == 0)
        len = 1;
    if (pa + len < pa)
        return NULL;
    last = pa + len - 1;

    switch (aperture) {
    case SG_AP_VID:
    case SG_AP_PEER:
            // The caller resolved the peer: gpu is the FB owner either way. The RM-reserved top of the FB
            // is part of the FB.
        if (!gpu || !gpu->fb || last >= gpu->fb_size)
            return NULL;
        return gpu->fb + pa;

    case SG_AP_SYS:
            // Guest physical memory. x86-64 keeps all RAM in the direct map, so a range of valid pfns is
            // contiguous there. Reserved pages are refused as well: they include the holes inside a memory
            // section (pfn_valid but possibly unmapped) and the kernel image, which no DMA mapping names.
        if (last >> SG_PA_BITS_MAX)
            return NULL;
        for (pfn = PHYS_PFN(pa); pfn <= PHYS_PFN(last); pfn++) {
            if (!pfn_valid(pfn) || PageReserved(pfn_to_page(pfn)))
                return NULL;
        }
        return phys_to_virt((phys_addr_t)pa);

    default: return NULL;
    }
}

/* ---- the walk ----------------------------------------------------------------------------------- */

/* Where a table lives: aperture (VID of the VA space's GPU, or SYS) and physical address. */
struct sg_table_loc {
    u32 aperture;
    u64 pa;
};

/* Reads n (8 or 16) bytes of a table entry as the MMU would: aligned 8-byte loads. */
static bool sg_mmu_read_entry(struct sg_vaspace *vas,
                              const struct sg_table_loc *t,
                              u64 offset,
                              u64 *out,
                              unsigned int n)
{
    const u64 *p = sg_phys_ptr(vas->gpu, t->aperture, t->pa + offset, n);

    if (!p) {
        pr_warn_ratelimited("huvm-softgpu: %s: page-table entry at %s 0x%llx is outside memory\n",
                            vas->gpu->name,
                            t->aperture == SG_AP_VID ? "VID" : "SYS",
                            t->pa + offset);
        return false;
    }

    out[0] = READ_ONCE(p[0]);
    if (n == 16)
        out[1] = READ_ONCE(p[1]);
    return true;
}

/* A PDE/dual-PDE aperture (0 invalid, 1 VID, 2 SYS coherent, 3 SYS non-coherent) to where its table is.
 * vid_addr/sys_addr are the already-extracted address fields, shift their scale. */
static void sg_mmu_pde_target(u64 ap, u64 vid_addr, u64 sys_addr, unsigned int shift, struct sg_table_loc *t)
{
    if (ap == NV_MMU_VER2_PDE_APERTURE_VIDEO_MEMORY) {
        t->aperture = SG_AP_VID;
        t->pa = vid_addr << shift;
    }
    else {
        t->aperture = SG_AP_SYS;
        t->pa = sys_addr << shift;
    }
}

/* A sparse mapping: no memory behind it. len runs to the end of the sparse region's page. */
static int sg_mmu_sparse(u64 va, u64 page_size, struct sg_xlate *x)
{
    x->sparse = true;
    x->page_size = page_size;
    x->len = page_size - (va & (page_size - 1));
    return SG_FAULT_NONE;
}

/* The VID/PEER physical address of a PTE: ADDRESS_VID (32:8) holds PA bits 36:12 and, on Volta,
 * COMPTAGLINE (53:36) the bits above (uvm_volta_mmu.c: make_pte_volta). */
static u64 sg_mmu_pte_vid_pa(u64 pte)
{
    u64 frame = SG_FLD(pte, NV_MMU_VER2_PTE_ADDRESS_VID) |
                (SG_FLD(pte, NV_MMU_VER2_PTE_COMPTAGLINE) << SG_WIDTH(NV_MMU_VER2_PTE_ADDRESS_VID));

    return frame << NV_MMU_VER2_PTE_ADDRESS_SHIFT;
}

/* A valid PTE of page_size mapping va, decoded into a TLB entry (the page's base and backing, its
 * permission bits). SG_FAULT_APERTURE for a peer id with no GPU behind it. */
static int sg_mmu_pte(struct sg_vaspace *vas, u64 pte, u64 va, u64 page_size, struct sg_tlb_entry *e)
{
    u64 ap = SG_FLD(pte, NV_MMU_VER2_PTE_APERTURE);
    u64 base;

    memset(e, 0, sizeof(*e));
    switch (ap) {
    case NV_MMU_VER2_PTE_APERTURE_VIDEO_MEMORY:
        e->owner = vas->gpu;
        e->aperture = SG_AP_VID;
        base = sg_mmu_pte_vid_pa(pte);
        break;

    case NV_MMU_VER2_PTE_APERTURE_PEER_MEMORY: {
        u32 id = SG_FLD(pte, NV_MMU_VER2_PTE_ADDRESS_VID_PEER);

            // Peer ids are per GPU (UvmGpuP2PCapsParams.peerIds): the id names a GPU from this VA space's
            // GPU's point of view.
        e->owner = vas->gpu->peer_by_id[id];
        if (!e->owner) {
            pr_warn_ratelimited("huvm-softgpu: %s: PEER PTE for VA 0x%llx names peer id %u, which has no "
                                "GPU\n",
                                vas->gpu->name,
                                va,
                                id);
            return SG_FAULT_APERTURE;
        }
        e->aperture = SG_AP_PEER;
        base = sg_mmu_pte_vid_pa(pte);
        break;
    }

    default:
            // SYSTEM_COHERENT_MEMORY and SYSTEM_NON_COHERENT_MEMORY: both are plain RAM to the emulator.
        e->owner = NULL;
        e->aperture = SG_AP_SYS;
        base = SG_FLD(pte, NV_MMU_VER2_PTE_ADDRESS_SYS) << NV_MMU_VER2_PTE_ADDRESS_SHIFT;
        break;
    }

    // The page's base: the MMU takes the address bits above the page size only. UVM writes page-aligned
    // addresses, except NVIDIA's 512M-page test (uvm_mem_test.c:test_huge_page_size, 580), which maps a 4K
    // sysmem page with a 512M PTE holding the page's own address and reads it at that offset into the page.
    e->pa = base & ~(page_size - 1);
    e->va = va & ~(page_size - 1);
    e->page_shift = (u8)ilog2(page_size);
    if (SG_FLD(pte, NV_MMU_VER2_PTE_PRIVILEGE))
        e->flags |= SG_TLBF_PRIV;
    if (SG_FLD(pte, NV_MMU_VER2_PTE_READ_ONLY))
        e->flags |= SG_TLBF_RO;
    if (SG_FLD(pte, NV_MMU_VER2_PTE_ATOMIC_DISABLE))
        e->flags |= SG_TLBF_ATOMIC_DIS;
    return SG_FAULT_NONE;
}

/* An access to va through a translation (walked or from the TLB): permissions, then the backing. */
static int sg_mmu_access(struct sg_vaspace *vas,
                         const struct sg_tlb_entry *e,
                         u64 va,
                         enum sg_access acc,
                         bool ce,
                         struct sg_xlate *x)
{
    u64 page_size = 1ULL << e->page_shift;
    u64 offset = va & (page_size - 1);
    bool ro = e->flags & SG_TLBF_RO;
    bool atomic_disabled = e->flags & SG_TLBF_ATOMIC_DIS;
    u64 len;
    void *kva;

    // Privileged pages (poisoned_pte_pascal) are out of the SM's reach; the CE is a privileged engine.
    if (!ce && (e->flags & SG_TLBF_PRIV))
        return SG_FAULT_PRIV;
    if ((acc == SG_ACC_WRITE || acc == SG_ACC_ATOMIC) && ro)
        return SG_FAULT_RO;
    if (acc == SG_ACC_ATOMIC && atomic_disabled)
        return SG_FAULT_ATOMIC;

    // The rest of the page must exist: the FB of its owner (one bounds check), or RAM. RAM is checked
    // pfn by pfn, so a SYS translation only covers the rest of its 4K page: callers walking a large SYS
    // page 4K at a time (the SM) would otherwise check the whole page again at every step. A poisoned
    // PTE (VID 0x1bad000000) lands beyond any FB here when the CE ignores its PRIV bit.
    len = page_size - offset;
    if (e->aperture == SG_AP_SYS)
        len = SG_PAGE_4K - (va & (SG_PAGE_4K - 1));
    kva = sg_phys_ptr(e->owner, e->aperture, e->pa + offset, len);
    if (!kva) {
        pr_warn_ratelimited("huvm-softgpu: %s: VA 0x%llx maps %s 0x%llx (page %lluK), outside %s\n",
                            vas->gpu->name,
                            va,
                            e->aperture == SG_AP_VID    ? "VID"
                            : e->aperture == SG_AP_PEER ? "PEER"
                                                        : "SYS",
                            e->pa + offset,
                            page_size >> 10,
                            e->aperture == SG_AP_SYS ? "RAM" : "the framebuffer");
        return SG_FAULT_APERTURE;
    }

    x->gpu = e->owner;
    x->aperture = e->aperture;
    x->pa = e->pa + offset;
    x->kva = kva;
    x->len = len;
    x->page_size = page_size;
    x->read_only = ro;
    x->atomic_disabled = atomic_disabled;
    x->sparse = false;
    return SG_FAULT_NONE;
}

/* RM's part of a kernel VA space: its allocation table stands in for its page tables. */
static int sg_mmu_rm(struct sg_vaspace *vas, u64 va, struct sg_xlate *x)
{
    struct sg_gpu *owner = NULL;
    u64 len = 0;
    void *kva;

    kva = sg_rm_lookup(vas, va, &len, &owner);
    if (!kva || len == 0)
        return SG_FAULT_PTE;

    x->gpu = owner;
    x->kva = kva;
    x->len = len;
    x->page_size = SG_PAGE_4K;
    if (owner) {
        x->aperture = (owner == vas->gpu) ? SG_AP_VID : SG_AP_PEER;
        x->pa = (u8 *)kva - owner->fb;
    }
    else {
        // RM sysmem may be vmalloc'd: its physical address is only known for direct-map memory, and no
        // user of an RM translation needs it.
        x->aperture = SG_AP_SYS;
        x->pa = virt_addr_valid(kva) ? (u64)virt_to_phys(kva) : 0;
    }
    return SG_FAULT_NONE;
}

/* The walk from the PDB at root. SG_FAULT_NONE with te filled (te->page_shift != 0) for a valid PTE, or
 * with x->sparse for a sparse mapping; else the fault. */
static int sg_mmu_walk(struct sg_vaspace *vas,
                       const struct sg_table_loc *root,
                       u64 va,
                       struct sg_xlate *x,
                       struct sg_tlb_entry *te)
{
    // VA bits consumed by depths 0-2 (PDE3, PDE2, PDE1) and their index masks (index_bits_pascal).
    static const unsigned int pde_shift[3] = { 47, 38, 29 };
    static const u64 pde_mask[3] = { 0x3, 0x1ff, 0x1ff };
    struct sg_table_loc t = *root;
    struct sg_table_loc big = { 0, 0 }, small = { 0, 0 };
    u64 big_ap, small_ap;
    u64 e[2];
    unsigned int depth;

    for (depth = 0; depth < 3; depth++) {
        u64 idx = (va >> pde_shift[depth]) & pde_mask[depth];
        u64 ap;

        if (!sg_mmu_read_entry(vas, &t, idx * NV_MMU_VER2_PDE__SIZE, e, NV_MMU_VER2_PDE__SIZE))
            return SG_FAULT_PDE;

        // A PTE in a directory: Ampere's 512M pages at PDE1 (depth 2; uvm_ampere_mmu.c page_table_depth
        // and page_sizes, in the VER2 PTE format). Volta has none (its HAL never writes one), nor has any
        // architecture above PDE1.
        if (SG_FLD(e[0], NV_MMU_VER2_PDE_IS_PTE) == NV_MMU_VER2_PDE_IS_PTE_TRUE) {
            if (depth == 2 && sg_arch->pde1_pte)
                return sg_mmu_pte(vas, e[0], va, SG_PAGE_512M, te);
            sg_unemulated(vas->gpu, "MMU: PTE above PDE0", depth, (u32)(va >> 29));
            return SG_FAULT_PDE_SIZE;
        }

        ap = SG_FLD(e[0], NV_MMU_VER2_PDE_APERTURE);
        if (ap == NV_MMU_VER2_PDE_APERTURE_INVALID) {
            if (SG_FLD(e[0], NV_MMU_VER2_PDE_VOL) == NV_MMU_VER2_PDE_VOL_TRUE)
                return sg_mmu_sparse(va, SG_PAGE_4K, x);
            return SG_FAULT_PDE;
        }

        sg_mmu_pde_target(ap,
                          SG_FLD(e[0], NV_MMU_VER2_PDE_ADDRESS_VID),
                          SG_FLD(e[0], NV_MMU_VER2_PDE_ADDRESS_SYS),
                          NV_MMU_VER2_PDE_ADDRESS_SHIFT,
                          &t);
    }

    // Depth 3: a 2M PTE or a dual PDE (16 bytes).
    if (!sg_mmu_read_entry(vas, &t, ((va >> 21) & 0xff) * NV_MMU_VER2_DUAL_PDE__SIZE, e, NV_MMU_VER2_DUAL_PDE__SIZE))
        return SG_FAULT_PDE;

    if (SG_FLD(e[0], NV_MMU_VER2_DUAL_PDE_IS_PTE) == NV_MMU_VER2_DUAL_PDE_IS_PTE_TRUE)
        return sg_mmu_pte(vas, e[0], va, SG_PAGE_2M, te);

    big_ap = SG_FLD(e[0], NV_MMU_VER2_DUAL_PDE_APERTURE_BIG);
    small_ap = SG_FLD_HI(e[1], NV_MMU_VER2_DUAL_PDE_APERTURE_SMALL);

    if (big_ap == NV_MMU_VER2_DUAL_PDE_APERTURE_BIG_INVALID &&
        small_ap == NV_MMU_VER2_DUAL_PDE_APERTURE_SMALL_INVALID) {
        // Sparse 2M: the sparse PTE (VALID=0 VOL=1) in the low qword reads as a dual PDE with VOL_BIG set
        // and no tables.
        if (SG_FLD(e[0], NV_MMU_VER2_DUAL_PDE_VOL_BIG) == NV_MMU_VER2_DUAL_PDE_VOL_BIG_TRUE)
            return sg_mmu_sparse(va, SG_PAGE_2M, x);
        return SG_FAULT_PDE;
    }

    if (big_ap != NV_MMU_VER2_DUAL_PDE_APERTURE_BIG_INVALID) {
        u64 pte;

        sg_mmu_pde_target(big_ap,
                          SG_FLD(e[0], NV_MMU_VER2_DUAL_PDE_ADDRESS_BIG_VID),
                          SG_FLD(e[0], NV_MMU_VER2_DUAL_PDE_ADDRESS_BIG_SYS),
                          NV_MMU_VER2_DUAL_PDE_ADDRESS_BIG_SHIFT,
                          &big);
        if (!sg_mmu_read_entry(vas, &big, ((va >> 16) & 0x1f) * NV_MMU_VER2_PTE__SIZE, &pte, NV_MMU_VER2_PTE__SIZE))
            return SG_FAULT_PDE;

        if (SG_FLD(pte, NV_MMU_VER2_PTE_VALID) == NV_MMU_VER2_PTE_VALID_TRUE)
            return sg_mmu_pte(vas, pte, va, SG_PAGE_64K, te);
        // With VALID clear the MMU still reads VOL (sparse) and PRIV (the unmapped pattern, which keeps it
        // from looking at the 4K PTEs): unmapped_pte_pascal.
        if (SG_FLD(pte, NV_MMU_VER2_PTE_VOL) == NV_MMU_VER2_PTE_VOL_TRUE)
            return sg_mmu_sparse(va, SG_PAGE_64K, x);
        if (SG_FLD(pte, NV_MMU_VER2_PTE_PRIVILEGE) == NV_MMU_VER2_PTE_PRIVILEGE_TRUE)
            return SG_FAULT_PTE;
    }

    // An invalid big PTE (or no big table): the 4K PTE decides.
    if (small_ap == NV_MMU_VER2_DUAL_PDE_APERTURE_SMALL_INVALID)
        return SG_FAULT_PTE;

    sg_mmu_pde_target(small_ap,
                      SG_FLD_HI(e[1], NV_MMU_VER2_DUAL_PDE_ADDRESS_SMALL_VID),
                      SG_FLD_HI(e[1], NV_MMU_VER2_DUAL_PDE_ADDRESS_SMALL_SYS),
                      NV_MMU_VER2_DUAL_PDE_ADDRESS_SHIFT,
                      &small);
    if (!sg_mmu_read_entry(vas, &small, ((va >> 12) & 0x1ff) * NV_MMU_VER2_PTE__SIZE, e, NV_MMU_VER2_PTE__SIZE))
        return SG_FAULT_PDE;

    if (SG_FLD(e[0], NV_MMU_VER2_PTE_VALID) == NV_MMU_VER2_PTE_VALID_TRUE)
        return sg_mmu_pte(vas, e[0], va, SG_PAGE_4K, te);
    if (SG_FLD(e[0], NV_MMU_VER2_PTE_VOL) == NV_MMU_VER2_PTE_VOL_TRUE)
        return sg_mmu_sparse(va, SG_PAGE_4K, x);
    return SG_FAULT_PTE;
}

/* ---- the TLB ------------------------------------------------------------------------------------ */

void sg_tlb_init(struct sg_gpu *gpu)
{
    spin_lock_init(&gpu->tlb.lock);
}

static unsigned int sg_tlb_set(u32 pdb_aperture, u64 pdb_pa, u64 va, unsigned int shift)
{
    return hash_64((va >> shift) ^ (pdb_pa << 5) ^ ((u64)pdb_aperture << 2) ^ shift, SG_TLB_SET_BITS);
}

static bool sg_tlb_match_pdb(const struct sg_tlb_entry *e, u32 pdb_aperture, u64 pdb_pa)
{
    return e->page_shift && e->pdb_aperture == pdb_aperture && e->pdb_pa == pdb_pa;
}

/* The entry for va through (pdb, client), largest page size first. Under tlb.lock. */
static bool sg_tlb_lookup(struct sg_tlb *tlb, u32 pdb_aperture, u64 pdb_pa, u64 va, u8 client, struct sg_tlb_entry *out)
{
    static const u8 shifts[] = { 29, 21, 16, 12 };
    unsigned int i, w;

    for (i = 0; i < ARRAY_SIZE(shifts); i++) {
        unsigned int set = sg_tlb_set(pdb_aperture, pdb_pa, va, shifts[i]);

        for (w = 0; w < SG_TLB_WAYS; w++) {
            const struct sg_tlb_entry *e = &tlb->e[set][w];

            if (e->page_shift == shifts[i] && sg_tlb_match_pdb(e, pdb_aperture, pdb_pa) &&
                (e->flags & SG_TLBF_GPC) == client && e->va == (va & ~((1ULL << shifts[i]) - 1))) {
                *out = *e;
                return true;
            }
        }
    }
    return false;
}

/* Fills (or refreshes) an entry; the set's round-robin victim otherwise. Under tlb.lock. */
static void sg_tlb_fill(struct sg_tlb *tlb, const struct sg_tlb_entry *in)
{
    unsigned int set = sg_tlb_set(in->pdb_aperture, in->pdb_pa, in->va, in->page_shift);
    unsigned int w;

    for (w = 0; w < SG_TLB_WAYS; w++) {
        struct sg_tlb_entry *e = &tlb->e[set][w];

        if (e->page_shift == in->page_shift && sg_tlb_match_pdb(e, in->pdb_aperture, in->pdb_pa) &&
            (e->flags & SG_TLBF_GPC) == (in->flags & SG_TLBF_GPC) && e->va == in->va) {
            *e = *in;
            return;
        }
    }
    for (w = 0; w < SG_TLB_WAYS; w++) {
        if (!tlb->e[set][w].page_shift) {
            tlb->e[set][w] = *in;
            return;
        }
    }
    w = tlb->next[set];
    tlb->next[set] = (u8)((w + 1) % SG_TLB_WAYS);
    tlb->e[set][w] = *in;
}

int sg_mmu_translate(struct sg_vaspace *vas, u64 va, enum sg_access acc, bool ce, struct sg_xlate *x)
{
    struct sg_gpu *gpu = vas->gpu;
    struct sg_table_loc root;
    struct sg_tlb_entry te;
    u8 client = ce ? 0 : SG_TLBF_GPC;
    bool pdb_set, hit;
    int fault;

    memset(x, 0, sizeof(*x));

    if (va >> SG_VA_BITS)
        return SG_FAULT_VA_LIMIT;

    if (vas->kernel && va < vas->rm_va_size)
        return sg_mmu_rm(vas, va, x);

    spin_lock(&vas->lock);
    pdb_set = vas->pdb_set;
    root.aperture = vas->pdb_aperture;
    root.pa = vas->pdb_pa;
    spin_unlock(&vas->lock);

    // No page directory yet (UVM has not called SetPageDirectory): nothing beyond RM's range is mapped.
    if (!pdb_set)
        return SG_FAULT_PDE;

    spin_lock(&gpu->tlb.lock);
    hit = sg_tlb_lookup(&gpu->tlb, root.aperture, root.pa, va, client, &te);
    spin_unlock(&gpu->tlb.lock);
    if (hit) {
        sg_count(gpu, SOFTGPU_CTR_TLB_HITS, 1);
        return sg_mmu_access(vas, &te, va, acc, ce, x);
    }

    sg_count(gpu, SOFTGPU_CTR_TLB_MISSES, 1);
    memset(&te, 0, sizeof(te));
    fault = sg_mmu_walk(vas, &root, va, x, &te);
    if (fault != SG_FAULT_NONE || x->sparse)
        return fault;

    fault = sg_mmu_access(vas, &te, va, acc, ce, x);
    if (fault != SG_FAULT_NONE)
        return fault;

    te.pdb_aperture = (u8)root.aperture;
    te.pdb_pa = root.pa;
    te.flags |= client | (vas->kernel ? 0 : SG_TLBF_USER);
    spin_lock(&gpu->tlb.lock);
    sg_tlb_fill(&gpu->tlb, &te);
    spin_unlock(&gpu->tlb.lock);
    return SG_FAULT_NONE;
}

static bool sg_tlb_inval_matches(const struct sg_tlb_entry *e, const struct sg_tlb_inval *inv)
{
    u64 end;

    if (!e->page_shift)
        return false;
    if (!inv->all_pdbs && !sg_tlb_match_pdb(e, inv->pdb_aperture, inv->pdb_pa))
        return false;
    if (!inv->gpc && (e->flags & SG_TLBF_GPC))
        return false;
    if (!inv->targeted)
        return true;
    // The page [e->va, end] overlaps [inv->va, inv->va + inv->size).
    end = e->va + (1ULL << e->page_shift) - 1;
    return end >= inv->va && e->va <= inv->va + inv->size - 1;
}

void sg_tlb_invalidate(struct sg_gpu *gpu, const struct sg_tlb_inval *inv)
{
    bool keep_user = READ_ONCE(gpu->tlb_drop_invalidates) != 0;
    u64 dropped = 0, kept = 0;
    unsigned int set, w;

    if (!inv->non_link) {
        sg_count(gpu, SOFTGPU_CTR_TLB_INVAL_LINK, 1);
    }
    else {
        sg_count(gpu,
                 inv->all_pdbs   ? SOFTGPU_CTR_TLB_INVAL_ALL
                 : inv->targeted ? SOFTGPU_CTR_TLB_INVAL_VA
                                 : SOFTGPU_CTR_TLB_INVAL_PDB,
                 1);
        spin_lock(&gpu->tlb.lock);
        for (set = 0; set < SG_TLB_SETS; set++) {
            for (w = 0; w < SG_TLB_WAYS; w++) {
                struct sg_tlb_entry *e = &gpu->tlb.e[set][w];

                if (!sg_tlb_inval_matches(e, inv))
                    continue;
                // The test knob: the SM's entries of user VA spaces survive (UVM's own kernel VA space
                // stays sound, so the emulator never writes through a stale entry into freed memory of
                // UVM's).
                if (keep_user && (e->flags & SG_TLBF_USER)) {
                    kept++;
                    continue;
                }
                e->page_shift = 0;
                dropped++;
            }
        }
        spin_unlock(&gpu->tlb.lock);
        if (dropped)
            sg_count(gpu, SOFTGPU_CTR_TLB_DROPPED, dropped);
        if (kept)
            sg_count(gpu, SOFTGPU_CTR_TLB_KEPT, kept);
    }

    // UVM may reuse what an invalidated PTE mapped once the push completes: no SM access may still use
    // an older translation (ACK_TYPE GLOBALLY and the membar UVM pushes after it: the emulated SM writes
    // memory directly, so finishing the access is the ack).
    sg_fault_tlb_invalidate(gpu);
}

static void sg_tlb_flush(struct sg_gpu *gpu, bool all, u32 pdb_aperture, u64 pdb_pa)
{
    unsigned int set, w;

    spin_lock(&gpu->tlb.lock);
    for (set = 0; set < SG_TLB_SETS; set++) {
        for (w = 0; w < SG_TLB_WAYS; w++) {
            struct sg_tlb_entry *e = &gpu->tlb.e[set][w];

            if (all || sg_tlb_match_pdb(e, pdb_aperture, pdb_pa))
                e->page_shift = 0;
        }
    }
    spin_unlock(&gpu->tlb.lock);
}

void sg_tlb_flush_pdb(struct sg_gpu *gpu, u32 pdb_aperture, u64 pdb_pa)
{
    sg_tlb_flush(gpu, false, pdb_aperture, pdb_pa);
}

void sg_tlb_flush_all(struct sg_gpu *gpu)
{
    sg_tlb_flush(gpu, true, 0, 0);
}
