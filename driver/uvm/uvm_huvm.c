/*
 * huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03.
 * SPDX-License-Identifier: MIT
 *
 * Kernel glue: the hooks declared in uvm_huvm.h. Every decision is the portable core's
 * (driver/core/huvm_core.h); this file only gathers facts (which peers the chunk's VA space can use, how
 * much memory is free), applies the core's answer with UVM's own primitives, and reports what happened
 * through the core's accounting (which fires the huvm tracepoints). docs/driver.md describes each hook.
 *
 * Locking (see also docs/driver.md):
 * - g_uvm_huvm.lock is an rwlock_t below every UVM lock but PMM's list lock: nothing sleeps while it is
 *   held, and the only lock taken under it is a PMM list lock (a leaf spinlock), to count UVM's free root
 *   chunks (gpu_free_bytes()). Readers: decisions on the eviction, pre-eviction and prefetch paths. Writers:
 *   the control ioctls (huvm_dispatch), GPU add/remove and link registration.
 * - Counters are updated by the core with atomics, without the lock.
 * - The VA space masks read on the eviction path without the VA space lock follow the argument in
 *   uvm_va_block_evict_chunks() (a GPU leaving a VA space sets gpu_unregister_in_progress before it
 *   walks the blocks, and the walk takes the block lock we hold).
 */

// The tracepoints (subsystem huvm) are defined here; the core fires them through HUVM_TRACE.
#define CREATE_TRACE_POINTS
#include "uvm_huvm_trace.h"

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

#include "huvm_core.h"

#include <linux/capability.h>
#include <linux/pci.h>
#include <linux/cred.h>
#include <linux/sched.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>

static char *uvm_huvm_preset = "stock";
module_param(uvm_huvm_preset, charp, S_IRUGO);
MODULE_PARM_DESC(uvm_huvm_preset,
                 "huvm policy preset at load time: stock (default: host-only eviction, UVM unchanged), huvm-atc22 or "
                 "huvm. The control ioctls change the policy at run time.");

static int uvm_huvm_enable = 1;
module_param(uvm_huvm_enable, int, S_IRUGO);
MODULE_PARM_DESC(uvm_huvm_enable,
                 "1 (default): the huvm hooks are active. 0: every hook is a no-op (stock UVM behaviour); "
                 "the control ioctls still answer.");

_Static_assert(UVM_HUVM_EVICT_PMA_CONTEXT == HUVM_EVICT_FLAG_PMA_CONTEXT, "evict flags");
_Static_assert(UVM_HUVM_EVICT_PREEVICT == HUVM_EVICT_FLAG_PREEVICT, "evict flags");
_Static_assert(UVM_GPU_LINK_PCIE == HUVM_LINK_PCIE && UVM_GPU_LINK_NVLINK_1 == HUVM_LINK_NVLINK_1 &&
               UVM_GPU_LINK_NVLINK_4 == HUVM_LINK_NVLINK_4 && UVM_GPU_LINK_C2C == HUVM_LINK_C2C, "link types");
_Static_assert(UVM_CHUNK_SIZE_MAX == HUVM_CHUNK_SIZE, "huvm moves 2 MiB root chunks");

#define HUVM_SLOT_NONE HUVM_MAX_GPUS

typedef struct
{
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

    // The recent peak of this GPU's own memory use (not guests'), for the core's lend admission; updated
    // whenever the decisions gather the node's state. Protected by peak_lock (a leaf spinlock).
    spinlock_t peak_lock;
    huvm_peak_t own_peak;

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

static struct
{
    rwlock_t lock;
    huvm_core_t core;
    uvm_huvm_slot_t slots[HUVM_MAX_GPUS];
    atomic64_t next_va_space_id;

    // Multi-path prefetch worker, one for the module.
    nv_kthread_q_t prefetch_q;
    bool prefetch_q_running;

    bool initialized;
} g_uvm_huvm;

// LOCKING: none (module parameter and a flag set once at load).
static bool huvm_enabled(void)
{
    return uvm_huvm_enable && g_uvm_huvm.initialized;
}

// LOCKING: none (a plain read of a word written under g_uvm_huvm.lock).
u32 uvm_huvm_trace_uvm_id(u32 slot)
{
    return slot < HUVM_MAX_GPUS ? READ_ONCE(g_uvm_huvm.slots[slot].uvm_id) : uvm_id_value(UVM_ID_CPU);
}

// LOCKING: g_uvm_huvm.lock held (read or write).
static NvU32 slot_of_gpu_locked(const uvm_gpu_t *gpu)
{
    NvU32 i;

    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        if (gpu && g_uvm_huvm.slots[i].gpu == gpu)
            return i;
    }

    return HUVM_SLOT_NONE;
}

// UVM takes root chunks from PMA in batches (uvm_perf_pma_batch_nonpinned_order: 64 chunks) and keeps the
// ones it has not used on its own free lists; they are free memory all the same. At most this many are
// counted (1 GiB), which bounds the walk under PMM's list lock.
#define HUVM_FREE_ROOT_CHUNKS_COUNTED 512

// Free memory of gpu as the decisions see it: PMA's free 2 MiB pages (read lock-free) plus the free root
// chunks on UVM's own lists.
// LOCKING: takes gpu's PMM list lock (a leaf spinlock; the only lock ever taken under g_uvm_huvm.lock).
static NvU64 gpu_free_bytes(uvm_gpu_t *gpu)
{
    if (!gpu->pmm.pma_stats)
        return 0;

    return UVM_READ_ONCE(gpu->pmm.pma_stats->numFreePages2m) * UVM_CHUNK_SIZE_MAX +
           uvm_pmm_gpu_free_user_root_bytes(&gpu->pmm, HUVM_FREE_ROOT_CHUNKS_COUNTED);
}

// GPU i's own memory use now (used less what it lends) folded into its recent peak; returns the peak.
// LOCKING: g_uvm_huvm.lock held (read or write); takes the slot's peak_lock (leaf).
static NvU64 own_peak_update(NvU32 i, NvU64 free_bytes)
{
    uvm_huvm_slot_t *slot = &g_uvm_huvm.slots[i];
    NvU64 mem = g_uvm_huvm.core.gpus[i].memory_bytes;
    NvU64 used = free_bytes < mem ? mem - free_bytes : 0;
    NvU64 lent = huvm_atomic64_read(&g_uvm_huvm.core.counters[i].lent_bytes);
    NvU64 peak;

    spin_lock(&slot->peak_lock);
    huvm_peak_update(&slot->own_peak, used > lent ? used - lent : 0, NV_GETTIME());
    peak = slot->own_peak.bytes;
    spin_unlock(&slot->peak_lock);

    return peak;
}

