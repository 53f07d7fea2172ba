/*
 * huvm: kernel-mode compile check of the policy core (core.mk target core-kcheck). SPDX-License-Identifier: MIT
 *
 * Builds the core's .c files as an out-of-tree module with -Werror and defines the huvm tracepoints here, the way
 * the patched nvidia-uvm and the qemu test module do. Never loaded.
 */
#define CREATE_TRACE_POINTS
#include "uvm_huvm_trace.h"

#include <linux/module.h>
#include "huvm_core.h"

static huvm_core_t *huvm_kcheck_core;

/* The tracepoints' nvidia-uvm processor id of a huvm GPU index (uvm_huvm_trace.h): GPU i is i + 1. */
u32 uvm_huvm_trace_uvm_id(u32 slot)
{
    return slot < HUVM_MAX_GPUS ? slot + 1 : 0;
}

// LOCKING: none (module init; the core is not shared).
static int __init huvm_kcheck_init(void)
{
    huvm_caller_t caller = { .privileged = 1, .allow_test = 1 };
    huvm_hdr_t hdr = { .abi_version = HUVM_ABI_VERSION };
    uint32_t field;

    huvm_kcheck_core = kzalloc(sizeof(*huvm_kcheck_core), GFP_KERNEL);
    if (!huvm_kcheck_core)
        return -ENOMEM;
    huvm_core_init(huvm_kcheck_core, HUVM_BACKEND_CORE, HUVM_PRESET_HUVM);
    (void)huvm_check_hdr(HUVM_IOCTL_GET_INFO, &hdr, huvm_cmd_params_size(HUVM_IOCTL_GET_INFO), &field);
    (void)huvm_dispatch(huvm_kcheck_core, NULL, NULL, &caller, HUVM_IOCTL_GET_INFO, &hdr, sizeof(hdr));
    return 0;
}

// LOCKING: none.
static void __exit huvm_kcheck_exit(void)
{
    kfree(huvm_kcheck_core);
}

module_init(huvm_kcheck_init);
module_exit(huvm_kcheck_exit);
MODULE_LICENSE("Dual MIT/GPL");
MODULE_DESCRIPTION("huvm policy core kernel compile check");
