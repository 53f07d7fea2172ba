/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03. SPDX-License-Identifier: MIT
 *
 * Kernel glue: data leaving a peer (fetch-back, give-back, release, remote map, page-level fetch events) (uvm_huvm_internal.h lists the glue's files; locking: uvm_huvm.c's file comment).
 */
#include "uvm_huvm_internal.h"

/* ---- Fetch-back and give-back on the way out of a peer ---- */

// Harvested data has left the peer (fetched back to its owner, or moved elsewhere): free the peer's
// chunk now so that lent memory returns at once instead of waiting on the peer's LRU.
// LOCKING: the block lock is held; the VA space lock is held by make_resident's callers (not eviction).
static void release_peer_chunk(uvm_va_block_t *va_block, uvm_gpu_id_t peer_id, uvm_processor_id_t dst_id)
{
    uvm_va_space_t *va_space = uvm_va_block_get_va_space(va_block);
    uvm_va_block_gpu_state_t *peer_state = uvm_va_block_gpu_state_get(va_block, peer_id);
    uvm_gpu_t *peer = uvm_huvm_va_space_get_gpu(va_space, peer_id);
    uvm_gpu_chunk_t *chunk;
    NvU32 owner = HUVM_SLOT_NONE, holder, dst = HUVM_SLOT_NONE;
    bool harvested;

    uvm_processor_mask_clear(&va_block->harvested_on, peer_id);
    if (uvm_processor_mask_empty(&va_block->harvested_on))
        va_block->huvm_remote_mapped = false;

    if (!peer_state || !peer_state->chunks || uvm_va_block_size(va_block) != UVM_CHUNK_SIZE_MAX)
        return;

    chunk = peer_state->chunks[0];
    if (!chunk)
        return;

    harvested = uvm_huvm_chunk_harvest_info(peer, chunk, &owner);

    uvm_mmu_chunk_unmap(chunk, &va_block->tracker);
    uvm_pmm_gpu_free(&peer->pmm, chunk, &va_block->tracker);
    peer_state->chunks[0] = NULL;

    va_block->huvm_fetched_ns = NV_GETTIME();

    if (!harvested || owner >= HUVM_MAX_GPUS)
        return;

    read_lock(&g_uvm_huvm.lock);
    holder = uvm_huvm_slot_of_gpu_locked(peer);
    if (UVM_ID_IS_GPU(dst_id))
        dst = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_get_gpu(va_space, dst_id));
    read_unlock(&g_uvm_huvm.lock);

    if (holder == HUVM_SLOT_NONE || holder == owner)
        return;

    if (dst == owner) {
        // Its pages were counted as they were copied (migration_event()): the chunk and the gauges now.
        huvm_account_fetch(&g_uvm_huvm.core, owner, holder, HUVM_FETCHED_RELEASED, UVM_CHUNK_SIZE_MAX, va_block->start);
        atomic64_inc(&va_space->huvm.fetch_from_peer);
    }
    else {
        // Moved to host or to a third GPU by a migration: the lender got its memory back all the same.
        huvm_account_giveback(&g_uvm_huvm.core, holder, owner, UVM_CHUNK_SIZE_MAX, va_block->start);
    }
    uvm_huvm_va_space_harvested_sub(va_space);
}