// LOCKING: g_uvm_huvm.lock held (read or write).
static void gather_state_locked(huvm_gpu_state_t *state)
{
    NvU32 i;

    memset(state, 0, sizeof(*state) * HUVM_MAX_GPUS);
    for (i = 0; i < g_uvm_huvm.core.gpu_count; i++) {
        uvm_huvm_slot_t *slot = &g_uvm_huvm.slots[i];

        if (!slot->gpu)
            continue;

        state[i].free_bytes = gpu_free_bytes(slot->gpu);
        state[i].last_evict_ns = atomic64_read(&slot->last_evict_ns);
        state[i].own_peak_bytes = own_peak_update(i, state[i].free_bytes);
        state[i].last_pressure_ns = atomic64_read(&slot->last_pressure_ns);
        state[i].burst_chunks = atomic64_read(&slot->burst_chunks);
    }
}

// LOCKING: the block lock is held.
static uvm_va_space_t *block_va_space(uvm_va_block_t *va_block)
{
    return uvm_va_block_get_va_space_maybe_dead(va_block);
}

/* ---- Control surface ---- */

// LOCKING: g_uvm_huvm.lock held for write (huvm_dispatch, GET_INFO); reads PMA statistics lock-free.
static void ops_refresh_free(void *ctx, huvm_core_t *core)
{
    NvU32 i;

    for (i = 0; i < core->gpu_count; i++) {
        uvm_gpu_t *gpu = g_uvm_huvm.slots[i].gpu;

        if (gpu)
            core->gpus[i].free_bytes = min(gpu_free_bytes(gpu), core->gpus[i].memory_bytes);
    }
}

// LOCKING: the VA space's huvm fields are written once at creation; registered GPUs are read without the
// VA space lock (a snapshot); g_uvm_huvm.lock is taken for read (leaf) under the VA spaces list lock.
static void fill_va_space_info(uvm_va_space_t *va_space, huvm_va_space_info_t *info)
{
    uvm_gpu_id_t id;

    memset(info, 0, sizeof(*info));
    info->id = va_space->huvm.id;
    info->pid = va_space->huvm.pid;
    info->uid = va_space->huvm.uid;
    memcpy(info->comm, va_space->huvm.comm, sizeof(info->comm));
    info->evict_to_peer = atomic64_read(&va_space->huvm.evict_to_peer);
    info->evict_to_host = atomic64_read(&va_space->huvm.evict_to_host);
    info->fetch_from_peer = atomic64_read(&va_space->huvm.fetch_from_peer);
    info->fetch_from_host = atomic64_read(&va_space->huvm.fetch_from_host);
    info->prefetch = atomic64_read(&va_space->huvm.prefetch);
    info->harvested_bytes = atomic64_read(&va_space->huvm.harvested_bytes);

    read_lock(&g_uvm_huvm.lock);
    for_each_gpu_id_in_mask(id, &va_space->registered_gpus) {
        NvU32 slot = slot_of_gpu_locked(va_space->registered_gpus_table[uvm_id_gpu_index(id)]);

        if (slot != HUVM_SLOT_NONE)
            info->registered_gpus |= 1u << slot;
    }
    read_unlock(&g_uvm_huvm.lock);
}

// Own processes (same uid) unless privileged.
// LOCKING: takes the VA spaces list lock (mutex); must be called without g_uvm_huvm.lock.
static huvm_status_t ops_list_va_spaces(void *ctx, const huvm_caller_t *caller, HUVM_LIST_VA_SPACES_PARAMS *params)
{
    uvm_va_space_t *va_space;
    NvU32 index = 0;
    NvU32 count = 0;

    uvm_mutex_lock(&g_uvm_global.va_spaces.lock);
    list_for_each_entry(va_space, &g_uvm_global.va_spaces.list, list_node) {
        if (!caller->privileged && va_space->huvm.uid != caller->uid)
            continue;

        if (index >= params->start_index && count < HUVM_MAX_VA_SPACES_PER_CALL)
            fill_va_space_info(va_space, &params->entries[count++]);

        ++index;
    }
    uvm_mutex_unlock(&g_uvm_global.va_spaces.lock);

    params->count = count;
    params->total = index;

    return HUVM_NV_OK;
}

static void preevict_kick_slot_locked(uvm_huvm_slot_t *slot);

// LOCKING: g_uvm_huvm.lock held for write (inside huvm_dispatch); only schedules work.
static void ops_policy_changed(void *ctx, const huvm_core_t *core)
{
    NvU32 i;

    for (i = 0; i < HUVM_MAX_GPUS; i++)
        preevict_kick_slot_locked(&g_uvm_huvm.slots[i]);
}

static const huvm_core_ops_t g_uvm_huvm_ops = {
    .refresh_free = ops_refresh_free,
    .list_va_spaces = ops_list_va_spaces,
    .policy_changed = ops_policy_changed,
};

// LOCKING: none.
bool uvm_huvm_is_ioctl(unsigned int cmd)
{
    return cmd >= HUVM_IOCTL_FIRST && cmd <= HUVM_IOCTL_LAST;
}

// LOCKING: g_uvm_huvm.lock held (read or write).
static bool huvm_any_gpu_present_locked(void)
{
    bool present = false;
    NvU32 i;

    for (i = 0; i < HUVM_MAX_GPUS; i++)
        present = present || g_uvm_huvm.slots[i].gpu != NULL;

    return present;
}

// A refused header (huvm_check_hdr). With another struct size only the 16-byte header is known to be
// there: it goes back with module_abi_version filled in and the ioctl fails with -EINVAL. With the right
// size (refused ABI version or flags) the refusal is in-band: header plus error_field/rmStatus, return 0.
// The qemu test module (driver/ktest) answers the same way.
// LOCKING: none held; may fault on user memory.
static long refuse_hdr(void __user *uparams, const huvm_hdr_t *hdr, NvU32 size, NvU32 error_field, huvm_status_t status)
{
    NvU32 tail[2] = { error_field, status };

    if (copy_to_user(uparams, hdr, sizeof(*hdr)))
        return -EFAULT;
    if (hdr->size != size)
        return -EINVAL;
    if (copy_to_user((NvU8 __user *)uparams + size - sizeof(tail), tail, sizeof(tail)))
        return -EFAULT;

    return 0;
}

