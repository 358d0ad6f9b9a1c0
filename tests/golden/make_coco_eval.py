# Writes tests/golden/coco_eval_fixture.json: deterministic synthetic detection cases (seeded numpy)
# with pycocotools' COCOeval(iouType="bbox") results (the 12 summarize() stats, per-class AP50 and
# AP50-95) and Ultralytics-style per-class P/R, compared in tests/task/detect/test_coco_eval.cpp.
#
# Run by hand from the repository root, in a venv with numpy and pycocotools (ultralytics optional):
#     /tmp/ref/bin/python tests/golden/make_coco_eval.py
import contextlib
import io
import json
import os
import sys

import numpy as np
import pycocotools
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coco_eval_fixture.json")


# ---- the cases ---------------------------------------------------------------------------------


def r2(v):
    return float(round(float(v), 2))


def random_box(rng, size_class, img_w=640, img_h=480):
    """A box [x, y, w, h] (2 decimals) of the given size class inside the image."""
    lo, hi = {"small": (4, 30), "medium": (34, 90), "large": (100, 300)}[size_class]
    w = r2(rng.uniform(lo, hi))
    h = r2(rng.uniform(lo, hi))
    x = r2(rng.uniform(0, img_w - w))
    y = r2(rng.uniform(0, img_h - h))
    return [x, y, w, h]


def jitter(rng, box, amount):
    """box moved and resized by up to `amount` of its size (2 decimals, w and h kept > 0.5)."""
    x, y, w, h = box
    dx, dy, dw, dh = rng.uniform(-amount, amount, size=4)
    nw = max(0.5, w * (1 + dw))
    nh = max(0.5, h * (1 + dh))
    return [r2(x + dx * w), r2(y + dy * h), r2(nw), r2(nh)]


def synthetic_case(name, seed, n_images, cats, extra_cat, crowd_p, empty_images, big_image):
    """Jittered copies of the gts with random scores (2 decimals: ties), duplicates, false
    positives (some in extra_cat, a category without gts), images without gts, crowd gts, gts whose
    area field is not w*h, and one image with more than 100 detections of one category."""
    rng = np.random.default_rng(seed)
    images = list(range(1, n_images + 1))
    gts, dts = [], []
    for img in images:
        n_gt = 0 if img in empty_images else int(rng.integers(1, 9))
        if img == big_image:
            n_gt = 40
        for _ in range(n_gt):
            cat = cats[0] if img == big_image else int(rng.choice(cats))
            size = str(rng.choice(["small", "medium", "large"], p=[0.4, 0.4, 0.2]))
            box = random_box(rng, size)
            crowd = int(rng.random() < crowd_p)
            area = r2(box[2] * box[3])
            if rng.random() < 0.15:  # a segmentation area, not the box's
                area = r2(box[2] * box[3] * rng.uniform(0.5, 1.0))
            gts.append({"image_id": img, "category_id": cat, "bbox": box, "area": area,
                        "iscrowd": crowd})
            if rng.random() < 0.85:
                dts.append({"image_id": img, "category_id": cat,
                            "bbox": jitter(rng, box, rng.choice([0.05, 0.15, 0.3])),
                            "score": r2(rng.uniform(0.05, 1.0))})
            if rng.random() < 0.2:  # a duplicate
                dts.append({"image_id": img, "category_id": cat, "bbox": jitter(rng, box, 0.1),
                            "score": r2(rng.uniform(0.05, 1.0))})
            if crowd and rng.random() < 0.7:  # several detections inside a crowd region
                for _ in range(int(rng.integers(1, 4))):
                    w, h = box[2] * rng.uniform(0.2, 0.5), box[3] * rng.uniform(0.2, 0.5)
                    x = box[0] + rng.uniform(0, box[2] - w)
                    y = box[1] + rng.uniform(0, box[3] - h)
                    dts.append({"image_id": img, "category_id": cat,
                                "bbox": [r2(x), r2(y), r2(w), r2(h)],
                                "score": r2(rng.uniform(0.05, 1.0))})
        n_fp = int(rng.integers(0, 5))
        if img == big_image:
            n_fp = 90
        for _ in range(n_fp):
            cat = cats[0] if img == big_image else int(rng.choice(cats + [extra_cat]))
            size = str(rng.choice(["small", "medium", "large"]))
            dts.append({"image_id": img, "category_id": cat, "bbox": random_box(rng, size),
                        "score": r2(rng.uniform(0.05, 0.9))})
    return {"name": name, "images": images, "categories": sorted(cats + [extra_cat]),
            "gts": gts, "dts": dts}


