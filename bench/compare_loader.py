#!/usr/bin/env python3
"""Side-by-side benchmark of the input pipeline alone: hpcnet's DataLoader against torchvision's
ImageFolder + DataLoader, in one run, on the same files, transforms and worker count.

  hpcnet       hpcnet bench --loader --data DATA --imgsz S --augment imagenet --workers W
                 --batch-size B --threads W --epochs E --json
               (RandomResizedCrop(S, scale=(0.08, 1), ratio=(3/4, 4/3)) + RandomHorizontalFlip +
               ToTensor + Normalize(ImageNet), decoded, augmented and batched into float tensors
               by W threads)
  torchvision  ImageFolder(DATA/train, transforms.Compose([RandomResizedCrop(S),
                 RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet)])) through
               DataLoader(batch_size=B, shuffle=True, num_workers=W), torch.set_num_threads(1) in
               each worker (the default)

Each side runs as its own process, one after the other; each reads every image of the training
split once per epoch and the last epoch is timed (the first, with --epochs 2, warms the page
cache for both). Prints images/s per side, hpcnet's peak RSS and the ratio hpcnet / torchvision.

    python3 bench/compare_loader.py --data /tmp/photos            # make_photos.py --images 2000
    python3 bench/compare_loader.py --data /tmp/photos --workers 2 --imgsz 224 --epochs 2

Defaults: --imgsz 224, --batch 64, --workers 2, --epochs 2, --hpcnet build/hpcnet,
--python /tmp/ref/bin/python (with torch and torchvision installed).
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TORCHVISION_SIDE = r"""
import json, sys, time, torch
from torchvision import datasets, transforms
data, imgsz, batch, workers, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tf = transforms.Compose([transforms.RandomResizedCrop(imgsz), transforms.RandomHorizontalFlip(),
                         transforms.ToTensor(),
                         transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = datasets.ImageFolder(data + "/train", transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0)
for e in range(epochs):
    t0 = time.perf_counter(); n = 0
    for x, y in loader:
        n += x.shape[0]
    s = time.perf_counter() - t0
print(json.dumps({"images": n, "seconds": s, "images_per_sec": n / s}))
"""


def run(cmd):
    """Runs cmd and returns its standard output."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"compare_loader: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="an image folder with train/<class>/ images")
    ap.add_argument("--imgsz", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2, help="passes; the last one is timed")
    ap.add_argument("--hpcnet", default=os.path.join(ROOT, "build", "hpcnet"))
    ap.add_argument("--python", default="/tmp/ref/bin/python")
    ap.add_argument("--json-out", help="also write the results as JSON here")
    a = ap.parse_args()

    h_out = run([a.hpcnet, "bench", "--loader", "--data", a.data, "--imgsz", str(a.imgsz),
                        "--augment", "imagenet", "--workers", str(a.workers), "--batch-size",
                        str(a.batch), "--threads", str(max(a.workers, 1)), "--epochs",
                        str(a.epochs), "--json"])
    h = json.loads(h_out.strip().splitlines()[-1])
    t_out = run([a.python, "-c", TORCHVISION_SIDE, a.data, str(a.imgsz), str(a.batch),
                        str(a.workers), str(a.epochs)])
    t = json.loads(t_out.strip().splitlines()[-1])
    ratio = h["images_per_sec"] / t["images_per_sec"]
    print(f"input pipeline, {h['images']} images of {a.data}, RandomResizedCrop({a.imgsz}) + flip "
          f"+ normalise, batch {a.batch}, {a.workers} workers, epoch {a.epochs} of {a.epochs}")
    print(f"  hpcnet       {h['images_per_sec']:8.1f} images/s  ({h['seconds']:.2f} s)")
    print(f"  torchvision  {t['images_per_sec']:8.1f} images/s  ({t['seconds']:.2f} s)")
    print(f"  hpcnet peak RSS {h['peak_rss_mb']:.0f} MB (one process)")
    print(f"ratio: {ratio:.2f}x torchvision's images/s")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"hpcnet": h, "torchvision": t, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