// The header is copied and checked first (ABI version, size, flags), so a tool built against another
// struct size never has memory beyond its own struct read or written (see refuse_hdr()); otherwise the
// ioctl returns 0 and the params' rmStatus/error_field say what happened.
// LOCKING: none held on entry (thread context from uvm_ioctl()). Takes g_uvm_huvm.lock for write around
// the core's dispatch, except LIST_VA_SPACES (its callback takes the VA spaces list lock, which ranks
// above the leaf huvm lock; the core reads no mutable state for that command).
long uvm_huvm_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
    void __user *uparams = (void __user *)arg;
    NvU32 size = huvm_cmd_params_size(cmd);
    NvU32 error_field = HUVM_FIELD_NONE;
    huvm_caller_t caller;
    huvm_hdr_t hdr;
    huvm_status_t status;
    void *params;
    long ret = 0;

    if (!g_uvm_huvm.initialized || size == 0)
        return -ENOTTY;

    if (copy_from_user(&hdr, uparams, sizeof(hdr)))
        return -EFAULT;

    status = huvm_check_hdr(cmd, &hdr, size, &error_field);
    if (status != HUVM_NV_OK)
        return refuse_hdr(uparams, &hdr, size, error_field, status);

    params = uvm_kvmalloc(size);
    if (!params)
        return -ENOMEM;

    if (copy_from_user(params, uparams, size)) {
        ret = -EFAULT;
        goto out;
    }

    // Keep the header that was checked (a racing writer cannot change it under the dispatch).
    memcpy(params, &hdr, sizeof(hdr));

    // CAP_SYS_ADMIN decides only for the privileged commands, and only those are audited: the readers (GET_*,
    // LIST_VA_SPACES, polled by monitors every second) use it to widen what they show, without an audit record.
    memset(&caller, 0, sizeof(caller));
    if (huvm_cmd_privileged(cmd))
        caller.privileged = capable(CAP_SYS_ADMIN) ? 1 : 0;
    else
        caller.privileged = ns_capable_noaudit(&init_user_ns, CAP_SYS_ADMIN) ? 1 : 0;
    caller.allow_test = uvm_enable_builtin_tests ? 1 : 0;
    caller.uid = from_kuid(&init_user_ns, current_uid());
    caller.pid = current->tgid;
    caller.now_ns = NV_GETTIME();

    if (cmd == HUVM_IOCTL_LIST_VA_SPACES) {
        huvm_dispatch(&g_uvm_huvm.core, &g_uvm_huvm_ops, NULL, &caller, cmd, params, size);
    }
    else {
        write_lock(&g_uvm_huvm.lock);
        // Test commands are refused while GPUs are registered (checked under the lock that GPU add/remove
        // take, so no GPU can appear in between): the synthetic node would replace them.
        caller.live_gpus = huvm_any_gpu_present_locked() ? 1 : 0;
        huvm_dispatch(&g_uvm_huvm.core, &g_uvm_huvm_ops, NULL, &caller, cmd, params, size);
        write_unlock(&g_uvm_huvm.lock);
    }

    if (copy_to_user(uparams, params, size))
        ret = -EFAULT;

out:
    uvm_kvfree(params);
    return ret;
}

/* ---- GPUs ---- */

// LOCKING: g_uvm_huvm.lock held for write.
static NvU32 slot_for_uuid_locked(const NvProcessorUuid *uuid)
{
    NvU32 i;

    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        if (g_uvm_huvm.slots[i].used && uvm_processor_uuid_eq(&g_uvm_huvm.slots[i].uuid, uuid))
            return i;
    }
    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        if (!g_uvm_huvm.slots[i].used)
            return i;
    }
    // All slots have been used: take one whose GPU is gone (its counters are reset by the new UUID).
    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        if (!g_uvm_huvm.slots[i].gpu && !g_uvm_huvm.slots[i].worker_running)
            return i;
    }

    return HUVM_SLOT_NONE;
}

static void preevict_worker(void *args);

// LOCKING: none held (kthread entry; sets up UVM's thread context).
static void preevict_worker_entry(void *args)
{
    UVM_ENTRY_VOID(preevict_worker(args));
}

