// huvm-calibrate: the microbenchmarks of `huvmctl calibrate` (huvm.calibration), one GPU of a real node.
//
//   huvm-calibrate probe DEVICE
//   huvm-calibrate run DEVICE SIZE_BYTES REPEAT MAX_ALLOC_BYTES CONCURRENCIES SERIAL_REGIONS BLOCK_REGIONS
//
// Prints one JSON object on stdout. The tests and their method are those of huvm.sim.measured: every managed
// buffer freshly allocated and first written by the CPU, freed after its test; rates in MB/s (10^6 B/s),
// times in us. Safety: no allocation (managed, device or pinned-sized device) is larger than MAX_ALLOC_BYTES
// or than half of what cudaMemGetInfo reports free just before it; otherwise it stops with exit status 3.
// Exit status: 0 ok, 2 usage, 3 refused (memory), 4 CUDA error, 5 no CUDA device.
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK ((size_t)2 << 20)
#define PAGE ((size_t)4096)
#define MAX_CONC 64

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("huvm-calibrate: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) die(4, "%s: %s (%s)", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
    } while (0)

static size_t g_max_alloc;

// Refuse any allocation above the budget or above half of the GPU's free memory now.
static void check_room(size_t bytes, const char *what) {
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    if (bytes > g_max_alloc || bytes > free_b / 2)
        die(3, "%s of %zu bytes refused: the limit is %zu bytes and half of the %zu bytes free", what, bytes,
            g_max_alloc, free_b);
}

static char *managed_from_cpu(size_t bytes) {
    void *p = NULL;
    check_room(bytes, "managed buffer");
    CK(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal));
    memset(p, 1, bytes);  // first written by the CPU: every page resident on the host
    return (char *)p;
}

__global__ void k_read(const uint4 *p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

__global__ void k_touch(char *p, size_t pages, const unsigned *order) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < pages) p[(order ? (size_t)order[i] : i) * PAGE] = 2;
}

__global__ void k_serial(char *p, size_t regions) {
    for (size_t r = 0; r < regions; r++) {
        volatile char *b = p + r * CHUNK;
        *b = (char)(*b + 1);  // one fault at a time: the next access waits for this one
    }
}

// Whole 2 MiB regions demand-faulted: each CUDA block of 512 threads touches every 4 KiB page of one region at
// once (one byte per page), then takes the region gridDim.x further on, so gridDim.x regions are in flight at
// every moment until all are done (the steady state, not the cost of one kernel's first fault).
__global__ void k_block(char *p, size_t regions, int write, unsigned *sink) {
    unsigned acc = 0;
    for (size_t r = blockIdx.x; r < regions; r += gridDim.x) {
        char *q = p + r * CHUNK + (size_t)threadIdx.x * PAGE;
        if (write)
            *q = 1;
        else
            acc += (unsigned char)*q;
    }
    if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

static cudaEvent_t ev0, ev1;
static unsigned *g_sink;
static int g_dev;

static double elapsed_ms(void) {
    float ms = 0;
    CK(cudaEventSynchronize(ev1));
    CK(cudaEventElapsedTime(&ms, ev0, ev1));
    return ms > 0.0005f ? ms : 0.0005;  // never 0 (the events' resolution is about 0.5 us): no inf in the JSON
}

static double rate(size_t bytes, double ms) { return bytes / 1e6 / (ms / 1e3); }

static void prefetch(const void *p, size_t bytes, int to_gpu) {
#if CUDART_VERSION >= 13000
    cudaMemLocation loc;
    memset(&loc, 0, sizeof loc);
    loc.type = to_gpu ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
    loc.id = to_gpu ? g_dev : 0;
    CK(cudaMemPrefetchAsync(p, bytes, loc, 0, 0));
#else
    CK(cudaMemPrefetchAsync(p, bytes, to_gpu ? g_dev : cudaCpuDeviceId, 0));
#endif
}

static void grid_read(const void *p, size_t bytes) {
    k_read<<<1024, 256>>>((const uint4 *)p, bytes / sizeof(uint4), g_sink);
    CK(cudaGetLastError());
}

// ---- output ----

static int g_first_test = 1;

static void emit(const char *name, const double *v, int n, int us) {
    printf("%s\n  \"%s\": [", g_first_test ? "" : ",", name);
    for (int i = 0; i < n; i++) printf(us ? "%s%.3f" : "%s%.0f", i ? ", " : "", v[i]);
    printf("]");
    g_first_test = 0;
    fflush(stdout);
}

static int probe(void) {
    int count = 0, rt = 0, drv = 0, clock_khz = 0, bus_bits = 0, sms = 0;
    size_t free_b = 0, total_b = 0;
    char bus[32] = "";
    cudaDeviceProp prop;
    CK(cudaSetDevice(g_dev));
    CK(cudaGetDeviceCount(&count));
    CK(cudaRuntimeGetVersion(&rt));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaGetDeviceProperties(&prop, g_dev));
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, g_dev) != cudaSuccess) clock_khz = 0;
    if (cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, g_dev) != cudaSuccess) bus_bits = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g_dev));
    CK(cudaDeviceGetPCIBusId(bus, sizeof bus, g_dev));
    CK(cudaMemGetInfo(&free_b, &total_b));
    printf("{\"device_count\": %d, \"name\": \"", count);
    for (const char *c = prop.name; *c; c++)
        if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20) putchar(*c);
    printf("\", \"pci_bus_id\": \"%s\", \"memory_total_bytes\": %zu, \"memory_free_bytes\": %zu, "
           "\"runtime_version\": %d, \"driver_api_version\": %d, \"memory_clock_khz\": %d, "
           "\"memory_bus_width_bits\": %d, \"managed_memory\": %d, \"concurrent_managed_access\": %d, "
           "\"multiprocessors\": %d}\n",
           bus, total_b, free_b, rt, drv, clock_khz, bus_bits, prop.managedMemory, prop.concurrentManagedAccess, sms);
    return 0;
}

