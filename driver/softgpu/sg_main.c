/*
 * huvm-softgpu: module load/unload, parameters, PCI binding, topology and /dev/huvm-softgpu.
 * SPDX-License-Identifier: GPL-2.0 OR MIT
 *
 * TEST HARDWARE ONLY (see sg.h). This file creates the emulated GPUs (GA100 or GV100) of the qemu test bed: one
 * qemu pci-testdev per GPU gives UVM a real struct device for the DMA API (UvmGpuPlatformInfo.pci_dev,
 * as nvidia.ko's kernel-open/nvidia/nv-pci.c hands out), the framebuffer is vmalloc'd host memory, and
 * the topology (NVLink widths, peer ids) comes from a module parameter.
 *
 * /dev/huvm-softgpu is the "RM-lite" control device: user space gets from it what a CUDA program gets
 * from nvidia.ko's RM API and then passes to nvidia-uvm (UVM_REGISTER_GPU's hClient,
 * UVM_REGISTER_GPU_VASPACE's hVaSpace, UVM_REGISTER_CHANNEL's hChannel), plus the emulated SM, "foreign"
 * (non-UVM) FB allocations, knobs and counters. The ABI is driver/include/uapi/huvm_softgpu_ioctl.h.
 *
 * Handles: every client (one per open file) and every object it creates gets a nonzero handle from one
 * global idr, so a handle names one object node-wide, as RM handles do within a client. Objects are
 * freed by DESTROY_OBJECT / FOREIGN_FREE or, at the latest, when their client's file is released
 * (newest first).
 *
 * LOCKING (see also sg.h):
 *   sg_node.lock (mutex)     object creation/destruction, client object lists, a VA-space object's
 *                            channel count, sg_user_channel.retained, sg_gpu.registered
 *   sg_obj_lock (spinlock)   the idr itself; a leaf taken inside sg_node.lock by writers and alone by
 *                            lookups, so that sg_obj_get_*() work with or without sg_node.lock held
 *   sg_pdev_lock (mutex)     the bound pci_dev list while the PCI core probes
 *   sg_unemulated_lock       (raw spinlock, IRQ-safe) the table of "not emulated" kinds already reported
 * No lock of this file is held while calling into the RM, PMA, fault or engine parts (object
 * references are dropped after sg_node.lock is released).
 */

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/kernel.h>
#include <linux/pci.h>
#include <linux/dma-mapping.h>
#include <linux/miscdevice.h>
#include <linux/fs.h>
#include <linux/uaccess.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/mm.h>
#include <linux/idr.h>
#include <linux/sort.h>
#include <linux/string.h>
#include <linux/stddef.h>
#include <linux/kref.h>

#include "sg.h"

#define SG_NAME "huvm-softgpu"

/* qemu's pci-testdev (hw/misc/pci-testdev.c): PCI_VENDOR_ID_REDHAT, PCI_DEVICE_ID_REDHAT_TEST. It has no
 * Linux driver, so binding it takes nothing away from the guest. */
#define SG_PCI_DEVICE_ID_TESTDEV 0x0005

/* Volta addresses 47 bits of system memory (UVM's Volta HAL); this is also what we report as
 * dma_addressable_limit. */
#define SG_DMA_BITS 47

/* Parameter ranges. */
#define SG_FB_MIB_MIN            64
#define SG_FB_MIB_MAX            4096
#define SG_RM_RESERVED_MIB_MIN   8       /* UVM_TEST_RM_MEM_SANITY makes 4 MiB FB RM allocations */
#define SG_PMA_MIN_MIB           32      /* rm_reserved_mib < fb_mib - 32: PMA keeps at least this */
#define SG_RAM_MARGIN_MIB        256     /* guest RAM left over after all framebuffers, at least */
#define SG_KNOB_COPY_MBPS_MAX    1000000ULL  /* 1 TB/s: more is not a throttle */
#define SG_KNOB_LATENCY_US_MAX   1000000ULL  /* 1 s */
#define SG_SM_DEFAULT_TIMEOUT_MS 10000   /* SOFTGPU_SM_ACCESS_PARAMS.timeout_ms == 0 */

/* ---- module parameters ----------------------------------------------------------------------- */

static unsigned int sg_param_gpus = 4;
module_param_named(gpus, sg_param_gpus, uint, 0444);
MODULE_PARM_DESC(gpus, "Emulated GPUs, 1-8 (default 4); each needs its own qemu -device pci-testdev");

static char *sg_param_arch = "ampere";
module_param_named(arch, sg_param_arch, charp, 0444);
MODULE_PARM_DESC(arch,
                 "Architecture every GPU emulates: ampere (A100 SXM4, GA100; default) or volta (V100 SXM2, "
                 "GV100)");

static unsigned int sg_param_fb_mib = 128;
module_param_named(fb_mib, sg_param_fb_mib, uint, 0444);
MODULE_PARM_DESC(fb_mib, "Framebuffer per GPU in MiB, 64-4096, a multiple of 2 (default 128); vmalloc'd guest RAM");

static unsigned int sg_param_rm_reserved_mib = 32;
module_param_named(rm_reserved_mib, sg_param_rm_reserved_mib, uint, 0444);
MODULE_PARM_DESC(rm_reserved_mib,
                 "RM-reserved top of each framebuffer in MiB, 8 to below fb_mib - 32, a multiple "
                 "of 2 (default 32); PMA (UVM) gets the rest");

static char *sg_param_topology = "all";
module_param_named(topology, sg_param_topology, charp, 0444);
MODULE_PARM_DESC(topology,
                 "GPU interconnect: all (NVLink x1 between every pair, default), pairs (NVLink x1 "
                 "0-1, 2-3, ...), cube-mesh (DGX-1 V100 hybrid cube-mesh, its subgraph for fewer "
                 "GPUs; gpus=4 is AWS p3.8xlarge), none (PCIe only), or a list i-j:links,... "
                 "(links 1-6); pairs without NVLink are PCIe peers");

static unsigned long sg_param_copy_mbps;
module_param_named(copy_mbps, sg_param_copy_mbps, ulong, 0444);
MODULE_PARM_DESC(copy_mbps, "Initial CE bandwidth throttle of every GPU in MB/s, 0-1000000 (default 0 = off)");

static char *sg_param_nvidia_version = SG_NV_VERSION_STRING;
module_param_named(nvidia_version, sg_param_nvidia_version, charp, 0444);
MODULE_PARM_DESC(nvidia_version,
                 "The nvidia.ko version nvidia_get_rm_ops() answers (default " SG_NV_VERSION_STRING
                 ", the upstream tree's); another one makes huvm's nvidia-uvm refuse to load");

static unsigned long sg_param_link_latency_us;
module_param_named(link_latency_us, sg_param_link_latency_us, ulong, 0444);
MODULE_PARM_DESC(link_latency_us,
                 "Initial extra latency per peer CE launch of every GPU in us, 0-1000000 "
                 "(default 0 = off)");

/* uuid_gen=GPU:GEN, writable at run time: GPU's UUID generation (byte 14 of its UUID, 0 at load), so that one
 * GPU can come back to UVM as another (huvm's slot reuse needs more distinct GPUs than the bed has). Refused
 * (-EBUSY) while UVM has the GPU registered or a device on it; reading gives every GPU's generation. */
static u8 sg_uuid_gen[SG_MAX_GPUS];

static int sg_param_uuid_gen_set(const char *val, const struct kernel_param *kp)
{
    unsigned int index, gen;
    struct sg_gpu *gpu;
    int ret = 0;

    if (sscanf(val, "%u:%u", &index, &gen) != 2 || index >= SG_MAX_GPUS || gen > 255)
        return -EINVAL;

    mutex_lock(&sg_node.lock);
    gpu = sg_node.gpus[index];
    if (gpu && (gpu->registered || gpu->device)) {
        ret = -EBUSY;
    }
    else {
        sg_uuid_gen[index] = (u8)gen;
        if (gpu)
            gpu->uuid.uuid[14] = (u8)gen;
    }
    mutex_unlock(&sg_node.lock);
    return ret;
}

static int sg_param_uuid_gen_get(char *buf, const struct kernel_param *kp)
{
    unsigned int i;
    int n = 0;

    for (i = 0; i < SG_MAX_GPUS; i++)
        n += scnprintf(buf + n, PAGE_SIZE - n, "%s%u", i ? "," : "", sg_uuid_gen[i]);
    n += scnprintf(buf + n, PAGE_SIZE - n, "\n");
    return n;
}

static const struct kernel_param_ops sg_uuid_gen_ops = {
    .set = sg_param_uuid_gen_set,
    .get = sg_param_uuid_gen_get,
};
module_param_cb(uuid_gen, &sg_uuid_gen_ops, NULL, 0644);
MODULE_PARM_DESC(uuid_gen,
                 "GPU:GEN sets GPU's UUID generation (byte 14 of its UUID, 0-255; default 0), refused while "
                 "UVM has the GPU registered: the GPU comes back to UVM as a new one (test of huvm's slot reuse)");

/* ---- the architecture ---------------------------------------------------------------------------- */