// LOCKING: the global lock is held (init_gpu()); takes g_uvm_huvm.lock for write.
void uvm_huvm_add_gpu(uvm_gpu_t *gpu)
{
    huvm_gpu_info_t info;
    huvm_status_t status;
    uvm_huvm_slot_t *slot;
    NvU32 index;
    int ret;

    uvm_assert_mutex_locked(&g_uvm_global.global_lock);

    if (!huvm_enabled())
        return;

    // Out of scope: MIG partitions (no P2P) and Confidential Computing (no P2P, encrypted copies).
    if (gpu->parent->smc.enabled || uvm_conf_computing_mode_enabled(gpu))
        return;

    memset(&info, 0, sizeof(info));
    memcpy(info.uuid, gpu->parent->uuid.uuid, sizeof(info.uuid));
    strscpy(info.name, gpu->parent->name, sizeof(info.name));
    info.memory_bytes = gpu->mem_info.size;
    // The GPU's PCIe bandwidth towards the host (the link as trained, limited by the narrowest link up to the
    // root port: pcie_bandwidth_available(), in Mb/s): the core splits multi-path prefetches by it. 0 when
    // the kernel cannot tell (not PCIe); the core then splits evenly.
    if (gpu->parent->pci_dev)
        info.pcie_mbyte_per_s = pcie_bandwidth_available(gpu->parent->pci_dev, NULL, NULL, NULL) / 8;
    info.free_bytes = min(gpu_free_bytes(gpu), info.memory_bytes);
    info.flags = HUVM_GPU_FLAG_PRESENT;
    if (gpu->parent->replayable_faults_supported)
        info.flags |= HUVM_GPU_FLAG_REPLAYABLE_FAULTS;
    if (gpu->pmm.pma_stats)
        info.flags |= HUVM_GPU_FLAG_PMA_EVICTION;

    write_lock(&g_uvm_huvm.lock);
    index = slot_for_uuid_locked(&gpu->parent->uuid);
    status = index == HUVM_SLOT_NONE ? HUVM_NV_ERR_NO_MEMORY : huvm_core_set_gpu(&g_uvm_huvm.core, index, &info);
    if (status == HUVM_NV_OK) {
        slot = &g_uvm_huvm.slots[index];
        slot->used = true;
        slot->uuid = gpu->parent->uuid;
        WRITE_ONCE(slot->uvm_id, uvm_id_value(gpu->id));
        atomic64_set(&slot->last_evict_ns, 0);
        atomic64_set(&slot->last_pressure_ns, 0);
        atomic64_set(&slot->batch_alloc_bytes, 0);
        atomic64_set(&slot->burst_chunks, 0);
        memset(&slot->own_peak, 0, sizeof(slot->own_peak));
    }
    write_unlock(&g_uvm_huvm.lock);

    if (status != HUVM_NV_OK) {
        UVM_ERR_PRINT("huvm: GPU %s not managed: %s\n", uvm_gpu_name(gpu), nvstatusToString(status));
        return;
    }

    // The worker exists before the GPU becomes visible to the hooks (slot->gpu below).
    if (uvm_gpu_supports_eviction(gpu)) {
        ret = nv_kthread_q_init(&slot->preevict_q, "uvm_huvm_preevict");
        if (ret == 0) {
            nv_kthread_q_item_init(&slot->preevict_q_item, preevict_worker_entry, slot);
            slot->worker_gpu = gpu;
            slot->worker_running = true;
        }
        else {
            UVM_ERR_PRINT("huvm: no pre-eviction worker for GPU %s: %d\n", uvm_gpu_name(gpu), ret);
        }
    }

    write_lock(&g_uvm_huvm.lock);
    slot->gpu = gpu;
    write_unlock(&g_uvm_huvm.lock);
}

// LOCKING: the global lock is held (init_peer_access()); takes g_uvm_huvm.lock for write.
void uvm_huvm_add_peer(uvm_gpu_t *gpu0, uvm_gpu_t *gpu1, const uvm_gpu_peer_t *peer_caps)
{
    huvm_link_t link;
    NvU32 a, b;

    if (!huvm_enabled())
        return;

    memset(&link, 0, sizeof(link));
    link.link_type = peer_caps->link_type;
    link.mbyte_per_s = peer_caps->total_link_line_rate_mbyte_per_s;

    write_lock(&g_uvm_huvm.lock);
    a = slot_of_gpu_locked(gpu0);
    b = slot_of_gpu_locked(gpu1);
    if (a != HUVM_SLOT_NONE && b != HUVM_SLOT_NONE && a != b)
        (void)huvm_core_set_link(&g_uvm_huvm.core, a, b, &link);
    write_unlock(&g_uvm_huvm.lock);
}

// LOCKING: the global lock is held (deinit_gpu()). Takes g_uvm_huvm.lock for write, then stops the
// worker without it (the stop waits for a running pass, which takes PMM and VA block locks).
void uvm_huvm_remove_gpu(uvm_gpu_t *gpu)
{
    static const huvm_link_t no_link;
    uvm_huvm_slot_t *slot = NULL;
    NvU32 index, i;

    if (!g_uvm_huvm.initialized)
        return;

    write_lock(&g_uvm_huvm.lock);
    index = slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE) {
        slot = &g_uvm_huvm.slots[index];
        slot->gpu = NULL;
        huvm_core_remove_gpu(&g_uvm_huvm.core, index);
        for (i = 0; i < HUVM_MAX_GPUS; i++) {
            if (i != index)
                (void)huvm_core_set_link(&g_uvm_huvm.core, index, i, &no_link);
        }
    }
    write_unlock(&g_uvm_huvm.lock);

    // No new kicks can find the slot now; flush and stop the worker.
    if (slot && slot->worker_running) {
        nv_kthread_q_stop(&slot->preevict_q);
        slot->worker_running = false;
        slot->worker_gpu = NULL;
    }
}

/* ---- VA spaces ---- */

// LOCKING: none needed (the VA space is not visible to other threads yet).
void uvm_huvm_va_space_init(uvm_va_space_t *va_space)
{
    uvm_huvm_va_space_t *h = &va_space->huvm;

    memset(h, 0, sizeof(*h));
    h->id = atomic64_inc_return(&g_uvm_huvm.next_va_space_id);
    h->pid = current->tgid;
    h->uid = from_kuid(&init_user_ns, current_uid());
    get_task_comm(h->comm, current);
}

// VA spaces have no reference count: a queued multi-path prefetch request holds a plain pointer. The
// only producers are the fault bottom halves, which uvm_va_space_destroy() has flushed before calling
// this, so after this flush no request for the VA space is queued or running; any left in a slot is
// dropped. (Pre-eviction never references a VA space: it starts from PMM, as PMM eviction does.)
// LOCKING: none held (uvm_va_space_destroy(), after the bottom-half flush); takes pf_lock.
void uvm_huvm_va_space_destroy(uvm_va_space_t *va_space)
{
    NvU32 i;

    if (!g_uvm_huvm.prefetch_q_running)
        return;

    nv_kthread_q_flush(&g_uvm_huvm.prefetch_q);

    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        uvm_huvm_slot_t *slot = &g_uvm_huvm.slots[i];

        spin_lock(&slot->pf_lock);
        if (slot->pf_va_space == va_space)
            slot->pf_va_space = NULL;
        spin_unlock(&slot->pf_lock);
    }
}

/* ---- Eviction ---- */

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

        peer = va_space->registered_gpus_table[uvm_id_gpu_index(id)];
        if (!peer || !uvm_gpu_supports_eviction(peer))
            continue;

        // A static property of the GPU, unlike the VA space's indirect_peers mask: indirect peers are
        // always NUMA-enabled (enable_peers()).
        if (peer->mem_info.numa.enabled)
            continue;

        slot = slot_of_gpu_locked(peer);
        if (slot != HUVM_SLOT_NONE)
            candidates |= 1u << slot;
    }

    return candidates;
}

