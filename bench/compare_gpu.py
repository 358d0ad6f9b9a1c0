#!/usr/bin/env python3
"""Side-by-side benchmark of training steps on the GPU: hpcnet against PyTorch, in one run.

For each row (model, image size, batch) and each precision, this times the same synthetic
training steps in PyTorch (in this process) and in hpcnet (one `hpcnet bench` process per
row and precision), one after the other, and prints images/s of both and the ratio
hpcnet images/s / PyTorch images/s (above 1: hpcnet is faster).

  hpcnet   BIN bench --device DEV --model M --imgsz S --batch-size B --precision P
             --steps N --warmup W --no-profile --json      (images_per_sec, ms_per_step)
  PyTorch  the same model built from PyTorch code (below), the same loss, SGD(lr 0.001,
           momentum 0.9) as hpcnet's bench, a pool of 8 fixed random batches reused
           round-robin (randn images; random labels, masks or boxes); W untimed steps, then
           N steps (zero_grad, forward, loss, backward, step) timed by CUDA events around
           them and one synchronize (on the CPU: time.perf_counter)

Rows (CUDA batch sizes; --rows picks some, by name, by the name before ':' or by model):

  resnet18@224, resnet50@224   b64   torchvision resnet18/50(num_classes=10), CrossEntropy
  resnet20@32                  b128  CIFAR ResNet-20, option-A shortcuts (bench/pytorch_resnet.py)
  unet_resnet18@128 / @512     b16/b8 smp.Unet('resnet18', encoder_weights=None, classes=11),
                                     CrossEntropy over the pixels
  deeplabv3_resnet50@512       b8    torchvision deeplabv3_resnet50(weights=None,
                                     weights_backbone=None, num_classes=11, aux_loss=False)
  yolov8n@128 / @640           b64/b16 Ultralytics DetectionModel('yolov8n.yaml', nc=10) and its
                                     v8DetectionLoss (box 7.5, cls 0.5, dfl 1.5) on 3-4 boxes
                                     per image, summed as Ultralytics' trainer does
  lenet@32:b4, lenet@32:b512   b4/b512 the tutorial's Net (bench/pytorch_tutorial.py); these
                                     rows run 10x the steps (a step takes about a millisecond)

--quick: resnet50@224, unet_resnet18@128, yolov8n@640, lenet@32:b4. The rows of --quick run
first, so a --budget that runs out leaves the others.

Precisions (--precisions picks):
  fp32  PyTorch: float32 with TF32 allowed (torch.backends.cuda.matmul.allow_tf32 and
        torch.backends.cudnn.allow_tf32); hpcnet --precision fp32 --tf32 (where its bench has
        that option; TF32 is its default). --no-tf32: neither side uses TF32 (--tf32=false)
  bf16  PyTorch: torch.autocast(DEV, dtype=torch.bfloat16), model and input channels_last;
        hpcnet --precision bf16

    YOLO_OFFLINE=1 python3 bench/compare_gpu.py                    # every row, on the GPU
    python3 bench/compare_gpu.py --quick --json /tmp/compare.json
    python3 bench/compare_gpu.py --rows yolov8n,lenet --precisions fp32
    YOLO_OFFLINE=1 PYTHONPATH=/tmp/smp-pkgs /tmp/ref/bin/python bench/compare_gpu.py \
        --device cpu --scale small                                 # a dry run on the CPU
    python3 bench/compare_gpu.py --render /tmp/compare.json       # the table of a --json file

--scale small (dry runs): batch min(B, 2), image size min(S, 64). A side that cannot run
(a package missing, hpcnet bench without --device, an error, --budget spent) is reported as
"skipped: reason" and the other rows go on. Exit status: 0 when the run went through (rows
may be skipped), 2 for bad usage (or --device cuda without a GPU visible to PyTorch).
"""

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
os.environ.setdefault("YOLO_OFFLINE", "1")  # Ultralytics: no downloads, no update checks


