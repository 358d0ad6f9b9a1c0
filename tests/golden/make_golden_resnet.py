#!/usr/bin/env python3
"""Writes tests/golden/resnet_golden.safetensors from PyTorch: the ops a CIFAR ResNet adds to
hpcnet (BatchNorm2d in training and eval mode, global average pooling, the parameter-free
"option A" shortcut) in float64 with their gradients, and a float32 resnet20 (forward in train
and eval mode, loss, gradients, running statistics, gradient clipping, 3 steps of Nesterov SGD
and 3 steps of AdamW). Run by hand from the repository root:

    /usr/bin/python3 tests/golden/make_golden_resnet.py

Needs torch >= 1.13 and nothing else; the safetensors writer and the op recorder (op_recorder)
are the ones in make_golden.py and the models are the ones in bench/pytorch_resnet.py (both
imported). torch.set_num_threads(1) keeps reruns byte-identical on one machine; another torch
version or CPU may move the last bits of the float results.

File contents (all names are PyTorch's; float32 unless noted; the file's __metadata__ repeats
this, entry by entry):

Single ops, float64, seed torch.manual_seed(0) then the draws in entry order. Convention as in
make_golden.py: <op>.<input>, <op>.y = op(inputs), <op>.dy a random upstream gradient (shape of
y), <op>.d<input> = d sum(y * dy) / d input.
  bn_train        F.batch_norm(x (4,3,5,5) = randn*2+1, running_mean, running_var, weight (3,),
                  bias (3,), training=True, momentum=0.1, eps=1e-5); running_mean = randn(3),
                  running_var = rand(3)+0.5 stored before (bn_train.running_mean_in, _var_in) and
                  after the call (_out): new = 0.9*old + 0.1*batch stat, the variance stat
                  unbiased (n/(n-1), n = N*H*W = 100) while y uses the biased one. Gradients dx,
                  dweight, dbias.
  bn_eval         the same with training=False: y = (x - running_mean)/sqrt(running_var + eps)
                  * weight + bias; running stats unchanged (_out == _in). dx, dweight, dbias.
  gap             F.adaptive_avg_pool2d(x (2,3,4,5), 1) flattened: y is (N,C) = (2,3).
  shortcut_a      F.pad(x[:, :, ::2, ::2], (0,0,0,0,2,2)), x (2,4,6,6) -> y (2,8,3,3).
  shortcut_a_odd  the same with x (2,4,5,5) (planes 8): ::2 of 5 keeps 3 -> y (2,8,3,3).

resnet20 (bench/pytorch_resnet.py), seed torch.manual_seed(0), then resnet20() (kaiming_normal_
on Conv2d and Linear weights, Linear bias PyTorch's default), then the draws in entry order.
Conditioning: with batches of 4, a ReLU input within float32 rounding of 0 (or, for AdamW, a
gradient element near 0, whose first update is lr*sign(g)) changes the results by 1e-3..1e-1
relative, and lr 0.1 amplifies that over 3 steps; about half of all random batches are like
that. So the script recomputes everything in float64 and keeps a draw of (inputs, labels),
then of (step_inputs, step_labels), only when every float32 result agrees with float64 within
CHECK_TOL (max|f32 - f64| / max|f64|), drawing again from the same generator otherwise. The
draw numbers and the deviations reached are in the metadata ("conditioning").
To fit the file under 1.5 MB:
  * init.*conv*.weight are stored as F16: the kaiming values rounded to float16, and PyTorch
    used exactly those rounded values (converted back to float32, which is exact); all other
    init entries are float32 (num_batches_tracked int64);
  * grad.* is stored for every parameter except three of the 64->64 3x3 convolutions,
    layer3.1.conv1.weight, layer3.1.conv2.weight, layer3.2.conv1.weight (same shape and code
    path as the stored layer3.0.conv2.weight and layer3.2.conv2.weight); for those three only
    grad_norm.<name>, the 0-d float64 L2 norm of the float32 gradient, is stored (and
    clip.total_norm covers all gradients);
  * clip.grad.*, sgd3.*, adamw3.* cover only the subset S = conv1.weight, bn1.weight,
    bn1.bias, layer2.0.conv1.weight, layer3.2.bn2.weight, linear.weight, linear.bias (sgd3
    also bn1.running_mean, bn1.running_var, bn1.num_batches_tracked).
Entries:
  init.<name>        every parameter and buffer of resnet20 in state_dict order
  inputs (4,3,32,32) torch.randn; labels (4,) int64 in [0,10)
  logits (4,10)      model.train() forward of inputs (batch statistics)
  loss               0-d nn.CrossEntropyLoss() (mean) of logits against labels
  grad.<param>       d loss / d param after that one backward (see the exception above)
  after.<buffer>     every buffer after that train forward (running stats updated once,
                     num_batches_tracked = 1)
  eval_logits (4,10) model.eval() forward of the same inputs with the after.* running stats
  clip.total_norm    0-d float32: torch.nn.utils.clip_grad_norm_(parameters, max_norm=0.5)
                     applied to the grad.* gradients; the total L2 norm before clipping
  clip.grad.<S>      the clipped gradients: g * min(1, 0.5 / (total_norm + 1e-6))
  step_inputs        (3,4,3,32,32) F16, torch.randn rounded to float16; step s trains on
                     step_inputs[s].float() (exact) with step_labels[s] ((3,4) int64)
  sgd3.<S, buffers>  after 3 steps from init (parameters and buffers) of torch.optim.SGD(lr=0.1,
                     momentum=0.9, weight_decay=5e-4, nesterov=True, dampening=0); sgd3_losses
                     (3,) the loss of each step before its update
  adamw3.<S>         after 3 steps from init of torch.optim.AdamW(lr=1e-3, betas=(0.9,0.999),
                     eps=1e-8, weight_decay=5e-2, amsgrad=False) on the same batches;
                     adamw3_losses (3,)
Each step: zero_grad, model.train() forward, loss, backward, step(). Weight decay applies to
every parameter (conv, BatchNorm and Linear weights and biases alike), as PyTorch does with a
single parameter group. EMA has no PyTorch reference and is not in the file.
"""
import copy
import importlib.util
import os
import sys

