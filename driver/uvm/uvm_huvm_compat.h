/*
 * huvm: peer-GPU eviction tier for nvidia-uvm. SPDX-License-Identifier: MIT
 *
 * What the glue needs from nvidia-uvm, spelled once per upstream branch. HUVM_NV_BRANCH is the major of
 * NV_VERSION_STRING (535, 580), set by huvm.Kbuild from the tree's Kbuild; the series for each branch is
 * patches/<version>/. Only the glue includes this header (through uvm_huvm_internal.h); the patched
 * upstream files call the version-neutral hooks of uvm_huvm.h.
 *
 *   what                                535                                   580 (changed in)
 *   UUID compare                        uvm_processor_uuid_eq                 uvm_uuid_eq (550)
 *   Confidential Computing on           uvm_conf_computing_mode_enabled(gpu)  g_uvm_global.conf_computing_enabled (550)
 *   GPU can evict                       uvm_gpu_supports_eviction(gpu)        uvm_parent_gpu_supports_eviction (550)
 *   residency mask                      (block, id)                           (block, id, nid), per NUMA node (550)
 *   a VA space's GPU                    va_space->registered_gpus_table       uvm_gpu_get(id) + registered_gpus (570)
 *   a block's policy                    va_range                              managed_range (570)
 *   READ_ONCE                           UVM_READ_ONCE                         READ_ONCE (570)
 *   perf event callbacks                (event_id, data)                      (va_space, event_id, data) (580)
 */
#ifndef __UVM_HUVM_COMPAT_H__
#define __UVM_HUVM_COMPAT_H__

#include "uvm_global.h"
#include "uvm_gpu.h"
#include "uvm_va_block.h"
#include "uvm_va_space.h"
#include "uvm_va_range.h"

#if !defined(HUVM_NV_BRANCH)
#error "HUVM_NV_BRANCH is not set (huvm.Kbuild derives it from the tree's NV_VERSION_STRING)"
#endif

#if HUVM_NV_BRANCH != 535 && HUVM_NV_BRANCH != 580
#error "huvm's glue knows the 535 and 580 branches of nvidia-uvm only"
#endif

#if HUVM_NV_BRANCH >= 580

#define uvm_huvm_uuid_eq(a, b)              uvm_uuid_eq((a), (b))
#define uvm_huvm_cc_enabled(gpu)            (g_uvm_global.conf_computing_enabled)
#define uvm_huvm_gpu_supports_eviction(gpu) uvm_parent_gpu_supports_eviction((gpu)->parent)
#define UVM_HUVM_READ_ONCE(x)               READ_ONCE(x)

// CPU residency is per NUMA node; huvm's "resident on the CPU" means on any node (the union).
#define uvm_huvm_resident_mask_get(block, id) uvm_va_block_resident_mask_get((block), (id), NUMA_NO_NODE)

// The block's policy; huvm only sees managed blocks (HMM blocks are skipped before this is asked).
static inline uvm_va_policy_t *uvm_huvm_block_policy(uvm_va_block_t *va_block)
{
    UVM_ASSERT(!uvm_va_block_is_hmm(va_block));
    return &va_block->managed_range->policy;
}

// gpu_id's GPU if it is registered in va_space, else NULL.
// LOCKING: as for the VA space's registered_gpus mask (see the callers).
static inline uvm_gpu_t *uvm_huvm_va_space_gpu_or_null(uvm_va_space_t *va_space, uvm_gpu_id_t gpu_id)
{
    return uvm_processor_mask_test(&va_space->registered_gpus, gpu_id) ? uvm_gpu_get(gpu_id) : NULL;
}

#else // 535

#define uvm_huvm_uuid_eq(a, b)                uvm_processor_uuid_eq((a), (b))
#define uvm_huvm_cc_enabled(gpu)              uvm_conf_computing_mode_enabled(gpu)
#define uvm_huvm_gpu_supports_eviction(gpu)   uvm_gpu_supports_eviction(gpu)
#define UVM_HUVM_READ_ONCE(x)                 UVM_READ_ONCE(x)
#define uvm_huvm_resident_mask_get(block, id) uvm_va_block_resident_mask_get((block), (id))

static inline uvm_va_policy_t *uvm_huvm_block_policy(uvm_va_block_t *va_block)
{
    return uvm_va_range_get_policy(va_block->va_range);
}

static inline uvm_gpu_t *uvm_huvm_va_space_gpu_or_null(uvm_va_space_t *va_space, uvm_gpu_id_t gpu_id)
{
    return va_space->registered_gpus_table[uvm_id_gpu_index(gpu_id)];
}

#endif

// gpu_id's GPU, which must be registered in va_space (as upstream's uvm_va_space_get_gpu() asserts).
static inline uvm_gpu_t *uvm_huvm_va_space_get_gpu(uvm_va_space_t *va_space, uvm_gpu_id_t gpu_id)
{
    uvm_gpu_t *gpu = uvm_huvm_va_space_gpu_or_null(va_space, gpu_id);

    UVM_ASSERT(uvm_processor_mask_test(&va_space->registered_gpus, gpu_id));
    UVM_ASSERT(gpu);

    return gpu;
}

#endif // __UVM_HUVM_COMPAT_H__
