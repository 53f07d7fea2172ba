/*
 * huvm: control dispatch shared by the kernel glue, the qemu test module and the simulator.
 * SPDX-License-Identifier: MIT
 *
 * The caller copies params in (params_size bytes, a private copy), calls huvm_dispatch and copies them
 * out. Each command validates everything first and changes nothing on refusal; error_field and rmStatus
 * (the last 8 bytes of every params struct) say what was refused and why. docs/abi.md has the tables.
 */
#include "huvm_internal.h"

uint32_t huvm_cmd_params_size(uint32_t cmd)
{
    switch (cmd) {
    case HUVM_IOCTL_GET_INFO:       return sizeof(HUVM_GET_INFO_PARAMS);
    case HUVM_IOCTL_GET_POLICY:     return sizeof(HUVM_GET_POLICY_PARAMS);
    case HUVM_IOCTL_SET_POLICY:     return sizeof(HUVM_SET_POLICY_PARAMS);
    case HUVM_IOCTL_GET_STATS:      return sizeof(HUVM_GET_STATS_PARAMS);
    case HUVM_IOCTL_RESET_STATS:    return sizeof(HUVM_RESET_STATS_PARAMS);
    case HUVM_IOCTL_LIST_VA_SPACES: return sizeof(HUVM_LIST_VA_SPACES_PARAMS);
    case HUVM_IOCTL_TEST_SET_NODE:  return sizeof(HUVM_TEST_SET_NODE_PARAMS);
    case HUVM_IOCTL_TEST_EVENT:     return sizeof(HUVM_TEST_EVENT_PARAMS);
    default:                        return 0;
    }
}

uint32_t huvm_cmd_privileged(uint32_t cmd)
{
    switch (cmd) {
    case HUVM_IOCTL_SET_POLICY:
    case HUVM_IOCTL_RESET_STATS:
    case HUVM_IOCTL_TEST_SET_NODE:
    case HUVM_IOCTL_TEST_EVENT:
        return 1;
    default:
        return 0;
    }
}

uint32_t huvm_cmd_reader(uint32_t cmd)
{
    switch (cmd) {
    case HUVM_IOCTL_GET_INFO:
    case HUVM_IOCTL_GET_POLICY:
    case HUVM_IOCTL_GET_STATS:
        return 1;
    default:
        return 0;
    }
}

