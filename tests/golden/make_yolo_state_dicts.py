#!/usr/bin/env python3
"""Writes tests/golden/yolo_state_dicts.json: the state_dict names and shapes and the parameter
counts of Ultralytics' ten named YOLO detection models, yolov8{n,s,m,l,x} and yolo11{n,s,m,l,x}
(DetectionModel("<name>.yaml", nc=80), and n also at nc=10), as ultralytics 8.4.190 with torch
2.15 builds them. Run by hand from the repository root, offline (no weights are downloaded: the
models come from Ultralytics' own model YAMLs):

    YOLO_OFFLINE=1 /tmp/ref/bin/python tests/golden/make_yolo_state_dicts.py

Compact form, one entry per model:
  parameters   every nn.Parameter's element count summed (model.<last>.dfl.conv.weight included)
  entries      len(state_dict())
  params       [[name, shape], ...] every parameter in state_dict order
  batchnorms   the BatchNorm2d prefixes (".../bn"): each holds weight and bias (in params) and
               the buffers running_mean, running_var (shape of weight) and num_batches_tracked ()
  other_buffers  buffers that are not a BatchNorm's (none in these models; checked)
tests/nn/models/test_yolo.cpp expands batchnorms into their buffers and compares every name and
shape with hpcnet's make_model(name, nc).
"""
import json
import os
import sys

import torch
import ultralytics
from ultralytics.nn.tasks import DetectionModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "yolo_state_dicts.json")
MODELS = [f"yolov8{s}" for s in "nsmlx"] + [f"yolo11{s}" for s in "nsmlx"]


def describe(name, nc):
    m = DetectionModel(f"{name}.yaml", nc=nc, verbose=False)
    sd = m.state_dict()
    params = dict(m.named_parameters())
    bns = [n for n, mod in m.named_modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    bn_buffers = {f"{b}.{k}" for b in bns for k in ("running_mean", "running_var", "num_batches_tracked")}
    other = [[k, list(t.shape)] for k, t in sd.items() if k not in params and k not in bn_buffers]
    assert not other, other
    assert all(k in params or k in bn_buffers for k in sd)
    assert len(sd) == len(params) + len(bn_buffers)
    return {
        "nc": nc,
        "parameters": sum(p.numel() for p in m.parameters()),
        "entries": len(sd),
        "legacy_head": bool(m.model[-1].legacy),
        "params": [[k, list(t.shape)] for k, t in sd.items() if k in params],
        "batchnorms": bns,
        "other_buffers": other,
    }


def main():
    out = {
        "ultralytics": ultralytics.__version__,
        "torch": torch.__version__,
        "built_with": "ultralytics.nn.tasks.DetectionModel('<name>.yaml', nc=nc)",
        "models": {},
    }
    for name in MODELS:
        out["models"][f"{name}@80"] = describe(name, 80)
        print(name, out["models"][f"{name}@80"]["parameters"], file=sys.stderr)
    for name in ("yolov8n", "yolo11n"):
        out["models"][f"{name}@10"] = describe(name, 10)
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
