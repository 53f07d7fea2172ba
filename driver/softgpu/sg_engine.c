/*
 * huvm-softgpu: the engines of the emulated GPUs (test hardware only).
 * SPDX-License-Identifier: GPL-2.0 OR MIT
 *
 * One kernel thread per GPU ("sg-engine/N") plays the host (PBDMA, class C36F on Volta, C56F on Ampere),
 * the copy engines (C3B5 / C6B5) and the UVM software object (C076) of that emulated GPU. The Ampere classes keep
 * the Volta classes' method offsets and fields (this file reads them through the Volta headers); Ampere
 * adds the CE's PEERMEM physical target with a peer id (clc6b5.h SET_SRC/DST_PHYS_MODE), the host's TLB
 * invalidate scope (MEM_OP_A INVAL_SCOPE), C076 CLEAR_FAULTED_A/B, and UVM's Turing host
 * HAL emits its semaphores as SEM_ADDR/SEM_PAYLOAD/SEM_EXECUTE (uvm_turing_host.c).
 *
 * nvidia-uvm never traps into us: it writes GPFIFO entries, then GP_PUT, then the doorbell word
 * (uvm_volta_host.c:uvm_hal_volta_host_write_gpu_put), and judges completion only by semaphore payloads in
 * memory (uvm_channel.c: uvm_channel_update_progress_with_max). So the thread polls, executes every channel's pushbuffer in
 * order and writes semaphores; it is the only writer of struct sg_exec.
 *
 * Formats emulated (from NVIDIA's public headers and the UVM emitters, 535.261.03):
 *   - GPFIFO entries: cla16f.h / clc36f.h GP_ENTRY0/1 (uvm_maxwell_host.c:set_gpfifo_entry, _noop);
 *   - method headers: clc36f.h NVC36F_DMA_* (= clb06f.h NVB06F_DMA_*; uvm_push_macros.h emits INC and
 *     NON_INC; IMMD and ONE_INC are accepted too);
 *   - host methods: clc36f.h (uvm_maxwell_host.c, uvm_pascal_host.c, uvm_volta_host.c), clc56f.h
 *     (uvm_turing_host.c, uvm_ampere_host.c);
 *   - CE methods: clc3b5.h (uvm_maxwell_ce.c, uvm_pascal_ce.c, uvm_volta_ce.c), clc6b5.h (uvm_ampere_ce.c);
 *   - SW methods: clc076.h (uvm_pascal_host.c: cancel_faults_global/targeted).
 * Anything else is refused loudly: sg_unemulated() and an RC error on the channel.
 *
 * Locking. No lock is held while a channel executes. Each GPU's thread rotates its engine's channel list
 * under sg_node.chan_lock (spinlock, only to pick the next channel) and publishes the channel it is running
 * in eng->cur; sg_engine_remove_channel() unlinks the channel under the same spinlock, then waits on
 * eng->idle_wq until eng->cur is no longer that channel. What the engines of different GPUs share is
 * listed above struct sg_engine. The engine calls sg_mmu_translate,
 * sg_phys_ptr and sg_fault_* with no softgpu lock held; those must never take sg_node.lock, because
 * ChannelDestroy may hold it while it waits for the engine here.
 */
#include <linux/kernel.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/sched.h>
#include <linux/delay.h>
#include <linux/ktime.h>
#include <linux/math64.h>
#include <linux/minmax.h>
#include <linux/string.h>
#include <linux/mm.h>

#include "sg.h"
#include "clc36f.h"
#include "clc56f.h"
#include "clc3b5.h"
#include "clc6b5.h"
#include "clc076.h"

/* Field access with the class headers' "hi:lo" field macros (the ternary trick of nvmisc.h's DRF_*). */
#define SG_FLD_LO(f)            ((0 ? f) % 32)
#define SG_FLD_HI(f)            ((1 ? f) % 32)
#define SG_FLD_MASK(f) (0xffffffffu >> (31 - SG_FLD_HI(f) + SG_FLD_LO(f)))
#define SG_FLD(f, v)   ((((u32)(v)) >> SG_FLD_LO(f)) & SG_FLD_MASK(f))

/* Subchannels UVM uses (uvm_push_macros.h: NVA06F_SUBCHANNEL_COPY_ENGINE, UVM_SUBCHANNEL_SW). */
#define SG_SUBCH_CE 4
#define SG_SUBCH_SW SG_UVM_SW_SUBCHANNEL

/* RC error types written to the error notifier's info32 (NVIDIA's nverror.h, ROBUST_CHANNEL_*). */
#define SG_RC_MMU_FAULT   31          /* ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT */
#define SG_RC_PBDMA_ERROR 32          /* ROBUST_CHANNEL_PBDMA_ERROR: bad entry/header/method */
#define SG_RC_CE_ERROR    39          /* ROBUST_CHANNEL_CE0_ERROR: bad or unemulated CE launch */

/* Scheduling. */
#define SG_TURN_NS      (2 * NSEC_PER_MSEC)     /* one channel's time slice per pass */
#define SG_TURN_ENTRIES 64                      /* and at most this many GPFIFO entries */
#define SG_FULL_SCAN_NS (2 * NSEC_PER_MSEC)     /* read every GP_PUT at least this often */
#define SG_BUSY_NS      (1 * NSEC_PER_MSEC)     /* spin while work flowed this recently */
#define SG_NAP_NS       (10 * NSEC_PER_MSEC)    /* then usleep_range(20, 100) until this */
#define SG_WATCHDOG_NS  (10ULL * NSEC_PER_SEC)  /* report an acquire parked this long */
#define SG_CE_CHUNK     (1ULL << 20)            /* bytes per translation step of a transfer */
#define SG_FILL_TILE    256                     /* memset pattern tile */

/* Acquire kinds (host SEMAPHORED and SEM_EXECUTE map onto these). */
enum sg_acq {
    SG_ACQ_EQ = 0,          /* mem == payload */
    SG_ACQ_CIRC_GEQ,        /* (signed)(mem - payload) >= 0: the 32-bit wheel of uvm_gpu_semaphore.c */
    SG_ACQ_STRICT_GEQ,      /* mem >= payload, unsigned */
    SG_ACQ_AND,             /* (mem & payload) != 0 */
};

static const char *const sg_acq_names[] = { "EQ", "CIRC_GEQ", "STRICT_GEQ", "AND" };

/* What a method (or a segment) did to the channel's flow. */
enum sg_step {
    SG_OK = 0,              /* go on */
    SG_PARK,                /* an acquire is not satisfied: the channel waits, the engine moves on */
    SG_STOP,                /* RC error: the channel is stopped */
    SG_YIELD,               /* time slice used up or the channel is going away */
    SG_SEG_DONE,            /* the segment of the current GPFIFO entry is fully executed */
};

/* State of one channel's turn: the channel, a pushbuffer translation cache and diagnostics. */
struct sg_run {
    struct uvmGpuChannel_tag *ch;
    struct sg_gpu *gpu;
    struct sg_exec *ex;
    u64 deadline_ns;
    u32 methods;            /* methods executed this turn (SOFTGPU_CTR_METHODS) */
    bool progress;
    bool heavy;             /* a CE launch moved data: look at the clock before the next method */
    bool peer_phys;         /* the current CE launch addressed a peer's FB physically (PEERMEM) */
        /* pushbuffer fetch cache: [pb_va, pb_va + pb_len) is readable at pb_kva (valid for this turn) */
    u64 pb_va;
    u64 pb_len;
    const u8 *pb_kva;
        /* the method being executed, for the RC message */
    u32 subch;
    u32 method;
    u32 data;
};

/* A CE address range resolved to CPU memory. */
struct sg_span {
    u8 *kva;                /* NULL when sparse */
    u64 len;
    bool sparse;            /* reads return 0, writes are dropped */
    bool peer;              /* another GPU's framebuffer (SOFTGPU_CTR_PEER_BYTES, link latency) */
    bool peer_phys;         /* ... addressed physically (PEERMEM): SOFTGPU_CTR_PEER_PHYS_COPIES */
};

/*
 * One engine per GPU: a kthread ("sg-engine/N") that runs the channels of GPU N, so that channels of
 * different GPUs execute concurrently as on a real node. The module parameter engine_threads=1 puts every
 * channel on engine 0 instead (the emulator's former single scheduler: one thread for all GPUs), for
 * comparison; then only engine 0 runs.
 *
 * What engines of different GPUs share, and how it stays correct:
 *   - a peer's framebuffer (PEERMEM and PEER-aperture copies write into it while the peer's own engine
 *     and SMs use it): plain memory, as on the hardware; UVM orders such accesses with semaphores;
 *   - semaphores in sysmem or in another GPU's memory: releases are single aligned stores, acquires
 *     single loads; reductions are atomic read-modify-writes (sg_sem_reduce: cmpxchg), since two GPUs
 *     may reduce on one semaphore;
 *   - GPU time (sg_gpu_time_ns): one atomic64 clock, strictly increasing across engines;
 *   - counters: atomic64 per GPU; the not-emulated table: sg_main.c's raw spinlock;
 *   - a GPU's TLB and fault unit are touched by its own engine (invalidates, replays, cancels) and the SM
 *     threads: gpu->tlb.lock, fault->lock/sm_lock/tlb_sem (sg_mmu.c, sg_fault.c);
 *   - RM objects (VA spaces' RM tables, PMA): their own locks (vas->lock, pma->lock).
 */
struct sg_engine {
    unsigned index;
    struct task_struct *task;
    wait_queue_head_t wq;                   /* the thread's idle sleep; sg_engine_kick */
    atomic_t kicked;
    struct list_head channels;              /* under sg_node.chan_lock */
    unsigned nchan;                         /* list length, under sg_node.chan_lock */
    /* The channel being executed, NULL between turns. Written under sg_node.chan_lock; read by
     * sg_engine_remove_channel (wait_event on idle_wq). */
    struct uvmGpuChannel_tag *cur;
    wait_queue_head_t idle_wq;
    atomic_t nparked;                       /* its channels parked on an acquire */
};

static struct sg_engine sg_engines[SG_MAX_GPUS];
static bool sg_engines_ready;