class Row:
    def __init__(self, name, model, imgsz, batch, task, steps_factor=1):
        self.name, self.model, self.imgsz, self.batch = name, model, imgsz, batch
        self.task, self.steps_factor = task, steps_factor


ROWS = [
    Row("resnet18@224", "resnet18", 224, 64, "classify"),
    Row("resnet50@224", "resnet50", 224, 64, "classify"),
    Row("resnet20@32", "resnet20", 32, 128, "classify"),
    Row("unet_resnet18@128", "unet_resnet18", 128, 16, "segment"),
    Row("unet_resnet18@512", "unet_resnet18", 512, 8, "segment"),
    Row("deeplabv3_resnet50@512", "deeplabv3_resnet50", 512, 8, "segment"),
    Row("yolov8n@128", "yolov8n", 128, 64, "detect"),
    Row("yolov8n@640", "yolov8n", 640, 16, "detect"),
    Row("lenet@32:b4", "lenet", 32, 4, "classify", steps_factor=10),
    Row("lenet@32:b512", "lenet", 32, 512, "classify", steps_factor=10),
]
QUICK = ["resnet50@224", "unet_resnet18@128", "yolov8n@640", "lenet@32:b4"]
PRECISIONS = ("fp32", "bf16")
CLASSES = {"classify": 10, "segment": 11, "detect": 10}  # as hpcnet's bench (src/train/bench.cpp)


class Skip(Exception):
    """A side that cannot run: the message is the reason shown in the table."""


class OutOfTime(Exception):
    pass


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__[__doc__.index("\n\n") + 2:])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "hpcnet"), help="hpcnet binary")
    p.add_argument("--bin-ld-path", default="",
                   help="prepended to LD_LIBRARY_PATH for hpcnet's processes only")
    p.add_argument("--steps", type=int, default=30, help="timed steps per run (lenet rows: 10x)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (lenet rows: 10x)")
    p.add_argument("--quick", action="store_true", help="the short list: " + ", ".join(QUICK))
    p.add_argument("--rows", default="", help="comma-separated row names, prefixes or models")
    p.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--scale", default="full", choices=("full", "small"),
                   help="small: batch <= 2, imgsz <= 64 (CPU dry runs)")
    p.add_argument("--no-tf32", action="store_true",
                   help="fp32 without TF32 on both sides (hpcnet: --tf32=false)")
    p.add_argument("--bf16-layout", choices=("nchw", "nhwc"),
                   help="hpcnet's bf16 convolutions in this layout (HPCNET_CUDA_BF16_LAYOUT)")
    p.add_argument("--no-cuda-graph", action="store_true",
                   help="hpcnet times eager steps (default on CUDA: --cuda-graph replays)")
    p.add_argument("--only", choices=("torch", "hpcnet"), help="one side only")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds for the whole run; rows that would start later are skipped")
    p.add_argument("--json", metavar="OUT", help="write the rows as JSON (rewritten after each)")
    p.add_argument("--render", metavar="JSON", help="print the table of a --json file and exit")
    p.add_argument("--no-table", action="store_true",
                   help="one line per run only (a caller prints the table with --render)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be positive and --warmup not negative")
    precs = [x for x in a.precisions.split(",") if x]
    bad = [x for x in precs if x not in PRECISIONS]
    if bad or not precs:
        p.error(f"--precisions: unknown {','.join(bad) or '(none)'}; choose from fp32, bf16")
    a.precision_list = precs
    return a


def select_rows(a):
    if a.rows:
        picked = []
        for sel in (s.strip() for s in a.rows.split(",") if s.strip()):
            hits = [r for r in ROWS if sel in (r.name, r.name.split(":")[0], r.model)]
            if not hits:
                print(f"compare_gpu: --rows: no row '{sel}'; rows: "
                      + ", ".join(r.name for r in ROWS), file=sys.stderr)
                sys.exit(2)
            picked += [r for r in hits if r not in picked]
    elif a.quick:
        picked = [r for r in ROWS if r.name in QUICK]
    else:
        picked = list(ROWS)
    # The rows of --quick first: a budget that runs out leaves the others.
    return sorted(picked, key=lambda r: (r.name not in QUICK, ROWS.index(r)))


