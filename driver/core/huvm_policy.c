/*
 * huvm: policy model, presets, validation and atomic apply. SPDX-License-Identifier: MIT
 *
 * The fields, their ranges and the presets' values are the ABI header's policy field table (HUVM_POLICY_FIELDS,
 * HUVM_GPU_POLICY_FIELDS); the reasons for the values are in docs/policy.md ("Presets").
 */
#include "huvm_internal.h"

#define HUVM_GIB (1ULL << 30)

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

/* The descriptors of HUVM_POLICY_FIELDS and HUVM_GPU_POLICY_FIELDS (uvm_huvm_ioctl.h). */
#define NODE_FIELD(id, member, type, unit, lo, hi, special, choices, stock, atc22, huvm) \
    { #member,                                                                           \
      choices,                                                                           \
      HUVM_POLICY_SCOPE_NODE,                                                            \
      HUVM_FIELD_##id,                                                                   \
      offsetof(huvm_policy_t, member),                                                   \
      sizeof(type),                                                                      \
      HUVM_UNIT_##unit,                                                                  \
      special,                                                                           \
      lo,                                                                                \
      hi,                                                                                \
      { stock, atc22, huvm } },
#define GPU_FIELD(id, member, type, unit, lo, hi, special, choices, stock, atc22, huvm) \
    { #member,                                                                          \
      choices,                                                                          \
      HUVM_POLICY_SCOPE_GPU,                                                            \
      HUVM_FIELD_GPU_##id,                                                              \
      offsetof(huvm_gpu_policy_t, member),                                              \
      sizeof(type),                                                                     \
      HUVM_UNIT_##unit,                                                                 \
      special,                                                                          \
      lo,                                                                               \
      hi,                                                                               \
      { stock, atc22, huvm } },
static const huvm_policy_field_t policy_fields[] = { HUVM_POLICY_FIELDS(NODE_FIELD) HUVM_GPU_POLICY_FIELDS(GPU_FIELD) };
#define POLICY_FIELD_COUNT (sizeof(policy_fields) / sizeof(policy_fields[0]))
_Static_assert(HUVM_PRESET_CUSTOM == 3, "huvm_policy_field_t.preset[] has one value per preset");

/* Two rows with one error_field code do not compile (duplicate case values). */
#define FIELD_CASE(id, member, ...)     case HUVM_FIELD_##id:
#define GPU_FIELD_CASE(id, member, ...) case HUVM_FIELD_GPU_##id:
static __attribute__((unused)) int policy_field_codes_unique(uint32_t node, uint32_t gpu)
{
    switch (node) {
        HUVM_POLICY_FIELDS(FIELD_CASE)
        break;
    }
    switch (gpu) {
        HUVM_GPU_POLICY_FIELDS(GPU_FIELD_CASE)
        break;
    }
    return 0;
}

uint32_t huvm_policy_field_count(void)
{
    return POLICY_FIELD_COUNT;
}

const huvm_policy_field_t *huvm_policy_field(uint32_t index)
{
    return index < POLICY_FIELD_COUNT ? &policy_fields[index] : NULL;
}

uint64_t huvm_policy_field_get(const huvm_policy_field_t *d, const void *base)
{
    const uint8_t *p = (const uint8_t *)base + d->offset;
    uint32_t v32;
    uint64_t v64;

    if (d->size == sizeof(v64)) {
        huvm_memcpy(&v64, p, sizeof(v64));
        return v64;
    }
    huvm_memcpy(&v32, p, sizeof(v32));
    return v32;
}

static void field_set(const huvm_policy_field_t *d, void *base, uint64_t value)
{
    uint8_t *p = (uint8_t *)base + d->offset;
    uint32_t v32 = (uint32_t)value;

    if (d->size == sizeof(value))
        huvm_memcpy(p, &value, sizeof(value));
    else
        huvm_memcpy(p, &v32, sizeof(v32));
}

/* The generic check of one value against its row: OUT_OF_RANGE outside min..max (0 allowed when ZERO_OFF),
 * INVALID_ARGUMENT for unknown flag bits. */
static huvm_status_t check_field(const huvm_policy_field_t *d, uint64_t v)
{
    if (d->unit == HUVM_UNIT_FLAGS)
        return (v & ~d->max) ? HUVM_NV_ERR_INVALID_ARGUMENT : HUVM_NV_OK;
    if (v == 0 && (d->special & HUVM_POLICY_FIELD_ZERO_OFF))
        return HUVM_NV_OK;
    if (v < d->min || v > d->max)
        return HUVM_NV_ERR_OUT_OF_RANGE;
    return HUVM_NV_OK;
}

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

