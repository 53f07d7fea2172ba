/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * huvm-softgpu: which nvUvmInterface ABI this build speaks (test hardware only).
 *
 * One source serves NVIDIA's 535 and 580 branches. Kbuild passes SG_NV_BRANCH, the major of the upstream
 * tree's NV_VERSION_STRING (as huvm.Kbuild passes HUVM_NV_BRANCH to the glue); the code picks the branch's
 * prototypes and fields with `#if SG_NV_BRANCH >= 580` / `#else` / `#endif` around exactly what differs
 * (tests/python/test_driver_sources.py reads those blocks to count each branch's exports). What changed
 * from 535.261.03 to 580.142 in kernel-open/common/inc/nv_uvm_interface.h and nv_uvm_types.h:
 *
 *   new calls      GetNvlinkInfo, TogglePrefetchFaults, GetExternalAllocPhysAddrs, ReportFatalError,
 *                  CslRotateKey, CslLogEncryption
 *   removed        PmaUnpinPages
 *   signatures     AddressSpaceCreate (+enableAts), SetPageDirectory (+dmaAddress out),
 *                  FlushReplayableFaultBuffer (fault info + bCopyAndFlush instead of the device),
 *                  EnableAccessCntr (const config), CslDecrypt (+keyRotationId)
 *   structs        UvmGpuInfo (accessCntrBufferCount, EGM, ATS, CDMM, direct-connect NVLink),
 *                  UvmGpuConfComputeCaps (bConfComputingEnabled replaces mode), UvmGpuFbInfo
 *                  (heapStart, maxVidmemPageSize, static BAR1), UvmGpuP2PCapsParams (indirectAccess gone,
 *                  EGM peer ids, BAR1 DMA windows), UvmGpuAccessCntrConfig (one granularity),
 *                  UvmGpuFaultInfo (bUvmOwnsHwFaultBuffer gone), UvmGpuNvlinkInfo (new)
 *
 * Any other branch is a compile error: its ABI has not been reviewed.
 */
#ifndef SG_COMPAT_H
#define SG_COMPAT_H

#ifndef SG_NV_BRANCH
#error "SG_NV_BRANCH is not set: build through `make softgpu-module`"
#endif

#if SG_NV_BRANCH != 535 && SG_NV_BRANCH != 580
#error "huvm-softgpu speaks the nvUvmInterface ABI of the 535 and 580 branches only"
#endif

/* UVM's SW object subchannel: nv_uvm_types.h on 535, uvm_push_macros.h (UVM_SUBCHANNEL_SW) on 580. */
#define SG_UVM_SW_SUBCHANNEL 5
#if SG_NV_BRANCH < 580
_Static_assert(UVM_SW_OBJ_SUBCHANNEL == SG_UVM_SW_SUBCHANNEL, "UVM's SW subchannel moved");
#endif

#endif /* SG_COMPAT_H */
