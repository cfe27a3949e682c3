#!/usr/bin/python3
"""Tiny models of every family the model library runs, with random weights,
written by the `gguf` package (llama.cpp's own writer) with each family's
exact tensor names and metadata, in f32: OUT/<family>/f32.gguf. llama-quantize
makes the quantized ones (scripts/llama-fixtures.sh). Their tokenizer is
"none" (ids only), so llama.cpp runs them from ids, as the tests do.

Each family's file exercises what sets it apart: llama an untied output;
qwen2 q/k/v biases; qwen3 q/k norms and a head size that is not
width/heads; phi3 the fused attn_qkv and gate/up; gemma2 soft caps,
post-norms, GeGLU and a sliding window of 4 on every other layer; gemma3
q/k norms, post-norms, a window of 4 on two layers of three (from the
pattern key) with its own RoPE base.
usage: make_tiny.py GGUF_PACKAGE_DIR OUT_DIR"""
import os
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import gguf  # noqa: E402

VOCAB, EMBD, FF, HEADS, KV_HEADS, HEAD = 512, 256, 512, 4, 2, 64

FAMILIES = {
    "llama": dict(layers=2, head=64, untied=True, base=10000.0),
    "qwen2": dict(layers=2, head=64, qkv_bias=True, base=1000000.0),
    "qwen3": dict(layers=2, head=128, qk_norm=True, base=1000000.0),
    "phi3": dict(layers=2, head=64, fused=True, untied=True, base=10000.0),
    "gemma2": dict(layers=2, head=64, post_norms=True, base=10000.0,
                   keys={"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
                         "attention.sliding_window": 4}),
    "gemma3": dict(layers=3, head=64, qk_norm=True, post_norms=True, base=1000000.0,
                   keys={"attention.sliding_window": 4, "attention.sliding_window_pattern": 3}),
    # Long-context RoPE: Llama 3.1's per-pair divisors (rope_freqs.weight),
    # Phi-3's LongRoPE (the original context of 32 is below every context
    # here, so its long factors apply), Gemma 3's linear scaling.
    "llama-rope-freqs": dict(arch="llama", layers=2, head=64, untied=True, base=500000.0, rope_freqs=True),
    "phi3-longrope": dict(arch="phi3", layers=2, head=64, fused=True, untied=True, base=10000.0, longrope=True,
                          keys={"rope.scaling.original_context_length": 32, "rope.scaling.attn_factor": 1.19}),
    "gemma3-linear": dict(arch="gemma3", layers=3, head=64, qk_norm=True, post_norms=True, base=1000000.0,
                          keys={"attention.sliding_window": 4, "attention.sliding_window_pattern": 3,
                                "rope.scaling.factor": 8.0}, strings={"rope.scaling.type": "linear"}),
}


def family_file(variant, spec, out, rng):
    name = spec.get("arch", variant)
    L, D = spec["layers"], spec["head"]
    qd, kvd = HEADS * D, KV_HEADS * D
    w = gguf.GGUFWriter(out, name)
    w.add_uint32(f"{name}.block_count", L)
    w.add_uint32(f"{name}.context_length", 256)
    w.add_uint32(f"{name}.embedding_length", EMBD)
    w.add_uint32(f"{name}.feed_forward_length", FF)
    w.add_uint32(f"{name}.attention.head_count", HEADS)
    w.add_uint32(f"{name}.attention.head_count_kv", KV_HEADS)
    w.add_uint32(f"{name}.attention.key_length", D)
    w.add_uint32(f"{name}.attention.value_length", D)
    w.add_uint32(f"{name}.rope.dimension_count", D)
    w.add_float32(f"{name}.rope.freq_base", spec["base"])
    w.add_float32(f"{name}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32(f"{name}.vocab_size", VOCAB)
    for k, v in spec.get("keys", {}).items():
        (w.add_float32 if isinstance(v, float) else w.add_uint32)(f"{name}.{k}", v)
    for k, v in spec.get("strings", {}).items():
        w.add_string(f"{name}.{k}", v)
    w.add_string("tokenizer.ggml.model", "none")

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    # With the output tied to the embeddings, a large input row would be
    # echoed back as the next token: tied files get small rows (Gemma's are
    # multiplied by sqrt(width) again) and a larger final norm, so the
    # blocks decide the logits and the logits are not flat.
    tied = not spec.get("untied")
    gain = (0.5 if name.startswith("gemma") else 1.0) / np.sqrt(EMBD) if tied else 1.0
    w.add_tensor("token_embd.weight", (gain * rng.standard_normal((VOCAB, EMBD))).astype(np.float32))
    w.add_tensor("output_norm.weight", (5.0 if tied else 1.0) * norm(EMBD))
    if spec.get("untied"):
        w.add_tensor("output.weight", mat(VOCAB, EMBD, 4.0))
    if spec.get("rope_freqs"):        # low frequencies slowed, as Llama 3.1's are
        w.add_tensor("rope_freqs.weight", np.linspace(1.0, 8.0, D // 2).astype(np.float32))
    if spec.get("longrope"):          # Phi-3 128k's: long factors past the original context, short within
        w.add_tensor("rope_factors_long.weight", np.linspace(1.0, 4.0, D // 2).astype(np.float32))
        w.add_tensor("rope_factors_short.weight", np.linspace(1.0, 1.5, D // 2).astype(np.float32))
    for l in range(L):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", norm(EMBD))
        if spec.get("fused"):
            w.add_tensor(p + "attn_qkv.weight", mat(qd + 2 * kvd, EMBD))
        else:
            w.add_tensor(p + "attn_q.weight", mat(qd, EMBD))
            w.add_tensor(p + "attn_k.weight", mat(kvd, EMBD))
            w.add_tensor(p + "attn_v.weight", mat(kvd, EMBD))
        if spec.get("qkv_bias"):
            for part, n in (("q", qd), ("k", kvd), ("v", kvd)):
                w.add_tensor(p + f"attn_{part}.bias", (0.5 * rng.standard_normal(n)).astype(np.float32))
        if spec.get("qk_norm"):
            w.add_tensor(p + "attn_q_norm.weight", norm(D))
            w.add_tensor(p + "attn_k_norm.weight", norm(D))
        w.add_tensor(p + "attn_output.weight", mat(EMBD, qd))
        if spec.get("post_norms"):
            w.add_tensor(p + "post_attention_norm.weight", norm(EMBD))
        w.add_tensor(p + "ffn_norm.weight", norm(EMBD))
        if spec.get("fused"):
            w.add_tensor(p + "ffn_up.weight", mat(2 * FF, EMBD))
        else:
            w.add_tensor(p + "ffn_gate.weight", mat(FF, EMBD))
            w.add_tensor(p + "ffn_up.weight", mat(FF, EMBD))
        w.add_tensor(p + "ffn_down.weight", mat(EMBD, FF))
        if spec.get("post_norms"):
            w.add_tensor(p + "post_ffw_norm.weight", norm(EMBD))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out_dir = sys.argv[2]
    for i, (name, spec) in enumerate(FAMILIES.items()):
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        family_file(name, spec, os.path.join(out_dir, name, "f32.gguf"), np.random.default_rng(1000 + i))
    print(" ".join(FAMILIES))


if __name__ == "__main__":
    main()
