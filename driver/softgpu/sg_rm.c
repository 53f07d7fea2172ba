// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * huvm-softgpu: the nvUvmInterface* layer, i.e. what nvidia.ko exports to nvidia-uvm (test hardware only).
 *
 * Every function nvidia-uvm 535.261.03 or 580.142 imports is exported here with the prototype of that
 * branch's kernel-open/common/inc/nv_uvm_interface.h (SG_NV_BRANCH, sg_compat.h). Semantics follow NVIDIA's public sources: the RM side in
 * src/nvidia/src/kernel/rmapi/nv_gpu_ops.c (error codes, what is validated), nvidia.ko's wrappers in
 * kernel-open/nvidia/nv_uvm_interface.c, and the callers in kernel-open/nvidia-uvm/ (which fields are
 * read). The PMA exports live in sg_pma.c.
 *
 * Objects:
 *  - sessions, devices (one per GPU and UVM registration), address-space handles (a kernel VA space from
 *    AddressSpaceCreate, or a dup of a user VA space created through /dev/huvm-softgpu);
 *  - RM memory: a backing (vzalloc'd sysmem, or a run of the RM-reserved top of FB) mapped at one RM VA in
 *    its owner's kernel VA space and, through DupAllocation, in other kernel VA spaces; the engine and the
 *    MMU resolve those VAs through sg_rm_lookup;
 *  - TSGs and CE channels (GPFIFO ring, USERD words, error notifier) that the engine executes;
 *  - fault / access-counter "register" hand-out, P2P caps and objects, retained user channels.
 *
 * Anything not emulated (confidential computing, SR-IOV paging channels, external allocations, SMC) is
 * refused with NV_ERR_NOT_SUPPORTED and reported once through sg_unemulated().
 *
 * Locking: sg_node.lock (mutex) protects registration counts, devices, sessions, the callback pointer, the
 * P2P object table and user-channel retain counts. vas->lock (spinlock) protects a VA space's RM map table
 * and PDB. gpu->rm_fb_lock (mutex) protects the RM-reserved FB bitmap. None is held across a call into
 * UVM, into sg_main.c's object lookups (which take sg_node.lock) or into the engine.
 */

#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/mm.h>
#include <linux/gfp.h>
#include <linux/idr.h>
#include <linux/rbtree.h>
#include <linux/bitmap.h>
#include <linux/rcupdate.h>
#include <linux/irq_work.h>
#include <linux/string.h>
#include <linux/log2.h>

#include "sg.h"

/* Properties reported to UVM for either architecture (uvm_gpu.c:fill_gpu_info); what differs per
 * architecture (GPC/TPC counts, classes, page sizes) is in sg_arch (sg_main.c). */
#define SG_MAX_SUBCTX          64
#define SG_BIG_PAGE_SIZE       SG_PAGE_64K
#define SG_SYSMEM_LINK_MBPS    16000       /* PCIe gen3 x16 */
#define SG_NVLINK_LINK_MBPS    25000       /* per NVLink 2 or 3 link and direction (V100, A100) */
#define SG_PCIE_P2P_MBPS       16000
#define SG_DMA_LIMIT           ((1ULL << 47) - 1)
/* NV2080_CTRL_FB_INFO_INDEX_ACCESS_COUNTER_BUFFER_COUNT on GV100: one buffer (uvm_gpu_isr.c: "On Volta,
 * accessCntrBufferCount is > 0"); 580's UVM then clears access_counters_supported in its Volta HAL. */
#define SG_ACCESS_CNTR_BUFFERS 1

/* Copy engines: CE0 is the GRCE (UVM skips it), CE1..CE3 are the usable async CEs. */
#define SG_CE_COUNT      4
#define SG_CE_PEER_WRITE 3           /* optimalNvlinkWriteCEs: CE1/CE2 lead on sysmem */

/* Physical placement of RM FB allocations: RM aligns vidmem to the big page size. */
#define SG_RM_FB_ALIGN SG_PAGE_64K

/* GPFIFO sizes accepted by ChannelAllocate (UVM uses 1024 by default, tests a few entries). */
#define SG_GPFIFO_MIN_ENTRIES 2
#define SG_GPFIFO_MAX_ENTRIES (1u << 16)

/* Hardware channel ids of CE channels (GV100 has 4096 channels; user GR channels use their handle). */
#define SG_CHID_MIN 1
#define SG_CHID_MAX 4095

/* Handles UVM only checks for being non-zero. */
#define SG_FAULT_BUFFER_HANDLE_BASE 0xC3690000u
#define SG_FAULT_BUFFER_HANDLE(g)   (SG_FAULT_BUFFER_HANDLE_BASE | ((g)->index + 1))
#define SG_ACCESS_CNTR_HANDLE(g)    (0xC3650000u | ((g)->index + 1))
#define SG_P2P_HANDLE_BASE          0x50500000u
#define SG_P2P_HANDLE(a, b)         (SG_P2P_HANDLE_BASE | ((a) << 4) | (b))

#define SG_RETAINED_MAGIC 0x52435348u     /* "HSCR" */

static DEFINE_IDA(sg_chid_ida);

/* Under sg_node.lock. */
static unsigned sg_session_count;
static unsigned sg_p2p_refs[SG_MAX_GPUS][SG_MAX_GPUS];    /* [lower index][higher index] */

/* Registers RM hands out for Ampere+ clear-faulted handling; never touched on Volta. */
static u32 sg_dummy_chram_reg;
static u32 sg_dummy_runlist_pri_reg;

/* What RetainChannel hands to UVM. */
struct sg_retained_channel {
    u32 magic;
    struct sg_user_channel *uch;
};

static struct sg_gpu *sg_dev_gpu(uvmGpuDeviceHandle device)
{
    return device ? device->gpu : NULL;
}

static NV_STATUS sg_refuse(struct sg_gpu *gpu, const char *what)
{
    sg_unemulated(gpu, what, 0, 0);
    return NV_ERR_NOT_SUPPORTED;
}

/* ---- per-GPU init / ABI guard ------------------------------------------------------------------ */

static void sg_rm_abi_check(void)
{
        /*
         * The structs come from the pinned nv_uvm_types.h, so these only catch our own #define games around
         * that header (packing, NvBool, NvLength). Values from the 535.261.03 and 580.142 headers on x86-64:
         * UvmGpuInfo grew by 48 bytes (EGM, ATS, CDMM, direct-connect NVLink; accessCntrBufferCount moved
         * sysmemLink), UvmGpuChannelInfo gained keyRotationNotifier, UvmGpuFaultInfo lost
         * bUvmOwnsHwFaultBuffer and moved the non-replayable buffer address.
         */
#if SG_NV_BRANCH >= 580
    BUILD_BUG_ON(sizeof(UvmGpuInfo) != 240);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, gpuArch) != 80);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, gpcCount) != 116);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, accessCntrBufferCount) != 132);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, sysmemLink) != 156);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, nvswitchMemoryWindowStart) != 192);
    BUILD_BUG_ON(sizeof(UvmGpuChannelInfo) != 120);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInfo, errorNotifier) != 32);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInfo, workSubmissionOffset) != 64);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInfo, pWorkSubmissionToken) != 80);
    BUILD_BUG_ON(sizeof(UvmGpuFaultInfo) != 184);
    BUILD_BUG_ON(offsetof(UvmGpuFaultInfo, replayable.bufferAddress) != 64);
    BUILD_BUG_ON(offsetof(UvmGpuFaultInfo, nonReplayable.bufferSize) != 120);
    BUILD_BUG_ON(offsetof(UvmGpuFaultInfo, faultBufferHandle) != 168);
    BUILD_BUG_ON(sizeof(UvmGpuNvlinkInfo) != 32);
    BUILD_BUG_ON(sizeof(UvmGpuFbInfo) != 64);
    BUILD_BUG_ON(offsetof(UvmGpuFbInfo, maxVidmemPageSize) != 24);
#else
    BUILD_BUG_ON(sizeof(UvmGpuInfo) != 192);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, gpuArch) != 80);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, gpcCount) != 116);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, sysmemLink) != 152);
    BUILD_BUG_ON(offsetof(UvmGpuInfo, nvswitchMemoryWindowStart) != 184);
    BUILD_BUG_ON(sizeof(UvmGpuChannelInfo) != 112);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInfo, errorNotifier) != 32);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInfo, workSubmissionOffset) != 56);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInfo, pWorkSubmissionToken) != 72);
    BUILD_BUG_ON(sizeof(UvmGpuFaultInfo) != 192);
    BUILD_BUG_ON(offsetof(UvmGpuFaultInfo, replayable.bufferAddress) != 64);
    BUILD_BUG_ON(offsetof(UvmGpuFaultInfo, nonReplayable.bufferSize) != 128);
    BUILD_BUG_ON(offsetof(UvmGpuFaultInfo, faultBufferHandle) != 176);
#endif
    BUILD_BUG_ON(sizeof(UvmGpuChannelInstanceInfo) != 1120);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInstanceInfo, resourceCount) != 1080);
    BUILD_BUG_ON(offsetof(UvmGpuChannelInstanceInfo, pChramChannelRegister) != 1096);
    BUILD_BUG_ON(sizeof(UvmPmaAllocationOptions) != 56);
    BUILD_BUG_ON(offsetof(UvmPmaAllocationOptions, numPagesAllocated) != 40);
    BUILD_BUG_ON(offsetof(UvmPmaAllocationOptions, resultFlags) != 48);
    BUILD_BUG_ON(sizeof(NvNotification) != 16);
        /* AddressSpaceCreate hands out the two halves of regs->time as TIME_0 / TIME_1. */
    BUILD_BUG_ON(offsetof(struct sg_regs, time) % 8 != 0);
}

NV_STATUS sg_rm_gpu_init(struct sg_gpu *gpu)
{
    u64 nbits;

    sg_rm_abi_check();

    if (gpu->fb_size < gpu->pma_size || gpu->pma_size % SG_RM_FB_ALIGN || gpu->fb_size % SG_RM_FB_ALIGN)
        return NV_ERR_INVALID_ARGUMENT;

    mutex_init(&gpu->rm_fb_lock);
    nbits = (gpu->fb_size - gpu->pma_size) >> PAGE_SHIFT;
    gpu->rm_fb_bitmap = bitmap_zalloc(max_t(u64, nbits, 1), GFP_KERNEL);
    if (!gpu->rm_fb_bitmap)
        return NV_ERR_NO_MEMORY;
    return NV_OK;
}

void sg_rm_gpu_fini(struct sg_gpu *gpu)
{
    u64 nbits = (gpu->fb_size - gpu->pma_size) >> PAGE_SHIFT;

    if (!gpu->rm_fb_bitmap)
        return;
    if (nbits && !bitmap_empty(gpu->rm_fb_bitmap, nbits))
        pr_warn("huvm-softgpu: GPU%u: %u KiB of RM FB still allocated at teardown\n",
                gpu->index,
                bitmap_weight(gpu->rm_fb_bitmap, nbits) * 4);
    bitmap_free(gpu->rm_fb_bitmap);
    gpu->rm_fb_bitmap = NULL;
}

/* ---- sessions, GPUs, devices ------------------------------------------------------------------- */

NV_STATUS nvUvmInterfaceSessionCreate(uvmGpuSessionHandle *session, UvmPlatformInfo *platformInfo)
{
    struct uvmGpuSession_tag *s;

    if (!session || !platformInfo)
        return NV_ERR_INVALID_ARGUMENT;

    s = kzalloc(sizeof(*s), GFP_KERNEL);
    if (!s)
        return NV_ERR_NO_MEMORY;

        /* x86 without ATS, no SEV/TDX: both must be off (uvm_global.c, uvm_conf_computing.c). */
    platformInfo->atsSupported = NV_FALSE;
    platformInfo->confComputingEnabled = NV_FALSE;

    mutex_lock(&sg_node.lock);
    sg_session_count++;
    sg_node.session_open = true;
    mutex_unlock(&sg_node.lock);

    *session = s;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceSessionCreate);

