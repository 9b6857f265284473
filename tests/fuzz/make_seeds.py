#!/usr/bin/env python3
"""Make the committed seed corpora of the fuzz targets (tests/fuzz/corpus/)
from the repository's own test data: small, so the corpus stays a few
hundred KB, and real, so the fuzzer starts from inputs that get past the
parsers' first checks.

  config        tests/golden/*/config.json, generation_config.json as is
  safetensors   tests/golden/*/model.safetensors, each tensor cut down to a
                few elements (names, dtypes and metadata kept)
  st_index      an index JSON, a NUL, then shard a.safetensors (the harness
                writes a fixed b.safetensors beside it)
  gguf          tests/data/gguf/quant_ref.gguf and tests/golden/gguf_*
                models, tensors cut to one or two blocks, token lists cut
  tok_load      tests/data/*/tokenizer.json, vocabulary cut to the first
                ids and the merges among them
  tok_gguf      tests/data/*/tokenizer.gguf, cut the same way
  tok_text      a selector byte (which tokenizer) and a line of
                tests/data/hostile_strings.txt
  chat_template tests/data/chat_templates/*.jinja as is
  openai        request bodies in the shapes docs/http.md documents

The plan and coordinator-message seeds are packed by the real packers:
tests/fuzz/make_seeds.c (make fuzz-seeds). Python 3 standard library only.
Usage: python3 tests/fuzz/make_seeds.py   (from the repository root)
"""
import glob
import json
import os
import shutil
import struct
import sys

OUT = "tests/fuzz/corpus"
KEEP_TOKENS = 300


def out_dir(target):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    return d


