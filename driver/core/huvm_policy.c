/*
 * huvm: policy model, presets, validation and atomic apply. SPDX-License-Identifier: MIT
 *
 * The values of the presets and the reasons for them are in docs/policy.md (keep both in sync).
 */
#include "huvm_internal.h"

#define HUVM_GIB                        (1ULL << 30)

const char *huvm_preset_name(uint32_t preset)
{
    switch (preset) {
    case HUVM_PRESET_STOCK:  return "stock";
    case HUVM_PRESET_ATC22:  return "huvm-atc22";
    case HUVM_PRESET_HUVM:   return "huvm";
    case HUVM_PRESET_CUSTOM: return "custom";
    default:                 return "unknown";
    }
}

const char *huvm_reason_name(uint32_t reason)
{
    switch (reason) {
    case HUVM_REASON_PEER:         return "peer";
    case HUVM_REASON_TIER_OFF:     return "tier_off";
    case HUVM_REASON_PMA_CONTEXT:  return "pma_context";
    case HUVM_REASON_GUEST_CHUNK:  return "guest_chunk";
    case HUVM_REASON_NO_PEER:      return "no_peer";
    case HUVM_REASON_PEER_FULL:    return "peer_full";
    case HUVM_REASON_HYSTERESIS:   return "hysteresis";
    case HUVM_REASON_ALLOC_FAILED: return "alloc_failed";
    case HUVM_REASON_COPY_FAILED:  return "copy_failed";
    case HUVM_REASON_GIVEBACK:     return "giveback";
    case HUVM_REASON_LENDER_BUSY:  return "lender_busy";
    default:                       return "unknown";
    }
}

/* The node-wide settings of huvm_policy_t, from preset to hysteresis_ms, in the same order. */
typedef struct {
    uint32_t preset;
    uint32_t peer_select;
    uint32_t nvlink_only;
    uint32_t peer_usage_max_pct;
    uint32_t preevict_chunks;
    uint32_t preevict_batch;
    uint32_t fetch_mode;
    uint32_t prefetch_mode;
    uint32_t prefetch_chunks;
    uint32_t prefetch_stride;
    uint32_t hysteresis_ms;
} huvm_node_settings_t;

/* Every field at the same offset from preset in both, and nothing else in the range: the raw copies
 * below (NODE_SETTINGS) are field-by-field copies. */
