/*
 * huvm: cost of an eviction-destination decision on an 8-GPU node (make bench-core).
 * SPDX-License-Identifier: MIT
 *
 * huvm_decide_evict() under the huvm preset (fastest link with room among 7 NVLink peers; admission with
 * reserve, recent-peak protection, usage cap and hysteresis) over VARIANTS varied inputs, cycled: free
 * memory per GPU, lent bytes, lenders that evicted recently (admission hysteresis), chunks fetched back
 * recently (chunk hysteresis, answered without a peer), PMA-context requests. Pinned to the CPU it starts
 * on, warmed up, then RUNS runs of BATCHES batches of BATCH decisions; per run the median batch, and the
 * median of the runs is the figure (with the runs' spread). malloc/calloc/realloc/free are interposed in
 * this binary and counted: the decision path must not touch the heap. Exits 1 if it does, or if the median
 * exceeds HUVM_BENCH_MAX_NS (default 100).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "huvm_core.h"

/* A guest-traffic budget (MB/s) for half the lenders: 2 % of an H100's 3.35 TB/s HBM. */
#define BENCH_LEND_TRAFFIC 67000u

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
#define BATCHES     401
#define RUNS        5
#define VARIANTS    64      /* power of two */
#define WARMUP      200     /* batches, untimed */

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
    for (i = 1; i < p.gpu_count; i += 2)
        p.gpus[i].lend_traffic_mbyte_per_s = BENCH_LEND_TRAFFIC;  /* half the lenders with a budget */
    if (huvm_policy_apply(&core, &p, NULL) != HUVM_NV_OK)
        exit(2);
}

/* Varied inputs: a state per variant (free memory, who evicted recently) and a request. */
static huvm_gpu_state_t vstate[VARIANTS][HUVM_MAX_GPUS];
static huvm_evict_request_t vreq[VARIANTS];

static void make_variants(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ULL, now = 1000000000000ULL;
    uint32_t v, g;

    for (v = 0; v < VARIANTS; v++) {
        memset(vstate[v], 0, sizeof(vstate[v]));
        for (g = 0; g < GPUS; g++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            vstate[v][g].free_bytes = (x >> 20) % (60ULL << 30);            /* 0..60 GiB free of 80 */
            vstate[v][g].own_peak_bytes = (x >> 8) % (40ULL << 30);
            vstate[v][g].last_evict_ns = (x >> 60) == 0 ? now - 2000000 : 0; /* 1 in 16: recent */
            /* 0..1.25x a budget's window: some budgeted lenders at it (the lender_busy path) */
            vstate[v][g].guest_traffic_bytes =
                (x >> 12) % ((uint64_t)BENCH_LEND_TRAFFIC * HUVM_LEND_TRAFFIC_WINDOW_MS * 1250);
        }
        memset(&vreq[v], 0, sizeof(vreq[v]));
        vreq[v].gpu = v & (GPUS - 1);
        vreq[v].candidates = ((1u << GPUS) - 1) & ~(1u << vreq[v].gpu);
        vreq[v].now_ns = now;
        vreq[v].chunk_fetched_ns = (v % 8 == 3) ? now - 1000000 : 0;         /* hysteresis path */
        vreq[v].flags = (v % 16 == 5) ? HUVM_EVICT_FLAG_PMA_CONTEXT : 0;
    }
}

static void pin_to_this_cpu(void)
{
    cpu_set_t set;
    int cpu = sched_getcpu();

    CPU_ZERO(&set);
    CPU_SET(cpu < 0 ? 0 : cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        fprintf(stderr, "bench-core: warning: could not pin to CPU %d\n", cpu);
}

int main(void)
{
    static uint64_t per[BATCHES], medians[RUNS], p10[RUNS], p90[RUNS];
    huvm_decision_t d;
    unsigned long heap_before, heap_during;
    uint64_t t0, t1, sink = 0, max_ns = 100, median;
    const char *env = getenv("HUVM_BENCH_MAX_NS");
    uint32_t b, i, r, peers_chosen = 0, hyst = 0, busy = 0;

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
    pin_to_this_cpu();
    setup();
    make_variants();
    heap_during = 0;
    heap_before = heap_calls;
    for (b = 0; b < WARMUP; b++) {
        for (i = 0; i < BATCH; i++) {
            d = huvm_decide_evict(&core, vstate[i & (VARIANTS - 1)], &vreq[i & (VARIANTS - 1)]);
            sink += d.dst + d.reason;
        }
    }
    heap_during += heap_calls - heap_before;
    for (r = 0; r < RUNS; r++) {
        heap_before = heap_calls;
        for (b = 0; b < BATCHES; b++) {
            t0 = now_ns();
            for (i = 0; i < BATCH; i++) {
                uint32_t v = (i + b) & (VARIANTS - 1);

                d = huvm_decide_evict(&core, vstate[v], &vreq[v]);
                sink += d.dst + d.reason;
                peers_chosen += d.dst != HUVM_DEST_HOST;
                hyst += d.reason == HUVM_REASON_HYSTERESIS;
                busy += d.reason == HUVM_REASON_LENDER_BUSY;
            }
            t1 = now_ns();
            per[b] = t1 - t0;
        }
        heap_during += heap_calls - heap_before;       /* the decisions only: qsort may allocate */
        qsort(per, BATCHES, sizeof(per[0]), cmp_u64);
        medians[r] = per[BATCHES / 2];
        p10[r] = per[BATCHES / 10];
        p90[r] = per[BATCHES * 9 / 10];
    }
    qsort(medians, RUNS, sizeof(medians[0]), cmp_u64);
    qsort(p10, RUNS, sizeof(p10[0]), cmp_u64);
    qsort(p90, RUNS, sizeof(p90[0]), cmp_u64);
    median = medians[RUNS / 2];
    printf("bench-core: eviction decision, 8-GPU node (huvm preset, 7 NVLink peers, %u varied inputs): "
           "median %.1f ns (runs %.1f..%.1f; p10 %.1f, p90 %.1f) over %u runs x %u x %u decisions after %u "
           "warm-up batches, pinned; heap calls on the path: %lu; peer chosen %u, hysteresis %u, lender_busy %u "
           "of %u\n",
           VARIANTS, (double)median / BATCH, (double)medians[0] / BATCH, (double)medians[RUNS - 1] / BATCH,
           (double)p10[RUNS / 2] / BATCH, (double)p90[RUNS / 2] / BATCH, RUNS, BATCHES, BATCH, WARMUP,
           heap_during, peers_chosen, hyst, busy, RUNS * BATCHES * BATCH);
    if (sink == 0)
        printf("(sink %llu)\n", (unsigned long long)sink);
    if (heap_during != 0) {
        fprintf(stderr, "bench-core: FAIL: %lu heap calls on the decision path\n", heap_during);
        return 1;
    }
    if (peers_chosen == 0 || hyst == 0) {
        fprintf(stderr, "bench-core: FAIL: the inputs missed the peer or the hysteresis path\n");
        return 1;
    }
    if (median > max_ns * BATCH) {
        fprintf(stderr, "bench-core: FAIL: median above %llu ns\n", (unsigned long long)max_ns);
        return 1;
    }
    return 0;
}
