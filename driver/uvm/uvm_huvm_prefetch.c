/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03. SPDX-License-Identifier: MIT
 *
 * Kernel glue: fault batches and the multi-path / two-stage prefetch worker (uvm_huvm_internal.h lists the glue's files; locking: uvm_huvm.c's file comment).
 */
#include "uvm_huvm_internal.h"

/* ---- Prefetch ---- */

// LOCKING: the block lock and the VA space lock (read) are held (fault servicing, prefetch hint);
// takes g_uvm_huvm.lock for read.
bool uvm_huvm_prefetch_whole_block(uvm_va_block_t *va_block, uvm_processor_id_t new_residency)
{
    uvm_va_space_t *va_space;
    uvm_gpu_id_t id;
    NvU32 owner;
    bool whole = false;

    uvm_assert_mutex_locked(&va_block->lock);

    if (!huvm_enabled() || UVM_ID_IS_CPU(new_residency) || uvm_processor_mask_empty(&va_block->harvested_on))
        return false;

    va_space = uvm_va_block_get_va_space(va_block);

    read_lock(&g_uvm_huvm.lock);
    owner = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_get_gpu(va_space, new_residency));
    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        NvU32 holder = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_get_gpu(va_space, id));

        if (owner == HUVM_SLOT_NONE || holder == HUVM_SLOT_NONE || holder == owner)
            continue;
        if (huvm_decide_fetch(&g_uvm_huvm.core, owner, holder) == HUVM_FETCH_MIGRATE)
            whole = true;
    }
    read_unlock(&g_uvm_huvm.lock);

    return whole;
}

// Fault accounting, and a multi-path prefetch request beyond the batch's last fault when the core's
// plan for this GPU has anything to prefetch.
// LOCKING: none held (fault bottom half, between batches; the VA space is valid until the bottom half
// returns). Takes g_uvm_huvm.lock for read and pf_lock; reads the VA space's peer masks lock-free (a hint,
// re-checked by the worker under the VA space lock).
void uvm_huvm_fault_batch_done(uvm_gpu_t *gpu, uvm_va_space_t *va_space, NvU64 address, NvU32 num_faults)
{
    huvm_prefetch_plan_t plan;
    uvm_huvm_slot_t *slot;
    NvU32 index;

    if (!huvm_enabled() || num_faults == 0)
        return;

    read_lock(&g_uvm_huvm.lock);
    index = uvm_huvm_slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE) {
        slot = &g_uvm_huvm.slots[index];
        atomic64_set(&slot->burst_chunks,
                     DIV_ROUND_UP((NvU64)atomic64_xchg(&slot->batch_alloc_bytes, 0), UVM_CHUNK_SIZE_MAX));
        huvm_account_faults(&g_uvm_huvm.core, index, num_faults);

        memset(&plan, 0, sizeof(plan));
        // The stock preset (prefetch off) gathers nothing across GPUs: the fault path costs a counter.
        if (va_space && g_uvm_huvm.prefetch_q_running && huvm_prefetch_active(&g_uvm_huvm.core, index)) {
            huvm_decide_prefetch(&g_uvm_huvm.core,
                                 uvm_huvm_gather_state_locked(),
                                 index,
                                 uvm_huvm_prefetch_candidates_locked(va_space, gpu),
                                 NV_GETTIME(),
                                 &plan);
            uvm_huvm_put_state();
        }

        if (plan.local_chunks + plan.peer_chunks + plan.peer_local_chunks > 0) {
            spin_lock(&slot->pf_lock);
            slot->pf_va_space = va_space;
            slot->pf_address = address;
            slot->pf_gpu_id = gpu->id;
            spin_unlock(&slot->pf_lock);
            nv_kthread_q_schedule_q_item(&g_uvm_huvm.prefetch_q, &slot->pf_q_item);
        }
    }
    read_unlock(&g_uvm_huvm.lock);
}

