/*
 * huvm: the test commands of the control dispatch (TEST_SET_NODE, TEST_EVENT), apart from production dispatch.
 * SPDX-License-Identifier: MIT
 *
 * As NVIDIA keeps its tests in uvm_*_test.c: huvm_dispatch() (huvm_dispatch.c) calls huvm_dispatch_test()
 * only after the test gate passed (caller->allow_test, i.e. uvm_enable_builtin_tests=1 in the kernel; the
 * simulator always), the caller is privileged and no live GPU is registered. Nothing else calls into this file.
 */
#include "huvm_internal.h"

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
            if (l->link_type != r->link_type || l->link_count != r->link_count || l->mbyte_per_s != r->mbyte_per_s) {
                *error_field = HUVM_FIELD_NODE_LINK;    /* links are symmetric */
                return HUVM_NV_ERR_INVALID_ARGUMENT;
            }
        }
    }

    /* Install: a new node, so counters, gauges, cursors and rates start from zero; policy entries stay (by UUID)
     * and new GPUs get the current preset's defaults. */
    huvm_memset(core->gpus, 0, sizeof(core->gpus));
    huvm_memset(core->counters, 0, sizeof(core->counters));
    huvm_memset(core->pairs, 0, sizeof(core->pairs));
    huvm_memset(core->rr_next, 0, sizeof(core->rr_next));
    huvm_memset(core->hbm_mbyte_per_s, 0, sizeof(core->hbm_mbyte_per_s));      /* facts of the GPUs replaced */
    huvm_memset(core->giveback_mbyte_per_s, 0, sizeof(core->giveback_mbyte_per_s));
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
        huvm_account_fetch(core, gpu, HUVM_DEST_HOST, 0, HUVM_CHUNK_SIZE, va + (uint64_t)t->p->done * HUVM_CHUNK_SIZE);
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
            huvm_account_giveback(t->core, gpu, best, HUVM_CHUNK_SIZE, va + (uint64_t)t->p->done * HUVM_CHUNK_SIZE);
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

static huvm_status_t cmd_test_event(huvm_core_t *core,
                                    const huvm_caller_t *caller,
                                    HUVM_TEST_EVENT_PARAMS *p,
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
            test_evict_one(&t,
                           p->gpu,
                           p->flags ? HUVM_EVICT_FLAG_PMA_CONTEXT : 0,
                           p->va + (uint64_t)i * HUVM_CHUNK_SIZE);
        break;
    case HUVM_TEST_EVENT_PREEVICT:
        n = huvm_decide_preevict(core, t.state, p->gpu);
        if (n > p->count)
            n = p->count;
        for (i = 0; i < n; i++)
            test_evict_one(&t, p->gpu, HUVM_EVICT_FLAG_PREEVICT, p->va + (uint64_t)i * HUVM_CHUNK_SIZE);
        break;
    case HUVM_TEST_EVENT_FAULT:    test_fault(&t, p->gpu, p->count, p->va); break;
    case HUVM_TEST_EVENT_GIVEBACK: test_giveback(&t, p->gpu, p->count, p->va); break;
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

huvm_status_t huvm_dispatch_test(huvm_core_t *core,
                                 const huvm_caller_t *caller,
                                 uint32_t cmd,
                                 void *params,
                                 uint32_t *error_field)
{
    switch (cmd) {
    case HUVM_IOCTL_TEST_SET_NODE: return cmd_test_set_node(core, (HUVM_TEST_SET_NODE_PARAMS *)params, error_field);
    case HUVM_IOCTL_TEST_EVENT:    return cmd_test_event(core, caller, (HUVM_TEST_EVENT_PARAMS *)params, error_field);
    default:                       return HUVM_NV_ERR_INVALID_COMMAND;
    }
}
