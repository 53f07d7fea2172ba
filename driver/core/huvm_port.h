/*
 * huvm: port layer of the policy core. SPDX-License-Identifier: MIT
 *
 * The few primitives the core needs, mapped to the Linux kernel (when __KERNEL__ is defined: nvidia-uvm.ko,
 * the qemu test module) or to libc (the simulator, the C tests, the Python extension):
 *   fixed-width types, huvm_memcpy/huvm_memset/huvm_memcmp, HUVM_ASSERT, HUVM_READ_ONCE/HUVM_WRITE_ONCE,
 *   HUVM_ALWAYS_INLINE (the decisions' hot helpers, inlined whatever the compiler's heuristics say),
 *   HUVM_NOINLINE (a rare path kept out of a hot function, so that the hot one stays small enough to inline),
 *   relaxed atomic counter primitives on uint64_t fields (huvm_atomic64_*), and
 *   HUVM_TRACE(name, gpu, peer, reason, bytes, va): a kernel tracepoint huvm:huvm_<name>
 *   (trace_huvm_<name>()) or a USDT probe huvm:huvm_<name> (sys/sdt.h), the same names and arguments
 *   (driver/core/huvm_events.h).
 *
 * No floating point anywhere in the core: the kernel forbids it and the user-space build checks it with
 * -mgeneral-regs-only (driver/core/core.mk).
 */
#ifndef __HUVM_PORT_H__
#define __HUVM_PORT_H__

#if defined(__KERNEL__)

#include <linux/types.h>
#include <linux/stddef.h>
#include <linux/string.h>
#include <linux/compiler.h>
#include <linux/bug.h>
#include <linux/atomic.h>

#define huvm_memcpy(d, s, n) memcpy((d), (s), (n))
#define huvm_memset(d, c, n) memset((d), (c), (n))
#define huvm_memcmp(a, b, n) memcmp((a), (b), (n))

/* A failed assertion warns once and the core carries on with a safe answer (host, no-op). */
#define HUVM_ASSERT(cond)     ((void)WARN_ON_ONCE(!(cond)))
#define HUVM_READ_ONCE(x)     READ_ONCE(x)
#define HUVM_WRITE_ONCE(x, v) WRITE_ONCE(x, v)
#define HUVM_ALWAYS_INLINE    __always_inline
#define HUVM_NOINLINE         noinline

/* Counter fields are plain uint64_t in the ABI structs; operate on them as atomic64_t. */
_Static_assert(sizeof(atomic64_t) == sizeof(uint64_t), "atomic64_t must overlay uint64_t");

static inline atomic64_t *huvm_atomic64_ptr(uint64_t *p)
{
    return (atomic64_t *)p;
}

static inline uint64_t huvm_atomic64_read(const uint64_t *p)
{
    return (uint64_t)atomic64_read((const atomic64_t *)p);
}

static inline void huvm_atomic64_set(uint64_t *p, uint64_t v)
{
    atomic64_set(huvm_atomic64_ptr(p), (s64)v);
}

static inline void huvm_atomic64_add(uint64_t *p, uint64_t v)
{
    atomic64_add((s64)v, huvm_atomic64_ptr(p));
}

static inline int huvm_atomic64_cas(uint64_t *p, uint64_t old, uint64_t new_val)
{
    return (uint64_t)atomic64_cmpxchg(huvm_atomic64_ptr(p), (s64)old, (s64)new_val) == old;
}

/* Tracepoints: trace_huvm_<name>() (event huvm:huvm_<name>) from driver/uvm/uvm_huvm_trace.h (already included, with
 * CREATE_TRACE_POINTS, in the one file of the module that defines them: including it again there would
 * define them twice). */
#if !defined(_UVM_HUVM_TRACE_H)
#include "uvm_huvm_trace.h"
#endif
#define HUVM_TRACE(name, gpu, peer, reason, bytes, va) \
    trace_huvm_##name((u32)(gpu), (u32)(peer), (u32)(reason), (u64)(bytes), (u64)(va))

#else /* user space */

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define huvm_memcpy(d, s, n) memcpy((d), (s), (n))
#define huvm_memset(d, c, n) memset((d), (c), (n))
#define huvm_memcmp(a, b, n) memcmp((a), (b), (n))

/* A failed assertion is counted (huvm_port_assert_failures, read by the tests) and the core carries on
 * with a safe answer; define HUVM_ASSERT_ABORT to abort instead. */
