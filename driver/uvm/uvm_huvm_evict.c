/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03. SPDX-License-Identifier: MIT
 *
 * Kernel glue: eviction to a peer GPU (uvm_huvm_internal.h lists the glue's files; locking: uvm_huvm.c's file comment).
 */
#include "uvm_huvm_internal.h"

/* ---- Eviction ---- */

// Test-only fault injection (honoured with uvm_enable_builtin_tests=1 only): the next N peer moves of a guest
// chunk report a failure after their pages reached the peer (a partly failed move).
static int uvm_huvm_test_fail_peer_moves;
module_param(uvm_huvm_test_fail_peer_moves, int, S_IRUGO | S_IWUSR);
MODULE_PARM_DESC(uvm_huvm_test_fail_peer_moves,
                 "test only (uvm_enable_builtin_tests=1): the next N peer moves report a failure after the copy");

// LOCKING: none (atomic on the parameter).
static bool test_fail_peer_move(void)
{
    int left = READ_ONCE(uvm_huvm_test_fail_peer_moves);

    if (!uvm_enable_builtin_tests || left <= 0)
        return false;
    return cmpxchg(&uvm_huvm_test_fail_peer_moves, left, left - 1) == left;
}

// Peers the chunk may go to: GPUs registered in the block's VA space that can copy directly from gpu,
// that can have no indirect peers (their chunk mappings need the VA space lock, which eviction does not
// hold: block_populate_gpu_chunk() skips them for an eviction and asserts that the destination is not
// NUMA-enabled, the only kind of GPU with indirect peers), that support eviction themselves (so they can
// give the memory back), and that are not leaving the VA space. Facts, not policy: the core chooses
// among them.
// LOCKING: the block lock is held; g_uvm_huvm.lock held for read. See the file comment on reading the
// VA space masks without the VA space lock.
static NvU32 evict_candidates_locked(uvm_va_space_t *va_space, uvm_gpu_t *gpu)
{
    uvm_gpu_id_t id;
    NvU32 candidates = 0;

    if (uvm_processor_mask_test(&va_space->gpu_unregister_in_progress, gpu->id))
        return 0;

    for_each_gpu_id_in_mask(id, &va_space->registered_gpus) {
        uvm_gpu_t *peer;
        NvU32 slot;

        if (uvm_id_equal(id, gpu->id))
            continue;
        if (uvm_processor_mask_test(&va_space->gpu_unregister_in_progress, id))
            continue;
        if (!uvm_processor_mask_test(&va_space->can_copy_from[uvm_id_value(id)], gpu->id))
            continue;

        peer = uvm_huvm_va_space_gpu_or_null(va_space, id);
        if (!peer || !uvm_huvm_gpu_supports_eviction(peer))
            continue;

        // A static property of the GPU, unlike the VA space's indirect_peers mask: indirect peers are
        // always NUMA-enabled (enable_peers()).
        if (peer->mem_info.numa.enabled)
            continue;

        slot = uvm_huvm_slot_of_gpu_locked(peer);
        if (slot != HUVM_SLOT_NONE)
            candidates |= 1u << slot;
    }

    return candidates;
}

// Peers a prefetch for gpu may use: as for eviction, and the faulting GPU must be able to copy from the
// peer directly (the fetch-back goes over NVLink).
// LOCKING: g_uvm_huvm.lock held for read; the VA space masks are read as in evict_candidates_locked().
NvU32 uvm_huvm_prefetch_candidates_locked(uvm_va_space_t *va_space, uvm_gpu_t *gpu)
{
    NvU32 candidates = evict_candidates_locked(va_space, gpu);
    NvU32 i;

    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        uvm_gpu_t *peer = g_uvm_huvm.slots[i].gpu;

        if ((candidates & (1u << i)) &&
            (!peer || !uvm_processor_mask_test(&va_space->can_copy_from[uvm_id_value(gpu->id)], peer->id)))
            candidates &= ~(1u << i);
    }

    return candidates;
}