static int sg_param_engine_threads;
module_param_named(engine_threads, sg_param_engine_threads, int, 0444);
MODULE_PARM_DESC(engine_threads,
                 "0: one engine thread per GPU (default); 1: one thread for every GPU (for comparison)");

static void sg_engines_init(void)
{
    unsigned i;

    if (sg_engines_ready)
        return;
    for (i = 0; i < SG_MAX_GPUS; i++) {
        struct sg_engine *eng = &sg_engines[i];

        eng->index = i;
        init_waitqueue_head(&eng->wq);
        init_waitqueue_head(&eng->idle_wq);
        atomic_set(&eng->kicked, 0);
        atomic_set(&eng->nparked, 0);
        INIT_LIST_HEAD(&eng->channels);
    }
    sg_engines_ready = true;
}

static struct sg_engine *sg_engine_of(struct uvmGpuChannel_tag *ch)
{
    if (sg_param_engine_threads == 1 || !ch->gpu)
        return &sg_engines[0];
    return &sg_engines[ch->gpu->index];
}

/*
 * A semaphore an engine wrote may be what a channel of another GPU's engine is parked on (UVM chains pushes
 * across GPUs through their tracking semaphores: CHANNEL_SANITY's test_ordering hops GPU0, GPU1, ... for
 * every push). The hardware's host polls its acquires all the time; an engine thread asleep would see the
 * release only at its next timeout (1 ms and more under TCG, per hop). So a release wakes the other engines
 * that have parked channels.
 */
static void sg_engine_wake_parked(struct sg_run *run)
{
    struct sg_engine *self = sg_engine_of(run->ch);
    unsigned i;

    for (i = 0; i < SG_MAX_GPUS; i++) {
        struct sg_engine *eng = &sg_engines[i];

        if (eng == self || !atomic_read(&eng->nparked))
            continue;
        atomic_set(&eng->kicked, 1);
        if (wq_has_sleeper(&eng->wq))
            wake_up_interruptible(&eng->wq);
    }
}

static atomic64_t sg_time_last = ATOMIC64_INIT(0);

/* ---- GPU time ------------------------------------------------------------------------------------ */

/*
 * Strictly increasing nanoseconds: one clock for semaphore timestamps, fault timestamps and the TIME_0/1
 * registers. uvm_push_test.c:test_timestamp_on_gpu requires strictly increasing timestamps across pushes,
 * which ktime alone does not give at its resolution.
 */
u64 sg_gpu_time_ns(void)
{
    u64 now = ktime_get_ns();
    s64 last = atomic64_read(&sg_time_last);

    for (;;) {
        u64 next = max_t(u64, now, (u64)last + 1);
        s64 old = atomic64_cmpxchg(&sg_time_last, last, (s64)next);

        if (old == last)
            return next;
        last = old;
    }
}

/* TIME_0/TIME_1 as one u64: uvm_hal_maxwell_get_time reads TIME_1, TIME_0, TIME_1 and retries on a
 * change, so a single 64-bit store per update is all the emulation needs. Each engine refreshes its own
 * GPU's (engine 0 every GPU's with engine_threads=1). */
static void sg_engine_update_time(struct sg_engine *eng)
{
    u64 t = sg_gpu_time_ns();
    unsigned i;

    for (i = 0; i < SG_MAX_GPUS; i++) {
        struct sg_gpu *gpu = READ_ONCE(sg_node.gpus[i]);
        struct sg_regs *regs;

        if (!gpu || (sg_param_engine_threads != 1 && i != eng->index))
            continue;
        regs = READ_ONCE(gpu->fault.regs);
        if (regs)
            WRITE_ONCE(regs->time, t);
    }
}

/* ---- RC errors ----------------------------------------------------------------------------------- */

static const char *sg_fault_name(int fault)
{
    switch (fault) {
    case SG_FAULT_PDE:      return "PDE";
    case SG_FAULT_PDE_SIZE: return "PDE_SIZE";
    case SG_FAULT_PTE:      return "PTE";
    case SG_FAULT_VA_LIMIT: return "VA_LIMIT";
    case SG_FAULT_PRIV:     return "PRIV";
    case SG_FAULT_RO:       return "RO";
    case SG_FAULT_APERTURE: return "UNSUPPORTED_APERTURE";
    case SG_FAULT_ATOMIC:   return "ATOMIC";
    default:                return "unknown";
    }
}

/*
 * Stop the channel with an RC error (what RM does on a channel fault): the error notifier gets the
 * ROBUST_CHANNEL_* type in info32 and a non-zero status, which uvm_channel_get_status turns into
 * NV_ERR_RC_ERROR; nothing after the failing method executes, so later semaphores are never released
 * and uvm_channel_check_errors names the failing push.
 */
static enum sg_step sg_rc(struct sg_run *run, u32 type, const char *why, u64 addr)
{
    struct uvmGpuChannel_tag *ch = run->ch;
    struct sg_exec *ex = run->ex;
    NvNotification *n = ch->error_notifier;

    WRITE_ONCE(ch->stopped, true);
    if (n) {
        u64 t = sg_gpu_time_ns();

        n->timeStamp.nanoseconds[0] = (u32)t;
        n->timeStamp.nanoseconds[1] = (u32)(t >> 32);
        n->info32 = type;
        n->info16 = 0;
        smp_wmb();
        n->status = (NvV16)type;
    }
    sg_count(run->gpu, SOFTGPU_CTR_RC_ERRORS, 1);
    pr_err("huvm-softgpu: %s: channel %u: RC error %u: %s at 0x%llx (GP_GET %u, segment VA 0x%llx dword %u, "
           "subch %u method 0x%03x data 0x%08x)\n",
           run->gpu->name,
           ch->id,
           type,
           why,
           addr,
           ex->gp_get,
           ex->seg_va,
           ex->seg_pos,
           run->subch,
           run->method,
           run->data);
    return SG_STOP;
}

static enum sg_step sg_rc_fault(struct sg_run *run, const char *why, u64 va, int fault)
{
    char msg[80];

    snprintf(msg, sizeof(msg), "%s: MMU fault %s", why, sg_fault_name(fault));
    return sg_rc(run, SG_RC_MMU_FAULT, msg, va);
}

/* Refuse a method that is not emulated: one dmesg line per kind (sg_unemulated) and an RC error that
 * names the pushbuffer address of the refused method's last dword. */
static enum sg_step sg_refuse(struct sg_run *run, const char *what, u32 type)
{
    struct sg_exec *ex = run->ex;

    sg_unemulated(run->gpu, what, run->method, run->data);
    return sg_rc(run, type, what, ex->seg_va + (u64)(ex->seg_pos ? ex->seg_pos - 1 : 0) * 4);
}

/* ---- semaphores ---------------------------------------------------------------------------------- */

/*
 * CPU pointer to a semaphore of size bytes at va, accessed as acc by an engine. *p is NULL when the page is
 * sparse (reads 0, writes dropped). Any fault, a read-only page for a write, a semaphore that straddles
 * a mapping or a misaligned one is an RC error.
 */
static int sg_sem_map(struct sg_run *run, u64 va, u32 size, u32 align, enum sg_access acc, void **p)
{
    struct sg_xlate x;
    int fault;

    if (!IS_ALIGNED(va, align)) {
        sg_rc(run, SG_RC_PBDMA_ERROR, "misaligned semaphore", va);
        return -1;
    }
    fault = sg_mmu_translate(run->ch->vas, va, acc, true, &x);
    if (fault != SG_FAULT_NONE) {
        sg_rc_fault(run, "semaphore", va, fault);
        return -1;
    }
    if (x.sparse) {
        *p = NULL;
        return 0;
    }
    if (acc != SG_ACC_READ && x.read_only) {
        sg_rc_fault(run, "semaphore write to a read-only page", va, SG_FAULT_RO);
        return -1;
    }
    if (!x.kva || x.len < size) {
        sg_rc(run, SG_RC_MMU_FAULT, "semaphore straddles the end of its mapping", va);
        return -1;
    }
    *p = x.kva;
    return 0;
}

/* The 16-byte form: 0 in the upper half of a 32-bit payload (+4), the timestamp at +8. */
static void sg_sem_write_timestamp(void *p, bool is64)
{
    if (!is64)
        WRITE_ONCE(((u32 *)p)[1], 0);
    WRITE_ONCE(*(u64 *)((u8 *)p + 8), sg_gpu_time_ns());
}

/*
 * Semaphore release: the payload (4 or 8 bytes), with timestamp the 16-byte form (host SEMAPHORED
 * RELEASE_SIZE_16BYTE, SEM_EXECUTE RELEASE_TIMESTAMP_EN, CE RELEASE_FOUR_WORD_SEMAPHORE). The payload is
 * written last, after a write barrier, so the CPU sees all earlier data first.
 */
static enum sg_step sg_sem_release(struct sg_run *run, u64 va, u64 payload, bool is64, bool timestamp)
{
    u32 size = timestamp ? 16 : (is64 ? 8 : 4);
    void *p;

    if (sg_sem_map(run, va, size, (is64 || timestamp) ? 8 : 4, SG_ACC_WRITE, &p))
        return SG_STOP;
    if (p) {
        if (timestamp)
            sg_sem_write_timestamp(p, is64);
        smp_wmb();
        if (is64)
            WRITE_ONCE(*(u64 *)p, payload);
        else
            WRITE_ONCE(*(u32 *)p, (u32)payload);
    }
    sg_count(run->gpu, SOFTGPU_CTR_SEM_RELEASES, 1);
    sg_engine_wake_parked(run);
    return SG_OK;
}

/*
 * Reduction operations (clc36f.h SEMAPHORED_REDUCTION / SEM_EXECUTE_REDUCTION, clc3b5.h
 * LAUNCH_DMA_SEMAPHORE_REDUCTION share the encoding 0..7). INC/DEC wrap at the payload, unsigned:
 * INC: new = (old >= payload) ? 0 : old + 1, the rule uvm_ce_test.c:test_semaphore_reduction_inc checks.
 * Returns false for an operation that is not emulated (CE FADD).
 */
