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
 *   chunks (uvm_huvm_gpu_free_bytes()). Readers: decisions on the eviction, pre-eviction and prefetch paths,
 *   and the read-only control ioctls (GET_INFO, GET_POLICY, GET_STATS: huvm_cmd_reader()). Writers: the
 *   other control ioctls (huvm_dispatch), GPU add/remove and link registration.
 * - Counters are updated by the core with atomics, without the lock.
 * - The VA space masks read on the eviction path without the VA space lock follow the argument in
 *   uvm_va_block_evict_chunks() (a GPU leaving a VA space sets gpu_unregister_in_progress before it
 *   walks the blocks, and the walk takes the block lock we hold).
 */

// The tracepoints (subsystem huvm) are defined here; the core fires them through HUVM_TRACE.
#define CREATE_TRACE_POINTS
#include "uvm_huvm_trace.h"

#include "uvm_huvm_internal.h"

static char *uvm_huvm_preset = "stock";
module_param(uvm_huvm_preset, charp, S_IRUGO);
MODULE_PARM_DESC(uvm_huvm_preset,
                 "huvm policy preset at load time: stock (default: host-only eviction, UVM unchanged), huvm-atc22 or "
                 "huvm. The control ioctls change the policy at run time.");

int uvm_huvm_enable = 1;
module_param(uvm_huvm_enable, int, S_IRUGO);
MODULE_PARM_DESC(uvm_huvm_enable,
                 "1 (default): the huvm hooks are active. 0: every hook is a no-op (stock UVM behaviour); "
                 "the control ioctls still answer.");

_Static_assert(UVM_HUVM_EVICT_PMA_CONTEXT == HUVM_EVICT_FLAG_PMA_CONTEXT, "evict flags");
_Static_assert(UVM_HUVM_EVICT_PREEVICT == HUVM_EVICT_FLAG_PREEVICT, "evict flags");
_Static_assert(UVM_CHUNK_SIZE_MAX == HUVM_CHUNK_SIZE, "huvm moves 2 MiB root chunks");

uvm_huvm_global_t g_uvm_huvm;

// LOCKING: none (a plain read of a word written under g_uvm_huvm.lock).
u32 uvm_huvm_trace_uvm_id(u32 slot)
{
    return slot < HUVM_MAX_GPUS ? READ_ONCE(g_uvm_huvm.slots[slot].uvm_id) : uvm_id_value(UVM_ID_CPU);
}

// LOCKING: g_uvm_huvm.lock held (read or write).
NvU32 uvm_huvm_slot_of_gpu_locked(const uvm_gpu_t *gpu)
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
NvU64 uvm_huvm_gpu_free_bytes(uvm_gpu_t *gpu)
{
    if (!gpu->pmm.pma_stats)
        return 0;

    return UVM_HUVM_READ_ONCE(gpu->pmm.pma_stats->numFreePages2m) * UVM_CHUNK_SIZE_MAX +
           uvm_pmm_gpu_free_user_root_bytes(&gpu->pmm, HUVM_FREE_ROOT_CHUNKS_COUNTED);
}

// GPU i's own memory use now (used less what it lends) folded into its recent peak and spike cadence, and its
// guest traffic into its window (huvm_traffic_level: only for a GPU with a budget): state->own_peak_bytes,
// state->own_spike_ns and state->guest_traffic_bytes.
// LOCKING: g_uvm_huvm.lock held (read or write); takes the slot's peak_lock (leaf).
static void own_peak_traffic_update(NvU32 i, huvm_gpu_state_t *state)
{
    uvm_huvm_slot_t *slot = &g_uvm_huvm.slots[i];
    NvU64 mem = g_uvm_huvm.core.gpus[i].memory_bytes;
    NvU64 used = state->free_bytes < mem ? mem - state->free_bytes : 0;
    NvU64 lent = huvm_atomic64_read(&g_uvm_huvm.core.counters[i].lent_bytes);
    NvU64 now = NV_GETTIME();

    spin_lock(&slot->peak_lock);
    huvm_peak_update(&slot->own_peak, used > lent ? used - lent : 0, now);
    state->own_peak_bytes = slot->own_peak.bytes;
    state->own_spike_ns = huvm_peak_spike_ns(&slot->own_peak, now);
    state->guest_traffic_bytes = huvm_traffic_level(&g_uvm_huvm.core, i, &slot->guest_traffic, now);
    spin_unlock(&slot->peak_lock);
}