static int run(size_t size, int repeat, const size_t *conc, int nconc, size_t serial_regions, size_t block_regions) {
    double *v = (double *)calloc((size_t)repeat * 2, sizeof(double));
    size_t pages = size / PAGE;
    if (!v) die(4, "out of host memory");
    CK(cudaSetDevice(g_dev));
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    CK(cudaMalloc((void **)&g_sink, sizeof(unsigned)));
    k_touch<<<1, 1>>>(NULL, 0, NULL);  // load the module before anything is timed
    CK(cudaDeviceSynchronize());
    printf("{\"tests\": {");

    // pinned copies (the link), and the resident read (the HBM, a fallback for its peak)
    {
        void *host = NULL, *dev = NULL;
        check_room(size, "device buffer");
        CK(cudaMalloc(&dev, size));
        CK(cudaMallocHost(&host, size));
        memset(host, 1, size);
        double h2d[64], d2h[64], res[64], d2d[64];
        size_t half = size / 2;
        for (int r = 0; r < repeat; r++) {
            CK(cudaEventRecord(ev0));
            CK(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice));
            CK(cudaEventRecord(ev1));
            h2d[r] = rate(size, elapsed_ms());
            CK(cudaEventRecord(ev0));
            CK(cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost));
            CK(cudaEventRecord(ev1));
            d2h[r] = rate(size, elapsed_ms());
            CK(cudaEventRecord(ev0));
            grid_read(dev, size);
            CK(cudaEventRecord(ev1));
            res[r] = rate(size, elapsed_ms());
            // device to device, the buffer's first half onto its second: the HBM reads and writes each byte
            CK(cudaEventRecord(ev0));
            CK(cudaMemcpy((char *)dev + half, dev, half, cudaMemcpyDeviceToDevice));
            CK(cudaEventRecord(ev1));
            d2d[r] = rate(2 * half, elapsed_ms());
        }
        CK(cudaFreeHost(host));
        CK(cudaFree(dev));
        emit("pinned_h2d", h2d, repeat, 0);
        emit("pinned_d2h", d2h, repeat, 0);
        emit("resident_stream_read", res, repeat, 0);
        emit("hbm_d2d_copy", d2d, repeat, 0);
    }
    // prefetch there and back
    {
        double h2d[64], d2h[64];
        for (int r = 0; r < repeat; r++) {
            char *p = managed_from_cpu(size);
            CK(cudaEventRecord(ev0));
            prefetch(p, size, 1);
            CK(cudaEventRecord(ev1));
            h2d[r] = rate(size, elapsed_ms());
            CK(cudaEventRecord(ev0));
            prefetch(p, size, 0);
            CK(cudaEventRecord(ev1));
            d2h[r] = rate(size, elapsed_ms());
            CK(cudaFree(p));
        }
        emit("prefetch_h2d", h2d, repeat, 0);
        emit("prefetch_d2h", d2h, repeat, 0);
    }
    // demand faults: a coalesced read, one write per page in order and in a random order
    {
        unsigned *order_h = (unsigned *)malloc(pages * sizeof(unsigned)), *order_d = NULL;
        uint64_t x = 0x243f6a8885a308d3ull;
        double sr[64], seq[64], rnd[64];
        if (!order_h) die(4, "out of host memory");
        for (size_t i = 0; i < pages; i++) order_h[i] = (unsigned)i;
        for (size_t i = pages - 1; i > 0; i--) {  // Fisher-Yates with xorshift64: the same order every run
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            size_t j = x % (i + 1);
            unsigned t = order_h[i]; order_h[i] = order_h[j]; order_h[j] = t;
        }
        check_room(pages * sizeof(unsigned), "page order");
        CK(cudaMalloc((void **)&order_d, pages * sizeof(unsigned)));
        CK(cudaMemcpy(order_d, order_h, pages * sizeof(unsigned), cudaMemcpyHostToDevice));
        for (int r = 0; r < repeat; r++) {
            char *p = managed_from_cpu(size);
            CK(cudaEventRecord(ev0));
            grid_read(p, size);
            CK(cudaEventRecord(ev1));
            sr[r] = rate(size, elapsed_ms());
            CK(cudaFree(p));
            for (int random = 0; random < 2; random++) {
                p = managed_from_cpu(size);
                CK(cudaEventRecord(ev0));
                k_touch<<<(unsigned)((pages + 255) / 256), 256>>>(p, pages, random ? order_d : NULL);
                CK(cudaGetLastError());
                CK(cudaEventRecord(ev1));
                (random ? rnd : seq)[r] = rate(size, elapsed_ms());
                CK(cudaFree(p));
            }
        }
        CK(cudaFree(order_d));
        free(order_h);
        emit("fault_stream_read", sr, repeat, 0);
        emit("fault_touch_seq", seq, repeat, 0);
        emit("fault_touch_random", rnd, repeat, 0);
    }
    // an isolated fault: one thread, one byte per 2 MiB region
    {
        double us[64];
        for (int r = 0; r < repeat; r++) {
            char *p = managed_from_cpu(serial_regions * CHUNK);
            CK(cudaEventRecord(ev0));
            k_serial<<<1, 1>>>(p, serial_regions);
            CK(cudaGetLastError());
            CK(cudaEventRecord(ev1));
            us[r] = elapsed_ms() * 1e3 / serial_regions;
            CK(cudaFree(p));
        }
        emit("fault_serial_2m_us", us, repeat, 1);
    }
    printf("\n},\n\"block_fault_us\": {");
    // block_regions whole 2 MiB regions demand-faulted, N in flight: reads and writes; us per region
    for (int c = 0; c < nconc; c++) {
        int k = 0;
        if (conc[c] > block_regions) die(2, "CONCURRENCIES: %zu is more than BLOCK_REGIONS", conc[c]);
        for (int r = 0; r < repeat; r++)
            for (int write = 0; write < 2; write++) {
                char *p = managed_from_cpu(block_regions * CHUNK);
                CK(cudaEventRecord(ev0));
                k_block<<<(unsigned)conc[c], (unsigned)(CHUNK / PAGE)>>>(p, block_regions, write, g_sink);
                CK(cudaGetLastError());
                CK(cudaEventRecord(ev1));
                v[k++] = elapsed_ms() * 1e3 / block_regions;
                CK(cudaFree(p));
            }
        printf("%s\n  \"%zu\": [", c ? "," : "", conc[c]);
        for (int i = 0; i < k; i++) printf("%s%.3f", i ? ", " : "", v[i]);
        printf("]");
        fflush(stdout);
    }
    printf("\n}}\n");
    CK(cudaFree(g_sink));
    free(v);
    return 0;
}

