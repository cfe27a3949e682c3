#!/usr/bin/python3
"""SmolLM2's logits in float64 with NumPy, from the weights as the `gguf`
package (llama.cpp's own reader) decodes them: an exact reference for the
llama forward pass, independent of tensorframe and of llama.cpp's kernels.
Reads llama.cpp's fixture (logits.txt: the prompt's ids and its greedy
tokens), feeds the same tokens, and prints the top logits of the prompt's
last position and of each step in the same format.
usage: reference.py GGUF_PACKAGE_DIR MODEL LLAMA_LOGITS_TXT > reference64.txt"""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

r = GGUFReader(sys.argv[2])
field = lambda k: r.fields[k].contents()
W = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
     for t in r.tensors}
L, E = field("llama.block_count"), field("llama.embedding_length")
H, HKV = field("llama.attention.head_count"), field("llama.attention.head_count_kv")
D, base, eps = E // H, field("llama.rope.freq_base"), field("llama.attention.layer_norm_rms_epsilon")
emb = W["token_embd.weight"]
out_w = W.get("output.weight", emb)


def rmsnorm(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos):          # x [n, heads, D]; adjacent pairs (llama.cpp's "norm" mode)
    inv = base ** (-np.arange(0, D, 2) / D)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    return y


cache = [[None, None] for _ in range(L)]


def forward(ids, start):
    x = emb[ids]
    pos = np.arange(start, start + len(ids), dtype=np.float64)
    for l in range(L):
        p = f"blk.{l}."
        h = rmsnorm(x, W[p + "attn_norm.weight"])
        q = rope((h @ W[p + "attn_q.weight"].T).reshape(len(ids), H, D), pos)
        k = rope((h @ W[p + "attn_k.weight"].T).reshape(len(ids), HKV, D), pos)
        v = (h @ W[p + "attn_v.weight"].T).reshape(len(ids), HKV, D)
        kc, vc = cache[l]
        kc = k if kc is None else np.concatenate([kc, k])
        vc = v if vc is None else np.concatenate([vc, v])
        cache[l] = [kc, vc]
        o = np.empty((len(ids), H, D))
        for hh in range(H):
            g = hh // (H // HKV)
            sc = q[:, hh, :] @ kc[:, g, :].T / np.sqrt(D)
            sc[np.arange(start, start + len(ids))[:, None] < np.arange(len(kc))[None, :]] = -np.inf
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, hh, :] = (sc / sc.sum(-1, keepdims=True)) @ vc[:, g, :]
        x = x + o.reshape(len(ids), E) @ W[p + "attn_output.weight"].T
        h = rmsnorm(x, W[p + "ffn_norm.weight"])
        gt, up = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ W[p + "ffn_down.weight"].T
    return rmsnorm(x[-1], W["output_norm.weight"]) @ out_w.T


lines = open(sys.argv[3]).read().splitlines()
ids = [int(t) for t in lines[0].split()[2:]]
fed = [int(line.split()[2]) for line in lines[1:]]
n = len(ids)
print(lines[0])
logits = forward(np.array(ids), 0)
for step in range(len(fed)):
    m = logits.max()
    lse = m + np.log(np.exp(logits - m).sum())
    top = np.argsort(-logits)[:40]
    print(f"step {step} {int(top[0])} {lse:.9g} 40 " + " ".join(f"{i}:{logits[i]:.9g}" for i in top))
    if step + 1 < len(fed):
        logits = forward(np.array([fed[step]]), n + step)
