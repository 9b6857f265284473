#!/usr/bin/env python3
# lab/act_quant_ppl.py — what quantizing the activations as well as the
# weights would cost SmolLM2 in perplexity, emulated on the CPU (no GPU, no
# engine change): a numpy forward of the GGUF's weights (dequantized to
# fp32) over the text in windows as tools/ppl.c takes them (BOS, or EOS where
# there is none, then 511 text tokens, each window scored on its own), with
# every linear layer (and the tied LM head) in one of these forms:
#   none   the weights as the GGUF has them
#   w8     int8 weights, one absmax scale a row (the engine's int8)
#   w8a8   w8 and int8 inputs, one absmax scale a token (a W8A8 GEMM on
#          integer tensor cores would need this)
# "none" reproduces shardline-ppl's fp16 figure on the CUDA backend to the
# third decimal (17.242 for SmolLM2 on tests/data/ppl/apache-2.0.txt);
# w8 lands near its int8 one (here the LM head is quantized too).
#
# Usage (repository root; numpy and the gguf package: pip install gguf;
# a few minutes on two cores):
#   python3 lab/act_quant_ppl.py build/models/SmolLM2-135M-Instruct.Q4_1.gguf \
#       tests/data/ppl/apache-2.0.txt [none,w8,w8a8] [build/bin/shardline-tok]
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(r, key):
    f = r.fields[key]
    return f.parts[f.data[0]][0]


def load(path):
    r = GGUFReader(path)
    cfg = {k: field(r, 'llama.' + k) for k in (
        'block_count', 'embedding_length', 'attention.head_count',
        'attention.head_count_kv', 'attention.layer_norm_rms_epsilon', 'rope.freq_base')}
    w = {}
    for t in r.tensors:
        w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
            [int(x) for x in reversed(t.shape)])
    return cfg, w


def tokens(tok_bin, gguf_path, text_path):
    """the text's ids and the window's first token, as tools/ppl.c picks it"""
    text = open(text_path, encoding='utf-8').read()
    out = subprocess.run([tok_bin, gguf_path, 'encode', '--no-special', text],
                         capture_output=True, text=True, check=True).stdout
    info = subprocess.run([tok_bin, gguf_path, 'info'], capture_output=True, text=True,
                          check=True).stdout.split('\n')
    ids = dict(line.split()[:2] for line in info if len(line.split()) >= 2)
    bos = int(ids.get('bos', -1))
    return [int(x) for x in out.split()], bos if bos >= 0 else int(ids['eos'])


def q8_rows(a):
    """int8 with one absmax scale a row, back to fp32"""
    s = np.abs(a).max(axis=1, keepdims=True) / 127.0
    s[s == 0] = 1
    return np.clip(np.rint(a / s), -127, 127) * s


def forward(cfg, w, lm, toks, act):
    """logits of one window; act: what each linear's input goes through"""
    L, D = int(cfg['block_count']), int(cfg['embedding_length'])
    H, KV = int(cfg['attention.head_count']), int(cfg['attention.head_count_kv'])
    eps, hd, T = float(cfg['attention.layer_norm_rms_epsilon']), D // H, len(toks)
    inv = float(cfg['rope.freq_base']) ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

    def lin(x, name):
        return act(x) @ w[name].T

    def norm(x, name):
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w[name]

    def rope(q, nh):  # GGUF's llama q/k rows are permuted for adjacent pairs
        q = q.reshape(T, nh, hd // 2, 2)
        a, b = q[..., 0], q[..., 1]
        return np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(T, nh, hd)

    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    x = w['token_embd.weight'][toks]
    for layer in range(L):
        p = 'blk.%d.' % layer
        h = norm(x, p + 'attn_norm.weight')
        q = rope(lin(h, p + 'attn_q.weight'), H).transpose(1, 0, 2)
        k = np.repeat(rope(lin(h, p + 'attn_k.weight'), KV).transpose(1, 0, 2), H // KV, 0)
        v = np.repeat(lin(h, p + 'attn_v.weight').reshape(T, KV, hd).transpose(1, 0, 2),
                      H // KV, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + lin((s @ v).transpose(1, 0, 2).reshape(T, D), p + 'attn_output.weight')
        h = norm(x, p + 'ffn_norm.weight')
        g, u = lin(h, p + 'ffn_gate.weight'), lin(h, p + 'ffn_up.weight')
        x = x + lin(g / (1 + np.exp(-g)) * u, p + 'ffn_down.weight')
    return (act(norm(x, 'output_norm.weight')) @ lm.T).astype(np.float64)


def perplexity(cfg, w, ids, bos, mode, window=512):
    if mode != 'none':
        w = {k: q8_rows(v) if v.ndim == 2 and k != 'token_embd.weight' else v
             for k, v in w.items()}
    lm = q8_rows(w['token_embd.weight']) if mode != 'none' else w['token_embd.weight']
    act = q8_rows if mode == 'w8a8' else (lambda a: a)
    nll = []
    for i in range(0, len(ids), window - 1):
        toks = [bos] + ids[i:i + window - 1]
        z = forward(cfg, w, lm, toks, act)
        m = z.max(1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]
        nll += [lse[j] - z[j, toks[j + 1]] for j in range(len(toks) - 1)]
    return float(np.exp(np.mean(nll))), len(nll)


def main():
    if len(sys.argv) < 3:
        sys.exit('usage: lab/act_quant_ppl.py MODEL.gguf TEXT [none,w8,w8a8] [shardline-tok]')
    modes = (sys.argv[3] if len(sys.argv) > 3 else 'none,w8,w8a8').split(',')
    for m in modes:
        if m not in ('none', 'w8', 'w8a8'):
            sys.exit('act_quant_ppl: mode %r is not none, w8 or w8a8' % m)
    tok = sys.argv[4] if len(sys.argv) > 4 else 'build/bin/shardline-tok'
    cfg, w = load(sys.argv[1])
    ids, bos = tokens(tok, sys.argv[1], sys.argv[2])
    print('%s: %d text tokens, first token of a window %d' % (sys.argv[2], len(ids), bos))
    base = None
    for m in modes:
        ppl, n = perplexity(cfg, w, ids, bos, m)
        base = base or ppl
        print('%-5s ppl %8.4f %+7.3f%% vs %s (%d tokens scored)' % (m, ppl, 100 * (ppl / base - 1),
                                                                    modes[0], n), flush=True)


if __name__ == '__main__':
    main()