huvm_status_t huvm_check_hdr(uint32_t cmd, huvm_hdr_t *hdr, uint32_t params_size, uint32_t *error_field)
{
    uint32_t dummy;
    uint32_t expected = huvm_cmd_params_size(cmd);

    if (!error_field)
        error_field = &dummy;
    *error_field = HUVM_FIELD_NONE;
    if (!hdr)
        return HUVM_NV_ERR_INVALID_PARAM_STRUCT;
    hdr->module_abi_version = HUVM_ABI_VERSION;
    if (expected == 0)
        return HUVM_NV_ERR_INVALID_COMMAND;
    if ((hdr->abi_version >> 16) != HUVM_ABI_VERSION_MAJOR) {
        *error_field = HUVM_FIELD_HDR_ABI_VERSION;
        return HUVM_NV_ERR_NOT_COMPATIBLE;
    }
    if (hdr->size != expected || params_size != expected) {
        *error_field = HUVM_FIELD_HDR_SIZE;
        return HUVM_NV_ERR_INVALID_PARAM_STRUCT;
    }
    if (hdr->flags != 0) {
        *error_field = HUVM_FIELD_HDR_FLAGS;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    return HUVM_NV_OK;
}

/* The last two uint32_t of every params struct. */
static void set_tail(void *params, uint32_t size, uint32_t error_field, huvm_status_t status)
{
    uint32_t *tail = (uint32_t *)((uint8_t *)params + size - 2 * sizeof(uint32_t));

    tail[0] = error_field;
    tail[1] = status;
}

/* Zero the output part of params (between the header and the tail). */
static void clear_body(void *params, uint32_t size)
{
    huvm_memset((uint8_t *)params + sizeof(huvm_hdr_t), 0, size - sizeof(huvm_hdr_t) - 2 * sizeof(uint32_t));
}

/* A reader (huvm_cmd_reader()): writes only p. */
static huvm_status_t cmd_get_info(const huvm_core_t *core, const huvm_core_ops_t *ops, void *ctx,
                                  HUVM_GET_INFO_PARAMS *p)
{
    uint32_t i;

    clear_body(p, sizeof(*p));
    p->huvm_version = HUVM_VERSION;
    p->backend = core->backend;
    p->gpu_count = core->gpu_count;
    p->max_gpus = HUVM_MAX_GPUS;
    huvm_memcpy(p->upstream_version, HUVM_UPSTREAM_VERSION, sizeof(HUVM_UPSTREAM_VERSION));
    for (i = 0; i < core->gpu_count; i++)
        p->gpus[i] = core->gpus[i];
    huvm_memcpy(p->links, core->links, sizeof(p->links));
    if (ops && ops->refresh_free)
        ops->refresh_free(ctx, core, p->gpus);
    return HUVM_NV_OK;
}

static huvm_status_t cmd_get_stats(const huvm_core_t *core, const huvm_caller_t *caller, HUVM_GET_STATS_PARAMS *p)
{
    const uint32_t n = sizeof(huvm_gpu_counters_t) / sizeof(uint64_t);
    const uint32_t pn = sizeof(huvm_pair_counters_t) / sizeof(uint64_t);
    uint32_t g, h, i;

    clear_body(p, sizeof(*p));
    p->timestamp_ns = caller->now_ns;
    p->generation = core->policy.generation;
    p->gpu_count = core->gpu_count;
    for (g = 0; g < core->gpu_count; g++) {
        const uint64_t *src = (const uint64_t *)&core->counters[g];
        uint64_t *dst = (uint64_t *)&p->gpus[g];

        for (i = 0; i < n; i++)
            dst[i] = huvm_atomic64_read(&src[i]);
        for (h = 0; h < core->gpu_count; h++) {
            const uint64_t *ps = (const uint64_t *)&core->pairs[g][h];
            uint64_t *pd = (uint64_t *)&p->pairs[g][h];

            for (i = 0; i < pn; i++)
                pd[i] = huvm_atomic64_read(&ps[i]);
        }
    }
    return HUVM_NV_OK;
}

static huvm_status_t cmd_list_va_spaces(huvm_core_t *core, const huvm_core_ops_t *ops, void *ctx,
                                        const huvm_caller_t *caller, HUVM_LIST_VA_SPACES_PARAMS *p,
                                        uint32_t *error_field)
{
    uint32_t start = p->start_index;
    huvm_status_t status;

    (void)core;
    if (p->pad != 0) {
        *error_field = HUVM_FIELD_RESERVED;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    clear_body(p, sizeof(*p));
    p->start_index = start;
    if (!ops || !ops->list_va_spaces)
        return start == 0 ? HUVM_NV_OK : (*error_field = HUVM_FIELD_START_INDEX, HUVM_NV_ERR_OUT_OF_RANGE);
    status = ops->list_va_spaces(ctx, caller, p);
    p->start_index = start;
    if (status != HUVM_NV_OK) {
        clear_body(p, sizeof(*p));
        p->start_index = start;
        return status;
    }
    HUVM_ASSERT(p->count <= HUVM_MAX_VA_SPACES_PER_CALL);
    if (p->count > HUVM_MAX_VA_SPACES_PER_CALL)
        p->count = HUVM_MAX_VA_SPACES_PER_CALL;
    if (start > p->total) {
        /* past the end (paging raced with va_spaces going away: start again at 0) */
        clear_body(p, sizeof(*p));
        p->start_index = start;
        *error_field = HUVM_FIELD_START_INDEX;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    return HUVM_NV_OK;
}

static huvm_status_t cmd_test_set_node(huvm_core_t *core, HUVM_TEST_SET_NODE_PARAMS *p, uint32_t *error_field)
{
    uint32_t i, j, field;
    huvm_status_t status;
    int added = 0;

    /* Validate everything. */
    if (p->gpu_count < 1 || p->gpu_count > HUVM_MAX_GPUS) {
        *error_field = HUVM_FIELD_GPU_COUNT;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    if (p->pad != 0) {
        *error_field = HUVM_FIELD_RESERVED;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }
    for (i = 0; i < p->gpu_count; i++) {
        field = HUVM_FIELD_NONE;
        status = huvm_core_check_gpu_info(&p->gpus[i], &field);
        if (status != HUVM_NV_OK) {
            *error_field = HUVM_GPU_FIELD(i, field);
            return status;
        }
        for (j = 0; j < i; j++) {
            if (huvm_uuid_eq(p->gpus[i].uuid, p->gpus[j].uuid)) {
                *error_field = HUVM_GPU_FIELD(i, HUVM_FIELD_GPU_UUID);
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
        }
    }
    for (i = 0; i < HUVM_MAX_GPUS; i++) {
        for (j = 0; j < HUVM_MAX_GPUS; j++) {
            const huvm_link_t *l = &p->links[i][j];
            const huvm_link_t *r = &p->links[j][i];

            if (i >= p->gpu_count || j >= p->gpu_count) {
                if (l->link_type != HUVM_LINK_NONE || l->link_count != 0 || l->mbyte_per_s != 0) {
                    *error_field = HUVM_FIELD_NODE_LINK;
                    return HUVM_NV_ERR_INVALID_ARGUMENT;
                }
                continue;
            }
            status = huvm_core_check_link(i, j, l);
            if (status != HUVM_NV_OK) {
                *error_field = HUVM_FIELD_NODE_LINK;
                return status;
            }
            if (l->link_type != r->link_type || l->link_count != r->link_count ||
                l->mbyte_per_s != r->mbyte_per_s) {
                *error_field = HUVM_FIELD_NODE_LINK;    /* links are symmetric */
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
        }
    }

    /* Install: a new node, so counters, gauges and cursors start from zero; policy entries stay (by UUID)
     * and new GPUs get the current preset's defaults. */
    huvm_memset(core->gpus, 0, sizeof(core->gpus));
    huvm_memset(core->counters, 0, sizeof(core->counters));
    huvm_memset(core->pairs, 0, sizeof(core->pairs));
    huvm_memset(core->rr_next, 0, sizeof(core->rr_next));
    for (i = 0; i < p->gpu_count; i++) {
        core->gpus[i] = p->gpus[i];
        core->gpus[i].name[HUVM_NAME_LEN - 1] = '\0';
    }
    core->gpu_count = p->gpu_count;
    huvm_memcpy(core->links, p->links, sizeof(core->links));
    for (i = 0; i < p->gpu_count; i++)
        added |= huvm_policy_ensure_entry(core, p->gpus[i].uuid, p->gpus[i].memory_bytes);
    added |= huvm_policy_fit_node(core);
    if (added)
        core->policy.generation++;
    huvm_policy_refresh_slots(core);
    return HUVM_NV_OK;
}

/* ---- TEST_EVENT: drive the decisions and accounting over the synthetic node's free bytes ---- */

typedef struct {
    huvm_core_t *core;
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
    uint64_t now_ns;
    HUVM_TEST_EVENT_PARAMS *p;
} test_run_t;

static void free_add(test_run_t *t, uint32_t gpu, uint64_t bytes)
{
    uint64_t mem = t->core->gpus[gpu].memory_bytes;
    uint64_t *f = &t->state[gpu].free_bytes;

    *f = (*f + bytes > mem) ? mem : *f + bytes;
}

static void free_sub(test_run_t *t, uint32_t gpu, uint64_t bytes)
{
    uint64_t *f = &t->state[gpu].free_bytes;

    *f = *f > bytes ? *f - bytes : 0;
}

static uint32_t all_peers(const huvm_core_t *core, uint32_t gpu)
{
    uint32_t mask = 0, i;

    for (i = 0; i < core->gpu_count; i++) {
        if (i != gpu && huvm_gpu_present(core, i))
            mask |= 1u << i;
    }
    return mask;
}

/* One chunk of gpu evicted: decide, account, move the free bytes. */
static void test_evict_one(test_run_t *t, uint32_t gpu, uint32_t flags, uint64_t va)
{
    huvm_evict_request_t req;
    huvm_decision_t d;

    huvm_memset(&req, 0, sizeof(req));
    req.gpu = gpu;
    req.flags = flags;
    req.candidates = all_peers(t->core, gpu);
    req.now_ns = t->now_ns;
    d = huvm_decide_evict(t->core, t->state, &req);
    huvm_account_evict(t->core, gpu, d.dst, d.reason, flags, HUVM_CHUNK_SIZE, va);
    free_add(t, gpu, HUVM_CHUNK_SIZE);
    if (d.dst != HUVM_DEST_HOST) {
        free_sub(t, d.dst, HUVM_CHUNK_SIZE);
        t->p->to_peer++;
    }
    t->p->done++;
    t->p->last_dst = d.dst;
    t->p->last_reason = d.reason;
}

static void test_fault(test_run_t *t, uint32_t gpu, uint32_t count, uint64_t va)
{
    huvm_core_t *core = t->core;
    uint32_t h;

    /* Harvested chunks first, holders in index order; the rest from host. */
    for (h = 0; h < core->gpu_count && t->p->done < count; h++) {
        uint64_t held = h == gpu ? 0 : huvm_atomic64_read(&core->pairs[gpu][h].held_bytes) / HUVM_CHUNK_SIZE;
        uint32_t route = huvm_decide_fetch(core, gpu, h);

        while (held > 0 && t->p->done < count) {
            uint64_t cva = va + (uint64_t)t->p->done * HUVM_CHUNK_SIZE;

            if (route == HUVM_FETCH_REMOTE_MAP) {
                huvm_account_fetch(core, gpu, h, 1, HUVM_CHUNK_SIZE, cva);
            }
            else {
                huvm_account_fetch(core, gpu, h, 0, HUVM_CHUNK_SIZE, cva);
                free_add(t, h, HUVM_CHUNK_SIZE);
                free_sub(t, gpu, HUVM_CHUNK_SIZE);
            }
            held--;
            t->p->done++;
            t->p->to_peer++;
            t->p->last_dst = h;
            t->p->last_reason = route;
        }
    }
    while (t->p->done < count) {
        huvm_account_fetch(core, gpu, HUVM_DEST_HOST, 0, HUVM_CHUNK_SIZE,
                           va + (uint64_t)t->p->done * HUVM_CHUNK_SIZE);
        free_sub(t, gpu, HUVM_CHUNK_SIZE);
        t->p->done++;
        t->p->last_dst = HUVM_DEST_HOST;
        t->p->last_reason = HUVM_FETCH_MIGRATE;
    }
    huvm_account_faults(core, gpu, count);
}

static void test_giveback(test_run_t *t, uint32_t gpu, uint32_t count, uint64_t va)
{
    huvm_giveback_plan_t plan;
    uint32_t left[HUVM_MAX_GPUS];
    uint32_t o, best, k;

    huvm_decide_giveback(t->core, t->state, gpu, (uint64_t)count * HUVM_CHUNK_SIZE, &plan);
    for (o = 0; o < HUVM_MAX_GPUS; o++)
        left[o] = plan.guest_chunks[o];
    /* owners with the most chunks to give back first */
    for (;;) {
        best = HUVM_MAX_GPUS;
        for (o = 0; o < HUVM_MAX_GPUS; o++) {
            if (left[o] > 0 && (best == HUVM_MAX_GPUS || left[o] > left[best]))
                best = o;
        }
        if (best == HUVM_MAX_GPUS)
            break;
        for (k = 0; k < left[best]; k++) {
            huvm_account_giveback(t->core, gpu, best, HUVM_CHUNK_SIZE,
                                  va + (uint64_t)t->p->done * HUVM_CHUNK_SIZE);
            free_add(t, gpu, HUVM_CHUNK_SIZE);
            t->p->done++;
            t->p->to_peer++;
            t->p->last_dst = HUVM_DEST_HOST;
            t->p->last_reason = HUVM_REASON_GIVEBACK;
        }
        left[best] = 0;
    }
    for (k = 0; k < plan.own_chunks; k++)
        test_evict_one(t, gpu, 0, va + (uint64_t)t->p->done * HUVM_CHUNK_SIZE);
}

static void test_prefetch(test_run_t *t, uint32_t gpu, uint32_t count, uint64_t va)
{
    huvm_prefetch_plan_t plan;
    uint32_t k, take, peer_take, local_take;
    uint64_t next_va = va;

    while (t->p->done < count) {
        huvm_decide_prefetch(t->core, t->state, gpu, all_peers(t->core, gpu), t->now_ns, &plan);
        if (plan.local_chunks + plan.peer_chunks == 0)
            break;
        take = count - t->p->done;
        if (take > plan.local_chunks + plan.peer_chunks)
            take = plan.local_chunks + plan.peer_chunks;
        peer_take = (uint32_t)((uint64_t)plan.peer_chunks * take / (plan.local_chunks + plan.peer_chunks));
        local_take = take - peer_take;
        for (k = 0; k < local_take; k++) {
            huvm_account_prefetch(t->core, gpu, gpu, HUVM_CHUNK_SIZE, next_va);
            free_sub(t, gpu, HUVM_CHUNK_SIZE);
            next_va += (uint64_t)plan.stride * HUVM_CHUNK_SIZE;
            t->p->done++;
            t->p->last_dst = gpu;
        }
        for (k = 0; k < peer_take; k++) {
            huvm_account_prefetch(t->core, gpu, plan.peer, HUVM_CHUNK_SIZE, next_va);
            free_sub(t, plan.peer, HUVM_CHUNK_SIZE);
            next_va += (uint64_t)plan.stride * HUVM_CHUNK_SIZE;
            t->p->done++;
            t->p->to_peer++;
            t->p->last_dst = plan.peer;
        }
        t->p->last_reason = peer_take ? HUVM_REASON_PEER : HUVM_REASON_NO_PEER;
        if (take == 0)
            break;
    }
}

static huvm_status_t cmd_test_event(huvm_core_t *core, const huvm_caller_t *caller, HUVM_TEST_EVENT_PARAMS *p,
                                    uint32_t *error_field)
{
    test_run_t t;
    uint32_t i, n;

    if (p->event >= HUVM_TEST_EVENT_COUNT) {
        *error_field = HUVM_FIELD_TEST_EVENT;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    if (p->gpu >= core->gpu_count || !huvm_gpu_present(core, p->gpu)) {
        *error_field = HUVM_FIELD_TEST_GPU;
        return core->gpu_count == 0 ? HUVM_NV_ERR_INVALID_STATE : HUVM_NV_ERR_OUT_OF_RANGE;
    }
    if (p->count < 1 || p->count > HUVM_TEST_MAX_COUNT) {
        *error_field = HUVM_FIELD_TEST_COUNT;
        return HUVM_NV_ERR_OUT_OF_RANGE;
    }
    if (p->flags & ~(p->event == HUVM_TEST_EVENT_EVICT ? 1u : 0u)) {
        *error_field = HUVM_FIELD_TEST_FLAGS;
        return HUVM_NV_ERR_INVALID_ARGUMENT;
    }

    p->done = 0;
    p->to_peer = 0;
    p->last_dst = HUVM_DEST_HOST;
    p->last_reason = HUVM_REASON_NO_PEER;
    t.core = core;
    t.p = p;
    if (caller->now_ns > core->test_now_ns)
        core->test_now_ns = caller->now_ns;
    core->test_now_ns += HUVM_TEST_NS_PER_EVENT;
    t.now_ns = core->test_now_ns;
    /* The synthetic node models neither hysteresis timing, pressure nor its GPUs' own use: only free bytes
     * (a prefetch event is taken as under pressure, below). */
    huvm_memset(t.state, 0, sizeof(t.state));
    for (i = 0; i < HUVM_MAX_GPUS; i++)
        t.state[i].free_bytes = i < core->gpu_count ? core->gpus[i].free_bytes : 0;

    switch (p->event) {
    case HUVM_TEST_EVENT_EVICT:
        for (i = 0; i < p->count; i++)
            test_evict_one(&t, p->gpu, p->flags ? HUVM_EVICT_FLAG_PMA_CONTEXT : 0,
                           p->va + (uint64_t)i * HUVM_CHUNK_SIZE);
        break;
    case HUVM_TEST_EVENT_PREEVICT:
        n = huvm_decide_preevict(core, t.state, p->gpu);
        if (n > p->count)
            n = p->count;
        for (i = 0; i < n; i++)
            test_evict_one(&t, p->gpu, HUVM_EVICT_FLAG_PREEVICT, p->va + (uint64_t)i * HUVM_CHUNK_SIZE);
        break;
    case HUVM_TEST_EVENT_FAULT:
        test_fault(&t, p->gpu, p->count, p->va);
        break;
    case HUVM_TEST_EVENT_GIVEBACK:
        test_giveback(&t, p->gpu, p->count, p->va);
        break;
    case HUVM_TEST_EVENT_PREFETCH:
    default:
        /* a prefetch event stands for one after a fault batch that had to evict: the GPU is under pressure */
        if (p->gpu < HUVM_MAX_GPUS)
            t.state[p->gpu].last_pressure_ns = t.now_ns;
        test_prefetch(&t, p->gpu, p->count, p->va);
        break;
    }

    for (i = 0; i < core->gpu_count; i++)
        core->gpus[i].free_bytes = t.state[i].free_bytes;
    return HUVM_NV_OK;
}

huvm_status_t huvm_dispatch(huvm_core_t *core, const huvm_core_ops_t *ops, void *ops_ctx,
                            const huvm_caller_t *caller, uint32_t cmd, void *params, uint32_t params_size)
{
    uint32_t error_field = HUVM_FIELD_NONE;
    uint32_t expected = huvm_cmd_params_size(cmd);
    huvm_status_t status;

    if (!core || !caller || !params || params_size < sizeof(huvm_hdr_t))
        return expected ? HUVM_NV_ERR_INVALID_PARAM_STRUCT : HUVM_NV_ERR_INVALID_COMMAND;
    status = huvm_check_hdr(cmd, (huvm_hdr_t *)params, params_size, &error_field);
    if (status != HUVM_NV_OK) {
        /* The tail can be written only where the buffer has the expected layout. */
        if (expected != 0 && params_size == expected)
            set_tail(params, params_size, error_field, status);
        return status;
    }

    /* Test commands: only where tests are enabled, only for a privileged caller, and never on a live node
     * (a synthetic node would replace, and synthetic events would move the counters of, GPUs in use). */
    if (cmd == HUVM_IOCTL_TEST_SET_NODE || cmd == HUVM_IOCTL_TEST_EVENT) {
        if (!caller->allow_test)
            status = HUVM_NV_ERR_NOT_SUPPORTED;
        else if (!caller->privileged)
            status = HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS;
        else if (caller->live_gpus)
            status = HUVM_NV_ERR_STATE_IN_USE;
    }
    else if (huvm_cmd_privileged(cmd) && !caller->privileged) {
        status = HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS;
    }
    if (status != HUVM_NV_OK)
        goto done;

    switch (cmd) {
    case HUVM_IOCTL_GET_INFO:
        status = cmd_get_info(core, ops, ops_ctx, (HUVM_GET_INFO_PARAMS *)params);
        break;
    case HUVM_IOCTL_GET_POLICY: {
        HUVM_GET_POLICY_PARAMS *p = (HUVM_GET_POLICY_PARAMS *)params;

        clear_body(p, sizeof(*p));
        p->policy = core->policy;
        break;
    }
    case HUVM_IOCTL_SET_POLICY: {
        HUVM_SET_POLICY_PARAMS *p = (HUVM_SET_POLICY_PARAMS *)params;

        status = huvm_policy_apply(core, &p->policy, &error_field);
        if (status == HUVM_NV_OK) {
            p->policy.generation = core->policy.generation;
            huvm_account_policy(core);
            if (ops && ops->policy_changed)
                ops->policy_changed(ops_ctx, core);
        }
        break;
    }
    case HUVM_IOCTL_GET_STATS:
        status = cmd_get_stats(core, caller, (HUVM_GET_STATS_PARAMS *)params);
        break;
    case HUVM_IOCTL_RESET_STATS: {
        HUVM_RESET_STATS_PARAMS *p = (HUVM_RESET_STATS_PARAMS *)params;

        if (p->pad != 0) {
            error_field = HUVM_FIELD_RESERVED;
            status = HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        else if (p->reset_flags & ~(uint32_t)HUVM_RESET_COUNTERS) {
            error_field = HUVM_FIELD_RESET_FLAGS;
            status = HUVM_NV_ERR_INVALID_ARGUMENT;
        }
        else {
            huvm_account_reset(core, p->reset_flags);
        }
        break;
    }
    case HUVM_IOCTL_LIST_VA_SPACES:
        status = cmd_list_va_spaces(core, ops, ops_ctx, caller, (HUVM_LIST_VA_SPACES_PARAMS *)params,
                                    &error_field);
        break;
    case HUVM_IOCTL_TEST_SET_NODE:
        status = cmd_test_set_node(core, (HUVM_TEST_SET_NODE_PARAMS *)params, &error_field);
        break;
    case HUVM_IOCTL_TEST_EVENT:
        status = cmd_test_event(core, caller, (HUVM_TEST_EVENT_PARAMS *)params, &error_field);
        break;
    default:
        status = HUVM_NV_ERR_INVALID_COMMAND;
        break;
    }

done:
    set_tail(params, params_size, error_field, status);
    return status;
}
