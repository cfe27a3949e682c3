"""tensorframe's linalg beside NumPy's and PyTorch's, in the same process,
on the CPU: the factorizations (LAPACK through OpenBLAS in all three; ours
in float64 whatever the dtype) on one n x n matrix.

    build/py/debian/bin/python bench/linalg_compare.py [--n 512] [--repeat 5]

Each figure is the best of --repeat calls; ratios are tensorframe / peer
(below 1: tensorframe is faster)."""
import argparse
import os
import time

import numpy as np
import torch

import tensorframe as tf


def best_ms(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    rng = np.random.default_rng(0)
    rows = []
    for dtype in ("float64", "float32"):
        a = rng.standard_normal((args.n, args.n)).astype(dtype)
        spd = (a @ a.T + args.n * np.eye(args.n)).astype(dtype)
        b = rng.standard_normal((args.n, 8)).astype(dtype)
        mine = {k: tf.asarray(v) for k, v in (("a", a), ("spd", spd), ("b", b))}
        theirs = {k: torch.from_numpy(v.copy()) for k, v in (("a", a), ("spd", spd), ("b", b))}
        cases = [
            ("solve (8 columns)", lambda: tf.linalg.solve(mine["a"], mine["b"]), lambda: np.linalg.solve(a, b),
             lambda: torch.linalg.solve(theirs["a"], theirs["b"])),
            ("inv", lambda: tf.linalg.inv(mine["a"]), lambda: np.linalg.inv(a), lambda: torch.linalg.inv(theirs["a"])),
            ("cholesky", lambda: tf.linalg.cholesky(mine["spd"]), lambda: np.linalg.cholesky(spd),
             lambda: torch.linalg.cholesky(theirs["spd"])),
            ("det", lambda: tf.linalg.det(mine["a"]), lambda: np.linalg.det(a), lambda: torch.linalg.det(theirs["a"])),
            ("qr", lambda: tf.linalg.qr(mine["a"]), lambda: np.linalg.qr(a), lambda: torch.linalg.qr(theirs["a"])),
            ("svd", lambda: tf.linalg.svd(mine["a"]), lambda: np.linalg.svd(a), lambda: torch.linalg.svd(theirs["a"])),
            ("eigh", lambda: tf.linalg.eigh(mine["spd"]), lambda: np.linalg.eigh(spd),
             lambda: torch.linalg.eigh(theirs["spd"])),
        ]
        for name, ours, np_fn, torch_fn in cases:
            rows.append(("%s %s" % (name, dtype), best_ms(ours, args.repeat), best_ms(np_fn, args.repeat),
                         best_ms(torch_fn, args.repeat)))
    print("tensorframe %s, NumPy %s, PyTorch %s (%d threads), n = %d" % (
        tf.__version__, np.__version__, torch.__version__, torch.get_num_threads(), args.n))
    print("%-28s %12s %12s %12s %9s %9s" % ("case", "tensorframe", "NumPy", "PyTorch", "/NumPy", "/PyTorch"))
    for name, us, un, ut in rows:
        print("%-28s %10.2fms %10.2fms %10.2fms %9.2f %9.2f" % (name, us, un, ut, us / un, us / ut))


if __name__ == "__main__":
    main()