# ---- the environment ----


def environment(a, torch):
    env = {"device": a.device, "python": platform.python_version(), "torch": torch.__version__,
           "host": platform.node(), "cpus": os.cpu_count()}
    try:
        import torchvision
        env["torchvision"] = torchvision.__version__
    except ImportError:
        env["torchvision"] = None
    if a.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            env["nvidia_smi"] = r.stdout.strip().splitlines()[0]
    if a.device == "cpu":
        try:
            with open("/proc/cpuinfo") as f:
                env["cpu"] = next(l.split(":", 1)[1].strip() for l in f
                                  if l.startswith("model name"))
        except (OSError, StopIteration):
            env["cpu"] = platform.processor()
        env["torch_threads"] = torch.get_num_threads()
    return env


def describe(env):
    if env["device"] == "cuda":
        dev = (f"{env['gpu']}; nvidia-smi: {env.get('nvidia_smi', 'absent')}; CUDA {env['cuda']}, "
               f"cuDNN {env['cudnn']}")
    else:
        dev = (f"CPU {env.get('cpu')}, {env.get('torch_threads')} torch threads; "
               f"nvidia-smi: {env.get('nvidia_smi', 'absent')}")
    return f"{dev}; torch {env['torch']}, torchvision {env['torchvision']}, Python {env['python']}"


# ---- the PyTorch side ----


def build_torch(row):
    """(model, loss(out, batch)) for a row; Skip when a package is missing."""
    import torch.nn.functional as F
    nc = CLASSES[row.task]
    if row.model == "lenet":
        try:
            from pytorch_tutorial import Net
        except ImportError as e:
            raise Skip(f"bench/pytorch_tutorial.py: {e}")
        return Net(), lambda out, b: F.cross_entropy(out, b["labels"])
    if row.model in ("resnet18", "resnet50", "resnet20"):
        import pytorch_resnet
        try:
            model = pytorch_resnet.MODELS[row.model](num_classes=nc)
        except ImportError as e:
            raise Skip(str(e))
        return model, lambda out, b: F.cross_entropy(out, b["labels"])
    if row.model == "unet_resnet18":
        try:
            import segmentation_models_pytorch as smp
        except ImportError as e:
            raise Skip(f"segmentation_models_pytorch: {e}")
        model = smp.Unet("resnet18", encoder_weights=None, classes=nc)
        return model, lambda out, b: F.cross_entropy(out, b["masks"])
    if row.model == "deeplabv3_resnet50":
        try:
            from torchvision.models.segmentation import deeplabv3_resnet50
        except ImportError as e:
            raise Skip(f"torchvision: {e}")
        model = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=nc,
                                   aux_loss=False)
        return model, lambda out, b: F.cross_entropy(out["out"], b["masks"])
    if row.model == "yolov8n":
        try:
            from ultralytics.nn.tasks import DetectionModel
            from ultralytics.utils.loss import v8DetectionLoss
        except ImportError as e:
            raise Skip(f"ultralytics: {e}")
        from ultralytics.utils import LOGGER
        level = LOGGER.level
        LOGGER.setLevel("WARNING")  # not its "Overriding model.yaml nc=80 with nc=10"
        try:
            model = DetectionModel("yolov8n.yaml", nc=nc, verbose=False)
        finally:
            LOGGER.setLevel(level)
        model.args = types.SimpleNamespace(box=7.5, cls=0.5, dfl=1.5)  # DEFAULT_CFG's gains
        holder = {}

        def loss(out, b):
            # Built on first use: v8DetectionLoss takes the device of the model's parameters.
            if "crit" not in holder:
                holder["crit"] = v8DetectionLoss(model)
            return holder["crit"](out, b)[0].sum()  # (box, cls, dfl) x batch, summed
        return model, loss
    raise Skip(f"no PyTorch model for {row.model}")


