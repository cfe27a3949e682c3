#!/usr/bin/env python3
"""Reference fixtures for all-MiniLM-L6-v2 (tests/embed): token ids from the
model's own tokenizer.json (the `tokenizers` package), and each sentence's
embedding from sentence-transformers itself run in float64, checked against
an independent float64 PyTorch implementation of the pipeline this model
declares in modules.json (BertModel -> mean pooling over the attention mask
-> L2 normalize): the two must agree to 1e-8 and use the same token ids.

usage: make_fixtures.py MODEL_DIR OUT_DIR
Run it with the python of scripts/embed-venv.sh BUILD_DIR (Debian's torch
plus sentence-transformers and tokenizers).
Writes OUT_DIR/ids.txt (one sentence per line: its token ids) and
OUT_DIR/reference.txt (one line per sentence: 384 floats)."""
import json
import math
import struct
import sys

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer

SENTENCES = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "tensorframe runs one API on the CPU, CUDA, OpenCL and WebGPU.",
    "Hi",
    "Sentence embeddings map text to vectors so that similar meanings land close together, "
    "which makes them useful for search, clustering and deduplication.",
    "Café, naïve résumé: accents and ümlauts are lowercased and stripped.",
    "The weather today is sunny with a light breeze.",
    "How do I bake bread at home without a stand mixer?",
]


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":                                # position_ids (I64): unused
            continue
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).astype(np.float64))
    return out


def layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def embed(W, ids):
    p = "" if "embeddings.word_embeddings.weight" in W else "bert."
    L = len(ids)
    t = torch.tensor(ids)
    x = W[p + "embeddings.word_embeddings.weight"][t] + W[p + "embeddings.position_embeddings.weight"][:L] \
        + W[p + "embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, W[p + "embeddings.LayerNorm.weight"], W[p + "embeddings.LayerNorm.bias"])
    H, D = 12, 384 // 12
    for i in range(6):
        q = f"{p}encoder.layer.{i}."
        lin = lambda v, n: v @ W[q + n + ".weight"].T + W[q + n + ".bias"]
        Q, K, V = (lin(x, "attention.self." + n).reshape(L, H, D).transpose(0, 1) for n in ("query", "key", "value"))
        att = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(D), -1) @ V
        a = lin(att.transpose(0, 1).reshape(L, H * D), "attention.output.dense")
        x = layer_norm(a + x, W[q + "attention.output.LayerNorm.weight"], W[q + "attention.output.LayerNorm.bias"])
        h = lin(x, "intermediate.dense")
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))           # BERT's exact gelu
        x = layer_norm(lin(h, "output.dense") + x, W[q + "output.LayerNorm.weight"], W[q + "output.LayerNorm.bias"])
    e = x.mean(0)
    return e / max(float(e.norm()), 1e-12)


def main():
    model, out = sys.argv[1], sys.argv[2]
    tok = Tokenizer.from_file(f"{model}/tokenizer.json")
    tok.no_padding()                                              # the file pads to 128: each sentence alone
    W = load_safetensors(f"{model}/model.safetensors")
    st = SentenceTransformer(model, device="cpu").double()
    features = st.tokenize(SENTENCES)
    with torch.no_grad():
        reference = st(features)["sentence_embedding"]
    with open(f"{out}/ids.txt", "w") as fi, open(f"{out}/reference.txt", "w") as fr:
        for i, s in enumerate(SENTENCES):
            ids = tok.encode(s).ids
            assert features["input_ids"][i][:len(ids)].tolist() == ids, f"sentence {i}: the tokenizers disagree"
            ours = embed(W, ids)
            gap = float((ours - reference[i]).abs().max())
            assert gap < 1e-8, f"sentence {i}: sentence-transformers and the float64 pipeline differ by {gap}"
            fi.write(" ".join(map(str, ids)) + "\n")
            fr.write(" ".join(f"{v:.9g}" for v in reference[i].tolist()) + "\n")
    print(f"{len(SENTENCES)} sentences written to {out}")


main()
