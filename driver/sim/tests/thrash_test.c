/*
 * huvm: C tests of the simulator's model of UVM's thrashing detection (driver/sim/huvm_sim_thrash.c), run plain
 * and under ASan/UBSan by `make sim-test`. SPDX-License-Identifier: MIT
 */
#include <stdio.h>

#include "huvm_sim_thrash.h"
#include "sim_check.h"

#define US  1000ull
#define GPU 0
#define CPU HUVM_SIM_THR_CPU

static void setup(huvm_sim_thr_t *thr)
{
    huvm_sim_thr_params_t p;

    huvm_sim_thr_default_params(&p);
    huvm_sim_thr_init(thr, &p);
    CHECK(huvm_sim_thr_grow(thr, 2) == 0);
    CHECK(huvm_sim_thr_grow(thr, 4) == 0 && thr->n_blocks == 4);
}

/* Ping-pong block 0 between the GPU and the CPU every `gap` ns from t, n migrations; returns the time after. */
static uint64_t ping_pong(huvm_sim_thr_t *thr, uint64_t t, uint64_t gap, int n)
{
    int i;

    for (i = 0; i < n; i++, t += gap)
        CHECK(huvm_sim_thr_migrated(thr, 0, (i & 1) ? CPU : GPU, t) == 0);
    return t;
}

/* The published defaults, derived from the module parameters (x lapse). */
static void test_defaults(void)
{
    huvm_sim_thr_params_t p;

    huvm_sim_thr_default_params(&p);
    CHECK(p.threshold == 3 && p.pin_threshold == 10 && p.max_resets == 4);
    CHECK(p.lapse_ns == 500 * US && p.nap_ns == 500 * US);
    CHECK(p.epoch_ns == 1000000 * US && p.pin_ns == 150000 * US);
}

/* A block faulted back to one GPU again and again (eviction in between: not an event) never thrashes: the
 * tracking starts only when consecutive events go to different processors. */
static void test_one_processor_never_thrashes(void)
{
    huvm_sim_thr_t thr;
    uint64_t t = 1;
    int i;

    setup(&thr);
    for (i = 0; i < 1000; i++, t += 10 * US)
        CHECK(huvm_sim_thr_migrated(&thr, 0, GPU, t) == 0);
    CHECK(huvm_sim_thr_events(&thr, 0) == 0);
    CHECK(thr.detected == 0);
    CHECK(huvm_sim_thr_hint(&thr, 0, GPU, t).type == HUVM_SIM_THR_HINT_NONE);
    CHECK(thr.pool_n == 0);
    huvm_sim_thr_destroy(&thr);
}

/* Detection: the first change of processor starts tracking, the next event sets the page's time stamp, and
 * each later one within the lapse counts; at the threshold (3) the page is thrashing. */
static void test_detection_threshold(void)
{
    huvm_sim_thr_t thr;
    uint64_t t;

    setup(&thr);
    t = ping_pong(&thr, 1, 100 * US, 4); /* gate, start + stamp, 1, 2 */
    CHECK(huvm_sim_thr_events(&thr, 0) == 2);
    CHECK(thr.detected == 0);
    CHECK(huvm_sim_thr_hint(&thr, 0, GPU, t).type == HUVM_SIM_THR_HINT_NONE);
    CHECK(huvm_sim_thr_migrated(&thr, 0, GPU, t) == 0);
    CHECK(huvm_sim_thr_events(&thr, 0) == 3);
    CHECK(thr.detected == 1);
    /* other blocks untouched */
    CHECK(huvm_sim_thr_events(&thr, 1) == 0);
    huvm_sim_thr_destroy(&thr);
}

/* Events further apart than the lapse do not count; an event after a longer gap resets a thrashing page. */
static void test_lapse(void)
{
    huvm_sim_thr_t thr;
    uint64_t t;

    setup(&thr);
    t = ping_pong(&thr, 1, 600 * US, 10);
    CHECK(huvm_sim_thr_events(&thr, 0) == 0 && thr.detected == 0);
    huvm_sim_thr_destroy(&thr);

    setup(&thr);
    t = ping_pong(&thr, 1, 100 * US, 6);
    CHECK(huvm_sim_thr_events(&thr, 0) == 4);
    CHECK(huvm_sim_thr_migrated(&thr, 0, CPU, t + 501 * US) == 0);
    CHECK(huvm_sim_thr_events(&thr, 0) == 0);
    huvm_sim_thr_destroy(&thr);
}

/* Throttle: the first faulting processor of a period is not throttled; another one faulting within the nap
 * is, until the nap's end; at the end it may go on. */
static void test_throttle_nap(void)
{
    huvm_sim_thr_t thr;
    huvm_sim_thr_hint_t h;
    uint64_t t;

    setup(&thr);
    t = ping_pong(&thr, 1, 100 * US, 5);
    h = huvm_sim_thr_hint(&thr, 0, GPU, t);
    CHECK(h.type == HUVM_SIM_THR_HINT_NONE); /* GPU: not throttled in this period */
    h = huvm_sim_thr_hint(&thr, 0, CPU, t + 10 * US);
    CHECK(h.type == HUVM_SIM_THR_HINT_THROTTLE);
    CHECK(h.end_ns == t + 500 * US); /* the nap: 1 x lapse from the period's start */
    h = huvm_sim_thr_hint(&thr, 0, CPU, t + 499 * US);
    CHECK(h.type == HUVM_SIM_THR_HINT_THROTTLE && h.end_ns == t + 500 * US);
    /* past the nap, the CPU's fault is serviced (a new period starts with the CPU not throttled) */
    h = huvm_sim_thr_hint(&thr, 0, CPU, t + 501 * US);
    CHECK(h.type == HUVM_SIM_THR_HINT_NONE);
    huvm_sim_thr_destroy(&thr);
}