#define NODE_SETTING_MIRRORS(f)                                                                        \
    _Static_assert(offsetof(huvm_policy_t, f) - offsetof(huvm_policy_t, preset) ==                     \
                   offsetof(huvm_node_settings_t, f), "huvm_node_settings_t." #f " mirrors huvm_policy_t")
NODE_SETTING_MIRRORS(preset);
NODE_SETTING_MIRRORS(peer_select);
NODE_SETTING_MIRRORS(nvlink_only);
NODE_SETTING_MIRRORS(peer_usage_max_pct);
NODE_SETTING_MIRRORS(preevict_chunks);
NODE_SETTING_MIRRORS(preevict_batch);
NODE_SETTING_MIRRORS(fetch_mode);
NODE_SETTING_MIRRORS(prefetch_mode);
NODE_SETTING_MIRRORS(prefetch_chunks);
NODE_SETTING_MIRRORS(prefetch_stride);
NODE_SETTING_MIRRORS(hysteresis_ms);
_Static_assert(offsetof(huvm_policy_t, gpu_count) - offsetof(huvm_policy_t, preset) ==
               sizeof(huvm_node_settings_t), "node settings mirror huvm_policy_t");

#define NODE_SETTINGS(p)    ((uint8_t *)(p) + offsetof(huvm_policy_t, preset))
#define NODE_SETTINGS_C(p)  ((const uint8_t *)(p) + offsetof(huvm_policy_t, preset))

/* Smallest memory, in chunks, of the GPUs the node knows (0xffffffff when none is known). */
static uint32_t smallest_gpu_chunks(const huvm_core_t *core)
{
    uint64_t min_chunks = 0xffffffffULL;
    uint32_t i;

    for (i = 0; core && i < core->gpu_count && i < HUVM_MAX_GPUS; i++) {
        uint64_t c = core->gpus[i].memory_bytes / HUVM_CHUNK_SIZE;

        if (core->gpus[i].memory_bytes != 0 && c < min_chunks)
            min_chunks = c;
    }
    return (uint32_t)min_chunks;
}

/* Node-wide settings of a preset (docs/policy.md, "Presets"). A preset's pre-eviction reserve is cut to
 * the smallest known GPU's memory, the bound validation puts on it, so that every preset is valid on every
 * node (only GPUs under 128 MiB are affected; the decision keeps at most 1/16 of a GPU anyway). */
static void preset_settings(uint32_t preset, const huvm_core_t *core, huvm_node_settings_t *p)
{
    uint32_t fit;

    huvm_memset(p, 0, sizeof(*p));
    p->preset = preset;
    p->nvlink_only = 1;
    p->fetch_mode = HUVM_FETCH_MIGRATE;

    switch (preset) {
    case HUVM_PRESET_ATC22:
        /* casys-kaist/HUVM driver/diff: UVM_ENOUGH_MEM_THRESHOLD_RATE 90 -> 85; fewest harvested chunks;
         * uvm_reserve_chunk_level 5 (x10 chunks); uvm_prefetch_flags 3, _num_chunk 16, _stride 2. */
        p->peer_select = HUVM_PEER_SELECT_FEWEST_LENT;
        p->peer_usage_max_pct = 85;
        p->preevict_chunks = 50;
        p->preevict_batch = 50;
        p->prefetch_mode = HUVM_PREFETCH_TWO_STAGE;
        p->prefetch_chunks = 16;
        p->prefetch_stride = 2;
        p->hysteresis_ms = 0;
        break;
    case HUVM_PRESET_HUVM:
        p->peer_select = HUVM_PEER_SELECT_FASTEST_LINK;
        p->peer_usage_max_pct = 90;
        /* 64 chunks (128 MiB), refilled in one pass: measured in the simulator (docs/policy.md). */
        p->preevict_chunks = 64;
        p->preevict_batch = 64;
        /* The prototype's two stages, stride 2 (the tuning half: 2.13x over stock against MULTIPATH's 1.85x
         * once the prototype's preset prefetched like the prototype; docs/policy.md). */
        p->prefetch_mode = HUVM_PREFETCH_TWO_STAGE;
        p->prefetch_chunks = 16;
        p->prefetch_stride = 2;
        /* 5 ms: with two-stage prefetch bringing chunks back ahead of need, 10 ms kept a stream that cycles
         * through a peer off it (a100/streaming/1.05 on the tuning half: 10.8x against 15.1x); 0, 2 and 5 ms
         * measured alike there, 5 keeps the most anti-ping-pong. */
        p->hysteresis_ms = 5;
        break;
    case HUVM_PRESET_STOCK:
    default:
        p->peer_select = HUVM_PEER_SELECT_MOST_FREE;
        p->peer_usage_max_pct = 100;
        p->preevict_chunks = 0;
        p->preevict_batch = 1;
        p->prefetch_mode = HUVM_PREFETCH_OFF;
        p->prefetch_chunks = 0;
        p->prefetch_stride = 1;
        p->hysteresis_ms = 0;
        break;
    }
    fit = smallest_gpu_chunks(core);
    if (p->preevict_chunks > fit) {
        p->preevict_chunks = fit;
        if (p->preevict_batch > fit)
            p->preevict_batch = fit ? fit : 1;
    }
}

static void preset_node(uint32_t preset, const huvm_core_t *core, huvm_policy_t *p)
{
    huvm_node_settings_t n;

    preset_settings(preset, core, &n);
    huvm_memcpy(NODE_SETTINGS(p), &n, sizeof(n));
}

int huvm_policy_fit_node(huvm_core_t *core)
{
    huvm_node_settings_t n;
    huvm_policy_t *p = &core->policy;

    if (p->preset >= HUVM_PRESET_CUSTOM)
        return 0;
    preset_settings(p->preset, core, &n);
    if (p->preevict_chunks == n.preevict_chunks && p->preevict_batch == n.preevict_batch)
        return 0;
    p->preevict_chunks = n.preevict_chunks;
    p->preevict_batch = n.preevict_batch;
    return 1;
}

/* huvm preset's lend reserve: 5% of the GPU's memory, at least min(1 GiB, 1/16 of it) (1 GiB is 1/16 of a
 * 16 GiB V100; smaller GPUs keep the same share). */
static uint64_t huvm_default_reserve(uint64_t memory_bytes)
{
    uint64_t r, floor;

    if (memory_bytes == 0)
        return HUVM_GIB;
    r = memory_bytes / 20;
    floor = memory_bytes / 16 < HUVM_GIB ? memory_bytes / 16 : HUVM_GIB;
    return r > floor ? r : floor;
}

/* Per-GPU defaults of a preset for a GPU with memory_bytes (0 = unknown). */
static void preset_gpu(uint32_t preset, const uint8_t *uuid, uint64_t memory_bytes, huvm_gpu_policy_t *e)
{
    huvm_memset(e, 0, sizeof(*e));
    huvm_memcpy(e->uuid, uuid, HUVM_UUID_LEN);
    e->lend_limit_bytes = HUVM_UNLIMITED;
    switch (preset) {
    case HUVM_PRESET_ATC22:
        e->role = HUVM_ROLE_BOTH;
        e->lend_reserve_bytes = 0;
        break;
    case HUVM_PRESET_HUVM:
        e->role = HUVM_ROLE_BOTH;
        e->flags = HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE | HUVM_GPU_POLICY_LEND_ABOVE_PEAK |
                   HUVM_GPU_POLICY_PREFETCH_FEEDBACK;
        e->lend_reserve_bytes = huvm_default_reserve(memory_bytes);
        break;
    case HUVM_PRESET_STOCK:
    default:
        e->role = HUVM_ROLE_NONE;
        e->lend_reserve_bytes = 0;
        break;
    }
}

static int find_entry(const huvm_policy_t *p, const uint8_t *uuid)
{
    uint32_t i;

    for (i = 0; i < p->gpu_count && i < HUVM_MAX_GPUS; i++) {
        if (huvm_uuid_eq(p->gpus[i].uuid, uuid))
            return (int)i;
    }
    return -1;
}

static int find_slot(const huvm_core_t *core, const uint8_t *uuid)
{
    uint32_t i;

    for (i = 0; i < core->gpu_count; i++) {
        if (!huvm_uuid_is_zero(core->gpus[i].uuid) && huvm_uuid_eq(core->gpus[i].uuid, uuid))
            return (int)i;
    }
    return -1;
}

void huvm_policy_refresh_slots(huvm_core_t *core)
{
    uint32_t i;

    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        if (i < core->gpu_count && !huvm_uuid_is_zero(core->gpus[i].uuid))
            core->policy_slot[i] = find_entry(&core->policy, core->gpus[i].uuid);
        else
            core->policy_slot[i] = -1;
    }
}