/*
 * V100 SXM2 (GV100): 6 GPCs x 7 TPCs as reported before (UVM's Volta HAL needs only gpcCount and
 * maxTpcPerGpcCount), six NVLink 2 links. A100 SXM4 (GA100): 7 of GA100's 8 GPCs enabled, 54 TPCs (108
 * SMs), at most 8 TPCs per GPC, twelve NVLink 3 links of 25 GB/s per direction (NVIDIA A100 Tensor Core
 * GPU Architecture white paper, 2020). GPU_GET_MAX_SUPPORTED_PAGE_SIZE: 2 MiB on Volta, 512 MiB from
 * Ampere on (RM's kgmmuGetMaxVidmemPageSize; UVM's Ampere MMU HAL adds 512M PTEs at PDE1).
 */
static const struct sg_arch_desc sg_arch_volta = {
    .param = "volta",
    .model = "Tesla V100-SXM2",
    .gpu_arch = SG_ARCH_GV100,
    .gpu_impl = 0,                      /* NV2080_CTRL_MC_ARCH_INFO_IMPLEMENTATION_GV100 */
    .host_class = SG_CLASS_HOST_VOLTA,
    .ce_class = SG_CLASS_CE_VOLTA,
    .compute_class = SG_CLASS_COMPUTE_VOLTA,
    .gpc_count = 6,
    .max_gpc_count = 6,
    .tpc_count = 40,
    .max_tpc_per_gpc = 7,
    .nvlink_type = UVM_LINK_TYPE_NVLINK_2,
    .nvlink_max_links = 6,
    .max_vidmem_page = SG_PAGE_2M,
    .ce_peermem = false,
    .pde1_pte = false,
    .clear_faulted_sw = false,
};

static const struct sg_arch_desc sg_arch_ampere = {
    .param = "ampere",
    .model = "A100-SXM4-40GB",
    .gpu_arch = SG_ARCH_GA100,
    .gpu_impl = 0,                      /* NV2080_CTRL_MC_ARCH_INFO_IMPLEMENTATION_GA100 */
    .host_class = SG_CLASS_HOST_AMPERE,
    .ce_class = SG_CLASS_CE_AMPERE,
    .compute_class = SG_CLASS_COMPUTE_AMPERE,
    .gpc_count = 7,
    .max_gpc_count = 8,
    .tpc_count = 54,
    .max_tpc_per_gpc = 8,               /* uvm_ampere_get_utlbs_per_gpc: 2 * 8 + 1 = 17 uTLBs, its maximum */
    .nvlink_type = UVM_LINK_TYPE_NVLINK_3,
    .nvlink_max_links = 12,
    .max_vidmem_page = SG_PAGE_512M,
    .ce_peermem = true,
    .pde1_pte = true,
    .clear_faulted_sw = true,
};

const struct sg_arch_desc *sg_arch = &sg_arch_ampere;

static int sg_arch_parse(void)
{
    BUILD_BUG_ON(SOFTGPU_ARCH_GV100 != SG_ARCH_GV100);
    BUILD_BUG_ON(SOFTGPU_ARCH_GA100 != SG_ARCH_GA100);

    if (sg_param_arch && !strcmp(sg_param_arch, sg_arch_volta.param))
        sg_arch = &sg_arch_volta;
    else if (sg_param_arch && !strcmp(sg_param_arch, sg_arch_ampere.param))
        sg_arch = &sg_arch_ampere;
    else {
        pr_err(SG_NAME ": arch=\"%s\": expected ampere or volta\n", sg_param_arch ? sg_param_arch : "");
        return -EINVAL;
    }
    return 0;
}

/* ---- the node ---------------------------------------------------------------------------------- */

struct sg_node sg_node = {
    .lock = __MUTEX_INITIALIZER(sg_node.lock),
    .chan_lock = __SPIN_LOCK_UNLOCKED(sg_node.chan_lock),
};

/* NVLink links between GPU i and j (symmetric); 0 = a PCIe peer. Filled by sg_topology_parse at load. */
static u8 sg_topo[SG_MAX_GPUS][SG_MAX_GPUS];

/* How far each GPU got at load, so that a failed load and unload undo exactly what was done. */
enum {
    SG_STAGE_NONE = 0,
    SG_STAGE_ALLOCATED,     /* struct, FB, registers page, topology */
    SG_STAGE_FAULT,         /* sg_fault_init done */
    SG_STAGE_PMA,           /* sg_pma_create done */
    SG_STAGE_RM,            /* sg_rm_gpu_init done */
};
static unsigned int sg_gpu_stage[SG_MAX_GPUS];
static bool sg_engine_started;

/* ---- "not emulated" reports -------------------------------------------------------------------- */

#define SG_UNEMULATED_KINDS    64
#define SG_UNEMULATED_WHAT_LEN 48

/* The kinds already reported (a copy of each `what`, truncated). LOCKING: sg_unemulated_lock, a raw
 * spinlock with IRQs off because the engine threads, UVM's calls and irq_work may all refuse things. */
static char sg_unemulated_seen[SG_UNEMULATED_KINDS][SG_UNEMULATED_WHAT_LEN];
static unsigned int sg_unemulated_nseen;
static DEFINE_RAW_SPINLOCK(sg_unemulated_lock);

/* Counts the refusal and says once per kind in dmesg what was refused. A refusal without a GPU concerns
 * the whole node: it is counted on every GPU, so that a test checking any GPU's UNEMULATED counter sees
 * it. Callable from any context. */
void sg_unemulated(struct sg_gpu *gpu, const char *what, u32 a, u32 b)
{
    unsigned long flags;
    unsigned int i;
    bool first = true;
    bool table_full = false;

    if (!what)
        what = "(unnamed)";

    if (gpu) {
        sg_count(gpu, SOFTGPU_CTR_UNEMULATED, 1);
    }
    else {
        for (i = 0; i < SG_MAX_GPUS; i++) {
            struct sg_gpu *g = READ_ONCE(sg_node.gpus[i]);

            if (g)
                sg_count(g, SOFTGPU_CTR_UNEMULATED, 1);
        }
    }

    raw_spin_lock_irqsave(&sg_unemulated_lock, flags);
    for (i = 0; i < sg_unemulated_nseen; i++) {
        if (strncmp(sg_unemulated_seen[i], what, SG_UNEMULATED_WHAT_LEN - 1) == 0) {
            first = false;
            break;
        }
    }
    if (first) {
        if (sg_unemulated_nseen < SG_UNEMULATED_KINDS)
            strscpy(sg_unemulated_seen[sg_unemulated_nseen++], what, SG_UNEMULATED_WHAT_LEN);
        else
            table_full = true;
    }
    raw_spin_unlock_irqrestore(&sg_unemulated_lock, flags);

    if (!first)
        return;

    // Past the table's size every new kind still says something, but rate-limited.
    if (gpu) {
        if (table_full)
            pr_warn_ratelimited(SG_NAME ": GPU%u: not emulated: %s (0x%x, 0x%x)\n", gpu->index, what, a, b);
        else
            pr_warn(SG_NAME ": GPU%u: not emulated: %s (0x%x, 0x%x)\n", gpu->index, what, a, b);
    }
    else {
        if (table_full)
            pr_warn_ratelimited(SG_NAME ": not emulated: %s (0x%x, 0x%x)\n", what, a, b);
        else
            pr_warn(SG_NAME ": not emulated: %s (0x%x, 0x%x)\n", what, a, b);
    }
}

/* ---- GPU lookup -------------------------------------------------------------------------------- */

/* The GPU array is fixed between load and unload: no lock. */
struct sg_gpu *sg_gpu_by_uuid(const NvProcessorUuid *uuid)
{
    unsigned int i;

    if (!uuid)
        return NULL;

    for (i = 0; i < sg_node.gpu_count; i++) {
        struct sg_gpu *gpu = sg_node.gpus[i];

        if (gpu && memcmp(gpu->uuid.uuid, uuid->uuid, sizeof(gpu->uuid.uuid)) == 0)
            return gpu;
    }
    return NULL;
}

/* ---- parameters and topology ------------------------------------------------------------------- */

