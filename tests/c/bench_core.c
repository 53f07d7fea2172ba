/*
 * huvm: cost of an eviction-destination decision on an 8-GPU node (make bench-core).
 * SPDX-License-Identifier: MIT
 *
 * Median over many batches of huvm_decide_evict() (huvm preset: bandwidth-weighted choice among 7 NVLink
 * peers, admission with reserve, usage cap and hysteresis). malloc/calloc/realloc/free are interposed in
 * this binary and counted: the decision path must not touch the heap. Exits 1 if it does, or if the
 * median exceeds HUVM_BENCH_MAX_NS (default 100).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "huvm_core.h"

/* ---- heap interposition ---- */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p);

static volatile unsigned long heap_calls;
static void *volatile heap_probe;

void *malloc(size_t size)
{
    heap_calls++;
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    heap_calls++;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    heap_calls++;
    return __libc_realloc(p, size);
}

void free(void *p)
{
    if (p)
        heap_calls++;
    __libc_free(p);
}

/* ---- bench ---- */
#define GPUS        8
#define BATCH       1000
#define BATCHES     2001

static huvm_core_t core;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void setup(void)
{
    huvm_gpu_info_t info;
    huvm_link_t link = { HUVM_LINK_NVLINK_4, 18, 450000 };    /* H100 SXM: 18 links, 450 GB/s per direction */
    huvm_policy_t p;
    uint32_t i, j;

    huvm_core_init(&core, HUVM_BACKEND_SIM, HUVM_PRESET_HUVM);
    for (i = 0; i < GPUS; i++) {
        memset(&info, 0, sizeof(info));
        for (j = 0; j < HUVM_UUID_LEN; j++)
            info.uuid[j] = (uint8_t)(i * 16 + j + 1);
        info.memory_bytes = 80ULL << 30;
        info.free_bytes = 40ULL << 30;
        info.pcie_mbyte_per_s = 64000;                          /* PCIe 5 x16 */
        info.flags = HUVM_GPU_FLAG_PRESENT | HUVM_GPU_FLAG_REPLAYABLE_FAULTS;
        if (huvm_core_set_gpu(&core, i, &info) != HUVM_NV_OK)
            exit(2);
    }
    for (i = 0; i < GPUS; i++) {
        for (j = i + 1; j < GPUS; j++)
            huvm_core_set_link(&core, i, j, &link);
    }
    huvm_policy_preset(HUVM_PRESET_HUVM, &core, &p);
    if (huvm_policy_apply(&core, &p, NULL) != HUVM_NV_OK)
        exit(2);
}

int main(void)
{
    static uint64_t per[BATCHES];
    huvm_gpu_state_t state[HUVM_MAX_GPUS];
    huvm_evict_request_t req;
    huvm_decision_t d;
    unsigned long heap_before, heap_during;
    uint64_t t0, t1, sink = 0, max_ns = 100;
    const char *env = getenv("HUVM_BENCH_MAX_NS");
    uint32_t b, i, peers_chosen = 0;

    if (env)
        max_ns = strtoull(env, NULL, 10);
    /* the interposer must see allocations, or "0 heap calls" would prove nothing */
    heap_before = heap_calls;
    heap_probe = malloc(64);
    free(heap_probe);
    if (heap_calls - heap_before != 2) {
        fprintf(stderr, "bench-core: FAIL: the malloc interposer is not active\n");
        return 1;
    }
    setup();
    memset(state, 0, sizeof(state));
    for (i = 0; i < GPUS; i++)
        state[i].free_bytes = (uint64_t)(10 + 3 * i) << 30;     /* distinct free memory per GPU */
    memset(&req, 0, sizeof(req));
    req.candidates = (1u << GPUS) - 1;
    req.now_ns = 1000000000000ULL;

    heap_before = heap_calls;
    for (b = 0; b < BATCHES; b++) {
        t0 = now_ns();
        for (i = 0; i < BATCH; i++) {
            req.gpu = i & (GPUS - 1);
            req.now_ns += 1000;
            d = huvm_decide_evict(&core, state, &req);
            sink += d.dst + d.reason;
            peers_chosen += d.dst != HUVM_DEST_HOST;
        }
        t1 = now_ns();
        per[b] = t1 - t0;
    }
    heap_during = heap_calls - heap_before;

    qsort(per, BATCHES, sizeof(per[0]), cmp_u64);
    printf("bench-core: eviction decision, 8-GPU node (huvm preset, 7 NVLink peers): median %.1f ns "
           "(p10 %.1f, p90 %.1f) over %u x %u decisions; heap calls on the path: %lu; peer chosen %u/%u\n",
           (double)per[BATCHES / 2] / BATCH, (double)per[BATCHES / 10] / BATCH,
           (double)per[BATCHES * 9 / 10] / BATCH, BATCHES, BATCH, heap_during, peers_chosen,
           BATCHES * BATCH);
    if (sink == 0)
        printf("(sink %llu)\n", (unsigned long long)sink);
    if (heap_during != 0) {
        fprintf(stderr, "bench-core: FAIL: %lu heap calls on the decision path\n", heap_during);
        return 1;
    }
    if (peers_chosen == 0) {
        fprintf(stderr, "bench-core: FAIL: no peer chosen (the bench measured the wrong path)\n");
        return 1;
    }
    if (per[BATCHES / 2] > max_ns * BATCH) {
        fprintf(stderr, "bench-core: FAIL: median above %llu ns\n", (unsigned long long)max_ns);
        return 1;
    }
    return 0;
}