const huvm_gpu_policy_t *huvm_policy_gpu(const huvm_core_t *core, uint32_t gpu)
{
    int32_t slot;

    if (gpu >= core->gpu_count || gpu >= HUVM_MAX_GPUS)
        return NULL;
    slot = core->policy_slot[gpu];
    if (slot < 0 || slot >= (int32_t)core->policy.gpu_count)
        return NULL;
    return &core->policy.gpus[slot];
}

/* The preset whose per-GPU defaults a new entry gets: the named preset; for a custom policy, the huvm
 * defaults if the peer tier is in use on any GPU, else stock's (role NONE). */
static uint32_t default_entry_preset(const huvm_policy_t *p)
{
    uint32_t i;

    if (p->preset != HUVM_PRESET_CUSTOM)
        return p->preset;
    for (i = 0; i < p->gpu_count && i < HUVM_MAX_GPUS; i++) {
        if (p->gpus[i].role != HUVM_ROLE_NONE)
            return HUVM_PRESET_HUVM;
    }
    return HUVM_PRESET_STOCK;
}

int huvm_policy_ensure_entry(huvm_core_t *core, const uint8_t *uuid, uint64_t memory_bytes)
{
    huvm_policy_t *p = &core->policy;
    uint32_t i, idx;

    if (find_entry(p, uuid) >= 0)
        return 0;
    if (p->gpu_count < HUVM_MAX_GPUS) {
        idx = p->gpu_count++;
    }
    else {
        /* Table full: reuse the first entry of a GPU no slot knows any more. One always exists, since
         * there are HUVM_MAX_GPUS slots and the new UUID is one of them. */
        idx = HUVM_MAX_GPUS;
        for (i = 0; i < HUVM_MAX_GPUS; i++) {
            if (find_slot(core, p->gpus[i].uuid) < 0) {
                idx = i;
                break;
            }
        }
        HUVM_ASSERT(idx < HUVM_MAX_GPUS);
        if (idx >= HUVM_MAX_GPUS)
            return 0;
    }
    preset_gpu(default_entry_preset(p), uuid, memory_bytes, &p->gpus[idx]);
    return 1;
}