import torch
import torch.nn.functional as F

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(OUT_DIR))
OUT_NAME = "resnet_golden.safetensors"
SEED = 0
MAX_BYTES = 1_500_000


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_golden = _load("make_golden", os.path.join(OUT_DIR, "make_golden.py"))
save_safetensors, op_recorder = _golden.save_safetensors, _golden.op_recorder
resnet = _load("pytorch_resnet", os.path.join(ROOT, "bench", "pytorch_resnet.py"))

# Parameters whose gradient is stored only as a norm (size budget).
GRAD_NORM_ONLY = ["layer3.1.conv1.weight", "layer3.1.conv2.weight", "layer3.2.conv1.weight"]
# The subset stored for clip.grad, sgd3 and adamw3.
SUBSET = ["conv1.weight", "bn1.weight", "bn1.bias", "layer2.0.conv1.weight",
          "layer3.2.bn2.weight", "linear.weight", "linear.bias"]
SUBSET_BUFFERS = ["bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"]
NUM_STEPS, STEP_BATCH = 3, 4
SGD_KW = dict(lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
ADAMW_KW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=5e-2)
CLIP_MAX_NORM = 0.5
# Conditioning check: every float32 result must agree with float64 this closely.
CHECK_TOL = 2e-5
MAX_DRAWS = 20


# ---- single ops in float64 ----


