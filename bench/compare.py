#!/usr/bin/env python3
"""Run tf-bench, the peers (OpenBLAS, STREAM-style loops) and PyTorch on the
same machine and thread count, in paired rounds; print the ratios the CPU
targets are stated in; write the rounds as JSON and the ratios as a PNG.

usage: compare.py BUILD_DIR [--threads N] [--rounds R] [--quick] [--out DIR]
(needs Debian's python3-torch and python3-matplotlib for /usr/bin/python3)

Memory bandwidth on a shared machine drifts by tens of percent from one
moment to the next, so times taken at different moments are not compared:
each round runs tensorframe, the peers and PyTorch back to back and yields
its own ratios; the median round is reported with the range.
"""
import argparse
import json
import math
import os
import subprocess
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"))
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
min_time = 0.05 if args.quick else 0.5
bin_dir = os.path.join(args.build, "bin")
common = ["--threads", str(args.threads)] + (["--quick"] if args.quick else [])
torch.set_num_threads(args.threads)
L = 512 if args.quick else 2048
SIZES = (256, 512, 1024) if args.quick else (256, 512, 1024, 2048, 4096)


def run_jsonl(cmd, path):
    subprocess.run(cmd, check=True)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def median_time(fn):
    fn()
    ts, start = [], time.perf_counter()
    while len(ts) < 64 and (len(ts) < 5 or time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def torch_bench():
    """PyTorch on the same work, timed like tf-bench (median)."""
    rows = []

    def row(op, size, seconds, flops=0.0, nbytes=0.0):
        rows.append({"lib": "pytorch", "op": op, "size": size, "seconds": seconds,
                     "gflops": flops / seconds * 1e-9 if flops else 0, "gbs": nbytes / seconds * 1e-9 if nbytes else 0})

    with torch.no_grad():
        a4, b4 = torch.ones(4), torch.ones(4)
        reps = 20000 if args.quick else 200000
        torch.add(a4, b4)
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.add(a4, b4)
        row("overhead", "add [4] f32", (time.perf_counter() - t0) / reps)
        n = 16 << 20
        a, b = torch.rand(n), torch.rand(n)
        row("add", "16M f32", median_time(lambda: torch.add(a, b)), n, 12.0 * n)
        row("mul", "16M f32", median_time(lambda: torch.mul(a, b)), n, 12.0 * n)
        row("sum", "16M f32", median_time(lambda: torch.sum(a)), n, 4.0 * n)
        x, w, bias = torch.randn(4096, 4096), torch.randn(4096), torch.randn(4096)
        nb = 8.0 * x.numel()
        row("softmax", "[4096,4096] f32", median_time(lambda: torch.softmax(x, -1)), 0, nb)
        row("rmsnorm", "[4096,4096] f32",
            median_time(lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w), 0, nb)
        row("layernorm", "[4096,4096] f32", median_time(lambda: F.layer_norm(x, (4096,), w, bias, 1e-5)), 0, nb)
        for m in SIZES:
            p, q = torch.randn(m, m), torch.randn(m, m)
            row("matmul", f"{m}x{m}x{m} f32", median_time(lambda: torch.matmul(p, q)), 2.0 * m ** 3)
        for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float32, "f32")):   # decode: x @ W^T
            x, w = torch.randn(1, 4096).to(dt), torch.randn(4096, 4096).to(dt)
            try:
                row("matmul", f"1x4096x4096 {name} W^T", median_time(lambda: torch.matmul(x, w.t())), 2.0 * 4096 ** 2)
            except RuntimeError:                 # PyTorch builds without a CPU kernel for this dtype
                pass
        q, k, v = (torch.randn(1, 32, L, 128) for _ in range(3))
        mask = torch.full((L, L), float("-inf")).triu(1)

        def attention():                         # matmul - softmax - matmul, PyTorch 1.13 has no SDPA
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(128) + mask
            return torch.matmul(torch.softmax(s, -1), v)

        row("attention", f"32h x {L} x 128 causal", median_time(attention), 2.0 * 2.0 * 32 * L * L * 128 / 2)
    return rows


