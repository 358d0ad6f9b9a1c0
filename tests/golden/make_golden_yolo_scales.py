#!/usr/bin/env python3
"""Writes tests/golden/yolo_scales_golden.safetensors from Ultralytics' YOLO11n and YOLOv8m (ultralytics 8.4.190, torch 2.15.0 when last written). Run
by hand from the repository root, in the reference venv, offline (no weights are downloaded):

    YOLO_OFFLINE=1 /tmp/ref/bin/python tests/golden/make_golden_yolo_scales.py

It is the companion of make_golden_yolo.py (yolov8n), whose docstring describes the loss
(v8DetectionLoss, DEFAULT_CFG box 7.5 / cls 0.5 / dfl 1.5) and the assigner
(TaskAlignedAssigner, topk 10) in full; the same input, the same five targets and the same weight
formula are used here (one target moved by 3 px, see TARGETS_PX), for two more models:

  yolo11n   DetectionModel("yolo11n.yaml", nc=10): 2,591,790 parameters, 499 state_dict entries.
            New against yolov8n: C3k2 blocks, C2PSA (model.10) with a PSABlock whose Attention
            (2 heads, key_dim 32, head_dim 64, scale key_dim^-0.5) runs a batched matrix multiply
            and a softmax over the 2x2 = 4 positions of P5 at a 64x64 input, plus a depthwise 3x3
            positional Conv ("pe") on v; and the non-legacy Detect head (model.23, legacy False):
            cv3.i = (DWConv3x3, Conv1x1), (DWConv3x3, Conv1x1), Conv2d 1x1 -> nc, c3 = 64.
  yolov8m   DetectionModel("yolov8m.yaml", nc=10): 25,862,110 parameters, 475 state_dict entries;
            the yolov8 graph at depth 0.67, width 0.75, max_channels 768 (legacy head model.22).

Weights. Every state_dict tensor is make_golden.weight_values(name, shape) (the formula of
tests/support/test_util.h's fill_from_formula), except each model's DFL integral
(model.<head>.dfl.conv.weight, requires_grad False), which keeps arange(16); the script checks
that nothing else is left out. No weights are stored.

What is stored, and why not whole gradients. yolov8m has 25.9 M parameters (100 MB of float32
gradients); storing them would defeat a small fixture. Per model the file holds the quantities a
wrong implementation cannot hide from, at a few hundred KB in all:
  - the raw head outputs of the training forward (every output element: they depend on every
    parameter and every BatchNorm's batch statistics) and of the eval forward, and the decoded
    eval predictions;
  - the assigner's verdict (fg_mask, target_gt_idx, target_scores), the three loss components;
  - d loss / d raw outputs in full (the loss's backward, every element);
  - per trainable parameter two numbers: the gradient's L2 norm, and its dot product with
    a fixed formula vector u_i = sin(0.91 i + 0.2) over the flat (row-major) index i. The norm is
    blind to a permuted or sign-flipped gradient (e.g. a transposed attention product, swapped
    q/k split, mirrored depthwise kernel); the projection is not. Together they check every
    parameter's gradient through the whole network. Both also from the float64 rerun;
  - full gradients of a few small tensors (first conv, the attention's depthwise pe conv, head
    biases), and BatchNorm running statistics of a few layers after the training forward.

Entries (float32 unless noted; B = 2, A = 84 anchors; M = yolo11n or yolov8m):
  input (2,3,64,64)               sin(0.37 i) of the flat index (as in yolo_golden.safetensors)
  gt.batch_idx (5,), gt.cls (5,), gt.bboxes_xywhn (5,4)   the five targets of make_golden_yolo.py,
                                  the small box's centre moved from y 45 to 48 (see TARGETS_PX)
  M.out.0/1/2 (2,74,8,8) (2,74,4,4) (2,74,2,2)   model.train() forward, per level
                                  cat(boxes, scores): channels 0..63 DFL logits, 64..73 classes
  M.loss.total (3,), M.loss.items (3,)   B * (box, cls, dfl) and (box, cls, dfl)
  M.tal.fg_mask (2,84), M.tal.target_gt_idx (2,84) I64, M.tal.target_scores (2,84,10)
  M.grad.out.0/1/2                d loss.total.sum() / d M.out.<i>
  M.grad.<name>                   full gradient, for the few GRAD_FULL[M] tensors
  M.grad_digest (P,4) F64         one row per trainable parameter p (P of them, in
                                  named_parameters() order; the names are the JSON list in the
                                  metadata key "M.grad_digest_names"), g = d loss.total.sum() / d p:
                                  [||g||_2, sum_i g_i sin(0.91 i + 0.2), the same two from the
                                  float64 run]. The float64 pair gives each parameter its own
                                  tolerance: how far Ultralytics' own float32 result is from
                                  exact arithmetic differs by orders of magnitude between
                                  parameters (see Tolerances)
  M.running_mean.<bn>, M.running_var.<bn>   after the training forward, BN_STATS[M]
  M.pred_eval (2,14,84)           model.eval() forward (formula statistics reloaded first):
                                  xywh pixels and sigmoid class scores
  M.out_eval.0/1/2                that eval forward's raw per-level outputs

(The names, shapes and counts of every yolov8/yolo11 scale are in yolo_state_dicts.json, written
by make_yolo_state_dicts.py; this script only asserts the counts it relies on.)

Tolerances. The script repeats the whole computation in float64 (Ultralytics' code, the model
and the loss in float64, from the same float32 weights and inputs) and stores, in the metadata key
"float64_check", how far the float32 results stored here are from it: max |f32 - f64| / max |f64|
per tensor; for the per-parameter norms and dots the largest and the median relative difference
(dots relative to ||g|| rms(u), rms(u) = sqrt(mean u_i^2)). Measured (torch 2.15, CPU):

                     out      grad.out  loss    target_scores  norms max / median  dots max / median
  yolo11n            4.0e-4   2.4e-4    2.4e-5  5.7e-5         6.8e-3 / 1.4e-3     2.5e-2 / 3.4e-4
  yolov8m            8.0e-6   6.1e-6    4.4e-7  1.7e-6         1.4e-4 / 1.3e-5     1.1e-4 / 2.5e-6

yolo11n is ~50x worse conditioned than yolov8m (and yolov8n): the error grows steadily through
its neck (1e-6 at model.8, 4e-5 at C2PSA, 4e-4 at model.22), training-mode BatchNorms over 8 and
32 values at P5 and P4 (a 128x128 input only brings it to 2.4e-4). An implementation's float32
result is as far from exact as Ultralytics' is, so the C++ test allows about 10x those figures for
whole tensors, and for each parameter's norm and dot 10 x max(|f32 - f64| of that parameter,
the model's 90th percentile of the relative differences x |f64|): another float32
implementation's error on a parameter is not Ultralytics' (the dots' errors are long-tailed,
yolo11n's 90th percentile is 7x its median). hpcnet's yolov8m does not meet this (it is about
20x less accurate than PyTorch in training-mode float32): see kYolov8m in the test.

Zero gradients. A parameter whose float64 gradient norm is below ZERO_GRAD (1e-15) times the
model's largest is zero in exact arithmetic (yolo11n: three BatchNorm biases in C2PSA, see
ZERO_GRAD); its float32 norm and dot are rounding noise, 2.2e-8 of the largest norm at most.
The stride-32 box branch (cv2.2.*) has tiny but real gradients (its foreground anchors carry
target scores of ~1e-9), so it is compared like the others.

The script asserts that the float64 assignment is the float32 one and, with
make_golden_yolo.check_assignment_is_tie_free, that topk's tie-breaking cannot change it.
torch.set_num_threads(1) keeps reruns byte-identical on one machine.
"""
import copy
import json
import os
import sys