// LOCKING: the chunk's PMM list lock is taken (a spinlock) around the chunk's bitfield.
bool uvm_huvm_chunk_harvest_info(uvm_gpu_t *gpu, uvm_gpu_chunk_t *chunk, NvU32 *owner)
{
    bool harvested;

    uvm_spin_lock(&gpu->pmm.list_lock);
    harvested = chunk->is_harvested;
    *owner = chunk->huvm_owner;
    uvm_spin_unlock(&gpu->pmm.list_lock);

    return harvested;
}

// The 2 MiB (root) chunk has been picked for eviction by its GPU's PMM (a give-back on its way).
// LOCKING: the chunk's PMM list lock is taken (a spinlock) around the chunk's bitfield.
static bool chunk_in_eviction(uvm_gpu_t *gpu, uvm_gpu_chunk_t *chunk)
{
    bool in_eviction;

    uvm_spin_lock(&gpu->pmm.list_lock);
    in_eviction = chunk->in_eviction;
    uvm_spin_unlock(&gpu->pmm.list_lock);

    return in_eviction;
}

// LOCKING: the chunk's PMM list lock is taken (a spinlock) around the chunk's bitfield.
static void chunk_set_harvested(uvm_gpu_t *gpu, uvm_gpu_chunk_t *chunk, NvU32 owner)
{
    uvm_spin_lock(&gpu->pmm.list_lock);
    chunk->is_harvested = true;
    chunk->huvm_owner = owner;
    uvm_spin_unlock(&gpu->pmm.list_lock);
}

// The chunk stays allocated but no longer holds another GPU's data (a failed give-back before a split).
// PMM moves it off its harvested list at its next list update.
// LOCKING: the chunk's PMM list lock is taken (a spinlock) around the chunk's bitfield.
void uvm_huvm_chunk_clear_harvested(uvm_gpu_t *gpu, uvm_gpu_chunk_t *chunk)
{
    uvm_spin_lock(&gpu->pmm.list_lock);
    chunk->is_harvested = false;
    uvm_spin_unlock(&gpu->pmm.list_lock);
}

// The VA space's harvested_bytes gauge goes down by one chunk, saturating at zero.
// LOCKING: none (atomic).
void uvm_huvm_va_space_harvested_sub(uvm_va_space_t *va_space)
{
    s64 old, cur = atomic64_read(&va_space->huvm.harvested_bytes);

    do {
        old = cur;
        cur = atomic64_cmpxchg(&va_space->huvm.harvested_bytes,
                               old,
                               old > (s64)UVM_CHUNK_SIZE_MAX ? old - (s64)UVM_CHUNK_SIZE_MAX : 0);
    } while (cur != old);
}

// holder's chunk of this block stops counting as harvested data of its owner (read from the chunk): the
// gauges go down (huvm_account_release(): no data moved, no event). Used when the chunk is freed with the
// block's GPU state and when a peer path reuses it (counted again by the caller).
// LOCKING: the block lock is held; takes the PMM list lock and g_uvm_huvm.lock (read), both leaves.
void uvm_huvm_account_release_chunk(uvm_va_block_t *va_block, uvm_gpu_t *holder_gpu, uvm_gpu_chunk_t *chunk)
{
    uvm_va_space_t *va_space = uvm_huvm_block_va_space(va_block);
    NvU32 owner, holder;
    bool valid;

    if (!uvm_huvm_chunk_harvest_info(holder_gpu, chunk, &owner))
        return;

    read_lock(&g_uvm_huvm.lock);
    holder = uvm_huvm_slot_of_gpu_locked(holder_gpu);
    valid = holder != HUVM_SLOT_NONE && owner != holder && owner < g_uvm_huvm.core.gpu_count;
    read_unlock(&g_uvm_huvm.lock);

    if (!valid)
        return;

    huvm_account_release(&g_uvm_huvm.core, owner, holder, UVM_CHUNK_SIZE_MAX, va_block->start);
    if (va_space)
        uvm_huvm_va_space_harvested_sub(va_space);
}

// Tools event "Eviction" (UvmEventTypeEviction), defined by UVM but not sent in 535 nor 580: sent for every
// eviction huvm accounts (to a peer, to the host while the tier is on, and a peer's give-back to host). Stock
// behaviour (the tier off) sends none, as upstream.
// LOCKING: the block lock is held; uvm_tools_record_eviction() takes the VA space tools lock.
static void record_tools_eviction(uvm_va_space_t *va_space,
                                  uvm_va_block_t *va_block,
                                  uvm_processor_id_t src,
                                  uvm_processor_id_t dst)
{
    uvm_tools_record_eviction(va_space, va_block->start, uvm_va_block_size(va_block), src, dst);
}