// Peers a prefetch for gpu may use: as for eviction, and the faulting GPU must be able to copy from the
// peer directly (the fetch-back goes over NVLink).
// LOCKING: g_uvm_huvm.lock held for read; the VA space masks are read as in evict_candidates_locked().
static NvU32 prefetch_candidates_locked(uvm_va_space_t *va_space, uvm_gpu_t *gpu)
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
static bool chunk_harvest_info(uvm_gpu_t *gpu, uvm_gpu_chunk_t *chunk, NvU32 *owner)
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

// The VA space's harvested_bytes gauge goes down by one chunk, saturating at zero.
// LOCKING: none (atomic).
static void va_space_harvested_sub(uvm_va_space_t *va_space)
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
static void account_release_chunk(uvm_va_block_t *va_block, uvm_gpu_t *holder_gpu, uvm_gpu_chunk_t *chunk)
{
    uvm_va_space_t *va_space = block_va_space(va_block);
    NvU32 owner, holder;
    bool valid;

    if (!chunk_harvest_info(holder_gpu, chunk, &owner))
        return;

    read_lock(&g_uvm_huvm.lock);
    holder = slot_of_gpu_locked(holder_gpu);
    valid = holder != HUVM_SLOT_NONE && owner != holder && owner < g_uvm_huvm.core.gpu_count;
    read_unlock(&g_uvm_huvm.lock);

    if (!valid)
        return;

    huvm_account_release(&g_uvm_huvm.core, owner, holder, UVM_CHUNK_SIZE_MAX, va_block->start);
    if (va_space)
        va_space_harvested_sub(va_space);
}

// Tools event "Eviction" (UvmEventTypeEviction), defined by UVM but not sent in 535: sent for the
// movements huvm adds (to a peer, and a peer's give-back to host).
// LOCKING: the block lock is held; uvm_tools_record_eviction() takes the VA space tools lock.
static void record_tools_eviction(uvm_va_space_t *va_space,
                                  uvm_va_block_t *va_block,
                                  uvm_processor_id_t src,
                                  uvm_processor_id_t dst)
{
    uvm_tools_record_eviction(va_space, va_block->start, uvm_va_block_size(va_block), src, dst);
}

// Move the pages to GPU dst (a peer for eviction or multi-path prefetch, or the faulting GPU itself for
// local prefetch) without ever evicting on dst and without dropping the block lock: dst's 2 MiB chunk is
// allocated up front without eviction and handed to make_resident through a local retry object, so
// block_alloc_gpu_chunk() finds it and never allocates (or unlocks) itself. With owner != HUVM_SLOT_NONE
// the chunk becomes harvested data of GPU owner (is_harvested, harvested_on). On failure *reason says
// why and dst holds no chunk of this block it did not hold before.
// LOCKING: the block lock is held; takes dst's PMM locks (below VA_BLOCK in uvm_lock.h).
static NV_STATUS move_with_chunk(uvm_va_block_t *va_block,
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
    if (status != NV_OK) {
        *reason = HUVM_REASON_COPY_FAILED;
    }
    else if (reused) {
        // The caller accounts the chunk for owner again: drop its previous claim, then record the new owner.
        account_release_chunk(va_block, peer, reused);
        chunk_set_harvested(peer, reused, owner);
    }

out:
    // Frees the chunk if populate did not take it; unpins it (onto the peer's harvested list) if it did.
    uvm_va_block_retry_deinit(&retry, va_block);

    if (status != NV_OK && harvest && !was_harvested && !uvm_processor_mask_test(&va_block->resident, peer->id)) {
        // Give back a chunk populated by the failed attempt.
        peer_state = uvm_va_block_gpu_state_get(va_block, peer->id);
        if (peer_state && peer_state->chunks && peer_state->chunks[0]) {
            uvm_mmu_chunk_unmap(peer_state->chunks[0], &va_block->tracker);
            uvm_pmm_gpu_free(&peer->pmm, peer_state->chunks[0], &va_block->tracker);
            peer_state->chunks[0] = NULL;
        }
        uvm_processor_mask_clear(&va_block->harvested_on, peer->id);
    }

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
    uvm_va_space_t *va_space = block_va_space(va_block);
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
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
            account_release_chunk(va_block, gpu, root_chunk);
            uvm_processor_mask_clear(&va_block->harvested_on, gpu->id);
            if (uvm_processor_mask_empty(&va_block->harvested_on))
                va_block->huvm_remote_mapped = false;
        }
        return status;
    }

    req.flags = evict_flags & (HUVM_EVICT_FLAG_PMA_CONTEXT | HUVM_EVICT_FLAG_PREEVICT);
    if (chunk_harvest_info(gpu, root_chunk, &guest_owner) &&
        uvm_processor_mask_test(&va_block->harvested_on, gpu->id))
        req.flags |= HUVM_EVICT_FLAG_GUEST_CHUNK;
    else
        guest_owner = HUVM_SLOT_NONE;
    req.now_ns = NV_GETTIME();
    req.chunk_fetched_ns = va_block->huvm_fetched_ns;

    read_lock(&g_uvm_huvm.lock);
    owner = slot_of_gpu_locked(gpu);
    if (owner != HUVM_SLOT_NONE) {
        req.gpu = owner;
        req.candidates = evict_candidates_locked(va_space, gpu);
        gather_state_locked(state);
        decision = huvm_decide_evict(&g_uvm_huvm.core, state, &req);
        if (decision.dst < HUVM_MAX_GPUS) {
            // Other evictors decide under the same read lock: reserve the chunk on the peer atomically (lend
            // limit and reserve checked again with the bytes in flight), released once accounted.
            decision.reason = huvm_lend_reserve(&g_uvm_huvm.core, state, owner, decision.dst, UVM_CHUNK_SIZE_MAX,
                                                req.now_ns);
            if (decision.reason == HUVM_REASON_PEER)
                peer = g_uvm_huvm.slots[decision.dst].gpu;
            if (decision.reason == HUVM_REASON_PEER && !peer) {
                huvm_lend_unreserve(&g_uvm_huvm.core, decision.dst, UVM_CHUNK_SIZE_MAX);
                decision.reason = HUVM_REASON_NO_PEER;
            }
            if (!peer)
                decision.dst = HUVM_DEST_HOST;
        }
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
            status = move_with_chunk(va_block,
                                     peer,
                                     owner,
                                     block_context,
                                     pages_to_evict,
                                     UVM_MAKE_RESIDENT_CAUSE_EVICTION,
                                     &decision.reason);
            if (status == NV_OK) {
                huvm_account_evict(&g_uvm_huvm.core, owner, decision.dst, HUVM_REASON_PEER, req.flags,
                                   UVM_CHUNK_SIZE_MAX, va_block->start);
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
            va_space_harvested_sub(va_space);
            record_tools_eviction(va_space, va_block, gpu->id, UVM_ID_CPU);
        }
    }
    else if (owner != HUVM_SLOT_NONE) {
        huvm_account_evict(&g_uvm_huvm.core, owner, HUVM_DEST_HOST, decision.reason, req.flags,
                           UVM_CHUNK_SIZE_MAX, va_block->start);
        atomic64_inc(&va_space->huvm.evict_to_host);
        atomic64_set(&g_uvm_huvm.slots[owner].last_evict_ns, req.now_ns);
    }

    return NV_OK;
}

