#!/usr/bin/env python3
"""Writes tests/golden/unet_golden.safetensors from segmentation_models_pytorch: its
Unet("resnet18", encoder_weights=None, classes=11) in float32, forward in training and eval mode,
the per-pixel cross-entropy with ignore_index=255, and the gradients. Run by hand from the
repository root, in a venv with torch and segmentation-models-pytorch (PyPI):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch segmentation-models-pytorch
    /tmp/ref/bin/python tests/golden/make_golden_unet.py

The 14.3 million weights are not stored: every tensor is filled from a formula that the C++ test
computes too (weight_values() below, repeated in tests/nn/models/test_unet_golden.cpp), so the file holds
only the input, the target, the outputs and the gradients. For a tensor called NAME with n
elements, with k = sum((j + 1) * byte_j of NAME) mod 9973 and v_i = sin(0.7 i + 1.3 k + 0.5)
computed in float64:
  conv weights (4-d)          v * sqrt(3 / fan_in), fan_in = in_channels * kh * kw
  BatchNorm weight            1 + 0.2 v          BatchNorm bias, conv bias   0.1 v
  running_mean                0.1 v              running_var                 1 + 0.5 |v|
  num_batches_tracked         0
each rounded to float32. Entries (float32 unless noted):
  input (1,3,64,64)           sin(0.37 i) of the flat index i, float32
  target (1,64,64) int64      (i * 7 + i // 64) % 11, with 255 (ignore) where i % 13 == 0
  logits_train (1,11,64,64)   model.train() forward (batch statistics)
  loss (0-d)                  F.cross_entropy(logits_train, target, ignore_index=255)
  grad.<name>                 d loss / d param, for the parameters in GRAD_FULL
  grad_norm.<name> (float64)  the L2 norm of every parameter's gradient
  running_mean.<bn>, running_var.<bn>  after that forward, for the BatchNorms in BN_STATS
  logits_eval (1,11,64,64)    model.eval() forward with the formula's running statistics
torch.set_num_threads(1) keeps reruns byte-identical on one machine.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import segmentation_models_pytorch as smp

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, OUT_DIR)
from make_golden import save_safetensors, weight_values  # noqa: E402

GRAD_FULL = ["encoder.conv1.weight", "encoder.bn1.weight", "encoder.layer2.0.downsample.0.weight",
             "encoder.layer4.1.bn2.bias", "decoder.blocks.3.conv1.0.weight",
             "decoder.blocks.4.conv2.0.weight", "decoder.blocks.4.conv2.1.weight",
             "segmentation_head.0.weight", "segmentation_head.0.bias"]
BN_STATS = ["encoder.bn1", "encoder.layer3.1.bn2", "decoder.blocks.2.conv1.1"]


def main():
    torch.set_num_threads(1)
    model = smp.Unet("resnet18", encoder_weights=None, classes=11)
    sd = model.state_dict()
    model.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 14_329_659, n_params

    i = np.arange(3 * 64 * 64)
    x = torch.from_numpy(np.sin(0.37 * i).astype(np.float32).reshape(1, 3, 64, 64))
    j = np.arange(64 * 64)
    t = (j * 7 + j // 64) % 11
    t[j % 13 == 0] = 255
    target = torch.from_numpy(t.astype(np.int64).reshape(1, 64, 64))

    entries = [("input", x), ("target", target)]
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, target, ignore_index=255)
    loss.backward()
    entries += [("logits_train", logits.detach()), ("loss", loss.detach())]
    params = dict(model.named_parameters())
    for name in GRAD_FULL:
        entries.append(("grad." + name, params[name].grad))
    for name, p in model.named_parameters():
        entries.append(("grad_norm." + name, p.grad.double().norm()))
    buffers = dict(model.named_buffers())
    for bn in BN_STATS:
        entries.append(("running_mean." + bn, buffers[bn + ".running_mean"].clone()))
        entries.append(("running_var." + bn, buffers[bn + ".running_var"].clone()))
    model.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    model.eval()
    with torch.no_grad():
        entries.append(("logits_eval", model(x)))

    meta = {"torch": torch.__version__, "segmentation_models_pytorch": smp.__version__,
            "model": "Unet('resnet18', encoder_weights=None, classes=11)",
            "parameters": str(n_params), "description": __doc__}
    path = os.path.join(OUT_DIR, "unet_golden.safetensors")
    save_safetensors(path, entries, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes), loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