huvm_status_t huvm_policy_preset(uint32_t preset, const huvm_core_t *core, huvm_policy_t *policy)
{
    uint32_t i;

    if (!policy || preset >= HUVM_PRESET_CUSTOM)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    huvm_memset(policy, 0, sizeof(*policy));
    preset_node(preset, core, policy);
    if (!core)
        return HUVM_NV_OK;
    for (i = 0; i < core->gpu_count && i < HUVM_MAX_GPUS; i++) {
        if (huvm_uuid_is_zero(core->gpus[i].uuid))
            continue;
        preset_gpu(preset, core->gpus[i].uuid, core->gpus[i].memory_bytes, &policy->gpus[policy->gpu_count]);
        policy->gpu_count++;
    }
    return HUVM_NV_OK;
}

void huvm_core_init(huvm_core_t *core, uint32_t backend, uint32_t preset)
{
    uint32_t i;

    huvm_memset(core, 0, sizeof(*core));
    core->backend = backend;
    if (preset >= HUVM_PRESET_CUSTOM)
        preset = HUVM_PRESET_HUVM;
    preset_node(preset, NULL, &core->policy);          /* no GPUs yet: fitted as they come */
    core->policy.generation = 1;
    for (i = 0; i < HUVM_MAX_GPUS; i++)
        core->policy_slot[i] = -1;
}

