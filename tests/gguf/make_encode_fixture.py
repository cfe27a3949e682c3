#!/usr/bin/env python3
"""Writes tests/gguf/fixtures/ggml_encode.npz: random f32 rows (blocks of
very different scales, a zero block, ties) and the bytes ggml's
ggml_quantize_chunk makes of them without an importance matrix (what
llama-quantize writes) for each format whose encoder tensorframe follows
ggml's: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS and the K-quants Q2_K,
Q3_K, Q4_K, Q5_K, Q6_K. check_dequant.py
compares tf_cast's bytes with them. Run once, after
scripts/llama-fixtures.sh has built llama.cpp:
usage: make_encode_fixture.py BUILD_DIR/peers/llama-build/bin/libggml-base.so OUT.npz
"""
import ctypes
import sys

import numpy as np

lib = ctypes.CDLL(sys.argv[1])
lib.ggml_quantize_chunk.restype = ctypes.c_size_t
lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_int64, ctypes.c_void_p]
lib.ggml_row_size.restype = ctypes.c_size_t
lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
GGML = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "iq4_xs": 23,
        "q2_k": 10, "q3_k": 11, "q4_k": 12, "q5_k": 13, "q6_k": 14}

rng = np.random.default_rng(20261126)
rows, k = 32, 512
x = rng.standard_normal((rows, k)) * 10.0 ** rng.integers(-5, 5, size=(rows, k // 32)).repeat(32, axis=1)
x[0, :32] = 0                                   # a zero block
x[1, :32] = np.arange(32) - 16                  # exact ties for the rounding
x[2, :256] = np.linspace(-1, 1, 256)
x[3, 256:272] = 0                               # a zero sub-block inside a K block
x[4, 256:512] = np.abs(x[4, 256:512])           # a K block with no negative element (min 0)
x = np.ascontiguousarray(x, dtype=np.float32)
out = {"x": x}
for name, t in GGML.items():
    nbytes = lib.ggml_row_size(t, k) * rows
    buf = np.zeros(nbytes, dtype=np.uint8)
    got = lib.ggml_quantize_chunk(t, x.ctypes.data, buf.ctypes.data, 0, rows, k, None)
    assert got == nbytes, (name, got, nbytes)
    out[name] = buf
np.savez_compressed(sys.argv[2], **out)
print(f"wrote {sys.argv[2]}: " + ", ".join(GGML))
