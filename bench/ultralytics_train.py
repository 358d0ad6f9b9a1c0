#!/usr/bin/env python3
"""Ultralytics' YOLOv8 training, the reference side of bench/compare_detect.py.

    YOLO_OFFLINE=1 /tmp/ref/bin/python bench/ultralytics_train.py --data /tmp/scenes/data.yaml \
        --epochs 10 --imgsz 128 --batch 64 --workers 2 --threads 2 --out /tmp/ul

builds the model from yolov8n.yaml (no weights are downloaded), trains with Ultralytics' defaults
(optimizer auto, its warm-up, EMA, augmentation, close_mosaic) and prints one JSON line per epoch
({"event": "epoch", "epoch", "train_seconds": the time between on_train_epoch_start and
on_train_epoch_end, i.e. without validation, "images"}) and one at the end with the last
validation's mAP50-95 and mAP50 (Ultralytics' own validator, on the EMA weights) and the weights
file. --fraction F trains on that share of the training images (a timing run).
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("YOLO_OFFLINE", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="yolov8n.yaml")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--imgsz", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-val", action="store_true", help="validate only after the last epoch")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    import ultralytics
    from ultralytics import YOLO

    model = YOLO(a.model)
    clock = {}

    def on_start(trainer):
        clock["t0"] = time.perf_counter()

    def on_end(trainer):
        n = len(trainer.train_loader.dataset)
        print(json.dumps({"event": "epoch", "epoch": trainer.epoch + 1,
                          "train_seconds": time.perf_counter() - clock["t0"], "images": n}),
              flush=True)

    model.add_callback("on_train_epoch_start", on_start)
    model.add_callback("on_train_epoch_end", on_end)
    t0 = time.perf_counter()
    model.train(data=a.data, epochs=a.epochs, imgsz=a.imgsz, batch=a.batch, workers=a.workers,
                device="cpu", plots=False, project=a.out, name="run", exist_ok=True,
                seed=a.seed, fraction=a.fraction, val=not a.no_val, verbose=False)
    m = model.trainer.metrics or {}
    print(json.dumps({"event": "end", "ultralytics": ultralytics.__version__,
                      "torch": torch.__version__, "threads": a.threads,
                      "wall_seconds": time.perf_counter() - t0,
                      "map50_95": m.get("metrics/mAP50-95(B)"), "map50": m.get("metrics/mAP50(B)"),
                      "weights": str(model.trainer.last)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
