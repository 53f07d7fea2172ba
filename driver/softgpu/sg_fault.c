/*
 * huvm-softgpu: the replayable fault unit and the SM.
 * SPDX-License-Identifier: GPL-2.0 OR MIT
 *
 * TEST HARDWARE ONLY (see sg.h). What a Volta or Ampere GPU's MMU and SMs do about replayable faults (the
 * fault packet, GET/PUT and client ids are the same on both; the uTLB grouping of clients differs), as NVIDIA's
 * nvidia-uvm 535.261.03 relies on it:
 *
 *   - The fault buffer: a ring of 32-byte C369 packets (clc369.h; parsed by uvm_volta_fault_buffer.c)
 *     with GET written by UVM and PUT written here (hwref/volta/gv100/dev_fb.h). A packet's VALID bit is
 *     written last; UVM clears it when it parses the packet (uvm_pascal_fault_buffer.c). A full ring drops
 *     the fault and sets PUT.OVERFLOW: the access stays stalled and faults again at the next replay.
 *
 *   - The interrupt: RM calls UVM's isrTopHalf(uuid) in hard-IRQ context (kernel-open/nvidia/nv.c
 *     nvidia_isr -> nv_uvm_interface.c nv_uvm_event_interrupt). Here an irq_work does, whenever the ring
 *     holds work (GET != PUT, or the packet at GET is valid: uvm_gpu_replayable_faults_pending), limited
 *     to one per SG_FAULT_IRQ_GAP_NS and raised again by a timer while the condition lasts: Volta's fault
 *     interrupt is level-triggered. Spurious calls are harmless to UVM (uvm_gpu_isr.c: the bottom half's
 *     service lock is taken with a trylock and the pending check repeated).
 *
 *   - Replay and cancel: UVM pushes them as host MEM_OP methods or C076 SW methods (uvm_volta_host.c,
 *     uvm_pascal_host.c); sg_engine.c executes them by calling sg_fault_replay / sg_fault_cancel_*. A
 *     replay retries every access parked on a fault on this GPU before it completes: those still unmapped
 *     fault again at once, so that, as on hardware, the regenerated packets are in the ring when the
 *     replay's push is done (uvm_gpu_replayable_faults.c service_fault_batch_for_cancel waits for exactly
 *     that). Prefetches are not replayed: they disappear (check_fault_access_permissions' comment). A
 *     cancel completes the matching parked accesses with an error; UVM replays afterwards.
 *
 *   - The SM: sg_sm_run executes a batch of accesses of a user channel (/dev/huvm-softgpu SM_ACCESS) in
 *     the caller's thread. Each access is translated page by page (sg_mmu_translate); on a fault it writes
 *     a packet and parks. Every access of the batch runs to its first fault before the thread waits, so
 *     UVM gets real batches (several uTLBs, duplicates).
 *
 * LOCKING
 *   fault->sm_lock (mutex)        the pending list and every parked access's state; taken by the SM
 *                                 thread (park, collect) and the GPU's engine thread (replay, cancel) and
 *                                 StopChannel. Translation (vas->lock) and ring writes (fault->lock)
 *                                 nest inside it.
 *   fault->lock (raw spinlock)    the ring: packets and PUT. A leaf, IRQ-safe.
 *   fault->tlb_sem (rwsem)        read by the SM around one page's translate + copy, written (and
 *                                 released at once) by sg_fault_tlb_invalidate: a TLB invalidate returns
 *                                 only once no SM access uses an older translation. Never held while
 *                                 touching user memory, nor together with sm_lock.
 * No lock is held while calling UVM's top half (irq_work, RCU only) or while copying from/to user space.
 */

#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/uaccess.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/jiffies.h>
#include <linux/ktime.h>
#include <linux/timer.h>
#include <linux/rwsem.h>
#include <linux/rcupdate.h>
#include <linux/string.h>
#include <asm/unaligned.h>

#include "sg.h"

/* clc369.h spells its multi-word fields MW(hi:lo) for NVIDIA's DRF_*_MW helpers; here a field is just its
 * bit range within the 256-bit packet. */
#ifndef MW
#define MW(x) x
#endif
#include "clc369.h"
#include "clc36f.h"
#include "hwref/volta/gv100/dev_fault.h"
#include "hwref/volta/gv100/dev_fb.h"

/* Bit ranges "hi:lo" of NVIDIA's headers. */
#define SG_LO(f)                (0 ? f)
#define SG_HI(f)                (1 ? f)
#define SG_MASK32(f) (~0u >> (31 - (SG_HI(f) - SG_LO(f))))

/* GET/PUT registers (hwref/volta/gv100/dev_fb.h). UVM writes GET with GETPTR_CORRUPTED and OVERFLOW set
 * to clear them (uvm_hal_volta_fault_buffer_write_get); they read back as 0 on hardware. */
#define SG_FAULT_PTR_MASK     SG_MASK32(NV_PFB_PRI_MMU_FAULT_BUFFER_GET_PTR)
#define SG_GET_OVERFLOW_CLEAR (1u << SG_LO(NV_PFB_PRI_MMU_FAULT_BUFFER_GET_OVERFLOW))
#define SG_PUT_OVERFLOW       (1u << SG_LO(NV_PFB_PRI_MMU_FAULT_BUFFER_PUT_OVERFLOW))

/* The buffers handed to UVM (sg_rm.c fills UvmGpuFaultInfo / UvmGpuAccessCntrInfo from them). 1024
 * replayable packets: UVM batches min(256, entries) at a time. */
#define SG_FAULT_ENTRIES 1024
#define SG_FAULT_NR_SIZE PAGE_SIZE           /* non-replayable shadow: 128 packets, never filled */
#define SG_FAULT_AC_SIZE (4 * PAGE_SIZE)     /* access-counter notifications (32 B), never filled */

/* Interrupt pacing: at most one top half per 200 us; while the ring holds work the timer looks again
 * every jiffy, otherwise it only does the GET upkeep, ten times a second. */
