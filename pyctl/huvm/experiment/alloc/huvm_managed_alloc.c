// SPDX-License-Identifier: MIT
/*
 * huvm_managed_alloc: a PyTorch pluggable CUDA allocator that hands out managed (UVM) memory, so a training
 * script's tensors can exceed its GPU's memory and are paged by nvidia-uvm (and, with the patched module, to
 * peer GPUs), without changing the script.
 *
 * PyTorch loads it with torch.cuda.memory.CUDAPluggableAllocator(path, "huvm_managed_malloc",
 * "huvm_managed_free") and torch.cuda.memory.change_current_allocator(); the two entry points have the
 * signatures that API expects:
 *     void *alloc(ssize_t size, int device, cudaStream_t stream);
 *     void free(void *ptr, ssize_t size, int device, cudaStream_t stream);
 * (PyTorch docs, "Using custom memory allocators for CUDA": torch.cuda.memory.CUDAPluggableAllocator.)
 *
 * Allocation is cudaMallocManaged(..., cudaMemAttachGlobal) on the requested device; with
 * HUVM_ALLOC_PREFERRED_LOCATION=1 in the environment the range is also advised to prefer that device
 * (cudaMemAdviseSetPreferredLocation). Failures return NULL (PyTorch then raises its out-of-memory error);
 * HUVM_ALLOC_VERBOSE=1 prints each failure to stderr.
 *
 * Build: python -m huvm.experiment.managed_alloc build (headers and libcudart from the nvidia-cuda-runtime
 * wheel, or a CUDA toolkit); see docs/experiments.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cuda_runtime_api.h>

#define HUVM_EXPORT __attribute__((visibility("default")))

static int env_on(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && strcmp(v, "1") == 0;
}

static void report(const char *what, cudaError_t err, ssize_t size, int device)
{
	if (env_on("HUVM_ALLOC_VERBOSE"))
		fprintf(stderr, "huvm_managed_alloc: %s(%zd bytes, device %d): %s\n", what, size, device,
			cudaGetErrorString(err));
}

HUVM_EXPORT void *huvm_managed_malloc(ssize_t size, int device, cudaStream_t stream)
{
	void *ptr = NULL;
	int current = -1;
	cudaError_t err;

	(void)stream; /* managed memory is not stream-ordered */
	if (size <= 0)
		return NULL;
	if (cudaGetDevice(&current) != cudaSuccess)
		current = -1;
	if (current != device && cudaSetDevice(device) != cudaSuccess) {
		report("cudaSetDevice", cudaGetLastError(), size, device);
		return NULL;
	}
	err = cudaMallocManaged(&ptr, (size_t)size, cudaMemAttachGlobal);
	if (err != cudaSuccess) {
		report("cudaMallocManaged", err, size, device);
		ptr = NULL;
	} else if (env_on("HUVM_ALLOC_PREFERRED_LOCATION")) {
#if CUDART_VERSION >= 13000 /* CUDA 13: the location is a struct cudaMemLocation */
		struct cudaMemLocation where = { .type = cudaMemLocationTypeDevice, .id = device };

		err = cudaMemAdvise(ptr, (size_t)size, cudaMemAdviseSetPreferredLocation, where);
#else
		err = cudaMemAdvise(ptr, (size_t)size, cudaMemAdviseSetPreferredLocation, device);
#endif
		if (err != cudaSuccess)
			report("cudaMemAdvise", err, size, device);
	}
	if (current >= 0 && current != device)
		cudaSetDevice(current);
	return ptr;
}

HUVM_EXPORT void huvm_managed_free(void *ptr, ssize_t size, int device, cudaStream_t stream)
{
	cudaError_t err;

	(void)stream;
	if (ptr == NULL)
		return;
	err = cudaFree(ptr); /* synchronizes: no kernel still uses the range */
	if (err != cudaSuccess)
		report("cudaFree", err, size, device);
}