static bool sg_reduce(u32 op, bool is_unsigned, bool is64, u64 old, u64 v, u64 *out)
{
    u64 mask = is64 ? ~0ULL : 0xffffffffULL;
    s64 so = is64 ? (s64)old : (s64)(s32)old;
    s64 sv = is64 ? (s64)v : (s64)(s32)v;
    u64 r;

    old &= mask;
    v &= mask;
    switch (op) {
    case 0:  /* MIN */ r = is_unsigned ? min(old, v) : (u64)min(so, sv); break;
    case 1:  /* MAX */ r = is_unsigned ? max(old, v) : (u64)max(so, sv); break;
    case 2:  /* XOR */ r = old ^ v; break;
    case 3:  /* AND */ r = old & v; break;
    case 4:  /* OR */ r = old | v; break;
    case 5:  /* ADD */ r = old + v; break;
    case 6:  /* INC */ r = (old >= v) ? 0 : old + 1; break;
    case 7:  /* DEC */ r = (old == 0 || old > v) ? v : old - 1; break;
    default: return false;
    }
    *out = r & mask;
    return true;
}

/* Semaphore reduction: an atomic read-modify-write of the 32- or 64-bit payload word. */
static enum sg_step sg_sem_reduce(struct sg_run *run,
                                  u64 va,
                                  u64 payload,
                                  bool is64,
                                  u32 op,
                                  bool is_unsigned,
                                  bool timestamp)
{
    u32 size = timestamp ? 16 : (is64 ? 8 : 4);
    u64 dummy;
    void *p;

    if (!sg_reduce(op, is_unsigned, is64, 0, 0, &dummy))
        return sg_refuse(run, "semaphore reduction operation", SG_RC_PBDMA_ERROR);
    if (sg_sem_map(run, va, size, (is64 || timestamp) ? 8 : 4, SG_ACC_ATOMIC, &p))
        return SG_STOP;
    if (p) {
        if (timestamp)
            sg_sem_write_timestamp(p, is64);
        smp_wmb();
        if (is64) {
            u64 *w = p, old = READ_ONCE(*w), new, seen;

            for (;;) {
                sg_reduce(op, is_unsigned, true, old, payload, &new);
                seen = cmpxchg(w, old, new);
                if (seen == old)
                    break;
                old = seen;
            }
        }
        else {
            u32 *w = p, old = READ_ONCE(*w), seen;
            u64 new;

            for (;;) {
                sg_reduce(op, is_unsigned, false, old, payload, &new);
                seen = cmpxchg(w, old, (u32) new);
                if (seen == old)
                    break;
                old = seen;
            }
        }
    }
    sg_count(run->gpu, SOFTGPU_CTR_SEM_RELEASES, 1);
    sg_engine_wake_parked(run);
    return SG_OK;
}

/* Evaluate the channel's pending acquire (ex->acq_*): 1 satisfied, 0 not yet, -1 RC error. */
static int sg_acq_check(struct sg_run *run, u64 *cur)
{
    struct sg_exec *ex = run->ex;
    u64 mem = 0, want = ex->acq_payload;
    void *p;

    if (sg_sem_map(run, ex->acq_va, ex->acq_64 ? 8 : 4, ex->acq_64 ? 8 : 4, SG_ACC_READ, &p))
        return -1;
    if (p)
        mem = ex->acq_64 ? READ_ONCE(*(u64 *)p) : READ_ONCE(*(u32 *)p);
        /* Order the acquire before everything the channel does after it (the CPU released data first). */
    smp_rmb();
    *cur = mem;

    switch (ex->acq_op) {
    case SG_ACQ_EQ:         return mem == want;
    case SG_ACQ_CIRC_GEQ:   return ex->acq_64 ? (s64)(mem - want) >= 0 : (s32)((u32)mem - (u32)want) >= 0;
    case SG_ACQ_STRICT_GEQ: return mem >= want;
    case SG_ACQ_AND:        return (mem & want) != 0;
    }
    return 0;
}

/* Host semaphore acquire: satisfied now, or park the channel (its position is already past the method). */
static enum sg_step sg_sem_acquire(struct sg_run *run, u64 va, u64 payload, bool is64, u32 op)
{
    struct sg_exec *ex = run->ex;
    u64 cur;
    int r;

    ex->acq_va = va;
    ex->acq_payload = payload;
    ex->acq_64 = is64;
    ex->acq_op = op;
    r = sg_acq_check(run, &cur);
    if (r < 0)
        return SG_STOP;
    if (r > 0)
        return SG_OK;

    ex->parked = true;
    atomic_inc(&sg_engine_of(run->ch)->nparked);
    ex->park_ns = ktime_get_ns();
    ex->park_reported = false;
    sg_count(run->gpu, SOFTGPU_CTR_ACQUIRE_PARKS, 1);
    return SG_PARK;
}

/* UVM has no GPU timeouts: a lost release hangs it forever. Say once which acquire a channel waits on. */
static void sg_acq_watchdog(struct sg_run *run, u64 cur)
{
    struct uvmGpuChannel_tag *ch = run->ch;
    struct sg_exec *ex = run->ex;
    u64 waited = ktime_get_ns() - ex->park_ns;

    if (ex->park_reported || waited < SG_WATCHDOG_NS)
        return;
    ex->park_reported = true;
    pr_warn("huvm-softgpu: %s: channel %u parked on an acquire for %llu s: GP_GET %u GP_PUT %u, acquire %s "
            "VA 0x%llx payload 0x%llx, memory holds 0x%llx\n",
            run->gpu->name,
            ch->id,
            div_u64(waited, NSEC_PER_SEC),
            ex->gp_get,
            READ_ONCE(ch->userd[SG_USERD_GP_PUT]),
            sg_acq_names[ex->acq_op],
            ex->acq_va,
            ex->acq_payload,
            cur);
}

/* ---- host methods (class C36F; Maxwell/Pascal/Volta host HALs) ----------------------------------- */

/* SEMAPHOREA-D (cla16f.h/clc36f.h): 40-bit VA, 32-bit payload; D executes. */
static enum sg_step sg_host_semaphored(struct sg_run *run, u32 d)
{
    u32 *h = run->ex->host;
    u64 va = ((u64)SG_FLD(NVC36F_SEMAPHOREA_OFFSET_UPPER, h[NVC36F_SEMAPHOREA >> 2]) << 32) |
             (h[NVC36F_SEMAPHOREB >> 2] & ~3u);
    u32 payload = h[NVC36F_SEMAPHOREC >> 2];
    bool four = SG_FLD(NVC36F_SEMAPHORED_RELEASE_SIZE, d) == NVC36F_SEMAPHORED_RELEASE_SIZE_4BYTE;

    switch (SG_FLD(NVC36F_SEMAPHORED_OPERATION, d)) {
    case NVC36F_SEMAPHORED_OPERATION_RELEASE: return sg_sem_release(run, va, payload, false, !four);
    case NVC36F_SEMAPHORED_OPERATION_ACQUIRE: return sg_sem_acquire(run, va, payload, false, SG_ACQ_EQ);
    case NVC36F_SEMAPHORED_OPERATION_ACQ_GEQ: return sg_sem_acquire(run, va, payload, false, SG_ACQ_CIRC_GEQ);
    case NVC36F_SEMAPHORED_OPERATION_ACQ_AND: return sg_sem_acquire(run, va, payload, false, SG_ACQ_AND);
    case NVC36F_SEMAPHORED_OPERATION_REDUCTION:
        return sg_sem_reduce(run,
                             va,
                             payload,
                             false,
                             SG_FLD(NVC36F_SEMAPHORED_REDUCTION, d),
                             SG_FLD(NVC36F_SEMAPHORED_FORMAT, d) == NVC36F_SEMAPHORED_FORMAT_UNSIGNED,
                             !four);
    }
    return sg_rc(run, SG_RC_PBDMA_ERROR, "invalid SEMAPHORED operation", va);
}

/* SEM_ADDR_LO/HI, SEM_PAYLOAD_LO/HI, SEM_EXECUTE (clc36f.h; uvm_volta_host.c:semaphore_timestamp). */
static enum sg_step sg_host_sem_execute(struct sg_run *run, u32 d)
{
    u32 *h = run->ex->host;
    u64 va =
        ((u64)SG_FLD(NVC36F_SEM_ADDR_HI_OFFSET, h[NVC36F_SEM_ADDR_HI >> 2]) << 32) | (h[NVC36F_SEM_ADDR_LO >> 2] & ~3u);
    bool is64 = SG_FLD(NVC36F_SEM_EXECUTE_PAYLOAD_SIZE, d) == NVC36F_SEM_EXECUTE_PAYLOAD_SIZE_64BIT;
    bool ts = SG_FLD(NVC36F_SEM_EXECUTE_RELEASE_TIMESTAMP, d) == NVC36F_SEM_EXECUTE_RELEASE_TIMESTAMP_EN;
    u64 payload = h[NVC36F_SEM_PAYLOAD_LO >> 2];

    if (is64)
        payload |= (u64)h[NVC36F_SEM_PAYLOAD_HI >> 2] << 32;

    switch (SG_FLD(NVC36F_SEM_EXECUTE_OPERATION, d)) {
    case NVC36F_SEM_EXECUTE_OPERATION_RELEASE:        return sg_sem_release(run, va, payload, is64, ts);
    case NVC36F_SEM_EXECUTE_OPERATION_ACQUIRE:        return sg_sem_acquire(run, va, payload, is64, SG_ACQ_EQ);
    case NVC36F_SEM_EXECUTE_OPERATION_ACQ_STRICT_GEQ: return sg_sem_acquire(run, va, payload, is64, SG_ACQ_STRICT_GEQ);
    case NVC36F_SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ:   return sg_sem_acquire(run, va, payload, is64, SG_ACQ_CIRC_GEQ);
    case NVC36F_SEM_EXECUTE_OPERATION_ACQ_AND:        return sg_sem_acquire(run, va, payload, is64, SG_ACQ_AND);
    case NVC36F_SEM_EXECUTE_OPERATION_REDUCTION:
        return sg_sem_reduce(run,
                             va,
                             payload,
                             is64,
                             SG_FLD(NVC36F_SEM_EXECUTE_REDUCTION, d),
                             SG_FLD(NVC36F_SEM_EXECUTE_REDUCTION_FORMAT, d) ==
                                 NVC36F_SEM_EXECUTE_REDUCTION_FORMAT_UNSIGNED,
                             ts);
    case NVC36F_SEM_EXECUTE_OPERATION_ACQ_NOR: return sg_refuse(run, "host SEM_EXECUTE ACQ_NOR", SG_RC_PBDMA_ERROR);
    }
    return sg_rc(run, SG_RC_PBDMA_ERROR, "invalid SEM_EXECUTE operation", va);
}