def exact_ties_case():
    """Integer boxes whose IoU is exactly a threshold (0.5, 0.75, 0.9: numpy's 9th threshold is
    0.8999999999999999), two gts a detection overlaps equally (the later gt wins), equal scores."""
    gts, dts = [], []

    def gt(img, cat, box, crowd=0):
        gts.append({"image_id": img, "category_id": cat, "bbox": box,
                    "area": float(box[2] * box[3]), "iscrowd": crowd})

    def dt(img, cat, box, score):
        dts.append({"image_id": img, "category_id": cat, "bbox": box, "score": score})

    gt(1, 1, [0, 0, 10, 10])
    dt(1, 1, [0, 0, 10, 5], 0.9)  # IoU exactly 0.5
    gt(1, 1, [100, 100, 20, 10])
    dt(1, 1, [100, 100, 15, 10], 0.9)  # IoU exactly 0.75
    gt(2, 1, [0, 0, 100, 10])
    dt(2, 1, [0, 0, 90, 10], 0.5)  # IoU exactly 0.9
    gt(2, 1, [200, 0, 40, 40])
    gt(2, 1, [220, 0, 40, 40])
    dt(2, 1, [210, 0, 40, 40], 0.5)  # IoU 1/3 with both gts: no match
    dt(2, 1, [200, 0, 60, 40], 0.7)  # IoU 2/3 with both: the later gt wins at thresholds <= 2/3
    dt(2, 1, [200, 0, 40, 40], 0.7)  # the first gt exactly, same score as the one above
    gt(3, 2, [0, 0, 32, 32])  # area exactly 32^2: both small and medium
    dt(3, 2, [0, 0, 32, 32], 0.6)
    gt(3, 2, [50, 50, 96, 96])  # area exactly 96^2: both medium and large
    dt(3, 2, [50, 50, 96, 96], 0.6)
    gt(3, 2, [300, 300, 50, 50], 1)  # crowd
    dt(3, 2, [300, 300, 25, 25], 0.95)  # inside the crowd region: ignored
    dt(3, 2, [290, 290, 20, 20], 0.6)  # crowd IoU 100/400 = 0.25: a false positive
    return {"name": "exact_ties", "images": [1, 2, 3], "categories": [1, 2], "gts": gts,
            "dts": dts}


def no_detections_case():
    rng = np.random.default_rng(11)
    gts = []
    for img in range(1, 6):
        for _ in range(3):
            box = random_box(rng, str(rng.choice(["small", "medium"])))
            gts.append({"image_id": img, "category_id": int(rng.choice([1, 2])), "bbox": box,
                        "area": r2(box[2] * box[3]), "iscrowd": 0})
    return {"name": "no_detections", "images": list(range(1, 6)), "categories": [1, 2, 3],
            "gts": gts, "dts": []}


def perfect_case():
    rng = np.random.default_rng(12)
    gts, dts = [], []
    for img in range(1, 11):
        for _ in range(int(rng.integers(1, 6))):
            box = random_box(rng, str(rng.choice(["small", "medium", "large"])))
            cat = int(rng.choice([1, 2, 3]))
            gts.append({"image_id": img, "category_id": cat, "bbox": box,
                        "area": r2(box[2] * box[3]), "iscrowd": 0})
            dts.append({"image_id": img, "category_id": cat, "bbox": list(box),
                        "score": float(rng.uniform(0.3, 1.0))})
    return {"name": "perfect", "images": list(range(1, 11)), "categories": [1, 2, 3],
            "gts": gts, "dts": dts}