// A failed move of a new guest chunk to peer: a chunk the attempt populated goes back to the peer's PMM. A
// move that failed after some pages reached the peer (partly failed) keeps its chunk there, but not as
// harvested data: nothing accounted it, so its release would take another chunk's bytes off the gauges;
// those pages are the block's ordinary residency on the peer (the caller's fallback moves them on to the
// host). Out of line: it keeps the eviction path's frame small.
// LOCKING: the block lock is held; takes the peer's PMM locks.
static noinline void move_failed_cleanup(uvm_va_block_t *va_block, uvm_gpu_t *peer)
{
    uvm_va_block_gpu_state_t *peer_state = uvm_va_block_gpu_state_get(va_block, peer->id);
    uvm_gpu_chunk_t *chunk = peer_state && peer_state->chunks ? peer_state->chunks[0] : NULL;

    if (chunk && !uvm_processor_mask_test(&va_block->resident, peer->id)) {
        uvm_mmu_chunk_unmap(chunk, &va_block->tracker);
        uvm_pmm_gpu_free(&peer->pmm, chunk, &va_block->tracker);
        peer_state->chunks[0] = NULL;
    }
    else if (chunk) {
        uvm_huvm_chunk_clear_harvested(peer, chunk);
    }
    uvm_processor_mask_clear(&va_block->harvested_on, peer->id);
}

// Move the pages to GPU dst (a peer for eviction or multi-path prefetch, or the faulting GPU itself for
// local prefetch) without ever evicting on dst and without dropping the block lock: dst's 2 MiB chunk is
// allocated up front without eviction and handed to make_resident through a local retry object, so
// block_alloc_gpu_chunk() finds it and never allocates (or unlocks) itself. With owner != HUVM_SLOT_NONE
// the chunk becomes harvested data of GPU owner (is_harvested, harvested_on). On failure *reason says
// why and dst holds no chunk of this block it did not hold before.
// LOCKING: the block lock is held; takes dst's PMM locks (below VA_BLOCK in uvm_lock.h).
NV_STATUS uvm_huvm_move_with_chunk(uvm_va_block_t *va_block,
                                   uvm_gpu_t *peer,
                                   NvU32 owner,
                                   uvm_va_block_context_t *block_context,
                                   uvm_page_mask_t *pages_to_evict,
                                   uvm_make_resident_cause_t cause,
                                   NvU32 *reason)
{
    uvm_va_block_region_t region = uvm_va_block_region_from_block(va_block);
    uvm_va_block_gpu_state_t *peer_state = uvm_va_block_gpu_state_get(va_block, peer->id);
    bool harvest = owner != HUVM_SLOT_NONE;
    bool was_harvested = uvm_processor_mask_test(&va_block->harvested_on, peer->id);
    uvm_gpu_chunk_t *chunk = NULL;
    uvm_gpu_chunk_t *reused = NULL;
    uvm_chunk_size_t chunk_size = 0;
    uvm_va_block_retry_t retry;
    NV_STATUS status;

    uvm_assert_mutex_locked(&va_block->lock);

    // The block must map to exactly one 2 MiB chunk on the peer, or populate would allocate by itself.
    if (uvm_va_block_size(va_block) != UVM_CHUNK_SIZE_MAX ||
        uvm_va_block_gpu_chunk_index_range(va_block->start, uvm_va_block_size(va_block), peer, 0, &chunk_size) != 0 ||
        chunk_size != UVM_CHUNK_SIZE_MAX) {
        *reason = HUVM_REASON_ALLOC_FAILED;
        return NV_ERR_NOT_SUPPORTED;
    }

    // A chunk the peer already holds for this block is reused only if it is harvested data; the peer's
    // own copy of a shared block is not turned into lent memory.
    if (harvest && peer_state && peer_state->chunks && peer_state->chunks[0] && !was_harvested) {
        *reason = HUVM_REASON_ALLOC_FAILED;
        return NV_ERR_IN_USE;
    }

    uvm_va_block_retry_init(&retry);

    if (!peer_state || !peer_state->chunks || !peer_state->chunks[0]) {
        // Never UVM_PMM_ALLOC_FLAGS_EVICT here: we are inside an eviction with a block lock held.
        status = uvm_pmm_gpu_alloc_user(&peer->pmm,
                                        1,
                                        UVM_CHUNK_SIZE_MAX,
                                        UVM_PMM_ALLOC_FLAGS_DONT_BATCH,
                                        &chunk,
                                        &retry.tracker);
        if (status != NV_OK) {
            *reason = HUVM_REASON_ALLOC_FAILED;
            goto out;
        }

        if (harvest)
            chunk_set_harvested(peer, chunk, owner);

        // As block_retry_add_free_chunk(): block_alloc_gpu_chunk() takes it from here.
        list_add_tail(&chunk->list, &retry.free_chunks);
    }
    else if (harvest) {
        // Harvested data already here (checked above): its chunk is accounted once, see below. Not a chunk
        // the peer's PMM has already picked for eviction (a give-back): the pages would be copied there only
        // to be copied again to the host.
        if (chunk_in_eviction(peer, peer_state->chunks[0])) {
            *reason = HUVM_REASON_PEER_FULL;
            status = NV_ERR_BUSY_RETRY;
            goto out;
        }
        reused = peer_state->chunks[0];
    }

    if (harvest)
        uvm_processor_mask_set(&va_block->harvested_on, peer->id);

    status = uvm_va_block_make_resident(va_block, &retry, block_context, peer->id, region, pages_to_evict, NULL, cause);
    UVM_ASSERT(status != NV_ERR_MORE_PROCESSING_REQUIRED);
    if (status == NV_OK && harvest && !was_harvested && test_fail_peer_move())
        status = NV_ERR_NO_MEMORY;
    if (status != NV_OK) {
        *reason = HUVM_REASON_COPY_FAILED;
    }
    else if (reused) {
        // The caller accounts the chunk for owner again: drop its previous claim, then record the new owner.
        uvm_huvm_account_release_chunk(va_block, peer, reused);
        chunk_set_harvested(peer, reused, owner);
    }

out:
    // Frees the chunk if populate did not take it; unpins it (onto the peer's harvested list) if it did.
    uvm_va_block_retry_deinit(&retry, va_block);

    if (status != NV_OK && harvest && !was_harvested)
        move_failed_cleanup(va_block, peer);

    return status;
}