/*
 * MEM_OP_A-D (clc36f.h layout; D executes). A TLB invalidate drops the GPU's TLB entries it names
 * (sg_tlb_invalidate: MEM_OP_C PDB ONE with PDB_APERTURE/PDB_ADDR or ALL; TARGETED: the VA of
 * TARGET_ADDR_LO/HI, INVALIDATION_SIZE = log2 of 4K pages, aligned down to that size as the hardware does
 * (uvm_volta_host.c / uvm_ampere_host.c tlb_invalidate_va); GPC ENABLE: the SM's entries too; C56F
 * INVAL_SCOPE), then waits for SM accesses in flight. Its REPLAY field is how UVM replays and cancels
 * faults (uvm_volta_host.c:replay_faults, cancel_faults_va; the same on Ampere).
 */
static enum sg_step sg_host_mem_op(struct sg_run *run, u32 d)
{
    struct sg_gpu *gpu = run->gpu;
    u32 *h = run->ex->host;
    u32 a = h[NVC36F_MEM_OP_A >> 2];
    u32 b = h[NVC36F_MEM_OP_B >> 2];
    u32 c = h[NVC36F_MEM_OP_C >> 2];
    u32 op = SG_FLD(NVC36F_MEM_OP_D_OPERATION, d);

    switch (op) {
    case NVC36F_MEM_OP_D_OPERATION_MEMBAR:
        /* Every engine access is a CPU access already ordered by this thread; keep the barrier anyway. */
        smp_mb();
        return SG_OK;

    case NVC36F_MEM_OP_D_OPERATION_MMU_TLB_INVALIDATE:
    case NVC36F_MEM_OP_D_OPERATION_MMU_TLB_INVALIDATE_TARGETED: {
        u32 replay = SG_FLD(NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY, c);
        u32 pdb_ap = SG_FLD(NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB_APERTURE, c);
        struct sg_tlb_inval inv = {
            .all_pdbs = SG_FLD(NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB, c) == NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB_ALL,
            .pdb_aperture = pdb_ap == NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB_APERTURE_VID_MEM ? SG_AP_VID : SG_AP_SYS,
            .pdb_pa = ((u64)SG_FLD(NVC36F_MEM_OP_D_TLB_INVALIDATE_PDB_ADDR_HI, d) << 32) | (c & 0xfffff000u),
            .targeted = op == NVC36F_MEM_OP_D_OPERATION_MMU_TLB_INVALIDATE_TARGETED,
            .gpc = SG_FLD(NVC36F_MEM_OP_C_TLB_INVALIDATE_GPC, c) == NVC36F_MEM_OP_C_TLB_INVALIDATE_GPC_ENABLE,
            .non_link = true,
        };

        if (inv.targeted) {
            /* A_INVALIDATION_SIZE shares its bits with the cancel targets: replays and cancels name one
             * 4K page. */
            u32 log2_pages = replay == NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_NONE
                                 ? SG_FLD(NVC36F_MEM_OP_A_TLB_INVALIDATE_INVALIDATION_SIZE, a)
                                 : 0;

            inv.size = SG_PAGE_4K << min_t(u32, log2_pages, 37);
            inv.va = (((u64)b << 32) | (a & 0xfffff000u)) & ~(inv.size - 1);
        }
        /* Ampere's INVAL_SCOPE (clc56f.h; only with REPLAY NONE): LINK_TLBS reaches none of the TLBs
         * emulated here. Volta has no such field (those bits are 0: ALL_TLBS). */
        if (sg_arch->host_class == SG_CLASS_HOST_AMPERE && replay == NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_NONE &&
            SG_FLD(NVC56F_MEM_OP_A_TLB_INVALIDATE_INVAL_SCOPE, a) ==
                NVC56F_MEM_OP_A_TLB_INVALIDATE_INVAL_SCOPE_LINK_TLBS)
            inv.non_link = false;
        sg_tlb_invalidate(gpu, &inv);

        /* Then the REPLAY field, which only applies with GPC invalidation enabled. */
        if (!inv.gpc)
            return SG_OK;
        switch (replay) {
        case NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_NONE:          return SG_OK;
        case NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_START:
        case NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_START_ACK_ALL: sg_fault_replay(gpu); return SG_OK;
        case NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_CANCEL_TARGETED:
            sg_fault_cancel_targeted(gpu,
                                     SG_FLD(NVC36F_MEM_OP_A_TLB_INVALIDATE_CANCEL_TARGET_GPC_ID, a),
                                     SG_FLD(NVC36F_MEM_OP_A_TLB_INVALIDATE_CANCEL_TARGET_CLIENT_UNIT_ID, a));
            return SG_OK;
        case NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_CANCEL_GLOBAL:    sg_fault_cancel_global(gpu); return SG_OK;
        case NVC36F_MEM_OP_C_TLB_INVALIDATE_REPLAY_CANCEL_VA_GLOBAL: {
            /* VA = ADDR_HI:ADDR_LO << 12, PDB = PDB_ADDR_HI:PDB_ADDR_LO << 12 (cancel_faults_va). */
            u64 va = ((u64)b << 32) | (a & 0xfffff000u);
            u64 pdb = ((u64)SG_FLD(NVC36F_MEM_OP_D_TLB_INVALIDATE_PDB_ADDR_HI, d) << 32) | (c & 0xfffff000u);
            u32 ap = SG_FLD(NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB_APERTURE, c);

            /* sg_fault_cancel_va takes the raw field: 0 VID, 2/3 SYS (1 is reserved). */
            if (ap != NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB_APERTURE_VID_MEM &&
                ap != NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB_APERTURE_SYS_MEM_COHERENT &&
                ap != NVC36F_MEM_OP_C_TLB_INVALIDATE_PDB_APERTURE_SYS_MEM_NONCOHERENT)
                return sg_rc(run, SG_RC_PBDMA_ERROR, "invalid PDB aperture in a cancel", pdb);
            sg_fault_cancel_va(gpu, ap, pdb, va, SG_FLD(NVC36F_MEM_OP_C_TLB_INVALIDATE_ACCESS_TYPE, c));
            return SG_OK;
        }
        }
        return sg_refuse(run, "host MEM_OP invalidate REPLAY type", SG_RC_PBDMA_ERROR);
    }

    case NVC36F_MEM_OP_D_OPERATION_ACCESS_COUNTER_CLR:
        /* Access counters never fire on the emulated GPUs: nothing to clear. */
        return SG_OK;
    }

    /* L2 maintenance (peer/sysmem invalidate, clean comptags, flush dirty, wait for sysmem reads): the
     * emulated GPUs have no L2, memory is always coherent with the CPU. */
    if (op >= NVC36F_MEM_OP_D_OPERATION_L2_PEERMEM_INVALIDATE &&
        op <= NVC36F_MEM_OP_D_OPERATION_L2_WAIT_FOR_SYS_PENDING_READS)
        return SG_OK;

    return sg_refuse(run, "host MEM_OP operation", SG_RC_PBDMA_ERROR);
}

static enum sg_step sg_host_method(struct sg_run *run, u32 subch, u32 method, u32 data)
{
    struct sg_exec *ex = run->ex;
    u32 cls;

    ex->host[method >> 2] = data;

    switch (method) {
    case NVC36F_SET_OBJECT:
        /* UVM binds the CE class on subchannel 0 (uvm_maxwell_ce.c:ce_init) and GP100_UVM_SW on 5
         * (uvm_pascal_host.c:host_init); CE methods always go to subchannel 4. */
        cls = SG_FLD(NVC36F_SET_OBJECT_NVCLASS, data);
        if (cls != sg_arch->ce_class && cls != SG_CLASS_UVM_SW)
            return sg_refuse(run, "SET_OBJECT class", SG_RC_PBDMA_ERROR);
        ex->subch_class[subch] = cls;
        return SG_OK;

    case NVC36F_NOP:
    case NVC36F_WFI: /* a channel executes strictly in order */
    case NVC36F_FB_FLUSH: /* no caches */
    case NVC36F_NON_STALL_INTERRUPT: /* UVM registers no non-stall interrupt handler */
    case NVC36F_CLEAR_FAULTED:       /* no channel is ever faulted: CE/host faults are RC errors */ return SG_OK;

    case NVC36F_SEMAPHOREA:
    case NVC36F_SEMAPHOREB:
    case NVC36F_SEMAPHOREC:
    case NVC36F_MEM_OP_A:
    case NVC36F_MEM_OP_B:
    case NVC36F_MEM_OP_C:
    case NVC36F_SEM_ADDR_LO:
    case NVC36F_SEM_ADDR_HI:
    case NVC36F_SEM_PAYLOAD_LO:
    case NVC36F_SEM_PAYLOAD_HI: return SG_OK;

    case NVC36F_SEMAPHORED:  return sg_host_semaphored(run, data);
    case NVC36F_MEM_OP_D:    return sg_host_mem_op(run, data);
    case NVC36F_SEM_EXECUTE: return sg_host_sem_execute(run, data);
    }
    return sg_refuse(run, "host method", SG_RC_PBDMA_ERROR);
}

/* ---- SW methods (class C076, GP100_UVM_SW) -------------------------------------------------------- */

static enum sg_step sg_sw_method(struct sg_run *run, u32 method, u32 data)
{
    struct sg_exec *ex = run->ex;
    u32 a, b, ap;
    u64 inst;

    if (method >= (ARRAY_SIZE(ex->sw) << 2))
        return sg_refuse(run, "sw method", SG_RC_PBDMA_ERROR);
    ex->sw[method >> 2] = data;

