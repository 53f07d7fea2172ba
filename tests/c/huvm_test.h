/*
 * huvm: a tiny C test harness. SPDX-License-Identifier: MIT
 *
 * TEST(name) { ... CHECK(cond); CHECK_EQ(a, b); ... } registers a test; test_main.c runs them all and
 * prints "N passed, N failed" as its last line (exit status 1 if any failed). A failed check ends its test.
 * The core is built with -DHUVM_TRACE_HOOK=huvm_test_trace_hook, so tests see every tracepoint/probe.
 */
#ifndef __HUVM_TEST_H__
#define __HUVM_TEST_H__

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "huvm_core.h"

typedef void (*huvm_test_fn_t)(void);
void huvm_test_register(const char *name, huvm_test_fn_t fn);
void huvm_test_fail(const char *file, int line, const char *what);
void huvm_test_fail_u64(const char *file, int line, const char *a, const char *b, uint64_t va, uint64_t vb);

#define TEST(name)                                                                  \
    static void name(void);                                                         \
    __attribute__((constructor)) static void name##_register(void)                  \
    {                                                                               \
        huvm_test_register(#name, name);                                            \
    }                                                                               \
    static void name(void)

#define CHECK(cond) do {                                                            \
        if (!(cond)) {                                                              \
            huvm_test_fail(__FILE__, __LINE__, #cond);                              \
            return;                                                                 \
        }                                                                           \
    } while (0)

#define CHECK_EQ(a, b) do {                                                         \
        uint64_t _va = (uint64_t)(a), _vb = (uint64_t)(b);                          \
        if (_va != _vb) {                                                           \
            huvm_test_fail_u64(__FILE__, __LINE__, #a, #b, _va, _vb);               \
            return;                                                                 \
        }                                                                           \
    } while (0)

/* Trace events seen since the last huvm_test_trace_reset(). */
typedef struct {
    char     name[16];
    uint32_t gpu, peer, reason;
    uint64_t bytes, va;
} huvm_test_event_t;

#define HUVM_TEST_MAX_EVENTS 8192
extern huvm_test_event_t huvm_test_events[HUVM_TEST_MAX_EVENTS];
extern uint32_t huvm_test_event_count;
void huvm_test_trace_reset(void);
uint32_t huvm_test_trace_count(const char *name);
void huvm_test_trace_hook(const char *name, uint32_t gpu, uint32_t peer, uint32_t reason, uint64_t bytes,
                          uint64_t va);

/* Node fixtures (test_main.c). */
#define GIB (1ULL << 30)
#define CHUNK ((uint64_t)HUVM_CHUNK_SIZE)
void fx_uuid(uint8_t *uuid, uint32_t i);
/* n GPUs of mem bytes each, all free, PCIe 16 GB/s, present; all pairs NVLink 4 with `links` links of
 * 25 GB/s; preset as given. */
void fx_node(huvm_core_t *core, uint32_t n, uint64_t mem, uint32_t preset);
/* state[] from core->gpus[].free_bytes, no recent evictions. */
void fx_state(const huvm_core_t *core, huvm_gpu_state_t *state);
huvm_evict_request_t fx_req(uint32_t gpu, uint32_t candidates);
/* Set a node-wide policy field through the public apply (asserts it succeeds). */
huvm_status_t fx_apply(huvm_core_t *core, const huvm_policy_t *p);
/* Set the role / limit / reserve of GPU i directly in the table. */
void fx_role(huvm_core_t *core, uint32_t gpu, uint32_t role, uint64_t limit, uint64_t reserve);

#endif /* __HUVM_TEST_H__ */
