#!/usr/bin/python3
"""all-MiniLM-L6-v2 as a GGUF of llama.cpp's `bert` architecture: its
tensor names (token_embd, position_embd, token_types, token_embd_norm,
blk.N.attn_q/k/v, attn_output, attn_output_norm, ffn_up, ffn_down,
layer_output_norm, with biases), its bert.* keys (mean pooling, as
sentence-transformers pools this model) and its WordPiece vocabulary in
llama.cpp's form (a word's first piece prefixed with U+2581, continuations
without "##"). Written by the `gguf` package from the safetensors file,
read with NumPy alone.
usage: make_bert_gguf.py GGUF_PACKAGE_DIR MODEL_DIR OUT.gguf"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import gguf  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":     # embeddings.position_ids (I64) is no weight
            continue
        a, b = info["data_offsets"]
        out[name.removeprefix("bert.")] = np.frombuffer(data[a:b], dtype=np.float32).reshape(info["shape"])
    return out


def main():
    model_dir, out = sys.argv[2], sys.argv[3]
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    config = json.load(open(os.path.join(model_dir, "config.json")))
    layers = config["num_hidden_layers"]
    g = gguf.GGUFWriter(out, "bert")
    g.add_name("all-MiniLM-L6-v2")
    g.add_uint32("bert.block_count", layers)
    g.add_uint32("bert.context_length", config["max_position_embeddings"])
    g.add_uint32("bert.embedding_length", config["hidden_size"])
    g.add_uint32("bert.feed_forward_length", config["intermediate_size"])
    g.add_uint32("bert.attention.head_count", config["num_attention_heads"])
    g.add_float32("bert.attention.layer_norm_epsilon", config["layer_norm_eps"])
    g.add_bool("bert.attention.causal", False)
    g.add_uint32("bert.pooling_type", 1)
    vocab = open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8").read().split("\n")
    if vocab[-1] == "":
        vocab.pop()
    phantom = [t if t.startswith("[") and t.endswith("]") else t[2:] if t.startswith("##") else "\u2581" + t
               for t in vocab]
    g.add_tokenizer_model("bert")
    g.add_uint32("tokenizer.ggml.token_type_count", config["type_vocab_size"])
    g.add_token_list(phantom)
    g.add_token_types([gguf.TokenType.CONTROL if t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
                       else gguf.TokenType.NORMAL for t in vocab])
    for key, tok in (("add_bos_token_id", "[CLS]"), ("add_sep_token_id", "[SEP]"), ("add_unk_token_id", "[UNK]"),
                     ("add_pad_token_id", "[PAD]"), ("add_mask_token_id", "[MASK]")):
        getattr(g, key)(vocab.index(tok))
    names = {"embeddings.word_embeddings.weight": "token_embd.weight",
             "embeddings.position_embeddings.weight": "position_embd.weight",
             "embeddings.token_type_embeddings.weight": "token_types.weight",
             "embeddings.LayerNorm.weight": "token_embd_norm.weight", "embeddings.LayerNorm.bias": "token_embd_norm.bias"}
    parts = {"attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
             "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
             "intermediate.dense": "ffn_up", "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm"}
    for i in range(layers):
        for hf, ours in parts.items():
            for kind in ("weight", "bias"):
                names[f"encoder.layer.{i}.{hf}.{kind}"] = f"blk.{i}.{ours}.{kind}"
    for hf, ours in names.items():
        g.add_tensor(ours, np.ascontiguousarray(w[hf]))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


if __name__ == "__main__":
    main()