NV_STATUS nvUvmInterfaceSessionDestroy(uvmGpuSessionHandle session)
{
    if (!session)
        return NV_ERR_INVALID_ARGUMENT;

    mutex_lock(&sg_node.lock);
    if (!WARN_ON(sg_session_count == 0))
        sg_session_count--;
    sg_node.session_open = sg_session_count != 0;
    mutex_unlock(&sg_node.lock);

    kfree(session);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceSessionDestroy);

NV_STATUS nvUvmInterfaceRegisterGpu(const NvProcessorUuid *gpuUuid, UvmGpuPlatformInfo *gpuInfo)
{
    struct sg_gpu *gpu;

    if (!gpuUuid || !gpuInfo)
        return NV_ERR_INVALID_ARGUMENT;

    gpu = sg_gpu_by_uuid(gpuUuid);
    if (!gpu)
        return NV_ERR_GPU_UUID_NOT_FOUND;

        /* The GPU must have been set up completely at load (sg_main.c: PCI binding, sg_rm_gpu_init). */
    if (!gpu->pdev || !gpu->rm_fb_bitmap || !gpu->pma || !gpu->fault.regs) {
        pr_err("huvm-softgpu: GPU%u: RegisterGpu on a GPU that was not fully initialised\n", gpu->index);
        return NV_ERR_INVALID_STATE;
    }

    mutex_lock(&sg_node.lock);
    gpu->registered++;
    mutex_unlock(&sg_node.lock);

        /* What nvidia.ko fills from nv_state_t (kernel-open/nvidia/nv-pci.c): the DMA-API device and the
         * range the GPU can address; dma-direct without an IOMMU makes DMA addresses guest physical. */
    gpuInfo->pci_dev = gpu->pdev;
    gpuInfo->dma_addressable_start = 0;
    gpuInfo->dma_addressable_limit = SG_DMA_LIMIT;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceRegisterGpu);

void nvUvmInterfaceUnregisterGpu(const NvProcessorUuid *gpuUuid)
{
    struct sg_gpu *gpu;

    if (!gpuUuid)
        return;
    gpu = sg_gpu_by_uuid(gpuUuid);
    if (!gpu)
        return;     /* "If the UUID is not found, no operation is performed." */

    mutex_lock(&sg_node.lock);
    if (!WARN_ON(gpu->registered <= 0))
        gpu->registered--;
    mutex_unlock(&sg_node.lock);
}
EXPORT_SYMBOL(nvUvmInterfaceUnregisterGpu);

NV_STATUS nvUvmInterfaceGetGpuInfo(const NvProcessorUuid *gpuUuid,
                                   const UvmGpuClientInfo *pGpuClientInfo,
                                   UvmGpuInfo *pGpuInfo)
{
    struct sg_gpu *gpu;

        /* pGpuClientInfo (hClient/hSmcPartRef) only selects a MIG partition; there is none. */
    if (!gpuUuid || !pGpuInfo)
        return NV_ERR_INVALID_ARGUMENT;

    gpu = sg_gpu_by_uuid(gpuUuid);
    if (!gpu)
        return NV_ERR_GPU_UUID_NOT_FOUND;

    memset(pGpuInfo, 0, sizeof(*pGpuInfo));
    strscpy(pGpuInfo->name, gpu->name, sizeof(pGpuInfo->name));
    pGpuInfo->uuid = gpu->uuid;
    pGpuInfo->gpuArch = sg_arch->gpu_arch;
    pGpuInfo->gpuImplementation = sg_arch->gpu_impl; /* GV100 / GA100: map-remap promotion on GA100 */
    pGpuInfo->hostClass = sg_arch->host_class;
    pGpuInfo->ceClass = sg_arch->ce_class;
    pGpuInfo->computeClass = sg_arch->compute_class;
    pGpuInfo->gpuInTcc = NV_FALSE;
    pGpuInfo->subdeviceCount = 1;                   /* >1 is refused by uvm_gpu.c:gpu_supports_uvm */
    pGpuInfo->virtMode = UVM_VIRT_MODE_NONE;
        /* Not "simulated": that flag changes UVM's behaviour (skips RC tests, forces access counters,
         * stretches thrashing timeouts, disables PMA batching), and we want the bare-metal paths. */
    pGpuInfo->isSimulated = NV_FALSE;
    pGpuInfo->gpcCount = sg_arch->gpc_count;
    pGpuInfo->maxGpcCount = sg_arch->max_gpc_count;
    pGpuInfo->tpcCount = sg_arch->tpc_count;
    pGpuInfo->maxTpcPerGpcCount = sg_arch->max_tpc_per_gpc;
    pGpuInfo->smcEnabled = NV_FALSE;
    pGpuInfo->smcSwizzId = 0;
#if SG_NV_BRANCH >= 580
    pGpuInfo->gpuConfComputeCaps.bConfComputingEnabled = NV_FALSE;
    pGpuInfo->gpuConfComputeCaps.bKeyRotationEnabled = NV_FALSE;
    pGpuInfo->accessCntrBufferCount = SG_ACCESS_CNTR_BUFFERS;
        /* x86 PCIe GPUs: no EGM, no ATS, no coherent driver-managed memory (CDMM), no direct-connect NVLink
         * to the CPU (all left 0 by the memset). */
#else
    pGpuInfo->gpuConfComputeCaps.mode = UVM_GPU_CONF_COMPUTE_MODE_NONE;
#endif
        /* Sysmem is reached over PCIe; NVLINK here would mean a coherent P9-style CPU link. */
    pGpuInfo->sysmemLink = UVM_LINK_TYPE_PCIE;
    pGpuInfo->sysmemLinkRateMBps = SG_SYSMEM_LINK_MBPS;
    pGpuInfo->systemMemoryWindowStart = 0;
    pGpuInfo->systemMemoryWindowSize = 0;
    pGpuInfo->connectedToSwitch = NV_FALSE;
    pGpuInfo->nvswitchMemoryWindowStart = 0;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceGetGpuInfo);

NV_STATUS nvUvmInterfaceDeviceCreate(uvmGpuSessionHandle session,
                                     const UvmGpuInfo *pGpuInfo,
                                     const NvProcessorUuid *gpuUuid,
                                     uvmGpuDeviceHandle *device,
                                     NvBool bCreateSmcPartition)
{
    struct uvmGpuDevice_tag *dev;
    struct sg_gpu *gpu;
    NV_STATUS status = NV_OK;

    if (!session || !pGpuInfo || !gpuUuid || !device)
        return NV_ERR_INVALID_ARGUMENT;

    gpu = sg_gpu_by_uuid(gpuUuid);
    if (!gpu)
        return NV_ERR_OBJECT_NOT_FOUND;

    if (bCreateSmcPartition && pGpuInfo->smcEnabled)
        return sg_refuse(gpu, "DeviceCreate with an SMC partition");

    dev = kzalloc(sizeof(*dev), GFP_KERNEL);
    if (!dev)
        return NV_ERR_NO_MEMORY;
    dev->session = session;
    dev->gpu = gpu;

    mutex_lock(&sg_node.lock);
        /* RM only creates devices on GPUs nvidia.ko has opened, i.e. after RegisterGpu. */
    if (gpu->registered <= 0)
        status = NV_ERR_INVALID_STATE;
    else if (!gpu->device)
        gpu->device = dev;
    mutex_unlock(&sg_node.lock);

    if (status != NV_OK) {
        kfree(dev);
        return status;
    }
    *device = dev;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceDeviceCreate);

void nvUvmInterfaceDeviceDestroy(uvmGpuDeviceHandle device)
{
    if (!device)
        return;

    mutex_lock(&sg_node.lock);
    if (device->gpu->device == device)
        device->gpu->device = NULL;
    mutex_unlock(&sg_node.lock);
    kfree(device);
}
EXPORT_SYMBOL(nvUvmInterfaceDeviceDestroy);

NV_STATUS nvUvmInterfaceQueryCaps(uvmGpuDeviceHandle device, UvmGpuCaps *caps)
{
    if (!sg_dev_gpu(device) || !caps)
        return NV_ERR_INVALID_ARGUMENT;

        /* Not a coherent (NUMA-onlined) GPU: UVM asserts this matches systemMemoryWindowSize == 0. */
    caps->numaEnabled = NV_FALSE;
    caps->numaNodeId = 0;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceQueryCaps);

NV_STATUS nvUvmInterfaceQueryCopyEnginesCaps(uvmGpuDeviceHandle device, UvmGpuCopyEnginesCaps *caps)
{
    unsigned i;

    if (!sg_dev_gpu(device) || !caps)
        return NV_ERR_INVALID_ARGUMENT;

    memset(caps, 0, sizeof(*caps));

        /* CE0: the GRCE, synchronous with graphics. UVM never picks it (ce_usable_for_channel_type). */
    caps->copyEngineCaps[0].supported = 1;
    caps->copyEngineCaps[0].grce = 1;
    caps->copyEngineCaps[0].sysmem = 1;
    caps->copyEngineCaps[0].p2p = 1;
    caps->copyEngineCaps[0].cePceMask = 1u << 0;

        /* CE1..CE3: async LCEs, one PCE each. CE1 leads on sysmem reads (CPU->GPU), CE2 on sysmem writes
         * (GPU->CPU); CE3 is the one P2P caps name for peer writes. */
    for (i = 1; i < SG_CE_COUNT; i++) {
        UvmGpuCopyEngineCaps *ce = &caps->copyEngineCaps[i];

        ce->supported = 1;
        ce->sysmem = 1;
        ce->p2p = 1;
        ce->nvlinkP2p = 1;
        ce->cePceMask = 1u << i;
    }
    caps->copyEngineCaps[1].sysmemRead = 1;
    caps->copyEngineCaps[2].sysmemWrite = 1;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceQueryCopyEnginesCaps);

NV_STATUS nvUvmInterfaceGetFbInfo(uvmGpuDeviceHandle device, UvmGpuFbInfo *fbInfo)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);

    if (!gpu || !fbInfo)
        return NV_ERR_INVALID_ARGUMENT;

    memset(fbInfo, 0, sizeof(*fbInfo));
        /* PMA (UVM) owns [0, pma_size); RM-internal allocations live in [pma_size, fb_size). */
    fbInfo->heapSize = (NvU32)(gpu->pma_size >> 10);
    fbInfo->reservedHeapSize = (NvU32)((gpu->fb_size - gpu->pma_size) >> 10);
    fbInfo->maxAllocatableAddress = gpu->pma_size - 1;
    fbInfo->bZeroFb = NV_FALSE;
#if SG_NV_BRANCH >= 580
        /* The heap starts at physical 0 (heapStart is in KiB; not 0 only for MIG); no static BAR1 mapping. */
    fbInfo->heapStart = 0;
    fbInfo->maxVidmemPageSize = sg_arch->max_vidmem_page;
#endif
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceGetFbInfo);

NV_STATUS nvUvmInterfaceGetEccInfo(uvmGpuDeviceHandle device, UvmGpuEccInfo *eccInfo)
{
    if (!sg_dev_gpu(device) || !eccInfo)
        return NV_ERR_INVALID_ARGUMENT;

        /* ECC off: UVM then never reads the other fields (uvm_gpu.c:get_gpu_ecc_info). An error here would
         * fail GPU init, so ECC being off is the answer, not a refusal. */
    memset(eccInfo, 0, sizeof(*eccInfo));
    eccInfo->bEccEnabled = NV_FALSE;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceGetEccInfo);