/* ---- Fetch-back and give-back on the way out of a peer ---- */

// Harvested data has left the peer (fetched back to its owner, or moved elsewhere): free the peer's
// chunk now so that lent memory returns at once instead of waiting on the peer's LRU.
// LOCKING: the block lock is held; the VA space lock is held by make_resident's callers (not eviction).
static void release_peer_chunk(uvm_va_block_t *va_block, uvm_gpu_id_t peer_id, uvm_processor_id_t dst_id)
{
    uvm_va_space_t *va_space = uvm_va_block_get_va_space(va_block);
    uvm_va_block_gpu_state_t *peer_state = uvm_va_block_gpu_state_get(va_block, peer_id);
    uvm_gpu_t *peer = uvm_va_space_get_gpu(va_space, peer_id);
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

    harvested = chunk_harvest_info(peer, chunk, &owner);

    uvm_mmu_chunk_unmap(chunk, &va_block->tracker);
    uvm_pmm_gpu_free(&peer->pmm, chunk, &va_block->tracker);
    peer_state->chunks[0] = NULL;

    va_block->huvm_fetched_ns = NV_GETTIME();

    if (!harvested || owner >= HUVM_MAX_GPUS)
        return;

    read_lock(&g_uvm_huvm.lock);
    holder = slot_of_gpu_locked(peer);
    if (UVM_ID_IS_GPU(dst_id))
        dst = slot_of_gpu_locked(uvm_va_space_get_gpu(va_space, dst_id));
    read_unlock(&g_uvm_huvm.lock);

    if (holder == HUVM_SLOT_NONE || holder == owner)
        return;

    if (dst == owner) {
        // Its pages were counted as they were copied (migration_event()): the chunk and the gauges now.
        huvm_account_fetch(&g_uvm_huvm.core, owner, holder, HUVM_FETCHED_RELEASED, UVM_CHUNK_SIZE_MAX,
                           va_block->start);
        atomic64_inc(&va_space->huvm.fetch_from_peer);
    }
    else {
        // Moved to host or to a third GPU by a migration: the lender got its memory back all the same.
        huvm_account_giveback(&g_uvm_huvm.core, holder, owner, UVM_CHUNK_SIZE_MAX, va_block->start);
    }
    va_space_harvested_sub(va_space);
}

// Every copy into a GPU that brings data back: pages of a chunk harvested on a peer copied to the chunk's
// owner (a fetch-back, whole or partial: the peer keeps the chunk until its last page leaves,
// release_peer_chunk()), and pages copied from host (a host fetch). Evictions, pre-evictions and huvm's own
// prefetches are accounted where they are decided; copies between other places are not huvm's business.
// nvidia-uvm notifies one event per run of contiguous pages (block_copy_resident_pages_between()).
// LOCKING: UVM_PERF_EVENT_MIGRATION: the block lock is held, the VA space lock maybe not (evictions; those
// return first); the VA space's perf events lock is held for read. Takes the PMM list lock of the source
// GPU and g_uvm_huvm.lock (read), leaves.
static void migration_event(uvm_perf_event_t event_id, uvm_perf_event_data_t *event_data)
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
        src_gpu = uvm_va_space_get_gpu(va_space, src_id);
        if (!src_state || !src_state->chunks || !src_state->chunks[0] ||
            !chunk_harvest_info(src_gpu, src_state->chunks[0], &owner))
            return;
    }

    read_lock(&g_uvm_huvm.lock);
    dst = slot_of_gpu_locked(uvm_va_space_get_gpu(va_space, dst_id));
    if (src_gpu)
        src = slot_of_gpu_locked(src_gpu);
    read_unlock(&g_uvm_huvm.lock);

    // (HUVM_SLOT_NONE and HUVM_DEST_HOST are the same number: a GPU source is checked through src_gpu.)
    if (dst == HUVM_SLOT_NONE || (src_gpu && (src == HUVM_SLOT_NONE || owner != dst || src == dst)))
        return;

    huvm_account_fetch(&g_uvm_huvm.core, dst, src, HUVM_FETCHED_PAGES, event_data->migration.bytes,
                       event_data->migration.address);
    if (!src_gpu && event_data->migration.bytes >= UVM_CHUNK_SIZE_MAX)
        atomic64_add(event_data->migration.bytes / UVM_CHUNK_SIZE_MAX, &va_space->huvm.fetch_from_host);
}

// LOCKING: the VA space lock is held for write (uvm_va_space_create(), after uvm_perf_heuristics_load());
// takes the VA space's perf events lock for write, as the heuristics do.
NV_STATUS uvm_huvm_va_space_events_load(uvm_va_space_t *va_space)
{
    uvm_assert_rwsem_locked_write(&va_space->lock);

    if (!g_uvm_huvm.initialized)
        return NV_OK;

    return uvm_perf_register_event_callback(&va_space->perf_events, UVM_PERF_EVENT_MIGRATION, migration_event);
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
        account_release_chunk(va_block, gpu, gpu_state->chunks[0]);
}