// The one destination choice of uvm_va_block_evict_chunks(): ask the core, try the peer, fall back to
// the CPU on any failure, and account the outcome (with the reason when it went to host).
// LOCKING: the block lock is held, the VA space lock and mmap_lock are not (eviction path). Takes
// g_uvm_huvm.lock for read around the decision only; the peer path takes the peer's PMM locks.
NV_STATUS uvm_huvm_evict_make_resident(uvm_va_block_t *va_block,
                                       uvm_gpu_t *gpu,
                                       uvm_gpu_chunk_t *root_chunk,
                                       uvm_va_block_context_t *block_context,
                                       uvm_page_mask_t *pages_to_evict,
                                       NvU32 evict_flags)
{
    uvm_va_block_region_t region = uvm_va_block_region_from_block(va_block);
    uvm_va_space_t *va_space = uvm_huvm_block_va_space(va_block);
    const huvm_gpu_state_t *state;
    huvm_evict_request_t req;
    huvm_decision_t decision = { HUVM_DEST_HOST, HUVM_REASON_TIER_OFF };
    uvm_gpu_t *peer = NULL;
    NvU32 guest_owner = HUVM_SLOT_NONE;
    NvU32 owner = HUVM_SLOT_NONE;
    NV_STATUS status;

    uvm_assert_mutex_locked(&va_block->lock);
    UVM_ASSERT(va_space);

    memset(&req, 0, sizeof(req));
    if (!huvm_enabled() || uvm_va_block_is_hmm(va_block))
        goto to_host;

    // Nothing resident in the chunk (PMM evicts chunks of its "unused" list first): nothing moves, so no
    // peer and no counter. A guest chunk still stops holding its owner's data: PMM frees it after this.
    if (uvm_page_mask_empty(pages_to_evict)) {
        status = uvm_va_block_make_resident(va_block,
                                            NULL,
                                            block_context,
                                            UVM_ID_CPU,
                                            region,
                                            pages_to_evict,
                                            NULL,
                                            UVM_MAKE_RESIDENT_CAUSE_EVICTION);
        if (status == NV_OK && uvm_processor_mask_test(&va_block->harvested_on, gpu->id) &&
            !uvm_processor_mask_test(&va_block->resident, gpu->id)) {
            uvm_huvm_account_release_chunk(va_block, gpu, root_chunk);
            uvm_processor_mask_clear(&va_block->harvested_on, gpu->id);
            if (uvm_processor_mask_empty(&va_block->harvested_on))
                va_block->huvm_remote_mapped = false;
        }
        return status;
    }

    req.flags = evict_flags & (HUVM_EVICT_FLAG_PMA_CONTEXT | HUVM_EVICT_FLAG_PREEVICT);
    if (uvm_huvm_chunk_harvest_info(gpu, root_chunk, &guest_owner) &&
        uvm_processor_mask_test(&va_block->harvested_on, gpu->id))
        req.flags |= HUVM_EVICT_FLAG_GUEST_CHUNK;
    else
        guest_owner = HUVM_SLOT_NONE;
    req.now_ns = NV_GETTIME();
    req.chunk_fetched_ns = va_block->huvm_fetched_ns;

    read_lock(&g_uvm_huvm.lock);
    owner = uvm_huvm_slot_of_gpu_locked(gpu);
    if (owner != HUVM_SLOT_NONE) {
        req.gpu = owner;
        req.candidates = evict_candidates_locked(va_space, gpu);
        // Pages the CPU also holds (read-duplicated, e.g. cudaMemAdviseSetReadMostly data) need no copy: stock
        // UVM's eviction to the CPU only drops the GPU's copy of them. make_resident() to a peer would copy
        // them there and revoke the CPU's copy (it breaks read duplication), moving data the host already
        // has: such a chunk goes to host, as in stock UVM.
        if (uvm_page_mask_intersects(pages_to_evict, uvm_huvm_resident_mask_get(va_block, UVM_ID_CPU)))
            req.candidates = 0;
#if HUVM_NV_BRANCH >= 580
        // UvmDiscard (580): pages_to_evict also holds discarded pages, whose residency on gpu was revoked
        // and whose content is undefined. Moving them to a peer is not reviewed (harvested_on, is_zero and
        // ever_fully_resident would have to agree on them): such a chunk goes to host, as in stock UVM.
        if (uvm_page_mask_intersects(pages_to_evict, &va_block->discarded_pages))
            req.candidates = 0;
#endif
        state = uvm_huvm_gather_state_locked();
        decision = huvm_decide_evict(&g_uvm_huvm.core, state, &req);
        if (decision.dst < HUVM_MAX_GPUS) {
            // Other evictors decide under the same read lock: reserve the chunk on the peer atomically (lend
            // limit and reserve checked again with the bytes in flight), released once accounted.
            decision.reason =
                huvm_lend_reserve(&g_uvm_huvm.core, state, owner, decision.dst, UVM_CHUNK_SIZE_MAX, req.now_ns);
            if (decision.reason == HUVM_REASON_PEER)
                peer = g_uvm_huvm.slots[decision.dst].gpu;
            if (decision.reason == HUVM_REASON_PEER && !peer) {
                huvm_lend_unreserve(&g_uvm_huvm.core, decision.dst, UVM_CHUNK_SIZE_MAX);
                decision.reason = HUVM_REASON_NO_PEER;
            }
            if (!peer)
                decision.dst = HUVM_DEST_HOST;
        }
        uvm_huvm_put_state();
    }
    read_unlock(&g_uvm_huvm.lock);

    if (owner == HUVM_SLOT_NONE)
        goto to_host;

    if (decision.dst < HUVM_MAX_GPUS) {
        // The core never picks a peer for PMA-context or guest-chunk evictions; check it anyway, the
        // peer allocation below would deadlock under PMA's eviction callback.
        UVM_ASSERT(!(req.flags & (HUVM_EVICT_FLAG_PMA_CONTEXT | HUVM_EVICT_FLAG_GUEST_CHUNK)));
        if (!peer || !(req.candidates & (1u << decision.dst)) ||
            (req.flags & (HUVM_EVICT_FLAG_PMA_CONTEXT | HUVM_EVICT_FLAG_GUEST_CHUNK))) {
            decision.reason = HUVM_REASON_NO_PEER;
        }
        else {
            // The peer copies from gpu directly (evict_candidates_locked()): populating it never stages
            // through the CPU, which on 580 would need block_context->mm, NULL on the eviction path. NUMA-
            // enabled GPUs (Grace-Hopper C2C, 580's EGM) are never candidates.
            UVM_ASSERT(uvm_processor_mask_test(&va_space->can_copy_from[uvm_id_value(peer->id)], gpu->id));
            UVM_ASSERT(!peer->mem_info.numa.enabled);
            status = uvm_huvm_move_with_chunk(va_block,
                                              peer,
                                              owner,
                                              block_context,
                                              pages_to_evict,
                                              UVM_MAKE_RESIDENT_CAUSE_EVICTION,
                                              &decision.reason);
            if (status == NV_OK) {
                huvm_account_evict(&g_uvm_huvm.core,
                                   owner,
                                   decision.dst,
                                   HUVM_REASON_PEER,
                                   req.flags,
                                   UVM_CHUNK_SIZE_MAX,
                                   va_block->start);
                huvm_lend_unreserve(&g_uvm_huvm.core, decision.dst, UVM_CHUNK_SIZE_MAX);
                atomic64_inc(&va_space->huvm.evict_to_peer);
                atomic64_add(UVM_CHUNK_SIZE_MAX, &va_space->huvm.harvested_bytes);
                atomic64_set(&g_uvm_huvm.slots[owner].last_evict_ns, req.now_ns);
                record_tools_eviction(va_space, va_block, gpu->id, peer->id);
                return NV_OK;
            }
        }

        if (peer)
            huvm_lend_unreserve(&g_uvm_huvm.core, decision.dst, UVM_CHUNK_SIZE_MAX);

        // Fall back to host, starting from a clean make_resident state.
        uvm_processor_mask_zero(&block_context->make_resident.all_involved_processors);
    }

to_host:
    status = uvm_va_block_make_resident(va_block,
                                        NULL,
                                        block_context,
                                        UVM_ID_CPU,
                                        region,
                                        pages_to_evict,
                                        NULL,
                                        UVM_MAKE_RESIDENT_CAUSE_EVICTION);
    if (status != NV_OK || !huvm_enabled() || uvm_va_block_is_hmm(va_block))
        return status;

    if (req.flags & HUVM_EVICT_FLAG_GUEST_CHUNK) {
        // Give-back: the lender's memory goes back, the owner's data to host.
        if (!uvm_processor_mask_test(&va_block->resident, gpu->id))
            uvm_processor_mask_clear(&va_block->harvested_on, gpu->id);
        if (uvm_processor_mask_empty(&va_block->harvested_on))
            va_block->huvm_remote_mapped = false;

        if (owner != HUVM_SLOT_NONE && guest_owner < HUVM_MAX_GPUS && guest_owner != owner) {
            huvm_account_giveback(&g_uvm_huvm.core, owner, guest_owner, UVM_CHUNK_SIZE_MAX, va_block->start);
            uvm_huvm_va_space_harvested_sub(va_space);
            record_tools_eviction(va_space, va_block, gpu->id, UVM_ID_CPU);
        }
    }
    else if (owner != HUVM_SLOT_NONE) {
        huvm_account_evict(&g_uvm_huvm.core,
                           owner,
                           HUVM_DEST_HOST,
                           decision.reason,
                           req.flags,
                           UVM_CHUNK_SIZE_MAX,
                           va_block->start);
        atomic64_inc(&va_space->huvm.evict_to_host);
        atomic64_set(&g_uvm_huvm.slots[owner].last_evict_ns, req.now_ns);
        record_tools_eviction(va_space, va_block, gpu->id, UVM_ID_CPU);
    }

    return NV_OK;
}
