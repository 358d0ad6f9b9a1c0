#!/usr/bin/env python3
"""Checks a run directory's TensorBoard event files against its metrics.jsonl, with TensorBoard's
own reader (EventAccumulator): every scalar tag that metrics.jsonl implies (docs/metrics.md: log
records' loss -> train/loss; epoch records' train_loss -> train/epoch_loss, val_loss -> val/loss,
val_X -> val/X, lr -> lr, images_per_sec -> images_per_sec) must be there with the same number of
events, the same global steps and wall times, and the same values as float32; and no other tag.

Run by hand (needs the tensorboard package):
    /tmp/ref/bin/python tests/tensorboard/check_events.py RUNDIR
Exit 0 when everything matches, 1 on a mismatch, 2 on bad usage. TensorBoard drops events whose
step goes backwards (a run resumed from a checkpoint older than its last log line): such a run
can mismatch for that reason alone.
"""
import json
import math
import os
import struct
import sys


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(metrics_path):
    """{tag: [(step, wall_time, value)]} in file order, by the mapping of docs/metrics.md."""
    out = {}

    def add(rec, key, tag):
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return
        out.setdefault(tag, []).append((rec["global_step"], rec["time"], float(v)))

    with open(metrics_path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            ev = rec.get("event")
            if ev == "log":
                add(rec, "loss", "train/loss")
            elif ev == "epoch":
                add(rec, "train_loss", "train/epoch_loss")
                add(rec, "val_loss", "val/loss")
                for key in rec:
                    if key.startswith("val_") and key != "val_loss":
                        add(rec, key, "val/" + key[4:])
                add(rec, "lr", "lr")
                add(rec, "images_per_sec", "images_per_sec")
    return out


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: check_events.py RUNDIR (a run directory of hpcnet train)", file=sys.stderr)
        return 2
    run = argv[1]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(f for f in os.listdir(run) if "tfevents" in f)
    if not files:
        print(f"{run}: no events.out.tfevents.* file", file=sys.stderr)
        return 1
    acc = EventAccumulator(run, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    got_tags = set(acc.Tags()["scalars"])
    want = expected_scalars(os.path.join(run, "metrics.jsonl"))
    print(f"{run}: {len(files)} event file(s): {', '.join(files)}")
    bad = 0
    for tag in sorted(set(want) | got_tags):
        w = want.get(tag, [])
        g = [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] if tag in got_tags else []
        problems = []
        if len(w) != len(g):
            problems.append(f"{len(g)} events, metrics.jsonl has {len(w)}")
        for i, ((ws, wt, wv), (gs, gt, gv)) in enumerate(zip(w, g)):
            if ws != gs:
                problems.append(f"event {i}: step {gs}, metrics.jsonl {ws}")
            if abs(wt - gt) > 1e-6:
                problems.append(f"event {i}: wall_time {gt}, metrics.jsonl {wt}")
            if f32(wv) != gv and abs(f32(wv) - gv) > 1e-6 * max(1.0, abs(wv)):
                problems.append(f"event {i}: value {gv!r}, metrics.jsonl {wv!r}")
        if problems:
            bad += 1
            print(f"  MISMATCH {tag}: " + "; ".join(problems[:5]))
        else:
            steps = [s for s, _, _ in g]
            print(f"  ok {tag:20s} {len(g):4d} events, steps {steps[0]}..{steps[-1]}, "
                  f"last value {g[-1][2]:.6g}")
    if bad:
        print(f"FAILED: {bad} tag(s) differ from metrics.jsonl")
        return 1
    print(f"OK: {len(want)} tags, {sum(len(v) for v in want.values())} scalar events match "
          f"metrics.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
