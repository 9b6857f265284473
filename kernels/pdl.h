/*
 * pdl.h — programmatic dependent launch (PDL, sm_90+) for the step's
 * small kernels: RMSNorm, SiLU-mul, RoPE + KV write, decode attention and
 * the embedding. Launched as programmatic dependents, each may start while
 * the kernel before it drains: it waits (griddepcontrol.wait) for that
 * kernel's completion and memory before it reads or writes anything, then
 * at once lets the next kernel launch, so a GEMV behind it can fetch its
 * first weights during it. One process-wide switch; the backend turns it
 * on with the GEMVs' own (SL_PDL, docs/cuda.md) on devices that have PDL.
 */
#ifndef KERN_PDL_H
#define KERN_PDL_H

#ifdef __cplusplus
extern "C" {
#endif

/* on: only for a device of compute capability 9+ (the caller checks; an
 * older one may refuse the launch, which then falls back to a plain one). */
void kern_pdl_enable(int on);
int kern_pdl_enabled(void);

#ifdef __cplusplus
}
#endif

#endif
