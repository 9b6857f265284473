/*
 * pdl.h — programmatic dependent launch (PDL, sm_90+) for the step's
 * small kernels: RMSNorm, SiLU-mul, RoPE + KV write, decode attention and
 * the embedding. Launched as programmatic dependents, each may start while
 * the kernel before it drains: it waits (griddepcontrol.wait) for that
 * kernel's completion and memory before it reads or writes anything, then
 * at once lets the next kernel launch, so a GEMV behind it can fetch its
 * first weights during it. One process-wide switch; the backend turns it
 * on with the GEMVs' own (SL_PDL, docs/cuda.md) on devices that have PDL.
 * Also the decode GEMVs' other launch setting, their L1 / shared memory
 * split (kern_gemv_l1_enable).
 */
#ifndef KERN_PDL_H
#define KERN_PDL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* on: only for a device of compute capability 9+ (the caller checks; an
 * older one may refuse the launch, which then falls back to a plain one). */
void kern_pdl_enable(int on);
int kern_pdl_enabled(void);

/* The decode GEMVs (matmul.cu, quant.cu) ask for the largest L1 the SM
 * can give them: the smallest shared-memory carveout that still holds as
 * many of their blocks as their registers allow (about 5% for the fp16
 * GEMV, 8% for the 16-warp int8/fp8 one). Their weight loads stream
 * through L1; on an H100 the 7B step ran 2-3% faster at batch 1 and 2-11%
 * at batch 8 so (docs/cuda.md). Not less: the smallest carveout of all
 * halves the quantized GEMVs' occupancy (int8 batch 1 -14%). Not for
 * every kernel either: preferring L1 for the whole device made the
 * batched paths slower (batch 32 int8 -22%), their GEMM and attention
 * kernels wanting shared memory. On by default; SL_PREFER_L1=0 turns it
 * off (node/backend_cuda.c). */
void kern_gemv_l1_enable(int on);

/* For tests of kernels that run as programmatic dependents: copy `bytes`
 * from src to dst (device, 16-byte aligned, bytes % 16 == 0) in a kernel
 * launched as the small kernels are, which lets the next kernel launch at
 * its start and then idles `delay_ns` before it writes. A dependent that
 * reads dst without waiting for this kernel reads it unwritten. */
int kern_pdl_probe_copy(void *dst, const void *src, size_t bytes, unsigned delay_ns,
			void *stream);

#ifdef __cplusplus
}
#endif

#endif
