/*
 * cuda_check.h — errors are values on the GPU side too: CUDA_TRY and
 * CUBLAS_TRY log the failing call with file:line and the library's own
 * message, then return SL_EDEVICE from the enclosing int function.
 * Included by .cu files and by host C files that call the CUDA runtime.
 */
#ifndef KERN_CUDA_CHECK_H
#define KERN_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "sl.h"

#define CUDA_TRY(call)                                                                  \
	do {                                                                            \
		cudaError_t e_ = (call);                                                \
		if (e_ != cudaSuccess) {                                                \
			sl_log(SL_LOG_ERROR, "cuda", "%s:%d: %s: %s", __FILE__, __LINE__, \
			       #call, cudaGetErrorString(e_));                           \
			return SL_EDEVICE;                                              \
		}                                                                       \
	} while (0)

/* After a kernel launch: catches bad launch configurations at once. */
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())

#define CUBLAS_TRY(call)                                                                \
	do {                                                                            \
		int s_ = (int)(call);                                                   \
		if (s_ != 0) {                                                          \
			sl_log(SL_LOG_ERROR, "cublas", "%s:%d: %s: status %d", __FILE__,   \
			       __LINE__, #call, s_);                                     \
			return SL_EDEVICE;                                              \
		}                                                                       \
	} while (0)

#endif