def confidence_edge_case():
    """Where the max-F1 confidence is above every score of a class: category 1 is found at scores
    0.9-0.99 and then drowned in false positives at 0.15-0.25, category 2 has one hit at 0.16, so
    the smoothed mean F1 peaks at 0.85, above every score of category 2, which then reports
    np.interp's left values: P = 1, R = 0."""
    rng = np.random.default_rng(13)
    gts, dts = [], []
    for n in range(10):
        box = [float(n * 40), 0.0, 30.0, 30.0]
        gts.append({"image_id": 1, "category_id": 1, "bbox": box, "area": 900.0, "iscrowd": 0})
        dts.append({"image_id": 1, "category_id": 1, "bbox": box, "score": 0.9 + n * 0.01})
        gts.append({"image_id": 2, "category_id": 2, "bbox": box, "area": 900.0, "iscrowd": 0})
    for n in range(30):
        dts.append({"image_id": 1 + n % 2, "category_id": 1,
                    "bbox": [r2(rng.uniform(0, 400)), 200.0, 20.0, 20.0],
                    "score": r2(rng.uniform(0.15, 0.25))})
    dts.append({"image_id": 2, "category_id": 2, "bbox": [0.0, 0.0, 30.0, 30.0], "score": 0.16})
    return {"name": "confidence_edge", "images": [1, 2], "categories": [1, 2], "gts": gts,
            "dts": dts}


# ---- the references ----------------------------------------------------------------------------


