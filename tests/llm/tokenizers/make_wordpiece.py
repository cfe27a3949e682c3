#!/usr/bin/python3
"""WordPiece fixtures: the `tokenizers` package's ids (all-MiniLM-L6-v2's own
tokenizer.json, special tokens added) for each string of CASES, one line
each: the string's bytes in hex, a tab, the ids.
usage: make_wordpiece.py TOKENIZER_JSON CASES > wordpiece.tsv"""
import sys

from tokenizers import Tokenizer


def unescape(line):
    out, i = bytearray(), 0
    raw = line.encode("utf-8")
    while i < len(raw):
        c = raw[i:i + 1]
        if c != b"\\" or i + 1 >= len(raw):
            out += c
            i += 1
            continue
        n = raw[i + 1:i + 2]
        if n == b"x":
            out.append(int(raw[i + 2:i + 4], 16))
            i += 4
            continue
        out += {b"n": b"\n", b"t": b"\t", b"r": b"\r"}.get(n, n)
        i += 2
    return bytes(out)


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    tok.no_padding()          # the model's file pads to 128 and truncates: ids only
    tok.no_truncation()
    for line in open(sys.argv[2], encoding="utf-8").read().split("\n"):
        if not line:
            continue
        text = unescape(line)
        try:
            s = text.decode("utf-8")
        except UnicodeDecodeError:
            continue            # the package takes str only
        ids = tok.encode(s).ids
        print(text.hex() + "\t" + " ".join(map(str, ids)))


main()