// The node's state for one decision: HUVM_MAX_GPUS entries (1 KiB), per CPU rather than on the stack of the
// eviction, allocation and fault paths, which run deep in UVM's call chains.
typedef struct {
    huvm_gpu_state_t gpus[HUVM_MAX_GPUS];
} uvm_huvm_node_state_t;

static DEFINE_PER_CPU(uvm_huvm_node_state_t, g_uvm_huvm_node_state);

// This CPU's state buffer, zeroed; preemption stays disabled until uvm_huvm_put_state() (the decisions run
// under g_uvm_huvm.lock, where nothing sleeps). Never called from interrupt context.
// LOCKING: g_uvm_huvm.lock held (read or write).
huvm_gpu_state_t *uvm_huvm_get_state_locked(void)
{
    huvm_gpu_state_t *state = get_cpu_ptr(&g_uvm_huvm_node_state)->gpus;

    UVM_ASSERT(!in_interrupt());

    memset(state, 0, sizeof(*state) * HUVM_MAX_GPUS);

    return state;
}

// uvm_huvm_get_state_locked()'s buffer with the node's state.
// LOCKING: g_uvm_huvm.lock held (read or write); takes the slots' peak_lock and PMM list locks (leaves).
huvm_gpu_state_t *uvm_huvm_gather_state_locked(void)
{
    huvm_gpu_state_t *state = uvm_huvm_get_state_locked();
    NvU32 i;

    for (i = 0; i < g_uvm_huvm.core.gpu_count; i++) {
        uvm_huvm_slot_t *slot = &g_uvm_huvm.slots[i];

        if (!slot->gpu)
            continue;

        state[i].free_bytes = uvm_huvm_gpu_free_bytes(slot->gpu);
        state[i].last_evict_ns = atomic64_read(&slot->last_evict_ns);
        own_peak_traffic_update(i, &state[i]);
        state[i].last_pressure_ns = atomic64_read(&slot->last_pressure_ns);
        state[i].burst_chunks = atomic64_read(&slot->burst_chunks);
        spin_lock(&slot->feedback_lock);
        state[i].prefetch_used = slot->prefetch_used;
        state[i].prefetch_unused = slot->prefetch_unused;
        spin_unlock(&slot->feedback_lock);
    }

    return state;
}

// Done with uvm_huvm_get_state_locked()'s (or uvm_huvm_gather_state_locked()'s) buffer.
// LOCKING: g_uvm_huvm.lock held (read or write), the one uvm_huvm_gather_state_locked() ran under.
void uvm_huvm_put_state(void)
{
    put_cpu_ptr(&g_uvm_huvm_node_state);
}

// Every slot's prefetch feedback history forgotten.
// LOCKING: g_uvm_huvm.lock held (read or write); takes the slots' feedback_lock (leaves).
static void feedback_reset_locked(void)
{
    NvU32 i;

    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        spin_lock(&g_uvm_huvm.slots[i].feedback_lock);
        g_uvm_huvm.slots[i].prefetch_used = 0;
        g_uvm_huvm.slots[i].prefetch_unused = 0;
        spin_unlock(&g_uvm_huvm.slots[i].feedback_lock);
    }
}

// LOCKING: the block lock is held.
uvm_va_space_t *uvm_huvm_block_va_space(uvm_va_block_t *va_block)
{
    return uvm_va_block_get_va_space_maybe_dead(va_block);
}

/* ---- Control surface ---- */

