#!/usr/bin/env python3
"""tf_gguf_load_as against the `gguf` package (llama.cpp's own Python
reader), bit for bit: every tensor of each GGUF file given, plus a file
this script writes with random blocks of every type tensorframe decodes
(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
IQ4_XS; f16 scales drawn finite, some of them extreme). Then the encoders
the package has (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): tf_cast of random rows to
each gives the package's bytes.

usage: check_dequant.py LIBTENSORFRAME DIR_WITH_THE_GGUF_PACKAGE [FILE.gguf ...]
(exit 77, skipped, when they have not been fetched)
Exit 0 when every tensor matches; prints 'N passed, N failed'.
"""
import ctypes
import os
import sys
import tempfile

import numpy as np

lib_path, pkg_dir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
if not os.path.isfile(os.path.join(pkg_dir, "gguf", "quants.py")) or not all(map(os.path.isfile, files)):
    print(f"check_dequant: the gguf package or a model is not in {os.path.dirname(pkg_dir) or '.'}; "
          "scripts/fetch-models.sh BUILD_DIR fetches them (make test does)")
    sys.exit(77)
sys.path.insert(0, pkg_dir)
import gguf  # noqa: E402  (from the downloaded wheel)
from gguf import GGMLQuantizationType as Q  # noqa: E402

