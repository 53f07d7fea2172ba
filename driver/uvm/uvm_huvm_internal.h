/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03. SPDX-License-Identifier: MIT
 *
 * The kernel glue's own declarations, shared by its files (not by upstream's: they include uvm_huvm.h):
 *   uvm_huvm.c           the control ioctls, the GPU registry and links, VA spaces, module init and exit,
 *                        the node's state for the decisions; defines the tracepoints
 *   uvm_huvm_evict.c     eviction to a peer (UVM's eviction path and pre-eviction's), moving a block with a
 *                        chunk allocated up front
 *   uvm_huvm_fetch.c     data leaving a peer: fetch-back, give-back, release on block destroy and split,
 *                        remote mapping, page-level fetch events
 *   uvm_huvm_prefetch.c  fault batches, the multi-path and two-stage prefetch worker
 *   uvm_huvm_preevict.c  the pre-eviction and proactive give-back worker
 * Locking: see uvm_huvm.c's file comment and docs/driver.md.
 */
#ifndef __UVM_HUVM_INTERNAL_H__
#define __UVM_HUVM_INTERNAL_H__

// uvm_huvm.c includes the tracepoints first, with CREATE_TRACE_POINTS: a second include there would define
// them twice (the header's tail re-runs define_trace.h).
#if !defined(_UVM_HUVM_TRACE_H)
#include "uvm_huvm_trace.h"
#endif

#include "uvm_huvm.h"
#include "uvm_api.h"
#include "uvm_common.h"
#include "uvm_global.h"
#include "uvm_gpu.h"
#include "uvm_pmm_gpu.h"
#include "uvm_va_block.h"
#include "uvm_va_space.h"
#include "uvm_va_range.h"
#include "uvm_range_group.h"
#include "uvm_tools.h"
#include "uvm_perf_events.h"
#include "uvm_mmu.h"
#include "uvm_kvmalloc.h"
#include "uvm_conf_computing.h"
#include "nv-kthread-q.h"
#include "nv-modeset-interface.h"
#include "uvm_huvm_compat.h"

#include "huvm_core.h"

#include <linux/capability.h>
#include <linux/pci.h>
#include <linux/cred.h>
#include <linux/sched.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>

#define HUVM_SLOT_NONE HUVM_MAX_GPUS

typedef struct {
    // The GPU in this slot, NULL when absent. Read under g_uvm_huvm.lock.
    uvm_gpu_t *gpu;

    // The slot's key; kept after the GPU goes away so that it gets the same slot (and its counters) back.
    NvProcessorUuid uuid;
    bool used;

    // nvidia-uvm's processor id of the GPU last in this slot (uvm_id_value()), for the tracepoints; kept
    // after the GPU goes away (events about its data may still follow). Written under g_uvm_huvm.lock,
    // read without it.
    NvU32 uvm_id;

    // When this GPU last evicted its own data (ns), for the core's hysteresis.
    atomic64_t last_evict_ns;

    // When an allocation on this GPU last had to evict, or RM's PMA took its memory (ns): memory pressure,
    // for the core's pre-eviction gate.
    atomic64_t last_pressure_ns;

    // Bytes allocated for VA blocks since the last fault batch ended, and the chunks the last batch took.
    atomic64_t batch_alloc_bytes;
    atomic64_t burst_chunks;

    // The recent peak of this GPU's own memory use (not guests'), and its recent guest traffic (the core's
    // lend_traffic_mbyte_per_s budget), for the core's lend admission; updated whenever the decisions gather
    // the node's state. Protected by peak_lock (a leaf spinlock).
    spinlock_t peak_lock;
    huvm_peak_t own_peak;
    huvm_traffic_t guest_traffic;

    // Prefetch feedback (the core's huvm_prefetch_feedback()): of the blocks huvm's prefetch brought for this
    // GPU, those it touched (a fault of this GPU on the block) and those that left untouched (evicted, given
    // back or freed). Protected by feedback_lock (a leaf spinlock).
    spinlock_t feedback_lock;
    NvU64 prefetch_used;
    NvU64 prefetch_unused;

    // Pre-eviction worker. worker_gpu is valid while the queue runs (stopped before the GPU goes away).
    nv_kthread_q_t preevict_q;
    nv_kthread_q_item_t preevict_q_item;
    uvm_gpu_t *worker_gpu;
    bool worker_running;

    // Multi-path prefetch request of this (faulting) GPU: the last fault of its last batch. Set by the
    // fault bottom half, taken by the prefetch worker; protected by pf_lock (a leaf spinlock).
    spinlock_t pf_lock;
    uvm_va_space_t *pf_va_space;
    NvU64 pf_address;
    uvm_gpu_id_t pf_gpu_id;
    nv_kthread_q_item_t pf_q_item;
} uvm_huvm_slot_t;

