#!/usr/bin/env python3
"""Writes tests/golden/yolo_golden.safetensors and tests/golden/yolov8_state_dict.json from
Ultralytics' YOLOv8 (ultralytics 8.4.190, torch 2.15.0 when last written). Run by hand from the
repository root, in a venv with torch and ultralytics (PyPI), offline:

    /tmp/ref/bin/pip install ultralytics
    YOLO_OFFLINE=1 /tmp/ref/bin/python tests/golden/make_golden_yolo.py

No weights are downloaded: the models are built from Ultralytics' yaml,
DetectionModel("yolov8n.yaml", nc=10), and every state_dict tensor of yolov8n is then filled from
make_golden.weight_values(name, shape) (the formula of make_golden_unet.py and of
tests/support/test_util.h's fill_from_formula), except ONE tensor: model.22.dfl.conv.weight (1,16,1,1),
the DFL integral, a parameter with requires_grad=False, keeps Ultralytics' value arange(16)
(0, 1, ..., 15). No other tensor is left out of the formula (the script checks this). The weights
are not stored.

The model (ultralytics/cfg/models/v8/yolov8.yaml, scale n: depth 0.33, width 0.25, max 1024):
Conv = Conv2d(bias=False) + BatchNorm2d + SiLU; every BatchNorm2d has eps=1e-3, momentum=0.03
(set after construction by ultralytics.utils.torch_utils.initialize_weights; nn.BatchNorm2d's
defaults 1e-5 / 0.1 are NOT used). The Detect head is the "legacy" v8 head: per level i,
cv2[i] = Conv3x3, Conv3x3, Conv2d 1x1 (-> 4*16 DFL logits) and cv3[i] = Conv3x3, Conv3x3,
Conv2d 1x1 (-> nc logits); strides 8, 16, 32.

In training mode this ultralytics version's Detect returns a dict {"boxes": (B,64,A), "scores":
(B,nc,A), "feats": [P3,P4,P5]} (levels flattened and concatenated, A = 64+16+4 = 84 for a 64x64
input). The entries out.<i> (B,74,H,W) are the classic per-level outputs cat(cv2[i](x),
cv3[i](x), 1), i.e. boxes/scores re-split per level: channels 0..63 the DFL logits (side-major:
channel s*16+k is bin k of side s, sides l,t,r,b), 64..73 the class logits.

The loss, v8DetectionLoss (ultralytics/utils/loss.py) with model.args = DEFAULT_CFG (box 7.5,
cls 0.5, dfl 1.5), tal_topk=10:
  loss = zeros(3)                                  # box, cls, dfl
  target_scores_sum = max(target_scores.sum(), 1)
  loss[1] = BCEWithLogits(pred_scores, target_scores, reduction="none").sum() / target_scores_sum
  weight  = target_scores[fg].sum(-1)              # per foreground anchor
  loss[0] = sum((1 - CIoU(pred_box[fg], target_box[fg])) * weight) / target_scores_sum
  loss[2] = sum(DFL(pred_dist[fg], bbox2dist(anchor, target_box, 15)[fg]) * weight)
            / target_scores_sum                    # DFL = mean over the 4 sides
  (boxes in grid units here: target_bboxes / stride, anchor points in grid units)
  loss[0] *= 7.5; loss[1] *= 0.5; loss[2] *= 1.5
  return loss * batch_size, dict(box_loss=loss[0], cls_loss=loss[1], dfl_loss=loss[2]) detached
So the first return value is a (3,) tensor (NOT summed): loss.total = batch_size * loss.items,
elementwise; the trainer (ultralytics/engine/trainer.py) backpropagates loss.total.sum(). The
gradients stored here are d loss.total.sum() / d (.), i.e. d (B * (box + cls + dfl)) / d (.),
B = 2.

The assigner, TaskAlignedAssigner(topk=10, num_classes=10, alpha=0.5, beta=6.0, eps=1e-9,
stride=[8,16,32]) (ultralytics/utils/tal.py), on pixel coordinates, no_grad:
  1. candidates: anchor centres strictly inside the gt box (each of the 4 differences > 1e-9),
     after enlarging any gt side shorter than stride_val = stride[1] = 16 to 16 about its centre;
  2. for candidates: overlap = CIoU(gt, pred).clamp(0), metric = score[gt class]^0.5 * overlap^6
     (0 elsewhere);
  3. per gt, the topk=10 anchors by metric (padding gts select nothing), AND candidate, AND real gt;
  4. an anchor selected by more than one gt goes to the gt with the largest overlap among ALL gts
     (argmax over the gt axis of the overlap matrix, which is 0 outside candidates);
     fg = selected by some gt; target_gt_idx = that gt (0 for background);
  5. target_labels, target_bboxes = that gt's class and box; target_scores = one_hot(class) * fg;
  6. normalise: m = metric * mask_pos; per gt, m' = m * max_anchors(overlap * mask_pos) /
     (max_anchors(m) + 1e-9); target_scores *= max over gts of m' (per anchor).

Entries (float32 unless noted; B = 2, A = 84 anchors, M = 3 the padded number of gts per image):
  input (2,3,64,64)            sin(0.37 i) of the flat index i
  gt.batch_idx (5,), gt.cls (5,), gt.bboxes_xywhn (5,4)   the targets in Ultralytics' batch
                               format (normalised centre x, y, width, height; every value a
                               multiple of 1/64, so exact); the loss reads batch_idx, cls.view(-1,1)
  out.0 (2,74,8,8), out.1 (2,74,4,4), out.2 (2,74,2,2)   model.train() forward
  loss.total (3,)              what criterion(preds, batch) returns first: B * (box, cls, dfl)
  loss.items (3,)              the detached dict values (box_loss, cls_loss, dfl_loss), not times B
  tal.pd_scores (2,84,10)      assigner inputs: sigmoid(class logits)
  tal.pd_bboxes (2,84,4)       decoded predicted boxes, xyxy pixels (grid units * stride)
  tal.anc_points (84,2)        anchor centres in pixels
  tal.gt_labels (2,3,1), tal.gt_bboxes (2,3,4) (xyxy pixels), tal.mask_gt (2,3,1) (1 = real gt,
                               0 = padding; the padding rows are zeros)
  tal.target_labels (2,84) int64, tal.target_bboxes (2,84,4) (xyxy pixels),
  tal.target_scores (2,84,10), tal.fg_mask (2,84) float32 0/1, tal.target_gt_idx (2,84) int64
                               the assigner's outputs (background anchors carry gt 0's label and
                               box and gt index 0, and target_scores 0)
  grad.out.0/1/2               d loss.total.sum() / d out.<i>
  grad.<name>                  d loss.total.sum() / d param, for GRAD_FULL below
  grad_norm.<name> (float64)   L2 norm of that gradient, every trainable parameter (all but
                               model.22.dfl.conv.weight), in named_parameters() order
  running_mean.<bn>, running_var.<bn>   after the train forward, for BN_STATS below
  pred_eval (2,14,84)          model.eval() forward (formula running statistics reloaded first),
                               the first return: xywh in pixels (4 rows) then sigmoid scores (10)
  out_eval.0/1/2               that eval forward's raw per-level outputs (as out.<i>)
  decode.anchors (84,2), decode.strides (84,1)   make_anchors(feats, stride, 0.5): grid units,
                               (x+0.5, y+0.5) row-major per level, levels 8, 16, 32
  ciou.box1, ciou.box2 (12,4), ciou.value (12,1), ciou.grad1 (12,4)    float64:
                               bbox_iou(box1, box2, xywh=False, CIoU=True) (eps 1e-7; the alpha
                               term is under no_grad), grad1 = d sum(1 - value) / d box1;
  ciou.tie (12,) float64 0/1   1 for rows 0 (identical) and 6 (touching) whose gradient sits on a
                               min/max tie or on clamp_(0) at exactly 0, where it follows torch's
                               convention (min/max split the gradient half and half; clamp passes
                               it at the bound)
  dfl.pred (12,16), dfl.target (12,), dfl.value (12,), dfl.grad (12,16)   float64:
                               DFLoss(16)(pred, target.view(-1,1)).view(-1) (one row = one side;
                               target clamped to [0, 14.99]); grad = d sum(value) / d pred
  bce.logits (6,10), bce.targets (6,10), bce.value () , bce.grad (6,10)    float64:
                               BCEWithLogitsLoss(reduction="sum"); grad = d value / d logits
torch.set_num_threads(1) keeps reruns byte-identical on one machine. The script also checks that
the assignment does not depend on how topk breaks ties between equal metrics (see
check_assignment_is_tie_free).
"""
import json
import os
import re
import sys

