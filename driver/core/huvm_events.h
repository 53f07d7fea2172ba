/*
 * huvm: the events the core emits. SPDX-License-Identifier: MIT
 *
 * One list for the kernel tracepoints (driver/uvm/uvm_huvm_trace.h, TRACE_EVENT subsystem "huvm") and the
 * simulator's USDT probes (sys/sdt.h, provider "huvm"): same names, same arguments, same order. Both are
 * named HUVM_EVENT_PREFIX + name (huvm:huvm_evict, kernel symbol __tracepoint_huvm_evict): kernel tracepoint
 * symbols share one namespace, and a bare "evict" would be anyone's.
 * tests/python/test_probe_names.py checks both against this list.
 *
 * Every event has the same five arguments:
 *   gpu     u32  the GPU the event is about (the owner of the data; for giveback, the lender)
 *   peer    u32  the other end: a GPU index, or HUVM_DEST_HOST (16) for host memory (giveback: the owner
 *                of the data, which goes to host; policy: gpu and peer are both 16)
 *   reason  u32  HUVM_REASON_* (evict, preevict, giveback); HUVM_FETCHED_* (fetch); preset (policy)
 *   bytes   u64  bytes moved (policy: the new generation)
 *   va      u64  virtual address of the chunk (0 when not known)
 */
#ifndef __HUVM_EVENTS_H__
#define __HUVM_EVENTS_H__

/* X(name): evict, preevict, fetch, giveback, prefetch, policy. */
/* clang-format off: one row per event */
#define HUVM_EVENTS(X) \
    X(evict)           \
    X(preevict)        \
    X(fetch)           \
    X(giveback)        \
    X(prefetch)        \
    X(policy)
/* clang-format on */

#define HUVM_EVENT_PREFIX "huvm_"
#define HUVM_EVENT_ARGS   "gpu,peer,reason,bytes,va"

#endif /* __HUVM_EVENTS_H__ */
