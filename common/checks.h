/*
 * checks.h — errors are values, for every library shardline calls. Each
 * macro runs one call, and on failure logs it with file:line and the
 * library's own message, records the same line as the thread's last error
 * (sl_fail, common/sl.h: the caller holding an err buffer takes it with
 * sl_take_error), then returns an SL_E* code from the enclosing int
 * function (in the spirit of NCCL's checks.h). Daemons never abort on a
 * failed call; they report it upward.
 *
 *   TRY(x)          x is one of ours (0 or SL_E*): pass its error upward
 *   CUDA_TRY(x)     CUDA runtime call           -> SL_EDEVICE
 *   CUDA_TRY_LAUNCH after a kernel launch        -> SL_EDEVICE
 *   CUBLAS_TRY(x)   cuBLAS / cuBLASLt call       -> SL_EDEVICE
 *   NCCL_TRY(x)     NCCL call                    -> SL_ECOMM
 *   MPI_TRY(x)      MPI call                     -> SL_ECOMM
 *
 * Where a function holds resources, the GOTO variants (NCCL's
 * NCCLCHECKGOTO) store the code in rc and jump to the cleanup label
 * instead of returning:
 *
 *   TRY_GOTO(rc, label, x)       x is one of ours
 *   CUDA_TRY_GOTO(rc, label, x)  CUDA runtime call -> SL_EDEVICE
 *
 *   int rc = SL_OK;
 *   TRY_GOTO(rc, fail, open_it(&a, err, errlen));
 *   CUDA_TRY_GOTO(rc, fail, cudaMalloc(&p, n));
 *   ...
 *   fail:
 *   	close_it(a);
 *   	return rc;
 *
 * Only macros: a file uses the ones whose library it includes itself.
 */
#ifndef SL_CHECKS_H
#define SL_CHECKS_H

#include <stdio.h>

#include "common/sl.h"

#define TRY(x)                             \
	do {                               \
		int rc_ = (x);             \
		if (rc_)                   \
			return rc_;        \
	} while (0)

#define TRY_GOTO(rc, label, x)             \
	do {                               \
		if (((rc) = (x)) != 0)     \
			goto label;        \
	} while (0)

/* Logs and records a failed library call; evaluates to code. */
#define SL_CHECK_NOTE_(subsys, code, call, msg)                                                  \
	(sl_log(SL_LOG_ERROR, subsys, "%s:%d: %s: %s", __FILE__, __LINE__, call, msg),         \
	 sl_fail(code, "%s:%d: %s: %s", __FILE__, __LINE__, call, msg))

#define SL_CHECK_FAIL_(subsys, code, call, msg) return SL_CHECK_NOTE_(subsys, code, call, msg)

#define CUDA_TRY_GOTO(rc, label, call)                                                        \
	do {                                                                                  \
		cudaError_t e_ = (call);                                                      \
		if (e_ != cudaSuccess) {                                                      \
			(rc) = SL_CHECK_NOTE_("cuda", SL_EDEVICE, #call, cudaGetErrorString(e_)); \
			goto label;                                                           \
		}                                                                             \
	} while (0)

#define CUDA_TRY(call)                                                                \
	do {                                                                          \
		cudaError_t e_ = (call);                                              \
		if (e_ != cudaSuccess)                                                \
			SL_CHECK_FAIL_("cuda", SL_EDEVICE, #call, cudaGetErrorString(e_)); \
	} while (0)

/* After a kernel launch: catches bad launch configurations at once. */
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())

#define CUBLAS_TRY(call)                                                              \
	do {                                                                          \
		int s_ = (int)(call);                                                 \
		if (s_ != 0) {                                                        \
			char m_[32];                                                  \
			snprintf(m_, sizeof m_, "status %d", s_);                     \
			SL_CHECK_FAIL_("cublas", SL_EDEVICE, #call, m_);              \
		}                                                                     \
	} while (0)

#define NCCL_TRY(call)                                                                \
	do {                                                                          \
		ncclResult_t r_ = (call);                                             \
		if (r_ != ncclSuccess)                                                \
			SL_CHECK_FAIL_("nccl", SL_ECOMM, #call, ncclGetErrorString(r_)); \
	} while (0)

#define MPI_TRY(call)                                                                 \
	do {                                                                          \
		int r_ = (call);                                                      \
		if (r_ != MPI_SUCCESS) {                                              \
			char m_[MPI_MAX_ERROR_STRING];                                \
			int n_ = 0;                                                   \
			MPI_Error_string(r_, m_, &n_);                                \
			SL_CHECK_FAIL_("mpi", SL_ECOMM, #call, m_);                   \
		}                                                                     \
	} while (0)

#endif
