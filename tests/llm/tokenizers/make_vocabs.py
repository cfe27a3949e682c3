#!/usr/bin/python3
"""Vocabulary-only GGUFs for the tokenizer tests: SmolLM2's byte-level BPE
vocabulary and merges under the pre-tokenizers of other families
(tokenizer.ggml.pre = llama-bpe, as Llama 3 files name it, qwen2 and
Mistral's tekken), with
the few llama.* keys llama.cpp reads before it reads a vocabulary. Written
by the `gguf` package; llama.cpp's tokenization of each is the reference.
usage: make_vocabs.py GGUF_PACKAGE_DIR SMOLLM2_GGUF OUT_DIR"""
import os
import sys

sys.path.insert(0, sys.argv[1])
import gguf  # noqa: E402

# Whole words added to tekken's vocabulary: with ignore_merges a word that is
# a token comes out whole, so these make its case runs' splits visible
# ("ÉCOLE" must split as É | COLE, "HTTPServer" must not split).
TEKKEN_WORDS = ["ÉCOLE", "COLE", "ÉC", "OLE", "ÀB", "HTTPServer", "HTTPS", "Server", "ÉCase", "Case", "mixed",
                "ÑOÑO", "ÑO", "OÑO", "ÉCOLE", "École", "cole", "éCOLE"]


def bytes_to_unicode():
    """GPT-2's printable spelling of each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


SOURCE_KEYS = ["tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
               "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"]


def main():
    r = gguf.GGUFReader(sys.argv[2])
    os.makedirs(sys.argv[3], exist_ok=True)
    for pre in ("llama-bpe", "qwen2", "tekken"):
        w = gguf.GGUFWriter(os.path.join(sys.argv[3], pre + ".gguf"), "llama")
        for key, value in (("block_count", 1), ("context_length", 64), ("embedding_length", 64),
                           ("feed_forward_length", 64), ("attention.head_count", 1)):
            w.add_uint32("llama." + key, value)
        w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", pre)
        tokens = list(r.fields["tokenizer.ggml.tokens"].contents())
        types = list(r.fields["tokenizer.ggml.token_type"].contents())
        if pre == "tekken":
            spell = bytes_to_unicode()
            for word in TEKKEN_WORDS:
                spelled = "".join(spell[b] for b in word.encode("utf-8"))
                if spelled not in tokens:
                    tokens.append(spelled)
                    types.append(1)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(r.fields["tokenizer.ggml.merges"].contents())
        w.add_bos_token_id(r.fields["tokenizer.ggml.bos_token_id"].contents())
        w.add_eos_token_id(r.fields["tokenizer.ggml.eos_token_id"].contents())
        w.add_add_bos_token(False)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


if __name__ == "__main__":
    main()