// GET_INFO's free memory, into the answer (the core is not written: GET_INFO runs under the lock taken shared,
// beside other readers). The walk of each GPU's free root chunks is bounded (HUVM_FREE_ROOT_CHUNKS_COUNTED).
// LOCKING: g_uvm_huvm.lock held for read (uvm_huvm_ioctl()); takes the GPUs' PMM list locks (leaves).
static void ops_refresh_free(void *ctx, const huvm_core_t *core, huvm_gpu_info_t *gpus)
{
    NvU32 i;

    for (i = 0; i < core->gpu_count; i++) {
        uvm_gpu_t *gpu = g_uvm_huvm.slots[i].gpu;

        if (gpu)
            gpus[i].free_bytes = min(uvm_huvm_gpu_free_bytes(gpu), core->gpus[i].memory_bytes);
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
        NvU32 slot = uvm_huvm_slot_of_gpu_locked(uvm_huvm_va_space_gpu_or_null(va_space, id));

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

// A new policy: the workers look at their reserves again, and the prefetch feedback starts afresh (its
// history was of another prefetch window).
// LOCKING: g_uvm_huvm.lock held for write (inside huvm_dispatch); takes the slots' feedback_lock (leaves) and
// schedules work.
static void ops_policy_changed(void *ctx, const huvm_core_t *core)
{
    NvU32 i;

    feedback_reset_locked();
    for (i = 0; i < HUVM_MAX_GPUS; i++)
        uvm_huvm_preevict_kick_slot_locked(&g_uvm_huvm.slots[i]);
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
// tests/vm/guest/test_malformed.py checks these answers on the loaded module.
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
// LOCKING: none held on entry (thread context from uvm_ioctl()). Takes g_uvm_huvm.lock around the core's
// dispatch: for read for the readers (huvm_cmd_reader(): GET_INFO, GET_POLICY, GET_STATS, which any user may
// call in a loop; taken shared they never exclude the eviction and fault paths, readers too), for write for
// the others, except LIST_VA_SPACES (its callback takes the VA spaces list lock, which ranks above the leaf
// huvm lock; the core reads no mutable state for that command).
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
    else if (huvm_cmd_reader(cmd)) {
        read_lock(&g_uvm_huvm.lock);
        huvm_dispatch(&g_uvm_huvm.core, &g_uvm_huvm_ops, NULL, &caller, cmd, params, size);
        read_unlock(&g_uvm_huvm.lock);
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
        if (g_uvm_huvm.slots[i].used && uvm_huvm_uuid_eq(&g_uvm_huvm.slots[i].uuid, uuid))
            return i;
    }
    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        if (!g_uvm_huvm.slots[i].used)
            return i;
    }
    // All slots have been used: take one whose GPU is gone (its counters are reset by the new UUID), but not
    // while data sits under its index: chunks harvested for the gone GPU carry it as their owner (huvm_owner),
    // and their release or give-back would be counted against the new GPU.
    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        if (!g_uvm_huvm.slots[i].gpu && !g_uvm_huvm.slots[i].worker_running &&
            !huvm_core_slot_in_use(&g_uvm_huvm.core, i))
            return i;
    }

    return HUVM_SLOT_NONE;
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
    if (gpu->parent->smc.enabled || uvm_huvm_cc_enabled(gpu))
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
    info.free_bytes = min(uvm_huvm_gpu_free_bytes(gpu), info.memory_bytes);
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
        memset(&slot->guest_traffic, 0, sizeof(slot->guest_traffic));
        spin_lock(&slot->feedback_lock);
        slot->prefetch_used = 0;
        slot->prefetch_unused = 0;
        spin_unlock(&slot->feedback_lock);
    }
    write_unlock(&g_uvm_huvm.lock);

    if (status != HUVM_NV_OK) {
        UVM_ERR_PRINT("huvm: GPU %s not managed: %s\n", uvm_gpu_name(gpu), nvstatusToString(status));
        return;
    }

    // The worker exists before the GPU becomes visible to the hooks (slot->gpu below).
    if (uvm_huvm_gpu_supports_eviction(gpu)) {
        ret = nv_kthread_q_init(&slot->preevict_q, "uvm_huvm_preevict");
        if (ret == 0) {
            nv_kthread_q_item_init(&slot->preevict_q_item, uvm_huvm_preevict_worker_entry, slot);
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

// UVM's link type as huvm's ABI names it. An explicit map, not equal values: 570 inserted
// UVM_GPU_LINK_NVLINK_5 before C2C, while HUVM_LINK_C2C keeps its value and HUVM_LINK_NVLINK_5 was
// appended. No default case: a link type a future branch adds fails the build here (-Werror=switch).
// LOCKING: none.
static NvU32 uvm_huvm_link_type(uvm_gpu_link_type_t uvm_link_type)
{
    switch (uvm_link_type) {
    case UVM_GPU_LINK_INVALID:  return HUVM_LINK_NONE;
    case UVM_GPU_LINK_PCIE:     return HUVM_LINK_PCIE;
    case UVM_GPU_LINK_NVLINK_1: return HUVM_LINK_NVLINK_1;
    case UVM_GPU_LINK_NVLINK_2: return HUVM_LINK_NVLINK_2;
    case UVM_GPU_LINK_NVLINK_3: return HUVM_LINK_NVLINK_3;
    case UVM_GPU_LINK_NVLINK_4: return HUVM_LINK_NVLINK_4;
#if HUVM_NV_BRANCH >= 580
    case UVM_GPU_LINK_NVLINK_5: return HUVM_LINK_NVLINK_5;
#endif
    case UVM_GPU_LINK_C2C: return HUVM_LINK_C2C;
    case UVM_GPU_LINK_MAX: break;
    }

    return HUVM_LINK_NONE;
}

// LOCKING: the global lock is held (535: init_peer_access(); 580: peers_init()); takes g_uvm_huvm.lock
// for write.
void uvm_huvm_add_peer(uvm_gpu_t *gpu0, uvm_gpu_t *gpu1, NvU32 uvm_link_type, NvU32 mbyte_per_s)
{
    huvm_link_t link;
    NvU32 a, b;

    uvm_assert_mutex_locked(&g_uvm_global.global_lock);
    UVM_ASSERT(uvm_link_type < UVM_GPU_LINK_MAX);

    if (!huvm_enabled())
        return;

    memset(&link, 0, sizeof(link));
    link.link_type = uvm_huvm_link_type((uvm_gpu_link_type_t)uvm_link_type);
    link.mbyte_per_s = mbyte_per_s;

    write_lock(&g_uvm_huvm.lock);
    a = uvm_huvm_slot_of_gpu_locked(gpu0);
    b = uvm_huvm_slot_of_gpu_locked(gpu1);
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
    index = uvm_huvm_slot_of_gpu_locked(gpu);
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

// nvidia.ko's version against the one this module was built for, asked as nvidia-modeset asks it:
// nvidia_get_rm_ops() answers NV_ERR_GENERIC and its own version when they differ. A patched nvidia-uvm
// must never run next to another nvidia.ko (the nvUvmInterface structures change even inside a branch,
// and a build without nvidia.ko's Module.symvers has no CRCs to catch it). One kernel log line names both.
// LOCKING: none (module load, first thing in uvm_init()).
NV_STATUS uvm_huvm_check_nvidia_version(void)
{
    // nvidia.ko copies its whole table when the versions match: room for a larger one than this tree's
    // (when they differ it writes version_string only).
    union {
        nvidia_modeset_rm_ops_t ops;
        NvU8 room[512];
    } rm_ops;
    NV_STATUS status;

    BUILD_BUG_ON(sizeof(rm_ops.ops) > sizeof(rm_ops.room) / 2);

    memset(&rm_ops, 0, sizeof(rm_ops));
    rm_ops.ops.version_string = NV_VERSION_STRING;
    status = nvidia_get_rm_ops(&rm_ops.ops);
    if (status == NV_OK)
        return NV_OK;

    // One line, "nvidia-uvm: Version mismatch: ..." (uvm_linux.h's pr_fmt adds the prefix).
    pr_err("Version mismatch: nvidia.ko(%s) nvidia-uvm.ko(%s), huvm refuses to load\n",
           rm_ops.ops.version_string ? rm_ops.ops.version_string : "?",
           NV_VERSION_STRING);

    return NV_ERR_NOT_COMPATIBLE;
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
        spin_lock_init(&g_uvm_huvm.slots[i].feedback_lock);
        nv_kthread_q_item_init(&g_uvm_huvm.slots[i].pf_q_item, uvm_huvm_prefetch_worker_entry, &g_uvm_huvm.slots[i]);
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
