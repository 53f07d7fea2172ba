/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03.
 * SPDX-License-Identifier: MIT
 *
 * The hooks the patched nvidia-uvm files call (patches/535.261.03/0002-0006). Each hook gathers facts,
 * asks the portable core (driver/core/huvm_core.h) for the decision, applies it with UVM's own primitives
 * and reports back through the core's accounting. No policy lives here; see docs/driver.md for every hook,
 * its lock-order argument and its failure paths.
 *
 * This header is included by uvm_va_space.h and uvm_va_block.h, so it only declares: no core or
 * tracepoint headers are pulled in here.
 */
#ifndef __UVM_HUVM_H__
#define __UVM_HUVM_H__

#include "uvm_forward_decl.h"
#include "uvm_linux.h"
#include "uvm_processors.h"
#include "uvm_va_block_types.h"

// Flags of uvm_va_block_evict_chunks(): the eviction context, as PMM knows it. They equal the core's
// HUVM_EVICT_FLAG_* (checked in uvm_huvm.c).
#define UVM_HUVM_EVICT_PMA_CONTEXT 0x1
#define UVM_HUVM_EVICT_PREEVICT    0x4

// Per-VA-space state, embedded in uvm_va_space_t. Counters are atomic; the rest is written once at
// creation.
typedef struct {
    NvU64 id;
    NvU32 pid;
    NvU32 uid;
    char comm[16];
    atomic64_t evict_to_peer;
    atomic64_t evict_to_host;
    atomic64_t fetch_from_peer;
    atomic64_t fetch_from_host;
    atomic64_t prefetch;
    atomic64_t harvested_bytes;
} uvm_huvm_va_space_t;

// Module load and unload. uvm_huvm_check_nvidia_version() comes first in uvm_init(): anything but NV_OK
// (nvidia.ko is of another version; one kernel log line names both) fails the load.
// LOCKING: none held; called from uvm_init()/uvm_exit() only.
NV_STATUS uvm_huvm_check_nvidia_version(void);
void uvm_huvm_init(void);
void uvm_huvm_exit(void);

// The control ioctls (HUVM_IOCTL_*). uvm_huvm_is_ioctl() is true for huvm's command numbers.
// LOCKING: none held (uvm_ioctl()); takes the VA spaces list lock and the huvm lock itself.
bool uvm_huvm_is_ioctl(unsigned int cmd);
long uvm_huvm_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);

// GPU lifetime (uvm_gpu.c): register a GPU with the core at the end of init_gpu(), its links when peer
// access is initialised, and remove it (stopping its pre-eviction worker) at the start of deinit_gpu().
// uvm_huvm_add_peer() takes the link as scalars, the same on every branch: uvm_link_type is UVM's
// uvm_gpu_link_type_t (535: in uvm_gpu_peer_t; 570+: in the parents' uvm_parent_gpu_peer_t), mapped to
// HUVM_LINK_* by uvm_huvm_link_type().
// LOCKING: the global lock is held by the callers.
void uvm_huvm_add_gpu(uvm_gpu_t *gpu);
void uvm_huvm_add_peer(uvm_gpu_t *gpu0, uvm_gpu_t *gpu1, NvU32 uvm_link_type, NvU32 mbyte_per_s);
void uvm_huvm_remove_gpu(uvm_gpu_t *gpu);

// VA space lifetime (uvm_va_space.c). destroy flushes huvm work that may reference the VA space.
// LOCKING: none held.
void uvm_huvm_va_space_init(uvm_va_space_t *va_space);
void uvm_huvm_va_space_destroy(uvm_va_space_t *va_space);

// Registers huvm's UVM_PERF_EVENT_MIGRATION callback on the VA space (copies that bring data back to a GPU:
// page-level fetch-backs from peers and fetches from host). Destroying the VA space's perf events frees the
// registration.
// LOCKING: the VA space lock is held for write (uvm_va_space_create(), after uvm_perf_heuristics_load());
// takes the VA space's perf events lock for write.
NV_STATUS uvm_huvm_va_space_events_load(uvm_va_space_t *va_space);

