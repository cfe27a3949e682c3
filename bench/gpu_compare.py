#!/usr/bin/env python3
"""tensorframe's GPU suite (tf-bench --gpu) beside PyTorch on the same
device, with the CUDA targets as ratios (> 1: tensorframe ahead).

usage: gpu_compare.py BUILD_DIR [--device cuda:0] [--scale S] [--out DIR] [--ops a,b]

--scale divides the extents (1 on a GPU; e.g. 16 to try it on the CPU with
--device cpu). PyTorch runs on the matching torch device.
"""
import argparse
import json
import os
import subprocess
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--device", default="cuda:0")
ap.add_argument("--scale", type=int, default=1)
ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"))
ap.add_argument("--ops", default=None, help="sections, as tf-bench --ops: add,matmul,gemm,rows,reduce,attention,overhead")
args = ap.parse_args()
SECTIONS = set(args.ops.split(",")) if args.ops else None


def wanted(section):
    return SECTIONS is None or section in SECTIONS
dev = torch.device(args.device)
S = args.scale


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def median_time(fn, min_time=0.5):
    fn()
    sync()
    ts, start = [], time.perf_counter()
    while len(ts) < 64 and (len(ts) < 5 or time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def torch_rows():
    rows = []

    def row(op, size, seconds, flops=0.0, nbytes=0.0):
        rows.append({"lib": "pytorch", "op": op, "size": size, "seconds": seconds,
                     "gflops": flops / seconds * 1e-9 if flops else 0, "gbs": nbytes / seconds * 1e-9 if nbytes else 0})

    with torch.no_grad():
        if wanted("add") or wanted("reduce"):
            n = (256 << 20) // (S * S)
            a, b = torch.rand(n, device=dev), torch.rand(n, device=dev)
            row("copy", f"{n >> 20}M f32", median_time(lambda: a.clone()), 0, 8.0 * n)
            row("add", f"{n >> 20}M f32", median_time(lambda: a + b), n, 12.0 * n)
            xr = a.view(-1, 4096)
            for name, fn in (("sum", torch.sum), ("max", torch.max), ("argmax", torch.argmax)):
                row(f"{name}_all", f"{n >> 20}M f32", median_time(lambda: fn(a)), 0, 4.0 * n)
                row(f"{name}_rows", f"[{xr.shape[0]},4096] f32", median_time(lambda: fn(xr, -1)), 0, 4.0 * n)
            del a, b, xr
        m = 8192 // S
        if wanted("matmul"):
            p, q = (torch.randn(m, m, device=dev).to(torch.bfloat16) for _ in range(2))
            row("matmul", f"{m}x{m}x{m} bf16", median_time(lambda: p @ q), 2.0 * m ** 3)
            del p, q
        if wanted("gemm"):
            p, q = torch.randn(m, m, device=dev), torch.randn(m, m, device=dev)
            size = f"{m}x{m}x{m} f32"
            if dev.type == "cuda":
                old = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = False
                row("matmul_f32", size, median_time(lambda: p @ q), 2.0 * m ** 3)
                torch.backends.cuda.matmul.allow_tf32 = True
                row("matmul_tf32", size, median_time(lambda: p @ q), 2.0 * m ** 3)
                torch.backends.cuda.matmul.allow_tf32 = old
            else:
                row("matmul_f32", size, median_time(lambda: p @ q), 2.0 * m ** 3)
            del p, q
            d = 4096 // S
            for t, name in ((8192 // S, "linear_bias"), (128, "linear_bias_128")):
                x, w, bias = (torch.randn(*sh, device=dev).to(torch.bfloat16) for sh in ((t, d), (d, d), (d,)))
                row(name, f"[{t},{d}]x[{d},{d}]^T+b bf16", median_time(lambda: F.linear(x, w, bias)), 2.0 * t * d * d)
                del x, w, bias
        for dt, suffix in ((torch.float32, ""), (torch.bfloat16, "_bf16")) if wanted("rows") else ():
            x = torch.randn(32768 // S, 4096, device=dev).to(dt)
            w, bias = torch.randn(4096, device=dev).to(dt), torch.randn(4096, device=dev).to(dt)
            nb = 2.0 * x.element_size() * x.numel()
            size = f"[{x.shape[0]},4096] {str(dt).split('.')[-1]}"
            rms = (lambda: F.rms_norm(x, (4096,), w, 1e-6)) if hasattr(F, "rms_norm") else \
                  (lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
            for name, fn in (("softmax", lambda: torch.softmax(x, -1)), ("log_softmax", lambda: torch.log_softmax(x, -1)),
                             ("rmsnorm", rms), ("layernorm", lambda: F.layer_norm(x, (4096,), w, bias, 1e-5))):
                row(name + suffix, size, median_time(fn), 0, nb)
            del x
        # The same cases as tf-bench's gpu_attention: 8 x 32 heads x 128.
        attention_cases = (("attention", torch.bfloat16, 4096, False), ("attention_f16", torch.float16, 4096, False),
                           ("attention_1k", torch.bfloat16, 1024, False), ("attention_16k", torch.bfloat16, 16384, False),
                           ("decode", torch.bfloat16, 4096, True), ("decode_f16", torch.float16, 4096, True),
                           ("decode_32k", torch.bfloat16, 32768, True))
        for name, dt, L, decode in attention_cases if wanted("attention") else ():
            L //= S
            if dev.type == "cpu" and dt == torch.float16 and not hasattr(F, "scaled_dot_product_attention"):
                continue                                           # 1.13 has no f16 matmul on the CPU
            k, v = (torch.randn(8, 32, L, 128, device=dev).to(dt) for _ in range(2))
            q = torch.randn(8, 32, 1 if decode else L, 128, device=dev).to(dt)
            if hasattr(F, "scaled_dot_product_attention"):       # PyTorch 2.0 and later (the GPU machine)
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=not decode)
            else:                                                  # 1.13 (Debian here): matmul - softmax - matmul
                mask = 0 if decode else torch.full((L, L), float("-inf"), device=dev).triu(1).to(dt)
                fn = lambda: torch.softmax(q @ k.transpose(-1, -2) / 128 ** 0.5 + mask, -1) @ v
            dn = str(dt).split('.')[-1]
            if decode:
                row(name, f"8x32x1x{L}x128 {dn}", median_time(fn), 0, 2.0 * 2 * 8 * 32 * L * 128)
            else:
                row(name, f"8x32x{L}x128 {dn} causal", median_time(fn), 2.0 * 2.0 * 8 * 32 * L * L * 128 / 2)
            del q, k, v
        if not wanted("overhead"):
            return rows
        a4, b4 = torch.ones(4, device=dev), torch.ones(4, device=dev)
        issue = []                                                 # host cost: batches of 256, each waited for untimed
        for batch in range(68):
            t0 = time.perf_counter()
            for _ in range(256):
                a4 + b4
            t = (time.perf_counter() - t0) / 256
            sync()
            if batch >= 4:
                issue.append(t)
        row("overhead", "add [4] f32", sorted(issue)[len(issue) // 2])
        t0 = time.perf_counter()                                   # sustained: 20000 back to back, one wait
        for _ in range(20000):
            a4 + b4
        sync()
        row("overhead_sustained", "add [4] f32", (time.perf_counter() - t0) / 20000)
    return rows


def find(rows, lib, op):
    return next((r for r in rows if r["lib"] == lib and r["op"] == op), None)


subprocess.run([os.path.join(args.build, "bin", "tf-bench"), "--gpu", "--device", args.device, "--scale", str(S),
                "--json", "/tmp/tf-bench-gpu.jsonl"] + (["--ops", args.ops] if args.ops else []), check=True)
with open("/tmp/tf-bench-gpu.jsonl") as f:
    ours = [json.loads(line) for line in f if line.strip()]
rows = ours + torch_rows()
name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "perf_gpu.json"), "w") as f:
    json.dump({"device": name, "torch": torch.__version__, "scale": S, "rows": rows}, f, indent=1)

# (label, ours, theirs, metric, goal): ratio = ours/theirs for rates, theirs/ours for seconds.
# The goals are issue 11's: >= 1 means at least PyTorch's speed.
targets = [("add 256M f32 vs PyTorch's copy rate", ("tensorframe", "add"), ("pytorch", "copy"), "gbs", 0.90),
           ("add 256M f32 vs torch.add", ("tensorframe", "add"), ("pytorch", "add"), "seconds", 1.0),
           ("bf16 GEMM 8192^3 vs torch.matmul", ("tensorframe", "matmul"), ("pytorch", "matmul"), "seconds", 0.95),
           ("f32 GEMM 8192^3 vs torch.matmul", ("tensorframe", "matmul_f32"), ("pytorch", "matmul_f32"), "seconds", 0.95),
           ("f32 GEMM, TF32 on, vs torch (allow_tf32)", ("tensorframe", "matmul_tf32"), ("pytorch", "matmul_tf32"),
            "seconds", 0.95),
           ("linear+bias [8192,4096] bf16 vs F.linear", ("tensorframe", "linear_bias"), ("pytorch", "linear_bias"),
            "seconds", 0.95),
           ("linear+bias [128,4096] bf16 vs F.linear", ("tensorframe", "linear_bias_128"),
            ("pytorch", "linear_bias_128"), "seconds", 0.95)]
for op in ("softmax", "log_softmax", "rmsnorm", "layernorm"):
    for suffix in ("", "_bf16"):
        targets.append((f"{op}{suffix} [32768,4096] vs PyTorch", ("tensorframe", op + suffix), ("pytorch", op + suffix),
                        "seconds", 1.2))
for op in ("sum", "max", "argmax"):
    for where in ("all", "rows"):
        targets.append((f"{op}_{where} 256M f32 vs PyTorch", ("tensorframe", f"{op}_{where}"),
                        ("pytorch", f"{op}_{where}"), "seconds", 1.0))
        targets.append((f"{op}_{where} read rate vs PyTorch's copy rate", ("tensorframe", f"{op}_{where}"),
                        ("pytorch", "copy"), "gbs", 0.85))
for suffix in ("", "_f16", "_1k", "_16k"):
    targets.append((f"causal attention{suffix} vs torch SDPA", ("tensorframe", "attention" + suffix),
                    ("pytorch", "attention" + suffix), "seconds", 1.0))
for suffix in ("", "_f16", "_32k"):
    targets.append((f"decode attention{suffix} vs torch SDPA", ("tensorframe", "decode" + suffix),
                    ("pytorch", "decode" + suffix), "seconds", 1.0))
targets.append(("add [4] host cost vs torch.add", ("tensorframe", "overhead"), ("pytorch", "overhead"), "seconds", 1.0))
targets.append(("add [4] sustained vs torch.add", ("tensorframe", "overhead_sustained"),
                ("pytorch", "overhead_sustained"), "seconds", 1.0))
print(f"\n{name}, scale 1/{S}\n{'target':44s} {'ratio':>7s} {'goal':>6s}")
for label, o, t, metric, goal in targets:
    a, b = find(rows, *o), find(rows, *t)
    if not a or not b:
        if SECTIONS is None:
            print(f"{label:44s}  (missing)")
        continue
    r = a[metric] / b[metric] if metric != "seconds" else b["seconds"] / a["seconds"]
    print(f"{label:44s} {r:7.2f} {goal:6.2f}  {'met' if r >= goal else 'NOT MET'}")
over = find(rows, "tensorframe", "overhead")
if over:
    us = over["seconds"] * 1e6
    print(f"{'add [4] host cost (us), goal <= 5':44s} {us:7.2f} {5.0:6.2f}  {'met' if us <= 5 else 'NOT MET'}")
sus = find(rows, "tensorframe", "overhead_sustained")
if sus:
    print(f"{'add [4] sustained (us a call)':44s} {sus['seconds'] * 1e6:7.2f}")