static size_t parse_size(const char *s, const char *what) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || v == 0) die(2, "%s: expected a positive integer, got '%s'", what, s);
    return (size_t)v;
}

int main(int argc, char **argv) {
    int count = 0;
    cudaError_t e;
    if (argc < 3 || (strcmp(argv[1], "probe") && strcmp(argv[1], "run")) || (!strcmp(argv[1], "run") && argc != 9))
        die(2, "usage: huvm-calibrate probe DEVICE | run DEVICE SIZE REPEAT MAX_ALLOC CONCURRENCIES SERIAL_REGIONS "
               "BLOCK_REGIONS");
    {
        char *end = NULL;
        long d = strtol(argv[2], &end, 10);
        if (!*argv[2] || *end || d < 0 || d > 1024) die(2, "DEVICE: expected a CUDA device index, got '%s'", argv[2]);
        g_dev = (int)d;
    }
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        die(5, "no CUDA device (%s)", e == cudaSuccess ? "none found" : cudaGetErrorString(e));
    if (g_dev >= count) die(5, "no CUDA device %d (%d found)", g_dev, count);
    if (!strcmp(argv[1], "probe")) return probe();

    size_t size = parse_size(argv[3], "SIZE"), repeat = parse_size(argv[4], "REPEAT");
    size_t conc[MAX_CONC], serial, blocks;
    int nconc = 0;
    g_max_alloc = parse_size(argv[5], "MAX_ALLOC");
    if (repeat > 32) die(2, "REPEAT: at most 32");
    if (size % CHUNK) die(2, "SIZE: a multiple of 2 MiB");
    for (char *tok = strtok(argv[6], ","); tok; tok = strtok(NULL, ",")) {
        if (nconc == MAX_CONC) die(2, "CONCURRENCIES: at most %d", MAX_CONC);
        conc[nconc++] = parse_size(tok, "CONCURRENCIES");
    }
    serial = parse_size(argv[7], "SERIAL_REGIONS");
    blocks = parse_size(argv[8], "BLOCK_REGIONS");
    return run(size, (int)repeat, conc, nconc, serial, blocks);
}