/* A preset's pre-eviction reserve and batch on this node. The reserve is cut to the smallest known GPU's
 * memory, the bound validation puts on it, so that every preset is valid on every node (only GPUs under
 * 128 MiB are affected; the decision keeps at most 1/16 of a GPU anyway). */
static uint64_t node_preset(uint32_t offset, uint32_t preset)
{
    uint32_t i;

    for (i = 0; i < POLICY_FIELD_COUNT; i++) {
        if (policy_fields[i].scope == HUVM_POLICY_SCOPE_NODE && policy_fields[i].offset == offset)
            return policy_fields[i].preset[preset];
    }
    return 0;
}

static void preset_preevict(uint32_t preset, const huvm_core_t *core, uint32_t *chunks, uint32_t *batch)
{
    uint32_t fit = smallest_gpu_chunks(core);

    *chunks = (uint32_t)node_preset(offsetof(huvm_policy_t, preevict_chunks), preset);
    *batch = (uint32_t)node_preset(offsetof(huvm_policy_t, preevict_batch), preset);
    if (*chunks > fit) {
        *chunks = fit;
        if (*batch > fit)
            *batch = fit ? fit : 1;
    }
}

/* A preset's value of node field d on this node (the table's, pre-eviction fitted to the node). */
static uint64_t node_preset_value(const huvm_policy_field_t *d, uint32_t preset, const huvm_core_t *core)
{
    uint32_t chunks, batch;

    if (d->offset == offsetof(huvm_policy_t, preevict_chunks) || d->offset == offsetof(huvm_policy_t, preevict_batch)) {
        preset_preevict(preset, core, &chunks, &batch);
        return d->offset == offsetof(huvm_policy_t, preevict_chunks) ? chunks : batch;
    }
    return d->preset[preset];
}

/* Node-wide settings of a preset (docs/policy.md, "Presets"): the table's preset columns. */
static void preset_node(uint32_t preset, const huvm_core_t *core, huvm_policy_t *p)
{
    uint32_t i;

    if (preset >= HUVM_PRESET_CUSTOM)
        preset = HUVM_PRESET_STOCK;
    p->preset = preset;
    for (i = 0; i < POLICY_FIELD_COUNT; i++) {
        if (policy_fields[i].scope == HUVM_POLICY_SCOPE_NODE)
            field_set(&policy_fields[i], p, node_preset_value(&policy_fields[i], preset, core));
    }
}