static int sg_params_check(void)
{
    u64 fb_total_mib, ram_mib;

    if (sg_param_gpus < 1 || sg_param_gpus > SG_MAX_GPUS) {
        pr_err(SG_NAME ": gpus=%u is out of range (allowed: 1-%u)\n", sg_param_gpus, SG_MAX_GPUS);
        return -EINVAL;
    }
    if (sg_param_fb_mib < SG_FB_MIB_MIN || sg_param_fb_mib > SG_FB_MIB_MAX || (sg_param_fb_mib % 2) != 0) {
        pr_err(SG_NAME ": fb_mib=%u is out of range (allowed: %u-%u, a multiple of 2)\n",
               sg_param_fb_mib,
               SG_FB_MIB_MIN,
               SG_FB_MIB_MAX);
        return -EINVAL;
    }
    // Even, so that PMA's part [0, pma_size) is a whole number of 2 MiB root chunks (uvm_pmm_gpu.c).
    if (sg_param_rm_reserved_mib < SG_RM_RESERVED_MIB_MIN ||
        sg_param_rm_reserved_mib >= sg_param_fb_mib - SG_PMA_MIN_MIB || (sg_param_rm_reserved_mib % 2) != 0) {
        pr_err(SG_NAME ": rm_reserved_mib=%u is out of range (allowed: %u-%u with fb_mib=%u, a multiple of 2)\n",
               sg_param_rm_reserved_mib,
               SG_RM_RESERVED_MIB_MIN,
               sg_param_fb_mib - SG_PMA_MIN_MIB - 2,
               sg_param_fb_mib);
        return -EINVAL;
    }
    if (sg_param_copy_mbps > SG_KNOB_COPY_MBPS_MAX) {
        pr_err(SG_NAME ": copy_mbps=%lu is out of range (allowed: 0-%llu)\n",
               sg_param_copy_mbps,
               SG_KNOB_COPY_MBPS_MAX);
        return -EINVAL;
    }
    if (sg_param_link_latency_us > SG_KNOB_LATENCY_US_MAX) {
        pr_err(SG_NAME ": link_latency_us=%lu is out of range (allowed: 0-%llu)\n",
               sg_param_link_latency_us,
               SG_KNOB_LATENCY_US_MAX);
        return -EINVAL;
    }

    // The framebuffers are guest RAM: refuse up front rather than push the guest into the OOM killer.
    fb_total_mib = (u64)sg_param_gpus * sg_param_fb_mib;
    ram_mib = ((u64)totalram_pages() << PAGE_SHIFT) >> 20;
    if (fb_total_mib + SG_RAM_MARGIN_MIB > ram_mib) {
        pr_err(SG_NAME ": gpus=%u x fb_mib=%u = %llu MiB of framebuffer does not fit in %llu MiB of RAM "
                       "(give qemu -m at least the sum plus 1.5 GiB)\n",
               sg_param_gpus,
               sg_param_fb_mib,
               fb_total_mib,
               ram_mib);
        return -EINVAL;
    }
    return 0;
}

/* The DGX-1 (V100) hybrid cube-mesh: six NVLink 2 links per GPU; the cube's edges 0-1-3-2, 4-5-7-6 and
 * 0-4, 1-5, 2-6, 3-7 plus the diagonals 0-3, 1-2, 4-7, 5-6 of two faces. As `nvidia-smi topo -m` reports
 * it on a DGX-1V (NVIDIA DGX-1 with Tesla V100 System Architecture white paper, 2017):
 *         GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7
 *   GPU0   X   NV1  NV1  NV2  NV2  SYS  SYS  SYS
 *   GPU1  NV1   X   NV2  NV1  SYS  NV2  SYS  SYS
 *   GPU2  NV1  NV2   X   NV2  SYS  SYS  NV1  SYS
 *   GPU3  NV2  NV1  NV2   X   SYS  SYS  SYS  NV1
 *   GPU4  NV2  SYS  SYS  SYS   X   NV1  NV1  NV2
 *   GPU5  SYS  NV2  SYS  SYS  NV1   X   NV2  NV1
 *   GPU6  SYS  SYS  NV1  SYS  NV1  NV2   X   NV2
 *   GPU7  SYS  SYS  SYS  NV1  NV2  NV1  NV2   X
 * Every row sums to 6 links. GPUs 0-3 alone are the AWS p3.8xlarge (HUVM's testbed). */
static const struct {
    u8 a, b, links;
} sg_dgx1_links[] = {
    { 0, 1, 1 }, { 0, 2, 1 }, { 0, 3, 2 }, { 0, 4, 2 }, { 1, 2, 2 }, { 1, 3, 1 }, { 1, 5, 2 }, { 2, 3, 2 },
    { 2, 6, 1 }, { 3, 7, 1 }, { 4, 5, 1 }, { 4, 6, 1 }, { 4, 7, 2 }, { 5, 6, 2 }, { 5, 7, 1 }, { 6, 7, 2 },
};

/* A decimal number of 1-3 digits (GPU indices and link counts are small); advances *p. */
static bool sg_parse_small_uint(const char **p, u32 *out)
{
    const char *s = *p;
    u32 v = 0;
    unsigned int digits = 0;

    while (*s >= '0' && *s <= '9') {
        if (++digits > 3)
            return false;
        v = v * 10 + (u32)(*s - '0');
        s++;
    }
    if (digits == 0)
        return false;
    *p = s;
    *out = v;
    return true;
}

/* "i-j:links,i-j:links,...": every listed pair gets NVLink with that many links, every other pair is a
 * PCIe peer. Strict: no spaces, no empty items, no self links, no pair twice, indices < gpus. */
static int sg_topology_parse_list(const char *s, unsigned int n, const char **why)
{
    const char *p = s;

    for (;;) {
        u32 a, b, links;

        if (!sg_parse_small_uint(&p, &a)) {
            *why = "expected a GPU index";
            return -EINVAL;
        }
        if (*p != '-') {
            *why = "expected '-' after the first GPU index";
            return -EINVAL;
        }
        p++;
        if (!sg_parse_small_uint(&p, &b)) {
            *why = "expected a second GPU index after '-'";
            return -EINVAL;
        }
        if (*p != ':') {
            *why = "expected ':links' after a pair";
            return -EINVAL;
        }
        p++;
        if (!sg_parse_small_uint(&p, &links)) {
            *why = "expected a link count after ':'";
            return -EINVAL;
        }
        if (a >= n || b >= n) {
            *why = "a GPU index is not below gpus";
            return -EINVAL;
        }
        if (a == b) {
            *why = "a GPU cannot be linked to itself";
            return -EINVAL;
        }
        if (links < 1 || links > sg_arch->nvlink_max_links) {
            *why = "too many links (a V100 has six NVLink links, an A100 twelve)";
            return -EINVAL;
        }
        if (sg_topo[a][b]) {
            *why = "a pair is listed twice";
            return -EINVAL;
        }
        sg_topo[a][b] = (u8)links;
        sg_topo[b][a] = (u8)links;

        if (*p == '\0')
            return 0;
        if (*p != ',') {
            *why = "expected ',' between pairs";
            return -EINVAL;
        }
        p++;
    }
}

static int sg_topology_parse(void)
{
    const char *t = sg_param_topology;
    const char *why = NULL;
    unsigned int n = sg_param_gpus;
    unsigned int i, j;
    int ret = 0;

    memset(sg_topo, 0, sizeof(sg_topo));

    if (!t || !*t) {
        why = "empty";
        ret = -EINVAL;
    }
    else if (strcmp(t, "all") == 0) {
        for (i = 0; i < n; i++)
            for (j = 0; j < n; j++)
                sg_topo[i][j] = (i != j) ? 1 : 0;
    }
    else if (strcmp(t, "pairs") == 0) {
        for (i = 0; i + 1 < n; i += 2) {
            sg_topo[i][i + 1] = 1;
            sg_topo[i + 1][i] = 1;
        }
    }
    else if (strcmp(t, "cube-mesh") == 0) {
        for (i = 0; i < ARRAY_SIZE(sg_dgx1_links); i++) {
            unsigned int a = sg_dgx1_links[i].a, b = sg_dgx1_links[i].b;

            if (a < n && b < n) {
                sg_topo[a][b] = sg_dgx1_links[i].links;
                sg_topo[b][a] = sg_dgx1_links[i].links;
            }
        }
    }
    else if (strcmp(t, "none") == 0) {
        // PCIe between every pair: nothing to set.
    }
    else {
        ret = sg_topology_parse_list(t, n, &why);
    }

    if (ret) {
        pr_err(SG_NAME ": topology=\"%s\": %s (allowed: all, pairs, cube-mesh, none, or i-j:links,... with "
                       "i != j below gpus=%u and links 1-%u)\n",
               t ? t : "",
               why,
               n,
               sg_arch->nvlink_max_links);
        memset(sg_topo, 0, sizeof(sg_topo));
    }
    return ret;
}

/* ---- PCI ----------------------------------------------------------------------------------------- */

/* The devices bound by probe, in probe order until sg_pci_bind sorts them by BDF. Each holds a
 * pci_dev_get reference. LOCKING: sg_pdev_lock while the PCI core probes (a probe may run on another
 * CPU's worker); fixed after sg_pci_bind. */
static struct pci_dev *sg_pdevs[SG_MAX_GPUS];
static unsigned int sg_pdev_count;
static int sg_probe_error;
static bool sg_pci_unloading;
static DEFINE_MUTEX(sg_pdev_lock);

/* UVM reaches system memory through dma_map_page/dma_alloc_coherent on our pci_dev, and the emulated CE
 * and MMU read a SYS-aperture address as a guest physical address. Both agree only when the DMA API is
 * dma-direct without bouncing: no IOMMU, no swiotlb. */