#if SG_NV_BRANCH >= 580
NV_STATUS nvUvmInterfaceGetNvlinkInfo(uvmGpuDeviceHandle device, UvmGpuNvlinkInfo *nvlinkInfo)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);

    if (!gpu || !nvlinkInfo)
        return NV_ERR_INVALID_ARGUMENT;

        /*
         * RM's answer for a Volta GPU (nv_gpu_ops.c: gpuDeviceRmSubDeviceInitNvlink, nvGpuOpsGetNvlinkInfo):
         * the NVLink state is initialised whether the GPU has links or not (no NVLink caps is "nothing to
         * do"), and uncontained-error recovery (NV2080_CTRL_NVLINK_CAPS_UNCONTAINED_ERROR_RECOVERY, a
         * Hopper+ capability) is off, so there is no interrupt-tree window to read: mask, offset and read
         * location stay 0 and UVM never polls. Every emulated GPU answers this way, linked (topology) or
         * PCIe-only; its links are what GetP2PCaps reports. The notifier is the GPU's own flag, never set.
         */
    memset(nvlinkInfo, 0, sizeof(*nvlinkInfo));
    nvlinkInfo->bNvlinkRecoveryEnabled = NV_FALSE;
    nvlinkInfo->nvlinkErrorNotifier = &gpu->nvlink_error_notifier;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceGetNvlinkInfo);
#endif

NV_STATUS nvUvmInterfaceServiceDeviceInterruptsRM(uvmGpuDeviceHandle device)
{
        /* UVM calls this only to service ECC interrupts (uvm_gpu_check_ecc_error) and ECC is off; there
         * are no RM-owned interrupts to service. */
    if (!sg_dev_gpu(device))
        return NV_ERR_INVALID_ARGUMENT;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceServiceDeviceInterruptsRM);

/* ---- callbacks --------------------------------------------------------------------------------- */

NV_STATUS nvUvmInterfaceRegisterUvmCallbacks(struct UvmOpsUvmEvents *importedUvmOps)
{
    NV_STATUS status = NV_OK;

    if (!importedUvmOps)
        return NV_ERR_INVALID_ARGUMENT;

    mutex_lock(&sg_node.lock);
    if (sg_node.ops) {
        status = NV_ERR_IN_USE;
    }
    else {
                /* The fault unit reads the pointer with READ_ONCE under rcu_read_lock from its irq_work, and
                 * may call isrTopHalf as soon as it is visible: publish the fully built ops. */
        smp_wmb();
        WRITE_ONCE(sg_node.ops, importedUvmOps);
    }
    mutex_unlock(&sg_node.lock);
    return status;
}
EXPORT_SYMBOL(nvUvmInterfaceRegisterUvmCallbacks);

void nvUvmInterfaceDeRegisterUvmOps(void)
{
    unsigned i;

    mutex_lock(&sg_node.lock);
    WRITE_ONCE(sg_node.ops, NULL);
    mutex_unlock(&sg_node.lock);

        /* No new top half can start; wait for the ones in flight (readers in RCU sections, and any irq_work
         * already queued), as nvidia.ko does with on_each_cpu. UVM unloads right after this returns. */
    synchronize_rcu();
    for (i = 0; i < sg_node.gpu_count; i++) {
        if (sg_node.gpus[i])
            irq_work_sync(&sg_node.gpus[i]->fault.irq);
    }
}
EXPORT_SYMBOL(nvUvmInterfaceDeRegisterUvmOps);

/* ---- VA spaces --------------------------------------------------------------------------------- */

struct sg_vaspace *sg_vaspace_create(struct sg_gpu *gpu, bool kernel, u64 rm_va_size)
{
    struct sg_vaspace *vas = kzalloc(sizeof(*vas), GFP_KERNEL);

    if (!vas)
        return NULL;
    kref_init(&vas->ref);
    vas->gpu = gpu;
    vas->kernel = kernel;
    vas->rm_va_size = kernel ? rm_va_size : 0;
    spin_lock_init(&vas->lock);
    INIT_LIST_HEAD(&vas->rm_maps);
    vas->rm_tree = RB_ROOT;
    vas->next_va = SG_RM_VA_START;
    return vas;
}

static void sg_rm_backing_release(struct kref *ref)
{
    struct sg_rm_backing *b = container_of(ref, struct sg_rm_backing, ref);

    if (b->vid) {
        struct sg_gpu *gpu = b->gpu;

        mutex_lock(&gpu->rm_fb_lock);
        bitmap_clear(gpu->rm_fb_bitmap, (b->fb_offset - gpu->pma_size) >> PAGE_SHIFT, b->size >> PAGE_SHIFT);
        mutex_unlock(&gpu->rm_fb_lock);
    }
    else {
        vfree(b->kva);
    }
    kfree(b);
}

static void sg_rm_backing_put(struct sg_rm_backing *b)
{
    kref_put(&b->ref, sg_rm_backing_release);
}

static void sg_vaspace_release(struct kref *ref)
{
    struct sg_vaspace *vas = container_of(ref, struct sg_vaspace, ref);
    struct sg_rm_map *m, *tmp;
    unsigned leftover = 0;

        /* RM frees whatever its client left in a VA space it destroys (destroyAllGpuMemDescriptors); nobody
         * else can hold a reference any more, so no lock is needed. */
    list_for_each_entry_safe(m, tmp, &vas->rm_maps, node) {
        list_del(&m->node);
        sg_rm_backing_put(m->b);
        kfree(m);
        leftover++;
    }
    if (leftover)
        pr_warn("huvm-softgpu: GPU%u: VA space destroyed with %u RM allocations still mapped\n",
                vas->gpu->index,
                leftover);
    kfree(vas);
}

void sg_vaspace_put(struct sg_vaspace *vas)
{
    if (vas)
        kref_put(&vas->ref, sg_vaspace_release);
}

/* The map containing va, or NULL. vas->lock held. */
static struct sg_rm_map *sg_rm_map_find(struct sg_vaspace *vas, u64 va)
{
    struct rb_node *n = vas->rm_tree.rb_node;

    while (n) {
        struct sg_rm_map *m = rb_entry(n, struct sg_rm_map, rb);

        if (va < m->va)
            n = n->rb_left;
        else if (va - m->va >= m->size)
            n = n->rb_right;
        else
            return m;
    }
    return NULL;
}

/* Insert m (non-overlapping, found by sg_rm_va_find) into the tree and the sorted list. vas->lock held. */
static void sg_rm_map_insert(struct sg_vaspace *vas, struct sg_rm_map *m)
{
    struct rb_node **link = &vas->rm_tree.rb_node, *parent = NULL, *next;

    while (*link) {
        struct sg_rm_map *cur = rb_entry(*link, struct sg_rm_map, rb);

        parent = *link;
        link = m->va < cur->va ? &parent->rb_left : &parent->rb_right;
    }
    rb_link_node(&m->rb, parent, link);
    rb_insert_color(&m->rb, &vas->rm_tree);

    next = rb_next(&m->rb);
    if (next)
        list_add_tail(&m->node, &rb_entry(next, struct sg_rm_map, rb)->node);
    else
        list_add_tail(&m->node, &vas->rm_maps);
}

static void sg_rm_map_remove(struct sg_vaspace *vas, struct sg_rm_map *m)
{
    rb_erase(&m->rb, &vas->rm_tree);
    list_del(&m->node);
}

/*
 * First fit for [va, va + size) aligned to align inside the RM range. RM hands out VAs in
 * [SG_RM_VA_START, SG_RM_VA_END): never 0, and below the 2^40 that channels and host semaphores can
 * address (uvm_volta.c max_channel_va / max_host_va). vas->lock held.
 */
static bool sg_rm_va_find(struct sg_vaspace *vas, u64 size, u64 align, u64 *va_out)
{
    u64 lo = SG_RM_VA_START;
    u64 hi = min_t(u64, SG_RM_VA_END, vas->rm_va_size);
    struct sg_rm_map *m;
    u64 cand;

    if (hi <= lo || size > hi - lo || align > hi)
        return false;

    cand = ALIGN(lo, align);
    list_for_each_entry(m, &vas->rm_maps, node) {
        if (m->va + m->size <= cand)
            continue;
        if (cand + size <= m->va)
            break;
        cand = ALIGN(m->va + m->size, align);
        if (cand >= hi)
            return false;
    }
    if (cand > hi || size > hi - cand)
        return false;
    *va_out = cand;
    return true;
}

/* Map backing b (taking over the caller's reference) at a new RM VA of vas. */
static NV_STATUS sg_rm_map_new(struct sg_vaspace *vas, struct sg_rm_backing *b, u64 align, u64 *va_out)
{
    struct sg_rm_map *m = kzalloc(sizeof(*m), GFP_KERNEL);
    bool found;

    if (!m)
        return NV_ERR_NO_MEMORY;
    m->size = b->size;
    m->b = b;

    spin_lock(&vas->lock);
    found = sg_rm_va_find(vas, b->size, align, &m->va);
    if (found)
        sg_rm_map_insert(vas, m);
    spin_unlock(&vas->lock);

    if (!found) {
        kfree(m);
        return NV_ERR_NO_MEMORY;
    }
    *va_out = m->va;
    return NV_OK;
}

void *sg_rm_lookup(struct sg_vaspace *vas, u64 va, u64 *len, struct sg_gpu **owner)
{
    struct sg_rm_map *m;
    void *kva = NULL;

    *len = 0;
    if (owner)
        *owner = NULL;

        /* The returned pointer stays valid after the lock is dropped because UVM frees RM memory only after
         * the work using it has completed (and ChannelDestroy drains the engine first). */
    spin_lock(&vas->lock);
    m = sg_rm_map_find(vas, va);
    if (m) {
        u64 off = va - m->va;

        kva = (u8 *)m->b->kva + off;
        *len = m->size - off;
        if (owner)
            *owner = m->b->vid ? m->b->gpu : NULL;
    }
    spin_unlock(&vas->lock);
    return kva;
}

static void sg_fill_vaspace_info(struct sg_gpu *gpu, UvmGpuAddressSpaceInfo *info)
{
    u32 *time = (u32 *)&gpu->fault.regs->time;

    memset(info, 0, sizeof(*info));
        /* 64K: 128K would leave UVM without an MMU mode HAL on Volta. */
    info->bigPageSize = SG_BIG_PAGE_SIZE;
    info->atsEnabled = NV_FALSE;
        /* PTIMER TIME_0 / TIME_1: the low and high words of the u64 the engine keeps current
         * (read by uvm_hal_maxwell_get_time as TIME_1, TIME_0, TIME_1). */
    info->time0Offset = (volatile NvU32 *)&time[0];
    info->time1Offset = (volatile NvU32 *)&time[1];
    info->maxSubctxCount = SG_MAX_SUBCTX;
    info->smcEnabled = NV_FALSE;
}

#if SG_NV_BRANCH >= 580
NV_STATUS nvUvmInterfaceAddressSpaceCreate(uvmGpuDeviceHandle device,
                                           unsigned long long vaBase,
                                           unsigned long long vaSize,
                                           NvBool enableAts,
                                           uvmGpuAddressSpaceHandle *vaSpace,
                                           UvmGpuAddressSpaceInfo *vaSpaceInfo)
#else
NV_STATUS nvUvmInterfaceAddressSpaceCreate(uvmGpuDeviceHandle device,
                                           unsigned long long vaBase,
                                           unsigned long long vaSize,
                                           uvmGpuAddressSpaceHandle *vaSpace,
                                           UvmGpuAddressSpaceInfo *vaSpaceInfo)