// Eviction (uvm_va_block_evict_chunks()): move pages_to_evict of root_chunk on gpu to the destination
// the core picks (a peer GPU or the CPU), always with cause EVICTION; falls back to the CPU on any
// failure of the peer path. Replaces upstream's single uvm_va_block_make_resident(UVM_ID_CPU) call.
// LOCKING: the block lock is held; the VA space lock and mmap_lock are not.
NV_STATUS uvm_huvm_evict_make_resident(uvm_va_block_t *va_block,
                                       uvm_gpu_t *gpu,
                                       uvm_gpu_chunk_t *root_chunk,
                                       uvm_va_block_context_t *block_context,
                                       uvm_page_mask_t *pages_to_evict,
                                       NvU32 evict_flags);

// End of a make_resident operation: return peers' memory once harvested data has left it.
// LOCKING: the block lock is held.
void uvm_huvm_make_resident_finish(uvm_va_block_t *va_block, uvm_va_block_context_t *block_context);

// The block's GPU state on gpu is about to be destroyed with its chunks: clear harvested_on for gpu and
// release the gauges of another GPU's data held in gpu's chunk (huvm_account_release()).
// LOCKING: the block lock is held.
void uvm_huvm_block_destroy_gpu_state(uvm_va_block_t *va_block, uvm_gpu_t *gpu);

// The block is about to be split (uvm_va_block_split(), the VA space lock held for write): its pages on
// peers that hold them for another GPU go to the CPU first (a give-back: the peers' chunks are freed and
// accounted), so that no piece of a split block is harvested data. Always NV_OK: pages the CPU has no memory
// for stay on their peer as the block's own residency there, no longer harvested (a failed split would make
// UVM destroy the whole VA range on munmap).
// LOCKING: the block lock and the VA space lock (write) are held.
NV_STATUS uvm_huvm_block_split_prepare(uvm_va_block_t *va_block);

// After an evicting allocation on gpu, or RM's PMA eviction of gpu's memory (a cudaMalloc): gpu is under
// memory pressure; its worker gives guests' chunks back and restores the free reserve.
// LOCKING: any but g_uvm_huvm.lock; only schedules work.
void uvm_huvm_kick_preevict(uvm_gpu_t *gpu);

// After an allocation of size bytes for a VA block on gpu: counted into the GPU's allocation burst of the
// current fault batch; if gpu lends memory and its free memory is now below its lend reserve, its worker
// gives guests' chunks back (the core's give-back plan) before its own work must evict.
// LOCKING: the block lock may be held; takes g_uvm_huvm.lock for read and PMM's list lock; schedules work.
void uvm_huvm_note_alloc(uvm_gpu_t *gpu, NvU64 size);

// Prefetch hint: true if a fault migrating to new_residency should fetch the whole block back from the
// peers holding it (the core allows it).
// LOCKING: the block lock is held.
bool uvm_huvm_prefetch_whole_block(uvm_va_block_t *va_block, uvm_processor_id_t new_residency);

// Residency choice for a fault of processor_id on a page whose closest copy is on resident_id: true if
// the page is harvested there and the core says to map it remotely (HUVM_FETCH_REMOTE_MAP) instead of
// fetching it back.
// LOCKING: the block lock and the VA space lock (read) are held (uvm_va_block_select_residency()).
bool uvm_huvm_fetch_remote(uvm_va_block_t *va_block, uvm_processor_id_t processor_id, uvm_processor_id_t resident_id);

// A replayable fault batch of gpu was serviced: fault accounting, and a multi-path prefetch request
// beyond the batch's last fault (va_space, address), served later by huvm's prefetch worker.
// LOCKING: called from the fault bottom half with no locks held, while va_space is still valid.
void uvm_huvm_fault_batch_done(uvm_gpu_t *gpu, uvm_va_space_t *va_space, NvU64 address, NvU32 num_faults);

#endif // __UVM_HUVM_H__