/* Static facts of one GPU: the checks TEST_SET_NODE and huvm_core_set_gpu share. */
static huvm_status_t check_gpu_info(const huvm_gpu_info_t *info, uint32_t *field_in_gpu)
{
    if (huvm_uuid_is_zero(info->uuid)) {
        *field_in_gpu = HUVM_FIELD_GPU_UUID;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    if (info->memory_bytes == 0 || info->memory_bytes > HUVM_MAX_MEMORY_BYTES) {
        *field_in_gpu = HUVM_FIELD_GPU_MEMORY;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    if (info->free_bytes > info->memory_bytes) {
        *field_in_gpu = HUVM_FIELD_GPU_FREE;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    if ((info->flags & ~(uint32_t)HUVM_GPU_FLAGS_KNOWN) || info->pad != 0 ||
        info->pcie_mbyte_per_s > HUVM_MAX_MBYTE_PER_S) {
        *field_in_gpu = HUVM_FIELD_GPU_FLAGS;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    return HUVM_NV_OK;
}

huvm_status_t huvm_core_check_gpu_info(const huvm_gpu_info_t *info, uint32_t *field_in_gpu)
{
    return check_gpu_info(info, field_in_gpu);
}

huvm_status_t huvm_core_set_gpu(huvm_core_t *core, uint32_t gpu, const huvm_gpu_info_t *info)
{
    uint32_t field = HUVM_FIELD_NONE;
    huvm_status_t status;
    int other;

    if (!core || !info || gpu >= HUVM_MAX_GPUS)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    status = check_gpu_info(info, &field);
    if (status != HUVM_NV_OK)
        return status;
    other = find_slot(core, info->uuid);
    if (other >= 0 && (uint32_t)other != gpu)
        return HUVM_NV_ERR_INVALID_ARGUMENT;    /* the UUID is another slot's */

    huvm_memcpy(&core->gpus[gpu], info, sizeof(*info));
    core->gpus[gpu].name[HUVM_NAME_LEN - 1] = '\0';
    if (gpu >= core->gpu_count)
        core->gpu_count = gpu + 1;
    if (huvm_policy_ensure_entry(core, info->uuid, info->memory_bytes) | huvm_policy_fit_node(core))
        core->policy.generation++;
    huvm_policy_refresh_slots(core);
    return HUVM_NV_OK;
}

void huvm_core_remove_gpu(huvm_core_t *core, uint32_t gpu)
{
    if (!core || gpu >= core->gpu_count)
        return;
    core->gpus[gpu].flags &= ~(uint32_t)HUVM_GPU_FLAG_PRESENT;
}

huvm_status_t huvm_core_check_link(uint32_t a, uint32_t b, const huvm_link_t *link)
{
    if (link->link_type >= HUVM_LINK_COUNT || link->mbyte_per_s > HUVM_MAX_MBYTE_PER_S ||
        link->link_count > 64)
        return HUVM_NV_ERR_OUT_OF_RANGE;
    if (a == b && link->link_type != HUVM_LINK_NONE)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    if (link->link_type == HUVM_LINK_NONE && (link->mbyte_per_s != 0 || link->link_count != 0))
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    return HUVM_NV_OK;
}

huvm_status_t huvm_core_set_link(huvm_core_t *core, uint32_t a, uint32_t b, const huvm_link_t *link)
{
    huvm_status_t status;

    if (!core || !link || a >= HUVM_MAX_GPUS || b >= HUVM_MAX_GPUS)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    status = huvm_core_check_link(a, b, link);
    if (status != HUVM_NV_OK)
        return status;
    /* Links are symmetric (NVLink and PCIe line rates are per direction). */
    core->links[a][b] = *link;
    core->links[b][a] = *link;
    return HUVM_NV_OK;
}

/* Capacity of the GPU with this UUID if the node knows it (present or absent slot), else 0. */
static uint64_t known_memory(const huvm_core_t *core, const uint8_t *uuid)
{
    int slot = find_slot(core, uuid);

    return slot >= 0 ? core->gpus[slot].memory_bytes : 0;
}

huvm_status_t huvm_policy_validate(const huvm_core_t *core, const huvm_policy_t *policy, uint32_t *error_field)
{
    uint32_t dummy, i, j;

    if (!error_field)
        error_field = &dummy;
    *error_field = HUVM_FIELD_NONE;
    if (!core || !policy)
        return HUVM_NV_ERR_INVALID_ARGUMENT;

#define REFUSE(status, field) do { *error_field = (field); return (status); } while (0)
    if (policy->preset >= HUVM_PRESET_COUNT)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PRESET);
    if (policy->peer_select >= HUVM_PEER_SELECT_COUNT)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PEER_SELECT);
    if (policy->nvlink_only > 1)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_NVLINK_ONLY);
    if (policy->peer_usage_max_pct < HUVM_PEER_USAGE_PCT_MIN || policy->peer_usage_max_pct > HUVM_PEER_USAGE_PCT_MAX)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PEER_USAGE_MAX_PCT);
    if (policy->preevict_chunks > HUVM_PREEVICT_MAX_CHUNKS)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREEVICT_CHUNKS);
    if (policy->preevict_batch < 1 || policy->preevict_batch > HUVM_PREEVICT_MAX_BATCH)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREEVICT_BATCH);
    if (policy->fetch_mode >= HUVM_FETCH_COUNT)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_FETCH_MODE);
    if (policy->prefetch_mode >= HUVM_PREFETCH_COUNT)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREFETCH_MODE);
    if (policy->prefetch_chunks > HUVM_PREFETCH_MAX_CHUNKS)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREFETCH_CHUNKS);
    if (policy->prefetch_mode != HUVM_PREFETCH_OFF && policy->prefetch_chunks == 0)
        REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREFETCH_CHUNKS);    /* prefetch on, of nothing */
    if (policy->prefetch_stride < 1 || policy->prefetch_stride > HUVM_PREFETCH_MAX_STRIDE)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PREFETCH_STRIDE);
    if (policy->prefetch_chunks * policy->prefetch_stride > HUVM_PREFETCH_MAX_SPAN_CHUNKS)
        REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREFETCH_STRIDE);   /* window beyond 1 GiB */
    if (policy->hysteresis_ms > HUVM_HYSTERESIS_MAX_MS)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_HYSTERESIS_MS);
    if (policy->gpu_count > HUVM_MAX_GPUS)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_GPU_COUNT);

    /* A pre-eviction reserve must fit in every GPU the node knows (it applies to every GPU). */
    for (i = 0; i < core->gpu_count; i++) {
        uint64_t mem = core->gpus[i].memory_bytes;

        if (mem != 0 && (uint64_t)policy->preevict_chunks * HUVM_CHUNK_SIZE > mem)
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREEVICT_CHUNKS);
    }

    for (i = 0; i < policy->gpu_count; i++) {
        const huvm_gpu_policy_t *e = &policy->gpus[i];
        uint64_t mem;

        if (huvm_uuid_is_zero(e->uuid))
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_UUID));
        for (j = 0; j < i; j++) {
            if (huvm_uuid_eq(policy->gpus[j].uuid, e->uuid))
                REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_UUID));
        }
        /* Known UUIDs only: a GPU of the node (present or not) or an entry already in the table (entries
         * outlive GPUs). */
        if (find_slot(core, e->uuid) < 0 && find_entry(&core->policy, e->uuid) < 0)
            REFUSE(HUVM_NV_ERR_GPU_UUID_NOT_FOUND, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_UUID));
        if (e->role >= HUVM_ROLE_COUNT)
            REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_ROLE));
        if (e->flags & ~(uint32_t)HUVM_GPU_POLICY_FLAGS_KNOWN)
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_FLAGS));
        /* A lender with nothing to lend is a contradiction, not a way to stop lending (role harvester/none). */
        if ((e->role == HUVM_ROLE_LENDER || e->role == HUVM_ROLE_BOTH) && e->lend_limit_bytes == 0)
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_LEND_LIMIT));
        mem = known_memory(core, e->uuid);
        if (mem != 0 && e->lend_reserve_bytes > mem)
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_LEND_RESERVE));
        if (mem == 0 && e->lend_reserve_bytes > HUVM_MAX_MEMORY_BYTES)
            REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_LEND_RESERVE));
        /* A budget below one chunk per window would lend nothing: use role harvester/none for that. */
        if (e->lend_traffic_mbyte_per_s != 0 &&
            (e->lend_traffic_mbyte_per_s < HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S ||
             e->lend_traffic_mbyte_per_s > HUVM_MAX_MBYTE_PER_S))
            REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_LEND_TRAFFIC));
        if (e->pad != 0)
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_RESERVED);
    }