// Every copy into a GPU that brings data back: pages of a chunk harvested on a peer copied to the chunk's
// owner (a fetch-back, whole or partial: the peer keeps the chunk until its last page leaves,
// release_peer_chunk()), and pages copied from host (a host fetch). Evictions, pre-evictions and huvm's own
// prefetches are accounted where they are decided; copies between other places are not huvm's business.
// nvidia-uvm notifies one event per run of contiguous pages (block_copy_resident_pages_between()).
// LOCKING: UVM_PERF_EVENT_MIGRATION: the block lock is held, the VA space lock maybe not (evictions; those
// return first); the VA space's perf events lock is held for read. Takes the PMM list lock of the source
// GPU and g_uvm_huvm.lock (read), leaves.
static void migration_event_handle(uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    uvm_va_block_t *va_block = event_data->migration.block;
    uvm_processor_id_t src_id = event_data->migration.src;
    uvm_processor_id_t dst_id = event_data->migration.dst;
    uvm_va_space_t *va_space;
    uvm_va_block_gpu_state_t *src_state;
    uvm_gpu_t *src_gpu = NULL;
    NvU32 dst, src = HUVM_DEST_HOST, owner = HUVM_SLOT_NONE;

    UVM_ASSERT(event_id == UVM_PERF_EVENT_MIGRATION);
    uvm_assert_mutex_locked(&va_block->lock);

    // A block huvm prefetched leaving its place by eviction (from the prefetcher or from the peer it went to)
    // before the GPU touched it: the prefetch was not used.
    if (event_data->migration.cause == UVM_MAKE_RESIDENT_CAUSE_EVICTION && va_block->huvm_prefetched_for != 0)
        uvm_huvm_prefetch_feedback(va_block, false);

    // (580 also notifies CPU-to-CPU migrations between NUMA nodes: a CPU destination returns here.)
    if (!g_uvm_huvm.initialized || event_data->migration.cause == UVM_MAKE_RESIDENT_CAUSE_EVICTION ||
        !UVM_ID_IS_GPU(dst_id) || uvm_va_block_is_hmm(va_block))
        return;

    // huvm's prefetches from host run in its worker and are accounted by prefetch_block(); its two-stage
    // fetch-backs from peers (fetch_back_block()) are fetches like any other.
    if (UVM_ID_IS_CPU(src_id) && g_uvm_huvm.prefetch_q_running && current == g_uvm_huvm.prefetch_q.q_kthread)
        return;

    va_space = uvm_va_block_get_va_space(va_block);
    if (UVM_ID_IS_GPU(src_id)) {
        if (!uvm_processor_mask_test(&va_block->harvested_on, src_id))
            return;
        src_state = uvm_va_block_gpu_state_get(va_block, src_id);
        src_gpu = uvm_huvm_va_space_get_gpu(va_space, src_id);
        if (!src_state || !src_state->chunks || !src_state->chunks[0] ||
            !uvm_huvm_chunk_harvest_info(src_gpu, src_state->chunks[0], &owner))
            return;
    }

    read_lock(&g_uvm_huvm.lock);
    dst = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_get_gpu(va_space, dst_id));
    if (src_gpu)
        src = uvm_huvm_slot_of_gpu_locked(src_gpu);
    read_unlock(&g_uvm_huvm.lock);

    // (HUVM_SLOT_NONE and HUVM_DEST_HOST are the same number: a GPU source is checked through src_gpu.)
    if (dst == HUVM_SLOT_NONE || (src_gpu && (src == HUVM_SLOT_NONE || owner != dst || src == dst)))
        return;

    huvm_account_fetch(&g_uvm_huvm.core,
                       dst,
                       src,
                       HUVM_FETCHED_PAGES,
                       event_data->migration.bytes,
                       event_data->migration.address);
    if (!src_gpu && event_data->migration.bytes >= UVM_CHUNK_SIZE_MAX)
        atomic64_add(event_data->migration.bytes / UVM_CHUNK_SIZE_MAX, &va_space->huvm.fetch_from_host);
}

// A GPU fault on a block huvm prefetched for that GPU (resident but not yet mapped there, or still on the
// peer it was prefetched to): the prefetch was used.
// LOCKING: UVM_PERF_EVENT_FAULT: the VA space lock is held (at least for read) and the block lock; the VA
// space's perf events lock for read. Takes g_uvm_huvm.lock (read), then the slot's feedback_lock.
static void fault_event_handle(uvm_va_space_t *va_space, uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    uvm_va_block_t *va_block = event_data->fault.block;
    uvm_processor_id_t id = event_data->fault.proc_id;
    NvU32 slot;

    UVM_ASSERT(event_id == UVM_PERF_EVENT_FAULT);

    if (!va_block || va_block->huvm_prefetched_for == 0 || !UVM_ID_IS_GPU(id))
        return;
    uvm_assert_mutex_locked(&va_block->lock);
    uvm_assert_rwsem_locked(&va_space->lock);

    read_lock(&g_uvm_huvm.lock);
    slot = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_get_gpu(va_space, id));
    read_unlock(&g_uvm_huvm.lock);

    if (slot != HUVM_SLOT_NONE && va_block->huvm_prefetched_for == slot + 1)
        uvm_huvm_prefetch_feedback(va_block, true);
}

// A block huvm prefetched freed before the GPU touched it: the prefetch was not used.
// LOCKING: UVM_PERF_EVENT_BLOCK_DESTROY: the block lock is held, or nothing references the block any more.
static void block_destroy_event_handle(uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    UVM_ASSERT(event_id == UVM_PERF_EVENT_BLOCK_DESTROY);

    if (event_data->block_destroy.block && event_data->block_destroy.block->huvm_prefetched_for != 0)
        uvm_huvm_prefetch_feedback(event_data->block_destroy.block, false);
}

// The callbacks as each branch calls them: 580 passes the VA space (and dropped fault.space from the event
// data); 535 does not.
#if HUVM_NV_BRANCH >= 580
// LOCKING: as migration_event_handle().
static void migration_event(uvm_va_space_t *va_space, uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    migration_event_handle(event_id, event_data);
}