static int sg_dma_self_check(struct pci_dev *pdev)
{
    struct page *page;
    dma_addr_t dma;
    int ret = 0;

    page = alloc_page(GFP_KERNEL);
    if (!page)
        return -ENOMEM;

    dma = dma_map_page(&pdev->dev, page, 0, PAGE_SIZE, DMA_BIDIRECTIONAL);
    if (dma_mapping_error(&pdev->dev, dma)) {
        dev_err(&pdev->dev, SG_NAME ": dma_map_page of a test page failed\n");
        ret = -EIO;
        goto out_free;
    }
    if ((u64)dma != (u64)page_to_phys(page)) {
        dev_err(&pdev->dev,
                SG_NAME
                ": DMA address 0x%llx of a test page is not its physical address 0x%llx: "
                "an IOMMU or swiotlb is in the way (boot qemu without -device intel-iommu and the guest without "
                "swiotlb=force)\n",
                (u64)dma,
                (u64)page_to_phys(page));
        ret = -EIO;
    }
    dma_unmap_page(&pdev->dev, dma, PAGE_SIZE, DMA_BIDIRECTIONAL);

out_free:
    __free_page(page);
    return ret;
}

static int sg_pci_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
    int ret;

    // pci_enable_device is left out on purpose: the emulator never touches the device's BARs and the
    // device never masters the bus; UVM only needs its struct device for the DMA API.
    mutex_lock(&sg_pdev_lock);

    if (sg_pdev_count == SG_MAX_GPUS) {
        dev_info(&pdev->dev, SG_NAME ": already %u pci-testdev devices bound: this one stays unused\n", SG_MAX_GPUS);
        ret = -ENODEV;
        goto out;
    }

    // Mandatory: with the default 32-bit mask dma-direct bounces pages above 4 GiB through swiotlb, and
    // the emulator would read stale bounce buffers.
    ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(SG_DMA_BITS));
    if (ret) {
        dev_err(&pdev->dev, SG_NAME ": dma_set_mask_and_coherent(%u bits) failed: %d\n", SG_DMA_BITS, ret);
        goto fail;
    }

    ret = sg_dma_self_check(pdev);
    if (ret)
        goto fail;

    sg_pdevs[sg_pdev_count++] = pci_dev_get(pdev);
    ret = 0;
    goto out;

fail:
    // Remembered so that the load fails with this reason rather than with a device count.
    if (!sg_probe_error)
        sg_probe_error = ret;
out:
    mutex_unlock(&sg_pdev_lock);
    return ret;
}

/* Runs for every bound device when pci_unregister_driver unbinds them at unload. Manual unbinding is
 * refused (suppress_bind_attrs); a hot-unplug while loaded leaves the GPU with its pci_dev reference,
 * which keeps the struct device (and the DMA API on it) usable until unload. */
static void sg_pci_remove(struct pci_dev *pdev)
{
    if (!READ_ONCE(sg_pci_unloading))
        dev_warn(&pdev->dev, SG_NAME ": device removed while the module is loaded; its GPU keeps using it\n");
}

static const struct pci_device_id sg_pci_ids[] = { { PCI_DEVICE(PCI_VENDOR_ID_REDHAT, SG_PCI_DEVICE_ID_TESTDEV) },
                                                   {
                                                       0,
                                                   } };
/* No MODULE_DEVICE_TABLE on purpose: udev must not autoload an emulated GPU for every pci-testdev (the
 * test bed loads this module explicitly, with its parameters). */

static struct pci_driver sg_pci_driver = {
    .name     = SG_NAME,
    .id_table = sg_pci_ids,
    .probe    = sg_pci_probe,
    .remove   = sg_pci_remove,
    .driver   = {
        .suppress_bind_attrs = true,                // no manual unbind while GPUs use the device
        .probe_type          = PROBE_FORCE_SYNCHRONOUS, // every device is bound when register returns
    },
};

/* BDF order: (domain, bus, devfn). */
static int sg_pdev_cmp(const void *x, const void *y)
{
    const struct pci_dev *a = *(struct pci_dev *const *)x;
    const struct pci_dev *b = *(struct pci_dev *const *)y;
    int da = pci_domain_nr(a->bus), db = pci_domain_nr(b->bus);

    if (da != db)
        return da < db ? -1 : 1;
    if (a->bus->number != b->bus->number)
        return a->bus->number < b->bus->number ? -1 : 1;
    if (a->devfn != b->devfn)
        return a->devfn < b->devfn ? -1 : 1;
    return 0;
}

static void sg_pci_unbind(void)
{
    unsigned int i;

    for (i = 0; i < sg_pdev_count; i++) {
        pci_dev_put(sg_pdevs[i]);
        sg_pdevs[i] = NULL;
    }
    sg_pdev_count = 0;

    WRITE_ONCE(sg_pci_unloading, true);
    pci_unregister_driver(&sg_pci_driver);
}

static int sg_pci_bind(void)
{
    int ret;

    ret = pci_register_driver(&sg_pci_driver);
    if (ret) {
        pr_err(SG_NAME ": pci_register_driver failed: %d\n", ret);
        return ret;
    }

    if (sg_probe_error) {
        ret = sg_probe_error;
        pr_err(SG_NAME ": a qemu pci-testdev device was refused (see above): %d\n", ret);
        goto fail;
    }
    if (sg_pdev_count < sg_param_gpus) {
        pr_err(SG_NAME ": gpus=%u but only %u qemu pci-testdev devices (add -device pci-testdev per GPU)\n",
               sg_param_gpus,
               sg_pdev_count);
        ret = -ENODEV;
        goto fail;
    }

    sort(sg_pdevs, sg_pdev_count, sizeof(sg_pdevs[0]), sg_pdev_cmp, NULL);
    return 0;

fail:
    sg_pci_unbind();
    return ret;
}

/* ---- GPUs ---------------------------------------------------------------------------------------- */

/* Stable and deterministic: "SGPU", zeros, the uuid_gen generation (0 unless set) and the index in the last two
 * bytes, with the version (4) and variant
 * (10b) bits of an RFC 4122 random UUID. Cannot equal NVIDIA's CPU UUID 73772a14-2c41-4750-... (the
 * first byte differs). */
static void sg_gpu_make_uuid(unsigned int index, NvProcessorUuid *uuid)
{
    memset(uuid, 0, sizeof(*uuid));
    uuid->uuid[0] = 'S';
    uuid->uuid[1] = 'G';
    uuid->uuid[2] = 'P';
    uuid->uuid[3] = 'U';
    uuid->uuid[6] = 0x40;
    uuid->uuid[8] = 0x80;
    uuid->uuid[14] = sg_uuid_gen[index];
    uuid->uuid[15] = (NvU8)index;
}

/* Allocates GPU i and fills everything that needs no other part. */
static int sg_gpu_alloc(unsigned int i, struct pci_dev *pdev)
{
    struct sg_gpu *gpu;
    u64 fb_size = (u64)sg_param_fb_mib << 20;

    gpu = kzalloc(sizeof(*gpu), GFP_KERNEL);
    if (!gpu)
        return -ENOMEM;

    gpu->index = i;
    sg_tlb_init(gpu);
    sg_gpu_make_uuid(i, &gpu->uuid);
    snprintf(gpu->name, sizeof(gpu->name), "%s (softgpu %u)", sg_arch->model, i);
    gpu->pdev = pdev;
    gpu->fb_size = fb_size;
    gpu->pma_size = fb_size - ((u64)sg_param_rm_reserved_mib << 20);
    mutex_init(&gpu->rm_fb_lock);    // sg_rm.c's; initialised here too so it is valid from the start

    // Guest RAM. Zeroed so that nothing of a previous user of these pages shows through an unwritten
    // FB page. RETRY_MAYFAIL: fail this allocation rather than invoke the OOM killer.
    gpu->fb = __vmalloc(fb_size, GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN | __GFP_RETRY_MAYFAIL);
    if (!gpu->fb) {
        pr_err(SG_NAME ": GPU%u: cannot allocate its %u MiB framebuffer (vmalloc); lower fb_mib or give the "
                       "guest more RAM\n",
               i,
               sg_param_fb_mib);
        kfree(gpu);
        return -ENOMEM;
    }

    gpu->fault.regs = vzalloc(PAGE_SIZE);
    if (!gpu->fault.regs) {
        vfree(gpu->fb);
        kfree(gpu);
        return -ENOMEM;
    }

    gpu->copy_mbps = sg_param_copy_mbps;
    gpu->link_latency_us = sg_param_link_latency_us;
    atomic_set(&gpu->fail_pma_alloc, 0);

    sg_node.gpus[i] = gpu;
    sg_gpu_stage[i] = SG_STAGE_ALLOCATED;
    return 0;
}

/* Links and peer ids, once every GPU exists. Each GPU has its own 3-bit peer-id namespace
 * (UvmGpuP2PCapsParams.peerIds, UVM_APERTURE_PEER(id)); with at most 8 GPUs each has at most 7 peers, so
 * id(i->j) = j if j < i else j - 1 gives every peer a distinct id. Every pair is a peer: NVLink or PCIe. */
