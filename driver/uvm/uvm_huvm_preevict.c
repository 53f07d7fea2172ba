/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03. SPDX-License-Identifier: MIT
 *
 * Kernel glue: the pre-eviction and proactive give-back worker (uvm_huvm_internal.h lists the glue's files; locking: uvm_huvm.c's file comment).
 */
#include "uvm_huvm_internal.h"

/* ---- Pre-eviction ---- */

// LOCKING: g_uvm_huvm.lock held (read or write); only schedules work.
void uvm_huvm_preevict_kick_slot_locked(uvm_huvm_slot_t *slot)
{
    if (slot->gpu && slot->worker_running)
        nv_kthread_q_schedule_q_item(&slot->preevict_q, &slot->preevict_q_item);
}

// Memory pressure on gpu: an allocation had to evict (or RM's PMA took memory from UVM). The burst the
// pre-eviction reserve is sized on (huvm_gpu_state_t.burst_chunks) is the last fault batch's allocations, or,
// when more was allocated since the last batch ended (migrations: UVM_MIGRATE, cudaMemPrefetchAsync, which
// have no fault batch), those allocations.
// LOCKING: any (no VA block lock is needed); takes g_uvm_huvm.lock for read and schedules work.
void uvm_huvm_kick_preevict(uvm_gpu_t *gpu)
{
    uvm_huvm_slot_t *slot;
    NvU64 pending;
    NvU32 index;

    if (!huvm_enabled())
        return;

    read_lock(&g_uvm_huvm.lock);
    index = uvm_huvm_slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE) {
        slot = &g_uvm_huvm.slots[index];
        pending = DIV_ROUND_UP((NvU64)atomic64_read(&slot->batch_alloc_bytes), UVM_CHUNK_SIZE_MAX);
        if (pending > (NvU64)atomic64_read(&slot->burst_chunks))
            atomic64_set(&slot->burst_chunks, pending);
        atomic64_set(&slot->last_pressure_ns, NV_GETTIME());
        uvm_huvm_preevict_kick_slot_locked(slot);
    }
    read_unlock(&g_uvm_huvm.lock);
}

// An allocation succeeded on gpu without evicting: a lender that fell below its lend reserve, or a GPU that
// fell below its pre-eviction reserve, has its worker woken (give-back, pre-eviction; the worker's plans
// decide how much, and whether there is pressure, under the per-GPU flags). Not memory pressure itself.
// LOCKING: the block lock may be held; takes g_uvm_huvm.lock for read (and, under it, the PMM list lock).
void uvm_huvm_note_alloc(uvm_gpu_t *gpu, NvU64 size)
{
    huvm_gpu_state_t *state;
    uvm_huvm_slot_t *slot;
    NvU32 index;
    bool lends, reserve;

    if (!huvm_enabled())
        return;

    read_lock(&g_uvm_huvm.lock);
    index = uvm_huvm_slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE) {
        slot = &g_uvm_huvm.slots[index];
        atomic64_add(size, &slot->batch_alloc_bytes);
        lends = huvm_atomic64_read(&g_uvm_huvm.core.counters[index].lent_bytes) != 0;
        reserve = huvm_preevict_target(&g_uvm_huvm.core, index) != 0;
        if (lends || reserve) {
            state = uvm_huvm_get_state_locked();
            state[index].free_bytes = uvm_huvm_gpu_free_bytes(gpu);
            if ((lends && huvm_giveback_need(&g_uvm_huvm.core, state, index) > 0) ||
                (reserve && huvm_decide_preevict(&g_uvm_huvm.core, state, index) > 0))
                uvm_huvm_preevict_kick_slot_locked(slot);
            uvm_huvm_put_state();
        }
    }
    read_unlock(&g_uvm_huvm.lock);
}

// One pass: evict as many root chunks as the core asks for (peers first, through the same eviction path
// with HUVM_EVICT_FLAG_PREEVICT), returning each to PMA so the free reserve grows.
// LOCKING: runs in the worker's kthread with no locks held; uvm_pmm_gpu_preevict_root_chunk() takes the
// PMM lock and, dropping it, VA block locks, like any evicting allocation.
static void preevict_worker(void *args)
{
    uvm_huvm_slot_t *slot = args;
    uvm_gpu_t *gpu = slot->worker_gpu;
    const huvm_gpu_state_t *state;
    huvm_giveback_plan_t giveback, preevict;
    NvU32 index, owner, i;
    NvU64 need = 0;

    memset(&giveback, 0, sizeof(giveback));
    memset(&preevict, 0, sizeof(preevict));

    read_lock(&g_uvm_huvm.lock);
    index = uvm_huvm_slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE && huvm_enabled()) {
        state = uvm_huvm_gather_state_locked();

        // A lender below its lend reserve takes its memory back from its guests first (the core's give-back
        // plan: owners holding the most first, all to host), whatever pre-eviction decides.
        need = huvm_giveback_need(&g_uvm_huvm.core, state, index);
        if (need > 0)
            huvm_decide_giveback(&g_uvm_huvm.core, state, index, need, &giveback);

        // Pre-eviction restores the free reserve under pressure: guests' chunks first, then own data.
        huvm_decide_preevict_plan(&g_uvm_huvm.core, state, index, NV_GETTIME(), &preevict);
        uvm_huvm_put_state();
    }
    read_unlock(&g_uvm_huvm.lock);

    for (owner = 0; owner < HUVM_MAX_GPUS; owner++) {
        NvU32 n = max(giveback.guest_chunks[owner], preevict.guest_chunks[owner]);

        for (i = 0; i < n; i++) {
            if (uvm_pmm_gpu_preevict_root_chunk(&gpu->pmm, owner) != NV_OK)
                break;
        }
    }

    // Own data only after every guest chunk the plan named (PMM's pick would take guests' chunks first
    // anyway); pre-eviction through the usual eviction path, peers first.
    for (i = 0; i < preevict.own_chunks; i++) {
        if (uvm_pmm_gpu_preevict_root_chunk(&gpu->pmm, UVM_HUVM_OWNER_ANY) != NV_OK)
            break;
    }
}

// LOCKING: none held (kthread entry; sets up UVM's thread context).
void uvm_huvm_preevict_worker_entry(void *args)
{
    UVM_ENTRY_VOID(preevict_worker(args));
}
