# Writes tests/golden/coco_dataset_fixture.json: small COCO datasets (images with their sizes,
# annotations with iscrowd and area) whose ground truth pycocotools keeps but cannot match as usual
# (crowd regions, zero-size boxes), images without ground truth or without detections, categories
# absent from one side or both, with detections and pycocotools' COCOeval(iouType="bbox") results.
# tests/task/detect/test_detect.cpp reads each case through hpcnet's COCO reader, loader and metric.
#
# Coordinates and areas are multiples of 1/4 and the images 160x120 or 120x160, so a box is exact
# in float32 and through a letterbox to 320 and back (scale 2): the C++ side sees pycocotools' own
# boxes. Run by hand from the repository root, in a venv with numpy and pycocotools:
#     /tmp/ref/bin/python tests/golden/make_coco_dataset_cases.py
import json
import os
import sys

import numpy as np
import pycocotools

from make_coco_eval import coco_eval, per_class_ap

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coco_dataset_fixture.json")


def q(v):
    """v rounded to a multiple of 1/4 (exact in float32 for these sizes)."""
    return float(round(float(v) * 4) / 4)


class Case:
    def __init__(self, name, seed, categories):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.categories = categories
        self.images, self.gts, self.dts = [], [], []

    def image(self, portrait=False):
        """A new image (ids from 1, with a gap: 2, 3, 5, ...), 160x120 or 120x160."""
        img_id = len(self.images) + 1 + (1 if len(self.images) >= 3 else 0)
        w, h = (120, 160) if portrait else (160, 120)
        self.images.append({"id": img_id, "width": w, "height": h})
        return img_id, w, h

    def box(self, w_img, h_img, lo, hi):
        w, h = q(self.rng.uniform(lo, hi)), q(self.rng.uniform(lo, hi))
        w, h = min(w, w_img), min(h, h_img)
        return [q(self.rng.uniform(0, w_img - w)), q(self.rng.uniform(0, h_img - h)), w, h]

    def gt(self, img, cat, box, crowd=0, area=None):
        if area is None:
            area = box[2] * box[3]
        self.gts.append({"image_id": img, "category_id": cat, "bbox": box, "area": q(area),
                         "iscrowd": crowd})

    def dt(self, img, cat, box, score=None):
        if score is None:
            score = round(float(self.rng.uniform(0.05, 1.0)), 2)  # 2 decimals: ties
        self.dts.append({"image_id": img, "category_id": cat, "bbox": box, "score": score})

    def near(self, box, amount, w_img, h_img):
        """box moved and resized by up to `amount` of its size, inside the image, w and h >= 1."""
        x, y, w, h = box
        dx, dy, dw, dh = self.rng.uniform(-amount, amount, size=4)
        nw, nh = q(max(1.0, w * (1 + dw))), q(max(1.0, h * (1 + dh)))
        nx = q(min(max(0.0, x + dx * max(w, 1)), w_img - nw))
        ny = q(min(max(0.0, y + dy * max(h, 1)), h_img - nh))
        return [nx, ny, nw, nh]

    def inside(self, box, frac_lo, frac_hi):
        """A box inside box, each side frac_lo..frac_hi of box's."""
        x, y, w, h = box
        bw, bh = q(w * self.rng.uniform(frac_lo, frac_hi)), q(h * self.rng.uniform(frac_lo, frac_hi))
        return [q(x + self.rng.uniform(0, w - bw)), q(y + self.rng.uniform(0, h - bh)), bw, bh]

    def regular(self, img, w, h, cat, found_p=0.8):
        """A non-crowd object of a random size class, found (a jittered detection) with found_p."""
        lo, hi = [(4, 30), (34, 90), (96, 118)][int(self.rng.choice(3, p=[0.45, 0.4, 0.15]))]
        b = self.box(w, h, lo, hi)
        area = b[2] * b[3] * (self.rng.uniform(0.5, 1.0) if self.rng.random() < 0.3 else 1.0)
        self.gt(img, cat, b, area=area)
        if self.rng.random() < found_p:
            self.dt(img, cat, self.near(b, float(self.rng.choice([0.05, 0.15, 0.35])), w, h))
        return b

    def false_positive(self, img, w, h, cat):
        self.dt(img, cat, self.box(w, h, 4, 80), round(float(self.rng.uniform(0.05, 0.9)), 2))

    def as_dict(self):
        return {"name": self.name, "images": [im["id"] for im in self.images],
                "categories": self.categories, "gts": self.gts, "dts": self.dts}


def crowd_case():
    """Crowd regions with detections inside (ignored), overlapping them partly (intersection over
    the detection's area decides), several regions on one image, an image whose only ground truth
    is crowd, a crowd region of a category without other ground truth on its image; category 5
    has detections only, category 7 nothing."""
    c = Case("crowd", 21, [1, 2, 4, 5, 7])
    for n in range(12):
        img, w, h = c.image(portrait=n % 4 == 3)
        only_crowd = n == 6
        for _ in range(0 if only_crowd else int(c.rng.integers(1, 5))):
            c.regular(img, w, h, int(c.rng.choice([1, 2, 4])))
        for _ in range(int(c.rng.integers(1, 3))):
            cat = int(c.rng.choice([1, 2, 4]))
            region = c.box(w, h, 40, 110)
            c.gt(img, cat, region, crowd=1, area=region[2] * region[3] * 0.7)
            for _ in range(int(c.rng.integers(0, 4))):  # inside: IoU 1 with the region
                c.dt(img, cat, c.inside(region, 0.2, 0.5))
            if c.rng.random() < 0.6:  # straddling: crowd IoU = intersection / detection area
                c.dt(img, cat, c.near(region, 0.6, w, h))
        for _ in range(int(c.rng.integers(0, 3))):
            c.false_positive(img, w, h, int(c.rng.choice([1, 2, 4, 5])))
    return c