// The window's block at address, locked, when the prefetcher may move it: a managed (not HMM) block whose
// migration no range group prevents, resident on exactly one processor, with no placement of its own
// (preferred location, read duplication). Returns NULL (nothing locked) otherwise.
// LOCKING: the VA space lock is held for read; takes the block lock (the caller unlocks it).
static uvm_va_block_t *lock_movable_block(uvm_va_space_t *va_space, NvU64 address)
{
    const uvm_va_policy_t *policy;
    uvm_va_block_t *va_block;

    uvm_assert_rwsem_locked_read(&va_space->lock);

    if (uvm_va_block_find(va_space, address, &va_block) != NV_OK || uvm_va_block_is_hmm(va_block))
        return NULL;
    if (!uvm_range_group_all_migratable(va_space, va_block->start, va_block->end))
        return NULL;

    uvm_mutex_lock(&va_block->lock);
    policy = uvm_huvm_block_policy(va_block);
    if (uvm_processor_mask_get_count(&va_block->resident) == 1 &&
        policy->read_duplication != UVM_READ_DUPLICATION_ENABLED && !UVM_ID_IS_VALID(policy->preferred_location))
        return va_block;
    uvm_mutex_unlock(&va_block->lock);
    return NULL;
}

// Prefetch feedback: the block huvm prefetched for a GPU (va_block->huvm_prefetched_for) was touched by that
// GPU (used: its fault on the block, fault_event()) or left untouched (evicted, given back or freed:
// migration_event(), block_destroy_event()). The mark is cleared, so each prefetch counts once, into the GPU's
// recent history that the core's PREFETCH_FEEDBACK reads (huvm_gpu_state_t.prefetch_used/unused).
// LOCKING: the block lock is held (or nothing references the block any more); takes the slot's feedback_lock
// (a leaf spinlock).
void uvm_huvm_prefetch_feedback(uvm_va_block_t *va_block, bool used)
{
    NvU32 mark = va_block->huvm_prefetched_for;
    uvm_huvm_slot_t *slot;

    if (mark == 0 || mark > HUVM_MAX_GPUS)
        return;
    va_block->huvm_prefetched_for = 0;
    slot = &g_uvm_huvm.slots[mark - 1];

    spin_lock(&slot->feedback_lock);
    huvm_prefetch_feedback(&slot->prefetch_used, &slot->prefetch_unused, used ? 1 : 0);
    spin_unlock(&slot->feedback_lock);
}

// Prefetch one whole block that is entirely on the host to dst: the faulting GPU itself (host -> local,
// over its own PCIe link) or a peer (host -> peer over the peer's PCIe link, fetched back over NVLink on
// use). Never evicts: the chunk comes from free memory or the block is skipped. Blocks with a placement
// of their own (preferred location, read duplication) or migration prevented by a range group are left
// alone.
// LOCKING: the VA space lock is held for read (and mmap_lock if the VA space has an mm); takes the block
// lock and dst's PMM locks.
static void prefetch_block(uvm_va_space_t *va_space,
                           uvm_va_block_context_t *block_context,
                           NvU64 address,
                           uvm_gpu_t *gpu,
                           NvU32 owner,
                           uvm_gpu_t *dst,
                           NvU32 dst_slot,
                           const huvm_gpu_state_t *state)
{
    uvm_page_mask_t *pages = &block_context->caller_page_mask;
    uvm_va_block_t *va_block;
    NvU32 reason;
    NV_STATUS status;

    va_block = lock_movable_block(va_space, address);
    if (!va_block)
        return;
    if (!uvm_processor_mask_test(&va_block->resident, UVM_ID_CPU))
        goto unlock;

    // A peer's chunk is reserved against its lend limit first, as for eviction (huvm_lend_reserve()).
    if (dst != gpu) {
        read_lock(&g_uvm_huvm.lock);
        reason = huvm_lend_reserve(&g_uvm_huvm.core, state, owner, dst_slot, UVM_CHUNK_SIZE_MAX, NV_GETTIME());
        read_unlock(&g_uvm_huvm.lock);
        if (reason != HUVM_REASON_PEER)
            goto unlock;
    }

    uvm_page_mask_copy(pages, uvm_huvm_resident_mask_get(va_block, UVM_ID_CPU));
    status = uvm_huvm_move_with_chunk(va_block,
                                      dst,
                                      dst == gpu ? HUVM_SLOT_NONE : owner,
                                      block_context,
                                      pages,
                                      UVM_MAKE_RESIDENT_CAUSE_PREFETCH,
                                      &reason);
    if (status != NV_OK) {
        if (dst != gpu)
            huvm_lend_unreserve(&g_uvm_huvm.core, dst_slot, UVM_CHUNK_SIZE_MAX);
        goto unlock;
    }

    huvm_account_prefetch(&g_uvm_huvm.core, owner, dst_slot, UVM_CHUNK_SIZE_MAX, va_block->start);
    va_block->huvm_prefetched_for = owner + 1;
    if (dst != gpu)
        huvm_lend_unreserve(&g_uvm_huvm.core, dst_slot, UVM_CHUNK_SIZE_MAX);
    atomic64_inc(&va_space->huvm.prefetch);
    if (dst != gpu)
        atomic64_add(UVM_CHUNK_SIZE_MAX, &va_space->huvm.harvested_bytes);

unlock:
    uvm_mutex_unlock(&va_block->lock);
}

