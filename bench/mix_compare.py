#!/usr/bin/python3
"""Every SmolLM2 quant mix (scripts/llama-fixtures.sh BUILD_DIR --mixes makes
them with llama-quantize) end to end: tensorframe's runner (examples/llm
--bench 1) and llama-bench (-r 1) from the same machine's llama.cpp build
in alternating pairs, the same thread count, pp512 and tg128 as tokens/s
(median of the rounds) and the ratio (above 1: tensorframe is faster).
usage: bench/mix_compare.py BUILD_DIR [--rounds N] [--threads 1,2] [--mixes A,B] [--svg PATH] [--md PATH]
Run it on a quiet machine (no build or test beside it)."""
import argparse
import json
import os
import statistics
import subprocess

MIXES = ("Q4_K_M", "Q5_K_M", "Q3_K_M", "Q2_K", "Q2_K-down", "IQ4_XS", "Q5_0", "Q5_1", "Q8_0")
TESTS = ("pp512", "tg128")

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--threads", default="1,2")
ap.add_argument("--mixes", default=",".join(MIXES))
ap.add_argument("--svg")
ap.add_argument("--md")
args = ap.parse_args()


def model(mix):
    return f"{args.build}/models/mixes/SmolLM2-135M-Instruct.{mix}.gguf"


def llama_cpp(mix, threads):
    out = subprocess.run([f"{args.build}/peers/llama-build/bin/llama-bench", "-m", model(mix), "-p", "512", "-n", "128",
                          "-t", str(threads), "-r", "1", "-o", "json"], check=True, capture_output=True, text=True).stdout
    return {(f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"): r["avg_ts"] for r in json.loads(out)}


def tensorframe(mix, threads):
    env = dict(os.environ, TF_NUM_THREADS=str(threads))
    out = subprocess.run([f"{args.build}/bin/llm", model(mix), "--device", "cpu", "--bench", "1"],
                         check=True, capture_output=True, text=True, env=env).stdout
    return {line.split("\t")[0]: float(line.split("\t")[1]) for line in out.splitlines()[1:]}


def svg(results, path):
    """Ratio bars per mix, one group per (test, threads); 1.0 drawn across."""
    keys = [(t, th) for th in threads_list for t in TESTS]
    mixes = list(results)
    bw, gap = 9, 14
    w = 70 + len(mixes) * (len(keys) * bw + gap)
    h, base, scale = 300, 250, 100
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10">',
             '<text x="10" y="16" font-size="12">SmolLM2-135M quant mixes on the CPU: tensorframe / llama.cpp '
             f'(tokens/s ratio, median of {args.rounds} alternating pairs)</text>']
    colors = ["#2b6cb0", "#90cdf4", "#b7791f", "#f6e05e"]
    for i, mix in enumerate(mixes):
        x0 = 60 + i * (len(keys) * bw + gap)
        for j, k in enumerate(keys):
            ours, peer = results[mix][k]
            r = ours / peer
            parts.append(f'<rect x="{x0 + j * bw}" y="{base - r * scale:.1f}" width="{bw - 1}" height="{r * scale:.1f}" '
                         f'fill="{colors[j % 4]}"/>')
        parts.append(f'<text x="{x0}" y="{base + 14}" font-size="9">{mix}</text>')
    parts.append(f'<line x1="50" y1="{base - scale}" x2="{w - 5}" y2="{base - scale}" stroke="red" stroke-dasharray="4"/>')
    parts.append(f'<text x="5" y="{base - scale + 4}">1.0x</text>')
    parts.append(f'<line x1="50" y1="{base}" x2="{w - 5}" y2="{base}" stroke="black"/>')
    for j, (t, th) in enumerate(keys):
        parts.append(f'<rect x="{60 + 110 * j}" y="{h - 22}" width="10" height="10" fill="{colors[j % 4]}"/>'
                     f'<text x="{75 + 110 * j}" y="{h - 13}">{t}, {th} thread{"s" if th > 1 else ""}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


threads_list = [int(t) for t in args.threads.split(",")]
results = {}
for mix in args.mixes.split(","):
    results[mix] = {}
    for threads in threads_list:
        ours_runs, peer_runs = [], []
        for _ in range(args.rounds):               # alternating pairs: the machine's drift hits both
            peer_runs.append(llama_cpp(mix, threads))
            ours_runs.append(tensorframe(mix, threads))
        for t in TESTS:
            ours = statistics.median(r[t] for r in ours_runs)
            peer = statistics.median(r[t] for r in peer_runs)
            results[mix][(t, threads)] = (ours, peer)
            print(f"{mix:10} {t:6} {threads} thr  tensorframe {ours:8.1f}  llama.cpp {peer:8.1f}  ratio {ours / peer:5.2f}",
                  flush=True)
if args.md:
    with open(args.md, "w") as f:
        cols = [(t, th) for th in threads_list for t in TESTS]
        f.write("| mix | " + " | ".join(f"{t} {th}T (ours / llama.cpp, t/s)" for t, th in cols) + " |\n")
        f.write("|---|" + "---|" * len(cols) + "\n")
        for mix, row in results.items():
            f.write(f"| {mix} | " + " | ".join(f"{row[k][0]:.0f} / {row[k][1]:.0f} = **{row[k][0] / row[k][1]:.2f}x**"
                                            for k in cols) + " |\n")
if args.svg:
    svg(results, args.svg)
