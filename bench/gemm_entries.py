#!/usr/bin/env python3
"""Every GEMM entry in every float dtype, tensorframe beside PyTorch in one
process, same threads: tf_matmul (plain, x @ W^T, batched), tf_gemm
(x @ W^T + bias as autocast writes it; alpha, beta, c with a transposed a)
and tf_linear, in f32, f16, bf16 and a mixed f32 x bf16 pair. Times are
the median of alternating turns (ours, theirs, ours, ...); the ratio is
PyTorch's time over ours (above 1: tensorframe is faster). PyTorch takes
one dtype per product, so its mixed pair casts the weight in the timed call
(what a user of it writes); PyTorch 1.13 has no f16 GEMM on the CPU, so
the f16 rows are set against its f32.

    TENSORFRAME_LIBRARY=build/lib/libtensorframe.so PYTHONPATH=python/src \\
        /usr/bin/python3 bench/gemm_entries.py [--m 320 --k 384 --n 1536] [--turns 7]
"""
import argparse
import os
import time

import numpy as np
import torch

import tensorframe as tf

DT = {"f32": (tf.float32, torch.float32), "f16": (tf.float16, torch.float16), "bf16": (tf.bfloat16, torch.bfloat16)}


def timed(fn, min_time=0.2):
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        t = time.perf_counter() - t0
        if t >= min_time and n >= 3:
            return t / n


def pair(ours, theirs, turns):
    a, b = [], []
    for _ in range(turns):
        a.append(timed(ours))
        b.append(timed(theirs))
    return sorted(a)[len(a) // 2], sorted(b)[len(b) // 2]


def both(x, dt):
    """The same values as a tensorframe array and a torch tensor of dtype dt."""
    t = torch.from_numpy(x).to(DT[dt][1])
    return tf.astype(tf.asarray(x), DT[dt][0]), t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=320)
    ap.add_argument("--k", type=int, default=384)
    ap.add_argument("--n", type=int, default=1536)
    ap.add_argument("--turns", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    m, k, n = args.m, args.k, args.n
    rng = np.random.default_rng(1)
    X = rng.standard_normal((m, k), dtype=np.float32)
    W = rng.standard_normal((n, k), dtype=np.float32)
    B = rng.standard_normal((k, n), dtype=np.float32)
    XT = np.ascontiguousarray(X.T)
    C = rng.standard_normal((m, n), dtype=np.float32)
    bias = rng.standard_normal((n,), dtype=np.float32)
    XB = rng.standard_normal((8, m // 8, k), dtype=np.float32)
    print(f"{'entry':34s} {'dtype':9s} {'ours ms':>9s} {'torch ms':>9s} {'ratio':>6s}")

    def cases_for(da, db):
        """The rows for one dtype pair, each closure bound to its own operands."""
        x, tx = both(X, da)
        w, tw = both(W, db)
        b, tb = both(B, db)
        xt, txt = both(XT, da)
        c, tc = both(C, da)
        bi, tbi = both(bias, da)
        xb, txb = both(XB, da)
        cases = [
            ("matmul x @ B", lambda: tf.matmul(x, b), lambda: torch.matmul(tx, tb.to(tx.dtype))),
            ("matmul x @ W^T", lambda: tf.matmul(x, tf.matrix_transpose(w)), lambda: torch.matmul(tx, tw.to(tx.dtype).t())),
            ("matmul batched [8] @ W^T", lambda: tf.matmul(xb, tf.matrix_transpose(w)),
             lambda: torch.matmul(txb, tw.to(tx.dtype).t())),
            ("linear x W^T + bias", lambda: tf.linear(x, w, bi), lambda: torch.nn.functional.linear(tx, tw.to(tx.dtype), tbi)),
        ]
        if da == db:                              # tf_gemm takes one dtype, as BLAS does
            cases += [
                ("gemm x W^T + bias (autocast)", lambda: tf.gemm(x, w, bi, alpha=1, beta=1, transpose_b=True),
                 lambda: torch.addmm(tbi, tx, tw.t())),
                ("gemm 0.5 x^T' B - 2 c", lambda: tf.gemm(xt, b, c, alpha=0.5, beta=-2, transpose_a=True),
                 lambda: torch.addmm(tc, txt.t(), tb, alpha=0.5, beta=-2)),
            ]
        return cases

    f32_peer = {}
    for dt in ("f32", "f16", "bf16", "f32xbf16"):
        da = "f32" if dt == "f32xbf16" else dt
        db = "bf16" if dt == "f32xbf16" else dt
        cases = cases_for(da, db)
        for name, ours, theirs in cases:
            note = ""
            try:
                theirs()
            except RuntimeError:                  # PyTorch 1.13 has no f16 GEMM on the CPU: its f32 is the peer
                note = "  (torch: f32)"
                theirs = f32_peer[name]
            t_ours, t_theirs = pair(ours, theirs, args.turns)
            print(f"{name:34s} {dt:9s} {t_ours * 1e3:9.3f} {t_theirs * 1e3:9.3f} {t_theirs / t_ours:6.2f}{note}",
                  flush=True)
            if dt == "f32":
                f32_peer[name] = theirs


if __name__ == "__main__":
    main()
