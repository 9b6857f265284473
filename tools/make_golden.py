#!/usr/bin/env python3
"""Make the golden test data: tiny random Llama checkpoints saved with
Hugging Face's own save_pretrained, with the logits transformers computes
at every prompt position (fp32 on the stored weights) and 32 greedy tokens.

Runs wherever torch and transformers are installed (the GPU host has both;
no GPU is needed). Usage: python3 tools/make_golden.py OUT_DIR

Each model folder gets: config.json, model.safetensors (HF format),
golden.json (prompts, greedy tokens, versions, offsets) and logits.bin
(float32 little-endian, one row of vocab_size logits per prompt position,
prompts in order)."""
import json
import os
import sys

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


def greedy(model, prompt):
    """Full recompute each step: no cache, nothing to disagree about."""
    ids = list(prompt)
    margins = []
    for _ in range(GREEDY_STEPS):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        margins.append(float(top2[0] - top2[1]) / float(logits.abs().max()))
        ids.append(int(torch.argmax(logits)))
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


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(4)
    for name, overrides, dtype, lengths in MODELS:
        # greedy tokens are only a fair test when top-1 clearly beats top-2;
        # try seeds until every step's margin is above 1e-3 of the largest logit
        for seed in range(1, 50):
            margin = build(out_dir, name, overrides, dtype, lengths, seed)
            if margin > 1e-3:
                break
        print(f"{name}: seed {seed}, min greedy margin {margin:.4g}", flush=True)


if __name__ == "__main__":
    main()