static void sg_gpus_link(unsigned int n)
{
    unsigned int i, j;

    for (i = 0; i < n; i++) {
        struct sg_gpu *gpu = sg_node.gpus[i];

        for (j = 0; j < SG_MAX_GPUS; j++) {
            gpu->peer_id_of[j] = -1;
            gpu->link_type[j] = SOFTGPU_LINK_NONE;
            gpu->link_count[j] = 0;
        }
        for (j = 0; j < SG_MAX_PEER_IDS; j++)
            gpu->peer_by_id[j] = NULL;

        for (j = 0; j < n; j++) {
            int id;

            if (j == i)
                continue;
            if (sg_topo[i][j]) {
                gpu->link_type[j] = SOFTGPU_LINK_NVLINK2;
                gpu->link_count[j] = sg_topo[i][j];
            }
            else {
                gpu->link_type[j] = SOFTGPU_LINK_PCIE;
            }
            id = (j < i) ? (int)j : (int)j - 1;
            gpu->peer_id_of[j] = id;
            gpu->peer_by_id[id] = sg_node.gpus[j];
        }
    }
}

/* Undoes whatever load did for each GPU, newest GPU first. Nothing runs on the GPUs any more. */
static void sg_gpus_destroy(void)
{
    int i;

    for (i = SG_MAX_GPUS - 1; i >= 0; i--) {
        struct sg_gpu *gpu = sg_node.gpus[i];

        if (!gpu)
            continue;

        if (sg_gpu_stage[i] >= SG_STAGE_RM)
            sg_rm_gpu_fini(gpu);
        if (sg_gpu_stage[i] >= SG_STAGE_PMA)
            sg_pma_destroy(gpu);
        if (sg_gpu_stage[i] >= SG_STAGE_FAULT)
            sg_fault_fini(gpu);

        WRITE_ONCE(sg_node.gpus[i], NULL);
        vfree(gpu->fault.regs);
        vfree(gpu->fb);
        kfree(gpu);
        sg_gpu_stage[i] = SG_STAGE_NONE;
    }
    sg_node.gpu_count = 0;
}

static int sg_nv_to_errno(NV_STATUS status)
{
    switch (status) {
    case NV_OK:                return 0;
    case NV_ERR_NO_MEMORY:     return -ENOMEM;
    case NV_ERR_NOT_SUPPORTED: return -EOPNOTSUPP;
    default:                   return -EIO;
    }
}

static int sg_gpus_create(void)
{
    unsigned int n = sg_param_gpus;
    unsigned int i;
    NV_STATUS status;
    int ret;

    for (i = 0; i < n; i++) {
        ret = sg_gpu_alloc(i, sg_pdevs[i]);
        if (ret)
            goto fail;
    }
    sg_node.gpu_count = n;
    sg_gpus_link(n);

    for (i = 0; i < n; i++) {
        struct sg_gpu *gpu = sg_node.gpus[i];

        status = sg_fault_init(gpu);
        if (status != NV_OK) {
            pr_err(SG_NAME ": GPU%u: fault unit init failed: NV_STATUS 0x%x\n", i, status);
            ret = sg_nv_to_errno(status);
            goto fail;
        }
        sg_gpu_stage[i] = SG_STAGE_FAULT;

        status = sg_pma_create(gpu);
        if (status != NV_OK) {
            pr_err(SG_NAME ": GPU%u: PMA init failed: NV_STATUS 0x%x\n", i, status);
            ret = sg_nv_to_errno(status);
            goto fail;
        }
        sg_gpu_stage[i] = SG_STAGE_PMA;

        status = sg_rm_gpu_init(gpu);
        if (status != NV_OK) {
            pr_err(SG_NAME ": GPU%u: RM init failed: NV_STATUS 0x%x\n", i, status);
            ret = sg_nv_to_errno(status);
            goto fail;
        }
        sg_gpu_stage[i] = SG_STAGE_RM;
    }
    return 0;

fail:
    sg_gpus_destroy();
    return ret;
}

static void sg_gpus_report(void)
{
    unsigned int i, j;

    pr_info(SG_NAME ": %u emulated %s GPUs (arch=%s), %u MiB framebuffer each (%u MiB RM-reserved), topology %s\n",
            sg_node.gpu_count,
            sg_arch->model,
            sg_arch->param,
            sg_param_fb_mib,
            sg_param_rm_reserved_mib,
            sg_param_topology);

    for (i = 0; i < sg_node.gpu_count; i++) {
        struct sg_gpu *gpu = sg_node.gpus[i];
        char links[SG_MAX_GPUS * 8 + 1];
        size_t len = 0;

        links[0] = '\0';
        for (j = 0; j < sg_node.gpu_count; j++) {
            if (j == i)
                continue;
            if (gpu->link_type[j] == SOFTGPU_LINK_NVLINK2)
                len += scnprintf(links + len, sizeof(links) - len, " %u:NV%u", j, gpu->link_count[j]);
            else
                len += scnprintf(links + len, sizeof(links) - len, " %u:PCIe", j);
        }
        pr_info(SG_NAME ": GPU%u %s %pUb on %s, peers:%s\n",
                i,
                gpu->name,
                gpu->uuid.uuid,
                pci_name(gpu->pdev),
                len ? links : " none");
    }
}

/* ---- user objects (/dev/huvm-softgpu) ---------------------------------------------------------- */

enum sg_obj_type {
    SG_OBJ_CLIENT = 1,
    SG_OBJ_VASPACE,
    SG_OBJ_CHANNEL,
    SG_OBJ_FOREIGN,
};

/* One handle in the idr. `client` is the owning client's handle (a client owns itself). */
struct sg_obj {
    enum sg_obj_type type;
    u32 handle;
    u32 client;
    struct list_head node;          /* the client's objects, newest first (sg_node.lock) */
    union {
        struct {
            struct sg_vaspace *vas;     /* the creation reference */
            int channels;               /* channel objects on it (sg_node.lock) */
        } vaspace;
        struct {
            struct sg_user_channel *uch;    /* the creation reference */
            struct sg_obj *parent;          /* its VA-space object */
        } channel;
        struct {
            struct sg_gpu *gpu;
            u64 *pages;                 /* from sg_pma_foreign_alloc, handed back to sg_pma_foreign_free */
            u64 npages;
        } foreign;
    };
};

/* One per open file. */
struct sg_client {
    struct sg_obj obj;              /* type SG_OBJ_CLIENT, handle = hClient */
    struct list_head objects;       /* sg_obj.node, newest first (sg_node.lock) */
};

/* Handle -> struct sg_obj. LOCKING: written under sg_node.lock and sg_obj_lock; read under either. */
static DEFINE_IDR(sg_idr);
static DEFINE_SPINLOCK(sg_obj_lock);

/* Reserves a fresh handle (not yet visible to lookups). Cyclic, so that a stale handle kept by user
 * space or by UVM does not name a newer object soon. LOCKING: sg_node.lock held. */
static int sg_handle_reserve_locked(u32 *handle)
{
    int id;

    lockdep_assert_held(&sg_node.lock);

    idr_preload(GFP_KERNEL);
    spin_lock(&sg_obj_lock);
    id = idr_alloc_cyclic(&sg_idr, NULL, 1, 0, GFP_NOWAIT);
    spin_unlock(&sg_obj_lock);
    idr_preload_end();

    if (id < 0)
        return id;
    *handle = (u32)id;
    return 0;
}

/* Makes a fully built object visible. LOCKING: sg_node.lock held. */
static void sg_handle_publish_locked(struct sg_obj *obj)
{
    lockdep_assert_held(&sg_node.lock);

    spin_lock(&sg_obj_lock);
    WARN_ON(idr_replace(&sg_idr, obj, (int)obj->handle) != NULL);
    spin_unlock(&sg_obj_lock);
}

static void sg_handle_remove_locked(u32 handle)
{
    lockdep_assert_held(&sg_node.lock);

    spin_lock(&sg_obj_lock);
    idr_remove(&sg_idr, (int)handle);
    spin_unlock(&sg_obj_lock);
}

/* LOCKING: sg_obj_lock held. */
static struct sg_obj *sg_obj_find(u32 client, u32 handle, enum sg_obj_type type)
{
    struct sg_obj *obj;

    if (handle == 0 || handle > INT_MAX)
        return NULL;

    obj = idr_find(&sg_idr, (int)handle);
    if (!obj || obj->type != type || obj->client != client)
        return NULL;
    return obj;
}

struct sg_vaspace *sg_obj_get_vaspace(u32 client, u32 handle)
{
    struct sg_vaspace *vas = NULL;
    struct sg_obj *obj;

    spin_lock(&sg_obj_lock);
    obj = sg_obj_find(client, handle, SG_OBJ_VASPACE);
    if (obj) {
        vas = obj->vaspace.vas;
        kref_get(&vas->ref);
    }
    spin_unlock(&sg_obj_lock);
    return vas;
}

struct sg_user_channel *sg_obj_get_channel(u32 client, u32 handle)
{
    struct sg_user_channel *uch = NULL;
    struct sg_obj *obj;

    spin_lock(&sg_obj_lock);
    obj = sg_obj_find(client, handle, SG_OBJ_CHANNEL);
    if (obj) {
        uch = obj->channel.uch;
        kref_get(&uch->ref);
    }
    spin_unlock(&sg_obj_lock);
    return uch;
}

static void sg_user_channel_release(struct kref *ref)
{
    struct sg_user_channel *uch = container_of(ref, struct sg_user_channel, ref);

    __free_page(uch->inst_page);
    sg_vaspace_put(uch->vas);
    kfree(uch);
}