#endif
{
    struct sg_gpu *gpu = sg_dev_gpu(device);
    struct uvmGpuAddressSpace_tag *as;

    if (!gpu || !vaSpace || !vaSpaceInfo || !vaSize)
        return NV_ERR_INVALID_ARGUMENT;
#if SG_NV_BRANCH >= 580
        /* UVM asks for ATS only with an internal PASID (gpu_get_internal_pasid() != -1): never on x86. */
    if (enableAts)
        return sg_refuse(gpu, "AddressSpaceCreate with ATS");
#endif

        /* RM manages [vaBase, vaBase + vaSize) of this VA space (SHARED_MANAGEMENT); the MMU resolves VAs
         * below rm_va_size through our table, which needs the range to start at 0 and to cover the RM VA
         * window. Volta asks for [0, 128 TB) (uvm_volta.c). */
    if (vaBase != 0 || vaSize < SG_RM_VA_END) {
        sg_unemulated(gpu, "AddressSpaceCreate RM range", (u32)(vaBase >> 32), (u32)(vaSize >> 32));
        return NV_ERR_NOT_SUPPORTED;
    }

    as = kzalloc(sizeof(*as), GFP_KERNEL);
    if (!as)
        return NV_ERR_NO_MEMORY;
    as->vas = sg_vaspace_create(gpu, true, vaBase + vaSize);
    if (!as->vas) {
        kfree(as);
        return NV_ERR_NO_MEMORY;
    }
    as->device = device;
    as->dup = false;

    sg_fill_vaspace_info(gpu, vaSpaceInfo);
    *vaSpace = as;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceAddressSpaceCreate);

NV_STATUS nvUvmInterfaceDupAddressSpace(uvmGpuDeviceHandle device,
                                        NvHandle hUserClient,
                                        NvHandle hUserVASpace,
                                        uvmGpuAddressSpaceHandle *vaSpace,
                                        UvmGpuAddressSpaceInfo *vaSpaceInfo)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);
    struct uvmGpuAddressSpace_tag *as;
    struct sg_vaspace *vas;

    if (!gpu || !vaSpace || !vaSpaceInfo)
        return NV_ERR_INVALID_ARGUMENT;

    *vaSpace = NULL;
    memset(vaSpaceInfo, 0, sizeof(*vaSpaceInfo));

        /* Takes a reference (RM's DupObject refcounts the VA space object). */
    vas = sg_obj_get_vaspace(hUserClient, hUserVASpace);
    if (!vas)
        return NV_ERR_OBJECT_NOT_FOUND;

        /* Error order of nv_gpu_ops.c:nvGpuOpsDupAddressSpace: wrong device, then not externally owned. */
    if (vas->gpu != gpu) {
        sg_vaspace_put(vas);
        return NV_ERR_OTHER_DEVICE_FOUND;
    }
    if (vas->kernel) {
        sg_vaspace_put(vas);
        return NV_ERR_INVALID_FLAGS;
    }

    as = kzalloc(sizeof(*as), GFP_KERNEL);
    if (!as) {
        sg_vaspace_put(vas);
        return NV_ERR_NO_MEMORY;
    }
    as->device = device;
    as->vas = vas;
    as->dup = true;

    sg_fill_vaspace_info(gpu, vaSpaceInfo);
    *vaSpace = as;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceDupAddressSpace);

void nvUvmInterfaceAddressSpaceDestroy(uvmGpuAddressSpaceHandle vaSpace)
{
    if (!vaSpace)
        return;
    sg_vaspace_put(vaSpace->vas);
    kfree(vaSpace);
}
EXPORT_SYMBOL(nvUvmInterfaceAddressSpaceDestroy);

#if SG_NV_BRANCH >= 580
NV_STATUS nvUvmInterfaceSetPageDirectory(uvmGpuAddressSpaceHandle vaSpace,
                                         NvU64 physAddress,
                                         unsigned numEntries,
                                         NvBool bVidMemAperture,
                                         NvU32 pasid,
                                         NvU64 *dmaAddress)
#else
NV_STATUS nvUvmInterfaceSetPageDirectory(uvmGpuAddressSpaceHandle vaSpace,
                                         NvU64 physAddress,
                                         unsigned numEntries,
                                         NvBool bVidMemAperture,
                                         NvU32 pasid)
#endif
{
    struct sg_vaspace *vas;
    NV_STATUS status = NV_OK;

        /* pasid only matters with ATS, which is off (UVM passes -1). */
    if (!vaSpace || !numEntries)
        return NV_ERR_INVALID_ARGUMENT;
    if (physAddress & (SG_PAGE_4K - 1))
        return NV_ERR_INVALID_ARGUMENT;

    vas = vaSpace->vas;
    spin_lock(&vas->lock);
    if (!vas->kernel && vas->pdb_set) {
                /* An externally owned VA space takes one PDB: UVM maps this to "GPU VA space already
                 * registered" (uvm_va_space.c:uvm_gpu_va_space_set_page_dir). */
        status = NV_ERR_NOT_SUPPORTED;
    }
    else {
        vas->pdb_aperture = bVidMemAperture ? SG_AP_VID : SG_AP_SYS;
        vas->pdb_pa = physAddress;
        vas->pdb_set = true;
    }
    spin_unlock(&vas->lock);
        /* Binding a root is RM's business, not UVM's: the emulator makes sure that nothing a VA space
         * that used this page before left in the TLB is found through it. */
    if (status == NV_OK)
        sg_tlb_flush_pdb(vas->gpu, bVidMemAperture ? SG_AP_VID : SG_AP_SYS, physAddress);
#if SG_NV_BRANCH >= 580
        /* 580 passes a sysmem PDB as a CPU physical address and RM returns the DMA address it mapped
         * (UVM keeps it as pdb_rm_dma_address); vidmem is returned as given. The test bed has no IOMMU
         * (the load-time check: DMA address == physical), so both are the address itself. */
    if (status == NV_OK && dmaAddress)
        *dmaAddress = physAddress;
#endif
    return status;
}
EXPORT_SYMBOL(nvUvmInterfaceSetPageDirectory);

NV_STATUS nvUvmInterfaceUnsetPageDirectory(uvmGpuAddressSpaceHandle vaSpace)
{
    struct sg_vaspace *vas;
    bool was_set;
    u32 aperture;
    u64 pa;

    if (!vaSpace)
        return NV_ERR_INVALID_ARGUMENT;

    vas = vaSpace->vas;
    spin_lock(&vas->lock);
    was_set = vas->pdb_set;
    aperture = vas->pdb_aperture;
    pa = vas->pdb_pa;
    vas->pdb_set = false;
    vas->pdb_aperture = 0;
    vas->pdb_pa = 0;
    spin_unlock(&vas->lock);
        /* Unbinding too (UVM frees the page directory next): its translations go with it. */
    if (was_set)
        sg_tlb_flush_pdb(vas->gpu, aperture, pa);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceUnsetPageDirectory);

/* ---- RM memory --------------------------------------------------------------------------------- */

static NV_STATUS sg_rm_backing_alloc(struct sg_gpu *gpu, bool vid, u64 size, u64 phys_align, struct sg_rm_backing **out)
{
    struct sg_rm_backing *b = kzalloc(sizeof(*b), GFP_KERNEL);

    if (!b)
        return NV_ERR_NO_MEMORY;
    kref_init(&b->ref);
    b->gpu = gpu;
    b->vid = vid;
    b->size = size;

    if (vid) {
        unsigned long nbits = (gpu->fb_size - gpu->pma_size) >> PAGE_SHIFT;
        unsigned long npages = size >> PAGE_SHIFT;
        unsigned long mask = (phys_align >> PAGE_SHIFT) - 1;
        unsigned long idx;

        if (size > gpu->fb_size - gpu->pma_size) {
            kfree(b);
            return NV_ERR_NO_MEMORY;
        }

        mutex_lock(&gpu->rm_fb_lock);
                /* align_offset makes the alignment apply to the FB address, not to the bitmap index. */
        idx = bitmap_find_next_zero_area_off(gpu->rm_fb_bitmap,
                                             nbits,
                                             0,
                                             npages,
                                             mask,
                                             (gpu->pma_size >> PAGE_SHIFT) & mask);
        if (idx < nbits)
            bitmap_set(gpu->rm_fb_bitmap, idx, npages);
        mutex_unlock(&gpu->rm_fb_lock);

        if (idx >= nbits) {
            kfree(b);
            return NV_ERR_NO_MEMORY;
        }
        b->fb_offset = gpu->pma_size + ((u64)idx << PAGE_SHIFT);
        b->kva = gpu->fb + b->fb_offset;
                /* Reused RM FB must not leak an earlier allocation's contents (semaphores, pushbuffers). */
        memset(b->kva, 0, size);
    }
    else {
        b->kva = vzalloc(size);
        if (!b->kva) {
            kfree(b);
            return NV_ERR_NO_MEMORY;
        }
    }

    *out = b;
    return NV_OK;
}

static NV_STATUS sg_rm_mem_alloc(uvmGpuAddressSpaceHandle vaSpace,
                                 NvLength length,
                                 UvmGpuPointer *gpuPointer,
                                 UvmGpuAllocInfo *allocInfo,
                                 bool vid)
{
    struct sg_rm_backing *b;
    struct sg_vaspace *vas;
    struct sg_gpu *gpu;
    u64 size, va_align, phys_align, page_size = 0;
    NV_STATUS status;
    u64 va;

    if (!vaSpace || !gpuPointer)
        return NV_ERR_INVALID_ARGUMENT;

    vas = vaSpace->vas;
    gpu = vas->gpu;

        /* RM allocates only in VA spaces it manages; a dup'ed user VA space is owned by UVM. */
    if (!vas->kernel)
        return sg_refuse(gpu, "RM memory allocation in an externally owned VA space");

    if (allocInfo) {
        if (allocInfo->hPhysHandle)
            return sg_refuse(gpu, "RM memory allocation with a caller-provided physical handle");
        if (!vid && allocInfo->bContiguousPhysAlloc)
            return sg_refuse(gpu, "contiguous sysmem RM allocation");

        page_size = allocInfo->pageSize;
        if (page_size && page_size != SG_PAGE_4K && page_size != SG_PAGE_64K && page_size != SG_PAGE_2M)
            return NV_ERR_INVALID_ARGUMENT;
    }

        /* Length 0 gets the minimum page; everything is page granular. */
    size = length ? length : SG_PAGE_4K;
    if (size > SG_RM_VA_END)
        return NV_ERR_NO_MEMORY;
    size = round_up(size, max_t(u64, SG_PAGE_4K, page_size));

        /* VA alignment: 0 means 4K; a larger page size also aligns the VA to it. */
    va_align = allocInfo ? allocInfo->alignment : 0;
    va_align = max3(va_align, (u64)SG_PAGE_4K, page_size);
    if (!is_power_of_2(va_align))
        return NV_ERR_INVALID_ARGUMENT;

        /* Vidmem is physically aligned to the big page (or the requested page) size. */
    phys_align = max_t(u64, SG_RM_FB_ALIGN, page_size);

    status = sg_rm_backing_alloc(gpu, vid, size, phys_align, &b);
    if (status != NV_OK)
        return status;

    status = sg_rm_map_new(vas, b, va_align, &va);
    if (status != NV_OK) {
        sg_rm_backing_put(b);
        return status;
    }

    if (allocInfo && vid && allocInfo->bContiguousPhysAlloc)
        allocInfo->gpuPhysOffset = b->fb_offset;
    *gpuPointer = va;
    return NV_OK;
}