    switch (method) {
    case NVC076_NO_OPERATION:
    case NVC076_FAULT_CANCEL_A:
    case NVC076_FAULT_CANCEL_B: return SG_OK;

    case NVC076_CLEAR_FAULTED_A:
    case NVC076_CLEAR_FAULTED_B:
        /* Ampere's clear of a channel's faulted state after a non-replayable fault
         * (uvm_ampere_host.c:clear_faulted_channel_sw_method). No channel is ever faulted here (engine
         * faults are RC errors, no non-replayable fault is raised), so there is nothing to clear. */
        if (!sg_arch->clear_faulted_sw)
            break;
        return SG_OK;

    case NVC076_FAULT_CANCEL_C:
        /* uvm_pascal_host.c:cancel_faults_global/targeted: INST_LOW = inst[31:12], INST_HI = inst[63:32]. */
        a = ex->sw[NVC076_FAULT_CANCEL_A >> 2];
        b = ex->sw[NVC076_FAULT_CANCEL_B >> 2];
        inst = ((u64)b << 32) | (a & 0xfffff000u);
        /* sg_fault_cancel_inst takes the raw field: 0 VID, 2/3 SYS (1 is reserved). */
        ap = SG_FLD(NVC076_FAULT_CANCEL_A_INST_APERTURE, a);
        if (ap != NVC076_FAULT_CANCEL_A_INST_APERTURE_VID_MEM &&
            ap != NVC076_FAULT_CANCEL_A_INST_APERTURE_SYS_MEM_COHERENT &&
            ap != NVC076_FAULT_CANCEL_A_INST_APERTURE_SYS_MEM_NONCOHERENT)
            return sg_rc(run, SG_RC_PBDMA_ERROR, "invalid FAULT_CANCEL instance aperture", inst);
        switch (SG_FLD(NVC076_FAULT_CANCEL_C_MODE, data)) {
        case NVC076_FAULT_CANCEL_C_MODE_TARGETED:
        case NVC076_FAULT_CANCEL_C_MODE_GLOBAL:   break;
        default:                                  return sg_rc(run, SG_RC_PBDMA_ERROR, "invalid FAULT_CANCEL mode", inst);
        }
        sg_fault_cancel_inst(run->gpu,
                             ap,
                             inst,
                             SG_FLD(NVC076_FAULT_CANCEL_C_MODE, data) == NVC076_FAULT_CANCEL_C_MODE_GLOBAL,
                             SG_FLD(NVC076_FAULT_CANCEL_C_GPC_ID, data),
                             SG_FLD(NVC076_FAULT_CANCEL_C_CLIENT_ID, data));
        return SG_OK;
    }
    /* Anything else, and CLEAR_FAULTED_A/B on Volta (has_clear_faulted_channel_sw_method is 0 there). */
    return sg_refuse(run, "sw method", SG_RC_PBDMA_ERROR);
}

/* ---- copy engine (class C3B5) --------------------------------------------------------------------- */

/* SET_DST_PHYS_MODE has SET_SRC_PHYS_MODE's fields (sg_ce_span reads both through the SRC names). */
static_assert(NVC6B5_SET_SRC_PHYS_MODE_TARGET_PEERMEM == NVC6B5_SET_DST_PHYS_MODE_TARGET_PEERMEM &&
              (0 ? NVC6B5_SET_SRC_PHYS_MODE_PEER_ID) == (0 ? NVC6B5_SET_DST_PHYS_MODE_PEER_ID) &&
              (1 ? NVC6B5_SET_SRC_PHYS_MODE_PEER_ID) == (1 ? NVC6B5_SET_DST_PHYS_MODE_PEER_ID) &&
              (0 ? NVC6B5_SET_SRC_PHYS_MODE_FLA) == (0 ? NVC6B5_SET_DST_PHYS_MODE_FLA) &&
              (0 ? NVC3B5_SET_SRC_PHYS_MODE_TARGET) == (0 ? NVC6B5_SET_SRC_PHYS_MODE_TARGET) &&
              (1 ? NVC3B5_SET_SRC_PHYS_MODE_TARGET) == (1 ? NVC6B5_SET_SRC_PHYS_MODE_TARGET),
              "C6B5 phys mode layout");

/*
 * Resolve [addr, addr + want) as far as one mapping goes (at most SG_CE_CHUNK): physical LOCAL_FB is this
 * GPU's framebuffer, COHERENT/NONCOHERENT_SYSMEM guest physical memory (one page at a time), PEERMEM
 * (Ampere) the framebuffer of the GPU that PEER_ID names from this GPU's point of view (the peer ids of
 * GetP2PCaps: UVM's physical peer copies, uvm_ampere_ce.c:ce_aperture); virtual addresses go through the
 * channel's VA space (RM table or page-table walk: peer identity mappings, uvm_mem, sparse). mode is the
 * SET_SRC/DST_PHYS_MODE register (only read for a physical address). Returns 0, or -1 after an RC error.
 */
static int sg_ce_span(struct sg_run *run,
                      bool phys,
                      u32 mode,
                      u64 addr,
                      u64 want,
                      enum sg_access acc,
                      struct sg_span *s)
{
    struct sg_xlate x;
    int fault;

    want = min_t(u64, want, SG_CE_CHUNK);
    if (phys) {
        struct sg_gpu *owner = run->gpu;
        u32 ap;

        switch (SG_FLD(NVC3B5_SET_SRC_PHYS_MODE_TARGET, mode)) {
        case NVC3B5_SET_SRC_PHYS_MODE_TARGET_LOCAL_FB: ap = SG_AP_VID; break;
        case NVC3B5_SET_SRC_PHYS_MODE_TARGET_COHERENT_SYSMEM:
        case NVC3B5_SET_SRC_PHYS_MODE_TARGET_NONCOHERENT_SYSMEM:
            ap = SG_AP_SYS;
            want = min_t(u64, want, PAGE_SIZE - offset_in_page(addr));
            break;
        case NVC6B5_SET_SRC_PHYS_MODE_TARGET_PEERMEM: {
            u32 id = SG_FLD(NVC6B5_SET_SRC_PHYS_MODE_PEER_ID, mode);

            /* Volta's CE has no PEERMEM target (UVM copies between peers virtually there). */
            if (!sg_arch->ce_peermem) {
                sg_refuse(run, "ce physical mode target", SG_RC_CE_ERROR);
                return -1;
            }
            /* FLA (fabric linear addresses) are NVSwitch fabric addresses: UVM always clears it. */
            if (SG_FLD(NVC6B5_SET_SRC_PHYS_MODE_FLA, mode)) {
                sg_refuse(run, "ce PEERMEM with FLA", SG_RC_CE_ERROR);
                return -1;
            }
            owner = run->gpu->peer_by_id[id];
            if (!owner) {
                sg_rc(run, SG_RC_MMU_FAULT, "CE PEERMEM names a peer id with no peer GPU", id);
                return -1;
            }
            ap = SG_AP_VID;
            break;
        }
        default: sg_refuse(run, "ce physical mode target", SG_RC_CE_ERROR); return -1;
        }
        s->kva = sg_phys_ptr(owner, ap, addr, want);
        if (!s->kva) {
            sg_rc(run,
                  SG_RC_MMU_FAULT,
                  owner != run->gpu ? "CE PEERMEM address beyond the peer's framebuffer"
                  : ap == SG_AP_VID ? "CE physical address beyond the framebuffer"
                                    : "CE physical address outside system memory",
                  addr);
            return -1;
        }
        s->len = want;
        s->sparse = false;
        s->peer = owner != run->gpu;
        s->peer_phys = owner != run->gpu;
        return 0;
    }

    fault = sg_mmu_translate(run->ch->vas, addr, acc, true, &x);
    if (fault != SG_FAULT_NONE) {
        sg_rc_fault(run, acc == SG_ACC_READ ? "CE read" : "CE write", addr, fault);
        return -1;
    }
    if (acc != SG_ACC_READ && x.read_only && !x.sparse) {
        sg_rc_fault(run, "CE write to a read-only page", addr, SG_FAULT_RO);
        return -1;
    }
    if (x.len == 0 || (!x.sparse && !x.kva)) {
        sg_rc(run, SG_RC_MMU_FAULT, "CE translation returned no memory", addr);
        return -1;
    }
    s->kva = x.sparse ? NULL : x.kva;
    s->len = min(x.len, want);
    s->sparse = x.sparse;
    s->peer = x.aperture == SG_AP_PEER || (x.gpu && x.gpu != run->gpu);
    s->peer_phys = false;
    return 0;
}

/* Knobs: CE bandwidth (copy_mbps: 1 MB/s is 1 byte/us) and extra latency per peer launch. */
static void sg_ce_throttle(struct sg_run *run, u64 bytes, bool peer)
{
    u64 mbps = READ_ONCE(run->gpu->copy_mbps);
    u64 lat = READ_ONCE(run->gpu->link_latency_us);
    u64 us = 0;

    if (mbps && bytes)
        us += div64_u64(bytes, mbps);
    if (peer && lat)
        us += lat;
    if (us)
        fsleep((unsigned long)us);
}

/* memcopy (uvm_volta_ce.c:memcopy): LINE_LENGTH_IN bytes, split at every mapping boundary of either side. */
static enum sg_step sg_ce_copy(struct sg_run *run, bool src_phys, bool dst_phys, u64 *bytes, bool *peer)
{
    u32 *r = run->ex->ce;
    u64 src = ((u64)SG_FLD(NVC3B5_OFFSET_IN_UPPER_UPPER, r[NVC3B5_OFFSET_IN_UPPER >> 2]) << 32) |
              r[NVC3B5_OFFSET_IN_LOWER >> 2];
    u64 dst = ((u64)SG_FLD(NVC3B5_OFFSET_OUT_UPPER_UPPER, r[NVC3B5_OFFSET_OUT_UPPER >> 2]) << 32) |
              r[NVC3B5_OFFSET_OUT_LOWER >> 2];
    u32 src_mode = r[NVC3B5_SET_SRC_PHYS_MODE >> 2];
    u32 dst_mode = r[NVC3B5_SET_DST_PHYS_MODE >> 2];
    u64 len = r[NVC3B5_LINE_LENGTH_IN >> 2];
    u64 done = 0;