os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, OUT_DIR)
from make_golden import save_safetensors, weight_values  # noqa: E402

import ultralytics  # noqa: E402
from ultralytics.nn.tasks import DetectionModel  # noqa: E402
from ultralytics.utils import DEFAULT_CFG  # noqa: E402
from ultralytics.utils.loss import DFLoss, v8DetectionLoss  # noqa: E402
from ultralytics.utils.metrics import bbox_iou  # noqa: E402
from ultralytics.utils.tal import make_anchors  # noqa: E402

NC = 10
IMGSZ = 64
DFL_WEIGHT = "model.22.dfl.conv.weight"  # kept at Ultralytics' arange(16), not the formula
GRAD_FULL = ["model.0.conv.weight", "model.2.cv1.conv.weight", "model.9.cv2.conv.weight",
             "model.15.m.0.cv1.bn.weight", "model.22.cv2.0.2.weight", "model.22.cv2.2.2.bias",
             "model.22.cv3.1.2.weight", "model.22.cv3.0.2.bias"]
BN_STATS = ["model.0.bn", "model.8.m.0.cv2.bn", "model.22.cv3.2.1.bn"]
PARAMS = {"n": 3_012_798, "s": 11_139_470}

# Targets in pixels at imgsz 64: (image, class, cx, cy, w, h). Image 0: a small 8x10 box, and
# two overlapping ones (they share candidate anchors, so the multi-gt rule is exercised);
# image 1: a box touching the top and right edges, and a large one.
TARGETS_PX = [
    (0, 3, 26, 45, 8, 10),
    (0, 7, 30, 24, 36, 28),
    (0, 1, 40, 32, 30, 40),
    (1, 0, 52, 10, 24, 20),
    (1, 9, 24, 40, 40, 32),
]


