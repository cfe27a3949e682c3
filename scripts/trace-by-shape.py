#!/usr/bin/env python3
"""Sum a TF_PROFILE trace by (op, operands): calls, total and mean time.

usage: trace-by-shape.py TRACE.json [TOP]

Under CUDA_LAUNCH_BLOCKING=1 (or any synchronous device) an op's span is
its execution, so the table says where a model's device time goes; on an
asynchronous device it is only the time to queue the op.
"""
import json
import sys
from collections import defaultdict


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    groups = defaultdict(lambda: [0, 0.0])
    for e in events:
        g = groups[(e["name"], e["args"].get("operands", ""))]
        g[0] += 1
        g[1] += e["dur"]
    total = sum(g[1] for g in groups.values()) or 1.0
    print(f"{len(events)} ops, {total / 1e3:.3f} ms in ops")
    print(f"{'op':16} {'calls':>7} {'total ms':>9} {'mean us':>9} {'share':>6}  operands")
    for (name, operands), (calls, us) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{name:16} {calls:7d} {us / 1e3:9.3f} {us / calls:9.2f} {100 * us / total:5.1f}%  {operands}")


if __name__ == "__main__":
    main()
