#!/usr/bin/env python3
"""Side-by-side benchmark of detection training: hpcnet against Ultralytics, in one run.

Both train the same YOLO model, --model M (default yolov8n; yolov8n/s/m/l/x or yolo11n/s/m/l/x:
Ultralytics' DetectionModel from M.yaml, hpcnet's model M with the same layers and parameter
names), with Ultralytics' default recipe on the same data, image size, batch, epochs and thread
count, one after the other, each as its own process (wall time and peak RSS from os.wait4,
measured here the same way for both):

  hpcnet       hpcnet train --model M --data DATA --imgsz S --epochs E --batch-size B
                 --threads T --workers W --seed 0 --no-progress --out RUN [--steps N]
               (every other field: Ultralytics' defaults, which hpcnet takes for detect models)
  ultralytics  bench/ultralytics_train.py --model M.yaml --data DATA --epochs E --imgsz S
                 --batch B --workers W --threads T --out RUN [--fraction F]

and prints per side: train s per epoch (the training loop alone: hpcnet's epoch "seconds",
Ultralytics' on_train_epoch_start..end), images/s, peak RSS MB and the final validation mAP50-95
and mAP50 (each tool's own validator on its EMA weights: hpcnet's is pycocotools' COCOeval,
Ultralytics' its own matcher), then the speed ratio (Ultralytics s/epoch / hpcnet s/epoch) and
the memory ratio (hpcnet / Ultralytics peak RSS).

    python3 bench/compare_detect.py --epochs 10               # the issue's recipe (~1-2 h)
    python3 bench/compare_detect.py --fraction 0.1 --epochs 1 # a timing run: 800 images each
    python3 bench/compare_detect.py --only hpcnet --epochs 10 # one side
    python3 bench/compare_detect.py --model yolo11n --fraction 0.1 --epochs 1   # YOLO11n

Defaults: --data /tmp/scenes/data.yaml (make_scenes.py), --imgsz 128, --batch 64, --threads 2,
--workers 2, --hpcnet build/hpcnet (a private copy is run), --python /tmp/ref/bin/python (with
ultralytics installed). Absolute times on a shared machine are noisy; the ratio of one run is
what counts.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# bench/compare.py (beside this file): its process measurement, interpreter discovery and machine
# description are reused here, not copied.
sys.path.insert(0, HERE)
import compare  # noqa: E402


jsonl = compare.read_jsonl
# Named in both tools: hpcnet's registry and Ultralytics' yolov8.yaml / yolo11.yaml scales.
MODELS = [f"yolov8{s}" for s in "nsmlx"] + [f"yolo11{s}" for s in "nsmlx"]


def run_hpcnet(a, work):
    binary = os.path.join(work, "hpcnet")
    shutil.copy2(a.hpcnet, binary)
    run = os.path.join(work, "hpcnet-run")
    cmd = [binary, "train", "--model", a.model, "--data", a.data, "--imgsz", str(a.imgsz),
           "--epochs", str(a.epochs), "--batch-size", str(a.batch), "--threads", str(a.threads),
           "--workers", str(a.workers), "--seed", "0", "--no-progress", "--exist-ok",
           "--out", run]
    if a.fraction < 1:  # the same number of images as Ultralytics' fraction
        n = sum(1 for _ in os.scandir(os.path.join(os.path.dirname(a.data), "images", "train")))
        cmd += ["--steps", str(max(1, int(n * a.fraction) // a.batch))]
    so, se = os.path.join(work, "hpcnet.out"), os.path.join(work, "hpcnet.err")
    rc, wall, rss = compare.run_measured(cmd, compare.thread_env(a.threads), a.timeout, so, se)
    res = {"cmd": cmd, "rc": rc, "wall_seconds": wall, "peak_rss_mb": rss / 1024}
    if rc != 0:
        res["error"] = compare.tail(se) or compare.tail(so)
        return res
    recs = jsonl(os.path.join(run, "metrics.jsonl"))
    epochs = [r for r in recs if r.get("event") == "epoch"]
    end = [r for r in recs if r.get("event") == "end"][-1]
    res["epoch_seconds"] = [r["seconds"] for r in epochs]
    res["images_per_sec"] = end["images_per_sec"]
    res["train_seconds"] = end["train_seconds"]
    # hpcnet writes metrics in percent, Ultralytics prints fractions: compared as fractions.
    frac = lambda v: None if v is None else v / 100
    res["map50_95"] = frac(epochs[-1].get("val_map50_95")) if epochs else None
    res["map50"] = frac(epochs[-1].get("val_map50")) if epochs else None
    if epochs and a.fraction >= 1:  # from eval on the final (EMA) weights
        p = compare.subprocess.run(
            [binary, "eval", "--weights", os.path.join(run, "model.safetensors"), "--data",
             a.data, "--split", "val", "--threads", str(a.threads), "--json"],
            capture_output=True, text=True, env=compare.thread_env(a.threads))
        if p.returncode == 0:
            j = json.loads(p.stdout.strip().splitlines()[-1])
            res["map50"], res["map50_95"] = frac(j["map50"]), frac(j["map50_95"])
    return res


def run_ultralytics(a, work):
    cmd = [a.python, os.path.join(HERE, "ultralytics_train.py"), "--model", a.model + ".yaml",
           "--data", a.data, "--epochs",
           str(a.epochs), "--imgsz", str(a.imgsz), "--batch", str(a.batch), "--workers",
           str(a.workers), "--threads", str(a.threads), "--fraction", str(a.fraction),
           "--out", os.path.join(work, "ul")]
    if a.fraction < 1:
        cmd += ["--no-val"]
    so, se = os.path.join(work, "ul.out"), os.path.join(work, "ul.err")
    env = compare.thread_env(a.threads)
    env["YOLO_OFFLINE"] = "1"
    rc, wall, rss = compare.run_measured(cmd, env, a.timeout, so, se)
    res = {"cmd": cmd, "rc": rc, "wall_seconds": wall, "peak_rss_mb": rss / 1024}
    if rc != 0:
        res["error"] = compare.tail(se) or compare.tail(so)
        return res
    recs = jsonl(so)
    epochs = [r for r in recs if r.get("event") == "epoch"]
    end = [r for r in recs if r.get("event") == "end"][-1]
    res["epoch_seconds"] = [r["train_seconds"] for r in epochs]
    res["train_seconds"] = sum(res["epoch_seconds"])
    res["images_per_sec"] = sum(r["images"] for r in epochs) / res["train_seconds"]
    res["map50_95"], res["map50"] = end.get("map50_95"), end.get("map50")
    res["versions"] = {"ultralytics": end.get("ultralytics"), "torch": end.get("torch")}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="yolov8n", choices=MODELS,
                    help="hpcnet's model of that name against Ultralytics' <model>.yaml")
    ap.add_argument("--data", default="/tmp/scenes/data.yaml")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--imgsz", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--hpcnet", default=os.path.join(ROOT, "build", "hpcnet"))
    ap.add_argument("--python", default="/tmp/ref/bin/python")
    ap.add_argument("--only", choices=["hpcnet", "ultralytics"])
    ap.add_argument("--timeout", type=float, default=6 * 3600)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="compare_detect_")
    compare.log(f"work folder {work}; load average {compare.loadavg()}")
    results = {}
    for side in ("hpcnet", "ultralytics"):
        if a.only and side != a.only:
            continue
        compare.log(f"{side}: training")
        results[side] = (run_hpcnet if side == "hpcnet" else run_ultralytics)(a, work)
        compare.log(f"{side}: exit {results[side]['rc']} in {results[side]['wall_seconds']:.0f} s")
    print(f"\n{a.model} on {a.data}, imgsz {a.imgsz}, batch {a.batch}, {a.epochs} epoch(s)"
          f"{'' if a.fraction >= 1 else f' on {a.fraction:.0%} of the images'}, "
          f"{a.threads} threads")
    print(f"{'side':12} {'s/epoch':>9} {'images/s':>9} {'peak MB':>9} {'mAP50-95':>9} "
          f"{'mAP50':>7}")
    for side, r in results.items():
        if r["rc"] != 0:
            print(f"{side:12} FAILED: {r['error'][-300:]}")
            continue
        per = r["train_seconds"] / max(len(r["epoch_seconds"]), 1)
        r["seconds_per_epoch"] = per
        m = r.get("map50_95")
        m50 = r.get("map50")
        print(f"{side:12} {per:9.1f} {r['images_per_sec']:9.1f} {r['peak_rss_mb']:9.0f} "
              f"{'—' if m is None else f'{m:.4f}':>9} {'—' if m50 is None else f'{m50:.4f}':>7}")
    h, u = results.get("hpcnet", {}), results.get("ultralytics", {})
    if h.get("rc") == 0 and u.get("rc") == 0:
        print(f"speed ratio (Ultralytics s/epoch / hpcnet s/epoch): "
              f"{u['seconds_per_epoch'] / h['seconds_per_epoch']:.2f}")
        print(f"memory ratio (hpcnet / Ultralytics peak RSS): "
              f"{h['peak_rss_mb'] / u['peak_rss_mb']:.2f}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=1)
    return 0 if all(r["rc"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
