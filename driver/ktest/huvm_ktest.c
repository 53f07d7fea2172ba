/*
 * huvm: test kernel module for the qemu test bed. SPDX-License-Identifier: MIT
 *
 * Runs huvm's kernel-side shared code in a real kernel without a GPU: the portable core
 * (the .c files of driver/core), the control dispatch and the huvm tracepoints, behind a misc device
 * /dev/huvm_ktest that speaks the same ioctl ABI as the patched nvidia-uvm
 * (driver/include/uapi/uvm_huvm_ioctl.h). The node is synthetic: HUVM_IOCTL_TEST_SET_NODE describes
 * it and HUVM_IOCTL_TEST_EVENT feeds events through the core; both are implemented by huvm_dispatch.
 * This file has no logic of its own beyond the ioctl entry point (copy-in, header check, caller
 * identity, dispatch under the core lock, copy-out).
 *
 * Error reporting, as in nvidia-uvm: the outcome of a command is in-band (rmStatus, error_field) and
 * the ioctl returns 0. Only transport failures are errnos:
 *   -ENOTTY  the command number is not a huvm command
 *   -EFAULT  the params pointer cannot be read or written
 *   -EINVAL  the header's size differs from this module's struct size (the caller's struct has another
 *            layout, so rmStatus cannot be located); the 16-byte header is copied back with
 *            module_abi_version set
 *   -ENOMEM  no memory for the kernel copy of the params
 * A header refused for its ABI version or flags when the size matches is reported in-band.
 *
 * Test driver only: never load it on a production machine (every user may open the device).
 */

#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/miscdevice.h>
#include <linux/fs.h>
#include <linux/uaccess.h>
#include <linux/rwsem.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/mm.h>
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/sched.h>
#include <linux/timekeeping.h>
#include <linux/stddef.h>

/* The one translation unit that instantiates the huvm tracepoints (the core calls trace_huvm_*()); it must
 * come before any other huvm header (driver/uvm/uvm_huvm_trace.h). */
#define CREATE_TRACE_POINTS
#include "uvm_huvm_trace.h"

#include "huvm_core.h"

/* The synthetic node's GPUs as nvidia-uvm would number them: the CPU is 0, GPU index i is i + 1. */
u32 uvm_huvm_trace_uvm_id(u32 slot)
{
    return slot < HUVM_MAX_GPUS ? slot + 1 : 0;
}

#define HUVM_KTEST_NAME "huvm_ktest"

static int allow_test = 1;
module_param(allow_test, int, 0444);
MODULE_PARM_DESC(allow_test, "Allow the test-only commands TEST_SET_NODE and TEST_EVENT (default 1)");

// The synthetic node's core state. Allocated at load, freed at unload.
// LOCKING: g_huvm_ktest_lock is taken for write by commands that change the core (policy, stats reset,
//          test commands) and for read by the GET commands; counters inside are updated atomically by
//          the core itself (huvm_account_*), as in nvidia-uvm.
static huvm_core_t *g_huvm_ktest_core;
static DECLARE_RWSEM(g_huvm_ktest_lock);

// The synthetic node has no va_spaces and no free-memory source: every op is NULL, so GET_INFO reports
// the free bytes TEST_SET_NODE gave and LIST_VA_SPACES reports none.
static const huvm_core_ops_t g_huvm_ktest_ops;

// Whether cmd only reads the core (then it runs under the read lock).
// LOCKING: none (pure).
static bool huvm_ktest_cmd_reads_only(unsigned int cmd)
{
    switch (cmd) {
        case HUVM_IOCTL_GET_INFO:
        case HUVM_IOCTL_GET_POLICY:
        case HUVM_IOCTL_GET_STATS:
        case HUVM_IOCTL_LIST_VA_SPACES:
            return true;
        default:
            return false;
    }
}

// Who is calling: privileged means CAP_SYS_ADMIN in the initial user namespace, as in the patched UVM.
// LOCKING: none; reads the current task's credentials.
static void huvm_ktest_fill_caller(huvm_caller_t *caller)
{
    memset(caller, 0, sizeof(*caller));
    caller->privileged = capable(CAP_SYS_ADMIN) ? 1 : 0;
    caller->allow_test = allow_test ? 1 : 0;
    caller->uid = from_kuid_munged(&init_user_ns, current_uid());
    caller->pid = task_tgid_nr(current);
    caller->now_ns = ktime_get_ns();
}