NV_STATUS nvUvmInterfaceMemoryAllocFB(uvmGpuAddressSpaceHandle vaSpace,
                                      NvLength length,
                                      UvmGpuPointer *gpuPointer,
                                      UvmGpuAllocInfo *allocInfo)
{
    return sg_rm_mem_alloc(vaSpace, length, gpuPointer, allocInfo, true);
}
EXPORT_SYMBOL(nvUvmInterfaceMemoryAllocFB);

NV_STATUS nvUvmInterfaceMemoryAllocSys(uvmGpuAddressSpaceHandle vaSpace,
                                       NvLength length,
                                       UvmGpuPointer *gpuPointer,
                                       UvmGpuAllocInfo *allocInfo)
{
    return sg_rm_mem_alloc(vaSpace, length, gpuPointer, allocInfo, false);
}
EXPORT_SYMBOL(nvUvmInterfaceMemoryAllocSys);

void nvUvmInterfaceMemoryFree(uvmGpuAddressSpaceHandle vaSpace, UvmGpuPointer gpuPointer)
{
    struct sg_vaspace *vas;
    struct sg_rm_map *m;

    if (!vaSpace)
        return;

    vas = vaSpace->vas;
    spin_lock(&vas->lock);
        /* RM keys allocations by their start VA (nv_gpu_ops.c:nvGpuOpsMemoryFree). */
    m = sg_rm_map_find(vas, gpuPointer);
    if (m && m->va == gpuPointer)
        sg_rm_map_remove(vas, m);
    else
        m = NULL;
    spin_unlock(&vas->lock);

    if (!m) {
        pr_err("huvm-softgpu: GPU%u: MemoryFree of unknown RM VA 0x%llx\n", vas->gpu->index, gpuPointer);
        return;
    }
        /* Dups hold their own reference: the backing goes with the last mapping, whichever order. */
    sg_rm_backing_put(m->b);
    kfree(m);
}
EXPORT_SYMBOL(nvUvmInterfaceMemoryFree);

NV_STATUS nvUvmInterfaceMemoryCpuMap(uvmGpuAddressSpaceHandle vaSpace,
                                     UvmGpuPointer gpuPointer,
                                     NvLength length,
                                     void **cpuPtr,
                                     NvU64 pageSize)
{
    struct sg_vaspace *vas;
    struct sg_rm_map *m;
    NV_STATUS status = NV_OK;

    if (!vaSpace || !cpuPtr)
        return NV_ERR_INVALID_ARGUMENT;

        /* Every backing already has a kernel address (vmalloc'd sysmem or the vmalloc'd FB: our "BAR1"),
         * so the mapping is that address; pageSize only picks BAR1 page sizes on real parts. */
    vas = vaSpace->vas;
    spin_lock(&vas->lock);
    m = sg_rm_map_find(vas, gpuPointer);
    if (!m) {
        status = NV_ERR_OBJECT_NOT_FOUND;
    }
    else {
        u64 off = gpuPointer - m->va;

        if (length > m->size - off)
            status = NV_ERR_INVALID_ARGUMENT;
        else
            *cpuPtr = (u8 *)m->b->kva + off;
    }
    spin_unlock(&vas->lock);
    return status;
}
EXPORT_SYMBOL(nvUvmInterfaceMemoryCpuMap);

void nvUvmInterfaceMemoryCpuUnMap(uvmGpuAddressSpaceHandle vaSpace, void *cpuPtr)
{
        /* CpuMap created nothing (the pointer is the backing's permanent kernel address), so there is
         * nothing to tear down; the address stays valid until MemoryFree of the last mapping. */
}
EXPORT_SYMBOL(nvUvmInterfaceMemoryCpuUnMap);

NV_STATUS nvUvmInterfaceDupAllocation(uvmGpuAddressSpaceHandle srcVaSpace,
                                      NvU64 srcAddress,
                                      uvmGpuAddressSpaceHandle dstVaSpace,
                                      NvU64 dstVaAlignment,
                                      NvU64 *dstAddress)
{
    struct sg_vaspace *src, *dst;
    struct sg_rm_backing *b = NULL;
    struct sg_rm_map *m;
    NV_STATUS status;
    u64 align;

        /* Argument checks of nv_gpu_ops.c:nvGpuOpsDupAllocation. */
    if (!srcVaSpace || !dstVaSpace || srcVaSpace == dstVaSpace || !srcAddress || !dstAddress)
        return NV_ERR_INVALID_ARGUMENT;

    src = srcVaSpace->vas;
    dst = dstVaSpace->vas;
    if (!dst->kernel)
        return sg_refuse(dst->gpu, "DupAllocation into an externally owned VA space");

    align = max_t(u64, dstVaAlignment, SG_PAGE_4K);
    if (!is_power_of_2(align))
        return NV_ERR_INVALID_ARGUMENT;

    spin_lock(&src->lock);
    m = sg_rm_map_find(src, srcAddress);
    if (m && m->va == srcAddress) {
        b = m->b;
        kref_get(&b->ref);
    }
    spin_unlock(&src->lock);
    if (!b)
        return NV_ERR_OBJECT_NOT_FOUND;

        /* Vidmem dups across GPUs are not supported by RM either (peer RM mappings). */
    if (b->vid && dst->gpu != b->gpu) {
        sg_rm_backing_put(b);
        return NV_ERR_NOT_SUPPORTED;
    }

    status = sg_rm_map_new(dst, b, align, dstAddress);
    if (status != NV_OK)
        sg_rm_backing_put(b);
    return status;
}
EXPORT_SYMBOL(nvUvmInterfaceDupAllocation);

/* ---- TSGs and CE channels ---------------------------------------------------------------------- */

NV_STATUS nvUvmInterfaceTsgAllocate(uvmGpuAddressSpaceHandle vaSpace,
                                    const UvmGpuTsgAllocParams *allocParams,
                                    uvmGpuTsgHandle *tsg)
{
    struct uvmGpuTsg_tag *t;
    struct sg_gpu *gpu;

    if (!vaSpace || !allocParams || !tsg)
        return NV_ERR_INVALID_ARGUMENT;

    gpu = vaSpace->vas->gpu;
        /* Only copy-engine TSGs exist: UVM's internal channels. GR work comes from the SM ioctl, and SEC2
         * channels are confidential-computing only. */
    if (allocParams->engineType != UVM_GPU_CHANNEL_ENGINE_TYPE_CE) {
        sg_unemulated(gpu, "TsgAllocate on a non-CE engine", allocParams->engineType, allocParams->engineIndex);
        return NV_ERR_NOT_SUPPORTED;
    }
    if (allocParams->engineIndex >= SG_CE_COUNT)
        return NV_ERR_INVALID_ARGUMENT;

    t = kzalloc(sizeof(*t), GFP_KERNEL);
    if (!t)
        return NV_ERR_NO_MEMORY;
    t->as = vaSpace;
    t->vas = vaSpace->vas;
    kref_get(&t->vas->ref);
    t->gpu = gpu;
    t->engine_type = allocParams->engineType;
    t->engine_index = allocParams->engineIndex;
    t->channels = 0;

    *tsg = t;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceTsgAllocate);

void nvUvmInterfaceTsgDestroy(uvmGpuTsgHandle tsg)
{
    if (!tsg)
        return;
        /* UVM destroys a pool's channels before its TSG (uvm_channel.c:channel_pool_destroy). */
    WARN_ON(tsg->channels != 0);
    sg_vaspace_put(tsg->vas);
    kfree(tsg);
}
EXPORT_SYMBOL(nvUvmInterfaceTsgDestroy);

NV_STATUS nvUvmInterfaceChannelAllocate(const uvmGpuTsgHandle tsg,
                                        const UvmGpuChannelAllocParams *allocParams,
                                        uvmGpuChannelHandle *channel,
                                        UvmGpuChannelInfo *channelInfo)
{
    struct uvmGpuChannel_tag *ch;
    unsigned entries;
    NV_STATUS status;
    int id;

    if (!tsg || !allocParams || !channel || !channelInfo)
        return NV_ERR_INVALID_ARGUMENT;

        /* gpFifoLoc / gpPutLoc (VID vs SYS) only matter to real hardware: every ring and USERD word here
         * is kernel memory the engine thread polls. */
    entries = allocParams->numGpFifoEntries;
    if (entries < SG_GPFIFO_MIN_ENTRIES || entries > SG_GPFIFO_MAX_ENTRIES)
        return NV_ERR_INVALID_ARGUMENT;

    ch = kzalloc(sizeof(*ch), GFP_KERNEL);
    if (!ch)
        return NV_ERR_NO_MEMORY;
    INIT_LIST_HEAD(&ch->node);

    id = ida_alloc_range(&sg_chid_ida, SG_CHID_MIN, SG_CHID_MAX, GFP_KERNEL);
    if (id < 0) {
        status = id == -ENOMEM ? NV_ERR_NO_MEMORY : NV_ERR_INSUFFICIENT_RESOURCES;
        goto err_free;
    }
    ch->id = id;

    status = NV_ERR_NO_MEMORY;
    ch->gpfifo = kvzalloc(array_size(entries, sizeof(u64)), GFP_KERNEL);
    if (!ch->gpfifo)
        goto err_id;
    ch->userd = (u32 *)get_zeroed_page(GFP_KERNEL);
    if (!ch->userd)
        goto err_gpfifo;
    ch->error_notifier = kzalloc(sizeof(*ch->error_notifier), GFP_KERNEL);
    if (!ch->error_notifier)
        goto err_userd;

    ch->tsg = tsg;
    ch->gpu = tsg->gpu;
    ch->vas = tsg->vas;
    kref_get(&ch->vas->ref);
    ch->num_entries = entries;
    ch->userd[SG_USERD_GP_PUT] = 0;
    ch->userd[SG_USERD_GP_GET] = 0;
    ch->userd[SG_USERD_DOORBELL] = SG_DOORBELL_IDLE;
    ch->userd[SG_USERD_TOKEN] = ch->id;

    memset(channelInfo, 0, sizeof(*channelInfo));
    channelInfo->gpGet = (volatile unsigned *)&ch->userd[SG_USERD_GP_GET];
    channelInfo->gpPut = (volatile unsigned *)&ch->userd[SG_USERD_GP_PUT];
    channelInfo->gpFifoEntries = (UvmGpuPointer *)ch->gpfifo;
    channelInfo->numGpFifoEntries = entries;
    channelInfo->channelClassNum = sg_arch->host_class;
    channelInfo->errorNotifier = ch->error_notifier;
        /* Each LCE has its own runlist after GR's runlist 0. */
    channelInfo->hwRunlistId = 1 + tsg->engine_index;
    channelInfo->hwChannelId = ch->id;
    channelInfo->dummyBar1Mapping = NULL;       /* no BAR1 flush read before GP_PUT on Volta */
        /* Volta doorbell (uvm_volta_host.c:uvm_hal_volta_host_write_gpu_put): UVM writes the token here
         * after GP_PUT; the engine uses a non-idle value as its "work pending" hint. RM points every
         * channel at one USERMODE register; a word per channel keeps the hint per channel. */
    channelInfo->workSubmissionOffset = (volatile NvU32 *)&ch->userd[SG_USERD_DOORBELL];
    channelInfo->workSubmissionToken = ch->id;
    channelInfo->pWorkSubmissionToken = (volatile NvU32 *)&ch->userd[SG_USERD_TOKEN];
        /* gpFifoGpuVa / gpPutGpuVa / gpGetGpuVa / workSubmissionOffsetGpuVa: confidential computing only. */

    tsg->channels++;
    *channel = ch;

        /* The channel executes from now on: uvm_channel.c:channel_init pushes and waits right away. */
    sg_engine_add_channel(ch);
    return NV_OK;

err_userd:
    free_page((unsigned long)ch->userd);
err_gpfifo:
    kvfree(ch->gpfifo);
err_id:
    ida_free(&sg_chid_ida, ch->id);
err_free:
    kfree(ch);
    return status;
}
EXPORT_SYMBOL(nvUvmInterfaceChannelAllocate);