// LOCKING: the block lock and the VA space lock (write) are held (uvm_va_block_split()); takes PMM locks of
// the CPU and the peers, and g_uvm_huvm.lock (read) through the release of the peers' chunks.
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
    if (!block_context)
        return NV_ERR_NO_MEMORY;

    pages = &block_context->caller_page_mask;
    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        uvm_page_mask_copy(pages, uvm_va_block_resident_mask_get(va_block, id));
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
    if (status == NV_OK) {
        for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
            if (!uvm_processor_mask_test(&va_block->resident, id))
                release_peer_chunk(va_block, id, UVM_ID_CPU);
        }
    }

    uvm_va_block_context_free(block_context);
    return status;
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
    owner = slot_of_gpu_locked(uvm_va_space_get_gpu(va_space, processor_id));
    holder = slot_of_gpu_locked(uvm_va_space_get_gpu(va_space, resident_id));
    if (owner != HUVM_SLOT_NONE && holder != HUVM_SLOT_NONE && owner != holder)
        remote = huvm_decide_fetch(&g_uvm_huvm.core, owner, holder) == HUVM_FETCH_REMOTE_MAP;
    read_unlock(&g_uvm_huvm.lock);

    // Counted once per harvested block (residency is chosen page by page).
    if (remote && !va_block->huvm_remote_mapped) {
        va_block->huvm_remote_mapped = true;
        huvm_account_fetch(&g_uvm_huvm.core, owner, holder, HUVM_FETCHED_REMOTE_MAP, UVM_CHUNK_SIZE_MAX,
                           va_block->start);
    }

    return remote;
}

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
    owner = slot_of_gpu_locked(uvm_va_space_get_gpu(va_space, new_residency));
    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        NvU32 holder = slot_of_gpu_locked(uvm_va_space_get_gpu(va_space, id));

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
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
    huvm_prefetch_plan_t plan;
    uvm_huvm_slot_t *slot;
    NvU32 index;

    if (!huvm_enabled() || num_faults == 0)
        return;

    read_lock(&g_uvm_huvm.lock);
    index = slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE) {
        slot = &g_uvm_huvm.slots[index];
        atomic64_set(&slot->burst_chunks,
                     DIV_ROUND_UP((NvU64)atomic64_xchg(&slot->batch_alloc_bytes, 0), UVM_CHUNK_SIZE_MAX));
        huvm_account_faults(&g_uvm_huvm.core, index, num_faults);

        memset(&plan, 0, sizeof(plan));
        if (va_space && g_uvm_huvm.prefetch_q_running) {
            gather_state_locked(state);
            huvm_decide_prefetch(&g_uvm_huvm.core,
                                 state,
                                 index,
                                 prefetch_candidates_locked(va_space, gpu),
                                 NV_GETTIME(),
                                 &plan);
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
    const uvm_va_policy_t *policy;
    uvm_va_block_t *va_block;
    NvU32 reason;
    NV_STATUS status;

    if (uvm_va_block_find(va_space, address, &va_block) != NV_OK || uvm_va_block_is_hmm(va_block))
        return;
    if (!uvm_range_group_all_migratable(va_space, va_block->start, va_block->end))
        return;

    uvm_mutex_lock(&va_block->lock);

    policy = uvm_va_range_get_policy(va_block->va_range);
    if (uvm_processor_mask_get_count(&va_block->resident) != 1 ||
        !uvm_processor_mask_test(&va_block->resident, UVM_ID_CPU) ||
        policy->read_duplication == UVM_READ_DUPLICATION_ENABLED ||
        UVM_ID_IS_VALID(policy->preferred_location))
        goto unlock;

    // A peer's chunk is reserved against its lend limit first, as for eviction (huvm_lend_reserve()).
    if (dst != gpu) {
        read_lock(&g_uvm_huvm.lock);
        reason = huvm_lend_reserve(&g_uvm_huvm.core, state, owner, dst_slot, UVM_CHUNK_SIZE_MAX, NV_GETTIME());
        read_unlock(&g_uvm_huvm.lock);
        if (reason != HUVM_REASON_PEER)
            goto unlock;
    }

    uvm_page_mask_copy(pages, uvm_va_block_resident_mask_get(va_block, UVM_ID_CPU));
    status = move_with_chunk(va_block,
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
// evicts: gpu's chunk comes from free memory (move_with_chunk()). Returns true when the block came back;
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
    const uvm_va_policy_t *policy;
    uvm_processor_id_t holder_id = UVM_ID_INVALID;
    uvm_va_block_t *va_block;
    uvm_gpu_id_t id;
    NvU32 chunk_owner = HUVM_SLOT_NONE, reason;
    bool moved = false;

    *no_room = false;
    if (uvm_va_block_find(va_space, address, &va_block) != NV_OK || uvm_va_block_is_hmm(va_block))
        return false;
    if (!uvm_range_group_all_migratable(va_space, va_block->start, va_block->end))
        return false;

    uvm_mutex_lock(&va_block->lock);

    policy = uvm_va_range_get_policy(va_block->va_range);
    if (uvm_processor_mask_get_count(&va_block->resident) != 1 ||
        policy->read_duplication == UVM_READ_DUPLICATION_ENABLED ||
        UVM_ID_IS_VALID(policy->preferred_location))
        goto unlock;

    for_each_gpu_id_in_mask(id, &va_block->harvested_on) {
        if (uvm_processor_mask_test(&va_block->resident, id))
            holder_id = id;
    }
    if (!UVM_ID_IS_VALID(holder_id) || uvm_id_equal(holder_id, gpu->id))
        goto unlock;
    holder_state = uvm_va_block_gpu_state_get(va_block, holder_id);
    if (!holder_state || !holder_state->chunks || !holder_state->chunks[0] ||
        !chunk_harvest_info(uvm_va_space_get_gpu(va_space, holder_id), holder_state->chunks[0], &chunk_owner) ||
        chunk_owner != owner)
        goto unlock;

    uvm_page_mask_copy(pages, uvm_va_block_resident_mask_get(va_block, holder_id));
    if (move_with_chunk(va_block, gpu, HUVM_SLOT_NONE, block_context, pages, UVM_MAKE_RESIDENT_CAUSE_PREFETCH,
                        &reason) == NV_OK)
        moved = true;
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
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
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
    gpu = uvm_va_space_get_gpu(va_space, gpu_id);

    memset(&plan, 0, sizeof(plan));
    read_lock(&g_uvm_huvm.lock);
    owner = slot_of_gpu_locked(gpu);
    if (owner != HUVM_SLOT_NONE) {
        gather_state_locked(state);
        huvm_decide_prefetch(&g_uvm_huvm.core,
                             state,
                             owner,
                             prefetch_candidates_locked(va_space, gpu),
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
                 va_space->registered_gpus_table[uvm_id_gpu_index(peer_id)] != peer))
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
static void prefetch_worker_entry(void *args)
{
    UVM_ENTRY_VOID(prefetch_worker(args));
}

/* ---- Pre-eviction ---- */

// LOCKING: g_uvm_huvm.lock held (read or write); only schedules work.
static void preevict_kick_slot_locked(uvm_huvm_slot_t *slot)
{
    if (slot->gpu && slot->worker_running)
        nv_kthread_q_schedule_q_item(&slot->preevict_q, &slot->preevict_q_item);
}

// LOCKING: any (no VA block lock is needed); takes g_uvm_huvm.lock for read and schedules work.
void uvm_huvm_kick_preevict(uvm_gpu_t *gpu)
{
    NvU32 index;

    if (!huvm_enabled())
        return;

    read_lock(&g_uvm_huvm.lock);
    index = slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE) {
        atomic64_set(&g_uvm_huvm.slots[index].last_pressure_ns, NV_GETTIME());
        preevict_kick_slot_locked(&g_uvm_huvm.slots[index]);
    }
    read_unlock(&g_uvm_huvm.lock);
}

// LOCKING: the block lock may be held; takes g_uvm_huvm.lock for read (and, under it, the PMM list lock).
void uvm_huvm_note_alloc(uvm_gpu_t *gpu, NvU64 size)
{
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
    uvm_huvm_slot_t *slot;
    NvU32 index;

    if (!huvm_enabled())
        return;

    read_lock(&g_uvm_huvm.lock);
    index = slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE) {
        slot = &g_uvm_huvm.slots[index];
        atomic64_add(size, &slot->batch_alloc_bytes);
        if (huvm_atomic64_read(&g_uvm_huvm.core.counters[index].lent_bytes) != 0) {
            memset(state, 0, sizeof(state));
            state[index].free_bytes = gpu_free_bytes(gpu);
            if (huvm_giveback_need(&g_uvm_huvm.core, state, index) > 0)
                preevict_kick_slot_locked(slot);
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
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
    huvm_giveback_plan_t giveback, preevict;
    NvU32 index, owner, i;
    NvU64 need = 0;

    memset(&giveback, 0, sizeof(giveback));
    memset(&preevict, 0, sizeof(preevict));

    read_lock(&g_uvm_huvm.lock);
    index = slot_of_gpu_locked(gpu);
    if (index != HUVM_SLOT_NONE && huvm_enabled()) {
        gather_state_locked(state);

        // A lender below its lend reserve takes its memory back from its guests first (the core's give-back
        // plan: owners holding the most first, all to host), whatever pre-eviction decides.
        need = huvm_giveback_need(&g_uvm_huvm.core, state, index);
        if (need > 0)
            huvm_decide_giveback(&g_uvm_huvm.core, state, index, need, &giveback);

        // Pre-eviction restores the free reserve under pressure: guests' chunks first, then own data.
        huvm_decide_preevict_plan(&g_uvm_huvm.core, state, index, NV_GETTIME(), &preevict);
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

/* ---- Module ---- */

// LOCKING: none (module load).
static NvU32 preset_from_param(void)
{
    if (uvm_huvm_preset && strcmp(uvm_huvm_preset, "huvm") == 0)
        return HUVM_PRESET_HUVM;
    if (uvm_huvm_preset && strcmp(uvm_huvm_preset, "huvm-atc22") == 0)
        return HUVM_PRESET_ATC22;
    // Loading the module changes nothing until an admin picks a policy: anything else is stock.
    if (uvm_huvm_preset && strcmp(uvm_huvm_preset, "stock") != 0)
        UVM_ERR_PRINT("huvm: unknown uvm_huvm_preset=%s, using stock\n", uvm_huvm_preset);

    return HUVM_PRESET_STOCK;
}

// LOCKING: none (module load, before any other UVM state exists).
void uvm_huvm_init(void)
{
    NvU32 preset = preset_from_param();

    NvU32 i;
    int ret;

    rwlock_init(&g_uvm_huvm.lock);
    huvm_core_init(&g_uvm_huvm.core, HUVM_BACKEND_KERNEL, preset);
    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        spin_lock_init(&g_uvm_huvm.slots[i].pf_lock);
        spin_lock_init(&g_uvm_huvm.slots[i].peak_lock);
        nv_kthread_q_item_init(&g_uvm_huvm.slots[i].pf_q_item, prefetch_worker_entry, &g_uvm_huvm.slots[i]);
    }

    ret = nv_kthread_q_init(&g_uvm_huvm.prefetch_q, "uvm_huvm_prefetch");
    if (ret == 0)
        g_uvm_huvm.prefetch_q_running = true;
    else
        UVM_ERR_PRINT("huvm: no multi-path prefetch worker: %d\n", ret);
    atomic64_set(&g_uvm_huvm.next_va_space_id, 0);
    g_uvm_huvm.initialized = true;

    pr_info("huvm %u.%u.%u: peer-GPU eviction tier %s, preset %s\n",
            HUVM_VERSION_MAJOR,
            HUVM_VERSION_MINOR,
            HUVM_VERSION_PATCH,
            uvm_huvm_enable ? "enabled" : "disabled",
            huvm_preset_name(preset));
}

// LOCKING: none (module unload, after every GPU was removed).
void uvm_huvm_exit(void)
{
    NvU32 i;

    // Every GPU was removed (and its worker stopped) and every VA space destroyed (flushing the prefetch
    // queue) before the module unloads. A worker left running (release builds compile the assertions out)
    // is stopped anyway: its kthread must not outlive the module's text.
    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        UVM_ASSERT(!g_uvm_huvm.slots[i].gpu);
        UVM_ASSERT(!g_uvm_huvm.slots[i].worker_running);
        if (g_uvm_huvm.slots[i].worker_running) {
            nv_kthread_q_stop(&g_uvm_huvm.slots[i].preevict_q);
            g_uvm_huvm.slots[i].worker_running = false;
        }
    }

    if (g_uvm_huvm.prefetch_q_running) {
        nv_kthread_q_stop(&g_uvm_huvm.prefetch_q);
        g_uvm_huvm.prefetch_q_running = false;
    }

    g_uvm_huvm.initialized = false;
}