/* Pin: after pin_threshold (10) throttling periods the non-throttled processor pins the page where it is (the
 * processor not throttled alternates between periods). If that is the GPU: the CPU cannot map GPU memory, so
 * when it next is the processor not throttled it pins the page in host memory, which every thrashing
 * processor can map. Once pinned in host memory the GPU's
 * faults map host memory remotely (PIN at the CPU, no migration) until the pin time (300 x lapse) from the
 * first pin ends; then the page is reset and the GPU's next fault migrates it again. */
static void test_pin_remote_for_pin_time(void)
{
    huvm_sim_thr_t thr;
    huvm_sim_thr_hint_t h;
    uint64_t t, pin_at = 0, remote_at = 0;
    uint8_t res = 0;
    int period, throttles = 0;

    setup(&thr);
    t = ping_pong(&thr, 1, 100 * US, 5);
    /* Each period: the CPU faults, then the GPU; a fault not throttled migrates the page. */
    for (period = 0; period < 40 && !pin_at; period++, t += 501 * US) {
        h = huvm_sim_thr_hint(&thr, 0, CPU, t);
        if (h.type == HUVM_SIM_THR_HINT_PIN) {
            CHECK(h.residency == CPU); /* at the requester */
            pin_at = t;
            break;
        }
        throttles += h.type == HUVM_SIM_THR_HINT_THROTTLE;
        if (h.type == HUVM_SIM_THR_HINT_NONE)
            CHECK(huvm_sim_thr_migrated(&thr, 0, CPU, t) == 0);
        h = huvm_sim_thr_hint(&thr, 0, GPU, t + 10 * US);
        if (h.type == HUVM_SIM_THR_HINT_PIN) {
            CHECK(h.residency == GPU);
            pin_at = t + 10 * US;
            break;
        }
        throttles += h.type == HUVM_SIM_THR_HINT_THROTTLE;
        if (h.type == HUVM_SIM_THR_HINT_NONE)
            CHECK(huvm_sim_thr_migrated(&thr, 0, GPU, t + 10 * US) == 0);
    }
    CHECK(pin_at != 0);
    CHECK(throttles >= 10); /* not before pin_threshold throttling periods */
    CHECK(huvm_sim_thr_is_pinned(&thr, 0, pin_at, &res) && res == h.residency);
    /* pinned: no more migrations; the CPU is throttled until it is the processor not throttled, then pins the
     * page in host memory, and the GPU maps it there */
    for (t = pin_at + 1 * US; t < pin_at + 20000 * US && !remote_at; t += 501 * US) {
        h = huvm_sim_thr_hint(&thr, 0, CPU, t);
        CHECK(h.type != HUVM_SIM_THR_HINT_NONE);
        h = huvm_sim_thr_hint(&thr, 0, GPU, t + 10 * US);
        CHECK(h.type == HUVM_SIM_THR_HINT_PIN);
        if (h.residency == CPU)
            remote_at = t + 10 * US;
    }
    CHECK(remote_at != 0);
    CHECK(huvm_sim_thr_is_pinned(&thr, 0, remote_at, &res) && res == CPU);
    h = huvm_sim_thr_hint(&thr, 0, GPU, pin_at + 149999 * US);
    CHECK(h.type == HUVM_SIM_THR_HINT_PIN && h.residency == CPU);
    CHECK(huvm_sim_thr_is_pinned(&thr, 0, pin_at + 149999 * US, NULL));
    /* past the pin time from the first pin: unpinned and reset, the GPU's fault migrates */
    CHECK(!huvm_sim_thr_is_pinned(&thr, 0, pin_at + 150000 * US, NULL));
    h = huvm_sim_thr_hint(&thr, 0, GPU, pin_at + 150001 * US);
    CHECK(h.type == HUVM_SIM_THR_HINT_NONE);
    CHECK(huvm_sim_thr_events(&thr, 0) == 0);
    huvm_sim_thr_destroy(&thr);
}

/* An epoch (2000 x lapse) after its last thrashing event the block's tracking is dropped, at most max_resets
 * (4) times; then it stays. */
static void test_epoch_reset_and_max_resets(void)
{
    huvm_sim_thr_t thr;
    uint64_t t = 1;
    int i;

    setup(&thr);
    for (i = 0; i < 6; i++) {
        t = ping_pong(&thr, t, 100 * US, 5);
        CHECK(huvm_sim_thr_events(&thr, 0) == 3);
        t += 1000001 * US;
        CHECK(huvm_sim_thr_hint(&thr, 0, GPU, t).type == HUVM_SIM_THR_HINT_NONE);
        if (i < 4)
            CHECK(huvm_sim_thr_events(&thr, 0) == 0); /* dropped */
        else
            CHECK(huvm_sim_thr_events(&thr, 0) != 0); /* kept: max_resets reached */
        t += 10000 * US; /* past the lapse: the next ping-pong starts afresh */
    }
    CHECK(thr.gate[0].resets == 4);
    huvm_sim_thr_destroy(&thr);
}

int main(void)
{
    test_defaults();
    test_one_processor_never_thrashes();
    test_detection_threshold();
    test_lapse();
    test_throttle_nap();
    test_pin_remote_for_pin_time();
    test_epoch_reset_and_max_resets();
    if (failures) {
        fprintf(stderr, "thrash_test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("thrash_test: ok\n");
    return 0;
}
