#!/usr/bin/env python3
"""Run tf-bench, the peers (OpenBLAS, STREAM-style loops) and PyTorch in one
run on the same machine and thread count; print the ratios the CPU targets
are stated in; write the results as JSON and a PNG plot.

usage: compare.py BUILD_DIR [--threads N] [--quick] [--out DIR]
(needs Debian's python3-torch and python3-matplotlib for /usr/bin/python3)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"))
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
min_time = 0.05 if args.quick else 0.5


def run_jsonl(cmd, path):
    subprocess.run(cmd, check=True)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


bin_dir = os.path.join(args.build, "bin")
common = ["--threads", str(args.threads)] + (["--quick"] if args.quick else [])
ours = run_jsonl([os.path.join(bin_dir, "tf-bench"), "--json", "/tmp/tf-bench.jsonl"] + common, "/tmp/tf-bench.jsonl")
peers = run_jsonl([os.path.join(bin_dir, "peers"), "--json", "/tmp/peers.jsonl"] + common, "/tmp/peers.jsonl")

# ---- PyTorch, same thread count, timed the same way (median) ----
import torch
import torch.nn.functional as F

torch.set_num_threads(args.threads)


def median(fn):
    fn()
    ts, start = [], time.perf_counter()
    while len(ts) < 64 and (len(ts) < 5 or time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


torch_rows = []


def torch_row(op, size, seconds, flops=0.0, nbytes=0.0):
    torch_rows.append({"lib": "pytorch", "op": op, "size": size, "seconds": seconds,
                       "gflops": flops / seconds * 1e-9 if flops else 0, "gbs": nbytes / seconds * 1e-9 if nbytes else 0})


with torch.no_grad():
    a4, b4 = torch.ones(4), torch.ones(4)
    reps = 20000 if args.quick else 200000
    torch.add(a4, b4)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.add(a4, b4)
    torch_row("overhead", "add [4] f32", (time.perf_counter() - t0) / reps)
    n = 16 << 20
    a, b = torch.rand(n), torch.rand(n)
    torch_row("add", "16M f32", median(lambda: torch.add(a, b)), n, 12.0 * n)
    torch_row("mul", "16M f32", median(lambda: torch.mul(a, b)), n, 12.0 * n)
    torch_row("sum", "16M f32", median(lambda: torch.sum(a)), n, 4.0 * n)
    x, w, bias = torch.randn(4096, 4096), torch.randn(4096), torch.randn(4096)
    nb = 8.0 * x.numel()
    torch_row("softmax", "[4096,4096] f32", median(lambda: torch.softmax(x, -1)), 0, nb)
    torch_row("rmsnorm", "[4096,4096] f32",
              median(lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w), 0, nb)
    torch_row("layernorm", "[4096,4096] f32", median(lambda: F.layer_norm(x, (4096,), w, bias, 1e-5)), 0, nb)
    for m in (256, 512, 1024, 2048, 4096):
        if args.quick and m > 1024:
            break
        p, q = torch.randn(m, m), torch.randn(m, m)
        torch_row("matmul", f"{m}x{m}x{m} f32", median(lambda: torch.matmul(p, q)), 2.0 * m ** 3)
    L = 512 if args.quick else 2048
    q, k, v = (torch.randn(1, 32, L, 128) for _ in range(3))
    mask = torch.full((L, L), float("-inf")).triu(1)

    def attention():
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(128) + mask
        return torch.matmul(torch.softmax(s, -1), v)

    torch_row("attention", f"32h x {L} x 128 causal", median(attention), 2.0 * 2.0 * 32 * L * L * 128 / 2)

rows = ours + peers + torch_rows
with open(os.path.join(args.out, "perf.json"), "w") as f:
    json.dump({"threads": args.threads, "torch": torch.__version__, "rows": rows}, f, indent=1)


def find(lib, op, size):
    for r in rows:
        if r["lib"] == lib and r["op"] == op and r["size"] == size:
            return r
    return None


# ---- the targets, as ratios measured in this run ----
checks = []


def ratio(label, op, size, peer_lib, peer_op, metric, target, higher_is_better=True, peer_size=None):
    o, p = find("tensorframe", op, size), find(peer_lib, peer_op, peer_size or size)
    if not o or not p:
        return
    if metric == "seconds":                      # time: peer / ours
        r = p["seconds"] / o["seconds"]
    else:
        r = o[metric] / p[metric]
    checks.append((label, r, target))


ratio("add 16M vs STREAM add", "add", "16M f32", "stream", "add", "gbs", 0.9)
ratio("add 16M vs PyTorch", "add", "16M f32", "pytorch", "add", "seconds", 1.5)
ratio("mul 16M vs STREAM add", "mul", "16M f32", "stream", "add", "gbs", 0.9)
ratio("mul 16M vs PyTorch", "mul", "16M f32", "pytorch", "mul", "seconds", 1.5)
ratio("sum 16M vs STREAM read", "sum", "16M f32", "stream", "read", "gbs", 0.9)
ratio("softmax vs PyTorch", "softmax", "[4096,4096] f32", "pytorch", "softmax", "seconds", 3.0)
ratio("rmsnorm vs PyTorch", "rmsnorm", "[4096,4096] f32", "pytorch", "rmsnorm", "seconds", 2.0)
ratio("layernorm vs PyTorch", "layernorm", "[4096,4096] f32", "pytorch", "layernorm", "seconds", 2.0)
for m in (256, 512, 1024, 2048, 4096):
    ratio(f"sgemm {m} vs OpenBLAS", "matmul", f"{m}x{m}x{m} f32", "openblas", "matmul", "gflops", 0.95)
L = 512 if args.quick else 2048
ratio("attention vs PyTorch", "attention", f"32h x {L} x 128 causal", "pytorch", "attention", "seconds", 1.5)
ratio("4-element add overhead vs PyTorch", "overhead", "add [4] f32", "pytorch", "overhead", "seconds", 5.0)

print(f"\n{'target':40s} {'ratio':>8s} {'goal':>6s}")
for label, r, target in checks:
    print(f"{label:40s} {r:8.2f} {target:6.2f}  {'met' if r >= target else 'NOT MET'}")
o = find("tensorframe", "overhead", "add [4] f32")
if o:
    print(f"{'4-element add: seconds per op':40s} {o['seconds'] * 1e6:7.2f}us  (goal < 1us)")

# ---- plot ----
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [c[0] for c in checks]
    ax.barh(labels, [c[1] for c in checks], color=["tab:green" if c[1] >= c[2] else "tab:red" for c in checks])
    ax.scatter([c[2] for c in checks], labels, marker="|", s=300, color="black", label="target")
    ax.set_xlabel("tensorframe / peer (higher is better)")
    ax.set_title(f"tensorframe CPU vs peers, {args.threads} threads, one run")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "perf.png"), dpi=110)
    print(f"plot: {os.path.join(args.out, 'perf.png')}")
except ImportError:
    print("matplotlib not available: no plot")
