/*
 * timeline.cu — the host side of kernels/timeline.h: the registry of the
 * .cu files' device-side states, the ring, and its CSV dump.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_util.cuh"
#include "kernels/timeline.h"

#define TL_FILES_MAX 64 /* .cu files with a copy of the state (about 25) */
static const void *g_syms[TL_FILES_MAX];
static int g_n_syms;
static kern_tl_rec *g_buf;
static unsigned long long *g_count;
static size_t g_records;

/* At static initialisation, one call per .cu file: no lock needed. */
extern "C" int kern_timeline_register(const void *dev_symbol)
{
	if (g_n_syms < TL_FILES_MAX)
		g_syms[g_n_syms++] = dev_symbol;
	return g_n_syms;
}

extern "C" int kern_timeline_built(void)
{
#ifdef SL_TIMELINE
	return 1;
#else
	return 0;
#endif
}

static int set_state(const kern_tl_state *st)
{
	for (int i = 0; i < g_n_syms; i++)
		CUDA_TRY(cudaMemcpyToSymbol(g_syms[i], st, sizeof *st));
	return SL_OK;
}

static void free_ring(void)
{
	cudaFree(g_buf), cudaFree(g_count);
	g_buf = NULL, g_count = NULL, g_records = 0;
}

extern "C" int kern_timeline_start(size_t records)
{
	if (!kern_timeline_built())
		return sl_fail(SL_ENOTSUP, "timeline: this build records none (make TIMELINE=1)");
	if (g_buf)
		return sl_fail(SL_EINVAL, "timeline: already recording");
	size_t n = 1024;
	while (n < records && n < ((size_t)1 << 30))
		n <<= 1;
	if (cudaMalloc(&g_buf, n * sizeof *g_buf) != cudaSuccess ||
	    cudaMalloc(&g_count, sizeof *g_count) != cudaSuccess ||
	    cudaMemset(g_count, 0, sizeof *g_count) != cudaSuccess) {
		cudaGetLastError();
		free_ring();
		return sl_fail(SL_ENOMEM, "timeline: no device memory for %zu records", n);
	}
	g_records = n;
	const kern_tl_state st = {g_buf, g_count, (unsigned long long)n - 1};
	return set_state(&st);
}

static void write_csv(FILE *f, const kern_tl_rec *r, size_t n)
{
	unsigned long long t0 = ~0ull;
	for (size_t i = 0; i < n; i++)
		t0 = r[i].t_arrive < t0 ? r[i].t_arrive : t0;
	fprintf(f, "kind,grid,block,smid,line,grid_x,grid_y,threads,t_arrive_ns,t_go_ns\n");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s,%llu,%u,%u,%u,%u,%u,%u,%llu,%llu\n",
			r[i].kind == KERN_TL_WAIT ? "wait" : "next", r[i].grid, r[i].block,
			r[i].smid, r[i].line, r[i].grid_x, r[i].grid_y, r[i].threads,
			r[i].t_arrive - t0, r[i].t_go - t0);
}

/* The ring's records, oldest first where it wrapped. */
static int read_ring(kern_tl_rec **out, size_t *n_out)
{
	unsigned long long count = 0;
	CUDA_TRY(cudaDeviceSynchronize());
	CUDA_TRY(cudaMemcpy(&count, g_count, sizeof count, cudaMemcpyDeviceToHost));
	const size_t n = count < g_records ? (size_t)count : g_records;
	const size_t first = count < g_records ? 0 : (size_t)(count % g_records);
	kern_tl_rec *ring = (kern_tl_rec *)malloc(g_records * sizeof *ring);
	kern_tl_rec *r = (kern_tl_rec *)malloc((n ? n : 1) * sizeof *r);
	if (!ring || !r) {
		free(ring), free(r);
		return sl_fail(SL_ENOMEM, "timeline: out of memory");
	}
	if (cudaMemcpy(ring, g_buf, g_records * sizeof *ring, cudaMemcpyDeviceToHost) != cudaSuccess) {
		free(ring), free(r);
		return sl_fail(SL_EDEVICE, "timeline: cannot read the ring");
	}
	for (size_t i = 0; i < n; i++)
		r[i] = ring[(first + i) % g_records];
	free(ring);
	*out = r, *n_out = n;
	return SL_OK;
}

extern "C" int kern_timeline_dump(const char *path, size_t *written)
{
	if (!g_buf)
		return sl_fail(SL_EINVAL, "timeline: not recording");
	const kern_tl_state off = {NULL, NULL, 0};
	kern_tl_rec *r = NULL;
	size_t n = 0;
	int rc = read_ring(&r, &n);
	if (!rc) {
		FILE *f = fopen(path, "w");
		if (!f)
			rc = sl_fail(SL_EIO, "timeline: cannot write %s", path);
		else {
			write_csv(f, r, n);
			rc = fclose(f) ? sl_fail(SL_EIO, "timeline: cannot write %s", path) : SL_OK;
		}
	}
	free(r);
	set_state(&off);
	free_ring();
	if (written)
		*written = rc ? 0 : n;
	return rc;
}
