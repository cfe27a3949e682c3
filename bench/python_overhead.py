"""The Python package beside NumPy and PyTorch in the same process: what a
call costs on a tiny array (the layer's overhead), the same ops on large
arrays (where the C library's kernels decide), and DLPack exchanges.

    build/py/debian/bin/python bench/python_overhead.py [--device cpu] [--repeat 5]

(scripts/python-test.sh makes that venv: Debian's NumPy and PyTorch with
the wheel installed). Each figure is the best of --repeat runs of a timed
loop; ratios are tensorframe / peer (below 1: tensorframe is faster)."""
import argparse
import os
import time

import numpy as np
import torch

import tensorframe as tf


def best_us(fn, number, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())     # Debian's build starts with one; tensorframe uses every core
    rows = []

    def case(name, number, ours, numpy_fn, torch_fn):
        us = best_us(ours, number, args.repeat)
        un = best_us(numpy_fn, number, args.repeat)
        ut = best_us(torch_fn, number, args.repeat)
        rows.append((name, us, un, ut))

    dev = args.device
    done = tf.device(dev).synchronize          # an async device's work counts until it is finished
    small_np = np.arange(16, dtype=np.float32)
    small_t = torch.from_numpy(small_np.copy())
    small = tf.asarray(small_np, device=dev)
    case("x + y, 16 floats", 20000, lambda: small + small, lambda: small_np + small_np, lambda: small_t + small_t)
    case("x * 2.0, 16 floats", 20000, lambda: small * 2.0, lambda: small_np * 2.0, lambda: small_t * 2.0)
    case("x[1:9:2], 16 floats", 20000, lambda: small[1:9:2], lambda: small_np[1:9:2], lambda: small_t[1:9:2])
    case("sum(x), 16 floats", 20000, lambda: tf.sum(small), lambda: small_np.sum(), lambda: small_t.sum())

    big_np = np.random.default_rng(0).standard_normal(1 << 22).astype(np.float32)
    big_t = torch.from_numpy(big_np.copy())
    big = tf.asarray(big_np, device=dev)
    case("x + y, 4M floats", 50, lambda: (big + big, done()), lambda: big_np + big_np, lambda: big_t + big_t)
    mat_np = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    mat_t = torch.from_numpy(mat_np.copy())
    mat = tf.asarray(mat_np, device=dev)
    case("matmul 1024^2", 10, lambda: (mat @ mat, done()), lambda: mat_np @ mat_np, lambda: mat_t @ mat_t)
    rows_np = mat_np.reshape(256, 4096)
    rows_t = torch.from_numpy(rows_np.copy())
    rows_tf = tf.reshape(mat, (256, 4096))

    def np_softmax():
        e = np.exp(rows_np - rows_np.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    case("softmax [256, 4096]", 50, lambda: (tf.softmax(rows_tf, axis=-1), done()), np_softmax,
         lambda: torch.softmax(rows_t, dim=-1))
    # sorting (ops 105-106): rows of a matrix, stable, and a tiny one
    case("sort rows [256, 4096], stable", 10, lambda: (tf.sort(rows_tf, axis=-1), done()),
         lambda: np.sort(rows_np, axis=-1, kind="stable"), lambda: torch.sort(rows_t, dim=-1, stable=True))
    case("argsort, 16 floats", 20000, lambda: tf.argsort(small), lambda: np.argsort(small_np, kind="stable"),
         lambda: torch.argsort(small_t, stable=True))
    cpu_arr = tf.asarray(small_np, device="cpu")
    case("DLPack out (to NumPy / torch)", 20000, lambda: np.from_dlpack(cpu_arr), lambda: np.from_dlpack(small_np),
         lambda: torch.from_dlpack(cpu_arr))
    case("DLPack in (from NumPy / torch)", 20000, lambda: tf.from_dlpack(small_np), lambda: np.from_dlpack(small_np),
         lambda: torch.from_dlpack(small_np))

    print("tensorframe %s on %s, NumPy %s, PyTorch %s (%d threads)" % (
        tf.__version__, dev, np.__version__, torch.__version__, torch.get_num_threads()))
    print("%-32s %12s %12s %12s %9s %9s" % ("case", "tensorframe", "NumPy", "PyTorch", "/NumPy", "/PyTorch"))
    for name, us, un, ut in rows:
        print("%-32s %10.2fus %10.2fus %10.2fus %9.2f %9.2f" % (name, us, un, ut, us / un, us / ut))


if __name__ == "__main__":
    main()