def coco_eval(case):
    """COCOeval(bbox) on the case: (E, stats). Gt ids start at 1 (COCOeval's dtMatches use 0 for
    'unmatched', so a gt with id 0 would never count as a match)."""
    gt_dataset = {
        "images": [{"id": i} for i in case["images"]],
        "categories": [{"id": c} for c in case["categories"]],
        "annotations": [dict(g, id=n + 1) for n, g in enumerate(case["gts"])],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt_dataset
        coco_gt.createIndex()
        if case["dts"]:
            coco_dt = coco_gt.loadRes([dict(d) for d in case["dts"]])
        else:  # loadRes fails on an empty list (it looks at anns[0])
            coco_dt = COCO()
            coco_dt.dataset = {"images": gt_dataset["images"],
                               "categories": gt_dataset["categories"], "annotations": []}
            coco_dt.createIndex()
        E = COCOeval(coco_gt, coco_dt, iouType="bbox")
        E.evaluate()
        E.accumulate()
        E.summarize()
    return E, [float(s) for s in E.stats]


def per_class_ap(E):
    """AP50 and AP50-95 per category (area all, maxDets 100) from E.eval['precision'], -1 where the
    category has no (non-crowd) gt."""
    prec = E.eval["precision"]  # (T, R, K, A, M)
    ap50, ap = [], []
    for k in range(prec.shape[2]):
        p = prec[:, :, k, 0, 2]
        ap.append(float(np.mean(p[p > -1])) if np.any(p > -1) else -1.0)
        p0 = p[0]
        ap50.append(float(np.mean(p0[p0 > -1])) if np.any(p0 > -1) else -1.0)
    return ap50, ap


def smooth(y, f=0.05):
    """Ultralytics' ultralytics.utils.metrics.smooth, literally."""
    nf = round(len(y) * f * 2) // 2 + 1
    p = np.ones(nf // 2)
    yp = np.concatenate((p * y[0], y, p * y[-1]), 0)
    return np.convolve(yp, np.ones(nf) / nf, mode="valid")


def ap_per_class_pr(tp, conf, pred_cls, target_cls, eps=1e-16, kind="stable"):
    """The P/R part of Ultralytics' ap_per_class, literally, except for the sort: `kind` (its
    np.argsort(-conf) is quicksort, whose order among equal scores numpy does not define; stable
    keeps COCOeval's order). Returns (unique_classes, p, r, index, smoothed mean F1)."""
    i = np.argsort(-conf, kind=kind)
    tp, conf, pred_cls = tp[i], conf[i], pred_cls[i]
    unique_classes, nt = np.unique(target_cls, return_counts=True)
    nc = unique_classes.shape[0]
    x = np.linspace(0, 1, 1000)
    p_curve, r_curve = np.zeros((nc, 1000)), np.zeros((nc, 1000))
    for ci, c in enumerate(unique_classes):
        i = pred_cls == c
        n_l = nt[ci]
        n_p = i.sum()
        if n_p == 0 or n_l == 0:
            continue
        fpc = (1 - tp[i]).cumsum(0)
        tpc = tp[i].cumsum(0)
        recall = tpc / (n_l + eps)
        r_curve[ci] = np.interp(-x, -conf[i], recall[:, 0], left=0)
        precision = tpc / (tpc + fpc)
        p_curve[ci] = np.interp(-x, -conf[i], precision[:, 0], left=1)
    f1_curve = 2 * p_curve * r_curve / (p_curve + r_curve + eps)
    sm = smooth(f1_curve.mean(0), 0.1) if nc else np.zeros(1000)
    i = int(sm.argmax()) if nc else 0
    return unique_classes, p_curve[:, i], r_curve[:, i], i, sm


def ultralytics_inputs(E, case):
    """Ultralytics' ap_per_class inputs from COCOeval's matches at IoU 0.5, area all, maxDets 100:
    per category, then per image in E.params.imgIds order, the image's detections in COCOeval's
    order, leaving out those COCOeval ignores (matched to a crowd gt); target_cls = the categories
    of the non-crowd gts."""
    p = E.params
    I, A = len(p.imgIds), len(p.areaRng)
    tp, conf, pred = [], [], []
    for k, cat in enumerate(p.catIds):
        for i in range(I):
            e = E.evalImgs[k * A * I + 0 * I + i]
            if e is None:
                continue
            for d in range(len(e["dtIds"])):
                if e["dtIgnore"][0, d]:
                    continue
                tp.append(e["dtMatches"][0, d] > 0)
                conf.append(e["dtScores"][d])
                pred.append(cat)
    target = [g["category_id"] for g in case["gts"] if not g["iscrowd"]]
    return (np.array(tp, dtype=bool).reshape(-1, 1), np.array(conf, dtype=float),
            np.array(pred, dtype=float), np.array(target, dtype=float))


def ultralytics_pr(E, case):
    """Per category (in case['categories'] order) P and R at the max smoothed mean-F1 index (-1 for
    categories without non-crowd gts), the index, and how clear its maximum is."""
    tp, conf, pred, target = ultralytics_inputs(E, case)
    classes, pv, rv, index, sm = ap_per_class_pr(tp, conf, pred, target)
    P = {int(c): float(v) for c, v in zip(classes, pv)}
    R = {int(c): float(v) for c, v in zip(classes, rv)}
    margin = float(sm[index] - np.max(np.delete(sm, index))) if len(classes) else 0.0
    # On the real thing: the same where its (unstable) sort has no ties to order differently.
    check = None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from ultralytics.utils.metrics import ap_per_class
        tp10 = np.repeat(tp, 10, axis=1)
        out = ap_per_class(tp10, conf, pred, target)
        check = max([abs(a - b) for a, b in zip(out[2], pv)] +
                    [abs(a - b) for a, b in zip(out[3], rv)] + [0.0])
    except ImportError:
        pass
    cats = case["categories"]
    return ([P.get(c, -1.0) for c in cats], [R.get(c, -1.0) for c in cats], index, margin, check)


def main():
    cases = [
        synthetic_case("synthetic_a", seed=1, n_images=40, cats=[1, 2, 3, 5, 7], extra_cat=9,
                       crowd_p=0.06, empty_images={4, 17, 31}, big_image=12),
        synthetic_case("synthetic_b", seed=2, n_images=120, cats=[0, 1, 2], extra_cat=3,
                       crowd_p=0.12, empty_images={1, 50, 51, 52, 99}, big_image=77),
        exact_ties_case(),
        no_detections_case(),
        perfect_case(),
        confidence_edge_case(),
    ]
    out_cases = []
    for case in cases:
        E, stats = coco_eval(case)
        ap50, ap = per_class_ap(E)
        P, R, index, margin, check = ultralytics_pr(E, case)
        print(f"{case['name']}: {len(case['images'])} images, {len(case['gts'])} gts, "
              f"{len(case['dts'])} dets; AP {stats[0]:.4f} AP50 {stats[1]:.4f}; F1 index {index} "
              f"(margin {margin:.3g}); real ap_per_class differs by {check}")
        out_cases.append({
            "name": case["name"],
            "images": case["images"],
            "categories": case["categories"],
            "gts": case["gts"],
            "dts": case["dts"],
            "stats": stats,
            "ap50": ap50,
            "ap50_95": ap,
            "precision": P,
            "recall": R,
            "f1_index": index,
        })
    E0 = coco_eval(cases[0])[0]
    fixture = {
        "description": "COCOeval(iouType='bbox') on synthetic cases; see tests/golden/README.md",
        "pycocotools": getattr(pycocotools, "__version__", "unknown"),
        "numpy": np.__version__,
        "iou_thrs": [float(t) for t in E0.params.iouThrs],
        "rec_thrs": [float(t) for t in E0.params.recThrs],
        "cases": out_cases,
    }
    with open(OUT, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
