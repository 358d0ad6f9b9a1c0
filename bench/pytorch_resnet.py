#!/usr/bin/env python3
"""The PyTorch side of hpcnet's ResNet benchmark: CIFAR ResNets, timed training steps on
synthetic data, plus the model definitions that tests/golden/make_golden_resnet.py imports.

    python3 bench/pytorch_resnet.py --model resnet20 --precision fp32 --batch 128 --steps 20 \
        --threads 2 --json
    python3 bench/pytorch_resnet.py --model resnet20 --precision bf16 --batch 128 --steps 20 \
        --threads 2 --json
    python3 bench/pytorch_resnet.py --check          # parameter counts of every model

Models (parameter and buffer names are the ones hpcnet's C++ models use):

  resnet20/32/56  He et al. 2016, section 4.2 (CIFAR-10), in the layout of
                  akamaster/pytorch_resnet_cifar10: conv1 3x3 (3->16, no bias), bn1, relu,
                  layer1..layer3 of n = 3/5/9 BasicBlocks with 16/32/64 planes (the first block
                  of layer2 and layer3 has stride 2), global average pool, linear (64 -> 10).
                  Shortcut "option A": when the shape changes, x[:, :, ::2, ::2] zero-padded
                  with planes // 4 channels on each side (no parameters), else identity.
                  Init: kaiming_normal_ (fan_in, gain sqrt(2)) on every Conv2d and Linear
                  weight, after PyTorch's default init; Linear bias and BatchNorm keep
                  PyTorch's defaults (bias uniform(+-1/sqrt(fan_in)); BN weight 1, bias 0).
  resnet18/34/50/101  torchvision.models.resnetN(num_classes=10) (torchvision's ImageNet ResNets,
                  hpcnet's resnet18/34/50/101), timed at --imgsz 224 by default; the epoch
                  estimate counts ImageNet-1k's 1,281,167 training images.
  cifar_resnet18  the CIFAR variant of kuangliu/pytorch-cifar: conv1 3x3 (3->64, no bias), bn1,
                  relu, layer1..layer4 of 2 BasicBlocks (64/128/256/512 planes, strides
                  1/2/2/2), shortcut when the shape changes = Sequential(Conv2d 1x1 stride s, no
                  bias; BatchNorm2d) named shortcut.0 / shortcut.1, avg_pool2d(4), linear
                  (512 -> 10). PyTorch's default init (as in that repository).

BasicBlock: out = relu(bn1(conv1(x))); out = bn2(conv2(out)); out = relu(out + shortcut(x)),
conv1 3x3 with the block's stride and padding 1, conv2 3x3 stride 1 padding 1, both without
bias. BatchNorm2d defaults: eps 1e-5, momentum 0.1, affine, running stats tracked.

The benchmark: model.train(), NCHW float32 parameters, CrossEntropyLoss, SGD(lr 0.1, momentum
0.9, weight_decay 5e-4, nesterov=True); a pool of 8 fixed random batches (torch.randn inputs,
random labels) reused round-robin; 3 warm-up steps, then --steps timed steps (each: zero_grad,
forward, loss, backward, step). bf16 is PyTorch's CPU mixed-precision recipe: forward and loss
under torch.autocast("cpu", dtype=torch.bfloat16), parameters, gradients and the optimizer stay
float32. Runs with Debian's python3-torch (1.13) and with a current PyPI torch.
"""

import argparse
import json
import platform
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- models ----


def _kaiming_init(m):
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        nn.init.kaiming_normal_(m.weight)


class ShortcutA(nn.Module):
    """Option A shortcut: subsample by 2 in H and W, zero-pad planes // 4 channels per side.
    No parameters, so it adds no names to the state dict."""

    def __init__(self, planes):
        super().__init__()
        self.pad = planes // 4

    def forward(self, x):
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1, option="A"):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()  # identity, no names
        if stride != 1 or in_planes != planes:
            if option == "A":
                self.shortcut = ShortcutA(planes)
            else:  # "B": projection, names shortcut.0.weight, shortcut.1.*
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + self.shortcut(x)
        return F.relu(out)