def build(scale):
    return DetectionModel(f"yolov8{scale}.yaml", nc=NC, verbose=False)


def formula_state(model):
    """The formula state_dict (DFL integral kept), and the names not from the formula."""
    sd = model.state_dict()
    state, kept = {}, []
    for k, t in sd.items():
        if k == DFL_WEIGHT:
            assert torch.equal(t.flatten(), torch.arange(16, dtype=t.dtype)), t
            state[k] = t.clone()
            kept.append(k)
        else:
            state[k] = weight_values(k, tuple(t.shape))
    return state, kept


def state_dict_json():
    out = {"ultralytics": ultralytics.__version__, "torch": torch.__version__, "nc": NC,
           "built_with": "ultralytics.nn.tasks.DetectionModel('yolov8<scale>.yaml', nc=10)",
           "notes": "parameters counts every nn.Parameter, including model.22.dfl.conv.weight "
                    "(1,16,1,1), the DFL integral fixed at arange(16) with requires_grad=False; "
                    "state_dict lists parameters and buffers (running_mean, running_var, "
                    "num_batches_tracked) in PyTorch's order; BatchNorm eps/momentum are set by "
                    "ultralytics.utils.torch_utils.initialize_weights",
           "models": {}}
    for scale, expect in PARAMS.items():
        m = build(scale)
        n_params = sum(p.numel() for p in m.parameters())
        assert n_params == expect, (scale, n_params)
        bns = {(b.eps, b.momentum) for b in m.modules() if isinstance(b, torch.nn.BatchNorm2d)}
        assert bns == {(1e-3, 0.03)}, bns
        head = m.model[-1]
        out["models"][f"yolov8{scale}"] = {
            "parameters": n_params,
            "trainable_parameters": sum(p.numel() for p in m.parameters() if p.requires_grad),
            "not_trainable": [n for n, p in m.named_parameters() if not p.requires_grad],
            "buffers": sum(1 for _ in m.buffers()),
            "state_dict_entries": len(m.state_dict()),
            "batchnorm": {"eps": 1e-3, "momentum": 0.03, "count": sum(
                1 for b in m.modules() if isinstance(b, torch.nn.BatchNorm2d))},
            "detect": {"stride": [float(s) for s in head.stride], "reg_max": head.reg_max,
                       "nc": head.nc, "no": head.no, "legacy": bool(head.legacy)},
            "state_dict": [[k, list(t.shape)] for k, t in m.state_dict().items()],
        }
    return out


