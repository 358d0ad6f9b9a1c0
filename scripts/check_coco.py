#!/usr/bin/env python3
"""Checks hpcnet's detection metric against pycocotools on hpcnet's own detections.

    hpcnet eval --weights W --data DATA --split val --json --save-json /tmp/res.json > /tmp/ev.json
    python3 scripts/check_coco.py DATA/annotations/instances_val.json /tmp/res.json [/tmp/ev.json]

Runs pycocotools' COCOeval(iouType="bbox") on the results file against the ground-truth JSON
and prints its 12 numbers; with hpcnet's `eval --json` output as the third argument it prints the
difference of each and exits 1 when one differs by more than 1e-4. The small/medium/large ranges
use each object's COCO "area" (hpcnet's COCO reader passes it through, as pycocotools reads it;
for scenes it is the garment's mask area, not its box's). The results file must be written from
a COCO dataset (`--data .../instances_val.json`), so its image and category ids are the JSON's.
Needs numpy and pycocotools (PyPI).
"""
import json
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    gt = COCO(sys.argv[1])
    dets = json.load(open(sys.argv[2]))
    dt = gt.loadRes(dets) if dets else COCO()
    ev = COCOeval(gt, dt, iouType="bbox")
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    names = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]
    if len(sys.argv) < 4:
        return 0
    lines = [l for l in open(sys.argv[3]) if l.strip().startswith("{")]
    mine = json.loads(lines[-1])["coco"]
    worst = 0.0
    for k, name in enumerate(names):
        d = abs(mine[name] - ev.stats[k])
        worst = max(worst, d)
        print(f"{name:6} pycocotools {ev.stats[k]:.6f} hpcnet {mine[name]:.6f} diff {d:.2e}")
    print(f"largest difference {worst:.2e}")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