void nvUvmInterfaceChannelDestroy(uvmGpuChannelHandle channel)
{
    if (!channel)
        return;

        /* Stops the channel and returns once the engine no longer touches it: the RC test destroys channels
         * with work still pending. */
    sg_engine_remove_channel(channel);

    channel->tsg->channels--;
    sg_vaspace_put(channel->vas);
    kfree((void *)channel->error_notifier);
    free_page((unsigned long)channel->userd);
    kvfree(channel->gpfifo);
    ida_free(&sg_chid_ida, channel->id);
    kfree(channel);
}
EXPORT_SYMBOL(nvUvmInterfaceChannelDestroy);

/* ---- faults and access counters ---------------------------------------------------------------- */

NV_STATUS nvUvmInterfaceInitFaultInfo(uvmGpuDeviceHandle device, UvmGpuFaultInfo *pFaultInfo)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);
    struct sg_fault_unit *f;
    unsigned long flags;

    if (!gpu || !pFaultInfo)
        return NV_ERR_INVALID_ARGUMENT;

    f = &gpu->fault;
    if (!f->regs || !f->buffer || !f->entries || !f->nr_shadow || !f->nr_size || f->nr_size % 32) {
        pr_err("huvm-softgpu: GPU%u: fault unit not initialised\n", gpu->index);
        return NV_ERR_INVALID_STATE;
    }

    mutex_lock(&sg_node.lock);
    if (f->info_initialised) {
                /* One replayable fault buffer object per GPU, as the hardware has one buffer. */
        mutex_unlock(&sg_node.lock);
        return NV_ERR_STATE_IN_USE;
    }
        /* Allocating the buffer object programs a fresh, empty ring: stale entries from an earlier owner
         * (a previous nvidia-uvm instance or registration) must not reach the new one. The ring is reset
         * before the fault unit may write packets (info_initialised), so no packet is wiped. */
    raw_spin_lock_irqsave(&f->lock, flags);
    memset(f->buffer, 0, (size_t)f->entries * 32);
    WRITE_ONCE(f->regs->fault_get, 0);
    WRITE_ONCE(f->regs->fault_put, 0);
    WRITE_ONCE(f->regs->fault_info, 0);
    WRITE_ONCE(f->info_initialised, true);
    raw_spin_unlock_irqrestore(&f->lock, flags);
    mutex_unlock(&sg_node.lock);

    memset(pFaultInfo, 0, sizeof(*pFaultInfo));
    pFaultInfo->replayable.pFaultBufferGet = &f->regs->fault_get;
    pFaultInfo->replayable.pFaultBufferPut = &f->regs->fault_put;
    pFaultInfo->replayable.pFaultBufferInfo = &f->regs->fault_info;
    pFaultInfo->replayable.pPmcIntr = &f->regs->pmc_intr;
    pFaultInfo->replayable.pPmcIntrEnSet = &f->regs->pmc_intr_en_set;
    pFaultInfo->replayable.pPmcIntrEnClear = &f->regs->pmc_intr_en_clear;
    pFaultInfo->replayable.pPrefetchCtrl = &f->regs->prefetch_ctrl;
    pFaultInfo->replayable.replayableFaultMask = SG_INTR_REPLAYABLE_FAULT;
    pFaultInfo->replayable.bufferAddress = f->buffer;
    pFaultInfo->replayable.bufferSize = f->entries * 32;
    pFaultInfo->replayable.bufferMetadata = NULL;      /* confidential computing only */
#if SG_NV_BRANCH < 580
    pFaultInfo->replayable.bUvmOwnsHwFaultBuffer = NV_TRUE;
#endif

        /* Non-replayable faults are not emulated: the shadow buffer stays empty and Has/Get report none. */
    pFaultInfo->nonReplayable.shadowBufferAddress = f->nr_shadow;
    pFaultInfo->nonReplayable.shadowBufferContext = NULL;
    pFaultInfo->nonReplayable.bufferSize = f->nr_size;
    pFaultInfo->nonReplayable.isr_sp = NULL;
    pFaultInfo->nonReplayable.isr_bh_sp = NULL;

    pFaultInfo->faultBufferHandle = SG_FAULT_BUFFER_HANDLE(gpu);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceInitFaultInfo);

NV_STATUS nvUvmInterfaceDestroyFaultInfo(uvmGpuDeviceHandle device, UvmGpuFaultInfo *pFaultInfo)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);

    if (!gpu || !pFaultInfo)
        return NV_ERR_INVALID_ARGUMENT;

    mutex_lock(&sg_node.lock);
    gpu->fault.info_initialised = false;
        /* UVM released interrupt ownership just before (OwnPageFaultIntr(FALSE)); make sure of it. */
    WRITE_ONCE(gpu->fault.uvm_owns_intr, false);
    mutex_unlock(&sg_node.lock);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceDestroyFaultInfo);

NV_STATUS nvUvmInterfaceOwnPageFaultIntr(uvmGpuDeviceHandle device, NvBool bOwnInterrupts)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);

    if (!gpu)
        return NV_ERR_INVALID_ARGUMENT;

        /* With ownership the fault unit calls UVM's top half; the line stays masked until UVM writes
         * replayableFaultMask to EnSet (uvm_gpu.c:add_gpu enables it). */
    WRITE_ONCE(gpu->fault.uvm_owns_intr, !!bOwnInterrupts);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceOwnPageFaultIntr);

NV_STATUS nvUvmInterfaceHasPendingNonReplayableFaults(UvmGpuFaultInfo *pFaultInfo, NvBool *hasPendingFaults)
{
        /* Called from UVM's top half in hard-IRQ context: no locks. Non-replayable (CE/PBDMA) faults are
         * not emulated, so the shadow buffer never fills. */
    if (!pFaultInfo || !hasPendingFaults)
        return NV_ERR_INVALID_ARGUMENT;
    *hasPendingFaults = NV_FALSE;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceHasPendingNonReplayableFaults);

NV_STATUS nvUvmInterfaceGetNonReplayableFaults(UvmGpuFaultInfo *pFaultInfo, void *pFaultBuffer, NvU32 *numFaults)
{
    if (!pFaultInfo || !pFaultBuffer || !numFaults)
        return NV_ERR_INVALID_ARGUMENT;
    *numFaults = 0;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceGetNonReplayableFaults);

#if SG_NV_BRANCH >= 580
/* The GPU of a fault info InitFaultInfo filled (580's fault-buffer calls take it instead of the device). */
static struct sg_gpu *sg_fault_info_gpu(const UvmGpuFaultInfo *pFaultInfo)
{
    u32 h = pFaultInfo ? pFaultInfo->faultBufferHandle : 0;
    u32 index = (h & 0xffffu) - 1;

    if ((h & 0xffff0000u) != SG_FAULT_BUFFER_HANDLE_BASE || index >= SG_MAX_GPUS)
        return NULL;
    return READ_ONCE(sg_node.gpus[index]);
}

NV_STATUS nvUvmInterfaceFlushReplayableFaultBuffer(UvmGpuFaultInfo *pFaultInfo, NvBool bCopyAndFlush)
{
        /* Confidential computing only (GSP-owned buffer mirrored into a shadow; UVM returns before the
         * call otherwise). With UVM owning the hardware buffer there is nothing RM-side to flush or copy. */
    if (!sg_fault_info_gpu(pFaultInfo))
        return NV_ERR_INVALID_ARGUMENT;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceFlushReplayableFaultBuffer);

NV_STATUS nvUvmInterfaceTogglePrefetchFaults(UvmGpuFaultInfo *pFaultInfo, NvBool bEnable)
{
    struct sg_gpu *gpu = sg_fault_info_gpu(pFaultInfo);
    u32 v;

        /* RM writes PRF_FILTER of the fault control register (kgmmuToggleFaultOnPrefetch); UVM calls it
         * only when it has no pPrefetchCtrl mapping (confidential computing), but the effect is the
         * same register the fault unit reads. */
    if (!gpu || !gpu->fault.regs)
        return NV_ERR_INVALID_ARGUMENT;
    v = READ_ONCE(gpu->fault.regs->prefetch_ctrl) & ~SG_PRF_FILTER_MASK;
    v |= bEnable ? SG_PRF_FILTER_SEND_ALL : SG_PRF_FILTER_SEND_NONE;
    WRITE_ONCE(gpu->fault.regs->prefetch_ctrl, v);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceTogglePrefetchFaults);
#else
NV_STATUS nvUvmInterfaceFlushReplayableFaultBuffer(uvmGpuDeviceHandle device)
{
        /* Confidential computing only (GSP-owned buffer mirrored into a shadow). With UVM owning the
         * hardware buffer there is nothing RM-side to flush. */
    if (!sg_dev_gpu(device))
        return NV_ERR_INVALID_ARGUMENT;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceFlushReplayableFaultBuffer);
#endif

NV_STATUS nvUvmInterfaceInitAccessCntrInfo(uvmGpuDeviceHandle device,
                                           UvmGpuAccessCntrInfo *pAccessCntrInfo,
                                           NvU32 accessCntrIndex)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);
    struct sg_fault_unit *f;

    if (!gpu || !pAccessCntrInfo)
        return NV_ERR_INVALID_ARGUMENT;
    if (accessCntrIndex != 0)       /* Volta has one notification buffer */
        return NV_ERR_INVALID_ARGUMENT;

    f = &gpu->fault;
    if (!f->regs || !f->ac_buffer || !f->ac_size || f->ac_size % 32) {
        pr_err("huvm-softgpu: GPU%u: access-counter buffer not initialised\n", gpu->index);
        return NV_ERR_INVALID_STATE;
    }

    mutex_lock(&sg_node.lock);
    if (f->ac_initialised) {
        mutex_unlock(&sg_node.lock);
        return NV_ERR_STATE_IN_USE;
    }
    f->ac_initialised = true;
    mutex_unlock(&sg_node.lock);

        /*
         * Volta supports access counters, so UVM's GPU init needs a working buffer description. Access
         * counter notifications are not emulated: the buffer never fills and GET == PUT stays true.
         */
    WRITE_ONCE(f->regs->ac_get, 0);
    WRITE_ONCE(f->regs->ac_put, 0);
    WRITE_ONCE(f->regs->ac_full, 0);

    memset(pAccessCntrInfo, 0, sizeof(*pAccessCntrInfo));
    pAccessCntrInfo->pAccessCntrBufferGet = &f->regs->ac_get;
    pAccessCntrInfo->pAccessCntrBufferPut = &f->regs->ac_put;
    pAccessCntrInfo->pAccessCntrBufferFull = &f->regs->ac_full;
    pAccessCntrInfo->pHubIntr = &f->regs->ac_hub_intr;
    pAccessCntrInfo->pHubIntrEnSet = &f->regs->ac_en_set;
    pAccessCntrInfo->pHubIntrEnClear = &f->regs->ac_en_clear;
    pAccessCntrInfo->accessCounterMask = SG_INTR_ACCESS_CNTR;
    pAccessCntrInfo->bufferAddress = f->ac_buffer;
    pAccessCntrInfo->bufferSize = f->ac_size;
    pAccessCntrInfo->accessCntrBufferHandle = SG_ACCESS_CNTR_HANDLE(gpu);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceInitAccessCntrInfo);

