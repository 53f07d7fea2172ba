/*
 * huvm: simulated multi-GPU node. SPDX-License-Identifier: MIT
 *
 * A trace-driven model of UVM demand paging on an N-GPU node (2 MiB root chunks whose data moves in 64 KiB
 * groups with UVM's density prefetcher, replayable fault batches, eviction in residency-change LRU order, host
 * over PCIe, peers over NVLink) in which every huvm decision
 * comes from the policy core (huvm_decide_*) and every movement is reported through huvm_account_*, so the
 * counters and the USDT probes (provider huvm) are exactly those of the kernel module. Control commands go
 * through huvm_dispatch (huvm_sim_ioctl).
 *
 * Integer nanoseconds and bytes throughout; deterministic (same inputs, same outputs, bit for bit).
 * What is modelled and every constant's source: docs/simulator.md.
 *
 * The cffi declarations of this API are driver/sim/huvm_sim_cdef.h (keep both in step).
 *
 * LOCKING: a huvm_sim_t is not thread safe; callers serialise all calls on one instance. Different
 * instances are independent.
 */
#ifndef __HUVM_SIM_H__
#define __HUVM_SIM_H__

#include "huvm_sim_cdef.h"

#endif /* __HUVM_SIM_H__ */
