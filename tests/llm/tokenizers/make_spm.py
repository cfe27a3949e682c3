#!/usr/bin/python3
"""A SentencePiece vocabulary for the tokenizer tests: trained by the
`sentencepiece` package (BPE with byte fallback, as Llama 2, Mistral and
Gemma's are) on a small text (this repository's README and ARCHITECTURE,
and a few lines in other scripts: the docs change, so a regenerated
vocabulary differs and its spm.tsv is rewritten with it), then written as GGUF tokenizer
metadata the way llama.cpp's converter writes it (tokenizer.ggml.model
"llama": pieces, scores, types with byte pieces as type 6), with the few
llama.* keys llama.cpp reads before a vocabulary. Two user-defined pieces
(<start_of_turn>, <end_of_turn>) stand for a chat format's markers.
usage: make_spm.py REPO_ROOT GGUF_PACKAGE_DIR OUT.gguf"""
import os
import sys
import tempfile

import sentencepiece as spm

sys.path.insert(0, sys.argv[2])
import gguf  # noqa: E402

LINES = ["Café, naïve, résumé, façade, Ærøskøbing, Ångström, São Paulo.",
         "Ελληνικά κείμενα και Кириллица тоже работает.",
         "日本語のテキストと中文文本，还有한국어 텍스트。",
         "The quick brown fox jumps over the lazy dog. 0123456789"]


def main():
    root, out = sys.argv[1], sys.argv[3]
    text = "".join(open(os.path.join(root, p), encoding="utf-8").read() for p in ("README.md", "docs/ARCHITECTURE.md"))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(text + "\n" + "\n".join(LINES * 20) + "\n")
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=1000,
                                       byte_fallback=True, character_coverage=0.9995, num_threads=1,
                                       user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
                                       split_digits=True, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        tokens, scores, types = [], [], []
        for i in range(sp.vocab_size()):
            piece = sp.id_to_piece(i)
            tokens.append(piece.encode("utf-8"))
            scores.append(sp.get_score(i))
            t = gguf.TokenType.NORMAL
            if sp.is_unknown(i):
                t = gguf.TokenType.UNKNOWN
            elif sp.is_control(i):
                t = gguf.TokenType.CONTROL
            elif sp.is_unused(i):
                t = gguf.TokenType.UNUSED
            elif sp.is_byte(i):
                t = gguf.TokenType.BYTE
            elif piece in ("<start_of_turn>", "<end_of_turn>"):
                t = gguf.TokenType.USER_DEFINED
            types.append(t)
    w = gguf.GGUFWriter(out, "llama")
    for key, value in (("block_count", 1), ("context_length", 64), ("embedding_length", 64),
                       ("feed_forward_length", 64), ("attention.head_count", 1)):
        w.add_uint32("llama." + key, value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