NV_STATUS nvUvmInterfaceDestroyAccessCntrInfo(uvmGpuDeviceHandle device, UvmGpuAccessCntrInfo *pAccessCntrInfo)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);

    if (!gpu || !pAccessCntrInfo)
        return NV_ERR_INVALID_ARGUMENT;

    mutex_lock(&sg_node.lock);
    gpu->fault.ac_initialised = false;
    mutex_unlock(&sg_node.lock);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceDestroyAccessCntrInfo);

#if SG_NV_BRANCH >= 580
NV_STATUS nvUvmInterfaceEnableAccessCntr(uvmGpuDeviceHandle device,
                                         UvmGpuAccessCntrInfo *pAccessCntrInfo,
                                         const UvmGpuAccessCntrConfig *pAccessCntrConfig)
#define SG_ACCESS_CNTR_GRANULARITY(c) ((c)->granularity)
#else
NV_STATUS nvUvmInterfaceEnableAccessCntr(uvmGpuDeviceHandle device,
                                         UvmGpuAccessCntrInfo *pAccessCntrInfo,
                                         UvmGpuAccessCntrConfig *pAccessCntrConfig)
#define SG_ACCESS_CNTR_GRANULARITY(c) ((c)->mimcGranularity)
#endif
{
    struct sg_gpu *gpu = sg_dev_gpu(device);

    if (!gpu || !pAccessCntrInfo || !pAccessCntrConfig)
        return NV_ERR_INVALID_ARGUMENT;

        /*
         * Succeeds without effect: access-counter notifications are not emulated, so an enabled counter
         * unit simply never reports anything (GET == PUT). UVM only gets here when access-counter
         * migrations are forced on (module parameter), not with defaults on x86; the reach is reported so
         * a test relying on notifications knows why none arrive.
         */
    sg_unemulated(gpu,
                  "access-counter notifications (EnableAccessCntr)",
                  pAccessCntrConfig->threshold,
                  SG_ACCESS_CNTR_GRANULARITY(pAccessCntrConfig));
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceEnableAccessCntr);

NV_STATUS nvUvmInterfaceDisableAccessCntr(uvmGpuDeviceHandle device, UvmGpuAccessCntrInfo *pAccessCntrInfo)
{
        /* No effect: notifications are never generated (see EnableAccessCntr). */
    if (!sg_dev_gpu(device) || !pAccessCntrInfo)
        return NV_ERR_INVALID_ARGUMENT;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceDisableAccessCntr);

/* ---- peers --------------------------------------------------------------------------------------- */

NV_STATUS nvUvmInterfaceGetP2PCaps(uvmGpuDeviceHandle device1,
                                   uvmGpuDeviceHandle device2,
                                   UvmGpuP2PCapsParams *p2pCapsParams)
{
    struct sg_gpu *g1 = sg_dev_gpu(device1), *g2 = sg_dev_gpu(device2);
    int id1, id2;

    if (!g1 || !g2 || !p2pCapsParams || device1->session != device2->session || g1 == g2)
        return NV_ERR_INVALID_ARGUMENT;

    memset(p2pCapsParams, 0, sizeof(*p2pCapsParams));
    p2pCapsParams->peerIds[0] = (NvU32)-1;
    p2pCapsParams->peerIds[1] = (NvU32)-1;
    p2pCapsParams->p2pLink = UVM_LINK_TYPE_NONE;
#if SG_NV_BRANCH < 580
    p2pCapsParams->indirectAccess = NV_FALSE;     /* P9 NPUs only; gone in 570 */
#endif

    if (g1->link_type[g2->index] == SOFTGPU_LINK_NONE)
        return NV_OK;

        /* Peer ids are fixed at load by the topology, so they are stable across P2pObjectCreate (UVM asks
         * again after creating the object because RM assigns them there). */
    id1 = g1->peer_id_of[g2->index];
    id2 = g2->peer_id_of[g1->index];
    if (id1 < 0 || id1 >= SG_MAX_PEER_IDS || id2 < 0 || id2 >= SG_MAX_PEER_IDS) {
        pr_err("huvm-softgpu: GPU%u<->GPU%u linked without peer ids\n", g1->index, g2->index);
        return NV_ERR_INVALID_STATE;
    }
    p2pCapsParams->peerIds[0] = id1;
    p2pCapsParams->peerIds[1] = id2;

    switch (g1->link_type[g2->index]) {
    case SOFTGPU_LINK_NVLINK2:
        p2pCapsParams->p2pLink = sg_arch->nvlink_type;
                /* Must be usable CEs (uvm_channel_manager_set_p2p_ce asserts it). */
        p2pCapsParams->optimalNvlinkWriteCEs[0] = SG_CE_PEER_WRITE;
        p2pCapsParams->optimalNvlinkWriteCEs[1] = SG_CE_PEER_WRITE;
        p2pCapsParams->totalLinkLineRateMBps = SG_NVLINK_LINK_MBPS * max_t(u32, g1->link_count[g2->index], 1);
        break;
    case SOFTGPU_LINK_PCIE:
        p2pCapsParams->p2pLink = UVM_LINK_TYPE_PCIE;
        p2pCapsParams->totalLinkLineRateMBps = SG_PCIE_P2P_MBPS;
        break;
    default:
        pr_err("huvm-softgpu: GPU%u<->GPU%u: unknown link type %u\n", g1->index, g2->index, g1->link_type[g2->index]);
        return NV_ERR_INVALID_STATE;
    }
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceGetP2PCaps);

NV_STATUS nvUvmInterfaceP2pObjectCreate(uvmGpuDeviceHandle device1, uvmGpuDeviceHandle device2, NvHandle *hP2pObject)
{
    struct sg_gpu *g1 = sg_dev_gpu(device1), *g2 = sg_dev_gpu(device2);
    unsigned lo, hi;

    if (!g1 || !g2 || !hP2pObject || g1 == g2 || device1->session != device2->session)
        return NV_ERR_INVALID_ARGUMENT;

        /* No peer access without a link (RM's P2P object allocation fails the same way). */
    if (g1->link_type[g2->index] == SOFTGPU_LINK_NONE)
        return NV_ERR_NOT_SUPPORTED;

    lo = min(g1->index, g2->index);
    hi = max(g1->index, g2->index);
    mutex_lock(&sg_node.lock);
    sg_p2p_refs[lo][hi]++;
    mutex_unlock(&sg_node.lock);

    *hP2pObject = SG_P2P_HANDLE(lo, hi);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceP2pObjectCreate);

void nvUvmInterfaceP2pObjectDestroy(uvmGpuSessionHandle session, NvHandle hP2pObject)
{
    unsigned lo = (hP2pObject >> 4) & 0xf, hi = hP2pObject & 0xf;

    if ((hP2pObject & ~0xffu) != SG_P2P_HANDLE_BASE || lo >= SG_MAX_GPUS || hi >= SG_MAX_GPUS) {
        pr_err("huvm-softgpu: P2pObjectDestroy of unknown handle 0x%x\n", hP2pObject);
        return;
    }

    mutex_lock(&sg_node.lock);
    if (sg_p2p_refs[lo][hi] == 0)
        pr_err("huvm-softgpu: P2pObjectDestroy of handle 0x%x that is not allocated\n", hP2pObject);
    else
        sg_p2p_refs[lo][hi]--;
    mutex_unlock(&sg_node.lock);
}
EXPORT_SYMBOL(nvUvmInterfaceP2pObjectDestroy);

/* ---- retained (user) channels ------------------------------------------------------------------ */

static struct sg_retained_channel *sg_retained(void *retainedChannel)
{
    struct sg_retained_channel *rc = retainedChannel;

    if (!rc || WARN_ON(rc->magic != SG_RETAINED_MAGIC))
        return NULL;
    return rc;
}

NV_STATUS nvUvmInterfaceRetainChannel(uvmGpuAddressSpaceHandle vaSpace,
                                      NvHandle hClient,
                                      NvHandle hChannel,
                                      void **retainedChannel,
                                      UvmGpuChannelInstanceInfo *channelInstanceInfo)
{
    struct sg_retained_channel *rc;
    struct sg_user_channel *uch;
    UvmGpuChannelInstanceInfo *info = channelInstanceInfo;
    NV_STATUS status = NV_OK;

    if (!vaSpace || !retainedChannel || !info)
        return NV_ERR_INVALID_ARGUMENT;

    rc = kzalloc(sizeof(*rc), GFP_KERNEL);
    if (!rc)
        return NV_ERR_NO_MEMORY;

        /* Lookup and retained++ under sg_node.lock, which DESTROY_OBJECT holds to check `retained`: a
         * channel is either destroyed or retained, never both. */
    mutex_lock(&sg_node.lock);
    uch = sg_obj_get_channel(hClient, hChannel);
    if (!uch) {
        status = NV_ERR_INVALID_OBJECT_HANDLE;
    }
    else if (uch->vas != vaSpace->vas) {
                /* Error order of nv_gpu_ops.c:nvGpuOpsVerifyChannel. */
        status = uch->gpu != vaSpace->vas->gpu ? NV_ERR_OTHER_DEVICE_FOUND : NV_ERR_INVALID_CHANNEL;
    }
    else {
        uch->retained++;
    }
    mutex_unlock(&sg_node.lock);

    if (status != NV_OK) {
        sg_user_channel_put(uch);       /* NULL-safe; never under sg_node.lock (it may free the VA space) */
        kfree(rc);
        return status;
    }
    rc->magic = SG_RETAINED_MAGIC;
    rc->uch = uch;         /* keeps the lookup's reference until ReleaseChannel */

        /* A GR channel outside any TSG and subcontext, instance block in sysmem, no context buffers to map
         * (resourceCount 0): the fault unit reports the instance pointer and VEID 0. */
    memset(info, 0, sizeof(*info));
    info->base = uch->inst_pa;
    info->sysmem = NV_TRUE;
    info->runlistId = 0;
    info->chId = uch->handle & SG_CHID_MAX;
    info->bInSubctx = NV_FALSE;
    info->subctxId = 0;
    info->bTsgChannel = NV_FALSE;
    info->tsgId = 0;
    info->tsgMaxSubctxCount = 0;           /* read only for TSG channels */
    info->resourceCount = 0;
    info->channelEngineType = UVM_GPU_CHANNEL_ENGINE_TYPE_GR;
    info->clearFaultedToken = info->chId;
    info->pChramChannelRegister = (volatile NvU32 *)&sg_dummy_chram_reg;
    info->pRunlistPRIBaseRegister = (volatile NvU32 *)&sg_dummy_runlist_pri_reg;
    info->smcEngineId = 0;
    info->smcEngineVeIdOffset = 0;

    *retainedChannel = rc;
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceRetainChannel);

NV_STATUS nvUvmInterfaceBindChannelResources(void *retainedChannel,
                                             UvmGpuChannelResourceBindParams *channelResourceBindParams)
{
    struct sg_retained_channel *rc = sg_retained(retainedChannel);

    if (!rc)
        return NV_ERR_INVALID_ARGUMENT;

        /* Retained channels report no resources, so there is nothing to map (UVM still calls this). Binding
         * marks the context bound again, as RM does: a channel stopped by an earlier registration's
         * StopChannel runs again once UVM registers it anew. */
    WRITE_ONCE(rc->uch->stopped, false);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceBindChannelResources);

