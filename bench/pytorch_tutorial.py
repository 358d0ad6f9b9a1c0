#!/usr/bin/env python3
"""The PyTorch side of hpcnet's side-by-side benchmark: PyTorch's classic CIFAR-10 tutorial.

Same Net, loss, optimizer, transforms, batching and loss printing as the tutorial, but it reads
the data hpcnet reads (the image-folder .tar.gz, an unpacked image folder, or a
cifar-10-batches-bin folder), holds out hpcnet's validation split (bench/hpcnet_rng.py) and
reports validation accuracy on it. All images are decoded into memory before the timed loop.

    python3 bench/pytorch_tutorial.py --data ../shared/data/cifar10-train-jpg.tar.gz --json

Runs with Debian's python3-torch (1.13) and with a current PyPI torch; torchvision is not
needed (ToTensor and Normalize are written out below with the same arithmetic).
"""

import argparse
import io
import json
import os
import platform
import resource
import sys
import tarfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpcnet_rng  # noqa: E402

IMAGE_EXTS = (".jpg", ".jpeg", ".png")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")
DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                            "data", "cifar10-train-jpg.tar.gz")


# --------------------------------------------------------------------------------------------
# Data: everything decoded once into images (N, 32, 32, 3) uint8 and labels (N,) int64, in
# hpcnet's dataset order (image folder: class-major, classes and files sorted by name;
# binary: record order of data_batch_1..5).
# --------------------------------------------------------------------------------------------

def _decode(blob):
    with Image.open(io.BytesIO(blob)) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


def _from_image_entries(entries):
    """entries: list of (path, bytes) for image files laid out as .../<class>/<file>."""
    by_class = {}
    for path, blob in entries:
        parts = path.replace("\\", "/").strip("/").split("/")
        if len(parts) < 2:
            raise ValueError(f"image '{path}' is not inside a class folder (<class>/<file>)")
        by_class.setdefault(parts[-2], []).append((parts[-1], path, blob))
    if not by_class:
        raise ValueError("no images (.jpg/.jpeg/.png) found")
    classes = sorted(by_class)
    order = [(label, blob) for label, cls in enumerate(classes)
             for _, _, blob in sorted(by_class[cls], key=lambda e: (e[0], e[1]))]
    by_class.clear()
    first = _decode(order[0][1])
    images = np.empty((len(order),) + first.shape, dtype=np.uint8)  # (N, H, W, 3)
    labels = np.empty(len(order), dtype=np.int64)
    for n, (label, blob) in enumerate(order):
        im = _decode(blob)
        if im.shape != first.shape:
            raise ValueError(f"image {n} has shape {im.shape}, the first has {first.shape}")
        images[n] = im
        labels[n] = label
    return images, labels, classes


def load_tar(path):
    entries = []
    with tarfile.open(path, "r:*") as tf:
        for m in tf:  # sequential: works on .tar.gz without random access
            if m.isfile() and m.name.lower().endswith(IMAGE_EXTS):
                entries.append((m.name, tf.extractfile(m).read()))
    return _from_image_entries(entries)


def load_image_folder(root):
    entries = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.lower().endswith(IMAGE_EXTS):
                p = os.path.join(dirpath, f)
                with open(p, "rb") as fh:
                    entries.append((os.path.relpath(p, root), fh.read()))
    return _from_image_entries(entries)


def load_cifar_bin(root):
    rec = 1 + 3 * 32 * 32
    images, labels = [], []
    for k in range(1, 6):
        p = os.path.join(root, f"data_batch_{k}.bin")
        raw = np.fromfile(p, dtype=np.uint8)
        if raw.size % rec:
            raise ValueError(f"{p}: size {raw.size} is not a multiple of the record size {rec}")
        raw = raw.reshape(-1, rec)
        labels.append(raw[:, 0].astype(np.int64))
        images.append(raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels), \
        list(CIFAR10_CLASSES)


def load_dataset(path):
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "data_batch_1.bin")):
            return load_cifar_bin(path)
        return load_image_folder(path)
    if os.path.isfile(path):
        return load_tar(path)
    raise FileNotFoundError("no such file or folder")


def load_dataset_or_report(path):
    """load_dataset(path), or None after printing the one-line error for --data."""
    try:
        return load_dataset(path)
    except (OSError, ValueError, tarfile.TarError) as e:
        print(f"error: cannot read --data {path}: {e}", file=sys.stderr)
        return None


# The tutorial's transform: ToTensor() then Normalize((0.5,0.5,0.5), (0.5,0.5,0.5)).
class ToTensor:
    def __call__(self, img):  # (H, W, C) uint8 -> (C, H, W) float in [0, 1]
        return torch.from_numpy(img).permute(2, 0, 1).contiguous().float().div(255)


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, t):
        return (t - self.mean) / self.std


class Compose:
    def __init__(self, ts):
        self.ts = ts

    def __call__(self, x):
        for t in self.ts:
            x = t(x)
        return x


class InMemoryDataset(torch.utils.data.Dataset):
    """Per-sample transform in __getitem__, as torchvision's CIFAR10 dataset does."""

    def __init__(self, images, labels, indices, transform):
        self.images, self.labels = images, labels
        self.indices = np.asarray(indices, dtype=np.int64)
        self.transform = transform

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        k = self.indices[i]
        return self.transform(self.images[k]), int(self.labels[k])


# --------------------------------------------------------------------------------------------
# The tutorial's network.
# --------------------------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):  # x: (B, 3, 32, 32)
        x = self.pool(F.relu(self.conv1(x)))  # (B, 6, 14, 14)
        x = self.pool(F.relu(self.conv2(x)))  # (B, 16, 5, 5)
        x = torch.flatten(x, 1)  # (B, 400)
        x = F.relu(self.fc1(x))  # (B, 120)
        x = F.relu(self.fc2(x))  # (B, 84)
        return self.fc3(x)  # (B, 10)


