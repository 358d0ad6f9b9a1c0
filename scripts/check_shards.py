#!/usr/bin/env python3
"""Reads shards written by `hpcnet shard` with the `webdataset` package and checks them against
their source files: every key 000000000..N-1 present once, in order; each image member holds the
same bytes as the file its KEY.json names; KEY.cls names the class folder the image lies in (an
image folder); KEY.txt holds the rows of the image's YOLO label file (the same boxes to 1e-9);
KEY.mask.png the same bytes as its mask (images/S/X -> masks/S/X.png, or VOC's
JPEGImages/X.jpg -> SegmentationClass/X.png). Exit 0 when all holds, 1 otherwise.

  python3 -m venv /tmp/wds && /tmp/wds/bin/pip install webdataset
  /tmp/wds/bin/python scripts/check_shards.py 'OUT/train-{000000..000003}.tar' [--root DIR]

Run it from the folder `hpcnet shard` ran in (KEY.json's source paths are as hpcnet saw them),
or give that folder as --root. Sources inside an archive ("ARCHIVE:member") are read from it.
"""
import argparse
import json
import os
import sys
import tarfile

import webdataset as wds

IMAGE_EXTS = ("jpg", "jpeg", "png")


def read_source(root, source):
    """The bytes of a source file: a path, or ARCHIVE:member for files inside a tar."""
    path = os.path.join(root, source)
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    archive, _, member = source.rpartition(":")
    with tarfile.open(os.path.join(root, archive)) as t:
        for m in t.getmembers():
            if m.name.lstrip("./") == member or m.name == member:
                return t.extractfile(m).read()
    raise FileNotFoundError(source)


def yolo_boxes(text):
    """Rows as (class, x1, y1, x2, y2) normalised corners, duplicates dropped, as hpcnet reads."""
    out = []
    for line in text.splitlines():
        v = line.split()
        if not v:
            continue
        c, cx, cy, w, h = int(float(v[0])), *map(float, v[1:5])
        if len(v) > 5:  # a polygon: its bounding box
            xs, ys = list(map(float, v[1::2])), list(map(float, v[2::2]))
            box = (c, min(xs), min(ys), max(xs), max(ys))
        else:
            clamp = lambda t: min(max(t, 0.0), 1.0)
            box = (c, clamp(cx - w / 2), clamp(cy - h / 2), clamp(cx + w / 2), clamp(cy + h / 2))
        if box not in out:
            out.append(box)
    return out


def label_path(image_path):
    parts = image_path.split("/")
    for k in range(len(parts) - 2, -1, -1):
        if parts[k] == "images":
            parts[k] = "labels"
            break
    return os.path.splitext("/".join(parts))[0] + ".txt"


def mask_path(image_path):
    parts = image_path.split("/")
    if "JPEGImages" in parts:
        k = len(parts) - 1 - parts[::-1].index("JPEGImages")
        parts[k] = "SegmentationClass"
    else:
        k = len(parts) - 1 - parts[::-1].index("images")
        parts[k] = "masks"
    return os.path.splitext("/".join(parts))[0] + ".png"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shards", help="the shards: a brace pattern, as hpcnet shard printed it")
    ap.add_argument("--root", default=".", help="the folder hpcnet shard ran in")
    ap.add_argument("--classes", help="classes.txt (default: beside the shards)")
    a = ap.parse_args()
    classes_file = a.classes or os.path.join(os.path.dirname(a.shards), "classes.txt")
    classes = open(classes_file).read().splitlines()
    ds = wds.WebDataset(a.shards, shardshuffle=False)
    problems, n, counts = [], 0, {"image": 0, "cls": 0, "txt": 0, "mask.png": 0}
    shards = set()
    for sample in ds:
        key = sample["__key__"]
        shards.add(sample["__url__"])
        if key != f"{n:09d}":
            problems.append(f"sample {n}: key {key}, expected {n:09d}")
        n += 1
        images = [e for e in IMAGE_EXTS if e in sample]
        if len(images) != 1 or "json" not in sample:
            problems.append(f"{key}: members {sorted(k for k in sample if not k.startswith('__'))}")
            continue
        source = json.loads(sample["json"])["source"]
        if sample[images[0]] != read_source(a.root, source):
            problems.append(f"{key}.{images[0]}: bytes differ from {source}")
        else:
            counts["image"] += 1
        if "cls" in sample:
            c = int(sample["cls"])
            if c >= len(classes) or classes[c] not in source.replace(":", "/").split("/"):
                problems.append(f"{key}.cls = {c}, but {source} is not in a folder of that class")
            else:
                counts["cls"] += 1
        if "txt" in sample:
            src = label_path(source)
            want = yolo_boxes(read_source(a.root, src).decode()) if os.path.exists(
                os.path.join(a.root, src)) else []
            got = yolo_boxes(sample["txt"].decode())
            same = len(want) == len(got) and all(
                w[0] == g[0] and all(abs(x - y) < 1e-9 for x, y in zip(w[1:], g[1:]))
                for w, g in zip(want, got))
            if not same:
                problems.append(f"{key}.txt: rows {got} differ from {src}: {want}")
            else:
                counts["txt"] += 1
        if "mask.png" in sample:
            src = mask_path(source)
            if sample["mask.png"] != read_source(a.root, src):
                problems.append(f"{key}.mask.png: bytes differ from {src}")
            else:
                counts["mask.png"] += 1
    for p in problems[:20]:
        print("check_shards: " + p)
    targets = ", ".join(f"{v} .{k}" for k, v in counts.items() if k != "image" and v)
    print(f"check_shards: {n} samples in {len(shards)} shards read by webdataset "
          f"{getattr(wds, '__version__', '?')}: keys 000000000..{n - 1:09d} in order; "
          f"{counts['image']} images byte-identical to their source files; {targets} match; "
          f"{len(problems)} problems")
    return 1 if problems or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