    while (done < len) {
        struct sg_span s, t;
        u64 n;

        if (sg_ce_span(run, src_phys, src_mode, src + done, len - done, SG_ACC_READ, &s) ||
            sg_ce_span(run, dst_phys, dst_mode, dst + done, len - done, SG_ACC_WRITE, &t))
            return SG_STOP;
        n = min(s.len, t.len);
        if (t.sparse)
            ;
        else if (s.sparse)
            memset(t.kva, 0, n);
        else
            memmove(t.kva, s.kva, n); /* UVM never overlaps source and destination; be safe anyway */
        if (s.peer || t.peer) {
            sg_count(run->gpu, SOFTGPU_CTR_PEER_BYTES, n);
            *peer = true;
        }
        run->peer_phys |= s.peer_phys || t.peer_phys;
        done += n;
        cond_resched();
    }
    sg_count(run->gpu, SOFTGPU_CTR_CE_BYTES, len);
    *bytes = len;
    return SG_OK;
}

/* Fill n bytes at dst with the element pattern, starting at byte pos of the whole transfer. */
static void sg_fill(u8 *dst, u64 n, const u8 *tile, u32 tlen, u32 esize, u64 pos)
{
    u32 phase;

    div_u64_rem(pos, esize, &phase);
    while (n) {
        u32 c = (u32)min_t(u64, n, tlen);

        /* tlen is a multiple of esize, so every chunk starts at the same phase */
        memcpy(dst, tile + phase, c);
        dst += c;
        n -= c;
    }
}

/*
 * memset (uvm_volta_ce.c:memset_1/4/8): REMAP with constant components. LINE_LENGTH_IN counts elements of
 * NUM_DST_COMPONENTS x COMPONENT_SIZE bytes; each component is the low bytes of CONST_A or CONST_B.
 * Remapping from source components (a swizzling copy) and NO_WRITE components are not emulated.
 */
static enum sg_step sg_ce_memset(struct sg_run *run, bool dst_phys, u64 *bytes, bool *peer)
{
    u32 *r = run->ex->ce;
    u32 comps = r[NVC3B5_SET_REMAP_COMPONENTS >> 2];
    u32 csize = SG_FLD(NVC3B5_SET_REMAP_COMPONENTS_COMPONENT_SIZE, comps) + 1;
    u32 ncomp = SG_FLD(NVC3B5_SET_REMAP_COMPONENTS_NUM_DST_COMPONENTS, comps) + 1;
    u32 esize = csize * ncomp;
    u32 dst_mode = r[NVC3B5_SET_DST_PHYS_MODE >> 2];
    u64 dst = ((u64)SG_FLD(NVC3B5_OFFSET_OUT_UPPER_UPPER, r[NVC3B5_OFFSET_OUT_UPPER >> 2]) << 32) |
              r[NVC3B5_OFFSET_OUT_LOWER >> 2];
    u64 len = (u64)r[NVC3B5_LINE_LENGTH_IN >> 2] * esize;
    u8 elem[16], tile[SG_FILL_TILE + 16];
    u32 i, tlen;
    bool uniform = true;
    u64 done = 0;

    for (i = 0; i < ncomp; i++) {
        u32 sel = (comps >> (4 * i)) & 7, v;

        if (sel == NVC3B5_SET_REMAP_COMPONENTS_DST_X_CONST_A)
            v = r[NVC3B5_SET_REMAP_CONST_A >> 2];
        else if (sel == NVC3B5_SET_REMAP_COMPONENTS_DST_X_CONST_B)
            v = r[NVC3B5_SET_REMAP_CONST_B >> 2];
        else
            return sg_refuse(run, "ce remap from source components or NO_WRITE", SG_RC_CE_ERROR);
        memcpy(&elem[i * csize], &v, csize); /* little endian: the component's low bytes */
    }
    for (i = 1; i < esize; i++)
        uniform &= elem[i] == elem[0];
    tlen = esize * (SG_FILL_TILE / esize);
    for (i = 0; i < tlen + esize; i++)
        tile[i] = elem[i % esize];

    while (done < len) {
        struct sg_span t;

        if (sg_ce_span(run, dst_phys, dst_mode, dst + done, len - done, SG_ACC_WRITE, &t))
            return SG_STOP;
        if (!t.sparse) {
            if (uniform)
                memset(t.kva, elem[0], t.len);
            else
                sg_fill(t.kva, t.len, tile, tlen, esize, done);
        }
        if (t.peer) {
            sg_count(run->gpu, SOFTGPU_CTR_PEER_BYTES, t.len);
            *peer = true;
        }
        run->peer_phys |= t.peer_phys;
        done += t.len;
        cond_resched();
    }
    sg_count(run->gpu, SOFTGPU_CTR_CE_BYTES, len);
    *bytes = len;
    return SG_OK;
}

/* LAUNCH_DMA: the transfer first, then the semaphore (release or reduction), as the hardware orders them. */
static enum sg_step sg_ce_launch(struct sg_run *run, u32 d)
{
    u32 *r = run->ex->ce;
    u32 transfer = SG_FLD(NVC3B5_LAUNCH_DMA_DATA_TRANSFER_TYPE, d);
    u32 sem = SG_FLD(NVC3B5_LAUNCH_DMA_SEMAPHORE_TYPE, d);
    bool src_phys = SG_FLD(NVC3B5_LAUNCH_DMA_SRC_TYPE, d) == NVC3B5_LAUNCH_DMA_SRC_TYPE_PHYSICAL;
    bool dst_phys = SG_FLD(NVC3B5_LAUNCH_DMA_DST_TYPE, d) == NVC3B5_LAUNCH_DMA_DST_TYPE_PHYSICAL;
    bool remap = SG_FLD(NVC3B5_LAUNCH_DMA_REMAP_ENABLE, d) == NVC3B5_LAUNCH_DMA_REMAP_ENABLE_TRUE;
    bool peer = false;
    enum sg_step step;
    u64 bytes = 0, va;

    sg_count(run->gpu, SOFTGPU_CTR_CE_LAUNCHES, 1);

    if (SG_FLD(NVC3B5_LAUNCH_DMA_INTERRUPT_TYPE, d) != NVC3B5_LAUNCH_DMA_INTERRUPT_TYPE_NONE)
        return sg_refuse(run, "ce launch interrupt", SG_RC_CE_ERROR);
    if (SG_FLD(NVC3B5_LAUNCH_DMA_VPRMODE, d) != NVC3B5_LAUNCH_DMA_VPRMODE_VPR_NONE)
        return sg_refuse(run, "ce launch VPR mode", SG_RC_CE_ERROR);

    switch (transfer) {
    case NVC3B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NONE: break;
    case NVC3B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_PIPELINED:
    case NVC3B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED:
        /* One engine doing one launch at a time: pipelined and non-pipelined are the same. */
        if (SG_FLD(NVC3B5_LAUNCH_DMA_DST_MEMORY_LAYOUT, d) != NVC3B5_LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH ||
            (!remap && SG_FLD(NVC3B5_LAUNCH_DMA_SRC_MEMORY_LAYOUT, d) != NVC3B5_LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH))
            return sg_refuse(run, "ce blocklinear layout", SG_RC_CE_ERROR);
        if (SG_FLD(NVC3B5_LAUNCH_DMA_MULTI_LINE_ENABLE, d) != NVC3B5_LAUNCH_DMA_MULTI_LINE_ENABLE_FALSE)
            return sg_refuse(run, "ce multi-line transfer", SG_RC_CE_ERROR);
        run->peer_phys = false;
        step = remap ? sg_ce_memset(run, dst_phys, &bytes, &peer) : sg_ce_copy(run, src_phys, dst_phys, &bytes, &peer);
        if (step != SG_OK)
            return step;
        if (run->peer_phys)
            sg_count(run->gpu, SOFTGPU_CTR_PEER_PHYS_COPIES, 1);
        /* Before the semaphore: a throttled copy also completes late. */
        sg_ce_throttle(run, bytes, peer);
        run->heavy = true;
        break;
    default: return sg_rc(run, SG_RC_CE_ERROR, "invalid LAUNCH_DMA transfer type", 0);
    }

    /* FLUSH_ENABLE/FLUSH_TYPE: no caches, nothing to flush. */

    va = ((u64)SG_FLD(NVC3B5_SET_SEMAPHORE_A_UPPER, r[NVC3B5_SET_SEMAPHORE_A >> 2]) << 32) |
         r[NVC3B5_SET_SEMAPHORE_B >> 2];
    switch (sem) {
    case NVC3B5_LAUNCH_DMA_SEMAPHORE_TYPE_NONE:                        return SG_OK;
    case NVC3B5_LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE:
    case NVC3B5_LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_FOUR_WORD_SEMAPHORE: {
        bool four = sem == NVC3B5_LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_FOUR_WORD_SEMAPHORE;
        u32 payload = r[NVC3B5_SET_SEMAPHORE_PAYLOAD >> 2];

        if (SG_FLD(NVC3B5_LAUNCH_DMA_SEMAPHORE_REDUCTION_ENABLE, d) ==
            NVC3B5_LAUNCH_DMA_SEMAPHORE_REDUCTION_ENABLE_TRUE)
            return sg_sem_reduce(run,
                                 va,
                                 payload,
                                 false,
                                 SG_FLD(NVC3B5_LAUNCH_DMA_SEMAPHORE_REDUCTION, d),
                                 SG_FLD(NVC3B5_LAUNCH_DMA_SEMAPHORE_REDUCTION_SIGN, d) ==
                                     NVC3B5_LAUNCH_DMA_SEMAPHORE_REDUCTION_SIGN_UNSIGNED,
                                 four);
        return sg_sem_release(run, va, payload, false, four);
    }
    }
    return sg_rc(run, SG_RC_CE_ERROR, "invalid LAUNCH_DMA semaphore type", va);
}

static enum sg_step sg_ce_method(struct sg_run *run, u32 method, u32 data)
{
    struct sg_exec *ex = run->ex;

