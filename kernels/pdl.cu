/*
 * pdl.cu — the switch of pdl.h. The kernels that honour it start with
 * kern_pdl_start() (cuda_util.cuh) and launch through kern_launch_pdl.
 */
#include "cuda_util.cuh"
#include "pdl.h"

bool kern_pdl_small = false;

/* Touches no CUDA state (the kernel tests set it before Check forks). */
extern "C" void kern_pdl_enable(int on) { kern_pdl_small = on != 0; }

extern "C" int kern_pdl_enabled(void) { return kern_pdl_small; }
