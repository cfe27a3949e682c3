#!/usr/bin/env python3
"""Training step time and peak memory: tensorframe against PyTorch on the
CPU, the same models, the same thread count, in alternating rounds.

  gpt     examples/train_gpt (C: forward, backward, clip, AdamW) against the
          same model written for PyTorch (Python): byte embeddings tied to
          the output, 2 blocks of RMSNorm, causal attention with rotary
          positions (4 heads of 16), a GELU MLP 64-256-64; 16 windows of 64
          bytes of docs/ARCHITECTURE.md a step.
  digits  the CNN of python/tests/test_training.py (conv 1-16-32, ReLU,
          max-pool, linear 128-10; SGD with momentum, batches of 64 digits)
          from Python in both libraries.

Each side runs alone in a child process (--worker): ms a step over --steps
steps after 3 warm-up steps, its resident memory before the first step
and its peak. A round runs tensorframe then PyTorch (the order alternating
between rounds); the median round's ratio is reported with the range.

usage: train_compare.py BUILD [--threads N] [--rounds R] [--steps S]
                        [--torch-python PY]...
--torch-python: a Python whose torch is the peer (default: this one); give
it more than once to compare against several (Debian's 1.13, the newest
from PyPI in a venv). Run it from Debian's /usr/bin/python3 (numpy, torch).
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TEXT = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
VOCAB, DIM, HEADS, FF, LAYERS, CTX, BATCH = 256, 64, 4, 256, 2, 64, 16
DIGITS_BATCH = 64


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(step, steps):
    before = rss_mb()                             # the model made, nothing run
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return {"ms": (time.perf_counter() - t0) * 1e3 / steps, "rss_before_mb": before, "peak_mb": peak_mb()}


# ---- the GPT in PyTorch (examples/train_gpt's model) ----

def torch_gpt_step(torch, threads):
    torch.set_num_threads(threads)
    nn, F = torch.nn, torch.nn.functional
    torch.manual_seed(0)
    data = torch.tensor(list(open(TEXT, "rb").read()), dtype=torch.long)
    hd = DIM // HEADS
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.arange(CTX).float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    causal = torch.full((CTX, CTX), float("-inf")).triu(1)

    def rope(x):                                  # half-split (NeoX) pairs, as TF_ROPE_HALF_SPLIT
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-b, a], -1) * sin

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def attend(q, k, v):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = q @ k.transpose(-1, -2) / hd ** 0.5 + causal
        return s.softmax(-1) @ v

    def p(*shape, std=0.02):
        return nn.Parameter(torch.randn(*shape) * std)

    params = {"embed": p(VOCAB, DIM), "norm_f": nn.Parameter(torch.ones(DIM))}
    for layer in range(LAYERS):
        params.update({"n1%d" % layer: nn.Parameter(torch.ones(DIM)), "qkv%d" % layer: p(3 * DIM, DIM),
                       "o%d" % layer: p(DIM, DIM), "n2%d" % layer: nn.Parameter(torch.ones(DIM)),
                       "w1%d" % layer: p(FF, DIM), "w2%d" % layer: p(DIM, FF)})
    opt = torch.optim.AdamW(params.values(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)
    cut = len(data) * 9 // 10

    def step():
        offs = torch.randint(0, cut - CTX - 1, (BATCH,), generator=gen)
        idx = offs[:, None] + torch.arange(CTX)
        ids, tgt = data[idx], data[idx + 1]
        x = F.embedding(ids, params["embed"])
        for layer in range(LAYERS):
            h = rms(x, params["n1%d" % layer])
            q, k, v = F.linear(h, params["qkv%d" % layer]).split(DIM, -1)
            q, k, v = (t.view(BATCH, CTX, HEADS, hd).transpose(1, 2) for t in (q, k, v))
            a = attend(rope(q), rope(k), v).transpose(1, 2).reshape(BATCH, CTX, DIM)
            x = x + F.linear(a, params["o%d" % layer])
            h = rms(x, params["n2%d" % layer])
            x = x + F.linear(F.gelu(F.linear(h, params["w1%d" % layer])), params["w2%d" % layer])
        logits = F.linear(rms(x, params["norm_f"]), params["embed"])
        loss = F.cross_entropy(logits.view(-1, VOCAB), tgt.view(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
    return step


# ---- the digits CNN in both libraries ----

def digits_batches(np, path):
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    x = (table[:, :64] / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = table[:, 64].astype(np.int64)
    return x, y


def torch_digits_step(torch, threads, path):
    import numpy as np
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = digits_batches(np, path)
    state = {"i": 0}

    def step():
        rows = np.arange(state["i"], state["i"] + DIGITS_BATCH) % len(y)
        state["i"] += DIGITS_BATCH
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x[rows])), torch.from_numpy(y[rows]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def tf_digits_step(path):
    import numpy as np
    import tensorframe as tf
    rng = np.random.default_rng(0)
    shapes = [(16, 1, 3, 3), (16,), (32, 16, 3, 3), (32,), (10, 128), (10,)]
    params = []
    for s in shapes:
        fan_in = int(np.prod(s[1:])) if len(s) > 1 else 16
        t = tf.asarray(rng.uniform(-1, 1, s).astype(np.float32) / np.sqrt(fan_in))
        t.requires_grad = True
        params.append(t)
    opt = tf.optim.SGD(params, lr=0.05, momentum=0.9)
    x, y = digits_batches(np, path)
    state = {"i": 0}

    def forward(xb):
        w1, b1, w2, b2, w3, b3 = params
        h = tf.max_pool2d(tf.relu(tf.conv2d(xb, w1, b1, padding=1)), 2)
        h = tf.max_pool2d(tf.relu(tf.conv2d(h, w2, b2, padding=1)), 2)
        return tf.linear(tf.reshape(h, (xb.shape[0], 128)), w3, b3)

    def step():
        rows = np.arange(state["i"], state["i"] + DIGITS_BATCH) % len(y)
        state["i"] += DIGITS_BATCH
        loss = tf.cross_entropy(forward(tf.asarray(x[rows])), tf.asarray(y[rows]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def worker(args):
    if args.worker == "torch-gpt":
        import torch
        result = timed(torch_gpt_step(torch, args.threads), args.steps)
        result["version"] = torch.__version__
    elif args.worker == "torch-digits":
        import torch
        result = timed(torch_digits_step(torch, args.threads, args.digits), args.steps)
        result["version"] = torch.__version__
    else:
        result = timed(tf_digits_step(args.digits), args.steps)
    print(json.dumps(result))


# ---- the harness ----

def run_child(cmd, env=None):
    """A child's JSON (or train_gpt's line) and its peak resident memory."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    out, err = proc.communicate()
    if proc.returncode:
        sys.exit("train_compare: %s failed:\n%s" % (" ".join(cmd), err))
    return out