    if (method >= (ARRAY_SIZE(ex->ce) << 2))
        return sg_refuse(run, "ce method", SG_RC_CE_ERROR);
    ex->ce[method >> 2] = data;

    switch (method) {
    case NVC3B5_NOP:
    case NVC3B5_SET_SEMAPHORE_A:
    case NVC3B5_SET_SEMAPHORE_B:
    case NVC3B5_SET_SEMAPHORE_PAYLOAD:
    case NVC3B5_SET_SRC_PHYS_MODE:
    case NVC3B5_SET_DST_PHYS_MODE:
    case NVC3B5_OFFSET_IN_UPPER:
    case NVC3B5_OFFSET_IN_LOWER:
    case NVC3B5_OFFSET_OUT_UPPER:
    case NVC3B5_OFFSET_OUT_LOWER:
    case NVC3B5_PITCH_IN:
    case NVC3B5_PITCH_OUT:
    case NVC3B5_LINE_LENGTH_IN:
    case NVC3B5_LINE_COUNT:
    case NVC3B5_SET_REMAP_CONST_A:
    case NVC3B5_SET_REMAP_CONST_B:
    case NVC3B5_SET_REMAP_COMPONENTS:  return SG_OK;
    case NVC3B5_LAUNCH_DMA:            return sg_ce_launch(run, data);
    }

    /* Block-linear surface state: harmless to hold, the launch refuses BLOCKLINEAR layouts. */
    if (method >= NVC3B5_SET_DST_BLOCK_SIZE && method <= NVC3B5_DST_ORIGIN_Y)
        return SG_OK;

    return sg_refuse(run, "ce method", SG_RC_CE_ERROR);
}

/* ---- pushbuffer decoding ------------------------------------------------------------------------- */

static enum sg_step sg_exec_method(struct sg_run *run, u32 subch, u32 method, u32 data)
{
    u32 cls = run->ex->subch_class[subch];

    run->subch = subch;
    run->method = method;
    run->data = data;
    run->methods++;

    /* Host methods are the same on every subchannel. */
    if (method < 0x100)
        return sg_host_method(run, subch, method, data);
    if (subch == SG_SUBCH_CE || cls == sg_arch->ce_class)
        return sg_ce_method(run, method, data);
    if (subch == SG_SUBCH_SW || cls == SG_CLASS_UVM_SW)
        return sg_sw_method(run, method, data);
    return sg_refuse(run, "method on a subchannel without an object", SG_RC_PBDMA_ERROR);
}

/* Fetch the dword at the current segment position (a translation per page or RM allocation). */
static int sg_pb_read(struct sg_run *run, u32 *dw)
{
    struct sg_exec *ex = run->ex;
    u64 va = ex->seg_va + (u64)ex->seg_pos * 4;

    if (!run->pb_kva || va < run->pb_va || va + 4 > run->pb_va + run->pb_len) {
        struct sg_xlate x;
        int fault = sg_mmu_translate(run->ch->vas, va, SG_ACC_READ, true, &x);

        if (fault != SG_FAULT_NONE) {
            sg_rc_fault(run, "pushbuffer fetch", va, fault);
            return -1;
        }
        if (x.sparse || !x.kva || x.len < 4) {
            sg_rc(run, SG_RC_MMU_FAULT, "pushbuffer fetch from sparse or empty memory", va);
            return -1;
        }
        run->pb_va = va;
        run->pb_kva = x.kva;
        run->pb_len = x.len;
    }
    *dw = READ_ONCE(*(const u32 *)(run->pb_kva + (va - run->pb_va)));
    return 0;
}

/* A method header (clc36f.h NVC36F_DMA_*): INC, NON_INC and ONE_INC set up the pending method; IMMD
 * executes one method with its 13-bit data. UVM emits only INC and NON_INC (uvm_push_macros.h). */
static enum sg_step sg_decode_header(struct sg_run *run, u32 dw)
{
    struct sg_exec *ex = run->ex;
    u32 sec_op = SG_FLD(NVC36F_DMA_SEC_OP, dw);
    u32 method = SG_FLD(NVC36F_DMA_METHOD_ADDRESS, dw) << 2;
    u32 subch = SG_FLD(NVC36F_DMA_METHOD_SUBCHANNEL, dw);

    switch (sec_op) {
    case NVC36F_DMA_SEC_OP_INC_METHOD:
    case NVC36F_DMA_SEC_OP_NON_INC_METHOD:
    case NVC36F_DMA_SEC_OP_ONE_INC:
        ex->sec_op = sec_op;
        ex->method = method;
        ex->subch = subch;
        ex->count = SG_FLD(NVC36F_DMA_METHOD_COUNT, dw);
        if (ex->count == 0)
            run->methods++; /* e.g. a NOP with no inline data */
        return SG_OK;
    case NVC36F_DMA_SEC_OP_IMMD_DATA_METHOD:
        return sg_exec_method(run, subch, method, SG_FLD(NVC36F_DMA_IMMD_DATA, dw));
    case NVC36F_DMA_SEC_OP_GRP0_USE_TERT:
    case NVC36F_DMA_SEC_OP_GRP2_USE_TERT:
    case NVC36F_DMA_SEC_OP_END_PB_SEGMENT:
        run->method = method;
        run->subch = subch;
        run->data = dw;
        return sg_refuse(run, "pushbuffer header opcode", SG_RC_PBDMA_ERROR);
    }
    run->data = dw;
    return sg_rc(run, SG_RC_PBDMA_ERROR, "invalid pushbuffer header", ex->seg_va + (u64)(ex->seg_pos - 1) * 4);
}

/* Execute the current segment until it ends, parks, fails or the turn is over. A method may continue
 * into the next segment (its state is per channel, as in the PBDMA). */
static enum sg_step sg_run_segment(struct sg_run *run)
{
    struct uvmGpuChannel_tag *ch = run->ch;
    struct sg_exec *ex = run->ex;
    enum sg_step step;
    u32 dw, method;

    for (;;) {
        if (READ_ONCE(ch->dying))
            return SG_YIELD;
        if (((run->methods & 63) == 0 || run->heavy) && ktime_get_ns() > run->deadline_ns)
            return SG_YIELD;
        run->heavy = false;
        if (ex->seg_pos >= ex->seg_len)
            return SG_SEG_DONE;

        if (ex->count == 0) {
            if (sg_pb_read(run, &dw))
                return SG_STOP;
            ex->seg_pos++;
            step = sg_decode_header(run, dw);
            if (step != SG_OK)
                return step;
            continue;
        }

        /* NOP with inline data (uvm_push.c:uvm_push_inline_data_end): skip the data unread. */
        if (ex->method == NVC36F_NOP && ex->sec_op == NVC36F_DMA_SEC_OP_NON_INC_METHOD) {
            u32 n = min(ex->count, ex->seg_len - ex->seg_pos);

            ex->seg_pos += n;
            ex->count -= n;
            if (ex->count == 0)
                run->methods++;
            continue;
        }

        if (sg_pb_read(run, &dw))
            return SG_STOP;
        ex->seg_pos++;
        ex->count--;
        method = ex->method;
        if (ex->sec_op == NVC36F_DMA_SEC_OP_INC_METHOD) {
            ex->method += 4;
        }
        else if (ex->sec_op == NVC36F_DMA_SEC_OP_ONE_INC) {
            ex->method += 4;
            ex->sec_op = NVC36F_DMA_SEC_OP_NON_INC_METHOD;
        }
        step = sg_exec_method(run, ex->subch, method, dw);
        if (step != SG_OK)
            return step;
    }
}

/* ---- GPFIFO -------------------------------------------------------------------------------------- */

static void sg_entry_done(struct sg_run *run)
{
    struct uvmGpuChannel_tag *ch = run->ch;
    struct sg_exec *ex = run->ex;

    ex->in_segment = false;
    ex->gp_get = (ex->gp_get + 1) % ch->num_entries;
    /* UVM never reads GP_GET (it tracks completion by semaphores); published for debugging. */
    WRITE_ONCE(ch->userd[SG_USERD_GP_GET], ex->gp_get);
    sg_count(run->gpu, SOFTGPU_CTR_GPFIFO_ENTRIES, 1);
    run->progress = true;
}

/* Read GP_PUT; false after an RC error for an index outside the ring. */
static bool sg_read_put(struct sg_run *run)
{
    struct uvmGpuChannel_tag *ch = run->ch;
    u32 put = READ_ONCE(ch->userd[SG_USERD_GP_PUT]);

    /* GP_PUT before the entries it covers (UVM: entries, mb, GP_PUT). */
    smp_rmb();
    if (put >= ch->num_entries) {
        sg_rc(run, SG_RC_PBDMA_ERROR, "GP_PUT beyond the GPFIFO ring", put);
        return false;
    }
    run->ex->gp_put = put;
    return true;
}

/* Start the entry at GP_GET: a pushbuffer segment, or a control entry (only the NOP form exists on Volta:
 * uvm_maxwell_host.c:set_gpfifo_noop, written by uvm_channel_write_ctrl_gpfifo). */
static enum sg_step sg_fetch_entry(struct sg_run *run)
{
    struct uvmGpuChannel_tag *ch = run->ch;
    struct sg_exec *ex = run->ex;
    u64 e = READ_ONCE(ch->gpfifo[ex->gp_get]);
    u32 e0 = (u32)e, e1 = (u32)(e >> 32);
    u32 len = SG_FLD(NVC36F_GP_ENTRY1_LENGTH, e1);

    if (len == 0) {
        if (SG_FLD(NVC36F_GP_ENTRY1_OPCODE, e1) != NVC36F_GP_ENTRY1_OPCODE_NOP) {
            run->method = 0;
            run->data = e1;
            return sg_refuse(run, "GPFIFO control entry opcode", SG_RC_PBDMA_ERROR);
        }
        sg_entry_done(run);
        return SG_OK;
    }
    if (SG_FLD(NVC36F_GP_ENTRY1_LEVEL, e1) != NVC36F_GP_ENTRY1_LEVEL_MAIN) {
        run->method = 0;
        run->data = e1;
        return sg_refuse(run, "GPFIFO subroutine entry", SG_RC_PBDMA_ERROR);
    }
    ex->seg_va = ((u64)SG_FLD(NVC36F_GP_ENTRY1_GET_HI, e1) << 32) | (e0 & ~3u);
    ex->seg_len = len;
    ex->seg_pos = 0;
    ex->in_segment = true;
    return SG_OK;
}

