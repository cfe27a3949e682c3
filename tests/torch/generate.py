"""Write inputs and PyTorch's outputs (float64) for ops tensorframe must
match, as .npy files plus a manifest read by torch_compare.c.

usage: generate.py DIR [SEED]
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

out_dir = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else int.from_bytes(os.urandom(4), "little")
rng = np.random.default_rng(seed)
torch.set_default_dtype(torch.float64)
manifest = []


def arr(*shape, lo=-2.0, hi=2.0):
    """Random float32 data; the reference sees exactly the same values."""
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def case(name, op, inputs, outputs, **params):
    for i, a in enumerate(inputs):
        np.save(os.path.join(out_dir, f"{name}.in{i}.npy"), a)
    for i, a in enumerate(outputs):
        np.save(os.path.join(out_dir, f"{name}.out{i}.npy"), np.asarray(a, dtype=np.float64))
    kv = " ".join(f"{k}={v}" for k, v in params.items())
    manifest.append(f"{name} {op} {len(inputs)} {len(outputs)} {kv}".rstrip())


def t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


# gelu, both forms
x = arr(7, 33, lo=-5, hi=5)
case("gelu_erf", "gelu", [x], [F.gelu(t(x), approximate="none").numpy()], tanh=0)
case("gelu_tanh", "gelu", [x], [F.gelu(t(x), approximate="tanh").numpy()], tanh=1)

# layernorm and rmsnorm over the last axis, with weights
x, w, b = arr(4, 6, 32), arr(32), arr(32)
case("layernorm", "layernorm", [x, w, b], [F.layer_norm(t(x), (32,), t(w), t(b), eps=1e-5).numpy()], eps=1e-5)
rms = t(x) * torch.rsqrt(t(x).pow(2).mean(-1, keepdim=True) + 1e-6) * t(w)
case("rmsnorm", "rmsnorm", [x, w], [rms.numpy()], eps=1e-6)


# rope: both layouts, partial rotary dims; x [batch, seq, heads, dim]
def rope_ref(xt, pos, rot, theta, neox):
    half = rot // 2
    inv = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / rot)
    ang = pos[:, None] * inv[None, :]                 # [seq, half]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    xr, rest = xt[..., :rot], xt[..., rot:]
    if neox:
        x1, x2 = xr[..., :half], xr[..., half:]
        rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)
    else:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)
    return torch.cat([rotated, rest], -1)


x = arr(2, 5, 3, 16)
pos = rng.integers(0, 40, size=5).astype(np.int64)
for neox in (0, 1):
    ref = rope_ref(t(x), torch.from_numpy(pos).double(), 12, 10000.0, neox)
    case(f"rope_{'neox' if neox else 'gptj'}", "rope", [x, pos], [ref.numpy()], rot=12, theta=10000.0, neox=neox)


# attention: causal, GQA (8 query heads over 2 kv heads), a KV cache offset
def attention_ref(q, k, v, causal, q_offset):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        lq, lk = q.shape[2], k.shape[2]
        allowed = torch.arange(lk)[None, :] <= (q_offset + torch.arange(lq))[:, None]
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v


q, k, v = arr(2, 8, 6, 16), arr(2, 2, 10, 16), arr(2, 2, 10, 16)
case("attention_gqa_causal", "sdpa", [q, k, v], [attention_ref(t(q), t(k), t(v), True, 4).numpy()], causal=1, q_offset=4)
case("attention_gqa", "sdpa", [q, k, v], [attention_ref(t(q), t(k), t(v), False, 0).numpy()], causal=0, q_offset=-1)

# conv2d with groups and dilation
x, w, b = arr(2, 6, 11, 9), arr(4, 3, 3, 2), arr(4)
ref = F.conv2d(t(x), t(w), t(b), stride=(2, 1), padding=(1, 2), dilation=(2, 3), groups=2)
case("conv2d", "conv2d", [x, w, b], [ref.numpy()], sh=2, sw=1, ph=1, pw=2, dh=2, dw=3, groups=2)

# batch_norm in training mode: the output and the updated running stats
x, w, b = arr(5, 3, 4, 4), arr(3), arr(3)
rm, rv = arr(3), arr(3, lo=0.5, hi=2.0)
rm_t, rv_t = t(rm).clone(), t(rv).clone()
y = F.batch_norm(t(x), rm_t, rv_t, t(w), t(b), training=True, momentum=0.2, eps=1e-5)
case("batch_norm", "batch_norm", [x, rm, rv, w, b], [y.numpy(), rm_t.numpy(), rv_t.numpy()], momentum=0.2, eps=1e-5)

# cross entropy over logits with class indices, one ignored
logits = arr(9, 7, lo=-4, hi=4)
target = rng.integers(0, 7, size=9).astype(np.int64)
target[3] = -100
ref = F.cross_entropy(t(logits), torch.from_numpy(target), ignore_index=-100, reduction="mean")
case("cross_entropy", "cross_entropy", [logits, target], [ref.numpy()], ignore=-100)

# var with correction (unbiased and population)
x = arr(6, 40)
for corr in (0, 1):
    case(f"var_c{corr}", "var", [x], [torch.var(t(x), 1, unbiased=bool(corr)).numpy()], axis=1, correction=corr)

# AdamW after several steps, with fixed gradients per step
p0 = arr(5, 8)
grads = [arr(5, 8) for _ in range(4)]
p = torch.nn.Parameter(t(p0).clone())
opt = torch.optim.AdamW([p], lr=0.05, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
for g in grads:
    p.grad = t(g).clone()
    opt.step()
case("adamw", "adamw", [p0] + grads, [p.detach().numpy()], lr=0.05, beta1=0.9, beta2=0.99, eps=1e-8, wd=0.1, steps=4)

with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
    f.write("\n".join(manifest) + "\n")
print(f"torch {torch.__version__}: {len(manifest)} cases written to {out_dir} (seed {seed})")