extern uint64_t huvm_port_assert_failures;
void huvm_port_assert_failed(const char *expr, const char *file, int line);
#define HUVM_ASSERT(cond)    ((void)((cond) ? 0 : (huvm_port_assert_failed(#cond, __FILE__, __LINE__), 0)))

#define HUVM_READ_ONCE(x)     (*(const volatile __typeof__(x) *)&(x))
#define HUVM_WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))
#define HUVM_ALWAYS_INLINE    inline __attribute__((always_inline))
#define HUVM_NOINLINE         __attribute__((noinline))

static inline uint64_t huvm_atomic64_read(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void huvm_atomic64_set(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline void huvm_atomic64_add(uint64_t *p, uint64_t v)
{
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline int huvm_atomic64_cas(uint64_t *p, uint64_t old, uint64_t new_val)
{
    return __atomic_compare_exchange_n(p, &old, new_val, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* USDT probes huvm:huvm_<name> when sys/sdt.h is available (systemtap-sdt-dev); otherwise nothing. Every argument
 * is passed as uint64_t (8-byte operands such as 8@%r12): bcc 0.26 (Debian 12) reads 4-byte register
 * operands (4@%r12d, 4@%ebp) as 0, so gpu, peer and reason would be lost. Readers still see the values of
 * the kernel tracepoints (u32 gpu/peer/reason, zero-extended). */
#if defined(__has_include)
#if __has_include(<sys/sdt.h>) && !defined(HUVM_NO_USDT)
#include <sys/sdt.h>
#define HUVM_HAVE_USDT 1
#endif
#endif

#if defined(HUVM_HAVE_USDT)
#define HUVM_USDT(name, gpu, peer, reason, bytes, va) \
    DTRACE_PROBE5(huvm,                               \
                  huvm_##name,                        \
                  (uint64_t)(uint32_t)(gpu),          \
                  (uint64_t)(uint32_t)(peer),         \
                  (uint64_t)(uint32_t)(reason),       \
                  (uint64_t)(bytes),                  \
                  (uint64_t)(va))
#else
#define HUVM_USDT(name, gpu, peer, reason, bytes, va) \
    ((void)(gpu), (void)(peer), (void)(reason), (void)(bytes), (void)(va))
#endif

/* Tests may observe every event: build the core with -DHUVM_TRACE_HOOK=function_name, where
 * void function_name(const char *name, uint32_t gpu, uint32_t peer, uint32_t reason, uint64_t bytes,
 * uint64_t va). */
#if defined(HUVM_TRACE_HOOK)
void HUVM_TRACE_HOOK(const char *name, uint32_t gpu, uint32_t peer, uint32_t reason, uint64_t bytes, uint64_t va);
#define HUVM_TRACE(name, gpu, peer, reason, bytes, va) \
    do {                                               \
        HUVM_USDT(name, gpu, peer, reason, bytes, va); \
        HUVM_TRACE_HOOK(#name,                         \
                        (uint32_t)(gpu),               \
                        (uint32_t)(peer),              \
                        (uint32_t)(reason),            \
                        (uint64_t)(bytes),             \
                        (uint64_t)(va));               \
    } while (0)
#else
#define HUVM_TRACE(name, gpu, peer, reason, bytes, va) \
    do {                                               \
        HUVM_USDT(name, gpu, peer, reason, bytes, va); \
    } while (0)
#endif

#endif /* __KERNEL__ */

/* Derived primitives, the same everywhere. */

/* *p = max(*p, v). */
static inline void huvm_atomic64_max(uint64_t *p, uint64_t v)
{
    uint64_t old = huvm_atomic64_read(p);

    while (old < v) {
        if (huvm_atomic64_cas(p, old, v))
            break;
        old = huvm_atomic64_read(p);
    }
}

/* *p -= min(*p, v); returns what was subtracted (gauges never wrap below zero). */
static inline uint64_t huvm_atomic64_sub_sat(uint64_t *p, uint64_t v)
{
    uint64_t old = huvm_atomic64_read(p);
    uint64_t take;

    for (;;) {
        take = old < v ? old : v;
        if (take == 0 || huvm_atomic64_cas(p, old, old - take))
            return take;
        old = huvm_atomic64_read(p);
    }
}

#endif /* __HUVM_PORT_H__ */