/* One turn of a channel. Returns whether it made progress. */
static bool sg_engine_run(struct uvmGpuChannel_tag *ch)
{
    struct sg_exec *ex = &ch->exec;
    struct sg_run run = {
        .ch = ch,
        .gpu = ch->gpu,
        .ex = ex,
        .deadline_ns = ktime_get_ns() + SG_TURN_NS,
    };
    u32 entries = 0;

    if (ex->parked) {
        u64 cur;
        int r = sg_acq_check(&run, &cur);

        if (r < 0)
            goto out;
        if (r == 0) {
            sg_acq_watchdog(&run, cur);
            goto out;
        }
        ex->parked = false;
        atomic_dec(&sg_engine_of(ch)->nparked);
        run.progress = true;
    }

    while (!READ_ONCE(ch->stopped) && !READ_ONCE(ch->dying)) {
        enum sg_step step;

        if (!ex->in_segment) {
            if (ex->gp_get == ex->gp_put && !sg_read_put(&run))
                break;
            if (ex->gp_get == ex->gp_put)
                break;
            if (entries >= SG_TURN_ENTRIES || ktime_get_ns() > run.deadline_ns)
                break;
            entries++;
            if (sg_fetch_entry(&run) != SG_OK)
                break;
            if (!ex->in_segment)
                continue; /* a control NOP, already consumed */
        }
        step = sg_run_segment(&run);
        if (step != SG_SEG_DONE)
            break;
        sg_entry_done(&run);
    }

out:
    if (run.methods) {
        sg_count(run.gpu, SOFTGPU_CTR_METHODS, run.methods);
        run.progress = true;
    }
    return run.progress;
}

/* ---- the scheduler thread ------------------------------------------------------------------------ */

/*
 * Whether a channel needs a turn. The doorbell is a dirty hint: UVM writes GP_PUT, wmb, then the doorbell,
 * so resetting the doorbell and then reading GP_PUT (xchg is a full barrier) cannot miss work. A full
 * scan reads GP_PUT anyway, in case a doorbell was missed.
 */
static bool sg_engine_channel_ready(struct uvmGpuChannel_tag *ch, bool full)
{
    struct sg_exec *ex = &ch->exec;
    u32 *db;
    u32 put;

    if (READ_ONCE(ch->stopped) || READ_ONCE(ch->dying) || !ch->userd || !ch->gpfifo || !ch->num_entries)
        return false;
    if (ex->parked || ex->in_segment || ex->gp_get != ex->gp_put)
        return true;

    db = &ch->userd[SG_USERD_DOORBELL];
    if (READ_ONCE(*db) != SG_DOORBELL_IDLE && xchg(db, SG_DOORBELL_IDLE) != SG_DOORBELL_IDLE)
        full = true;
    if (!full)
        return false;
    put = READ_ONCE(ch->userd[SG_USERD_GP_PUT]);
    return put != ex->gp_get;
}

/* One round-robin pass over an engine's channels: each gets at most one turn. Returns whether anything
 * progressed. */
static bool sg_engine_pass(struct sg_engine *eng, bool full)
{
    struct uvmGpuChannel_tag *ch;
    bool progress = false;
    unsigned n, i;

    spin_lock(&sg_node.chan_lock);
    n = eng->nchan;
    spin_unlock(&sg_node.chan_lock);

    for (i = 0; i < n; i++) {
        spin_lock(&sg_node.chan_lock);
        if (list_empty(&eng->channels)) {
            spin_unlock(&sg_node.chan_lock);
            break;
        }
        ch = list_first_entry(&eng->channels, struct uvmGpuChannel_tag, node);
        list_move_tail(&ch->node, &eng->channels);
        WRITE_ONCE(eng->cur, ch);
        spin_unlock(&sg_node.chan_lock);

        if (sg_engine_channel_ready(ch, full))
            progress |= sg_engine_run(ch);

        spin_lock(&sg_node.chan_lock);
        WRITE_ONCE(eng->cur, NULL);
        spin_unlock(&sg_node.chan_lock);
        if (wq_has_sleeper(&eng->idle_wq))
            wake_up(&eng->idle_wq);
    }
    return progress;
}

/* The engine allowed to spin while it waits for more work, -1 for none. */
static atomic_t sg_engine_spinner = ATOMIC_INIT(-1);

static bool sg_engine_may_spin(struct sg_engine *eng)
{
    int cur = atomic_read(&sg_engine_spinner);

    if (cur == (int)eng->index)
        return true;
    return cur == -1 && atomic_cmpxchg(&sg_engine_spinner, -1, (int)eng->index) == -1;
}

/*
 * An engine thread. Under qemu TCG every spin costs the guest, so back off: spin (cond_resched) while
 * work flowed in the last SG_BUSY_NS (one engine of the node at a time: sg_engine_may_spin), then nap
 * 20-100 us until SG_NAP_NS, then sleep ~1 ms at a time;
 * sg_engine_kick() ends a sleep early. The TIME registers are refreshed every iteration.
 */
static int sg_engine_thread(void *arg)
{
    struct sg_engine *eng = arg;
    u64 last_work = ktime_get_ns(), last_full = 0;

    while (!kthread_should_stop()) {
        bool full = atomic_xchg(&eng->kicked, 0) != 0;
        u64 now = ktime_get_ns(), idle;
        bool progress;

        if (now - last_full >= SG_FULL_SCAN_NS)
            full = true;
        if (full)
            last_full = now;

        sg_engine_update_time(eng);
        progress = sg_engine_pass(eng, full);
        if (progress) {
            last_work = ktime_get_ns();
            // The engine with the latest work is the one to spin: its GPU is the one UVM is driving.
            atomic_set(&sg_engine_spinner, (int)eng->index);
        }

        idle = ktime_get_ns() - last_work;
        // Work done: go on at once. Waiting for more, only one engine at a time spins (the guest has 2
        // vCPUs, which UVM's waiting threads need too: several spinning engines starved the engine a
        // cross-GPU push chain waited for); the others nap.
        if (progress || (idle < SG_BUSY_NS && sg_engine_may_spin(eng)))
            cond_resched();
        else if (idle < SG_NAP_NS)
            usleep_range(20, 100);
        else
            wait_event_interruptible_hrtimeout(eng->wq,
                                               atomic_read(&eng->kicked) || kthread_should_stop(),
                                               ms_to_ktime(1));
        if (idle >= SG_BUSY_NS)
            atomic_cmpxchg(&sg_engine_spinner, (int)eng->index, -1);
    }
    atomic_cmpxchg(&sg_engine_spinner, (int)eng->index, -1);
    return 0;
}

/* Starts one thread per GPU of the node (one in all with engine_threads=1). */
int sg_engine_start(void)
{
    unsigned i, n;

    if (sg_param_engine_threads != 0 && sg_param_engine_threads != 1) {
        pr_err("huvm-softgpu: engine_threads=%d: 0 (one per GPU) or 1 (one for all)\n", sg_param_engine_threads);
        return -EINVAL;
    }
    sg_engines_init();
    n = sg_param_engine_threads == 1 ? 1 : max(sg_node.gpu_count, 1u);
    for (i = 0; i < n; i++) {
        struct sg_engine *eng = &sg_engines[i];
        struct task_struct *t;

        if (eng->task)
            continue;
        t = kthread_run(sg_engine_thread, eng, "sg-engine/%u", i);
        if (IS_ERR(t)) {
            sg_engine_stop();
            return PTR_ERR(t);
        }
        eng->task = t;
    }
    return 0;
}

void sg_engine_stop(void)
{
    unsigned i;

    for (i = 0; i < SG_MAX_GPUS; i++) {
        if (!sg_engines[i].task)
            continue;
        kthread_stop(sg_engines[i].task);
        sg_engines[i].task = NULL;
    }
}

void sg_engine_kick(void)
{
    unsigned i;

    for (i = 0; i < SG_MAX_GPUS; i++) {
        if (!READ_ONCE(sg_engines[i].task))
            continue;
        atomic_set(&sg_engines[i].kicked, 1);
        wake_up_interruptible(&sg_engines[i].wq);
    }
}

/* Start scheduling a freshly allocated channel (GP_GET = GP_PUT = 0, nothing bound) on its GPU's engine. */
void sg_engine_add_channel(struct uvmGpuChannel_tag *ch)
{
    struct sg_engine *eng;

    sg_engines_init();
    eng = sg_engine_of(ch);
    memset(&ch->exec, 0, sizeof(ch->exec));
    spin_lock(&sg_node.chan_lock);
    list_add_tail(&ch->node, &eng->channels);
    eng->nchan++;
    spin_unlock(&sg_node.chan_lock);
    atomic_set(&eng->kicked, 1);
    wake_up_interruptible(&eng->wq);
}

/*
 * Stop scheduling a channel; returns once its engine no longer touches it (its current turn, if any, is
 * over: it notices ch->dying between methods). Safe on a channel that was never added, if its node is
 * zeroed or INIT_LIST_HEAD'ed. Sleeps: no spinlock may be held by the caller.
 */
void sg_engine_remove_channel(struct uvmGpuChannel_tag *ch)
{
    struct sg_engine *eng;

    sg_engines_init();
    eng = sg_engine_of(ch);
    spin_lock(&sg_node.chan_lock);
    WRITE_ONCE(ch->dying, true);
    if (ch->node.next && !list_empty(&ch->node)) {
        list_del_init(&ch->node);
        eng->nchan--;
    }
    spin_unlock(&sg_node.chan_lock);

    wait_event(eng->idle_wq, READ_ONCE(eng->cur) != ch);
    // The engine no longer touches it: a channel removed (or stopped) while parked parks no more.
    if (ch->exec.parked) {
        ch->exec.parked = false;
        atomic_dec(&eng->nparked);
    }
}
