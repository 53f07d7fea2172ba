/*
 * huvm: module information for nvidia-uvm.ko built with huvm.
 *
 * `modinfo nvidia-uvm.ko` shows huvm_version and huvm_abi, so a lab admin can tell
 * the huvm module from the stock one and check it against the user-space tools.
 */

#include <linux/module.h>
#include <linux/stringify.h>

#include "uvm_huvm_ioctl.h"

#if !defined(HUVM_VERSION_STRING)
#define HUVM_VERSION_STRING \
    __stringify(HUVM_VERSION_MAJOR) "." __stringify(HUVM_VERSION_MINOR) "." __stringify(HUVM_VERSION_PATCH)
#endif

#define HUVM_ABI_STRING __stringify(HUVM_ABI_VERSION_MAJOR) "." __stringify(HUVM_ABI_VERSION_MINOR)

MODULE_INFO(huvm_version, HUVM_VERSION_STRING);
MODULE_INFO(huvm_abi, HUVM_ABI_STRING);
MODULE_INFO(huvm_upstream, NV_VERSION_STRING);