void nvUvmInterfaceStopChannel(void *retainedChannel, NvBool bImmediate)
{
    struct sg_retained_channel *rc = sg_retained(retainedChannel);

    if (!rc)
        return;
        /* Preempt the channel off the SM: its parked accesses fail and new ones are refused. The SM has no
         * in-flight work to drain, so "immediate" and "graceful" stops are the same. */
    WRITE_ONCE(rc->uch->stopped, true);
    sg_fault_stop_channel(rc->uch->gpu, rc->uch);
}
EXPORT_SYMBOL(nvUvmInterfaceStopChannel);

void nvUvmInterfaceReleaseChannel(void *retainedChannel)
{
    struct sg_retained_channel *rc = sg_retained(retainedChannel);

    if (!rc)
        return;

        /* Only drops UVM's hold: like RM, releasing does not stop the channel (UVM_TEST_CHECK_CHANNEL_VA_SPACE
         * retains and releases channels that keep running). */
    mutex_lock(&sg_node.lock);
    if (!WARN_ON(rc->uch->retained <= 0))
        rc->uch->retained--;
    mutex_unlock(&sg_node.lock);

    sg_user_channel_put(rc->uch);
    rc->magic = 0;
    kfree(rc);
}
EXPORT_SYMBOL(nvUvmInterfaceReleaseChannel);

NV_STATUS nvUvmInterfaceGetChannelResourcePtes(uvmGpuAddressSpaceHandle vaSpace,
                                               NvP64 resourceDescriptor,
                                               NvU64 offset,
                                               NvU64 size,
                                               UvmGpuExternalMappingInfo *externalMappingInfo)
{
        /* Unreachable: retained channels have no resources. */
    return sg_refuse(vaSpace ? vaSpace->vas->gpu : NULL, "GetChannelResourcePtes");
}
EXPORT_SYMBOL(nvUvmInterfaceGetChannelResourcePtes);

NV_STATUS nvUvmInterfaceReportNonReplayableFault(uvmGpuDeviceHandle device, const void *pFaultPacket)
{
    struct sg_gpu *gpu = sg_dev_gpu(device);

        /* RM only logs these (fatal non-replayable faults on user channels). */
    if (!gpu || !pFaultPacket)
        return NV_ERR_INVALID_ARGUMENT;
    pr_info_ratelimited("huvm-softgpu: GPU%u: UVM reported a fatal non-replayable fault\n", gpu->index);
    return NV_OK;
}
EXPORT_SYMBOL(nvUvmInterfaceReportNonReplayableFault);

/* ---- not emulated: external allocations ----------------------------------------------------------- */

NV_STATUS nvUvmInterfaceGetExternalAllocPtes(uvmGpuAddressSpaceHandle vaSpace,
                                             NvHandle hMemory,
                                             NvU64 offset,
                                             NvU64 size,
                                             UvmGpuExternalMappingInfo *gpuExternalMappingInfo)
{
        /* UVM_MAP_EXTERNAL_ALLOCATION / UVM_TEST_GET_RM_PTES: there are no RM user memory objects. */
    return sg_refuse(vaSpace ? vaSpace->vas->gpu : NULL, "GetExternalAllocPtes (external allocations)");
}
EXPORT_SYMBOL(nvUvmInterfaceGetExternalAllocPtes);

#if SG_NV_BRANCH >= 580
NV_STATUS nvUvmInterfaceGetExternalAllocPhysAddrs(uvmGpuAddressSpaceHandle vaSpace,
                                                  NvHandle hMemory,
                                                  NvU64 offset,
                                                  NvU64 size,
                                                  UvmGpuExternalPhysAddrInfo *gpuExternalPhysAddrsInfo)
{
        /* Device P2P mappings of RM memory (uvm_va_range_device_p2p.c): there are no RM user memory objects. */
    return sg_refuse(vaSpace ? vaSpace->vas->gpu : NULL, "GetExternalAllocPhysAddrs (external allocations)");
}
EXPORT_SYMBOL(nvUvmInterfaceGetExternalAllocPhysAddrs);

void nvUvmInterfaceReportFatalError(NV_STATUS error)
{
    static atomic_t reports = ATOMIC_INIT(0);
    static NV_STATUS last_error;

        /*
         * RM logs it and marks the node for a reboot (nvGpuOpsReportFatalError). UVM calls this from every
         * uvm_global_set_fatal_error(), which its own built-in tests provoke (GPU_SEMAPHORE_SANITY's
         * semaphore jumps) and which it already logs each time: the emulator logs the first report of each
         * error code in a row with the running count, no flood. Any context (bottom halves): no lock, no sleep.
         */
    atomic_inc(&reports);
    if (xchg(&last_error, error) != error)
        pr_err("huvm-softgpu: nvidia-uvm reported a global fatal error 0x%x (report %d): RM would require a reboot\n",
               error,
               atomic_read(&reports));
}
EXPORT_SYMBOL(nvUvmInterfaceReportFatalError);
#endif

NV_STATUS nvUvmInterfaceDupMemory(uvmGpuDeviceHandle device,
                                  NvHandle hClient,
                                  NvHandle hPhysMemory,
                                  NvHandle *hDupMemory,
                                  UvmGpuMemoryInfo *pGpuMemoryInfo)
{
    return sg_refuse(sg_dev_gpu(device), "DupMemory (external allocations)");
}
EXPORT_SYMBOL(nvUvmInterfaceDupMemory);

NV_STATUS nvUvmInterfaceFreeDupedHandle(uvmGpuDeviceHandle device, NvHandle hPhysHandle)
{
        /* Only follows a successful DupMemory, which never happens. */
    return sg_refuse(sg_dev_gpu(device), "FreeDupedHandle (external allocations)");
}
EXPORT_SYMBOL(nvUvmInterfaceFreeDupedHandle);

/* ---- not emulated: SR-IOV heavy paging channels (virtMode is NONE) -------------------------------- */

NV_STATUS nvUvmInterfacePagingChannelAllocate(uvmGpuDeviceHandle device,
                                              const UvmGpuPagingChannelAllocParams *allocParams,
                                              UvmGpuPagingChannelHandle *channel,
                                              UvmGpuPagingChannelInfo *channelInfo)
{
    return sg_refuse(sg_dev_gpu(device), "PagingChannelAllocate (SR-IOV heavy)");
}
EXPORT_SYMBOL(nvUvmInterfacePagingChannelAllocate);

void nvUvmInterfacePagingChannelDestroy(UvmGpuPagingChannelHandle channel)
{
        /* NULL returns immediately; anything else cannot have come from us. */
    if (channel)
        sg_unemulated(NULL, "PagingChannelDestroy (SR-IOV heavy)", 0, 0);
}
EXPORT_SYMBOL(nvUvmInterfacePagingChannelDestroy);

NV_STATUS nvUvmInterfacePagingChannelsMap(uvmGpuAddressSpaceHandle srcVaSpace,
                                          UvmGpuPointer srcAddress,
                                          uvmGpuDeviceHandle device,
                                          NvU64 *dstAddress)
{
    return sg_refuse(sg_dev_gpu(device), "PagingChannelsMap (SR-IOV heavy)");
}
EXPORT_SYMBOL(nvUvmInterfacePagingChannelsMap);

void nvUvmInterfacePagingChannelsUnmap(uvmGpuAddressSpaceHandle srcVaSpace,
                                       UvmGpuPointer srcAddress,
                                       uvmGpuDeviceHandle device)
{
    sg_unemulated(sg_dev_gpu(device), "PagingChannelsUnmap (SR-IOV heavy)", 0, 0);
}
EXPORT_SYMBOL(nvUvmInterfacePagingChannelsUnmap);

NV_STATUS nvUvmInterfacePagingChannelPushStream(UvmGpuPagingChannelHandle channel,
                                                char *methodStream,
                                                NvU32 methodStreamSize)
{
    return sg_refuse(NULL, "PagingChannelPushStream (SR-IOV heavy)");
}
EXPORT_SYMBOL(nvUvmInterfacePagingChannelPushStream);

/* ---- not emulated: confidential computing (gpuConfComputeCaps.mode is NONE) ------------------------ */

NV_STATUS nvUvmInterfaceCslInitContext(UvmCslContext *uvmCslContext, uvmGpuChannelHandle channel)
{
    return sg_refuse(channel ? channel->gpu : NULL, "CslInitContext (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslInitContext);

void nvUvmInterfaceDeinitCslContext(UvmCslContext *uvmCslContext)
{
        /* "If context is already deinitialized then function returns immediately": ours never are. */
    if (uvmCslContext && uvmCslContext->ctx)
        sg_unemulated(NULL, "DeinitCslContext (confidential computing)", 0, 0);
}
EXPORT_SYMBOL(nvUvmInterfaceDeinitCslContext);

NV_STATUS nvUvmInterfaceCslRotateIv(UvmCslContext *uvmCslContext, UvmCslOperation operation)
{
    return sg_refuse(NULL, "CslRotateIv (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslRotateIv);

NV_STATUS nvUvmInterfaceCslEncrypt(UvmCslContext *uvmCslContext,
                                   NvU32 bufferSize,
                                   NvU8 const *inputBuffer,
                                   UvmCslIv *encryptIv,
                                   NvU8 *outputBuffer,
                                   NvU8 *authTagBuffer)
{
    return sg_refuse(NULL, "CslEncrypt (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslEncrypt);

#if SG_NV_BRANCH >= 580
NV_STATUS nvUvmInterfaceCslDecrypt(UvmCslContext *uvmCslContext,
                                   NvU32 bufferSize,
                                   NvU8 const *inputBuffer,
                                   UvmCslIv const *decryptIv,
                                   NvU32 keyRotationId,
                                   NvU8 *outputBuffer,
                                   NvU8 const *addAuthData,
                                   NvU32 addAuthDataSize,
                                   NvU8 const *authTagBuffer)
#else
NV_STATUS nvUvmInterfaceCslDecrypt(UvmCslContext *uvmCslContext,
                                   NvU32 bufferSize,
                                   NvU8 const *inputBuffer,
                                   UvmCslIv const *decryptIv,
                                   NvU8 *outputBuffer,
                                   NvU8 const *addAuthData,
                                   NvU32 addAuthDataSize,
                                   NvU8 const *authTagBuffer)
#endif
{
    return sg_refuse(NULL, "CslDecrypt (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslDecrypt);

NV_STATUS nvUvmInterfaceCslSign(UvmCslContext *uvmCslContext,
                                NvU32 bufferSize,
                                NvU8 const *inputBuffer,
                                NvU8 *authTagBuffer)
{
    return sg_refuse(NULL, "CslSign (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslSign);

NV_STATUS nvUvmInterfaceCslQueryMessagePool(UvmCslContext *uvmCslContext, UvmCslOperation operation, NvU64 *messageNum)
{
    return sg_refuse(NULL, "CslQueryMessagePool (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslQueryMessagePool);

NV_STATUS nvUvmInterfaceCslIncrementIv(UvmCslContext *uvmCslContext,
                                       UvmCslOperation operation,
                                       NvU64 increment,
                                       UvmCslIv *iv)
{
    return sg_refuse(NULL, "CslIncrementIv (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslIncrementIv);

#if SG_NV_BRANCH >= 580
NV_STATUS nvUvmInterfaceCslRotateKey(UvmCslContext *contextList[], NvU32 contextListCount)
{
    if (!contextList || !contextListCount)
        return NV_ERR_INVALID_ARGUMENT;
    return sg_refuse(NULL, "CslRotateKey (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslRotateKey);

NV_STATUS nvUvmInterfaceCslLogEncryption(UvmCslContext *uvmCslContext, UvmCslOperation operation, NvU32 bufferSize)
{
    return sg_refuse(NULL, "CslLogEncryption (confidential computing)");
}
EXPORT_SYMBOL(nvUvmInterfaceCslLogEncryption);
#endif