void sg_user_channel_put(struct sg_user_channel *uch)
{
    if (uch)
        kref_put(&uch->ref, sg_user_channel_release);
}

/* Takes obj out of the idr and its client's list. LOCKING: sg_node.lock held. */
static void sg_obj_unlink_locked(struct sg_obj *obj)
{
    lockdep_assert_held(&sg_node.lock);

    sg_handle_remove_locked(obj->handle);
    list_del_init(&obj->node);
    if (obj->type == SG_OBJ_CHANNEL)
        obj->channel.parent->vaspace.channels--;
}

/* Drops what an unlinked object held. Called without locks: it calls into the RM, PMA and fault parts. */
static void sg_obj_release(struct sg_obj *obj)
{
    switch (obj->type) {
    case SG_OBJ_VASPACE: sg_vaspace_put(obj->vaspace.vas); break;
    case SG_OBJ_CHANNEL:
            // A freed channel runs nothing more: fail the accesses parked on it. UVM may still hold it
            // retained (only at close): that reference keeps the instance block until ReleaseChannel.
        sg_fault_stop_channel(obj->channel.uch->gpu, obj->channel.uch);
        sg_user_channel_put(obj->channel.uch);
        break;
    case SG_OBJ_FOREIGN: sg_pma_foreign_free(obj->foreign.gpu, obj->foreign.pages, obj->foreign.npages); break;
    default:             WARN_ON(1); break;
    }
    kfree(obj);
}

/* DESTROY_OBJECT / FOREIGN_FREE: one object of this client; want 0 = any type but the client. */
static NV_STATUS sg_obj_destroy(struct sg_client *cl, u32 handle, enum sg_obj_type want)
{
    struct sg_obj *obj = NULL;
    NV_STATUS status = NV_OK;

    mutex_lock(&sg_node.lock);

    if (handle != 0 && handle <= INT_MAX) {
        spin_lock(&sg_obj_lock);
        obj = idr_find(&sg_idr, (int)handle);
        spin_unlock(&sg_obj_lock);
    }
    if (!obj || obj->client != cl->obj.handle || obj->type == SG_OBJ_CLIENT || (want && obj->type != want)) {
        status = NV_ERR_INVALID_OBJECT_HANDLE;
        goto out;
    }

    // RM refuses to free what is still in use; so do we, and change nothing.
    if (obj->type == SG_OBJ_VASPACE && obj->vaspace.channels > 0) {
        status = NV_ERR_STATE_IN_USE;
        goto out;
    }
    if (obj->type == SG_OBJ_CHANNEL && obj->channel.uch->retained > 0) {
        status = NV_ERR_STATE_IN_USE;
        goto out;
    }

    sg_obj_unlink_locked(obj);
    mutex_unlock(&sg_node.lock);

    sg_obj_release(obj);
    return NV_OK;

out:
    mutex_unlock(&sg_node.lock);
    return status;
}

/* Adds a built object (handle reserved) to its client and makes it visible. LOCKING: sg_node.lock. */
static void sg_obj_add_locked(struct sg_client *cl, struct sg_obj *obj)
{
    obj->client = cl->obj.handle;
    list_add(&obj->node, &cl->objects);
    sg_handle_publish_locked(obj);
}

/* ---- ioctls ------------------------------------------------------------------------------------ */

/* The two words every params struct starts with. */
struct sg_params_hdr {
    u32 abi_version;
    u32 size;
};

static struct sg_gpu *sg_gpu_by_index(u32 index)
{
    if (index >= sg_node.gpu_count)
        return NULL;
    return sg_node.gpus[index];
}

static NV_STATUS sg_ioctl_get_info(struct sg_client *cl, void *arg)
{
    SOFTGPU_GET_INFO_PARAMS *p = arg;
    unsigned int i, j;

    p->gpu_count = sg_node.gpu_count;
    p->client = cl->obj.handle;
    p->pad = 0;
    memset(p->gpus, 0, sizeof(p->gpus));

    // `registered` changes under sg_node.lock (RegisterGpu / UnregisterGpu).
    mutex_lock(&sg_node.lock);
    for (i = 0; i < sg_node.gpu_count; i++) {
        struct sg_gpu *gpu = sg_node.gpus[i];
        softgpu_gpu_info_t *gi = &p->gpus[i];

        BUILD_BUG_ON(sizeof(gi->uuid) != sizeof(gpu->uuid.uuid));
        BUILD_BUG_ON(sizeof(gi->name) != sizeof(gpu->name));

        memcpy(gi->uuid, gpu->uuid.uuid, sizeof(gi->uuid));
        memcpy(gi->name, gpu->name, sizeof(gi->name));
        gi->fb_bytes = gpu->fb_size;
        gi->pma_bytes = gpu->pma_size;
        gi->pci_domain = (u32)pci_domain_nr(gpu->pdev->bus);
        gi->pci_bdf = ((u32)gpu->pdev->bus->number << 8) | gpu->pdev->devfn;
        for (j = 0; j < SG_MAX_GPUS; j++) {
            gi->link_type[j] = gpu->link_type[j];
            gi->link_count[j] = gpu->link_count[j];
        }
        gi->registered = gpu->registered > 0 ? (u32)gpu->registered : 0;
        gi->gpu_arch = sg_arch->gpu_arch;
    }
    mutex_unlock(&sg_node.lock);

    return NV_OK;
}

static NV_STATUS sg_ioctl_create_vaspace(struct sg_client *cl, void *arg)
{
    SOFTGPU_CREATE_VASPACE_PARAMS *p = arg;
    struct sg_gpu *gpu;
    struct sg_vaspace *vas;
    struct sg_obj *obj;

    p->handle = 0;
    p->pad = 0;

    gpu = sg_gpu_by_index(p->gpu_index);
    if (!gpu)
        return NV_ERR_INVALID_ARGUMENT;

    obj = kzalloc(sizeof(*obj), GFP_KERNEL);
    if (!obj)
        return NV_ERR_NO_MEMORY;

    // A user VA space: externally owned, UVM dups it (DupAddressSpace) and owns the page tree.
    vas = sg_vaspace_create(gpu, false, 0);
    if (!vas) {
        kfree(obj);
        return NV_ERR_NO_MEMORY;
    }

    obj->type = SG_OBJ_VASPACE;
    obj->vaspace.vas = vas;

    mutex_lock(&sg_node.lock);
    if (sg_handle_reserve_locked(&obj->handle)) {
        mutex_unlock(&sg_node.lock);
        sg_vaspace_put(vas);
        kfree(obj);
        return NV_ERR_NO_MEMORY;
    }
    sg_obj_add_locked(cl, obj);
    p->handle = obj->handle;
    mutex_unlock(&sg_node.lock);

    return NV_OK;
}

static NV_STATUS sg_ioctl_create_channel(struct sg_client *cl, void *arg)
{
    SOFTGPU_CREATE_CHANNEL_PARAMS *p = arg;
    struct sg_user_channel *uch;
    struct sg_obj *obj, *parent;
    struct page *page;
    NV_STATUS status;

    p->handle = 0;
    p->instance_pa = 0;
    p->pad = 0;

    obj = kzalloc(sizeof(*obj), GFP_KERNEL);
    uch = kzalloc(sizeof(*uch), GFP_KERNEL);
    // The instance block: a unique 4K-aligned sysmem address that fault packets and RetainChannel's
    // instance info name. Zeroed: nothing reads it, but nothing stale either.
    page = alloc_page(GFP_KERNEL | __GFP_ZERO);
    if (!obj || !uch || !page) {
        status = NV_ERR_NO_MEMORY;
        goto fail_free;
    }

    mutex_lock(&sg_node.lock);

    spin_lock(&sg_obj_lock);
    parent = sg_obj_find(cl->obj.handle, p->va_space, SG_OBJ_VASPACE);
    spin_unlock(&sg_obj_lock);
    if (!parent) {
        status = NV_ERR_INVALID_OBJECT_HANDLE;
        goto fail_unlock;
    }
    if (sg_handle_reserve_locked(&obj->handle)) {
        status = NV_ERR_NO_MEMORY;
        goto fail_unlock;
    }

    kref_init(&uch->ref);
    uch->handle = obj->handle;
    uch->client = cl->obj.handle;
    uch->vas = parent->vaspace.vas;
    kref_get(&uch->vas->ref);
    uch->gpu = uch->vas->gpu;
    uch->inst_page = page;
    uch->inst_pa = page_to_phys(page);

    obj->type = SG_OBJ_CHANNEL;
    obj->channel.uch = uch;
    obj->channel.parent = parent;
    parent->vaspace.channels++;
    sg_obj_add_locked(cl, obj);

    p->handle = obj->handle;
    p->instance_pa = uch->inst_pa;
    mutex_unlock(&sg_node.lock);

    return NV_OK;

fail_unlock:
    mutex_unlock(&sg_node.lock);
fail_free:
    if (page)
        __free_page(page);
    kfree(uch);
    kfree(obj);
    return status;
}

static NV_STATUS sg_ioctl_destroy_object(struct sg_client *cl, void *arg)
{
    SOFTGPU_DESTROY_OBJECT_PARAMS *p = arg;

    return sg_obj_destroy(cl, p->handle, 0);
}