#undef REFUSE
    return HUVM_NV_OK;
}

/* Does p equal preset (node-wide fields and every entry's per-GPU defaults)? */
static int policy_is_preset(const huvm_core_t *core, const huvm_policy_t *p, uint32_t preset)
{
    huvm_node_settings_t n;
    huvm_gpu_policy_t e;
    uint32_t i;

    if (preset >= HUVM_PRESET_CUSTOM)
        return 0;
    preset_settings(preset, core, &n);
    if (huvm_memcmp(&n, NODE_SETTINGS_C(p), sizeof(n)) != 0)
        return 0;
    for (i = 0; i < p->gpu_count; i++) {
        preset_gpu(preset, p->gpus[i].uuid, known_memory(core, p->gpus[i].uuid), &e);
        if (huvm_memcmp(&e, &p->gpus[i], sizeof(e)) != 0)
            return 0;
    }
    return 1;
}

huvm_status_t huvm_policy_apply(huvm_core_t *core, const huvm_policy_t *policy, uint32_t *error_field)
{
    huvm_policy_t staged;
    huvm_status_t status;
    uint32_t dummy, i;
    int idx;

    if (!error_field)
        error_field = &dummy;
    *error_field = HUVM_FIELD_NONE;
    if (!core || !policy)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    if (policy->generation != 0 && policy->generation != core->policy.generation) {
        *error_field = HUVM_FIELD_GENERATION;
        return HUVM_NV_ERR_STATE_IN_USE;
    }
    status = huvm_policy_validate(core, policy, error_field);
    if (status != HUVM_NV_OK)
        return status;

    /* Stage: node-wide fields replace, listed entries replace by UUID, unlisted entries stay. */
    huvm_memcpy(&staged, &core->policy, sizeof(staged));
    huvm_memcpy(&staged, policy, offsetof(huvm_policy_t, gpu_count));
    staged.gpu_count = core->policy.gpu_count;
    for (i = 0; i < policy->gpu_count; i++) {
        idx = find_entry(&staged, policy->gpus[i].uuid);
        if (idx < 0) {
            /* A UUID of a node slot without an entry cannot happen (set_gpu adds one), but stay safe. */
            if (staged.gpu_count >= HUVM_MAX_GPUS) {
                *error_field = HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_UUID);
                return HUVM_NV_ERR_NO_MEMORY;
            }
            idx = (int)staged.gpu_count++;
        }
        staged.gpus[idx] = policy->gpus[i];
    }
    staged.generation = core->policy.generation + 1;
    if (!policy_is_preset(core, &staged, staged.preset))
        staged.preset = HUVM_PRESET_CUSTOM;

    /* Commit. */
    huvm_memcpy(&core->policy, &staged, sizeof(staged));
    huvm_policy_refresh_slots(core);
    return HUVM_NV_OK;
}