def make_batches(torch, row, batch, imgsz, device, channels_last, n=8):
    """n fixed synthetic batches: randn images and the row's targets (as hpcnet's bench)."""
    g = torch.Generator().manual_seed(1)
    nc = CLASSES[row.task]
    out = []
    for _ in range(n):
        x = torch.randn(batch, 3, imgsz, imgsz, generator=g)
        b = {"labels": torch.randint(nc, (batch,), generator=g)}
        if row.task == "segment":
            b["masks"] = torch.randint(nc, (batch, imgsz, imgsz), generator=g)
        if row.task == "detect":  # 3 or 4 boxes per image, 8 pixels or more, normalised xywh
            idx, cls, boxes = [], [], []
            for i in range(batch):
                for _ in range(3 + int(torch.randint(2, (1,), generator=g))):
                    w = 8 + int(torch.randint(imgsz // 2, (1,), generator=g))
                    h = 8 + int(torch.randint(imgsz // 2, (1,), generator=g))
                    x0 = int(torch.randint(imgsz - w, (1,), generator=g))
                    y0 = int(torch.randint(imgsz - h, (1,), generator=g))
                    idx.append(i)
                    cls.append(int(torch.randint(nc, (1,), generator=g)))
                    boxes.append([(x0 + w / 2) / imgsz, (y0 + h / 2) / imgsz, w / imgsz, h / imgsz])
            b = {"batch_idx": torch.tensor(idx, dtype=torch.float32),
                 "cls": torch.tensor(cls, dtype=torch.float32).view(-1, 1),
                 "bboxes": torch.tensor(boxes, dtype=torch.float32)}
        x = x.to(device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        b = {k: v.to(device) for k, v in b.items()}
        b["img"] = x
        out.append(b)
    return out


def run_torch(a, row, prec, batch, imgsz, steps, warmup):
    import torch
    model, loss_fn = build_torch(row)
    dev = torch.device(a.device)
    bf16 = prec == "bf16"
    torch.manual_seed(0)
    model = model.to(dev).train()
    if bf16:
        model = model.to(memory_format=torch.channels_last)
    batches = make_batches(torch, row, batch, imgsz, dev, bf16)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)

    def step(i):
        b = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(b["img"]), b)
        loss.backward()
        opt.step()
        return loss.detach()

    cuda = dev.type == "cuda"
    loss = None
    for i in range(warmup):
        loss = step(i)
    if cuda:
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
    else:
        start = time.perf_counter()
    for i in range(steps):
        loss = step(warmup + i)
    if cuda:
        t1.record()
        t1.synchronize()
        ms = t0.elapsed_time(t1)
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        ms = (time.perf_counter() - start) * 1000
        peak_mb = None
    loss = float(loss)
    del model, opt, batches
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    ms_step = ms / steps
    return {"images_per_sec": batch * 1000 / ms_step, "ms_per_step": ms_step, "steps": steps,
            "warmup": warmup, "loss": loss if math.isfinite(loss) else None,
            "loss_finite": math.isfinite(loss), "peak_cuda_mb": peak_mb}


# ---- the hpcnet side ----


def hpcnet_bench_options(a):
    """Which of the later options of `hpcnet bench` (--device, --tf32, --cuda-graph) this binary
    has."""
    try:
        r = subprocess.run([a.bin, "bench", "--help"], capture_output=True, text=True,
                           env=hpcnet_env(a), timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {o for o in ("--device", "--tf32", "--cuda-graph") if o in r.stdout}


def hpcnet_env(a):
    env = dict(os.environ)
    if a.bf16_layout:  # hpcnet's bfloat16 convolutions in NCHW (its default) or channels-last
        env["HPCNET_CUDA_BF16_LAYOUT"] = a.bf16_layout
    if a.bin_ld_path:
        env["LD_LIBRARY_PATH"] = a.bin_ld_path + (":" + env["LD_LIBRARY_PATH"]
                                                  if env.get("LD_LIBRARY_PATH") else "")
    return env


def run_hpcnet(a, row, prec, batch, imgsz, steps, warmup, options, timeout):
    if not os.access(a.bin, os.X_OK):
        raise Skip(f"no hpcnet binary at {a.bin}")
    cmd = [a.bin, "bench", "--model", row.model, "--imgsz", str(imgsz), "--batch-size",
           str(batch), "--precision", prec, "--steps", str(steps), "--warmup", str(warmup),
           "--no-profile", "--json"]
    if "--device" in options:
        cmd[2:2] = ["--device", a.device]
    elif a.device != "cpu":
        raise Skip("this hpcnet bench has no --device option")
    if a.device != "cpu" and "--tf32" in options:  # as PyTorch's side (hpcnet's default: on)
        cmd.append("--tf32=false" if a.no_tf32 else "--tf32")
    # hpcnet replays a CUDA graph of the step (it times eager steps, saying why on stderr, where
    # the step cannot be captured); PyTorch's side stays eager, as its users train.
    if a.device != "cpu" and "--cuda-graph" in options and not a.no_cuda_graph:
        cmd.append("--cuda-graph")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=hpcnet_env(a),
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Skip(f"hpcnet bench ran past {timeout:.0f}s (--budget)")
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        last = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
        raise Skip(f"hpcnet exit {r.returncode}: {last[:160]}")
    j = json.loads(lines[-1])
    return {"images_per_sec": j["images_per_sec"], "ms_per_step": j["ms_per_step"],
            "steps": j.get("steps"), "warmup": warmup, "device": j.get("device"),
            "cuda_graph": j.get("cuda_graph", False),
            "peak_rss_mb": j.get("peak_rss_mb"),
            "command": " ".join(cmd[1:])}


# ---- running, the table ----


class Deadline:
    def __init__(self, budget):
        self.end = time.monotonic() + budget if budget > 0 else None

    def left(self):
        return math.inf if self.end is None else self.end - time.monotonic()


def _alarm(signum, frame):
    raise OutOfTime()


def guarded(fn, deadline, *args):
    """fn(*args) -> (result, None) or (None, reason)."""
    left = deadline.left()
    if left < 1:
        return None, "skipped: --budget spent"
    use_alarm = deadline.end is not None
    if use_alarm:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(max(1, int(left)))
    try:
        return fn(*args), None
    except Skip as e:
        return None, f"skipped: {e}"
    except OutOfTime:
        return None, "skipped: ran past --budget"
    except Exception as e:  # an error in one row must not stop the others
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return None, f"skipped: {type(e).__name__}: {msg[:160]}"
    finally:
        if use_alarm:
            signal.alarm(0)


def ratio(rec):
    h, t = rec.get("hpcnet"), rec.get("torch")
    if h and t and t["images_per_sec"] > 0:
        return h["images_per_sec"] / t["images_per_sec"]
    return None


def notes(rec):
    out = []
    for side in ("torch", "hpcnet"):
        if rec.get(side + "_skipped"):
            out.append(f"{side} {rec[side + '_skipped']}")
    t, h = rec.get("torch"), rec.get("hpcnet")
    if t and not t["loss_finite"]:
        out.append("torch loss not finite")
    if t and h and h.get("steps") is not None and h["steps"] != t["steps"]:
        out.append(f"steps differ: torch {t['steps']}, hpcnet {h['steps']}")
    if h and h.get("cuda_graph"):
        out.append("hpcnet: CUDA graph")
    return "; ".join(out)


def table(records):
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)
    lines = [f"{'row':<24} {'prec':<4} {'batch':>5} {'imgsz':>5} {'torch img/s':>12} "
             f"{'hpcnet img/s':>12} {'ratio':>6} {'torch ms':>9} {'hpcnet ms':>9}  note"]
    order = {r.name: i for i, r in enumerate(ROWS)}
    for rec in sorted(records, key=lambda r: (order.get(r["row"], 99), r["precision"] != "fp32")):
        t, h = rec.get("torch") or {}, rec.get("hpcnet") or {}
        lines.append(
            f"{rec['row']:<24} {rec['precision']:<4} {rec['batch']:>5} {rec['imgsz']:>5} "
            f"{f(t.get('images_per_sec'), '.1f'):>12} {f(h.get('images_per_sec'), '.1f'):>12} "
            f"{f(rec.get('ratio'), '.2f'):>6} {f(t.get('ms_per_step'), '.2f'):>9} "
            f"{f(h.get('ms_per_step'), '.2f'):>9}  {notes(rec)}".rstrip())
    lines.append("ratio = hpcnet images/s / PyTorch images/s (above 1: hpcnet is faster)")
    return "\n".join(lines)


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    a = parse_args(argv)
    if a.render:
        with open(a.render) as f:
            print(table(json.load(f)["rows"]))
        return 0
    rows = select_rows(a)
    try:
        import torch
    except ImportError as e:
        print(f"compare_gpu: PyTorch is not importable with {sys.executable}: {e}", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("compare_gpu: --device cuda, but torch.cuda.is_available() is False "
              "(no GPU or driver; --device cpu for a dry run)", file=sys.stderr)
        return 2
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = not a.no_tf32
        torch.backends.cudnn.allow_tf32 = not a.no_tf32
    deadline = Deadline(a.budget)
    env = environment(a, torch)
    options = hpcnet_bench_options(a) if a.only != "torch" else set()
    has_device = "--device" in options
    env.update({"hpcnet": a.bin, "hpcnet_bench_device_option": has_device,
                "tf32": a.device == "cuda" and not a.no_tf32, "scale": a.scale,
                "steps": a.steps, "warmup": a.warmup})
    print(f"compare_gpu: {describe(env)}", flush=True)
    print(f"compare_gpu: hpcnet {a.bin} (bench --device: {'yes' if has_device else 'no'}); "
          f"{len(rows)} rows x {len(a.precision_list)} precisions, {a.steps} steps after "
          f"{a.warmup} warm-up (lenet 10x), scale {a.scale}", flush=True)
    doc = {"environment": env, "rows": []}
    for row in rows:
        batch, imgsz = row.batch, row.imgsz
        if a.scale == "small":
            batch, imgsz = min(batch, 2), min(imgsz, 64)
        steps, warmup = a.steps * row.steps_factor, a.warmup * row.steps_factor
        for prec in a.precision_list:
            rec = {"row": row.name, "model": row.model, "precision": prec, "batch": batch,
                   "imgsz": imgsz}
            t0 = time.monotonic()
            if a.only != "hpcnet":
                rec["torch"], rec["torch_skipped"] = guarded(
                    run_torch, deadline, a, row, prec, batch, imgsz, steps, warmup)
            if a.only != "torch":
                rec["hpcnet"], rec["hpcnet_skipped"] = guarded(
                    lambda: run_hpcnet(a, row, prec, batch, imgsz, steps, warmup, options,
                                       max(1.0, min(deadline.left(), 3600))), deadline)
            rec["ratio"] = ratio(rec)
            t, h = rec.get("torch"), rec.get("hpcnet")
            print(f"  {row.name} {prec} b{batch} {imgsz}px: torch "
                  f"{'%.1f img/s' % t['images_per_sec'] if t else rec.get('torch_skipped')}, "
                  f"hpcnet {'%.1f img/s' % h['images_per_sec'] if h else rec.get('hpcnet_skipped')}"
                  f"{', ratio %.2f' % rec['ratio'] if rec['ratio'] else ''}"
                  f"{', loss %.4g' % t['loss'] if t and t['loss'] is not None else ''}"
                  f" ({time.monotonic() - t0:.1f}s)", flush=True)
            doc["rows"].append(rec)
            if a.json:
                write_json(a.json, doc)
    if not a.no_table:
        print()
        print(table(doc["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
