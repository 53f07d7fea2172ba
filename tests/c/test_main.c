/*
 * huvm: C test runner and fixtures. SPDX-License-Identifier: MIT
 *
 * Usage: test_core [-v] [substring]   (-v: list passing tests too; substring: run matching tests only)
 */
#include <stdlib.h>

#include "huvm_test.h"

#define MAX_TESTS 512

static struct {
    const char *name;
    huvm_test_fn_t fn;
} tests[MAX_TESTS];
static uint32_t test_count;
static int current_failed;

huvm_test_event_t huvm_test_events[HUVM_TEST_MAX_EVENTS];
uint32_t huvm_test_event_count;

void huvm_test_register(const char *name, huvm_test_fn_t fn)
{
    if (test_count >= MAX_TESTS) {
        fprintf(stderr, "too many tests\n");
        exit(2);
    }
    tests[test_count].name = name;
    tests[test_count].fn = fn;
    test_count++;
}

void huvm_test_fail(const char *file, int line, const char *what)
{
    printf("    %s:%d: CHECK(%s) failed\n", file, line, what);
    current_failed = 1;
}

void huvm_test_fail_u64(const char *file, int line, const char *a, const char *b, uint64_t va, uint64_t vb)
{
    printf("    %s:%d: CHECK_EQ(%s, %s) failed: %llu (0x%llx) != %llu (0x%llx)\n", file, line, a, b,
           (unsigned long long)va, (unsigned long long)va, (unsigned long long)vb, (unsigned long long)vb);
    current_failed = 1;
}

void huvm_test_trace_reset(void)
{
    huvm_test_event_count = 0;
}

uint32_t huvm_test_trace_count(const char *name)
{
    uint32_t i, n = 0;

    for (i = 0; i < huvm_test_event_count && i < HUVM_TEST_MAX_EVENTS; i++)
        n += strcmp(huvm_test_events[i].name, name) == 0;
    return n;
}

void huvm_test_trace_hook(const char *name, uint32_t gpu, uint32_t peer, uint32_t reason, uint64_t bytes,
                          uint64_t va)
{
    huvm_test_event_t *e;

    if (huvm_test_event_count < HUVM_TEST_MAX_EVENTS) {
        e = &huvm_test_events[huvm_test_event_count];
        snprintf(e->name, sizeof(e->name), "%s", name);
        e->gpu = gpu;
        e->peer = peer;
        e->reason = reason;
        e->bytes = bytes;
        e->va = va;
    }
    huvm_test_event_count++;
}

void fx_uuid(uint8_t *uuid, uint32_t i)
{
    uint32_t k;

    for (k = 0; k < HUVM_UUID_LEN; k++)
        uuid[k] = (uint8_t)(0x40 + i * 7 + k);
}

void fx_node(huvm_core_t *core, uint32_t n, uint64_t mem, uint32_t preset)
{
    huvm_gpu_info_t info;
    huvm_link_t link = { HUVM_LINK_NVLINK_4, 2, 50000 };
    huvm_policy_t p;
    uint32_t i, j;

    huvm_core_init(core, HUVM_BACKEND_SIM, preset);
    for (i = 0; i < n; i++) {
        memset(&info, 0, sizeof(info));
        fx_uuid(info.uuid, i);
        snprintf(info.name, sizeof(info.name), "gpu%u", i);
        info.memory_bytes = mem;
        info.free_bytes = mem;
        info.pcie_mbyte_per_s = 16000;
        info.flags = HUVM_GPU_FLAG_PRESENT | HUVM_GPU_FLAG_REPLAYABLE_FAULTS | HUVM_GPU_FLAG_PMA_EVICTION;
        if (huvm_core_set_gpu(core, i, &info) != HUVM_NV_OK)
            abort();
    }
    for (i = 0; i < n; i++) {
        for (j = i + 1; j < n; j++) {
            if (huvm_core_set_link(core, i, j, &link) != HUVM_NV_OK)
                abort();
        }
    }
    /* per-GPU defaults of the preset now that capacities are known */
    if (preset < HUVM_PRESET_CUSTOM) {
        huvm_policy_preset(preset, core, &p);
        if (huvm_policy_apply(core, &p, NULL) != HUVM_NV_OK)
            abort();
    }
    huvm_test_trace_reset();
}

void fx_state(const huvm_core_t *core, huvm_gpu_state_t *state)
{
    uint32_t i;

    memset(state, 0, sizeof(*state) * HUVM_MAX_GPUS);
    for (i = 0; i < core->gpu_count; i++)
        state[i].free_bytes = core->gpus[i].free_bytes;
}

huvm_evict_request_t fx_req(uint32_t gpu, uint32_t candidates)
{
    huvm_evict_request_t r;

    memset(&r, 0, sizeof(r));
    r.gpu = gpu;
    r.candidates = candidates;
    r.now_ns = 1000000000ULL;
    return r;
}

huvm_status_t fx_apply(huvm_core_t *core, const huvm_policy_t *p)
{
    return huvm_policy_apply(core, p, NULL);
}

void fx_role(huvm_core_t *core, uint32_t gpu, uint32_t role, uint64_t limit, uint64_t reserve)
{
    huvm_gpu_policy_t *e = (huvm_gpu_policy_t *)huvm_policy_gpu(core, gpu);

    if (!e)
        abort();
    e->role = role;
    e->lend_limit_bytes = limit;
    e->lend_reserve_bytes = reserve;
}

int main(int argc, char **argv)
{
    uint32_t i, passed = 0, failed = 0;
    const char *only = NULL;
    int verbose = 0;

    for (i = 1; i < (uint32_t)argc; i++) {
        if (strcmp(argv[i], "-v") == 0)
            verbose = 1;
        else
            only = argv[i];
    }
    for (i = 0; i < test_count; i++) {
        if (only && !strstr(tests[i].name, only))
            continue;
        current_failed = 0;
        huvm_test_trace_reset();
        tests[i].fn();
        if (current_failed) {
            printf("FAIL %s\n", tests[i].name);
            failed++;
        }
        else {
            if (verbose)
                printf("ok   %s\n", tests[i].name);
            passed++;
        }
    }
    printf("%u passed, %u failed\n", passed, failed);
    return failed ? 1 : 0;
}