# (label, our op, size, peer lib, peer op, metric, target); a ratio > 1 means tensorframe is ahead
TARGETS = [
    ("add 16M vs STREAM add", "add", "16M f32", "stream", "add", "gbs", 0.9),
    ("add 16M vs PyTorch", "add", "16M f32", "pytorch", "add", "seconds", 1.5),
    ("mul 16M vs STREAM add", "mul", "16M f32", "stream", "add", "gbs", 0.9),
    ("mul 16M vs PyTorch", "mul", "16M f32", "pytorch", "mul", "seconds", 1.5),
    ("sum 16M vs STREAM read", "sum", "16M f32", "stream", "read", "gbs", 0.9),
    ("softmax vs PyTorch", "softmax", "[4096,4096] f32", "pytorch", "softmax", "seconds", 3.0),
    ("rmsnorm vs PyTorch", "rmsnorm", "[4096,4096] f32", "pytorch", "rmsnorm", "seconds", 2.0),
    ("layernorm vs PyTorch", "layernorm", "[4096,4096] f32", "pytorch", "layernorm", "seconds", 2.0),
] + [(f"sgemm {m} vs OpenBLAS", "matmul", f"{m}x{m}x{m} f32", "openblas", "matmul", "gflops", 0.95) for m in SIZES] + [
    ("attention vs PyTorch", "attention", f"32h x {L} x 128 causal", "pytorch", "attention", "seconds", 1.5),
    ("4-element add overhead vs PyTorch", "overhead", "add [4] f32", "pytorch", "overhead", "seconds", 5.0),
] + [(f"sgemm {s} vs OpenBLAS", "matmul", f"{s} f32", "openblas", "matmul", "seconds", 0.0)   # no target: reported
     for s in ("1x4096x4096", "4096x4096x1", "8x8x8")] + [
    (f"{d} x @ W^T 1x4096x4096 vs PyTorch", "matmul", f"1x4096x4096 {d} W^T", "pytorch", "matmul", "seconds", 0.0)
    for d in ("bf16", "f16", "f32")]


def find(rows, lib, op, size):
    return next((r for r in rows if r["lib"] == lib and r["op"] == op and r["size"] == size), None)


def round_ratios(rows):
    out = {}
    for label, op, size, plib, pop, metric, _ in TARGETS:
        o, p = find(rows, "tensorframe", op, size), find(rows, plib, pop, size)
        if o and p:
            out[label] = p["seconds"] / o["seconds"] if metric == "seconds" else o[metric] / p[metric]
    return out


rounds = []
for _ in range(args.rounds):
    rows = run_jsonl([os.path.join(bin_dir, "tf-bench"), "--json", "/tmp/tf-bench.jsonl"] + common, "/tmp/tf-bench.jsonl")
    rows += run_jsonl([os.path.join(bin_dir, "peers"), "--json", "/tmp/peers.jsonl"] + common, "/tmp/peers.jsonl")
    rows += torch_bench()
    rounds.append({"rows": rows, "ratios": round_ratios(rows)})

with open(os.path.join(args.out, "perf.json"), "w") as f:
    json.dump({"threads": args.threads, "torch": torch.__version__, "rounds": rounds}, f, indent=1)

checks = []
print(f"\n{'target':40s} {'median':>7s} {'range':>13s} {'goal':>6s}")
for label, _, _, _, _, _, target in TARGETS:
    values = sorted(r["ratios"][label] for r in rounds if label in r["ratios"])
    if not values:
        continue
    med = values[len(values) // 2]
    checks.append((label, med, target, values[0], values[-1]))
    verdict = "(no target)" if target == 0 else "met" if med >= target else "NOT MET"
    print(f"{label:40s} {med:7.2f} {values[0]:6.2f}-{values[-1]:<6.2f} {target:6.2f}  {verdict}")
per_op = sorted(find(r["rows"], "tensorframe", "overhead", "add [4] f32")["seconds"] for r in rounds)
print(f"{'4-element add: seconds per op':40s} {per_op[len(per_op) // 2] * 1e6:7.2f}us (goal < 1us)")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5))
    labels = [c[0] for c in checks]
    ax.barh(labels, [c[1] for c in checks], color=["tab:blue" if c[2] == 0 else "tab:green" if c[1] >= c[2] else "tab:red" for c in checks],
            xerr=[[c[1] - c[3] for c in checks], [c[4] - c[1] for c in checks]], capsize=3)
    targeted = [c for c in checks if c[2] > 0]
    ax.scatter([c[2] for c in targeted], [c[0] for c in targeted], marker="|", s=300, color="black", label="target", zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("tensorframe / peer: median of paired rounds, bars show the range (higher is better)")
    ax.set_title(f"tensorframe CPU vs peers, {args.threads} threads, {args.rounds} rounds")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "perf.png"), dpi=110)
    print(f"plot: {os.path.normpath(os.path.join(args.out, 'perf.png'))}")
except ImportError:
    print("matplotlib not available: no plot")