def write(target, name, data):
    with open(os.path.join(out_dir(target), name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def tag(path):
    """A seed name from a test data path: tests/golden/mha_f32/x -> mha_f32."""
    return os.path.basename(os.path.dirname(path))


# ---- config ----

def config_seeds():
    for p in sorted(glob.glob("tests/golden/*/config.json")):
        shutil.copy(p, os.path.join(out_dir("config"), tag(p) + ".json"))
    for p in sorted(glob.glob("tests/golden/*/generation_config.json"))[:1]:
        shutil.copy(p, os.path.join(out_dir("config"), "generation_config.json"))


# ---- safetensors ----

ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
            "I8": 1, "U8": 1, "BOOL": 1}


def st_bytes(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_trim(path, max_tensors=6):
    """A safetensors file with the first tensors of `path`, each cut to at
    most 2 x 4 elements (leading dims 1)."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    meta = hdr.pop("__metadata__", None)
    out, data = {}, b""
    for name in sorted(hdr, key=lambda k: hdr[k]["data_offsets"][0])[:max_tensors]:
        e = hdr[name]
        shape = [min(d, 4) for d in e["shape"]]
        if len(shape) >= 2:
            shape = [1] * (len(shape) - 2) + [min(shape[-2], 2), shape[-1]]
        count = 1
        for d in shape:
            count *= d
        nbytes = count * ST_SIZES[e["dtype"]]
        start = base + e["data_offsets"][0]
        out[name] = {"dtype": e["dtype"], "shape": shape,
                     "data_offsets": [len(data), len(data) + nbytes]}
        data += raw[start:start + nbytes]
    if meta is not None:
        out["__metadata__"] = meta
    return st_bytes(out, data)


def safetensors_seeds():
    for p in sorted(glob.glob("tests/golden/*/model.safetensors")):
        write("safetensors", tag(p) + ".safetensors", st_trim(p))


def st_index_seeds():
    """Index + NUL + a.safetensors; b.safetensors is the harness's (b.x F32
    [2, 3], b.y BF16 [4])."""
    a = st_bytes({"a.x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                  "a.y": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]}},
                 struct.pack("<4f", 1, 2, 3, 4) + b"\x00\x3c\x00\x40\x00\x42")
    both = {"metadata": {"total_size": 54},
            "weight_map": {"a.x": "a.safetensors", "a.y": "a.safetensors",
                           "b.x": "b.safetensors", "b.y": "b.safetensors"}}
    write("st_index", "two_shards", json.dumps(both).encode() + b"\0" + a)
    only_b = {"weight_map": {"b.x": "b.safetensors", "b.y": "b.safetensors"}}
    write("st_index", "b_only", json.dumps(only_b).encode())
    wrong = {"weight_map": {"a.x": "b.safetensors"}}
    write("st_index", "wrong_shard", json.dumps(wrong).encode() + b"\0" + a)


# ---- GGUF ----

GG_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
             10: "<Q", 11: "<q", 12: "<d"}
# ggml type: (elements per block, bytes per block)
GG_BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
            8: (32, 34), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}


class Reader:
    def __init__(self, raw):
        self.raw, self.o = raw, 0

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.raw, self.o)
        self.o += struct.calcsize(fmt)
        return v

    def str(self):
        n = self.take("<Q")
        s = self.raw[self.o:self.o + n]
        self.o += n
        return s

    def value(self, t):
        if t in GG_SCALAR:
            return self.take(GG_SCALAR[t])
        if t == 8:
            return self.str()
        et, n = self.take("<I"), self.take("<Q")
        return (et, [self.value(et) for _ in range(n)])


def gg_read(path):
    r = Reader(open(path, "rb").read())
    assert r.raw[:4] == b"GGUF"
    r.o = 4
    version, n_t, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kv = []
    for _ in range(n_kv):
        k, t = r.str(), r.take("<I")
        kv.append((k, t, r.value(t)))
    tensors = []
    for _ in range(n_t):
        name, nd = r.str(), r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        tensors.append([name, ne, r.take("<I"), r.take("<Q")])
    align = dict((k, v) for k, _, v in kv).get(b"general.alignment", 32)
    base = (r.o + align - 1) // align * align
    return version, kv, tensors, r.raw, base, align


def gg_value(t, v):
    if t in GG_SCALAR:
        return struct.pack(GG_SCALAR[t], v)
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    et, items = v
    return struct.pack("<IQ", et, len(items)) + b"".join(gg_value(et, x) for x in items)


def gg_trim_vocab(kv, keep):
    """Token arrays cut to `keep` ids, merges to those among them, token ids
    past them dropped."""
    d = dict((k, (t, v)) for k, t, v in kv)
    toks = d.get(b"tokenizer.ggml.tokens")
    if not toks:
        return kv
    kept = set(toks[1][1][:keep])
    out = []
    for k, t, v in kv:
        if k in (b"tokenizer.ggml.tokens", b"tokenizer.ggml.scores",
                 b"tokenizer.ggml.token_type"):
            v = (v[0], v[1][:keep])
        elif k == b"tokenizer.ggml.merges":
            v = (v[0], [m for m in v[1] if b" " in m[1:] and
                        m[:1 + m[1:].index(b" ")] in kept and
                        m[2 + m[1:].index(b" "):] in kept and
                        m.replace(b" ", b"", 1) in kept])
        elif k.startswith(b"tokenizer.ggml.") and k.endswith(b"_token_id") and v >= keep:
            continue
        out.append((k, t, v))
    return out


def gg_write(version, kv, tensors, align):
    """tensors: [name, ne, type, data]."""
    b = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for k, t, v in kv:
        b += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + gg_value(t, v)
    off, blobs = 0, []
    for name, ne, typ, data in tensors:
        b += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(ne))
        b += b"".join(struct.pack("<Q", n) for n in ne) + struct.pack("<IQ", typ, off)
        pad = -len(data) % align
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    b += b"\0" * (-len(b) % align)
    return b + b"".join(blobs)


def gg_trim(path, max_tensors=12):
    version, kv, tensors, raw, base, align = gg_read(path)
    kv = gg_trim_vocab(kv, 64)
    out = []
    for name, ne, typ, off in tensors[:max_tensors]:
        blk, size = GG_BLOCK[typ]
        ne = list(ne)
        ne[0] = min(ne[0], max(blk, 8))
        for i in range(1, len(ne)):
            ne[i] = min(ne[i], 2)
        rows = 1
        for n in ne[1:]:
            rows *= n
        nbytes = rows * (ne[0] // blk) * size
        out.append([name, ne, typ, raw[base + off:base + off + nbytes]])
    return gg_write(version, kv, out, align)


def gguf_seeds():
    shutil.copy("tests/data/gguf/quant_ref.gguf", os.path.join(out_dir("gguf"), "quant_ref.gguf"))
    for p in sorted(glob.glob("tests/golden/gguf_*/*.gguf")):
        name = tag(p) + "-" + os.path.basename(p)
        write("gguf", name, gg_trim(p))


def tok_gguf_seeds():
    for p in sorted(glob.glob("tests/data/*/tokenizer.gguf")):
        version, kv, _, _, _, align = gg_read(p)
        write("tok_gguf", tag(p) + ".gguf", gg_write(version, gg_trim_vocab(kv, KEEP_TOKENS), [],
                                                     align))


# ---- tokenizer.json ----

def merge_parts(m):
    return m if isinstance(m, list) else m.split(" ", 1)


def tok_trim(path, keep=KEEP_TOKENS):
    d = json.load(open(path, encoding="utf-8"))
    m = d["model"]
    added = {a["id"] for a in d.get("added_tokens") or []}
    vocab = {t: i for t, i in m["vocab"].items() if i < keep or i in added}
    m["vocab"] = vocab
    if "merges" in m:
        m["merges"] = [x for x in m["merges"]
                       if len(merge_parts(x)) == 2 and all(p in vocab for p in merge_parts(x))
                       and "".join(merge_parts(x)) in vocab]
    return json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode()


def tok_load_seeds():
    for p in sorted(glob.glob("tests/data/*/tokenizer.json")):
        write("tok_load", tag(p) + ".json", tok_trim(p))


# tok_text's tokenizers, in the harness's order (byte 0 of an input, mod 8).
TOK_TEXT_NAMES = ["llama2-small", "llama3-small", "gpt2-small", "qwen2-small",
                  "smollm2-small", "misc-small", "misc2-small", "llama2-small-added"]


def tok_text_seeds():
    lines = [l for l in open("tests/data/hostile_strings.txt", "rb").read().split(b"\n")
             if l and not l.startswith(b"#")]
    for i, line in enumerate(lines[:48]):
        write("tok_text", "line%02d" % i, bytes([i % len(TOK_TEXT_NAMES)]) + line)


# ---- chat templates, OpenAI bodies ----

def chat_template_seeds():
    for p in sorted(glob.glob("tests/data/chat_templates/*.jinja")):
        shutil.copy(p, os.path.join(out_dir("chat_template"), os.path.basename(p)))


def openai_seeds():
    bodies = {
        "chat_basic": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "Hi"}]},
        "chat_stream": {"model": "m", "stream": True, "stream_options": {"include_usage": True},
                        "max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "seed": 3,
                        "stop": ["\n", "."], "messages": [{"role": "user", "content": "Hi"}]},
        "chat_parts": {"model": "m", "n": 2, "logprobs": True, "top_logprobs": 2,
                       "messages": [{"role": "user", "content": [
                           {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                           {"role": "assistant", "content": None}]},
        "completion": {"model": "m", "prompt": "Once upon", "max_tokens": 3, "echo": False,
                       "presence_penalty": 0.5, "frequency_penalty": 0.5, "stop": "x"},
        "completion_multi": {"model": "m", "prompt": ["a", "b"], "n": 2, "logprobs": 2,
                             "stream": True, "min_p": 0.1, "repetition_penalty": 1.1},
        "completion_ids": {"model": "m", "prompt": [1, 2, 3], "max_tokens": 2,
                           "top_k": 5, "ignore_eos": True},
    }
    for name, body in bodies.items():
        # byte 0: the endpoint (0 completions, 1 chat), as the harness reads it
        ep = b"\x01" if name.startswith("chat") else b"\x00"
        write("openai", name, ep + json.dumps(body).encode())


def main():
    if not os.path.isdir("tests/fuzz"):
        sys.exit("run from the repository root")
    for f in (config_seeds, safetensors_seeds, st_index_seeds, gguf_seeds, tok_gguf_seeds,
              tok_load_seeds, tok_text_seeds, chat_template_seeds, openai_seeds):
        f()
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    print("seeds: %d KB in %s" % (total // 1024, OUT))


if __name__ == "__main__":
    main()