def peak_rss_mb(who=resource.RUSAGE_SELF):
    return resource.getrusage(who).ru_maxrss / 1024.0  # Linux reports KiB


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA,
                   help="image-folder .tar/.tar.gz, an unpacked image folder, or a "
                        "cifar-10-batches-bin folder")
    p.add_argument("--val-split", type=int, default=5000,
                   help="images held out by hpcnet's split (hpcnet_rng.split_train_val); 0: none")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (None: leave torch's choice)")
    p.add_argument("--workers", type=int, default=0,
                   help="DataLoader num_workers (the tutorial uses 2; 0 keeps timing honest)")
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps in all")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed (init and shuffle)")
    p.add_argument("--log-every", type=int, default=2000, help="mini-batches per loss line")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    p.add_argument("--json", action="store_true", help="print one final JSON line of results")
    a = p.parse_args(argv)
    for name in ("epochs", "batch_size", "log_every"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.steps is not None and a.steps < 1:
        p.error("--steps must be >= 1")
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be >= 1")
    if a.workers < 0 or a.val_split < 0:
        p.error("--workers and --val-split must be >= 0")
    return a


def main(argv=None):
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    t0 = time.perf_counter()
    loaded = load_dataset_or_report(args.data)
    if loaded is None:
        return 2
    images, labels, classes = loaded
    n_total = len(labels)
    if args.val_split >= n_total:
        print(f"error: --val-split {args.val_split} must be below the {n_total} images",
              file=sys.stderr)
        return 2
    train_idx, val_idx = hpcnet_rng.split_train_val(n_total, args.val_split)
    load_seconds = time.perf_counter() - t0
    print(f"data: {n_total} images {images.shape[1:]} from {args.data}, {len(classes)} classes; "
          f"train {len(train_idx)}, validation {len(val_idx)}; loaded in {load_seconds:.1f} s")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"workers {args.workers}, device {device}")

    transform = Compose([ToTensor(), Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    trainset = InMemoryDataset(images, labels, train_idx, transform)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=args.batch_size,
                                              shuffle=True, num_workers=args.workers)

    net = Net().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)

    steps, seen = 0, 0
    last_report_loss, running_loss, running_count = None, 0.0, 0
    epochs_run = 0
    done = False
    t_train = time.perf_counter()
    for epoch in range(args.epochs):  # loop over the dataset multiple times
        epochs_run = epoch + 1
        running_loss, running_count = 0.0, 0
        for i, data in enumerate(trainloader, 0):
            # get the inputs; data is a list of [inputs, labels]
            inputs, targets = data[0].to(device), data[1].to(device)

            # zero the parameter gradients
            optimizer.zero_grad()

            # forward + backward + optimize
            outputs = net(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()

            # print statistics
            running_loss += loss.item()
            running_count += 1
            steps += 1
            seen += inputs.shape[0]
            if i % args.log_every == args.log_every - 1:  # every log_every mini-batches
                last_report_loss = running_loss / args.log_every
                print(f"[{epoch + 1}, {i + 1:5d}] loss: {last_report_loss:.3f}", flush=True)
                running_loss, running_count = 0.0, 0
            if args.steps is not None and steps >= args.steps:
                done = True
                break
        if done:
            break
    train_seconds = time.perf_counter() - t_train
    print("Finished Training")
    final_running_loss = running_loss / running_count if running_count else None
    print(f"train: {steps} steps, {seen} images in {train_seconds:.2f} s, "
          f"{seen / train_seconds:.1f} images/s")

    val_accuracy, per_class = None, {}
    if len(val_idx):
        valset = InMemoryDataset(images, labels, val_idx, transform)
        valloader = torch.utils.data.DataLoader(valset, batch_size=1000, shuffle=False)
        correct_pred = {c: 0 for c in classes}
        total_pred = {c: 0 for c in classes}
        correct, total = 0, 0
        net.eval()
        with torch.no_grad():
            for inputs, targets in valloader:
                outputs = net(inputs.to(device))
                predicted = outputs.argmax(1).cpu()
                total += targets.size(0)
                correct += (predicted == targets).sum().item()
                for t, p in zip(targets.tolist(), predicted.tolist()):
                    total_pred[classes[t]] += 1
                    correct_pred[classes[t]] += int(t == p)
        val_accuracy = 100.0 * correct / total
        print(f"Accuracy of the network on the {total} validation images: {val_accuracy:.2f} %")
        for c in classes:
            if total_pred[c]:
                per_class[c] = 100.0 * correct_pred[c] / total_pred[c]
                print(f"Accuracy for class: {c:10s} is {per_class[c]:.1f} %")

    if args.json:
        print(json.dumps({
            "torch_version": torch.__version__,
            "python": platform.python_version(),
            "device": str(device),
            "threads": torch.get_num_threads(),
            "workers": args.workers,
            "batch_size": args.batch_size,
            "epochs": epochs_run,
            "steps": steps,
            "images_seen": seen,
            "lr": args.lr,
            "momentum": args.momentum,
            "seed": args.seed,
            "n_train": len(train_idx),
            "n_val": len(val_idx),
            "load_seconds": round(load_seconds, 3),
            "train_seconds": round(train_seconds, 3),
            "images_per_sec": round(seen / train_seconds, 1),
            "final_running_loss": final_running_loss,
            "last_report_loss": last_report_loss,
            "val_accuracy": val_accuracy,
            "val_accuracy_per_class": per_class,
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "peak_rss_children_mb": round(peak_rss_mb(resource.RUSAGE_CHILDREN), 1),
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