os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, OUT_DIR)
from make_golden import save_safetensors, weight_values  # noqa: E402
from make_golden_yolo import (IMGSZ, NC, assign_and_loss,  # noqa: E402
                              check_assignment_is_tie_free, raw_outputs)

import ultralytics  # noqa: E402
from ultralytics.nn.tasks import DetectionModel  # noqa: E402
from ultralytics.utils import DEFAULT_CFG  # noqa: E402

# make_golden_yolo.TARGETS_PX with the small box of image 0 moved down by 3 px (centre y 45 -> 48):
# at 45, one of yolo11n's candidate anchors for it has CIoU -0.001 (metric 0 after the clamp) while
# only 4 have a positive metric, so which anchors topk adds would depend on its tie-breaking.
# (image, class, cx, cy, w, h) in pixels at imgsz 64.
TARGETS_PX = [
    (0, 3, 26, 48, 8, 10),
    (0, 7, 30, 24, 36, 28),
    (0, 1, 40, 32, 30, 40),
    (1, 0, 52, 10, 24, 20),
    (1, 9, 24, 40, 40, 32),
]

MODELS = {
    "yolo11n": {"yaml": "yolo11n.yaml", "params": 2_591_790, "entries": 499, "head": 23,
                "grad_full": ["model.0.conv.weight", "model.10.m.0.attn.pe.conv.weight",
                              "model.10.m.0.attn.qkv.bn.weight", "model.23.cv3.0.0.0.conv.weight",
                              "model.23.cv2.0.2.bias", "model.23.cv3.1.2.bias"],
                "bn_stats": ["model.0.bn", "model.10.m.0.attn.qkv.bn", "model.23.cv3.2.1.1.bn"]},
    "yolov8m": {"yaml": "yolov8m.yaml", "params": 25_862_110, "entries": 475, "head": 22,
                "grad_full": ["model.0.conv.weight", "model.9.cv2.bn.weight",
                              "model.22.cv2.0.2.bias", "model.22.cv3.1.2.bias"],
                "bn_stats": ["model.0.bn", "model.9.cv2.bn", "model.22.cv3.2.1.bn"]},
}