#define SG_FAULT_IRQ_GAP_NS  (200 * NSEC_PER_USEC)
#define SG_FAULT_HEARTBEAT_J (HZ / 10 ? HZ / 10 : 1)

/* A parked SM thread raises the interrupt again this often (UVM may have been busy at the first). */
#define SG_SM_REKICK_MS       2
#define SG_SM_DEFAULT_TIMEOUT 10000

/* Fault sources the SM reports: GPC_ID < SG_SM_GPCS and T1 clients 0, 2, 4, 6, i.e. uTLBs LTP0-LTP3 on
 * Volta (uvm_hal_volta_mmu_client_id_to_utlb_id), LTP0, 2, 4, 6 on Ampere (..._ampere_...). UVM asserts
 * gpc * utlbs_per_gpc + utlb < its uTLB count: Volta gpcCount 6 x (maxTpcPerGpcCount 7 + 1), Ampere
 * maxGpcCount 8 x (2 x maxTpcPerGpcCount 8 + 1) (sg_main.c's sg_arch). */
#define SG_SM_GPCS    6
#define SG_SM_CLIENTS 4

/* ---- the ring ------------------------------------------------------------------------------------ */

static inline u32 *sg_fault_entry(struct sg_fault_unit *f, u32 index)
{
    return (u32 *)f->buffer + index * (NVC369_BUF_SIZE / sizeof(u32));
}

#define SG_C369_VALID_WORD (SG_LO(NVC369_BUF_ENTRY_VALID) / 32)
#define SG_C369_VALID_BIT  (1u << (SG_LO(NVC369_BUF_ENTRY_VALID) % 32))

static inline void sg_mw_set(u32 *e, unsigned int lo, unsigned int hi, u32 v)
{
    unsigned int width = hi - lo + 1;
    u32 mask = (width >= 32) ? ~0u : ((1u << width) - 1);

    e[lo / 32] |= (v & mask) << (lo % 32);
}

#define SG_C369_WIDTH(fld) (SG_HI(NVC369_BUF_ENTRY_##fld) - SG_LO(NVC369_BUF_ENTRY_##fld) + 1)

