/*
 * huvm: kernel tracepoints, subsystem "huvm". SPDX-License-Identifier: MIT
 *
 * The events are those of driver/core/huvm_events.h with its prefix, the same as the simulator's USDT probes
 * (provider huvm): huvm:huvm_evict, huvm:huvm_preevict, huvm:huvm_fetch, huvm:huvm_giveback,
 * huvm:huvm_prefetch, huvm:huvm_policy (kernel symbols __tracepoint_huvm_evict, ...), each with (gpu, peer,
 * reason, bytes, va) as huvm's GPU indices, plus uvm_gpu and uvm_peer: the same GPUs as nvidia-uvm's own
 * processor ids (uvm_id_value(): 0 = the CPU/host, GPUs from 1), as UVM's tools events name them. The core
 * fires them through HUVM_TRACE (huvm_port.h).
 *
 * Use: exactly one .c file of the module defines the tracepoints:
 *     #define CREATE_TRACE_POINTS
 *     #include "uvm_huvm_trace.h"
 * before it includes any other huvm header; every other file just includes it (huvm_port.h does). The
 * directory holding this header must be on the module's include path (nvidia-uvm's Kbuild adds
 * -I$(src)/nvidia-uvm; another module adds -I<dir>): define_trace.h re-includes it as
 * "./uvm_huvm_trace.h" relative to the include path (TRACE_INCLUDE_PATH below).
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM huvm

#if !defined(_UVM_HUVM_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _UVM_HUVM_TRACE_H

#include <linux/types.h>
#include <linux/tracepoint.h>

/* nvidia-uvm's processor id (uvm_id_value()) of huvm GPU index slot; HUVM_DEST_HOST (and anything not a
 * GPU) is the CPU, 0. Lock-free; provided by the module that defines the tracepoints. */
u32 uvm_huvm_trace_uvm_id(u32 slot);

DECLARE_EVENT_CLASS(huvm_event_class,
                    TP_PROTO(u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va),
                    TP_ARGS(gpu, peer, reason, bytes, va),
                    TP_STRUCT__entry(__field(u32, gpu) __field(u32, peer) __field(u32, reason) __field(u64, bytes)
                                         __field(u64, va) __field(u32, uvm_gpu) __field(u32, uvm_peer)),
                    TP_fast_assign(__entry->gpu = gpu; __entry->peer = peer; __entry->reason = reason;
                                   __entry->bytes = bytes;
                                   __entry->va = va;
                                   __entry->uvm_gpu = uvm_huvm_trace_uvm_id(gpu);
                                   __entry->uvm_peer = uvm_huvm_trace_uvm_id(peer);),
                    TP_printk("gpu=%u peer=%u reason=%u bytes=%llu va=0x%llx uvm_gpu=%u uvm_peer=%u",
                              __entry->gpu,
                              __entry->peer,
                              __entry->reason,
                              (unsigned long long)__entry->bytes,
                              (unsigned long long)__entry->va,
                              __entry->uvm_gpu,
                              __entry->uvm_peer));

/* One per HUVM_EVENTS(X) entry of huvm_events.h, in its order, named HUVM_EVENT_PREFIX + name
 * (huvm:huvm_evict, ...), exactly the simulator's USDT probe names (usdt huvm:huvm_evict), so one bcc
 * program serves both. */
DEFINE_EVENT(huvm_event_class,
             huvm_evict,
             TP_PROTO(u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va),
             TP_ARGS(gpu, peer, reason, bytes, va));

DEFINE_EVENT(huvm_event_class,
             huvm_preevict,
             TP_PROTO(u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va),
             TP_ARGS(gpu, peer, reason, bytes, va));

DEFINE_EVENT(huvm_event_class,
             huvm_fetch,
             TP_PROTO(u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va),
             TP_ARGS(gpu, peer, reason, bytes, va));

DEFINE_EVENT(huvm_event_class,
             huvm_giveback,
             TP_PROTO(u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va),
             TP_ARGS(gpu, peer, reason, bytes, va));

DEFINE_EVENT(huvm_event_class,
             huvm_prefetch,
             TP_PROTO(u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va),
             TP_ARGS(gpu, peer, reason, bytes, va));

DEFINE_EVENT(huvm_event_class,
             huvm_policy,
             TP_PROTO(u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va),
             TP_ARGS(gpu, peer, reason, bytes, va));

#endif /* _UVM_HUVM_TRACE_H */

/* Outside the guard: define_trace.h must see this on every read. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE uvm_huvm_trace
#include <trace/define_trace.h>