// Report a refused header in-band: the caller's struct has this module's size, so error_field and
// rmStatus sit at the end of it, as in every params struct of the ABI.
// LOCKING: none; touches only the user's buffer.
static long huvm_ktest_refuse_hdr(void __user *uparams, const huvm_hdr_t *hdr, u32 params_size,
                                  u32 error_field, huvm_status_t status)
{
    u32 tail[2] = { error_field, status };

    if (hdr->size != params_size) {
        // Another layout: only the header is known to be there.
        if (copy_to_user(uparams, hdr, sizeof(*hdr)))
            return -EFAULT;
        return -EINVAL;
    }

    if (copy_to_user(uparams, hdr, sizeof(*hdr)))
        return -EFAULT;
    if (copy_to_user((u8 __user *)uparams + params_size - sizeof(tail), tail, sizeof(tail)))
        return -EFAULT;
    return 0;
}

// The ioctl entry point: the same sequence as the patched nvidia-uvm's huvm commands.
// LOCKING: takes g_huvm_ktest_lock (read or write, see huvm_ktest_cmd_reads_only) around huvm_dispatch
//          only; user copies happen outside the lock. May sleep.
static long huvm_ktest_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
    void __user *uparams = (void __user *)arg;
    huvm_caller_t caller;
    huvm_hdr_t hdr;
    huvm_status_t status;
    u32 params_size;
    u32 error_field = HUVM_FIELD_NONE;
    void *params = NULL;
    long ret = 0;

    params_size = huvm_cmd_params_size(cmd);
    if (params_size == 0)
        return -ENOTTY;

    if (copy_from_user(&hdr, uparams, sizeof(hdr)))
        return -EFAULT;

    status = huvm_check_hdr(cmd, &hdr, params_size, &error_field);
    if (status != HUVM_NV_OK)
        return huvm_ktest_refuse_hdr(uparams, &hdr, params_size, error_field, status);

    params = kvmalloc(params_size, GFP_KERNEL);
    if (!params)
        return -ENOMEM;

    if (copy_from_user(params, uparams, params_size)) {
        ret = -EFAULT;
        goto done;
    }
    // The header was checked on the first copy; keep that copy (a racing writer cannot change it).
    memcpy(params, &hdr, sizeof(hdr));

    huvm_ktest_fill_caller(&caller);

    if (huvm_ktest_cmd_reads_only(cmd)) {
        down_read(&g_huvm_ktest_lock);
        huvm_dispatch(g_huvm_ktest_core, &g_huvm_ktest_ops, NULL, &caller, cmd, params, params_size);
        up_read(&g_huvm_ktest_lock);
    }
    else {
        down_write(&g_huvm_ktest_lock);
        huvm_dispatch(g_huvm_ktest_core, &g_huvm_ktest_ops, NULL, &caller, cmd, params, params_size);
        up_write(&g_huvm_ktest_lock);
    }

    if (copy_to_user(uparams, params, params_size))
        ret = -EFAULT;

done:
    kvfree(params);
    return ret;
}

static const struct file_operations g_huvm_ktest_fops = {
    .owner          = THIS_MODULE,
    .unlocked_ioctl = huvm_ktest_ioctl,
    .compat_ioctl   = compat_ptr_ioctl,     // every params struct is fixed-width and 8-byte aligned
    .llseek         = noop_llseek,
};

static struct miscdevice g_huvm_ktest_miscdev = {
    .minor = MISC_DYNAMIC_MINOR,
    .name  = HUVM_KTEST_NAME,
    .fops  = &g_huvm_ktest_fops,
    .mode  = 0666,
};

// LOCKING: none needed; runs before the device exists.
static int __init huvm_ktest_init(void)
{
    int ret;

    g_huvm_ktest_core = vzalloc(sizeof(*g_huvm_ktest_core));
    if (!g_huvm_ktest_core)
        return -ENOMEM;

    huvm_core_init(g_huvm_ktest_core, HUVM_BACKEND_KTEST, HUVM_PRESET_HUVM);

    ret = misc_register(&g_huvm_ktest_miscdev);
    if (ret) {
        vfree(g_huvm_ktest_core);
        g_huvm_ktest_core = NULL;
        return ret;
    }

    pr_info(HUVM_KTEST_NAME ": loaded, ABI %u.%u, allow_test=%d, /dev/" HUVM_KTEST_NAME "\n",
            HUVM_ABI_VERSION_MAJOR, HUVM_ABI_VERSION_MINOR, allow_test);
    return 0;
}

// LOCKING: none needed; the device is gone (no open files: the module is not in use) before the core
//          is freed.
static void __exit huvm_ktest_exit(void)
{
    misc_deregister(&g_huvm_ktest_miscdev);
    vfree(g_huvm_ktest_core);
    g_huvm_ktest_core = NULL;
    pr_info(HUVM_KTEST_NAME ": unloaded\n");
}

module_init(huvm_ktest_init);
module_exit(huvm_ktest_exit);

MODULE_LICENSE("Dual MIT/GPL");
MODULE_DESCRIPTION("huvm test module: the huvm policy core, ioctl dispatch and tracepoints on a synthetic node");
MODULE_VERSION("0.1.0");