/* Sets a C369 field (all the ones written here lie within one dword). */
#define SG_C369_SET(e, fld, v)                                                                  \
    do {                                                                                        \
        BUILD_BUG_ON(SG_LO(NVC369_BUF_ENTRY_##fld) / 32 != SG_HI(NVC369_BUF_ENTRY_##fld) / 32); \
        sg_mw_set((e), SG_LO(NVC369_BUF_ENTRY_##fld), SG_HI(NVC369_BUF_ENTRY_##fld), (v));      \
    } while (0)

static u32 sg_fault_hw_access_type(enum sg_access acc)
{
    switch (acc) {
    case SG_ACC_WRITE:    return NV_PFAULT_ACCESS_TYPE_VIRT_WRITE;
    case SG_ACC_ATOMIC:   return NV_PFAULT_ACCESS_TYPE_VIRT_ATOMIC_STRONG;
    case SG_ACC_PREFETCH: return NV_PFAULT_ACCESS_TYPE_VIRT_PREFETCH;
    default:              return NV_PFAULT_ACCESS_TYPE_VIRT_READ;
    }
}

/* The uTLB a GPC client belongs to on Ampere (uvm_hal_ampere_mmu_client_id_to_utlb_id over
 * hwref/ampere/ga100/dev_fault.h's client ids, which equal GV100's): two LTP uTLBs per TPC, T1_2n alone
 * on LTP 2n, T1_2n+1, PE_n and TPCCS_n on LTP 2n+1; RGG 0, LTPn n + 1. */
static u32 sg_fault_client_utlb_ampere(u32 client)
{
    if (client <= NV_PFAULT_CLIENT_GPC_T1_7)
        return client + 1;
    if (client >= NV_PFAULT_CLIENT_GPC_PE_0 && client <= NV_PFAULT_CLIENT_GPC_PE_7)
        return 2 * (client - NV_PFAULT_CLIENT_GPC_PE_0) + 2;
    if (client >= NV_PFAULT_CLIENT_GPC_T1_8 && client <= NV_PFAULT_CLIENT_GPC_T1_15)
        return client - NV_PFAULT_CLIENT_GPC_T1_8 + 8 + 1;
    if (client >= NV_PFAULT_CLIENT_GPC_TPCCS_0 && client <= NV_PFAULT_CLIENT_GPC_TPCCS_7)
        return 2 * (client - NV_PFAULT_CLIENT_GPC_TPCCS_0) + 2;
    return 0xff;
}

/* The uTLB a GPC client belongs to on Volta (the grouping of uvm_hal_volta_mmu_client_id_to_utlb_id over
 * hwref/volta/gv100/dev_fault.h's client ids): RGG 0, LTPn n + 1; 0xff for a client it does not know. */
static u32 sg_fault_client_utlb(u32 client)
{
    if (client >= NV_PFAULT_CLIENT_GPC_RAST && client <= NV_PFAULT_CLIENT_GPC_GPCCS)
        return 0;
    if (sg_arch->gpu_arch == SG_ARCH_GA100)
        return sg_fault_client_utlb_ampere(client);
    if (client <= NV_PFAULT_CLIENT_GPC_T1_7)
        return client / 2 + 1;
    if (client >= NV_PFAULT_CLIENT_GPC_PE_0 && client <= NV_PFAULT_CLIENT_GPC_PE_7)
        return client - NV_PFAULT_CLIENT_GPC_PE_0 + 1;
    if (client >= NV_PFAULT_CLIENT_GPC_T1_8 && client <= NV_PFAULT_CLIENT_GPC_T1_15)
        return (client - NV_PFAULT_CLIENT_GPC_T1_8 + 8) / 2 + 1;
    if (client >= NV_PFAULT_CLIENT_GPC_TPCCS_0 && client <= NV_PFAULT_CLIENT_GPC_TPCCS_7)
        return client - NV_PFAULT_CLIENT_GPC_TPCCS_0 + 1;
    return 0xff;
}

/* Writes one replayable fault packet for a GR access of channel uch. Returns false when it was not
 * written: the buffer is not set up for UVM (InitFaultInfo not done) or full (overflow). */
static bool sg_fault_write(struct sg_gpu *gpu,
                           struct sg_user_channel *uch,
                           u64 va,
                           int fault_type,
                           enum sg_access acc,
                           u32 gpc,
                           u32 client)
{
    struct sg_fault_unit *f = &gpu->fault;
    u32 e[NVC369_BUF_SIZE / sizeof(u32)] = { 0 };
    u64 inst = uch->inst_pa >> 12;
    u64 page = va >> 12;
    u64 ts = sg_gpu_time_ns();
    unsigned long flags;
    u32 get, put, put_reg, i;
    u32 *slot;

    if (!f->regs || !f->buffer || !READ_ONCE(f->info_initialised))
        return false;

    // The instance block of a user channel is a sysmem page (sg_main.c): UVM routes the fault to a VA
    // space by (aperture, address) of the channel it retained (uvm_gpu_fault_entry_to_va_space).
    SG_C369_SET(e, INST_APERTURE, NVC369_BUF_ENTRY_INST_APERTURE_SYS_MEM_COHERENT);
    SG_C369_SET(e, INST_LO, (u32)inst);
    SG_C369_SET(e, INST_HI, (u32)(inst >> SG_C369_WIDTH(INST_LO)));
    SG_C369_SET(e, ADDR_LO, (u32)page);
    SG_C369_SET(e, ADDR_HI, (u32)(page >> SG_C369_WIDTH(ADDR_LO)));
    SG_C369_SET(e, TIMESTAMP_LO, (u32)ts);
    SG_C369_SET(e, TIMESTAMP_HI, (u32)(ts >> 32));
    // GRAPHICS engine, VEID 0: the channel has no subcontexts (uvm_hal_volta_fault_buffer_get_ve_id).
    SG_C369_SET(e, ENGINE_ID, NV_PFAULT_MMU_ENG_ID_GRAPHICS);
    SG_C369_SET(e, FAULT_TYPE, (u32)fault_type);
    SG_C369_SET(e, REPLAYABLE_FAULT, NVC369_BUF_ENTRY_REPLAYABLE_FAULT_TRUE);
    SG_C369_SET(e, CLIENT, client);
    SG_C369_SET(e, ACCESS_TYPE, sg_fault_hw_access_type(acc));
    SG_C369_SET(e, MMU_CLIENT_TYPE, NV_PFAULT_MMU_CLIENT_TYPE_GPC);
    SG_C369_SET(e, GPC_ID, gpc);
    SG_C369_SET(e, PROTECTED_MODE, NVC369_BUF_ENTRY_PROTECTED_MODE_FALSE);
    SG_C369_SET(e, REPLAYABLE_FAULT_EN, NVC369_BUF_ENTRY_REPLAYABLE_FAULT_EN_TRUE);

    raw_spin_lock_irqsave(&f->lock, flags);

    get = READ_ONCE(f->regs->fault_get) & SG_FAULT_PTR_MASK;
    put_reg = READ_ONCE(f->regs->fault_put);
    put = put_reg & SG_FAULT_PTR_MASK;
    if (get >= f->entries || put >= f->entries) {
        raw_spin_unlock_irqrestore(&f->lock, flags);
        pr_warn_ratelimited("huvm-softgpu: %s: fault buffer GET %u / PUT %u beyond its %u entries\n",
                            gpu->name,
                            get,
                            put,
                            f->entries);
        return false;
    }
    if ((put + 1) % f->entries == get) {
        WRITE_ONCE(f->regs->fault_put, put_reg | SG_PUT_OVERFLOW);
        raw_spin_unlock_irqrestore(&f->lock, flags);
        return false;
    }

    slot = sg_fault_entry(f, put);
    for (i = 0; i < ARRAY_SIZE(e); i++) {
        if (i != SG_C369_VALID_WORD)
            WRITE_ONCE(slot[i], e[i]);
    }
    // UVM polls VALID of every packet below PUT (fetch_fault_buffer_entries): the packet before its VALID
    // bit, the VALID bit before PUT.
    wmb();
    WRITE_ONCE(slot[SG_C369_VALID_WORD], e[SG_C369_VALID_WORD] | SG_C369_VALID_BIT);
    wmb();
    WRITE_ONCE(f->regs->fault_put, ((put + 1) % f->entries) | (put_reg & SG_PUT_OVERFLOW));

    raw_spin_unlock_irqrestore(&f->lock, flags);

    sg_count(gpu, SOFTGPU_CTR_FAULTS, 1);
    return true;
}

/* Keeps GET a plain index: UVM's write_get ORs in the clear bits, and its read_get asserts the raw
 * register is below the entry count. Clearing OVERFLOW also clears PUT's overflow flag. */
static void sg_fault_sync_get(struct sg_fault_unit *f)
{
    u32 get = READ_ONCE(f->regs->fault_get);
    unsigned long flags;

    if (!(get & ~SG_FAULT_PTR_MASK))
        return;

    // UVM may be writing GET right now: only replace the value it wrote last.
    if (cmpxchg(&f->regs->fault_get, get, get & SG_FAULT_PTR_MASK) != get)
        return;

    if (get & SG_GET_OVERFLOW_CLEAR) {
        raw_spin_lock_irqsave(&f->lock, flags);
        WRITE_ONCE(f->regs->fault_put, READ_ONCE(f->regs->fault_put) & ~SG_PUT_OVERFLOW);
        raw_spin_unlock_irqrestore(&f->lock, flags);
    }
}

/* The interrupt condition: what uvm_gpu_replayable_faults_pending looks at. */
static bool sg_fault_ring_has_work(struct sg_fault_unit *f)
{
    u32 get = READ_ONCE(f->regs->fault_get) & SG_FAULT_PTR_MASK;
    u32 put = READ_ONCE(f->regs->fault_put) & SG_FAULT_PTR_MASK;

    if (get >= f->entries)
        return false;
    if (get != put)
        return true;
    return READ_ONCE(sg_fault_entry(f, get)[SG_C369_VALID_WORD]) & SG_C369_VALID_BIT;
}

/* ---- interrupts ------------------------------------------------------------------------------- */

/* Hard-IRQ context, as RM's nvidia_isr. The ops pointer is RCU-protected by sg_rm.c's (de)registration. */
static void sg_fault_irq(struct irq_work *work)
{
    struct sg_fault_unit *f = container_of(work, struct sg_fault_unit, irq);
    struct sg_gpu *gpu = container_of(f, struct sg_gpu, fault);
    struct UvmOpsUvmEvents *ops;

    if (!READ_ONCE(f->uvm_owns_intr))
        return;

    rcu_read_lock();
    ops = READ_ONCE(sg_node.ops);
    if (ops && ops->isrTopHalf) {
        ops->isrTopHalf(&gpu->uuid);
        sg_count(gpu, SOFTGPU_CTR_INTERRUPTS, 1);
    }
    rcu_read_unlock();
}

void sg_fault_kick(struct sg_gpu *gpu)
{
    struct sg_fault_unit *f = &gpu->fault;
    u64 now;

    if (!f->regs || !f->buffer || READ_ONCE(f->shutdown))
        return;

    sg_fault_sync_get(f);

    if (!READ_ONCE(f->uvm_owns_intr) || !sg_fault_ring_has_work(f))
        return;

    now = ktime_get_ns();
    if (now - READ_ONCE(f->last_irq_ns) >= SG_FAULT_IRQ_GAP_NS) {
        WRITE_ONCE(f->last_irq_ns, now);
        irq_work_queue(&f->irq);
    }

    // Level-triggered: look again soon, and keep raising it while the condition holds.
    timer_reduce(&f->timer, jiffies + 1);
}

static void sg_fault_timer(struct timer_list *t)
{
    struct sg_fault_unit *f = from_timer(f, t, timer);
    struct sg_gpu *gpu = container_of(f, struct sg_gpu, fault);

    sg_fault_kick(gpu);
    if (!READ_ONCE(f->shutdown))
        timer_reduce(&f->timer, jiffies + SG_FAULT_HEARTBEAT_J);
}

/* ---- module load / unload ---------------------------------------------------------------------- */

/* The buffers sg_fault_init allocates (and the registers page, when it allocated that too). */
static void sg_fault_free_buffers(struct sg_fault_unit *f)
{
    vfree(f->ac_buffer);
    vfree(f->nr_shadow);
    vfree(f->buffer);
    f->ac_buffer = NULL;
    f->nr_shadow = NULL;
    f->buffer = NULL;
    if (f->regs_owned) {
        vfree(f->regs);
        f->regs = NULL;
        f->regs_owned = false;
    }
}

NV_STATUS sg_fault_init(struct sg_gpu *gpu)
{
    struct sg_fault_unit *f = &gpu->fault;

    raw_spin_lock_init(&f->lock);
    mutex_init(&f->sm_lock);
    INIT_LIST_HEAD(&f->pending);
    atomic_set(&f->replay_gen, 0);
    init_waitqueue_head(&f->wq);
    init_irq_work(&f->irq, sg_fault_irq);
    init_rwsem(&f->tlb_sem);
    timer_setup(&f->timer, sg_fault_timer, 0);
    f->last_irq_ns = 0;
    f->shutdown = false;

    // sg_main.c allocates the registers page with the GPU; allocate it here if it has not.
    f->regs_owned = false;
    if (!f->regs) {
        f->regs = vzalloc(PAGE_SIZE);
        if (!f->regs)
            goto fail;
        f->regs_owned = true;
    }

    f->entries = SG_FAULT_ENTRIES;
    f->buffer = vzalloc((size_t)f->entries * NVC369_BUF_SIZE);
    f->nr_size = SG_FAULT_NR_SIZE;
    f->nr_shadow = vzalloc(f->nr_size);
    f->ac_size = SG_FAULT_AC_SIZE;
    f->ac_buffer = vzalloc(f->ac_size);
    if (!f->buffer || !f->nr_shadow || !f->ac_buffer)
        goto fail;

    mod_timer(&f->timer, jiffies + SG_FAULT_HEARTBEAT_J);
    return NV_OK;

fail:
    sg_fault_free_buffers(f);
    return NV_ERR_NO_MEMORY;
}

void sg_fault_fini(struct sg_gpu *gpu)
{
    struct sg_fault_unit *f = &gpu->fault;

    WRITE_ONCE(f->shutdown, true);
    timer_shutdown_sync(&f->timer);
    irq_work_sync(&f->irq);

    // Nothing runs on the GPU any more: no SM thread may still be parked.
    WARN_ON(!list_empty(&f->pending));

    sg_fault_free_buffers(f);
}

/* ---- parked SM accesses ------------------------------------------------------------------------ */

enum sg_sm_state {
    SG_SM_ACTIVE = 0,       // running in the SM thread
    SG_SM_PARKED,           // on fault->pending, stalled on a fault until a replay or cancel
    SG_SM_READY,            // a replay found its page mapped: retry
    SG_SM_CANCELLED,        // a cancel method matched it: fails with NV_ERR_INVALID_ADDRESS
    SG_SM_STOPPED,          // its channel was stopped: fails with NV_ERR_INVALID_CHANNEL
    SG_SM_DONE,             // finished; a->status holds the result
};

struct sg_sm_batch {
    struct sg_user_channel *uch;
    struct sg_gpu *gpu;
    void *bounce;               // one page: user data on its way to or from GPU memory
    atomic_t changed;           // a parked access of this batch changed state (under sm_lock)
};

/* One access of a batch. While PARKED it is on fault->pending and the engine thread may change state,
 * faults and prefetch_replayed, all under fault->sm_lock. */
struct sg_sm_acc {
    struct list_head node;
    struct sg_sm_batch *batch;
    softgpu_access_t *a;        // the caller's kernel copy: inputs and results
    enum sg_access acc;
    int state;
    bool waiting;               // owned by the SM thread: parked and not yet collected
    bool prefetch_replayed;     // a replay passed while this prefetch page was parked
    bool prefetch_dropped;      // a prefetch page disappeared without a mapping
    u64 pos;                    // bytes done
    u64 fault_va;               // the 4K page it is parked on
    u32 pdb_aperture;           // its VA space's PDB when it parked (precise cancel matches on it)
    u64 pdb_pa;
    u32 gpc;
    u32 client;
    unsigned long deadline;     // jiffies: give up waiting for a replay
};

/* Hands a parked access back to its SM thread (engine side, under sm_lock). */
static void sg_sm_release(struct sg_sm_acc *s, int state)
{
    list_del_init(&s->node);
    s->state = state;
    atomic_set(&s->batch->changed, 1);
}

void sg_fault_replay(struct sg_gpu *gpu)
{
    struct sg_fault_unit *f = &gpu->fault;
    struct sg_sm_acc *s, *tmp;

    sg_count(gpu, SOFTGPU_CTR_REPLAYS, 1);
    atomic_inc(&f->replay_gen);

    mutex_lock(&f->sm_lock);
    list_for_each_entry_safe(s, tmp, &f->pending, node) {
        struct sg_user_channel *uch = s->batch->uch;
        struct sg_xlate x;
        int fault;

        if (READ_ONCE(uch->stopped)) {
            sg_sm_release(s, SG_SM_STOPPED);
            continue;
        }

        // Prefetches are not replayed: the SM thread looks once more and drops the page if unmapped.
        if (s->acc == SG_ACC_PREFETCH) {
            s->prefetch_replayed = true;
            sg_sm_release(s, SG_SM_READY);
            continue;
        }

        fault = sg_mmu_translate(uch->vas, s->fault_va, s->acc, false, &x);
        if (fault == SG_FAULT_NONE) {
            sg_sm_release(s, SG_SM_READY);
            continue;
        }

        // Still unmapped: the replayed access faults again right away and stays stalled.
        spin_lock(&uch->vas->lock);
        s->pdb_aperture = uch->vas->pdb_aperture;
        s->pdb_pa = uch->vas->pdb_pa;
        spin_unlock(&uch->vas->lock);
        if (sg_fault_write(gpu, uch, s->fault_va, fault, s->acc, s->gpc, s->client))
            s->a->faults++;
    }
    mutex_unlock(&f->sm_lock);

    wake_up_all(&f->wq);
    sg_fault_kick(gpu);
}

/* MEM_OP_C TLB_INVALIDATE_ACCESS_TYPE of a CANCEL_VA_GLOBAL (clc36f.h). */
#define SG_CANCEL_READ          NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE_VIRT_READ
#define SG_CANCEL_WRITE         NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE_VIRT_WRITE
#define SG_CANCEL_ATOMIC_STRONG NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE_VIRT_ATOMIC_STRONG
#define SG_CANCEL_RESERVED      NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE_VIRT_RSVRVD
#define SG_CANCEL_ATOMIC_ALL    NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE_VIRT_ATOMIC_ALL
#define SG_CANCEL_WRITE_ATOMIC  NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE_VIRT_WRITE_AND_ATOMIC
#define SG_CANCEL_ALL           NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE_VIRT_ALL

/* Does a cancel of HW access type `mode` hit access acc? */
static bool sg_fault_cancel_access_matches(u32 mode, enum sg_access acc)
{
    switch (mode) {
    case SG_CANCEL_ALL:           return true;
    case SG_CANCEL_WRITE_ATOMIC:  return acc == SG_ACC_WRITE || acc == SG_ACC_ATOMIC;
    case SG_CANCEL_ATOMIC_ALL:
    case SG_CANCEL_ATOMIC_STRONG: return acc == SG_ACC_ATOMIC;
    case SG_CANCEL_WRITE:         return acc == SG_ACC_WRITE;
    case SG_CANCEL_READ:          return acc == SG_ACC_READ;
    default:
            // ATOMIC_WEAK: the SM issues strong atomics only.
        return false;
    }
}

/* Raw MEM_OP_C PDB_APERTURE / FAULT_CANCEL_A INST_APERTURE (0 VID, 2 SYS coherent, 3 SYS non-coherent) to
 * an SG_AP_*: both SYS kinds are the same memory. */
static u32 sg_fault_hw_aperture(u32 hw)
{
    return (hw == 2 || hw == 3) ? SG_AP_SYS : (hw == 0 ? SG_AP_VID : 0xffffffffu);
}

void sg_fault_cancel_va(struct sg_gpu *gpu, u32 pdb_aperture, u64 pdb_pa, u64 va, u32 access_mode)
{
    struct sg_fault_unit *f = &gpu->fault;
    struct sg_sm_acc *s, *tmp;
    u32 ap = sg_fault_hw_aperture(pdb_aperture);
    // UVM sends the (canonical) address of the packet; the packet carries VA bits 63:12.
    u64 page = va & ~(SG_PAGE_4K - 1) & ((1ULL << 49) - 1);

    sg_count(gpu, SOFTGPU_CTR_CANCELS, 1);
    if (ap == 0xffffffffu || access_mode == SG_CANCEL_RESERVED || access_mode > SG_CANCEL_ALL) {
        sg_unemulated(gpu, "cancel VA: aperture / access type", pdb_aperture, access_mode);
        return;
    }

    mutex_lock(&f->sm_lock);
    list_for_each_entry_safe(s, tmp, &f->pending, node) {
        if (s->pdb_aperture == ap && s->pdb_pa == pdb_pa && s->fault_va == page &&
            sg_fault_cancel_access_matches(access_mode, s->acc))
            sg_sm_release(s, SG_SM_CANCELLED);
    }
    mutex_unlock(&f->sm_lock);
    wake_up_all(&f->wq);
}

/* Cancels the parked accesses of one uTLB (gpc, client's uTLB), optionally of one instance block only. */
static void sg_fault_cancel_match(struct sg_gpu *gpu, bool by_inst, u64 inst_pa, bool by_utlb, u32 gpc, u32 client)
{
    struct sg_fault_unit *f = &gpu->fault;
    struct sg_sm_acc *s, *tmp;
    u32 utlb = sg_fault_client_utlb(client);

    mutex_lock(&f->sm_lock);
    list_for_each_entry_safe(s, tmp, &f->pending, node) {
        if (by_inst && s->batch->uch->inst_pa != inst_pa)
            continue;
        if (by_utlb && (s->gpc != gpc || (s->client != client && sg_fault_client_utlb(s->client) != utlb)))
            continue;
        sg_sm_release(s, SG_SM_CANCELLED);
    }
    mutex_unlock(&f->sm_lock);
    wake_up_all(&f->wq);
}

void sg_fault_cancel_targeted(struct sg_gpu *gpu, u32 gpc, u32 client)
{
    sg_count(gpu, SOFTGPU_CTR_CANCELS, 1);
    sg_fault_cancel_match(gpu, false, 0, true, gpc, client);
}

void sg_fault_cancel_global(struct sg_gpu *gpu)
{
    sg_count(gpu, SOFTGPU_CTR_CANCELS, 1);
    sg_fault_cancel_match(gpu, false, 0, false, 0, 0);
}

void sg_fault_cancel_inst(struct sg_gpu *gpu, u32 inst_aperture, u64 inst_pa, bool global, u32 gpc, u32 client)
{
    sg_count(gpu, SOFTGPU_CTR_CANCELS, 1);

    // Every user channel's instance block is in sysmem (sg_main.c): a VID instance pointer names no
    // channel of this emulator, so nothing is parked on it.
    if (sg_fault_hw_aperture(inst_aperture) != SG_AP_SYS) {
        if (sg_fault_hw_aperture(inst_aperture) != SG_AP_VID)
            sg_unemulated(gpu, "fault cancel: instance aperture", inst_aperture, 0);
        return;
    }
    sg_fault_cancel_match(gpu, true, inst_pa, !global, gpc, client);
}

void sg_fault_stop_channel(struct sg_gpu *gpu, struct sg_user_channel *uch)
{
    struct sg_fault_unit *f;
    struct sg_sm_acc *s, *tmp;

    if (!uch)
        return;
    if (!gpu)
        gpu = uch->gpu;
    f = &gpu->fault;

    // Set before taking sm_lock: an SM thread about to park checks it under sm_lock.
    WRITE_ONCE(uch->stopped, true);

    mutex_lock(&f->sm_lock);
    list_for_each_entry_safe(s, tmp, &f->pending, node) {
        if (s->batch->uch == uch)
            sg_sm_release(s, SG_SM_STOPPED);
    }
    mutex_unlock(&f->sm_lock);
    wake_up_all(&f->wq);
}

void sg_fault_tlb_invalidate(struct sg_gpu *gpu)
{
    struct sg_fault_unit *f = &gpu->fault;

    // Waits for every SM page access that translated before now; later ones see the new PTEs.
    down_write(&f->tlb_sem);
    up_write(&f->tlb_sem);
}

/* ---- the SM ------------------------------------------------------------------------------------ */

/* The seed pattern, defined bytewise: the byte at VA b is byte (b & 7) of the little-endian word
 * seed ^ (b & ~7). */
static inline u8 sg_sm_pattern_byte(u64 seed, u64 b)
{
    return (u8)((seed ^ (b & ~7ULL)) >> (8 * (b & 7)));
}

static void sg_sm_pattern_fill(u8 *dst, u64 va, u64 n, u64 seed)
{
    u64 i = 0;

    for (; i < n && ((va + i) & 7); i++)
        dst[i] = sg_sm_pattern_byte(seed, va + i);
    for (; i + 8 <= n; i += 8)
        put_unaligned_le64(seed ^ (va + i), dst + i);
    for (; i < n; i++)
        dst[i] = sg_sm_pattern_byte(seed, va + i);
}

/* VERIFY: compares [va, va + n) (src NULL: a sparse page, all zeros) word by word with the pattern. A
 * word cut by the access's ends is compared on the bytes the access covers. Chunks end on 4K boundaries
 * (8-byte aligned), so no word is split between two calls. */
static void sg_sm_verify(softgpu_access_t *a, const u8 *src, u64 va, u64 n)
{
    u64 i = 0;

    while (i < n) {
        u64 b = va + i;
        u64 word = b & ~7ULL;
        u64 end = min(word + 8, va + n);
        bool bad = false;

        if (b == word && end == word + 8) {
            u64 v = src ? get_unaligned_le64(src + i) : 0;

            bad = (v != (a->seed ^ word));
        }
        else {
            u64 c;

            for (c = b; c < end; c++) {
                u8 v = src ? src[c - va] : 0;

                if (v != sg_sm_pattern_byte(a->seed, c))
                    bad = true;
            }
        }

        if (bad) {
            if (a->mismatches == 0)
                a->first_mismatch_va = word;
            a->mismatches++;
        }
        i = end - va;
    }
}

static int sg_sm_finish(struct sg_sm_acc *s, NV_STATUS status)
{
    s->a->status = status;
    s->state = SG_SM_DONE;
    s->waiting = false;
    return SG_FAULT_NONE;
}

/* The bytes an access covers (a prefetch of nothing still looks at its page). */
static u64 sg_sm_size(const softgpu_access_t *a)
{
    if (a->type == SOFTGPU_ACCESS_PREFETCH && a->size == 0)
        return 1;
    return a->size;
}

/* One page's worth of an access whose translation succeeded (tlb_sem held for read). */
static NV_STATUS sg_sm_touch(struct sg_sm_batch *b, struct sg_sm_acc *s, const struct sg_xlate *x, u64 va, u64 n)
{
    softgpu_access_t *a = s->a;

    if (x->len < n) {
        WARN_ONCE(1, "huvm-softgpu: translation of 0x%llx covers %llu bytes, not %llu\n", va, x->len, n);
        return NV_ERR_INVALID_STATE;
    }

    switch (a->type) {
    case SOFTGPU_ACCESS_READ:
        if (a->data) {
            if (x->sparse)
                memset(b->bounce, 0, n);
            else
                memcpy(b->bounce, x->kva, n);
        }
        if (a->flags & SOFTGPU_ACCESS_FLAG_VERIFY)
            sg_sm_verify(a, x->sparse ? NULL : x->kva, va, n);
        break;

    case SOFTGPU_ACCESS_WRITE:
            // Writes to a sparse page are dropped.
        if (x->sparse)
            break;
        if (a->data)
            memcpy(x->kva, b->bounce, n);
        else
            sg_sm_pattern_fill(x->kva, va, n, a->seed);
        break;

    case SOFTGPU_ACCESS_ATOMIC_INC: a->value = x->sparse ? 0 : (u32)atomic_fetch_inc((atomic_t *)x->kva); break;

    default:
            // PREFETCH: the translation was the point.
        break;
    }
    return NV_OK;
}

/* Runs an access from where it stands until it finishes (SG_FAULT_NONE, status set) or faults (the
 * fault type; s->fault_va is the faulting 4K page). */
static int sg_sm_progress(struct sg_sm_batch *b, struct sg_sm_acc *s)
{
    struct sg_fault_unit *f = &b->gpu->fault;
    softgpu_access_t *a = s->a;
    u64 size = sg_sm_size(a);

    while (s->pos < size) {
        u64 va = a->va + s->pos;
        u64 n = min(size - s->pos, SG_PAGE_4K - (va & (SG_PAGE_4K - 1)));
        NV_STATUS status = NV_OK;
        struct sg_xlate x;
        int fault;

        if (READ_ONCE(b->uch->stopped))
            return sg_sm_finish(s, NV_ERR_INVALID_CHANNEL);
        if (fatal_signal_pending(current))
            return sg_sm_finish(s, NV_ERR_SIGNAL_PENDING);

        if (a->type == SOFTGPU_ACCESS_WRITE && a->data &&
            copy_from_user(b->bounce, u64_to_user_ptr(a->data + s->pos), n))
            return sg_sm_finish(s, NV_ERR_INVALID_ARGUMENT);

        down_read(&f->tlb_sem);
        fault = sg_mmu_translate(b->uch->vas, va, s->acc, false, &x);
        if (fault == SG_FAULT_NONE)
            status = sg_sm_touch(b, s, &x, va, n);
        up_read(&f->tlb_sem);

        if (fault != SG_FAULT_NONE) {
            // A prefetch page still unmapped after a replay, or whose fault the prefetch filter
            // (SEND_NONE) discards, is dropped: prefetches never stall for long.
            if (s->acc == SG_ACC_PREFETCH &&
                (s->prefetch_replayed ||
                 (READ_ONCE(f->regs->prefetch_ctrl) & SG_PRF_FILTER_MASK) == SG_PRF_FILTER_SEND_NONE)) {
                s->prefetch_dropped = true;
                s->prefetch_replayed = false;
                s->pos += n;
                continue;
            }
            s->fault_va = va & ~(SG_PAGE_4K - 1);
            return fault;
        }
        if (status != NV_OK)
            return sg_sm_finish(s, status);

        if (a->type == SOFTGPU_ACCESS_READ && a->data && copy_to_user(u64_to_user_ptr(a->data + s->pos), b->bounce, n))
            return sg_sm_finish(s, NV_ERR_INVALID_ARGUMENT);

        s->prefetch_replayed = false;
        s->pos += n;
        cond_resched();
    }

    return sg_sm_finish(s, s->prefetch_dropped ? NV_ERR_INVALID_ADDRESS : NV_OK);
}

/* Reports the fault of an access and parks it until a replay, a cancel or its channel's stop. */
static void sg_sm_park(struct sg_sm_batch *b, struct sg_sm_acc *s, int fault, unsigned long timeout_j)
{
    struct sg_fault_unit *f = &b->gpu->fault;
    struct sg_vaspace *vas = b->uch->vas;

    mutex_lock(&f->sm_lock);

    if (READ_ONCE(b->uch->stopped)) {
        sg_sm_finish(s, NV_ERR_INVALID_CHANNEL);
        mutex_unlock(&f->sm_lock);
        return;
    }

    spin_lock(&vas->lock);
    s->pdb_aperture = vas->pdb_aperture;
    s->pdb_pa = vas->pdb_pa;
    spin_unlock(&vas->lock);

    // Fatal types (PRIV, VA_LIMIT, ...) are reported too: UVM cancels them.
    if (sg_fault_write(b->gpu, b->uch, s->fault_va, fault, s->acc, s->gpc, s->client))
        s->a->faults++;

    s->state = SG_SM_PARKED;
    s->waiting = true;
    s->deadline = jiffies + timeout_j;
    list_add_tail(&s->node, &f->pending);

    mutex_unlock(&f->sm_lock);
}

/* Checks and starts one access. */
static void sg_sm_prepare(struct sg_sm_batch *b, struct sg_sm_acc *s, softgpu_access_t *a, u32 index)
{
    static const u32 known_flags = SOFTGPU_ACCESS_FLAG_VERIFY | SOFTGPU_ACCESS_FLAG_NO_WAIT;

    INIT_LIST_HEAD(&s->node);
    s->batch = b;
    s->a = a;
    s->state = SG_SM_ACTIVE;
    // Spread the accesses over GPCs and uTLBs like warps on several SMs.
    s->gpc = index % SG_SM_GPCS;
    s->client = NV_PFAULT_CLIENT_GPC_T1_0 + 2 * ((index / SG_SM_GPCS) % SG_SM_CLIENTS);

    a->status = NV_ERR_INVALID_STATE;
    a->faults = 0;
    a->mismatches = 0;
    a->first_mismatch_va = 0;
    a->value = 0;

    switch (a->type) {
    case SOFTGPU_ACCESS_READ:       s->acc = SG_ACC_READ; break;
    case SOFTGPU_ACCESS_WRITE:      s->acc = SG_ACC_WRITE; break;
    case SOFTGPU_ACCESS_ATOMIC_INC: s->acc = SG_ACC_ATOMIC; break;
    case SOFTGPU_ACCESS_PREFETCH:   s->acc = SG_ACC_PREFETCH; break;
    default:                        sg_sm_finish(s, NV_ERR_INVALID_ARGUMENT); return;
    }

    if ((a->flags & ~known_flags) || ((a->flags & SOFTGPU_ACCESS_FLAG_VERIFY) && a->type != SOFTGPU_ACCESS_READ) ||
        a->va + sg_sm_size(a) < a->va || (a->type == SOFTGPU_ACCESS_ATOMIC_INC && (a->size != 4 || (a->va & 3)))) {
        sg_sm_finish(s, NV_ERR_INVALID_ARGUMENT);
        return;
    }
}

NV_STATUS sg_sm_run(struct sg_user_channel *uch, softgpu_access_t *acc, u32 count, u32 timeout_ms, u32 *completed)
{
    struct sg_sm_batch b;
    struct sg_sm_acc *sm;
    struct sg_fault_unit *f;
    unsigned long timeout_j;
    bool interrupted = false;
    u32 i, ok = 0;

    *completed = 0;
    if (!uch || count > SOFTGPU_MAX_ACCESSES || (count && !acc))
        return NV_ERR_INVALID_ARGUMENT;
    if (count == 0)
        return NV_OK;

    b.uch = uch;
    b.gpu = uch->gpu;
    atomic_set(&b.changed, 0);
    f = &b.gpu->fault;
    timeout_j = msecs_to_jiffies(timeout_ms ? timeout_ms : SG_SM_DEFAULT_TIMEOUT) + 1;

    b.bounce = (void *)__get_free_page(GFP_KERNEL);
    sm = kvcalloc(count, sizeof(*sm), GFP_KERNEL);
    if (!b.bounce || !sm) {
        kvfree(sm);
        free_page((unsigned long)b.bounce);
        return NV_ERR_NO_MEMORY;
    }

    for (i = 0; i < count; i++)
        sg_sm_prepare(&b, &sm[i], &acc[i], i);

    for (;;) {
        u32 waiting = 0;
        long ret;

        // Every access runs until it finishes or stalls on its first fault; then the batch waits.
        for (i = 0; i < count; i++) {
            struct sg_sm_acc *s = &sm[i];
            int fault;

            // A waiting access's state belongs to the engine until it is collected below.
            if (s->waiting || s->state != SG_SM_ACTIVE)
                continue;
            if (interrupted) {
                sg_sm_finish(s, NV_ERR_SIGNAL_PENDING);
                continue;
            }

            fault = sg_sm_progress(&b, s);
            if (fault == SG_FAULT_NONE)
                continue;

            if (s->a->flags & SOFTGPU_ACCESS_FLAG_NO_WAIT) {
                // Report the fault to UVM but do not stall on it.
                if (sg_fault_write(b.gpu, uch, s->fault_va, fault, s->acc, s->gpc, s->client))
                    s->a->faults++;
                sg_sm_finish(s, NV_ERR_BUSY_RETRY);
                continue;
            }
            sg_sm_park(&b, s, fault, timeout_j);
        }

        for (i = 0; i < count; i++)
            waiting += sm[i].waiting;
        if (waiting == 0)
            break;

        sg_fault_kick(b.gpu);
        ret = wait_event_interruptible_timeout(f->wq,
                                               atomic_read(&b.changed) != 0,
                                               msecs_to_jiffies(SG_SM_REKICK_MS) + 1);
        if (ret < 0)
            interrupted = true;

        // Collect what the engine did to the parked accesses; give up on those past their deadline.
        mutex_lock(&f->sm_lock);
        atomic_set(&b.changed, 0);
        for (i = 0; i < count; i++) {
            struct sg_sm_acc *s = &sm[i];

            if (!s->waiting)
                continue;

            switch (s->state) {
            case SG_SM_READY:
                s->state = SG_SM_ACTIVE;
                s->waiting = false;
                break;
            case SG_SM_CANCELLED: sg_sm_finish(s, NV_ERR_INVALID_ADDRESS); break;
            case SG_SM_STOPPED:   sg_sm_finish(s, NV_ERR_INVALID_CHANNEL); break;
            case SG_SM_PARKED:
                if (interrupted) {
                    list_del_init(&s->node);
                    sg_sm_finish(s, NV_ERR_SIGNAL_PENDING);
                }
                else if (time_after_eq(jiffies, s->deadline)) {
                    list_del_init(&s->node);
                    sg_sm_finish(s, NV_ERR_TIMEOUT);
                }
                break;
            default: WARN_ON_ONCE(1); break;
            }
        }
        mutex_unlock(&f->sm_lock);
    }

    for (i = 0; i < count; i++) {
        if (acc[i].status == NV_OK)
            ok++;
        else if (acc[i].status == NV_ERR_SIGNAL_PENDING)
            interrupted = true;
    }
    *completed = ok;
    sg_count(b.gpu, SOFTGPU_CTR_SM_ACCESSES, ok);

    kvfree(sm);
    free_page((unsigned long)b.bounce);
    return interrupted ? NV_ERR_SIGNAL_PENDING : NV_OK;
}