// Two-stage prefetch, second stage (HUVM_PREFETCH_LOCAL and _TWO_STAGE: the plan's peer_local_chunks): a block
// of the window that is gpu's own data, held whole by a peer, comes back to gpu ahead of its fault. Never
// evicts: gpu's chunk comes from free memory (uvm_huvm_move_with_chunk()). Returns true when the block came back;
// *no_room is set when gpu had no free chunk for it (the rest of this part is then dropped, as the
// simulator does). The peer's chunk is released and the fetch accounted by make_resident's finish
// (release_peer_chunk()) and the migration events (migration_event()), as for a fault's fetch-back.
// LOCKING: the VA space lock is held for read (and mmap_lock if the VA space has an mm); takes the block
// lock, the holder's PMM list lock and gpu's PMM locks.
static bool fetch_back_block(uvm_va_space_t *va_space,
                             uvm_va_block_context_t *block_context,
                             NvU64 address,
                             uvm_gpu_t *gpu,
                             NvU32 owner,
                             bool *no_room)
{
    uvm_page_mask_t *pages = &block_context->caller_page_mask;
    uvm_va_block_gpu_state_t *holder_state;
    uvm_processor_id_t holder_id = UVM_ID_INVALID;
    uvm_va_block_t *va_block;
    uvm_gpu_id_t id;
    NvU32 chunk_owner = HUVM_SLOT_NONE, reason;
    bool moved = false;

    *no_room = false;
    va_block = lock_movable_block(va_space, address);
    if (!va_block)
        return false;

    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        if (uvm_processor_mask_test(&va_block->resident, id))
            holder_id = id;
    }
    if (!UVM_ID_IS_VALID(holder_id) || uvm_id_equal(holder_id, gpu->id))
        goto unlock;
    holder_state = uvm_va_block_gpu_state_get(va_block, holder_id);
    if (!holder_state || !holder_state->chunks || !holder_state->chunks[0] ||
        !uvm_huvm_chunk_harvest_info(uvm_huvm_va_space_get_gpu(va_space, holder_id),
                                     holder_state->chunks[0],
                                     &chunk_owner) ||
        chunk_owner != owner)
        goto unlock;

    uvm_page_mask_copy(pages, uvm_huvm_resident_mask_get(va_block, holder_id));
    if (uvm_huvm_move_with_chunk(va_block,
                                 gpu,
                                 HUVM_SLOT_NONE,
                                 block_context,
                                 pages,
                                 UVM_MAKE_RESIDENT_CAUSE_PREFETCH,
                                 &reason) == NV_OK) {
        va_block->huvm_prefetched_for = owner + 1;
        moved = true;
    }
    else if (reason == HUVM_REASON_ALLOC_FAILED)
        *no_room = true;

unlock:
    uvm_mutex_unlock(&va_block->lock);
    return moved;
}