typedef struct {
    rwlock_t lock;
    huvm_core_t core;
    uvm_huvm_slot_t slots[HUVM_MAX_GPUS];
    atomic64_t next_va_space_id;

    // Multi-path prefetch worker, one for the module, and its copy of the node's state for one request (its
    // moves reserve on peers with it after the decision): used by that one kthread only.
    nv_kthread_q_t prefetch_q;
    bool prefetch_q_running;
    huvm_gpu_state_t prefetch_state[HUVM_MAX_GPUS];

    bool initialized;
} uvm_huvm_global_t;

extern uvm_huvm_global_t g_uvm_huvm;
extern int uvm_huvm_enable;

// LOCKING: none (module parameter and a flag set once at load).
static inline bool huvm_enabled(void)
{
    return uvm_huvm_enable && g_uvm_huvm.initialized;
}

/* uvm_huvm.c */
// LOCKING: g_uvm_huvm.lock held (read or write).
NvU32 uvm_huvm_slot_of_gpu_locked(const uvm_gpu_t *gpu);
// LOCKING: takes gpu's PMM list lock (a leaf spinlock; the only lock ever taken under g_uvm_huvm.lock).
NvU64 uvm_huvm_gpu_free_bytes(uvm_gpu_t *gpu);
// This CPU's state buffer (HUVM_MAX_GPUS entries, zeroed), preemption disabled until uvm_huvm_put_state(),
// which the caller calls under the same hold of g_uvm_huvm.lock.
// LOCKING: g_uvm_huvm.lock held (read or write).
huvm_gpu_state_t *uvm_huvm_get_state_locked(void);
// The same buffer with the node's state gathered.
// LOCKING: g_uvm_huvm.lock held (read or write); takes the slots' peak_lock and PMM list locks (leaves).
huvm_gpu_state_t *uvm_huvm_gather_state_locked(void);
// LOCKING: g_uvm_huvm.lock held (read or write).
void uvm_huvm_put_state(void);
// LOCKING: the block lock is held.
uvm_va_space_t *uvm_huvm_block_va_space(uvm_va_block_t *va_block);

/* uvm_huvm_evict.c */
// LOCKING: the chunk's PMM list lock is taken (a spinlock) around the chunk's bitfield.
bool uvm_huvm_chunk_harvest_info(uvm_gpu_t *gpu, uvm_gpu_chunk_t *chunk, NvU32 *owner);
// LOCKING: the chunk's PMM list lock is taken (a spinlock) around the chunk's bitfield.
void uvm_huvm_chunk_clear_harvested(uvm_gpu_t *gpu, uvm_gpu_chunk_t *chunk);
// LOCKING: none (atomic).
void uvm_huvm_va_space_harvested_sub(uvm_va_space_t *va_space);
// LOCKING: the block lock is held; takes the holder's PMM list lock and g_uvm_huvm.lock (read), leaves.
void uvm_huvm_account_release_chunk(uvm_va_block_t *va_block, uvm_gpu_t *holder_gpu, uvm_gpu_chunk_t *chunk);
// LOCKING: the block lock is held; takes dst's PMM locks (below VA_BLOCK in uvm_lock.h).
NV_STATUS uvm_huvm_move_with_chunk(uvm_va_block_t *va_block,
                                   uvm_gpu_t *peer,
                                   NvU32 owner,
                                   uvm_va_block_context_t *block_context,
                                   uvm_page_mask_t *pages_to_evict,
                                   uvm_make_resident_cause_t cause,
                                   NvU32 *reason);
// LOCKING: the block lock is held; g_uvm_huvm.lock held for read.
NvU32 uvm_huvm_prefetch_candidates_locked(uvm_va_space_t *va_space, uvm_gpu_t *gpu);

/* uvm_huvm_prefetch.c */
// LOCKING: none held (kthread entry; sets up UVM's thread context).
void uvm_huvm_prefetch_worker_entry(void *args);
// LOCKING: the block lock is held (or nothing references the block any more); takes a slot's feedback_lock.
void uvm_huvm_prefetch_feedback(uvm_va_block_t *va_block, bool used);

/* uvm_huvm_preevict.c */
// LOCKING: g_uvm_huvm.lock held (read or write); only schedules work.
void uvm_huvm_preevict_kick_slot_locked(uvm_huvm_slot_t *slot);
// LOCKING: none held (kthread entry; sets up UVM's thread context).
void uvm_huvm_preevict_worker_entry(void *args);

#endif /* __UVM_HUVM_INTERNAL_H__ */