// LOCKING: as fault_event_handle().
static void fault_event(uvm_va_space_t *va_space, uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    fault_event_handle(va_space, event_id, event_data);
}

// LOCKING: as block_destroy_event_handle().
static void block_destroy_event(uvm_va_space_t *va_space, uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    block_destroy_event_handle(event_id, event_data);
}
#else
// LOCKING: as migration_event_handle().
static void migration_event(uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    migration_event_handle(event_id, event_data);
}

// LOCKING: as fault_event_handle().
static void fault_event(uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    fault_event_handle(event_data->fault.space, event_id, event_data);
}

// LOCKING: as block_destroy_event_handle().
static void block_destroy_event(uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
{
    block_destroy_event_handle(event_id, event_data);
}
#endif

// LOCKING: the VA space lock is held for write (uvm_va_space_create(), after uvm_perf_heuristics_load());
// takes the VA space's perf events lock for write, as the heuristics do. On failure the VA space is destroyed
// with its events (callbacks registered so far included).
NV_STATUS uvm_huvm_va_space_events_load(uvm_va_space_t *va_space)
{
    NV_STATUS status;

    uvm_assert_rwsem_locked_write(&va_space->lock);

    if (!g_uvm_huvm.initialized)
        return NV_OK;

    status = uvm_perf_register_event_callback(&va_space->perf_events, UVM_PERF_EVENT_MIGRATION, migration_event);
    if (status != NV_OK)
        return status;
    status = uvm_perf_register_event_callback(&va_space->perf_events, UVM_PERF_EVENT_FAULT, fault_event);
    if (status != NV_OK)
        return status;
    return uvm_perf_register_event_callback(&va_space->perf_events, UVM_PERF_EVENT_BLOCK_DESTROY, block_destroy_event);
}

// LOCKING: the block lock is held (end of uvm_va_block_make_resident_finish()).
void uvm_huvm_make_resident_finish(uvm_va_block_t *va_block, uvm_va_block_context_t *block_context)
{
    uvm_gpu_id_t id;

    uvm_assert_mutex_locked(&va_block->lock);

    // Evictions free their chunks themselves (uvm_va_block_evict_chunks()) and run without the VA space
    // lock; HMM blocks are never harvested.
    if (block_context->make_resident.cause == UVM_MAKE_RESIDENT_CAUSE_EVICTION || uvm_va_block_is_hmm(va_block))
        return;

    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        if (!uvm_processor_mask_test(&va_block->resident, id))
            release_peer_chunk(va_block, id, block_context->make_resident.dest_id);
    }
}

// The block's state on gpu is destroyed (range free, munmap, VA space teardown, GPU unregister): a chunk
// holding another GPU's data is about to be freed with it, so that data no longer sits on gpu. Fetch-back
// and give-back have already cleared harvested_on and taken the chunk, so they are never counted twice.
// LOCKING: the block lock is held (block_destroy_gpu_state(), before the chunks are freed); takes the PMM
// list lock and g_uvm_huvm.lock (read), both leaves.
void uvm_huvm_block_destroy_gpu_state(uvm_va_block_t *va_block, uvm_gpu_t *gpu)
{
    uvm_va_block_gpu_state_t *gpu_state = uvm_va_block_gpu_state_get(va_block, gpu->id);

    uvm_assert_mutex_locked(&va_block->lock);

    if (!uvm_processor_mask_test(&va_block->harvested_on, gpu->id))
        return;

    uvm_processor_mask_clear(&va_block->harvested_on, gpu->id);
    if (uvm_processor_mask_empty(&va_block->harvested_on))
        va_block->huvm_remote_mapped = false;

    if (gpu_state && gpu_state->chunks && uvm_va_block_size(va_block) == UVM_CHUNK_SIZE_MAX && gpu_state->chunks[0])
        uvm_huvm_account_release_chunk(va_block, gpu, gpu_state->chunks[0]);
}

// The give-back before a split failed: the block's pages on the peers stay there as the block's ordinary
// residency on those GPUs (UVM splits their chunks as any GPU's), and stop being harvested data: gauges
// released (huvm_account_release(): no data moved), harvested_on and the chunks' is_harvested cleared.
// LOCKING: the block lock is held; takes the peers' PMM list locks and g_uvm_huvm.lock (read), both leaves.
static void split_unharvest(uvm_va_block_t *va_block)
{
    uvm_va_space_t *va_space = uvm_va_block_get_va_space(va_block);
    uvm_gpu_id_t id;

    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        uvm_va_block_gpu_state_t *state = uvm_va_block_gpu_state_get(va_block, id);
        uvm_gpu_t *peer = uvm_huvm_va_space_get_gpu(va_space, id);
        uvm_gpu_chunk_t *chunk = NULL;

        if (state && state->chunks && uvm_va_block_size(va_block) == UVM_CHUNK_SIZE_MAX)
            chunk = state->chunks[0];
        if (!chunk || !peer)
            continue;

        uvm_huvm_account_release_chunk(va_block, peer, chunk);
        uvm_huvm_chunk_clear_harvested(peer, chunk);
    }

    uvm_processor_mask_zero(&va_block->harvested_on);
    va_block->huvm_remote_mapped = false;
}