def zero_size_case():
    """Boxes of zero width or height (area 0, or a segmentation's area in each range) among
    ordinary ones; detections on and around them (IoU 0: false positives); category 3's only
    ground truths are zero-size."""
    c = Case("zero_size", 22, [1, 2, 3])
    for n in range(10):
        img, w, h = c.image(portrait=n % 5 == 4)
        for _ in range(int(c.rng.integers(1, 5))):
            c.regular(img, w, h, int(c.rng.choice([1, 2])))
        for k in range(int(c.rng.integers(1, 3))):
            cat = int(c.rng.choice([1, 2, 3]))
            b = c.box(w, h, 3, 60)
            if k % 2 == 0:
                b[2] = 0.0
            else:
                b[3] = 0.0
            area = float(c.rng.choice([0.0, 0.0, 500.0, 2000.0, 12000.0]))
            c.gt(img, cat, b, area=area)
            if c.rng.random() < 0.7:  # a detection where the object would be
                c.dt(img, cat, [b[0], b[1], max(b[2], 4.0), max(b[3], 4.0)])
        c.false_positive(img, w, h, int(c.rng.choice([1, 2, 3])))
    return c


def empty_case():
    """Images without ground truth (with and without detections: false positives), images with
    ground truth and no detection, category 2 without detections, 3 without ground truth, 9
    without either; a crowd region and a zero-size box on images otherwise empty."""
    c = Case("empty_and_undetected", 23, [1, 2, 3, 9])
    for n in range(10):
        img, w, h = c.image(portrait=n == 7)
        kind = n % 5
        if kind == 0:  # no ground truth, detections
            for _ in range(3):
                c.false_positive(img, w, h, int(c.rng.choice([1, 3])))
        elif kind == 1:  # nothing at all
            pass
        elif kind == 2:  # ground truth, no detection
            for _ in range(3):
                c.regular(img, w, h, int(c.rng.choice([1, 2])), found_p=0.0)
        elif kind == 3:  # found and missed
            for _ in range(4):
                cat = int(c.rng.choice([1, 2]))
                c.regular(img, w, h, cat, found_p=0.9 if cat == 1 else 0.0)
            c.false_positive(img, w, h, 3)
        else:  # a crowd region and a zero-size box alone
            region = c.box(w, h, 40, 100)
            c.gt(img, 1, region, crowd=1)
            c.dt(img, 1, c.inside(region, 0.3, 0.6))
            c.gt(img, 2, [q(w / 2), q(h / 3), 0.0, 12.0], area=0.0)
    return c


def no_detections_case():
    """Ordinary, crowd and zero-size ground truth and no detection at all."""
    c = Case("no_detections", 24, [1, 2])
    for n in range(5):
        img, w, h = c.image(portrait=n == 2)
        for _ in range(int(c.rng.integers(0, 4))):
            c.regular(img, w, h, int(c.rng.choice([1, 2])), found_p=0.0)
        if n % 2 == 0:
            c.gt(img, 1, c.box(w, h, 40, 100), crowd=1)
        if n % 2 == 1:
            c.gt(img, 2, [q(w / 3), q(h / 2), 20.0, 0.0], area=0.0)
    return c


def only_crowd_case():
    """Every ground truth a crowd region: no category has ground truth that counts (every stat
    -1), though detections fall inside the regions and outside."""
    c = Case("only_crowd", 25, [1, 2])
    for n in range(4):
        img, w, h = c.image()
        region = c.box(w, h, 40, 100)
        c.gt(img, 1 + n % 2, region, crowd=1)
        c.dt(img, 1 + n % 2, c.inside(region, 0.3, 0.6))
        c.false_positive(img, w, h, 1)
    return c


def main():
    cases = [crowd_case(), zero_size_case(), empty_case(), no_detections_case(), only_crowd_case()]
    out_cases = []
    for case in cases:
        d = case.as_dict()
        E, stats = coco_eval(d)
        ap50, ap = per_class_ap(E)
        crowd = sum(g["iscrowd"] for g in case.gts)
        zero = sum(1 for g in case.gts if not g["iscrowd"] and (g["bbox"][2] == 0 or
                                                               g["bbox"][3] == 0))
        print(f"{case.name}: {len(case.images)} images, {len(case.gts)} gts ({crowd} crowd, "
              f"{zero} zero-size), {len(case.dts)} dets; AP {stats[0]:.4f} AP50 {stats[1]:.4f}")
        out_cases.append({"name": case.name, "images": case.images,
                          "categories": case.categories,
                          "annotations": [dict(g, id=n + 1) for n, g in enumerate(case.gts)],
                          "dts": case.dts, "stats": stats, "ap50": ap50, "ap50_95": ap})
    fixture = {
        "description": "COCO datasets with crowd, zero-size and missing ground truth, detections "
                       "and COCOeval(iouType='bbox') results; see tests/golden/README.md",
        "pycocotools": getattr(pycocotools, "__version__", "unknown"),
        "numpy": np.__version__,
        "cases": out_cases,
    }
    with open(OUT, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
