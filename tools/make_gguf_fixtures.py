#!/usr/bin/env python3
"""Make tests/data/gguf/quant_ref.gguf: the reference for shardline's GGUF
dequantization (formats/gguf_quant.c), written by the `gguf` package that
ships with llama.cpp (gguf-py), so the test also reads a file made by an
independent writer.

For every storage type shardline reads it holds one tensor `q.TYPE` of
random blocks (random bytes, with every fp16 scale field replaced by a
random finite value so no block decodes to inf/NaN) and one F32 tensor
`want.TYPE` of the same shape: gguf-py's own dequantization of those
bytes (gguf.quants.dequantize). Metadata records the package versions.

Needs numpy and gguf (not needed by CI, which only reads the committed
file). Usage: python3 tools/make_gguf_fixtures.py [OUT_FILE]
"""
import sys
from importlib.metadata import version

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

ROWS = 3
# type: (values per row, byte offsets of the fp16 scale fields in a block)
TYPES = {
    T.Q8_0: (64, [0]),
    T.Q4_0: (64, [0]),
    T.Q4_1: (64, [0, 2]),
    T.Q5_0: (64, [0]),
    T.Q5_1: (64, [0, 2]),
    T.Q4_K: (512, [0, 2]),
    T.Q5_K: (512, [0, 2]),
    T.Q6_K: (512, [208]),
}


def random_blocks(rng, qtype, n_values, scale_offsets):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(ROWS, n_values // block, size), dtype=np.uint8)
    for off in scale_offsets:
        # finite scales of both signs across a few orders of magnitude
        s = (rng.standard_normal((ROWS, n_values // block)) *
             10.0 ** rng.integers(-4, 1, (ROWS, n_values // block))).astype(np.float16)
        raw[:, :, off:off + 2] = s.view(np.uint8).reshape(ROWS, -1, 2)
    return raw.reshape(ROWS, -1)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gguf/quant_ref.gguf"
    rng = np.random.default_rng(20250101)
    w = gguf.GGUFWriter(out, "llama")
    w.add_string("shardline.made_by", "tools/make_gguf_fixtures.py")
    w.add_string("shardline.gguf_version", version("gguf"))
    w.add_string("shardline.numpy_version", np.__version__)
    for qtype, (n, offs) in TYPES.items():
        raw = random_blocks(rng, qtype, n, offs)
        want = dequantize(raw, qtype).astype(np.float32)
        assert want.shape == (ROWS, n) and np.isfinite(want).all()
        w.add_tensor(f"q.{qtype.name}", raw, raw_dtype=qtype)
        w.add_tensor(f"want.{qtype.name}", want)
    vals = (rng.standard_normal((ROWS, 48)) * 3).astype(np.float32)
    w.add_tensor("q.F32", vals)
    w.add_tensor("want.F32", vals)
    w.add_tensor("q.F16", vals.astype(np.float16))
    w.add_tensor("want.F16", vals.astype(np.float16).astype(np.float32))
    bf = (vals.view(np.uint32) >> 16).astype(np.uint16)  # truncated: any bf16 will do
    w.add_tensor("q.BF16", bf.view(np.uint8), raw_dtype=T.BF16)
    w.add_tensor("want.BF16", dequantize(bf.view(np.uint8), T.BF16).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