// LOCKING: the block lock and the VA space lock (write) are held (uvm_va_block_split()); takes PMM locks of
// the CPU and the peers, and g_uvm_huvm.lock (read) through the release of the peers' chunks.
// Never fails the split: on munmap a failed split makes UVM destroy the whole range (uvm_vm_open_failure()),
// so a give-back that cannot be done (no CPU memory) leaves the pages on the peers, no longer harvested.
NV_STATUS uvm_huvm_block_split_prepare(uvm_va_block_t *va_block)
{
    uvm_va_block_region_t region = uvm_va_block_region_from_block(va_block);
    uvm_va_block_context_t *block_context;
    uvm_page_mask_t *pages;
    uvm_gpu_id_t id;
    NV_STATUS status = NV_OK;

    uvm_assert_mutex_locked(&va_block->lock);

    if (uvm_processor_mask_empty(&va_block->harvested_on) || uvm_va_block_is_hmm(va_block))
        return NV_OK;

    block_context = uvm_va_block_context_alloc(NULL);
    if (!block_context) {
        split_unharvest(va_block);
        return NV_OK;
    }

    pages = &block_context->caller_page_mask;
    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        uvm_page_mask_copy(pages, uvm_huvm_resident_mask_get(va_block, id));
        if (uvm_page_mask_empty(pages))
            continue;

        // make_resident_finish() (uvm_huvm_make_resident_finish()) frees the peer's chunk and counts the
        // give-back, as for any migration of harvested data away from its owner.
        status = uvm_va_block_make_resident(va_block,
                                            NULL,
                                            block_context,
                                            UVM_ID_CPU,
                                            region,
                                            pages,
                                            NULL,
                                            UVM_MAKE_RESIDENT_CAUSE_API_MIGRATE);
        if (status != NV_OK)
            break;
    }

    // Chunks that held nothing any more (all pages already fetched back) stop counting too.
    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        if (!uvm_processor_mask_test(&va_block->resident, id))
            release_peer_chunk(va_block, id, UVM_ID_CPU);
    }

    // What could not go to the CPU stays on its peer, as the block's own residency there.
    if (status != NV_OK)
        split_unharvest(va_block);

    uvm_va_block_context_free(block_context);
    return NV_OK;
}

// LOCKING: the block lock and the VA space lock (read) are held; takes g_uvm_huvm.lock for read.
bool uvm_huvm_fetch_remote(uvm_va_block_t *va_block, uvm_processor_id_t processor_id, uvm_processor_id_t resident_id)
{
    uvm_va_space_t *va_space;
    NvU32 owner, holder;
    bool remote = false;

    uvm_assert_mutex_locked(&va_block->lock);

    if (!huvm_enabled() || !UVM_ID_IS_GPU(processor_id) || !UVM_ID_IS_GPU(resident_id) ||
        uvm_id_equal(processor_id, resident_id) || !uvm_processor_mask_test(&va_block->harvested_on, resident_id))
        return false;

    // A remote mapping needs direct access from the faulting GPU to the peer's memory.
    va_space = uvm_va_block_get_va_space(va_block);
    if (!uvm_processor_mask_test(&va_space->accessible_from[uvm_id_value(resident_id)], processor_id))
        return false;

    read_lock(&g_uvm_huvm.lock);
    owner = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_get_gpu(va_space, processor_id));
    holder = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_get_gpu(va_space, resident_id));
    if (owner != HUVM_SLOT_NONE && holder != HUVM_SLOT_NONE && owner != holder)
        remote = huvm_decide_fetch(&g_uvm_huvm.core, owner, holder) == HUVM_FETCH_REMOTE_MAP;
    read_unlock(&g_uvm_huvm.lock);

    // Counted once per harvested block (residency is chosen page by page).
    if (remote && !va_block->huvm_remote_mapped) {
        va_block->huvm_remote_mapped = true;
        huvm_account_fetch(&g_uvm_huvm.core,
                           owner,
                           holder,
                           HUVM_FETCHED_REMOTE_MAP,
                           UVM_CHUNK_SIZE_MAX,
                           va_block->start);
    }

    return remote;
}