def per_level(flat, feats):
    """(B, C, A) flattened levels -> list of (B, C, H, W)."""
    outs, start = [], 0
    for f in feats:
        h, w = f.shape[2:]
        outs.append(flat[:, :, start:start + h * w].reshape(flat.shape[0], flat.shape[1], h, w))
        start += h * w
    return outs


def raw_outputs(preds):
    boxes = per_level(preds["boxes"], preds["feats"])
    scores = per_level(preds["scores"], preds["feats"])
    return [torch.cat((b, s), 1) for b, s in zip(boxes, scores)]


def check_assignment_is_tie_free(assigner, cap, rel_gap=1e-4, ciou_margin=1e-4):
    """Asserts the assignment is the same whichever way topk breaks ties, and that float32
    rounding in another implementation cannot flip it: for each real gt, either at least topk
    anchors inside it have a positive metric (then the zeros never enter) or none of the anchors
    inside it has metric 0 (then the zeros that topk picks lie outside the gt and are masked
    away); no CIoU of an inside anchor is within ciou_margin of the clamp at 0; the topk-th and
    (topk+1)-th positive metrics differ by more than rel_gap (relative); and for an anchor chosen
    by several gts the two largest overlaps differ by more than rel_gap. Returns report lines."""
    a = assigner
    pd_scores, pd_bboxes, anc, gt_labels, gt_bboxes, mask_gt = cap["inputs"]
    a.bs, a.n_max_boxes = pd_scores.shape[0], gt_bboxes.shape[1]
    in_gts = a.select_candidates_in_gts(anc, gt_bboxes, mask_gt)
    metric, overlaps = a.get_box_metrics(pd_scores, pd_bboxes, gt_labels, gt_bboxes,
                                         in_gts * mask_gt)
    mask_pos, _, _ = a.get_pos_mask(pd_scores, pd_bboxes, gt_labels, gt_bboxes, anc, mask_gt)
    report = []
    for b in range(a.bs):
        for g in range(a.n_max_boxes):
            if mask_gt[b, g, 0] == 0:
                continue
            inside = in_gts[b, g]
            raw = bbox_iou(gt_bboxes[b, g][None], pd_bboxes[b][inside], xywh=False, CIoU=True)
            assert raw.abs().min() > ciou_margin, (b, g, raw.abs().min())
            pos = metric[b, g][inside & (metric[b, g] > 0)].sort(descending=True).values
            zero_inside = int((inside & (metric[b, g] == 0)).sum())
            assert len(pos) >= a.topk or zero_inside == 0, (b, g, len(pos), zero_inside)
            if len(pos) > a.topk:
                assert pos[a.topk - 1] - pos[a.topk] > rel_gap * pos[a.topk - 1], (b, g)
            report.append(f"img{b} gt{g}: {int(inside.sum())} anchors inside, {len(pos)} "
                          f"positive, {int(mask_pos[b, g].sum())} selected")
        multi = (mask_pos[b].sum(0) > 1).nonzero().flatten()
        for k in multi.tolist():
            top2 = overlaps[b, :, k].sort(descending=True).values[:2]
            assert top2[0] - top2[1] > rel_gap * top2[0], (b, k, top2)
        report.append(f"img{b}: {len(multi)} anchors chosen by more than one gt "
                      f"{multi.tolist()}, {int((mask_pos[b].sum(0) > 0).sum())} foreground")
    return report


def assign_and_loss(model, x, batch):
    """Train forward, loss with the assigner's inputs and outputs captured, backward."""
    model.train()
    criterion = v8DetectionLoss(model)
    cap = {}
    forward = criterion.assigner.forward

    def capture(*args, **kwargs):
        cap["inputs"] = [t.clone() for t in args]
        res = forward(*args, **kwargs)
        cap["outputs"] = [t.clone() for t in res]
        return res

    criterion.assigner.forward = capture
    preds = model(x)
    preds["boxes"].retain_grad()
    preds["scores"].retain_grad()
    total, items = criterion(preds, batch)
    total.sum().backward()
    return preds, total, items, cap, criterion


