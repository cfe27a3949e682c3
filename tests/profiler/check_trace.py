"""Runs a program with TF_PROFILE and checks what tf_shutdown wrote: the
trace is JSON that Chrome and Perfetto read (complete "X" events with the
fields the header promises; events of one track never overlap), and the
summary table counts the same ops.  usage: check_trace.py PROGRAM [ARGS...]"""
import json
import os
import subprocess
import sys
import tempfile

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "run.json")
    env = dict(os.environ, TF_PROFILE=path)
    subprocess.run(sys.argv[1:], env=env, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        trace = json.load(f)
    with open(path + ".txt") as f:
        table = f.read()

events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
assert events, "no op was recorded"
for e in events:
    for key in ("name", "ts", "dur", "pid", "tid"):
        assert key in e, f"event without {key}: {e}"
    args = e["args"]
    for key in ("call", "device", "stream", "operands", "bytes", "fallback", "status", "execution_us"):
        assert key in args, f"{e['name']}: no {key} in args"
    assert e["dur"] >= 0 and args["bytes"] >= 0 and "->" in args["operands"]
    assert e["tid"] in names, f"track {e['tid']} has no name"
by_track = {}
for e in events:
    by_track.setdefault(e["tid"], []).append(e)
for tid, evs in by_track.items():
    evs.sort(key=lambda e: e["ts"])
    for a, b in zip(evs, evs[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, f"{names[tid]}: {a['name']} overlaps {b['name']}"
total = f"{len(events)} ops,"
assert total in table, f"the summary does not say '{total}':\n{table}"

# tools/tf-profile-plot draws one bar per (op, device).
plot = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "tf-profile-plot")
with tempfile.TemporaryDirectory() as tmp:
    trace_path, svg_path = os.path.join(tmp, "t.json"), os.path.join(tmp, "t.svg")
    with open(trace_path, "w") as f:
        json.dump(trace, f)
    subprocess.run([sys.executable, plot, trace_path, svg_path], check=True, stdout=subprocess.DEVNULL)
    with open(svg_path) as f:
        drawing = f.read()
bars = len({(e["name"], e["args"]["device"]) for e in events})
assert drawing.startswith("<svg") and drawing.count("<rect") == bars, f"{drawing.count('<rect')} bars, want {bars}"
print(f"{len(events)} events on {len(by_track)} tracks; summary:\n{table}")