// The prefetcher: the core's plan splits the blocks after the faulting GPU's last fault between host -> local
// and host -> peer, so both PCIe links copy at once (multi-path), and brings blocks of the window held by
// peers back (two-stage); the copies are pushed asynchronously, each on its destination's channels.
// LOCKING: runs in the prefetch kthread with no locks held; takes mmap_lock (read), the VA space lock
// (read) and VA block locks in UVM's order, as fault servicing does, and g_uvm_huvm.lock (read) around
// the decision. The VA space pointer stays valid: see uvm_huvm_va_space_destroy().
static void prefetch_worker(void *args)
{
    uvm_huvm_slot_t *slot = args;
    huvm_gpu_state_t *state = g_uvm_huvm.prefetch_state;
    huvm_prefetch_plan_t plan;
    uvm_va_block_context_t *block_context;
    uvm_va_space_t *va_space;
    struct mm_struct *mm;
    uvm_gpu_t *gpu, *peer = NULL;
    uvm_gpu_id_t gpu_id, peer_id = UVM_ID_INVALID;
    NvU64 address, base;
    NvU32 owner, i, span, back_done = 0;

    spin_lock(&slot->pf_lock);
    va_space = slot->pf_va_space;
    address = slot->pf_address;
    gpu_id = slot->pf_gpu_id;
    slot->pf_va_space = NULL;
    spin_unlock(&slot->pf_lock);

    if (!va_space || !huvm_enabled())
        return;

    mm = uvm_va_space_mm_retain_lock(va_space);
    uvm_va_space_down_read(va_space);

    if (!uvm_processor_mask_test(&va_space->registered_gpus, gpu_id))
        goto out;
    gpu = uvm_huvm_va_space_get_gpu(va_space, gpu_id);

    memset(&plan, 0, sizeof(plan));
    read_lock(&g_uvm_huvm.lock);
    owner = uvm_huvm_slot_of_gpu_locked(gpu);
    if (owner != HUVM_SLOT_NONE) {
        // A copy: the moves below reserve on peers with it, outside this hold of the lock (the prefetch queue
        // has one kthread: the copy is its own).
        memcpy(state, uvm_huvm_gather_state_locked(), sizeof(g_uvm_huvm.prefetch_state));
        uvm_huvm_put_state();
        huvm_decide_prefetch(&g_uvm_huvm.core,
                             state,
                             owner,
                             uvm_huvm_prefetch_candidates_locked(va_space, gpu),
                             NV_GETTIME(),
                             &plan);
        if (plan.peer_chunks > 0 && plan.peer < HUVM_MAX_GPUS && g_uvm_huvm.slots[plan.peer].gpu) {
            peer = g_uvm_huvm.slots[plan.peer].gpu;
            peer_id = peer->id;
        }
    }
    read_unlock(&g_uvm_huvm.lock);

    if (owner == HUVM_SLOT_NONE || plan.stride == 0)
        goto out;
    span = plan.local_chunks + plan.peer_chunks;
    if (plan.peer_local_chunks > span)
        span = plan.peer_local_chunks;

    // The peer must still be registered in this VA space (we hold its lock now). It may have gone away
    // since the huvm lock was dropped, so it is only compared, not dereferenced, until then.
    if (peer && (!uvm_processor_mask_test(&va_space->registered_gpus, peer_id) ||
                 uvm_huvm_va_space_gpu_or_null(va_space, peer_id) != peer))
        peer = NULL;

    block_context = uvm_va_block_context_alloc(mm);
    if (!block_context)
        goto out;

    // The window after the faulting block, as the simulator walks it: a block held by a peer comes back
    // (up to peer_local_chunks of them); a block on the host goes to gpu (the first local_chunks positions)
    // or to the peer (the next peer_chunks).
    base = address & ~((NvU64)UVM_CHUNK_SIZE_MAX - 1);
    for (i = 0; i < span; i++) {
        NvU64 block_address = base + (NvU64)(i + 1) * plan.stride * UVM_CHUNK_SIZE_MAX;
        bool no_room;

        if (block_address <= base)
            break;

        if (back_done < plan.peer_local_chunks) {
            if (fetch_back_block(va_space, block_context, block_address, gpu, owner, &no_room)) {
                back_done++;
                continue;
            }
            if (no_room)
                back_done = plan.peer_local_chunks;
        }
        if (i >= plan.local_chunks + plan.peer_chunks)
            continue;

        if (i < plan.local_chunks)
            prefetch_block(va_space, block_context, block_address, gpu, owner, gpu, owner, state);
        else if (peer)
            prefetch_block(va_space, block_context, block_address, gpu, owner, peer, plan.peer, state);
    }

    uvm_va_block_context_free(block_context);

out:
    uvm_va_space_up_read(va_space);
    uvm_va_space_mm_release_unlock(va_space, mm);
}

// LOCKING: none held (kthread entry; sets up UVM's thread context).
void uvm_huvm_prefetch_worker_entry(void *args)
{
    UVM_ENTRY_VOID(prefetch_worker(args));
}
