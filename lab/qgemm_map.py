#!/usr/bin/env python3
# lab/qgemm_map.py — kernels/quant_gemm.cu's index mapping, emulated on the
# CPU (no GPU needed): the cp.async staging of W units and swizzled x units
# (q_swz), each lane's 16-byte shared loads, the m16n8k16 fragments as the
# PTX ISA lays them out (kernels/mma.cuh's comment), split-K and the store,
# on integer codes (the dequantization is left out: it is the GEMV's, and
# test_quant's decode_exact checks it). Asserts the result is x @ W^T
# exactly for block shapes and sizes off every tile. Run it after changing
# the GEMM's layout: python3 lab/qgemm_map.py (needs numpy; about a second).
import numpy as np

rng = np.random.default_rng(1)


def swz(u, t):
    """quant_gemm.cu's q_swz: where 16-byte unit u of x token row t lives"""
    return u ^ (t & 1) ^ ((u >> 2) & 2)


def stage(W, X, cu, by, bx, BM, BN, KL):
    """one pipeline stage: W [BM][4 units][KL codes], x [BN][XU units][8]"""
    rows, cols = W.shape
    n, CK, XU = X.shape[0], 4 * KL, KL // 2
    sw = np.zeros((BM, 4, KL), int)
    sx = np.zeros((BN, XU, 8), int)
    for r in range(BM):
        for u in range(4):
            row, c0 = by * BM + r, cu * CK + KL * u
            if row < rows and c0 < cols:
                sw[r, u] = W[row, c0:c0 + KL]
    for t in range(BN):
        for u in range(XU):
            tok, col = bx * BN + t, cu * CK + 8 * u
            if tok < n and col < cols:
                sx[t, swz(u, t)] = X[tok, col:col + 8]
    return sw, sx


def fragments(sw, sx, wrow, wtok, mt, nt, j, s2, KL):
    """A [16x16] and B [16x8] of MMA step i = 2j + s2 from the lanes' loads"""
    NU, i = KL // 8, 2 * j + s2
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        fa, fb = sw[wrow + 16 * mt + g, c], sw[wrow + 16 * mt + 8 + g, c]
        t = wtok + 8 * nt + g
        xv = sx[t, swz(c * NU + j, t)]  # pairs 4j .. 4j + 3 of the lane's x
        A[g, 2 * c:2 * c + 2], A[g + 8, 2 * c:2 * c + 2] = fa[4 * i:4 * i + 2], fb[4 * i:4 * i + 2]
        A[g, 2 * c + 8:2 * c + 10] = fa[4 * i + 2:4 * i + 4]
        A[g + 8, 2 * c + 8:2 * c + 10] = fb[4 * i + 2:4 * i + 4]
        B[2 * c:2 * c + 2, g] = xv[4 * s2:4 * s2 + 2]
        B[2 * c + 8:2 * c + 10, g] = xv[4 * s2 + 2:4 * s2 + 4]
    return A, B


def run(KL, BN, WM, WN, rows, cols, n, per):
    BM, NT, NU = 32 * WM, BN // (8 * WN), KL // 8
    W = rng.integers(-8, 8, (rows, cols))
    X = rng.integers(-4, 4, (n, cols))
    nchunk = (cols + 4 * KL - 1) // (4 * KL)
    out = np.zeros((n, rows))
    for by in range((rows + BM - 1) // BM):
        for bx in range((n + BN - 1) // BN):
            for bz in range((nchunk + per - 1) // per):
                acc = {}
                for cu in range(bz * per, min(nchunk, bz * per + per)):
                    sw, sx = stage(W, X, cu, by, bx, BM, BN, KL)
                    for warp in range(WM * WN):
                        wrow, wtok = (warp % WM) * 32, (warp // WM) * (BN // WN)
                        for mt in range(2):
                            for nt in range(NT):
                                C = acc.setdefault((warp, mt, nt), np.zeros((16, 8)))
                                for j in range(NU):
                                    for s2 in range(2):
                                        A, B = fragments(sw, sx, wrow, wtok, mt, nt, j, s2, KL)
                                        C += A @ B
                for (warp, mt, nt), C in acc.items():  # qm_store, partials summed
                    wrow, wtok = (warp % WM) * 32, (warp // WM) * (BN // WN)
                    for lane in range(32):
                        g, c = lane >> 2, lane & 3
                        for h2 in range(2):
                            row = by * BM + wrow + 16 * mt + 8 * h2 + g
                            for e in range(2):
                                tok = bx * BN + wtok + 8 * nt + 2 * c + e
                                if row < rows and tok < n:
                                    out[tok, row] += C[8 * h2 + g, 2 * c + e]
    assert np.array_equal(out, X @ W.T), (KL, BN, WM, WN, rows, cols, n, per)
    print(f"ok: {'int4' if KL == 32 else 'int8'} BN {BN} warps {WM}x{WN} "
          f"rows {rows} cols {cols} n {n} chunks/split {per}")


# KL: codes a lane a row a chunk (16 int8/fp8, 32 int4); shapes off the tiles
run(16, 32, 4, 1, 135, 96, 37, 1)
run(32, 64, 4, 2, 70, 160, 70, 2)
run(16, 64, 2, 2, 66, 128, 65, 9)
run(32, 128, 4, 2, 33, 256, 130, 1)