def make_ops():
    entries, rand, record = op_recorder(SEED)  # all inputs are float64, so all get gradients
    g = torch.float64

    for prefix, training in (("bn_train", True), ("bn_eval", False)):
        x = rand(4, 3, 5, 5) * 2 + 1
        w, b = rand(3), rand(3)
        rm, rv = rand(3), torch.rand(3, dtype=g) + 0.5
        record(prefix, [("x", x), ("weight", w), ("bias", b)],
               lambda x, w, b, rm, rv, training=training: F.batch_norm(
                   x, rm, rv, w, b, training=training, momentum=0.1, eps=1e-5),
               state=[("running_mean", rm), ("running_var", rv)])
    record("gap", [("x", rand(2, 3, 4, 5))],
           lambda x: torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
    record("shortcut_a", [("x", rand(2, 4, 6, 6))],
           lambda x: F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, 8 // 4, 8 // 4)))
    record("shortcut_a_odd", [("x", rand(2, 4, 5, 5))],
           lambda x: F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, 8 // 4, 8 // 4)))

    bn = ("x (4,3,5,5) = randn*2+1, weight (3,), bias (3,), running_mean = randn(3), "
          "running_var = rand(3)+0.5 (float64)")
    meta = {
        "ops.seed": f"torch.manual_seed({SEED}), then the draws of the op entries in order",
        "ops.convention": "float64. <op>.<input> inputs, <op>.y = op(inputs), <op>.dy a random "
                          "upstream gradient (shape of y), <op>.d<input> = d sum(y*dy) / d input; "
                          "<op>.<state>_in / _out: non-differentiable state (BatchNorm running "
                          "stats) before and after the call",
        "bn_train": f"F.batch_norm(x, running_mean, running_var, weight, bias, training=True, "
                    f"momentum=0.1, eps=1e-5); {bn}. y normalizes with the batch mean and the "
                    "biased batch variance over (N,H,W); running_*_out = 0.9*running_*_in + "
                    "0.1*batch stat, with the UNBIASED variance (n/(n-1), n=100) for "
                    "running_var. Entries x, weight, bias, running_mean_in, running_var_in, "
                    "running_mean_out, running_var_out, y, dy, dx, dweight, dbias",
        "bn_eval": f"F.batch_norm(..., training=False, momentum=0.1, eps=1e-5); {bn}. "
                   "y = (x - running_mean) / sqrt(running_var + eps) * weight + bias; "
                   "running_*_out == running_*_in (unchanged). Same entries as bn_train",
        "gap": "global average pooling: torch.flatten(F.adaptive_avg_pool2d(x (2,3,4,5), 1), 1); "
               "y is (N,C) = (2,3), the mean over H and W",
        "shortcut_a": "option-A shortcut, planes 8: F.pad(x[:, :, ::2, ::2], (0,0,0,0,2,2)) "
                      "with x (2,4,6,6) -> y (2,8,3,3): channels 0-1 and 6-7 are zero, "
                      "channels 2-5 = x at even rows and columns",
        "shortcut_a_odd": "the same with x (2,4,5,5): ::2 of 5 keeps rows/columns 0,2,4 -> "
                          "y (2,8,3,3); dx is 0 at odd rows/columns",
    }
    return entries, meta


# ---- resnet20 in float32 ----


def _is_conv_weight(name):
    return "conv" in name and name.endswith(".weight")


def _forward_backward(base, init_sd, dtype, inputs, labels):
    """One train-mode forward/backward from init on (inputs, labels), the buffers after it,
    eval-mode logits with those buffers, then clip_grad_norm_. Model in `dtype`."""
    model = copy.deepcopy(base).to(dtype)  # deepcopy: no draws from the global generator
    model.load_state_dict(init_sd)  # load_state_dict converts to the model's dtype
    params = dict(model.named_parameters())
    model.train()
    model.zero_grad()
    logits = model(inputs.to(dtype))
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach()}
    out.update({"grad." + k: p.grad.detach().clone() for k, p in params.items()})
    out.update({"after." + k: b.detach().clone() for k, b in model.named_buffers()})
    model.eval()
    with torch.no_grad():
        out["eval_logits"] = model(inputs.to(dtype))
    total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=CLIP_MAX_NORM)
    out["clip.total_norm"] = total_norm.detach().reshape(())
    out.update({"clip.grad." + k: params[k].grad.detach().clone() for k in SUBSET})
    return out


def _train(base, init_sd, dtype, make_opt, step_inputs, step_labels, prefix):
    """NUM_STEPS optimizer steps from init (parameters and buffers), fresh optimizer."""
    model = copy.deepcopy(base).to(dtype)
    model.load_state_dict(init_sd)
    model.train()
    opt = make_opt(model.parameters())
    losses = []
    for s in range(NUM_STEPS):
        opt.zero_grad()
        step_loss = F.cross_entropy(model(step_inputs[s].to(dtype)), step_labels[s])
        step_loss.backward()
        opt.step()
        losses.append(step_loss.detach())
    sd = model.state_dict()
    keep = SUBSET + (SUBSET_BUFFERS if prefix == "sgd3" else [])
    out = {f"{prefix}.{k}": sd[k].detach().clone() for k in keep}
    out[f"{prefix}_losses"] = torch.stack(losses)
    return out


def _deviation(r32, r64):
    """Worst over entries of max|f32 - f64| / max|f64| (integer entries must be equal)."""
    worst = 0.0
    for k, a in r32.items():
        b = r64[k]
        if not a.is_floating_point():
            assert torch.equal(a, b), k
            continue
        scale = max(b.abs().max().item(), 1e-30)
        worst = max(worst, (a.double() - b).abs().max().item() / scale)
    return worst


def _well_conditioned(draw, compute, what):
    """Draws (from the global generator) until the float32 results agree with the same
    computation in float64 within CHECK_TOL; returns (drawn tensors, f32 results, attempts,
    deviation). A rejected draw has a ReLU input or an AdamW gradient so close to 0 that
    float32 rounding flips it, or an SGD trajectory that amplifies rounding; no C++
    implementation could match such a reference to a useful tolerance."""
    for attempt in range(1, MAX_DRAWS + 1):
        drawn = draw()
        r32 = compute(torch.float32, *drawn)
        dev = _deviation(r32, compute(torch.float64, *drawn))
        print(f"  {what}: draw {attempt}, float32 vs float64 deviation {dev:.2e}", flush=True)
        if dev < CHECK_TOL:
            return drawn, r32, attempt, dev
    raise RuntimeError(f"{what}: no well-conditioned draw in {MAX_DRAWS} attempts")


def make_resnet():
    torch.manual_seed(SEED)
    base = resnet.resnet20()  # default init then kaiming_normal_, drawn from the seed
    with torch.no_grad():
        for name, p in base.named_parameters():
            if _is_conv_weight(name):
                p.copy_(p.half().float())  # the stored F16 values are the exact init
    param_names = [n for n, _ in base.named_parameters()]
    buffer_names = [n for n, _ in base.named_buffers()]
    init_sd = {k: v.detach().clone() for k, v in base.state_dict().items()}
    assert set(GRAD_NORM_ONLY) <= set(param_names) and set(SUBSET) <= set(param_names)
    assert set(SUBSET_BUFFERS) <= set(buffer_names)

    def draw_first():
        return (torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,), dtype=torch.int64))

    def draw_steps():
        # Rounded to float16 so they can be stored in half the bytes; training uses exactly
        # these values (converted back to float32 or float64, which is exact).
        return (torch.randn(NUM_STEPS, STEP_BATCH, 3, 32, 32).half(),
                torch.randint(0, 10, (NUM_STEPS, STEP_BATCH), dtype=torch.int64))

    (inputs, labels), first, first_draws, first_dev = _well_conditioned(
        draw_first, lambda dt, x, y: _forward_backward(base, init_sd, dt, x, y),
        "inputs/labels")

    def steps(dt, xs, ys):
        out = _train(base, init_sd, dt, lambda ps: torch.optim.SGD(ps, **SGD_KW), xs, ys, "sgd3")
        out.update(_train(base, init_sd, dt, lambda ps: torch.optim.AdamW(ps, **ADAMW_KW),
                          xs, ys, "adamw3"))
        return out

    (step_inputs, step_labels), stepped, step_draws, step_dev = _well_conditioned(
        draw_steps, steps, "step_inputs/step_labels")

    entries = [("init." + k, v.half() if _is_conv_weight(k) else v) for k, v in init_sd.items()]
    entries += [("inputs", inputs), ("labels", labels), ("logits", first["logits"]),
                ("loss", first["loss"])]
    for k in param_names:
        g = first["grad." + k]
        if k in GRAD_NORM_ONLY:
            entries.append(("grad_norm." + k, torch.linalg.vector_norm(g.double())))
        else:
            entries.append(("grad." + k, g))
    entries += [("after." + k, first["after." + k]) for k in buffer_names]
    entries.append(("eval_logits", first["eval_logits"]))
    entries.append(("clip.total_norm", first["clip.total_norm"]))
    entries += [("clip.grad." + k, first["clip.grad." + k]) for k in SUBSET]
    entries += [("step_inputs", step_inputs), ("step_labels", step_labels)]
    entries += [("sgd3." + k, stepped["sgd3." + k]) for k in SUBSET + SUBSET_BUFFERS]
    entries.append(("sgd3_losses", stepped["sgd3_losses"]))
    entries += [("adamw3." + k, stepped["adamw3." + k]) for k in SUBSET]
    entries.append(("adamw3_losses", stepped["adamw3_losses"]))
    for k, v in entries:
        assert v.dtype in (torch.float16, torch.int64) or k.startswith("grad_norm.") \
            or v.dtype == torch.float32, (k, v.dtype)

    subset = ", ".join(SUBSET)
    meta = {
        "model": "resnet20 (bench/pytorch_resnet.py; He et al. 2016 CIFAR ResNet, "
                 "akamaster/pytorch_resnet_cifar10 layout): conv1 = Conv2d(3,16,3,1,1,bias=False), "
                 "bn1 = BatchNorm2d(16), relu; layer1/2/3 = 3 BasicBlocks each with 16/32/64 "
                 "planes, "
                 "the first block of layer2 and layer3 with stride 2; BasicBlock: "
                 "out = relu(bn1(conv1(x))) (3x3, stride s, pad 1, no bias); out = bn2(conv2(out)) "
                 "(3x3, stride 1, pad 1, no bias); out = relu(out + shortcut(x)); shortcut = "
                 "F.pad(x[:, :, ::2, ::2], (0,0,0,0,planes//4,planes//4)) when stride != 1 or "
                 "in_planes != planes (option A, no parameters), else identity; head "
                 "F.avg_pool2d(out, out.size(3)) (global average), flatten, "
                 "linear = Linear(64,10). BatchNorm2d eps 1e-5, momentum 0.1. 269,722 parameters",
        "init": "torch.manual_seed(0); resnet20(): PyTorch's default init, then "
                "nn.init.kaiming_normal_ (fan_in, gain sqrt(2)) on every Conv2d and Linear weight; "
                "Linear bias default uniform(+-1/sqrt(64)); BN weight 1, bias 0, running_mean 0, "
                "running_var 1, num_batches_tracked 0. Then every conv weight is rounded to "
                "float16 (stored as F16; PyTorch trained from exactly these values)",
        "loss": "nn.CrossEntropyLoss() (mean over the batch)",
        "entry.init.*": "every parameter and buffer in state_dict order; *conv*.weight F16 "
                        "(convert to float32, exact), num_batches_tracked I64, the rest F32",
        "conditioning": f"every float32 result of the model part was recomputed in float64 from "
                        f"the same init and data; a draw of inputs/labels (resp. step_inputs/"
                        f"step_labels) is kept only when max|f32 - f64| / max|f64| < {CHECK_TOL} "
                        f"for every entry it produces, else it is drawn again from the same "
                        f"generator (a ReLU input or an AdamW gradient within rounding of 0, or a "
                        f"chaotic SGD trajectory, would make the reference unmatchable). "
                        f"inputs/labels: draw {first_draws} kept, deviation {first_dev:.1e}; "
                        f"step_inputs/step_labels: draw {step_draws} kept, deviation "
                        f"{step_dev:.1e}. A float32 implementation with another summation order "
                        f"should land within a few times these deviations",
        "entry.inputs": "(4,3,32,32) float32 torch.randn (drawn after the model; see "
                        "conditioning)",
        "entry.labels": "(4,) int64 torch.randint(0,10), drawn right after inputs",
        "entry.logits": "(4,10) model.train() forward of inputs from init (BatchNorm uses batch "
                        "statistics)",
        "entry.loss": "0-d cross-entropy of logits against labels",
        "entry.grad.*": "d loss / d parameter after one backward from init, for every parameter "
                        "except " + ", ".join(GRAD_NORM_ONLY) + " (size budget)",
        "entry.grad_norm.*": "0-d float64: L2 norm of the float32 gradient of each parameter "
                             "whose grad.* is not stored: " + ", ".join(GRAD_NORM_ONLY),
        "entry.after.*": "every buffer after that one train-mode forward: running_mean = "
                         "0.9*0 + 0.1*batch mean, running_var = 0.9*1 + 0.1*unbiased batch "
                         "variance, num_batches_tracked = 1 (I64)",
        "entry.eval_logits": "(4,10) model.eval() forward of the same inputs, parameters = init, "
                             "BatchNorm using the after.* running statistics",
        "entry.clip.total_norm": "0-d float32: torch.nn.utils.clip_grad_norm_(model.parameters(), "
                                 "max_norm=0.5, norm_type=2) on the grad.* gradients (all 59 "
                                 "parameters): the total L2 norm of all gradients BEFORE clipping",
        "entry.clip.grad.*": "gradients after clipping, g * min(1, 0.5 / (total_norm + 1e-6)); "
                             "stored for " + subset,
        "entry.step_inputs": f"({NUM_STEPS},{STEP_BATCH},3,32,32) stored as F16: torch.randn "
                             "rounded to float16 (drawn after inputs/labels; see conditioning); "
                             "step s "
                             "trains on step_inputs[s].float()",
        "entry.step_labels": f"({NUM_STEPS},{STEP_BATCH}) int64 torch.randint(0,10), drawn "
                             "right after step_inputs",
        "entry.sgd3.*": "after 3 steps from init (parameters and buffers reset to init.*, fresh "
                        "optimizer) of torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=5e-4, "
                        "nesterov=True, dampening=0), model.train(), step s = zero_grad, forward "
                        "on step_inputs[s], loss, backward, step(); stored for " + subset +
                        ", " + ", ".join(SUBSET_BUFFERS) + " (running stats updated 3 times, "
                        "num_batches_tracked = 3)",
        "entry.sgd3_losses": "(3,) loss of each SGD step, before its update",
        "entry.adamw3.*": "after 3 steps from init (parameters and buffers reset, fresh optimizer) "
                          "of torch.optim.AdamW(lr=1e-3, betas=(0.9,0.999), eps=1e-8, "
                          "weight_decay=5e-2, amsgrad=False) on the same batches: p *= 1 - lr*wd; "
                          "m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr/(1-b1^t) * m / "
                          "(sqrt(v)/sqrt(1-b2^t) + eps); stored for " + subset,
        "entry.adamw3_losses": "(3,) loss of each AdamW step, before its update",
        "optim.weight_decay": "one parameter group: weight decay applies to every parameter "
                              "(conv, BatchNorm and Linear weights and biases)",
        "ema": "not in this file (no PyTorch reference)",
    }
    return entries, meta


def main():
    torch.set_num_threads(1)  # one summation order, so reruns give the same bytes
    op_entries, op_meta = make_ops()
    net_entries, net_meta = make_resnet()
    meta = {
        "torch_version": torch.__version__,
        "generator": "tests/golden/make_golden_resnet.py (models: bench/pytorch_resnet.py)",
        "seed": f"torch.manual_seed({SEED}) before the ops (then their draws in entry order) and "
                f"again before resnet20() (then its init, then inputs, labels, step_inputs, "
                f"step_labels, each pair redrawn until well conditioned: see conditioning)",
        "dtypes": "ops entries float64; resnet20 entries float32 except init.*conv*.weight and "
                  "step_inputs (F16), labels/step_labels/num_batches_tracked (I64), "
                  "grad_norm.* (F64)",
    }
    meta.update(op_meta)
    meta.update(net_meta)
    path = os.path.join(OUT_DIR, OUT_NAME)
    entries = op_entries + net_entries
    size = save_safetensors(path, entries, meta)
    print(f"{path}: {len(entries)} entries, {size} bytes")
    if size >= MAX_BYTES:
        print(f"error: {size} bytes, over the {MAX_BYTES} byte budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