tf = ctypes.CDLL(lib_path)
tf.tf_last_error.restype = ctypes.c_char_p
for fn, args in (("tf_gguf_open", [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
                 ("tf_gguf_close", [ctypes.c_void_p]),
                 ("tf_device_get", [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
                 ("tf_gguf_load_as", [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_void_p)]),
                 ("tf_tensor_read", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
                 ("tf_tensor_release", [ctypes.c_void_p]),
                 ("tf_tensor_from_data", [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                          ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
                 ("tf_cast", [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)])):
    getattr(tf, fn).argtypes = args
TF_F32 = 0

BLOCKS = {Q.Q4_0: (32, 18), Q.Q4_1: (32, 20), Q.Q8_0: (32, 34), Q.Q4_K: (256, 144), Q.Q6_K: (256, 210),
          Q.Q5_0: (32, 22), Q.Q5_1: (32, 24), Q.Q2_K: (256, 84), Q.Q3_K: (256, 110), Q.Q5_K: (256, 176),
          Q.IQ4_NL: (32, 18), Q.IQ4_XS: (256, 136)}
F16_AT = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q6_K: [208], Q.Q5_0: [0], Q.Q5_1: [0, 2],
          Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q5_K: [0, 2], Q.IQ4_NL: [0], Q.IQ4_XS: [0]}
# tensorframe's dtype codes (tf_dtype, ABI) of the types the package can also encode
TF_CODE = {Q.Q4_0: 9, Q.Q4_1: 10, Q.Q8_0: 11, Q.Q5_0: 14, Q.Q5_1: 15}


def random_file(path):
    """Random blocks of each type, 3 x 512 elements, every f16 scale finite."""
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    w = gguf.GGUFWriter(path, "test")
    for qt, (block, nbytes) in BLOCKS.items():
        rows, cols = 3, 512
        raw = rng.integers(0, 256, size=(rows * cols // block, nbytes), dtype=np.uint8)
        for off in F16_AT[qt]:
            scale = rng.standard_normal(raw.shape[0]) * 10.0 ** rng.integers(-6, 5, size=raw.shape[0])
            scale[:2] = (65504.0, -6e-8)                    # the largest f16 and a subnormal
            raw[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
        w.add_tensor(f"random.{qt.name}", raw.reshape(rows, -1), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ours(handle, dev, name, n):
    t = ctypes.c_void_p()
    if tf.tf_gguf_load_as(handle, name.encode(), dev, TF_F32, ctypes.byref(t)) != 0:
        raise RuntimeError(f"tf_gguf_load_as({name}): {tf.tf_last_error().decode()}")
    out = np.empty(n, dtype=np.float32)
    s = tf.tf_tensor_read(t, out.ctypes.data, out.nbytes)
    tf.tf_tensor_release(t)
    if s != 0:
        raise RuntimeError(f"tf_tensor_read({name}): {tf.tf_last_error().decode()}")
    return out


def check(path, dev, counts):
    handle = ctypes.c_void_p()
    if tf.tf_gguf_open(path.encode(), ctypes.byref(handle)) != 0:
        raise RuntimeError(f"tf_gguf_open({path}): {tf.tf_last_error().decode()}")
    seen = {}
    try:
        for t in gguf.GGUFReader(path).tensors:
            if t.tensor_type not in BLOCKS and t.tensor_type not in (Q.F32, Q.F16):
                continue
            ref = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1)
            got = ours(handle, dev, t.name, ref.size)
            same = np.array_equal(ref.view(np.uint32), got.view(np.uint32))
            counts[0 if same else 1] += 1
            seen[t.tensor_type.name] = seen.get(t.tensor_type.name, 0) + 1
            if not same:
                bad = np.flatnonzero(ref.view(np.uint32) != got.view(np.uint32))
                print(f"FAIL {os.path.basename(path)} {t.name} ({t.tensor_type.name}): {bad.size} of {ref.size} differ, "
                      f"first at {bad[0]}: ours {got[bad[0]]!r}, gguf's {ref[bad[0]]!r}")
    finally:
        tf.tf_gguf_close(handle)
    print(f"{os.path.basename(path)}: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))


def cast_bytes(dev, rows, code, nbytes):
    """tf_cast of f32 rows to dtype `code` on dev: the encoded bytes."""
    shape = (ctypes.c_int64 * 2)(*rows.shape)
    src, q = ctypes.c_void_p(), ctypes.c_void_p()
    if tf.tf_tensor_from_data(dev, TF_F32, 2, shape, rows.ctypes.data, ctypes.byref(src)) != 0:
        raise RuntimeError(tf.tf_last_error().decode())
    s = tf.tf_cast(src, code, ctypes.byref(q))
    tf.tf_tensor_release(src)
    if s != 0:
        raise RuntimeError(f"tf_cast to dtype {code}: {tf.tf_last_error().decode()}")
    got = np.empty(nbytes, dtype=np.uint8)
    s = tf.tf_tensor_read(q, got.ctypes.data, got.nbytes)
    tf.tf_tensor_release(q)
    if s != 0:
        raise RuntimeError(f"tf_tensor_read: {tf.tf_last_error().decode()}")
    return got


def check_encoders(dev, counts):
    """tf_cast of random f32 rows (blocks of very different scales) to each
    type the package encodes: the same bytes as gguf.quants.quantize."""
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    rows = (rng.standard_normal((8, 1024)) * 10.0 ** rng.integers(-4, 4, size=(8, 32)).repeat(32, axis=1))
    rows = rows.astype(np.float32)
    for qt, code in TF_CODE.items():
        want = gguf.quants.quantize(rows, qt).reshape(-1)
        got = cast_bytes(dev, rows, code, want.size)
        same = np.array_equal(want, got)
        counts[0 if same else 1] += 1
        if not same:
            bad = np.flatnonzero(want != got)
            print(f"FAIL encoding {qt.name}: {bad.size} of {want.size} bytes differ, first at {bad[0]}")
    print("encoders: " + ", ".join(qt.name for qt in TF_CODE))


def check_ggml_encodings(dev, counts):
    """tf_cast against the bytes llama.cpp's ggml_quantize_chunk made of the
    same rows (fixtures/ggml_encode.npz, from make_encode_fixture.py)."""
    codes = {"q4_0": 9, "q4_1": 10, "q8_0": 11, "q5_0": 14, "q5_1": 15, "iq4_nl": 19, "iq4_xs": 20,
             "q2_k": 16, "q3_k": 17, "q4_k": 12, "q5_k": 18, "q6_k": 13}
    ref = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "ggml_encode.npz"))
    for name, code in codes.items():
        want = ref[name]
        got = cast_bytes(dev, ref["x"], code, want.size)
        same = np.array_equal(want, got)
        counts[0 if same else 1] += 1
        if not same:
            bad = np.flatnonzero(want != got)
            print(f"FAIL encoding {name} against ggml: {bad.size} of {want.size} bytes differ, first at {bad[0]}")
    print("ggml's encodings: " + ", ".join(codes))


dev = ctypes.c_void_p()
if tf.tf_device_get(b"cpu", ctypes.byref(dev)) != 0:
    sys.exit(f"tf_device_get(cpu): {tf.tf_last_error().decode()}")
counts = [0, 0]
with tempfile.TemporaryDirectory() as tmp:
    synthetic = os.path.join(tmp, "random.gguf")
    random_file(synthetic)
    for path in [synthetic] + files:
        check(path, dev, counts)
check_encoders(dev, counts)
check_ggml_encodings(dev, counts)
print(f"check_dequant: {counts[0]} passed, {counts[1]} failed")
sys.exit(1 if counts[1] else 0)