def op_goldens():
    entries = []
    d = torch.float64
    # CIoU pairs, xyxy: identical, disjoint, nested both ways, extreme aspect ratios (crossing),
    # touching edges, partial overlaps, far apart.
    box1 = torch.tensor([
        [10, 10, 30, 40], [0, 0, 10, 10], [5, 5, 45, 45], [20, 20, 30, 30], [0, 1, 60, 3],
        [1, 0, 3, 60], [10, 10, 20, 20], [3.5, 7.25, 19.0, 11.0], [0, 0, 10, 10],
        [12.3, 4.1, 40.7, 33.9], [1, 1, 2, 2], [30, 30, 62, 50]], dtype=d)
    box2 = torch.tensor([
        [10, 10, 30, 40], [20, 20, 30, 35], [15, 15, 25, 25], [10, 10, 40, 40], [10, 0, 12, 60],
        [0, 2, 60, 5], [20, 12, 30, 22], [4.0, 6.0, 18.5, 12.5], [11, 1, 21, 9],
        [10.0, 8.0, 36.0, 30.0], [40, 40, 60, 62], [28, 33, 60, 48]], dtype=d)
    b1 = box1.clone().requires_grad_(True)
    value = bbox_iou(b1, box2, xywh=False, CIoU=True)
    (1 - value).sum().backward()
    # Rows whose gradient sits on a tie of min/max (equal coordinates) or on clamp_(0) at exactly
    # 0 (touching boxes): there torch gives min/max half the gradient each side and clamp passes it.
    inter_w = box1[:, 2].minimum(box2[:, 2]) - box1[:, 0].maximum(box2[:, 0])
    inter_h = box1[:, 3].minimum(box2[:, 3]) - box1[:, 1].maximum(box2[:, 1])
    tie = (box1 == box2).any(1) | (inter_w == 0) | (inter_h == 0)
    assert tie.nonzero().flatten().tolist() == [0, 6], tie
    entries += [("ciou.box1", box1), ("ciou.box2", box2), ("ciou.value", value.detach()),
                ("ciou.grad1", b1.grad), ("ciou.tie", tie.to(d))]
    # DFL: one row is one side's 16 logits and its target distance.
    i = torch.arange(12 * 16, dtype=d).reshape(12, 16)
    pred = 2.0 * torch.sin(0.61 * i + 0.3) + 0.5 * torch.cos(1.7 * i)
    target = torch.tensor([0.0, 14.99, 7.0, 3.25, 0.5, 14.5, 1.0, 9.875, 12.01, 5.5, 0.01, 11.3],
                          dtype=d)
    p = pred.clone().requires_grad_(True)
    value = DFLoss(16)(p, target.clone().view(-1, 1)).view(-1)
    value.sum().backward()
    entries += [("dfl.pred", pred), ("dfl.target", target), ("dfl.value", value.detach()),
                ("dfl.grad", p.grad)]
    # BCE with logits, sum reduction, soft targets like target_scores (mostly 0).
    j = torch.arange(60, dtype=d).reshape(6, 10)
    logits = 4.0 * torch.sin(0.83 * j + 0.1)
    targets = torch.zeros(6, 10, dtype=d)
    targets[0, 3], targets[1, 7], targets[2, 1], targets[4, 0], targets[5, 9] = \
        0.73, 0.05, 1.0, 0.4, 0.2
    lg = logits.clone().requires_grad_(True)
    value = torch.nn.BCEWithLogitsLoss(reduction="sum")(lg, targets)
    value.backward()
    entries += [("bce.logits", logits), ("bce.targets", targets), ("bce.value", value.detach()),
                ("bce.grad", lg.grad)]
    return entries