static NV_STATUS sg_ioctl_sm_access(struct sg_client *cl, void *arg)
{
    SOFTGPU_SM_ACCESS_PARAMS *p = arg;
    struct sg_user_channel *uch;
    softgpu_access_t *acc = NULL;
    void __user *uacc = u64_to_user_ptr(p->accesses);
    size_t bytes;
    u32 completed = 0;
    u32 timeout_ms;
    NV_STATUS status;

    p->completed = 0;
    p->pad = 0;

    if (p->count > SOFTGPU_MAX_ACCESSES)
        return NV_ERR_INVALID_ARGUMENT;

    uch = sg_obj_get_channel(cl->obj.handle, p->channel);
    if (!uch)
        return NV_ERR_INVALID_OBJECT_HANDLE;

    if (p->count == 0) {
        status = NV_OK;
        goto out;
    }

    bytes = (size_t)p->count * sizeof(*acc);
    acc = kvmalloc(bytes, GFP_KERNEL);
    if (!acc) {
        status = NV_ERR_NO_MEMORY;
        goto out;
    }
    if (copy_from_user(acc, uacc, bytes)) {
        status = NV_ERR_INVALID_ADDRESS;
        goto out;
    }

    timeout_ms = p->timeout_ms ? p->timeout_ms : SG_SM_DEFAULT_TIMEOUT_MS;

    // Runs in this thread and may sleep for replays: no lock held.
    status = sg_sm_run(uch, acc, p->count, timeout_ms, &completed);
    p->completed = completed;

    // The per-access results go back whatever the batch's status.
    if (copy_to_user(uacc, acc, bytes) && status == NV_OK)
        status = NV_ERR_INVALID_ADDRESS;

out:
    kvfree(acc);
    sg_user_channel_put(uch);
    return status;
}

static NV_STATUS sg_ioctl_foreign_alloc(struct sg_client *cl, void *arg)
{
    SOFTGPU_FOREIGN_ALLOC_PARAMS *p = arg;
    struct sg_gpu *gpu;
    struct sg_obj *obj;
    u64 *pages = NULL;
    u64 npages = 0;
    NV_STATUS status;

    p->handle = 0;
    p->allocated = 0;
    p->pad = 0;

    gpu = sg_gpu_by_index(p->gpu_index);
    if (!gpu || p->bytes == 0 || (p->bytes % SG_PAGE_2M) != 0)
        return NV_ERR_INVALID_ARGUMENT;

    obj = kzalloc(sizeof(*obj), GFP_KERNEL);
    if (!obj)
        return NV_ERR_NO_MEMORY;

    // May call UVM's eviction callbacks: no lock held.
    status = sg_pma_foreign_alloc(gpu, p->bytes, &pages, &npages);
    if (status != NV_OK) {
        kfree(obj);
        return status;
    }

    obj->type = SG_OBJ_FOREIGN;
    obj->foreign.gpu = gpu;
    obj->foreign.pages = pages;
    obj->foreign.npages = npages;

    mutex_lock(&sg_node.lock);
    if (sg_handle_reserve_locked(&obj->handle)) {
        mutex_unlock(&sg_node.lock);
        sg_pma_foreign_free(gpu, pages, npages);
        kfree(obj);
        return NV_ERR_NO_MEMORY;
    }
    sg_obj_add_locked(cl, obj);
    p->handle = obj->handle;
    mutex_unlock(&sg_node.lock);

    p->allocated = npages * SG_PAGE_2M;
    return NV_OK;
}

static NV_STATUS sg_ioctl_foreign_free(struct sg_client *cl, void *arg)
{
    SOFTGPU_FOREIGN_FREE_PARAMS *p = arg;

    return sg_obj_destroy(cl, p->handle, SG_OBJ_FOREIGN);
}

static NV_STATUS sg_ioctl_set_knob(struct sg_client *cl, void *arg)
{
    SOFTGPU_SET_KNOB_PARAMS *p = arg;
    struct sg_gpu *gpu;

    p->pad = 0;

    gpu = sg_gpu_by_index(p->gpu_index);
    if (!gpu)
        return NV_ERR_INVALID_ARGUMENT;

    // The engine reads the u64 knobs with READ_ONCE at each CE launch.
    switch (p->knob) {
    case SOFTGPU_KNOB_COPY_MBPS:
        if (p->value > SG_KNOB_COPY_MBPS_MAX)
            return NV_ERR_INVALID_ARGUMENT;
        WRITE_ONCE(gpu->copy_mbps, p->value);
        return NV_OK;
    case SOFTGPU_KNOB_LINK_LATENCY_US:
        if (p->value > SG_KNOB_LATENCY_US_MAX)
            return NV_ERR_INVALID_ARGUMENT;
        WRITE_ONCE(gpu->link_latency_us, p->value);
        return NV_OK;
    case SOFTGPU_KNOB_FAIL_PMA_ALLOC:
        if (p->value > INT_MAX)
            return NV_ERR_INVALID_ARGUMENT;
        atomic_set(&gpu->fail_pma_alloc, (int)p->value);
        return NV_OK;
    case SOFTGPU_KNOB_TLB_DROP_INVALIDATES:
        if (p->value > 1)
            return NV_ERR_INVALID_ARGUMENT;
        WRITE_ONCE(gpu->tlb_drop_invalidates, (u32)p->value);
        // Back to a sound TLB: the stale entries the knob kept go too.
        if (!p->value)
            sg_tlb_flush_all(gpu);
        return NV_OK;
    default: return NV_ERR_INVALID_ARGUMENT;
    }
}

static NV_STATUS sg_ioctl_get_counters(struct sg_client *cl, void *arg)
{
    SOFTGPU_GET_COUNTERS_PARAMS *p = arg;
    unsigned int i, c;

    p->gpu_count = sg_node.gpu_count;
    p->pad0 = 0;
    p->pad = 0;
    memset(p->gpus, 0, sizeof(p->gpus));

    for (i = 0; i < sg_node.gpu_count; i++) {
        struct sg_gpu *gpu = sg_node.gpus[i];
        softgpu_gpu_counters_t *gc = &p->gpus[i];
        u64 free_b = 0, pinned_b = 0, unpinned_b = 0;

        for (c = 0; c < SOFTGPU_CTR_COUNT; c++)
            gc->counters[c] = (u64)atomic64_read(&gpu->ctr[c]);

        sg_pma_counters(gpu, &free_b, &pinned_b, &unpinned_b);
        gc->pma_free_bytes = free_b;
        gc->pma_pinned_bytes = pinned_b;
        gc->pma_unpinned_bytes = unpinned_b;
    }
    return NV_OK;
}

struct sg_ioctl_desc {
    unsigned int cmd;
    u32 size;
    u32 status_offset;
    NV_STATUS (*fn)(struct sg_client *cl, void *params);
};

#define SG_IOCTL(cmd, type, fn) { (cmd), sizeof(type), offsetof(type, rmStatus), (fn) }

static const struct sg_ioctl_desc sg_ioctls[] = {
    SG_IOCTL(SOFTGPU_IOCTL_GET_INFO, SOFTGPU_GET_INFO_PARAMS, sg_ioctl_get_info),
    SG_IOCTL(SOFTGPU_IOCTL_CREATE_VASPACE, SOFTGPU_CREATE_VASPACE_PARAMS, sg_ioctl_create_vaspace),
    SG_IOCTL(SOFTGPU_IOCTL_CREATE_CHANNEL, SOFTGPU_CREATE_CHANNEL_PARAMS, sg_ioctl_create_channel),
    SG_IOCTL(SOFTGPU_IOCTL_DESTROY_OBJECT, SOFTGPU_DESTROY_OBJECT_PARAMS, sg_ioctl_destroy_object),
    SG_IOCTL(SOFTGPU_IOCTL_SM_ACCESS, SOFTGPU_SM_ACCESS_PARAMS, sg_ioctl_sm_access),
    SG_IOCTL(SOFTGPU_IOCTL_FOREIGN_ALLOC, SOFTGPU_FOREIGN_ALLOC_PARAMS, sg_ioctl_foreign_alloc),
    SG_IOCTL(SOFTGPU_IOCTL_FOREIGN_FREE, SOFTGPU_FOREIGN_FREE_PARAMS, sg_ioctl_foreign_free),
    SG_IOCTL(SOFTGPU_IOCTL_SET_KNOB, SOFTGPU_SET_KNOB_PARAMS, sg_ioctl_set_knob),
    SG_IOCTL(SOFTGPU_IOCTL_GET_COUNTERS, SOFTGPU_GET_COUNTERS_PARAMS, sg_ioctl_get_counters),
};

/* Every params struct: header first, rmStatus a u32, size a multiple of 8 (the ABI header's rules). */
#define SG_ABI_CHECK(type)                                          \
    do {                                                            \
        BUILD_BUG_ON(offsetof(type, abi_version) != 0);             \
        BUILD_BUG_ON(offsetof(type, size) != 4);                    \
        BUILD_BUG_ON(sizeof(((type *)0)->rmStatus) != sizeof(u32)); \
        BUILD_BUG_ON((sizeof(type) % 8) != 0);                      \
    } while (0)