# A parameter whose float64 gradient norm is below ZERO_GRAD times the model's largest is zero in
# exact arithmetic: in yolo11n the biases of the BatchNorms of model.10.m.0.attn.proj,
# model.10.m.0.attn.pe and model.10.m.0.ffn.1 (Identity activation) only add a per-channel
# constant that the next training-mode BatchNorm (ffn.0's, or C2PSA's cv2) subtracts again. Their
# float32 gradients are rounding noise, compared against the largest norm instead (see the test).
ZERO_GRAD = 1e-15


def digest_vector(n, dtype):
    return torch.sin(0.91 * torch.arange(n, dtype=torch.float64) + 0.2).to(dtype)


def formula_state(model, dfl):
    state = {}
    for k, t in model.state_dict().items():
        if k == dfl:
            assert torch.equal(t.flatten(), torch.arange(16, dtype=t.dtype)), t
            state[k] = t.clone()
        else:
            state[k] = weight_values(k, tuple(t.shape))
    return state


def run(model, state, x, batch, dtype):
    """Train forward, loss, backward, eval forward in DTYPE; returns a dict of results."""
    model = model.to(dtype)
    model.load_state_dict({k: (v.to(dtype) if v.is_floating_point() else v)
                           for k, v in state.items()})
    x = x.to(dtype)
    b = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in batch.items()}
    old_default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # the loss makes its padded targets with torch.zeros
    try:
        preds, total, items, cap, criterion = assign_and_loss(model, x, b)
    finally:
        torch.set_default_dtype(old_default)
    r = {"criterion": criterion, "cap": cap, "total": total.detach(),
         "items": torch.stack([items[k] for k in criterion.loss_names])}
    r["out"] = [o.detach() for o in raw_outputs(preds)]
    r["grad_out"] = raw_outputs({"boxes": preds["boxes"].grad, "scores": preds["scores"].grad,
                                 "feats": preds["feats"]})
    r["grads"] = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                  if p.requires_grad}
    r["buffers"] = {n: t.clone() for n, t in model.named_buffers()}
    model.load_state_dict({k: (v.to(dtype) if v.is_floating_point() else v)
                           for k, v in state.items()})
    model.eval()
    with torch.no_grad():
        y, eval_preds = model(x)
    r["pred_eval"] = y
    r["out_eval"] = raw_outputs(eval_preds)
    return r