int huvm_policy_fit_node(huvm_core_t *core)
{
    huvm_policy_t *p = &core->policy;
    uint32_t chunks, batch;

    if (p->preset >= HUVM_PRESET_CUSTOM)
        return 0;
    preset_preevict(p->preset, core, &chunks, &batch);
    if (p->preevict_chunks == chunks && p->preevict_batch == batch)
        return 0;
    p->preevict_chunks = chunks;
    p->preevict_batch = batch;
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

/* Per-GPU defaults of a preset for a GPU with memory_bytes (0 = unknown): the table's preset columns; huvm's
 * lend reserve is the GPU's share (huvm_default_reserve). */
static void preset_gpu(uint32_t preset, const uint8_t *uuid, uint64_t memory_bytes, huvm_gpu_policy_t *e)
{
    uint32_t i;

    if (preset >= HUVM_PRESET_CUSTOM)
        preset = HUVM_PRESET_STOCK;
    huvm_memset(e, 0, sizeof(*e));
    huvm_memcpy(e->uuid, uuid, HUVM_UUID_LEN);
    for (i = 0; i < POLICY_FIELD_COUNT; i++) {
        if (policy_fields[i].scope == HUVM_POLICY_SCOPE_GPU)
            field_set(&policy_fields[i], e, policy_fields[i].preset[preset]);
    }
    if (preset == HUVM_PRESET_HUVM)
        e->lend_reserve_bytes = huvm_default_reserve(memory_bytes);
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

    /* The rates are facts about the GPU in the slot (SET_GPU_RATES): another GPU in it starts unknown. */
    if (!huvm_uuid_eq(core->gpus[gpu].uuid, info->uuid)) {
        core->hbm_mbyte_per_s[gpu] = 0;
        core->giveback_mbyte_per_s[gpu] = 0;
    }
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
    if (link->link_type >= HUVM_LINK_COUNT || link->mbyte_per_s > HUVM_MAX_MBYTE_PER_S || link->link_count > 64)
        return HUVM_NV_ERR_OUT_OF_RANGE;
    if (a == b && link->link_type != HUVM_LINK_NONE)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    if (link->link_type == HUVM_LINK_NONE && (link->mbyte_per_s != 0 || link->link_count != 0))
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    return HUVM_NV_OK;
}

huvm_status_t huvm_core_set_gpu_rates(huvm_core_t *core,
                                      uint32_t gpu,
                                      uint32_t hbm_mbyte_per_s,
                                      uint32_t giveback_mbyte_per_s)
{
    if (!core || gpu >= HUVM_MAX_GPUS)
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    if (hbm_mbyte_per_s > HUVM_MAX_MBYTE_PER_S || giveback_mbyte_per_s > HUVM_MAX_MBYTE_PER_S)
        return HUVM_NV_ERR_OUT_OF_RANGE;
    core->hbm_mbyte_per_s[gpu] = hbm_mbyte_per_s;
    core->giveback_mbyte_per_s[gpu] = giveback_mbyte_per_s;
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
    huvm_status_t status;
    uint32_t dummy, i, j, k;

    if (!error_field)
        error_field = &dummy;
    *error_field = HUVM_FIELD_NONE;
    if (!core || !policy)
        return HUVM_NV_ERR_INVALID_ARGUMENT;

#define REFUSE(status, field)   \
    do {                        \
        *error_field = (field); \
        return (status);        \
    } while (0)
    if (policy->preset >= HUVM_PRESET_COUNT)
        REFUSE(HUVM_NV_ERR_OUT_OF_RANGE, HUVM_FIELD_PRESET);
    /* Each node field against its row, in struct order; the cross-field rules right after the field they
     * name. */
    for (k = 0; k < POLICY_FIELD_COUNT; k++) {
        const huvm_policy_field_t *d = &policy_fields[k];

        if (d->scope != HUVM_POLICY_SCOPE_NODE)
            continue;
        status = check_field(d, huvm_policy_field_get(d, policy));
        if (status != HUVM_NV_OK)
            REFUSE(status, d->field);
        if (d->field == HUVM_FIELD_PREFETCH_CHUNKS && policy->prefetch_mode != HUVM_PREFETCH_OFF &&
            policy->prefetch_chunks == 0)
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREFETCH_CHUNKS);    /* prefetch on, of nothing */
        if (d->field == HUVM_FIELD_PREFETCH_STRIDE &&
            policy->prefetch_chunks * policy->prefetch_stride > HUVM_PREFETCH_MAX_SPAN_CHUNKS)
            REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_FIELD_PREFETCH_STRIDE);   /* window beyond 1 GiB */
    }
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
        mem = known_memory(core, e->uuid);
        /* Each GPU field against its row, in struct order; the rules that need more than the row first. */
        for (k = 0; k < POLICY_FIELD_COUNT; k++) {
            const huvm_policy_field_t *d = &policy_fields[k];

            if (d->scope != HUVM_POLICY_SCOPE_GPU)
                continue;
            /* A lender with nothing to lend is a contradiction, not a way to stop lending (role
             * harvester/none). */
            if (d->field == HUVM_FIELD_GPU_LEND_LIMIT && e->lend_limit_bytes == 0 &&
                (e->role == HUVM_ROLE_LENDER || e->role == HUVM_ROLE_BOTH))
                REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_GPU_FIELD(i, d->field));
            /* A reserve above the GPU's known memory; the row's bound (1 PiB) holds for an unknown GPU. */
            if (d->field == HUVM_FIELD_GPU_LEND_RESERVE && mem != 0 && e->lend_reserve_bytes > mem)
                REFUSE(HUVM_NV_ERR_INVALID_ARGUMENT, HUVM_GPU_FIELD(i, d->field));
            /* lend_traffic_mbyte_per_s: a budget below one chunk per window (min) would lend nothing; the row's
             * ZERO_OFF allows 0, no budget. */
            status = check_field(d, huvm_policy_field_get(d, e));
            if (status != HUVM_NV_OK)
                REFUSE(status, HUVM_GPU_FIELD(i, d->field));
        }
    }
#undef REFUSE
    return HUVM_NV_OK;
}

/* Does p equal preset (node-wide fields and every entry's per-GPU defaults)? */
static int policy_is_preset(const huvm_core_t *core, const huvm_policy_t *p, uint32_t preset)
{
    huvm_gpu_policy_t e;
    uint32_t i;

    if (preset >= HUVM_PRESET_CUSTOM)
        return 0;
    for (i = 0; i < POLICY_FIELD_COUNT; i++) {
        const huvm_policy_field_t *d = &policy_fields[i];

        if (d->scope == HUVM_POLICY_SCOPE_NODE && huvm_policy_field_get(d, p) != node_preset_value(d, preset, core))
            return 0;
    }
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
