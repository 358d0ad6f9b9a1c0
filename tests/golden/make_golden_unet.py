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

# The second fixture, unet_resnet50_golden.safetensors (`make_golden_unet.py resnet50`; with no
# argument the script writes both). The committed unet_golden.safetensors was written on another
# machine: rewritten on session 20's, its entries move by up to 1.2e-3 relative (last bits of
# float32 sums), inside its test's tolerances; write only resnet50 to keep it as it is.
RESNET50_DOC = """Unet("resnet50", encoder_weights=None, classes=11) of segmentation_models_pytorch
(encoder channels 3, 64, 256, 512, 1024, 2048; 32,522,555 parameters) in float32 with the weight
formula of unet_golden.safetensors (make_golden_unet.py's docstring), on the same input (1,3,64,64)
and target. Entries (float32 unless noted):
  input, target, logits_train, loss, grad_norm.<name> (float64, every parameter),
  running_mean.<bn>, running_var.<bn>     as in unet_golden.safetensors (BN_STATS_50)
  grad.<name>                 the training-mode gradient of the parameters in GRAD_TRAIN_50
  logits_eval (1,11,64,64)    model.eval() forward with the formula's weights and running
                              statistics loaded again (gradients set to None)
  grad_eval.<name>            d sum(logits_eval * dy) / d param for GRAD_EVAL_50, dy (not stored)
                              = 1e-3 sin(0.53 i) of the flat index i, float32
  grad_norm_eval.<name> (float64)  the L2 norm of every parameter's gradient in eval mode
In training mode this net is badly conditioned in float32 below the decoder: BatchNorm over the 4
values per channel of layer4's 2x2 maps (16 of layer3's) cancels most of the gradient, and torch's
own float32 and float64 differ by 1.5e-3 of the largest logit, 5e-5 in the loss, a median 14%
(up to 140%, encoder.layer4.1.conv2.weight) in the encoder's gradient norms, 6% in the decoder's.
In eval mode the formula's running statistics do not normalise the residual sums (the logits
reach 1.2e8, hence a backward from dy rather than a cross-entropy of near-tied logits): float64
agrees with this float32 file to 2e-6 in every gradient, but torch's float32 on 2 threads, with
channels_last or with mkldnn off differs from it by up to 1.1e-2 in the gradients of layers 1-3
(the summation order). tests/nn/models/test_unet_resnet50_golden.cpp lists each tolerance beside
these spreads. torch.set_num_threads(1) keeps reruns byte-identical on one machine."""
GRAD_TRAIN_50 = ["decoder.blocks.4.conv2.0.weight", "segmentation_head.0.weight",
                 "segmentation_head.0.bias"]
GRAD_EVAL_50 = ["encoder.conv1.weight", "encoder.bn1.weight", "encoder.layer1.0.conv3.weight",
                "encoder.layer1.0.downsample.0.weight", "encoder.layer3.5.bn2.bias",
                "encoder.layer4.2.bn3.bias", "decoder.blocks.3.conv1.0.weight",
                "decoder.blocks.4.conv2.0.weight", "segmentation_head.0.weight",
                "segmentation_head.0.bias"]
BN_STATS_50 = ["encoder.bn1", "encoder.layer1.0.bn3", "encoder.layer3.1.bn2",
               "encoder.layer4.2.bn2", "decoder.blocks.2.conv1.1"]


def formula_model(encoder):
    model = smp.Unet(encoder, encoder_weights=None, classes=11)
    sd = model.state_dict()
    model.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    return model, sd


def input_and_target():
    i = np.arange(3 * 64 * 64)
    x = torch.from_numpy(np.sin(0.37 * i).astype(np.float32).reshape(1, 3, 64, 64))
    j = np.arange(64 * 64)
    t = (j * 7 + j // 64) % 11
    t[j % 13 == 0] = 255
    return x, torch.from_numpy(t.astype(np.int64).reshape(1, 64, 64))


def training_step(model, x, target, grad_full, bn_stats):
    """The training-mode entries: logits, loss, gradients, norms, running statistics."""
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, target, ignore_index=255)
    loss.backward()
    entries = [("logits_train", logits.detach()), ("loss", loss.detach())]
    params = dict(model.named_parameters())
    for name in grad_full:
        entries.append(("grad." + name, params[name].grad))
    for name, p in model.named_parameters():
        entries.append(("grad_norm." + name, p.grad.double().norm()))
    buffers = dict(model.named_buffers())
    for bn in bn_stats:
        entries.append(("running_mean." + bn, buffers[bn + ".running_mean"].clone()))
        entries.append(("running_var." + bn, buffers[bn + ".running_var"].clone()))
    return entries, loss


def write(path, entries, meta, loss):
    save_safetensors(path, entries, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes), loss {loss.item():.6f}")


def resnet18():
    model, sd = formula_model("resnet18")
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 14_329_659, n_params
    x, target = input_and_target()
    entries = [("input", x), ("target", target)]
    step, loss = training_step(model, x, target, GRAD_FULL, BN_STATS)
    entries += step
    model.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    model.eval()
    with torch.no_grad():
        entries.append(("logits_eval", model(x)))
    meta = {"torch": torch.__version__, "segmentation_models_pytorch": smp.__version__,
            "model": "Unet('resnet18', encoder_weights=None, classes=11)",
            "parameters": str(n_params), "description": __doc__}
    write(os.path.join(OUT_DIR, "unet_golden.safetensors"), entries, meta, loss)


def resnet50():
    model, sd = formula_model("resnet50")
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 32_522_555, n_params
    x, target = input_and_target()
    entries = [("input", x), ("target", target)]
    step, loss = training_step(model, x, target, GRAD_TRAIN_50, BN_STATS_50)
    entries += step
    model.zero_grad(set_to_none=True)
    model.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    model.eval()
    logits = model(x)
    k = np.arange(logits.numel())
    dy = torch.from_numpy((1e-3 * np.sin(0.53 * k)).astype(np.float32).reshape(logits.shape))
    logits.backward(dy)
    entries.append(("logits_eval", logits.detach()))
    params = dict(model.named_parameters())
    for name in GRAD_EVAL_50:
        entries.append(("grad_eval." + name, params[name].grad))
    for name, p in model.named_parameters():
        entries.append(("grad_norm_eval." + name, p.grad.double().norm()))
    meta = {"torch": torch.__version__, "segmentation_models_pytorch": smp.__version__,
            "model": "Unet('resnet50', encoder_weights=None, classes=11)",
            "parameters": str(n_params), "description": RESNET50_DOC}
    write(os.path.join(OUT_DIR, "unet_resnet50_golden.safetensors"), entries, meta, loss)


def main():
    torch.set_num_threads(1)
    which = sys.argv[1:] or ["resnet18", "resnet50"]
    for w in which:
        {"resnet18": resnet18, "resnet50": resnet50}[w]()


if __name__ == "__main__":
    main()
