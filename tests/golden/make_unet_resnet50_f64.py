#!/usr/bin/env python3
"""Writes tests/golden/unet_resnet50_f64.safetensors: the training step of
tests/golden/unet_resnet50_golden.safetensors (make_golden_unet.py resnet50: smp's
Unet("resnet50", encoder_weights=None, classes=11), formula weights, input (1,3,64,64), per-pixel
cross-entropy with ignore_index=255) repeated in float64 from the same float32 weights and input,
the exact-arithmetic reference of that net's ill-conditioned training-mode gradients. Entries
(float64):
  logits_train (1,11,64,64) (rounded to float32), loss (0-d), grad_norm.<name> (every
  parameter)
and, to judge a float32 implementation by PyTorch's own float32 error, metadata "torch_float32":
the median and largest relative difference |f32 - f64| / f64 of torch's float32 gradient norms
(encoder, decoder and head separately) and max |f32 - f64| / max |f64| of its logits.
Run by hand from the repository root (PYTHONPATH must reach segmentation_models_pytorch):
    /tmp/ref/bin/python tests/golden/make_unet_resnet50_f64.py
torch.set_num_threads(1) keeps reruns byte-identical on one machine.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, OUT_DIR)
from make_golden import save_safetensors  # noqa: E402
from make_golden_unet import formula_model, input_and_target  # noqa: E402


def step(model, x, target, dtype):
    model = model.to(dtype)
    model.train()
    logits = model(x.to(dtype))
    loss = F.cross_entropy(logits, target, ignore_index=255)
    loss.backward()
    norms = {n: p.grad.double().norm() for n, p in model.named_parameters()}
    return logits.detach().double(), loss.detach().double(), norms


def summary(norms, ref, prefix, inside):
    errs = [((norms[n] - ref[n]).abs() / ref[n]).item() for n in ref
            if n.startswith(prefix) == inside]
    return {"median": float(np.median(errs)), "max": float(max(errs))}


def main():
    torch.set_num_threads(1)
    x, target = input_and_target()
    model32, _ = formula_model("resnet50")
    model64, _ = formula_model("resnet50")  # the same float32 values, then converted
    l32, loss32, n32 = step(model32, x, target, torch.float32)
    l64, loss64, n64 = step(model64, x, target, torch.float64)
    check = {"logits": ((l32 - l64).abs().max() / l64.abs().max()).item(),
             "loss": ((loss32 - loss64).abs() / loss64).item(),
             "grad_norm encoder": summary(n32, n64, "encoder.", True),
             "grad_norm decoder and head": summary(n32, n64, "encoder.", False)}
    print(json.dumps(check))
    entries = [("logits_train", l64.float()), ("loss", loss64)]
    entries += [("grad_norm." + n, v) for n, v in n64.items()]
    meta = {"torch": torch.__version__, "torch_float32": json.dumps(check),
            "description": __doc__}
    path = os.path.join(OUT_DIR, "unet_resnet50_f64.safetensors")
    size = save_safetensors(path, entries, meta)
    print(f"wrote {path} ({len(entries)} entries, {size} bytes)")


if __name__ == "__main__":
    main()