static void sg_abi_checks(void)
{
    SG_ABI_CHECK(SOFTGPU_GET_INFO_PARAMS);
    SG_ABI_CHECK(SOFTGPU_CREATE_VASPACE_PARAMS);
    SG_ABI_CHECK(SOFTGPU_CREATE_CHANNEL_PARAMS);
    SG_ABI_CHECK(SOFTGPU_DESTROY_OBJECT_PARAMS);
    SG_ABI_CHECK(SOFTGPU_SM_ACCESS_PARAMS);
    SG_ABI_CHECK(SOFTGPU_FOREIGN_ALLOC_PARAMS);
    SG_ABI_CHECK(SOFTGPU_FOREIGN_FREE_PARAMS);
    SG_ABI_CHECK(SOFTGPU_SET_KNOB_PARAMS);
    SG_ABI_CHECK(SOFTGPU_GET_COUNTERS_PARAMS);
    BUILD_BUG_ON((sizeof(softgpu_access_t) % 8) != 0);
    BUILD_BUG_ON((sizeof(softgpu_gpu_info_t) % 8) != 0);
    BUILD_BUG_ON((sizeof(softgpu_gpu_counters_t) % 8) != 0);
    BUILD_BUG_ON(SOFTGPU_UUID_LEN != sizeof(((NvProcessorUuid *)0)->uuid));
    BUILD_BUG_ON(SG_MAX_GPUS - 1 > SG_MAX_PEER_IDS);
}

/* The outcome is in rmStatus and the ioctl returns 0, as nvidia-uvm's ioctls do; errnos only for
 * transport: -ENOTTY (unknown command), -EFAULT (params not readable/writable), -ENOMEM (no memory for
 * the kernel copy). A wrong abi_version or size is answered in-band with NV_ERR_INVALID_ARGUMENT.
 * LOCKING: none held on entry; the handlers take sg_node.lock as they need. May sleep (SM_ACCESS for a
 * long time). */
static long sg_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
    struct sg_client *cl = file->private_data;
    void __user *uparams = (void __user *)arg;
    const struct sg_ioctl_desc *desc = NULL;
    struct sg_params_hdr *hdr;
    NV_STATUS status;
    void *params;
    unsigned int i;
    long ret = 0;

    for (i = 0; i < ARRAY_SIZE(sg_ioctls); i++) {
        if (sg_ioctls[i].cmd == cmd) {
            desc = &sg_ioctls[i];
            break;
        }
    }
    if (!desc)
        return -ENOTTY;

    params = kmalloc(desc->size, GFP_KERNEL);
    if (!params)
        return -ENOMEM;

    // One copy: the handler sees exactly what was checked.
    if (copy_from_user(params, uparams, desc->size)) {
        ret = -EFAULT;
        goto out;
    }

    hdr = params;
    if (hdr->abi_version != SOFTGPU_ABI_VERSION || hdr->size != desc->size)
        status = NV_ERR_INVALID_ARGUMENT;
    else
        status = desc->fn(cl, params);

    memcpy((u8 *)params + desc->status_offset, &status, sizeof(u32));

    if (copy_to_user(uparams, params, desc->size))
        ret = -EFAULT;

out:
    kfree(params);
    return ret;
}

/* A new client: hClient for UVM_REGISTER_GPU and friends. */
static int sg_open(struct inode *inode, struct file *file)
{
    struct sg_client *cl;
    int ret;

    cl = kzalloc(sizeof(*cl), GFP_KERNEL);
    if (!cl)
        return -ENOMEM;

    cl->obj.type = SG_OBJ_CLIENT;
    INIT_LIST_HEAD(&cl->obj.node);
    INIT_LIST_HEAD(&cl->objects);

    mutex_lock(&sg_node.lock);
    ret = sg_handle_reserve_locked(&cl->obj.handle);
    if (ret) {
        mutex_unlock(&sg_node.lock);
        kfree(cl);
        return ret;
    }
    cl->obj.client = cl->obj.handle;
    sg_handle_publish_locked(&cl->obj);
    mutex_unlock(&sg_node.lock);

    // misc_open put the miscdevice here; the client replaces it.
    file->private_data = cl;
    return nonseekable_open(inode, file);
}

/* Frees every object of the client, newest first (channels before the VA spaces they run in), then the
 * client. No ioctl of this file runs any more; UVM may still hold references (retained channels, dup'd
 * VA spaces), which keep those objects' memory until UVM lets go. */
static int sg_release(struct inode *inode, struct file *file)
{
    struct sg_client *cl = file->private_data;
    struct sg_obj *obj, *tmp;
    LIST_HEAD(dead);

    mutex_lock(&sg_node.lock);
    list_for_each_entry_safe(obj, tmp, &cl->objects, node) {
        sg_obj_unlink_locked(obj);
        list_add_tail(&obj->node, &dead);
    }
    sg_handle_remove_locked(cl->obj.handle);
    mutex_unlock(&sg_node.lock);

    list_for_each_entry_safe(obj, tmp, &dead, node) {
        list_del(&obj->node);
        sg_obj_release(obj);
    }
    kfree(cl);
    return 0;
}

static const struct file_operations sg_fops = {
    .owner = THIS_MODULE,      // an open client pins the module
    .open = sg_open,
    .release = sg_release,
    .unlocked_ioctl = sg_ioctl,
    .compat_ioctl = compat_ptr_ioctl, // every params struct is fixed-width and 8-byte aligned
    .llseek = no_llseek,
};

/* Mode 0600, root only, deliberately: a client can pin any GPU's framebuffer (FOREIGN_ALLOC), make
 * channels that UVM then services for whichever process registers them, and slow every copy (knobs).
 * The test bed runs as root; a plain-user test would get a node from the test bed's init, not from us. */
static struct miscdevice sg_miscdev = {
    .minor = MISC_DYNAMIC_MINOR,
    .name = SG_NAME,
    .fops = &sg_fops,
    .mode = 0600,
};

/* ---- module ------------------------------------------------------------------------------------ */

static int __init sg_init(void)
{
    int ret;

    sg_abi_checks();

    ret = sg_params_check();
    if (ret)
        return ret;
    ret = sg_arch_parse();
    if (ret)
        return ret;
    ret = sg_topology_parse();
    if (ret)
        return ret;

    ret = sg_pci_bind();
    if (ret)
        return ret;

    ret = sg_gpus_create();
    if (ret)
        goto fail_pci;

    ret = sg_engine_start();
    if (ret) {
        pr_err(SG_NAME ": cannot start the engine threads: %d\n", ret);
        goto fail_gpus;
    }
    sg_engine_started = true;

    // Last: user space can reach the GPUs only once they are complete.
    ret = misc_register(&sg_miscdev);
    if (ret) {
        pr_err(SG_NAME ": cannot register /dev/" SG_NAME ": %d\n", ret);
        goto fail_engine;
    }

    sg_gpus_report();
    return 0;

fail_engine:
    sg_engine_stop();
    sg_engine_started = false;
fail_gpus:
    sg_gpus_destroy();
fail_pci:
    sg_pci_unbind();
    return ret;
}

/* Refuses nothing: nvidia-uvm imports our symbols, so the module refcount keeps us loaded while it is,
 * and an open /dev/huvm-softgpu pins us through fops.owner. */
static void __exit sg_exit(void)
{
    misc_deregister(&sg_miscdev);

    if (sg_engine_started) {
        sg_engine_stop();
        sg_engine_started = false;
    }
    sg_gpus_destroy();
    sg_pci_unbind();

    WARN_ON(!idr_is_empty(&sg_idr));
    idr_destroy(&sg_idr);
}

module_init(sg_init);
module_exit(sg_exit);

/* GPL-compatible because the emulator needs GPL-only kernel symbols (irq_work); our code is also MIT. */
/* ---- nvidia.ko's version check ------------------------------------------------------------------ */

/*
 * nvidia_get_rm_ops(): what nvidia.ko exports for nvidia-modeset, and huvm's nvidia-uvm asks at load to
 * refuse an nvidia.ko of another version. Like nvidia.ko: a different version_string is answered with
 * NV_ERR_GENERIC and our own version; the same one with NV_OK and a table without entry points (the software
 * GPU has no RM API behind it; nvidia-uvm only compares the version).
 */
NV_STATUS nvidia_get_rm_ops(nvidia_modeset_rm_ops_t *rm_ops)
{
    if (!rm_ops->version_string || strcmp(rm_ops->version_string, sg_param_nvidia_version) != 0) {
        rm_ops->version_string = sg_param_nvidia_version;
        return NV_ERR_GENERIC;
    }
    memset(rm_ops, 0, sizeof(*rm_ops));
    rm_ops->version_string = sg_param_nvidia_version;
    return NV_OK;
}
EXPORT_SYMBOL_GPL(nvidia_get_rm_ops);

MODULE_LICENSE("Dual MIT/GPL");
MODULE_DESCRIPTION("huvm-softgpu: emulated Volta GPUs behind nvidia.ko's nvUvmInterface API, test hardware for "
                   "huvm's qemu test bed only; never load it on a server");