def main():
    torch.set_num_threads(1)
    json_path = os.path.join(OUT_DIR, "yolov8_state_dict.json")
    info = state_dict_json()
    text = json.dumps(info, indent=1)
    # One state_dict entry per line: ["name", [d0, d1, ...]].
    text = re.sub(r'\[\n\s*("[^"\n]*"),\n\s*\[([^\]]*)\]\n\s*\]',
                  lambda m: "[" + m.group(1) + ", [" + ", ".join(
                      v.strip() for v in m.group(2).split(",") if v.strip()) + "]]", text)
    json.loads(text)  # still the same JSON
    with open(json_path + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(json_path + ".tmp", json_path)

    model = build("n")
    model.args = DEFAULT_CFG
    assert (DEFAULT_CFG.box, DEFAULT_CFG.cls, DEFAULT_CFG.dfl) == (7.5, 0.5, 1.5)
    state, kept = formula_state(model)
    assert kept == [DFL_WEIGHT], kept
    model.load_state_dict(state)

    i = np.arange(2 * 3 * IMGSZ * IMGSZ)
    x = torch.from_numpy(np.sin(0.37 * i).astype(np.float32).reshape(2, 3, IMGSZ, IMGSZ))
    t = torch.tensor(TARGETS_PX, dtype=torch.float32)
    batch = {"batch_idx": t[:, 0].clone(), "cls": t[:, 1:2].clone(),
             "bboxes": t[:, 2:6] / IMGSZ}

    preds, total, items, cap, criterion = assign_and_loss(model, x, batch)
    tie_report = check_assignment_is_tie_free(criterion.assigner, cap)
    outs = raw_outputs(preds)
    gouts = raw_outputs({"boxes": preds["boxes"].grad, "scores": preds["scores"].grad,
                         "feats": preds["feats"]})

    entries = [("input", x), ("gt.batch_idx", batch["batch_idx"]), ("gt.cls", batch["cls"].view(-1)),
               ("gt.bboxes_xywhn", batch["bboxes"])]
    entries += [(f"out.{k}", o.detach()) for k, o in enumerate(outs)]
    entries += [("loss.total", total.detach()),
                ("loss.items", torch.stack([items[k] for k in criterion.loss_names]))]
    names_in = ["pd_scores", "pd_bboxes", "anc_points", "gt_labels", "gt_bboxes", "mask_gt"]
    for n, v in zip(names_in, cap["inputs"]):
        entries.append((f"tal.{n}", v.float()))
    labels, tbox, tscores, fg, gt_idx = cap["outputs"]
    entries += [("tal.target_labels", labels.long()), ("tal.target_bboxes", tbox.float()),
                ("tal.target_scores", tscores.float()), ("tal.fg_mask", fg.float()),
                ("tal.target_gt_idx", gt_idx.long())]
    entries += [(f"grad.out.{k}", g) for k, g in enumerate(gouts)]
    params = dict(model.named_parameters())
    entries += [("grad." + n, params[n].grad) for n in GRAD_FULL]
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert [n for n, p in model.named_parameters() if not p.requires_grad] == [DFL_WEIGHT]
    entries += [("grad_norm." + n, p.grad.double().norm()) for n, p in trainable]
    buffers = dict(model.named_buffers())
    for bn in BN_STATS:
        entries.append(("running_mean." + bn, buffers[bn + ".running_mean"].clone()))
        entries.append(("running_var." + bn, buffers[bn + ".running_var"].clone()))

    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        y, eval_preds = model(x)
    entries.append(("pred_eval", y))
    entries += [(f"out_eval.{k}", o) for k, o in enumerate(raw_outputs(eval_preds))]
    anchors, strides = make_anchors(eval_preds["feats"], model.model[-1].stride, 0.5)
    entries += [("decode.anchors", anchors), ("decode.strides", strides)]
    entries += op_goldens()

    meta = {"torch": torch.__version__, "ultralytics": ultralytics.__version__,
            "model": "DetectionModel('yolov8n.yaml', nc=10), every state_dict tensor from "
                     "make_golden.weight_values except model.22.dfl.conv.weight = arange(16)",
            "not_from_formula": DFL_WEIGHT,
            "parameters": str(PARAMS["n"]),
            "hyperparameters": "box 7.5, cls 0.5, dfl 1.5 (DEFAULT_CFG), tal_topk 10",
            "assignment": "; ".join(tie_report),
            "description": __doc__}
    path = os.path.join(OUT_DIR, "yolo_golden.safetensors")
    size = save_safetensors(path, entries, meta)
    print(f"wrote {json_path} ({os.path.getsize(json_path)} bytes)")
    print(f"wrote {path} ({len(entries)} entries, {size} bytes)")
    print("loss.total", total.tolist(), "items", [float(items[k]) for k in criterion.loss_names])
    print("fg per image", fg.sum(1).tolist(), "target_scores_sum", float(tscores.sum()))
    print("\n".join(tie_report))


if __name__ == "__main__":
    main()