def rel(a, b):
    a, b = a.double(), b.double()
    m = b.abs().max().item()
    d = (a - b).abs().max().item()
    return d / m if m > 0 else d


def check_counts(name, spec, model):
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == spec["params"], (name, n_params)
    assert len(model.state_dict()) == spec["entries"], (name, len(model.state_dict()))
    bns = {(b.eps, b.momentum) for b in model.modules() if isinstance(b, torch.nn.BatchNorm2d)}
    assert bns == {(1e-3, 0.03)}, bns
    head = model.model[-1]
    assert head.legacy == (name != "yolo11n") and not getattr(head, "end2end", False), name
    assert [float(s) for s in head.stride] == [8.0, 16.0, 32.0] and head.reg_max == 16


def one_model(name, spec, x, batch):
    model = DetectionModel(spec["yaml"], nc=NC, verbose=False)
    model.args = DEFAULT_CFG
    check_counts(name, spec, model)
    dfl = f"model.{spec['head']}.dfl.conv.weight"
    assert [n for n, p in model.named_parameters() if not p.requires_grad] == [dfl]
    state = formula_state(model, dfl)
    model64 = copy.deepcopy(model)

    r = run(model, state, x, batch, torch.float32)
    tie_report = check_assignment_is_tie_free(r["criterion"].assigner, r["cap"])
    d = run(model64, state, x, batch, torch.float64)

    _, _, tscores, fg, gt_idx = r["cap"]["outputs"]
    _, _, tscores64, fg64, gt_idx64 = d["cap"]["outputs"]
    assert torch.equal(fg, fg64) and torch.equal(gt_idx[fg], gt_idx64[fg64]), name

    p = name + "."
    entries = [(p + f"out.{k}", o) for k, o in enumerate(r["out"])]
    entries += [(p + "loss.total", r["total"]), (p + "loss.items", r["items"])]
    entries += [(p + "tal.fg_mask", fg.float()), (p + "tal.target_gt_idx", gt_idx.long()),
                (p + "tal.target_scores", tscores.float())]
    entries += [(p + f"grad.out.{k}", g) for k, g in enumerate(r["grad_out"])]
    entries += [(p + "grad." + n, r["grads"][n]) for n in spec["grad_full"]]
    norm_errs, dot_errs, floor_err, rows = [], [], 0.0, []
    max_norm = max(g.norm().item() for g in d["grads"].values())
    for n, g in r["grads"].items():
        g64 = d["grads"][n]
        u = digest_vector(g.numel(), torch.float64)
        nrm, dot = g.double().norm(), (g.double().flatten() * u).sum()
        nrm64, dot64 = g64.norm(), (g64.flatten() * u).sum()
        rms_u = u.pow(2).mean().sqrt()
        if nrm64 > ZERO_GRAD * max_norm:
            norm_errs.append(((nrm - nrm64).abs() / nrm64).item())
            dot_errs.append(((dot - dot64).abs() / (nrm64 * rms_u)).item())
        else:  # zero in exact arithmetic (see ZERO_GRAD): float32 leaves rounding noise
            floor_err = max(floor_err, (nrm / max_norm).item(), (dot.abs() / max_norm).item())
        rows.append(torch.stack([nrm, dot, nrm64, dot64]))
    entries.append((p + "grad_digest", torch.stack(rows)))
    zero_grads = [n for n, g in d["grads"].items() if g.norm() <= ZERO_GRAD * max_norm]
    for bn in spec["bn_stats"]:
        entries.append((p + "running_mean." + bn, r["buffers"][bn + ".running_mean"]))
        entries.append((p + "running_var." + bn, r["buffers"][bn + ".running_var"]))
    entries.append((p + "pred_eval", r["pred_eval"]))
    entries += [(p + f"out_eval.{k}", o) for k, o in enumerate(r["out_eval"])]

    grad_full_err = max(rel(r["grads"][n], d["grads"][n]) for n in spec["grad_full"])
    check = {
        "out": max(rel(a, b) for a, b in zip(r["out"], d["out"])),
        "loss.items": rel(r["items"], d["items"]),
        "tal.target_scores": rel(tscores, tscores64),
        "grad.out": max(rel(a, b) for a, b in zip(r["grad_out"], d["grad_out"])),
        "grad.<name>": grad_full_err,
        "grad_norm (relative, max)": max(norm_errs),
        "grad_norm (relative, median)": float(np.median(norm_errs)),
        "grad_dot (per ||g|| rms(u), max)": max(dot_errs),
        "grad_dot (per ||g|| rms(u), median)": float(np.median(dot_errs)),
        "zero gradients": zero_grads,
        "zero gradients' norm and dot (per the largest norm)": floor_err,
        "largest gradient norm": max_norm,
        "running stats": max(rel(r["buffers"][bn + s], d["buffers"][bn + s])
                             for bn in spec["bn_stats"] for s in (".running_mean", ".running_var")),
        "pred_eval": rel(r["pred_eval"], d["pred_eval"]),
        "out_eval": max(rel(a, b) for a, b in zip(r["out_eval"], d["out_eval"])),
    }
    summary = {"loss.total": r["total"].tolist(), "fg": int(fg.sum()),
               "target_scores_sum": float(tscores.sum()), "trainable": len(rows),
               "grad_norm range": [min(float(x[0]) for x in rows), max_norm]}
    return entries, check, summary, tie_report, list(r["grads"])


