#!/usr/bin/env python3
"""Writes tests/golden/deeplab_golden.safetensors from torchvision: its
deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=11, aux_loss=True) in float32,
forward in training mode (dropout off) and eval mode, torchvision's segmentation criterion (the
cross-entropy of "out" plus 0.5 times that of "aux", ignore_index=255), and the gradients in both
modes. Run by hand from the repository root, in a venv with torch and torchvision (PyPI; no
weights are downloaded):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch torchvision
    /tmp/ref/bin/python tests/golden/make_golden_deeplab.py

The 42.0 million weights are not stored: every tensor is filled from the formula of
make_golden_unet.py (weight_values() below, repeated in tests/support/test_util.h as fill_from_formula),
so the file holds only the input, the target, the outputs and the gradients. For a tensor called
NAME with n elements, with k = sum((j + 1) * byte_j of NAME) mod 9973 and
v_i = sin(0.7 i + 1.3 k + 0.5) computed in float64:
  conv weights (4-d)          v * sqrt(3 / fan_in), fan_in = in_channels * kh * kw
  BatchNorm weight            1 + 0.2 v          BatchNorm bias, conv bias   0.1 v
  running_mean                0.1 v              running_var                 1 + 0.5 |v|
  num_batches_tracked         0
each rounded to float32. Entries (float32 unless noted):
  input (2,3,40,40)           sin(0.37 i) of the flat index i (batch 2: in training the ASPP
                              pooling branch's BatchNorm sees a 1x1 map, one value per image)
  target (2,40,40) int64      (i * 7 + i // 40) % 11 of the flat index i, with 255 (ignore)
                              where i % 13 == 0
  out_train (2,11,40,40)      result["out"] of a model.train() forward (batch statistics) with
                              every nn.Dropout module put back in eval mode (dropout off)
  aux_train (2,11,40,40)      result["aux"] of that forward (the FCNHead on layer3)
  loss_out (0-d)              F.cross_entropy(out_train, target, ignore_index=255)
  loss_aux (0-d)              F.cross_entropy(aux_train, target, ignore_index=255)
  loss (0-d)                  loss_out + 0.5 * loss_aux (torchvision's references/segmentation)
  grad.<name>                 d loss / d param in that training step, for GRAD_TRAIN (the last
                              convolution of each head)
  grad_norm.<name> (float64)  the L2 norm of every parameter's gradient (187 parameters)
  running_mean.<bn>, running_var.<bn>  after that forward, for the BatchNorms in BN_STATS
  out_eval, aux_eval (2,11,40,40)  model.eval() forward, with the formula's weights and running
                              statistics loaded again (the gradients set to None)
  dy_out, dy_aux (2,11,40,40) upstream gradients for out_eval and aux_eval: 1e-3 sin(0.53 i) and
                              1e-3 sin(0.41 i + 1.0) of the flat index i
  grad_eval.<name>            d (sum(out_eval * dy_out) + sum(aux_eval * dy_aux)) / d param, i.e.
                              torch.cat([out, aux], 1).backward(torch.cat([dy_out, dy_aux], 1)),
                              for the parameters in GRAD_FULL, spread through the whole net
  grad_norm_eval.<name> (float64)  the L2 norm of every parameter's gradient in eval mode
  aspp_out_eval (1,11,37,37)  out[:, :, 4::8, 4::8] of the aux_loss=False model in eval mode (no
                              grad) on a (1,3,296,296) input sin(0.37 i) (not stored): layer4 is
                              37x37 there, so every tap of the ASPP's rate-36 convolution meets
                              the map (on the 5x5 map of the 40x40 input only the centre taps of
                              rates 12, 24 and 36 do, and any rates >= 5 give the same output)
Only the eval-mode gradients are well conditioned in float32. In training mode the backward of
each BatchNorm over 50 values per channel (5x5 maps, batch 2) cancels most of the incoming
gradient and the forward subtracts batch means from channels whose variance is far below their
square: float32 and float64 training-mode gradients below the heads differ by a median 5% (up to
20%), for any input and any weights (a full-rank formula does no better), and the logits by 1e-3
of the largest. GRAD_TRAIN holds the last convolution of each head, whose training-mode gradients
float32 gets to 2e-3. In eval mode the formula's running statistics (variance 1 to 1.5, far below
the activations') make logits of up to 1.3e4: a cross-entropy there would hinge on near-ties of
the top two logits, so the eval-mode backward starts from the fixed dy_out and dy_aux instead.
Metadata: the torch and torchvision versions, the model call, "parameters" (with the aux
classifier) and "parameters_no_aux" (the same call with aux_loss=False), this description.
torch.set_num_threads(1) keeps reruns byte-identical on one machine.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torchvision.models.segmentation import deeplabv3_resnet50

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, OUT_DIR)
from make_golden import save_safetensors, weight_values  # noqa: E402

# Small tensors spread through the net (a 3x3 conv of layer3 or layer4 alone would be 2.4 or
# 9.4 MB); the BatchNorms behind the dilated convolutions carry their gradients.
GRAD_FULL = ["backbone.conv1.weight", "backbone.bn1.weight", "backbone.bn1.bias",
             "backbone.layer1.0.downsample.0.weight", "backbone.layer2.0.conv2.weight",
             "backbone.layer3.0.bn2.weight", "backbone.layer3.2.bn2.weight",
             "backbone.layer4.0.downsample.1.weight", "backbone.layer4.2.bn2.bias",
             "classifier.0.convs.1.1.weight", "classifier.0.convs.4.2.weight",
             "classifier.0.convs.4.2.bias", "classifier.0.project.1.weight",
             "classifier.2.weight", "classifier.4.weight", "classifier.4.bias",
             "aux_classifier.1.weight", "aux_classifier.4.weight", "aux_classifier.4.bias"]
# The training-mode gradients that float32 gets right (the last convolution of each head).
GRAD_TRAIN = ["classifier.4.weight", "classifier.4.bias", "aux_classifier.4.weight",
              "aux_classifier.4.bias"]
BN_STATS = ["backbone.bn1", "backbone.layer1.0.bn1", "backbone.layer3.1.bn2",
            "backbone.layer4.2.bn2", "classifier.0.convs.4.2", "classifier.2", "aux_classifier.1"]
N_PARAMS = 41_998_934
N_PARAMS_NO_AUX = 39_636_299


def main():
    torch.set_num_threads(1)
    model = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=11, aux_loss=True)
    sd = model.state_dict()
    model.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    n_params = sum(p.numel() for p in model.parameters())
    n_no_aux = sum(p.numel() for p in deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=11, aux_loss=False).parameters())
    print(f"parameters {n_params} (aux_loss=True), {n_no_aux} (aux_loss=False)")
    assert n_params == N_PARAMS, n_params
    assert n_no_aux == N_PARAMS_NO_AUX, n_no_aux

    i = np.arange(2 * 3 * 40 * 40)
    x = torch.from_numpy(np.sin(0.37 * i).astype(np.float32).reshape(2, 3, 40, 40))
    j = np.arange(2 * 40 * 40)
    t = (j * 7 + j // 40) % 11
    t[j % 13 == 0] = 255
    target = torch.from_numpy(t.astype(np.int64).reshape(2, 40, 40))

    entries = [("input", x), ("target", target)]

    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.eval()
    res = model(x)
    loss_out = F.cross_entropy(res["out"], target, ignore_index=255)
    loss_aux = F.cross_entropy(res["aux"], target, ignore_index=255)
    loss = loss_out + 0.5 * loss_aux
    loss.backward()
    entries += [("out_train", res["out"].detach()), ("aux_train", res["aux"].detach()),
                ("loss_out", loss_out.detach()), ("loss_aux", loss_aux.detach()),
                ("loss", loss.detach())]
    params = dict(model.named_parameters())
    for name in GRAD_TRAIN:
        entries.append(("grad." + name, params[name].grad.clone()))
    for name, p in model.named_parameters():
        entries.append(("grad_norm." + name, p.grad.double().norm()))
    assert len(params) == 187, len(params)
    buffers = dict(model.named_buffers())
    for bn in BN_STATS:
        entries.append(("running_mean." + bn, buffers[bn + ".running_mean"].clone()))
        entries.append(("running_var." + bn, buffers[bn + ".running_var"].clone()))

    model.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    model.zero_grad(set_to_none=True)
    model.eval()
    res = model(x)
    iy = np.arange(2 * 11 * 40 * 40)
    dy_out = torch.from_numpy((1e-3 * np.sin(0.53 * iy)).astype(np.float32).reshape(2, 11, 40, 40))
    dy_aux = torch.from_numpy(
        (1e-3 * np.sin(0.41 * iy + 1.0)).astype(np.float32).reshape(2, 11, 40, 40))
    torch.cat([res["out"], res["aux"]], 1).backward(torch.cat([dy_out, dy_aux], 1))
    entries += [("out_eval", res["out"].detach()), ("aux_eval", res["aux"].detach()),
                ("dy_out", dy_out), ("dy_aux", dy_aux)]
    for name in GRAD_FULL:
        entries.append(("grad_eval." + name, params[name].grad))
    for name, p in model.named_parameters():
        entries.append(("grad_norm_eval." + name, p.grad.double().norm()))

    no_aux = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=11, aux_loss=False)
    sd = no_aux.state_dict()
    no_aux.load_state_dict({k: weight_values(k, tuple(t.shape)) for k, t in sd.items()})
    no_aux.eval()
    i = np.arange(3 * 296 * 296)
    x_big = torch.from_numpy(np.sin(0.37 * i).astype(np.float32).reshape(1, 3, 296, 296))
    with torch.no_grad():
        res = no_aux(x_big)
    assert list(res.keys()) == ["out"], list(res.keys())
    entries.append(("aspp_out_eval", res["out"][:, :, 4::8, 4::8].contiguous()))

    meta = {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "model": "torchvision.models.segmentation.deeplabv3_resnet50(weights=None, "
                     "weights_backbone=None, num_classes=11, aux_loss=True)",
            "parameters": str(n_params), "parameters_no_aux": str(n_no_aux),
            "description": __doc__}
    path = os.path.join(OUT_DIR, "deeplab_golden.safetensors")
    save_safetensors(path, entries, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes), {len(entries)} entries, loss "
          f"{loss.item():.6f} (out {loss_out.item():.6f}, aux {loss_aux.item():.6f})")


if __name__ == "__main__":
    main()