def ours_gpt(args):
    env = dict(os.environ, TF_NUM_THREADS=str(args.threads))
    out = run_child([os.path.join(args.build, "bin", "train_gpt"), "--text", TEXT, "--bench", str(args.steps)], env)
    fields = dict(f.split("=") for f in out.split("train_gpt-bench:")[1].split())
    return {"ms": float(fields["ms"]), "rss_before_mb": float(fields["rss_before_mb"]),
            "peak_mb": float(fields["peak_mb"])}


def python_worker(python, name, args, env=None):
    cmd = [python, os.path.abspath(__file__), args.build, "--worker", name, "--threads", str(args.threads),
           "--steps", str(args.steps), "--digits", args.digits or ""]
    return json.loads(run_child(cmd, env).strip().splitlines()[-1])


def ours_digits(args):
    env = dict(os.environ, TF_NUM_THREADS=str(args.threads), PYTHONPATH=os.path.join(ROOT, "python", "src"),
               TENSORFRAME_LIBRARY=os.path.join(args.build, "lib", "libtensorframe.so"))
    return python_worker(sys.executable, "tf-digits", args, env)


def compare(label, ours, theirs, args):
    rounds = []
    for r in range(args.rounds):
        pair = (ours(), theirs()) if r % 2 == 0 else tuple(reversed((theirs(), ours())))
        rounds.append(pair)
    ratios = sorted(t["ms"] / o["ms"] for o, t in rounds)
    mid = sorted(rounds, key=lambda p: p[1]["ms"] / p[0]["ms"])[len(rounds) // 2]
    o, t = mid
    print("%-34s tensorframe %7.2f ms  torch %s %7.2f ms  speedup %.2fx (range %.2f-%.2f)  "
          "peak MB %.0f (+%.0f over setup) vs %.0f (+%.0f)" %
          (label, o["ms"], t.get("version", "?"), t["ms"], statistics.median(ratios), ratios[0], ratios[-1],
           o["peak_mb"], o["peak_mb"] - o["rss_before_mb"], t["peak_mb"], t["peak_mb"] - t["rss_before_mb"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--torch-python", action="append")
    ap.add_argument("--digits", default=None, help="digits.csv.gz (default: BUILD/data/digits.csv.gz)")
    ap.add_argument("--worker", default=None)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if args.digits is None:
        args.digits = os.path.join(args.build, "data", "digits.csv.gz")
    if args.worker:
        return worker(args)
    pythons = args.torch_python or [sys.executable]
    print("train_compare: %d threads, %d steps a round, %d rounds, %s" %
          (args.threads, args.steps, args.rounds, cpu_flags()))
    for py in pythons:
        compare("gpt (C) vs torch (%s)" % os.path.basename(os.path.dirname(os.path.dirname(py))) or py,
                lambda: ours_gpt(args), lambda py=py: python_worker(py, "torch-gpt", args), args)
        if os.path.exists(args.digits):
            compare("digits CNN (Python both)", lambda: ours_digits(args),
                    lambda py=py: python_worker(py, "torch-digits", args), args)


def cpu_flags():
    flags = open("/proc/cpuinfo").read()
    isa = "AVX-512" if " avx512f " in flags else "AVX2" if " avx2 " in flags else "SSE"
    return isa + (" + VNNI" if " avx512_vnni " in flags else "") + (" + BF16" if " avx512_bf16 " in flags else "")


if __name__ == "__main__":
    main()