class CifarResNet(nn.Module):
    """resnet20/32/56/110: 6n+2 layers (akamaster/pytorch_resnet_cifar10 layout)."""

    def __init__(self, num_blocks, num_classes=10):
        super().__init__()
        self.in_planes = 16
        self.conv1 = nn.Conv2d(3, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._make_layer(16, num_blocks[0], 1)
        self.layer2 = self._make_layer(32, num_blocks[1], 2)
        self.layer3 = self._make_layer(64, num_blocks[2], 2)
        self.linear = nn.Linear(64, num_classes)
        self.apply(_kaiming_init)

    def _make_layer(self, planes, n, stride):
        layers = []
        for s in [stride] + [1] * (n - 1):
            layers.append(BasicBlock(self.in_planes, planes, s, option="A"))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.avg_pool2d(out, out.size(3))  # global average over the 8x8 map
        out = out.view(out.size(0), -1)
        return self.linear(out)


class ResNet18(nn.Module):
    """kuangliu/pytorch-cifar ResNet18 (CIFAR stem: 3x3 conv, no max-pool)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._make_layer(64, 2, 1)
        self.layer2 = self._make_layer(128, 2, 2)
        self.layer3 = self._make_layer(256, 2, 2)
        self.layer4 = self._make_layer(512, 2, 2)
        self.linear = nn.Linear(512, num_classes)

    def _make_layer(self, planes, n, stride):
        layers = []
        for s in [stride] + [1] * (n - 1):
            layers.append(BasicBlock(self.in_planes, planes, s, option="B"))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        return self.linear(out)


def resnet20(num_classes=10):
    return CifarResNet([3, 3, 3], num_classes)


def resnet32(num_classes=10):
    return CifarResNet([5, 5, 5], num_classes)


def resnet56(num_classes=10):
    return CifarResNet([9, 9, 9], num_classes)


def resnet18(num_classes=10):
    return ResNet18(num_classes)


MODELS = {"resnet20": resnet20, "resnet32": resnet32, "resnet56": resnet56,
          "cifar_resnet18": resnet18}  # hpcnet's cifar_resnet18 (its "resnet18" until 2026-12)


def _torchvision(name):
    def make(num_classes=10):
        import torchvision
        return getattr(torchvision.models, name)(num_classes=num_classes)
    return make


# torchvision's ImageNet ResNets (hpcnet's resnet18/34/50/101), default input 224 px.
TORCHVISION = ("resnet18", "resnet34", "resnet50", "resnet101")
MODELS.update({n: _torchvision(n) for n in TORCHVISION})


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ---- benchmark ----


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="resnet20", choices=sorted(MODELS))
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--imgsz", type=int, default=0,
                   help="input size (0: 224 for torchvision's resnet18/34/50/101, else 32)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (after the warm-up)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (None: leave torch's choice)")
    p.add_argument("--pool", type=int, default=8, help="synthetic batches reused round-robin")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON line of results")
    p.add_argument("--check", action="store_true",
                   help="print the parameter count of every model and exit")
    a = p.parse_args(argv)
    for name in ("batch", "steps", "pool"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be >= 1")
    if a.imgsz < 0:
        p.error("--imgsz must be >= 0")
    a.imgsz = a.imgsz or (224 if a.model in TORCHVISION else 32)
    return a


def check(as_json):
    for name, make in MODELS.items():
        torch.manual_seed(0)
        try:
            m = make()
        except ImportError as e:  # torchvision's models without torchvision
            print(f"{name:9s} skipped: {e}")
            continue
        n_params = count_params(m)
        n_tensors = len(list(m.parameters()))
        n_buffers = len(list(m.buffers()))
        with torch.no_grad():
            out_shape = list(m.eval()(torch.zeros(2, 3, 32, 32)).shape)
        if as_json:
            print(json.dumps({"model": name, "params": n_params, "param_tensors": n_tensors,
                              "buffers": n_buffers, "output_shape": out_shape}))
        else:
            print(f"{name:9s} params {n_params:>10,d} ({n_params / 1e6:.2f}M)  "
                  f"param tensors {n_tensors:3d}  buffers {n_buffers:3d}  "
                  f"output {tuple(out_shape)}")


def main(argv=None):
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.check:
        check(args.json)
        return 0

    torch.manual_seed(args.seed)
    model = MODELS[args.model]()
    model.train()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4,
                                nesterov=True)
    inputs = torch.randn(args.pool, args.batch, 3, args.imgsz, args.imgsz)
    labels = torch.randint(0, 10, (args.pool, args.batch), dtype=torch.int64)
    bf16 = args.precision == "bf16"

    def step(i):
        x, y = inputs[i % args.pool], labels[i % args.pool]
        optimizer.zero_grad()
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = criterion(model(x), y)
        else:
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()  # .item() also makes sure the step has finished

    for i in range(args.warmup):
        step(i)
    times, losses = [], []
    for i in range(args.warmup, args.warmup + args.steps):
        t0 = time.perf_counter()
        losses.append(step(i))
        times.append(time.perf_counter() - t0)

    ms = 1000.0 * statistics.median(times)
    epoch_images = 1281167 if args.model in TORCHVISION else 50000  # ImageNet-1k / CIFAR-10
    steps_per_epoch = epoch_images / args.batch
    result = {
        "model": args.model,
        "precision": args.precision,
        "batch": args.batch,
        "imgsz": args.imgsz,
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "warmup": args.warmup,
        "ms_per_step": round(ms, 3),
        "ms_per_step_min": round(1000.0 * min(times), 3),
        "ms_per_step_mean": round(1000.0 * statistics.mean(times), 3),
        "images_per_s": round(args.batch / (ms / 1000.0), 2),
        "epoch_s_est": round(steps_per_epoch * ms / 1000.0, 2),
        "epoch_s_est_note": f"extrapolated: {epoch_images}/{args.batch} steps x median "
                            f"ms_per_step of {args.steps} timed steps",
        "params": count_params(model),
        "final_loss": round(losses[-1], 5),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.model} {args.precision} batch {args.batch} threads {result['threads']}: "
              f"{ms:.1f} ms/step (median of {args.steps}), {result['images_per_s']:.1f} images/s, "
              f"epoch ~{result['epoch_s_est']:.1f} s (extrapolated), final loss "
              f"{result['final_loss']:.4f}, peak RSS {result['peak_rss_mb']:.0f} MB, "
              f"torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