def main():
    torch.set_num_threads(1)
    assert (DEFAULT_CFG.box, DEFAULT_CFG.cls, DEFAULT_CFG.dfl) == (7.5, 0.5, 1.5)
    i = np.arange(2 * 3 * IMGSZ * IMGSZ)
    x = torch.from_numpy(np.sin(0.37 * i).astype(np.float32).reshape(2, 3, IMGSZ, IMGSZ))
    t = torch.tensor(TARGETS_PX, dtype=torch.float32)
    batch = {"batch_idx": t[:, 0].clone(), "cls": t[:, 1:2].clone(), "bboxes": t[:, 2:6] / IMGSZ}
    entries = [("input", x), ("gt.batch_idx", batch["batch_idx"]),
               ("gt.cls", batch["cls"].view(-1)), ("gt.bboxes_xywhn", batch["bboxes"])]
    checks, meta_extra = {}, {}
    for name, spec in MODELS.items():
        e, check, summary, tie, trainable = one_model(name, spec, x, batch)
        meta_extra[name + ".grad_digest_names"] = json.dumps(trainable)
        entries += e
        checks[name] = check
        meta_extra[name + ".assignment"] = "; ".join(tie)
        meta_extra[name + ".summary"] = json.dumps(summary)
        print(name, json.dumps(summary))
        print(name, "float64 check:", json.dumps(check))
        print("\n".join(tie))

    meta = {"torch": torch.__version__, "ultralytics": ultralytics.__version__,
            "models": ", ".join(f"{n}: DetectionModel('{s['yaml']}', nc=10)"
                                for n, s in MODELS.items()),
            "weights": "every state_dict tensor from make_golden.weight_values except "
                       "model.<head>.dfl.conv.weight = arange(16)",
            "digest": "grad_dot.<name> = sum_i grad_i * sin(0.91 i + 0.2), i the flat index",
            "hyperparameters": "box 7.5, cls 0.5, dfl 1.5 (DEFAULT_CFG), tal_topk 10",
            "float64_check": json.dumps(checks), "description": __doc__}
    meta.update(meta_extra)
    path = os.path.join(OUT_DIR, "yolo_scales_golden.safetensors")
    size = save_safetensors(path, entries, meta)
    print(f"wrote {path} ({len(entries)} entries, {size} bytes)")


if __name__ == "__main__":
    main()
