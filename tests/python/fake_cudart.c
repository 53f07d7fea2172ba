/* A fake libcudart for test_calibration.py: the CUDA runtime calls huvm_calibrate.cu makes, on the CPU, so the
 * benchmark (built with nvcc -cudart shared) runs where there is no GPU. Kernels do nothing; every event pair
 * times 1 ms. The device: $FAKE_CUDA_DEVICES GPUs (default 1; 0: cudaErrorNoDevice), $FAKE_CUDA_TOTAL bytes
 * (default 8 GiB), $FAKE_CUDA_FREE free at start (default 7.5 GiB), less every live allocation. Each
 * allocation is appended to $FAKE_CUDA_LOG as "KIND BYTES FREE_BEFORE". Compiled against the real headers. */
#include <cuda_runtime_api.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t env_size(const char *name, size_t dflt) {
    const char *v = getenv(name);
    return v && *v ? (size_t)strtoull(v, NULL, 10) : dflt;
}

static size_t g_used;

struct hdr { size_t bytes; size_t pad; };

static size_t free_now(void) {
    size_t f = env_size("FAKE_CUDA_FREE", (size_t)15 << 29);
    return f > g_used ? f - g_used : 0;
}

static cudaError_t alloc(void **p, size_t bytes, const char *kind, int gpu) {
    const char *log = getenv("FAKE_CUDA_LOG");
    if (log) {
        FILE *f = fopen(log, "a");
        if (f) { fprintf(f, "%s %zu %zu\n", kind, bytes, free_now()); fclose(f); }
    }
    if (gpu && bytes > free_now()) return cudaErrorMemoryAllocation;
    struct hdr *h = malloc(sizeof *h + bytes);
    if (!h) return cudaErrorMemoryAllocation;
    h->bytes = gpu ? bytes : 0;
    g_used += h->bytes;
    *p = h + 1;
    return cudaSuccess;
}

static cudaError_t release(void *p) {
    if (p) { struct hdr *h = (struct hdr *)p - 1; g_used -= h->bytes; free(h); }
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = (int)env_size("FAKE_CUDA_DEVICES", 1);
    return *n ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int d) { (void)d; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    (void)d;
    memset(p, 0, sizeof *p);
    strcpy(p->name, "Fake \"GPU\" H200");
    p->managedMemory = 1;
    p->concurrentManagedAccess = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    (void)d;
    *v = a == cudaDevAttrGlobalMemoryBusWidth ? 6144 : a == cudaDevAttrMultiProcessorCount ? 132 : 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *s, int len, int d) { (void)d; snprintf(s, (size_t)len, "0000:3b:00.0"); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = free_now(); *t = env_size("FAKE_CUDA_TOTAL", (size_t)8 << 30); return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) { return alloc(p, n, "device", 1); }
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned flags) { (void)flags; return alloc(p, n, "managed", 1); }
cudaError_t cudaMallocHost(void **p, size_t n) { return alloc(p, n, "pinned", 0); }
cudaError_t cudaFree(void *p) { return release(p); }
cudaError_t cudaFreeHost(void *p) { return release(p); }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { (void)k; memmove(d, s, n); return cudaSuccess; }
#if CUDART_VERSION >= 13000
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, struct cudaMemLocation l, unsigned f, cudaStream_t s) {
    (void)p; (void)n; (void)l; (void)f; (void)s; return cudaSuccess;
}
#else
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, int d, cudaStream_t s) { (void)p; (void)n; (void)d; (void)s; return cudaSuccess; }
#endif
cudaError_t cudaEventCreate(cudaEvent_t *e) { static int x; *e = (cudaEvent_t)&x; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { (void)a; (void)b; *ms = 1.0f; return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "cudaError"; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaErrorNoDevice ? "no CUDA-capable device is detected" : "fake error"; }

/* what nvcc's host stubs call: registration and launches, all no-ops */
static void *g_handle[4];
void **__cudaRegisterFatBinary(void *fat) { (void)fat; return g_handle; }
void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
void __cudaUnregisterFatBinary(void **h) { (void)h; }
void __cudaRegisterFunction(void **h, const char *f, char *d, const char *n, int t, void *a, void *b, void *c,
                            void *e, int *s) {
    (void)h; (void)f; (void)d; (void)n; (void)t; (void)a; (void)b; (void)c; (void)e; (void)s;
}
unsigned __cudaPushCallConfiguration(dim3 g, dim3 b, size_t m, void *s) { (void)g; (void)b; (void)m; (void)s; return 0; }
cudaError_t __cudaPopCallConfiguration(dim3 *g, dim3 *b, size_t *m, void *s) {
    memset(g, 0, sizeof *g); memset(b, 0, sizeof *b); *m = 0; *(void **)s = NULL; return cudaSuccess;
}
cudaError_t __cudaGetKernel(void **k, const void *f) { *k = (void *)f; return cudaSuccess; }
cudaError_t __cudaLaunchKernel(void) { return cudaSuccess; }
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t m, cudaStream_t s) {
    (void)f; (void)g; (void)b; (void)a; (void)m; (void)s; return cudaSuccess;
}
