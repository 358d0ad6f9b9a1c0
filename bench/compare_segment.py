#!/usr/bin/env python3
"""Side-by-side benchmark of segmentation training: hpcnet against PyTorch (smp's U-Net, torchvision's DeepLabV3), in one run.

For each thread count and precision this runs, interleaved, --repeat times:

  hpcnet   hpcnet train --model unet_resnet18 --dataset segmentation --data DATA --imgsz 128
             --epochs E --batch-size 32 --optimizer adamw --lr 0.001 --weight-decay 0.0001
             --lr-schedule cosine --lr-min 0 --augment --seed 0 --threads T --workers 1
             --precision P [--steps N] --no-progress --out RUN
  smp      bench/smp_train_unet.py --data DATA --encoder resnet18 --epochs E --batch-size 32
             --lr 0.001 --weight-decay 0.0001 --lr-min 0 --seed 0 --threads T --precision P
             [--steps N] --out RUN.jsonl        (smp.Unet, AdamW, CosineAnnealingLR per epoch,
                                                 flip 0.5, Normalize(0.5, 0.5), plain CE)

and with --model deeplabv3_resnet50 [--aux-loss] the same, hpcnet run with --model
deeplabv3_resnet50 [--aux-loss] and the PyTorch side by the same script with --arch
deeplabv3_resnet50 [--aux-loss] in place of --encoder: torchvision's
deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=K, aux_loss), the loss
CE(out) + 0.5 CE(aux) (ignore 255) on both sides with --aux-loss, CE(out) without. The table
names that side "torchvision"; in the --json-out file it stays under the key "smp" for
either model (so --render reads older files).

each as its own process, started with subprocess.Popen and reaped with os.wait4 (wall time and
ru_maxrss of the child, measured here the same way for both), with OMP_NUM_THREADS and
MKL_NUM_THREADS = T as well as each tool's thread flag. It prints:

  train s       the tool's own training-loop time (hpcnet: train_seconds of the end record of
                RUN/metrics.jsonl; smp: train_seconds of its end record): decoding the data into
                memory, validation and hpcnet's checkpoints are not in it
  s/step        train s / steps
  images/s      images trained / train s
  peak RSS MB   ru_maxrss of the whole process from os.wait4
  val mIoU %    the process's own validation after its last epoch, when the run ended at an
                epoch boundary (a full run); pixel acc % beside it (smp: its own; hpcnet: from
                `hpcnet eval --json` on the final weights, in a separate process)
  speed ratio   smp train s / hpcnet train s    (above 1: hpcnet trains faster; DeepLabV3:
                torchvision's train s)
  mem ratio     hpcnet peak RSS / smp peak RSS   (below 1: hpcnet needs less memory)

    python3 bench/compare_segment.py                        # 2 threads, 30 steps: a timing run
    python3 bench/compare_segment.py --repeat 3 --markdown --json-out /tmp/seg.json
    python3 bench/compare_segment.py --threads 1,2 --precision fp32,bf16 --steps 20
    python3 bench/compare_segment.py --epochs 3 --markdown --json-out /tmp/seg-full.json
                                          # the full recipe: 3 epochs x 250 steps per side
                                          # (the issue's smp runs took 509-523 s per epoch at
                                          # 2 threads: plan on about an hour per repeat)
    python3 bench/compare_segment.py --steps 3 --threads 1 --repeat 1   # smoke test
    python3 bench/compare_segment.py --model deeplabv3_resnet50 --aux-loss --steps 10
                                          # DeepLabV3 against torchvision's (the dilated
                                          # ResNet-50 costs several U-Net steps)
    python3 bench/compare_segment.py --render /tmp/seg.json --markdown  # reprint a table

Defaults: --data /tmp/scenes (images/{train,val}/*.jpg + masks/{train,val}/*.png, made by
/work/shared/data/make_scenes.py), --hpcnet build/hpcnet (a private copy is run, so a rebuild
during the comparison cannot mix builds; path, mtime and sha256 in the header), --smp-python the
first of /tmp/ref/bin/python, this Python, /opt/torchvenv/bin/python that imports torch and
segmentation_models_pytorch (deeplabv3_resnet50: torchvision), --threads 2, --precision fp32, --repeat 1, --workers 1 (hpcnet's
data-loading threads; the smp script cuts its batches in the training thread).

Length: --steps N (default 30) stops both after N steps of the 3-epoch recipe (the learning
rate is then still the first epoch's, constant); neither validates then, so the val columns stay
empty unless --eval-partial (hpcnet eval on the saved weights in a separate process, marked *,
and the smp script's own validation at the stop). --epochs E without --steps trains E full
epochs (the schedule spans E epochs either way).

--precision bf16 passes --precision bf16 to hpcnet (bfloat16 convolutions, fp32 master
weights) and runs the smp script under torch.autocast("cpu", dtype=torch.bfloat16) (fp32
parameters, gradients and AdamW): the ratios of a bf16 row are against the other side's bf16.

--omp-wait-policy sets OMP_WAIT_POLICY for every run (default: the environment's; both tools
use GNU OpenMP, see bench/README.md "Reading the numbers" for why `passive` helps on a shared
machine). The header has the machine, its load average at the start and the end, the versions
(`hpcnet --version` and its `info` backend line, torch, smp, torchvision, Python) and the
start-up footprint
of each side; --json-out FILE gets every raw run (command, exit status, times, memory, load
average before and after, the parsed records), rewritten after each cell. The exit status is 1
when any run failed (the table says FAILED and the notes give the command and its stderr tail).

Absolute times on a shared machine are noisy; the ratios from one run are what counts.
"""

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_HPCNET = os.path.join(ROOT, "build", "hpcnet")
DEFAULT_DATA = "/tmp/scenes"
SMP_SCRIPT = os.path.join(HERE, "smp_train_unet.py")
DEFAULT_SMP_CANDIDATES = ["/tmp/ref/bin/python", sys.executable, "/opt/torchvenv/bin/python"]
# hpcnet model name -> the PyTorch side: the library it needs, the arguments that choose it in
# smp_train_unet.py, and how the header names it.
MODELS = {
    "unet_resnet18": {"lib": "smp", "args": ["--encoder", "resnet18"],
                      "desc": "smp Unet(resnet18, encoder_weights=None)"},
    "unet_resnet34": {"lib": "smp", "args": ["--encoder", "resnet34"],
                      "desc": "smp Unet(resnet34, encoder_weights=None)"},
    "deeplabv3_resnet50": {"lib": "torchvision", "args": ["--arch", "deeplabv3_resnet50"],
                           "desc": "torchvision deeplabv3_resnet50(weights=None, "
                                   "weights_backbone=None)"},
}
LIB_MODULES = {"smp": "segmentation_models_pytorch", "torchvision": "torchvision"}
RECIPE_EPOCHS = 3
DEFAULT_STEPS = 30


# bench/compare.py (beside this file): its process measurement, interpreter discovery and machine
# description are reused here, not copied.
sys.path.insert(0, HERE)
import compare  # noqa: E402
log, loadavg, med, fmt, tail = compare.log, compare.loadavg, compare.med, compare.fmt, compare.tail
read_jsonl = compare.read_jsonl
cpu_flags = compare.cpu_flags


# --------------------------------------------------------------------------------------------
# Runs.
# --------------------------------------------------------------------------------------------

def run_env(args, threads):
    env = compare.thread_env(threads)  # OMP_NUM_THREADS, MKL_NUM_THREADS
    if args.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    return env


def measure(args, cmd, threads, workdir, tag):
    so, se = os.path.join(workdir, tag + ".out"), os.path.join(workdir, tag + ".err")
    la0 = loadavg()
    rc, wall, rss_kib = compare.run_measured(cmd, run_env(args, threads), args.timeout, so, se)
    res = {"cmd": cmd, "rc": rc, "wall_seconds": round(wall, 3),
           "peak_rss_mb": round(rss_kib / 1024.0, 1), "loadavg_before": la0,
           "loadavg_after": loadavg()}
    if rc != 0:
        res["error"] = f"exit {rc}" + (" (timed out)" if rc == 124 else "")
        res["stderr_tail"] = tail(se) or tail(so)
    return res, so, se


def hpcnet_cmd(args, threads, precision, outdir):
    cmd = [args.hpcnet, "train", "--model", args.model, "--dataset", "segmentation",
           "--data", args.data, "--imgsz", str(args.imgsz), "--epochs", str(args.epochs),
           "--batch-size", str(args.batch_size), "--optimizer", "adamw", "--lr", str(args.lr),
           "--weight-decay", str(args.weight_decay), "--lr-schedule", "cosine",
           "--lr-min", str(args.lr_min), "--augment", "--seed", str(args.seed),
           "--threads", str(threads), "--workers", str(args.workers),
           "--precision", precision, "--no-progress", "--out", outdir]
    if args.aux_loss:
        cmd += ["--aux-loss"]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    return cmd


def smp_cmd(args, threads, precision, out):
    cmd = [args.smp_python, SMP_SCRIPT, "--data", args.data, *MODELS[args.model]["args"],
           *(["--aux-loss"] if args.aux_loss else []), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
           "--lr", str(args.lr), "--weight-decay", str(args.weight_decay),
           "--lr-min", str(args.lr_min), "--seed", str(args.seed), "--threads", str(threads),
           "--precision", precision, "--out", out]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
        if not args.eval_partial:
            cmd += ["--skip-partial-val"]
    return cmd


def hpcnet_eval(args, threads, weights):
    """`hpcnet eval --json` on saved weights, in its own process (not in the measured one)."""
    cmd = [args.hpcnet, "eval", "--weights", weights, "--dataset", "segmentation",
           "--data", args.data, "--split", "val", "--threads", str(threads),
           "--workers", str(args.workers), "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                           env=run_env(args, threads))
        if p.returncode != 0:
            return {"cmd": cmd, "error": f"exit {p.returncode}: {p.stderr[-500:]}"}
        return dict(json.loads(p.stdout.strip().splitlines()[-1]), cmd=cmd)
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        return {"cmd": cmd, "error": str(e)}


def run_hpcnet(args, threads, precision, workdir, tag):
    outdir = os.path.join(workdir, tag)
    shutil.rmtree(outdir, ignore_errors=True)
    res, _, se = measure(args, hpcnet_cmd(args, threads, precision, outdir), threads, workdir, tag)
    res.update(side="hpcnet", threads=threads, precision=precision)
    if "error" in res:
        return res
    try:
        recs = read_jsonl(os.path.join(outdir, "metrics.jsonl"))
    except (OSError, ValueError) as e:
        res["error"] = f"cannot read metrics.jsonl: {e}"
        return res
    end = next((r for r in reversed(recs) if r.get("event") == "end"), None)
    start = next((r for r in recs if r.get("event") == "start"), {})
    epochs = [r for r in recs if r.get("event") == "epoch"]  # complete epochs only
    if end is None:
        res["error"] = "metrics.jsonl has no end record"
        res["stderr_tail"] = tail(se)
        return res
    res.update(train_seconds=end["train_seconds"], images=end["images"], steps=end["steps"],
               reported_threads=start.get("threads"),
               epochs=[{"epoch": r["epoch"], "steps": r.get("steps"), "seconds": r.get("seconds"),
                        "train_loss": r.get("train_loss"), "val_miou": r.get("val_miou"),
                        "images_per_sec": r.get("images_per_sec")} for r in epochs])
    complete = sum(r.get("steps", 0) for r in epochs) == end["steps"] and epochs
    weights = os.path.join(outdir, "model.safetensors")
    if complete:
        res["val_miou"] = epochs[-1].get("val_miou")
        res["val_from"] = "train"
    if (complete or args.eval_partial) and os.path.exists(weights):
        ev = hpcnet_eval(args, threads, weights)
        res["eval"] = ev
        if "error" not in ev:
            res["pixel_accuracy"] = ev.get("pixel_accuracy")
            if not complete:
                res["val_miou"], res["val_from"] = ev.get("miou"), "hpcnet eval"
            elif res["val_miou"] is not None and ev.get("miou") is not None and \
                    abs(ev["miou"] - res["val_miou"]) > 0.05:
                res.setdefault("warnings", []).append(
                    f"hpcnet eval on the final weights gives mIoU {ev['miou']:.2f}%, the "
                    f"training run's validation {res['val_miou']:.2f}%" +
                    (" (eval runs in fp32)" if precision == "bf16" else ""))
    if not args.keep_runs:
        shutil.rmtree(outdir, ignore_errors=True)
    return res


def run_smp(args, threads, precision, workdir, tag):
    out = os.path.join(workdir, tag + ".jsonl")
    res, so, se = measure(args, smp_cmd(args, threads, precision, out), threads, workdir, tag)
    res.update(side="smp", threads=threads, precision=precision)
    if "error" in res:
        return res
    try:
        recs = read_jsonl(out)
    except (OSError, ValueError) as e:
        res["error"] = f"cannot read {out}: {e}"
        return res
    end = next((r for r in reversed(recs) if r.get("event") == "end"), None)
    epochs = [r for r in recs if r.get("event") == "epoch"]
    if end is None:
        res["error"] = "no end record in its --out file"
        res["stderr_tail"] = tail(se) or tail(so)
        return res
    res.update(train_seconds=end["train_seconds"], images=end["images"], steps=end["steps"],
               reported_threads=end.get("threads"), load_seconds=end.get("load_seconds"),
               self_reported_peak_rss_mb=end.get("peak_rss_mb"),
               self_reported_peak_rss_before_val_mb=end.get("peak_rss_before_val_mb"),
               self_reported_children_peak_rss_mb=end.get("peak_rss_children_mb"),
               torch_version=end.get("torch_version"), smp_version=end.get("smp_version"),
               torchvision_version=end.get("torchvision_version"),
               epochs=[{k: r.get(k) for k in ("epoch", "steps", "seconds", "train_loss",
                                              "val_miou", "pixel_accuracy", "images_per_sec",
                                              "partial", "eval_seconds")} for r in epochs])
    if epochs and (not epochs[-1].get("partial") or args.eval_partial):
        res["val_miou"] = epochs[-1].get("val_miou")
        res["pixel_accuracy"] = epochs[-1].get("pixel_accuracy")
        res["val_from"] = "train" if not epochs[-1].get("partial") else "at the stop"
    if args.keep_runs:
        res["out_file"] = out
    return res


def check_run(args, res):
    warn = res.setdefault("warnings", [])
    if res.get("reported_threads") not in (None, res["threads"]):
        warn.append(f"ran with {res['reported_threads']} threads, asked {res['threads']}")
    want = args.steps or None
    if want and res.get("steps") != want:
        warn.append(f"trained {res.get('steps')} steps, asked {want}")
    if not warn:
        del res["warnings"]


# --------------------------------------------------------------------------------------------
# Environment.
# --------------------------------------------------------------------------------------------

def probe_smp(interp):
    """Versions under interp: torch (required), smp and torchvision (None when not importable)."""
    code = ("import json,platform,importlib,torch\n"
            "def v(m):\n"
            "    try: return importlib.import_module(m).__version__\n"
            "    except Exception: return None\n"
            "c=getattr(torch.backends,'cpu',None);f=getattr(c,'get_cpu_capability',None)\n"
            "print(json.dumps({'torch':torch.__version__,'smp':v('segmentation_models_pytorch'),"
            "'torchvision':v('torchvision'),"
            "'python':platform.python_version(),'module':torch.__file__,"
            "'cpu_capability':f() if f else None,"
            "'mkldnn':torch.backends.mkldnn.is_available()}))")
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        p = subprocess.run([interp, "-c", code], capture_output=True, text=True, timeout=300,
                           env=env)
        if p.returncode != 0:
            return None
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def find_smp_python(spec, lib):
    """The first candidate that imports torch and lib ("smp" or "torchvision"), and its versions."""
    cands = [spec] if spec else DEFAULT_SMP_CANDIDATES
    for interp in cands:
        if not (shutil.which(interp) or os.path.exists(interp)):
            continue
        info = probe_smp(interp)
        if info and info.get(lib):
            return interp, info
    raise SystemExit(f"error: no interpreter imports torch and {LIB_MODULES[lib]} "
                     f"(tried {', '.join(cands)}); give --smp-python")


def hpcnet_versions(hpcnet):
    out = {"version": "?", "cpu_backend": "?"}
    try:
        p = subprocess.run([hpcnet, "--version"], capture_output=True, text=True, timeout=60)
        out["version"] = (p.stdout.strip() or p.stderr.strip() or "?").splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    out["cpu_backend"] = compare.hpcnet_version(hpcnet).get("cpu_backend", "?")
    return out


def count_split(data, split):
    try:
        return len([f for f in os.listdir(os.path.join(data, "images", split))
                    if f.lower().endswith((".jpg", ".jpeg", ".png"))])
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# Summary and tables.
# --------------------------------------------------------------------------------------------

def summarize(runs):
    ok = [r for r in runs if "error" not in r]
    s = {"runs": len(runs), "ok": len(ok)}
    if not ok:
        s["error"] = runs[-1].get("error", "failed") if runs else "not run"
        return s
    s["train_seconds"] = med([r["train_seconds"] for r in ok])
    s["train_seconds_all"] = [r["train_seconds"] for r in ok]
    s["steps"] = ok[0]["steps"]
    s["images"] = ok[0]["images"]
    s["seconds_per_step"] = med([r["train_seconds"] / r["steps"] for r in ok if r["steps"]])
    s["images_per_sec"] = med([r["images"] / r["train_seconds"] for r in ok
                               if r["train_seconds"] > 0])
    s["peak_rss_mb"] = med([r["peak_rss_mb"] for r in ok])
    s["peak_rss_mb_all"] = [r["peak_rss_mb"] for r in ok]
    s["wall_seconds"] = med([r["wall_seconds"] for r in ok])
    s["val_miou"] = med([r.get("val_miou") for r in ok])
    s["pixel_accuracy"] = med([r.get("pixel_accuracy") for r in ok])
    s["val_from"] = ok[0].get("val_from")
    for k in ("self_reported_peak_rss_mb", "self_reported_peak_rss_before_val_mb",
              "self_reported_children_peak_rss_mb", "load_seconds"):
        if any(r.get(k) is not None for r in ok):
            s[k] = med([r.get(k) for r in ok])
    if len(ok) < len(runs):
        s["failed_runs"] = len(runs) - len(ok)
    return s


def cell_ratios(cell):
    h, m = cell["summary"]["hpcnet"], cell["summary"]["smp"]
    r = {"speed": None, "mem": None, "speed_fastest": None}
    if "error" not in h and "error" not in m:
        if h["train_seconds"]:
            r["speed"] = m["train_seconds"] / h["train_seconds"]
            r["speed_fastest"] = min(m["train_seconds_all"]) / min(h["train_seconds_all"])
        if m["peak_rss_mb"]:
            r["mem"] = h["peak_rss_mb"] / m["peak_rss_mb"]
    return r


HEADERS = ["threads", "precision", "implementation", "train s", "s/step", "images/s",
           "peak RSS MB", "val mIoU %", "pixel acc %", "speed ratio", "mem ratio",
           "process wall s"]


def ref_lib(meta):
    """The PyTorch side's library of a run's model: "smp" or "torchvision"."""
    return MODELS.get(meta["settings"]["model"], MODELS["unet_resnet18"])["lib"]


def row_cells(cell, side, meta):
    s = cell["summary"][side]
    lib = ref_lib(meta)
    label = ("hpcnet " + meta["hpcnet"]["version"].replace("hpcnet ", "") if side == "hpcnet"
             else f"{lib} {meta['smp'].get(lib)} (torch {meta['smp']['torch']})")
    prec = cell["precision"] + (" autocast" if side == "smp" and cell["precision"] == "bf16"
                                else "")
    if "error" in s:
        return [str(cell["threads"]), prec, label, "FAILED"] + [""] * (len(HEADERS) - 4)
    mark = "*" if s.get("val_from") not in (None, "train") else ""
    r = cell["ratios"]
    ratio = side == "smp"
    return [str(cell["threads"]), prec, label, fmt(s["train_seconds"], ".2f"),
            fmt(s["seconds_per_step"], ".3f"), fmt(s["images_per_sec"], ".1f"),
            fmt(s["peak_rss_mb"], ".0f"),
            fmt(s.get("val_miou"), ".2f") + (mark if s.get("val_miou") is not None else ""),
            fmt(s.get("pixel_accuracy"), ".2f") + (mark if s.get("pixel_accuracy") is not None
                                                   else ""),
            (fmt(r["speed"], ".2f") + ("x" if r["speed"] is not None else "")) if ratio else "",
            (fmt(r["mem"], ".2f") + ("x" if r["mem"] is not None else "")) if ratio else "",
            fmt(s.get("wall_seconds"), ".1f")]


def render_table(meta, cells, markdown):
    rows = [row_cells(c, side, meta) for c in cells for side in ("hpcnet", "smp")]
    return compare.render_rows(HEADERS, rows, markdown, left={1, 2})


def render_header(meta):
    m, st, b, sm = meta["machine"], meta["settings"], meta["hpcnet"]["binary"], meta["smp"]
    lib = ref_lib(meta)
    length = (f"{st['steps']} steps of the {st['epochs']}-epoch recipe (a timing run)"
              if st["steps"] else f"{st['epochs']} full epochs")
    aux = st.get("aux_loss")
    loss = ("cross-entropy (ignore 255) of out + 0.5 x that of the aux head (--aux-loss)" if aux
            else "cross-entropy (ignore 255)")
    startup_import = meta.get("startup_import", "import torch, segmentation_models_pytorch")
    return [
        f"date {meta['date']}; machine: {m['cpu']}, {m['cpus']} CPUs ({m['usable_cpus']} "
        f"usable), {m['mem_gib']} GiB, Linux {m['kernel']}; CPU flags: "
        f"{', '.join(meta.get('cpu_flags') or []) or '?'}",
        f"load average (1/5/15 min): start {meta['loadavg_start']}, end {meta['loadavg_end']}",
        f"hpcnet: {meta['hpcnet']['version']}; {meta['hpcnet']['cpu_backend']}; ran a copy of "
        f"{b['path']} (mtime {b['mtime']}, sha256 {b['sha256'][:16]})",
        f"{lib}: {'segmentation_models_pytorch ' if lib == 'smp' else ''}{sm.get(lib)}, "
        f"torch {sm['torch']} (python "
        f"{sm['python']}, {meta['smp_python']}; mkldnn {sm.get('mkldnn')}, cpu capability "
        f"{sm.get('cpu_capability') or 'n/a'})",
        f"data: {st['data']} (train {meta['train_images']}, val {meta['val_images']} images), "
        f"imgsz {st['imgsz']}; recipe: {st['model']}{' --aux-loss' if aux else ''} / "
        f"{MODELS[st['model']]['desc']}, AdamW lr {st['lr']} wd {st['weight_decay']}, cosine "
        f"per epoch to {st['lr_min']}, batch {st['batch_size']}, flip 0.5, "
        f"Normalize(0.5, 0.5), {loss}, seed {st['seed']}",
        f"length: {length}; threads {', '.join(map(str, st['threads']))} (OMP_NUM_THREADS, "
        f"MKL_NUM_THREADS and each tool's flag), hpcnet --workers {st['workers']}, "
        f"OMP_WAIT_POLICY={st['omp_wait_policy'] or '(inherited)'}; repeat {st['repeat']} "
        f"(median), the two sides interleaved",
        f"start-up peak RSS (`hpcnet --version`; `python -c '{startup_import}'`): " +
        ", ".join(f"{k if k == 'hpcnet' else lib} {fmt(v, '.0f')} MB"
                  for k, v in meta.get("startup_rss_mb", {}).items()),
    ]


def render_notes(meta, cells):
    st = meta["settings"]
    lib = ref_lib(meta)
    notes = [
        "train s: each tool's own training-loop time from its JSON lines (hpcnet: the end "
        f"record of RUN/metrics.jsonl; {lib}: the end record of its --out file), the sum of its "
        "epochs' loop times. Not in it: decoding the dataset into memory (both decode all "
        "images and masks first), validation, hpcnet's checkpoint writes. In it, on both "
        "sides: the per-batch data work (index, flip, ToTensor + Normalize); hpcnet does it on "
        f"{st['workers']} loader thread(s) beside the step, the {lib} script in the training "
        "thread (a few ms per batch of 32).",
        "s/step = train s / steps; images/s = images / train s; process wall s: the whole "
        "process from start to exit (start-up, imports, decoding, validation included).",
        "peak RSS: ru_maxrss of the whole process from os.wait4() on it, the same for both "
        f"(the decoded dataset included; for {lib} the interpreter and torch's libraries). In a "
        "run that validates, validation (at --batch-size on both sides) is part of it.",
        f"speed ratio = {lib} train s / hpcnet train s (above 1: hpcnet faster; 2.00x: in half "
        f"the time), medians; mem ratio = hpcnet peak RSS / {lib} peak RSS (below 1: hpcnet "
        "smaller). Each row pair is one thread count and precision.",
        "val mIoU / pixel acc: torchvision's segmentation ConfusionMatrix on the val split "
        "(hpcnet implements the same formula), from each process's own validation after its "
        "last epoch when the run ended at an epoch boundary; hpcnet's pixel accuracy comes from "
        "`hpcnet eval --json` on its final weights in a separate process (hpcnet's epoch record "
        "holds mIoU only). The two sides start from different random weights and shuffle "
        "differently, so they agree statistically, not digit for digit.",
    ]
    if any(c["summary"][s].get("val_from") not in (None, "train")
           for c in cells for s in ("hpcnet", "smp")):
        notes.append("`*`: stopped mid-epoch (--steps) with --eval-partial: hpcnet's value "
                     "from `hpcnet eval --split val` on the saved weights (separate process, fp32), "
                     f"{lib}'s from the script's own validation at the stop (after the timed "
                     "loop).")
    for c in cells:
        key = f"threads {c['threads']} {c['precision']}"
        r = c["ratios"]
        for side in ("hpcnet", "smp"):
            s = c["summary"][side]
            runs = c["runs"][side]
            parts = []
            if "error" not in s and len(s["train_seconds_all"]) > 1:
                parts.append("train s of each run " +
                             ", ".join(f"{v:.2f}" for v in s["train_seconds_all"]) +
                             "; peak RSS " + ", ".join(f"{v:.0f}" for v in s["peak_rss_mb_all"]))
            if side == "smp" and r.get("speed_fastest") is not None and \
                    len(s.get("train_seconds_all", [])) > 1:
                parts.append(f"speed ratio of the fastest runs (min/min) "
                             f"{r['speed_fastest']:.2f}x")
            ok = [x for x in runs if "error" not in x]
            if ok and any(e.get("val_miou") is not None for e in ok[0].get("epochs") or []):
                x = ok[0]
                parts.append("per epoch (run 1): " + "; ".join(
                    f"{e['epoch']}: {fmt(e.get('seconds'), '.1f')} s, mIoU "
                    f"{fmt(e.get('val_miou'), '.2f')}" for e in x["epochs"]))
            if side == "smp" and "self_reported_peak_rss_mb" in s:
                parts.append(
                    f"in-process RUSAGE_SELF peak {fmt(s['self_reported_peak_rss_mb'], '.0f')} MB"
                    + (f" ({fmt(s['self_reported_peak_rss_before_val_mb'], '.0f')} MB before "
                       f"the first validation)"
                       if s.get("self_reported_peak_rss_before_val_mb") is not None
                       and s.get("val_miou") is not None else "")
                    + f", RUSAGE_CHILDREN {fmt(s.get('self_reported_children_peak_rss_mb'), '.0f')}"
                    f" MB (the `import torch` ldconfig child, not extra memory); data decode "
                    f"{fmt(s.get('load_seconds'), '.1f')} s")
            for x in runs:
                for w in x.get("warnings", []):
                    parts.append("WARNING " + w)
                if x.get("eval", {}).get("error"):
                    parts.append("hpcnet eval FAILED: " + x["eval"]["error"][:300])
            shown = side if side == "hpcnet" else lib
            if parts:
                notes.append(f"{key} {shown}: " + "; ".join(parts))
            for x in runs:
                if "error" in x:
                    tl = (x.get("stderr_tail") or "").rstrip()
                    notes.append(f"{key} {shown} FAILED ({x['error']}): `{' '.join(x['cmd'])}`" +
                                 ("\n    stderr tail:\n" +
                                  "\n".join("    " + l for l in tl.splitlines()) if tl else ""))
    return notes


def print_report(meta, cells, markdown):
    for c in cells:
        c["summary"] = {side: summarize(c["runs"][side]) for side in ("hpcnet", "smp")}
        c["ratios"] = cell_ratios(c)
    bullet = "- " if markdown else ""
    print("\n".join(bullet + l for l in render_header(meta)))
    print()
    print(render_table(meta, cells, markdown))
    print()
    print("\n".join(bullet + l for l in render_notes(meta, cells)))


def write_json(path, meta, cells):
    for c in cells:
        c["summary"] = {side: summarize(c["runs"][side]) for side in ("hpcnet", "smp")}
        c["ratios"] = cell_ratios(c)
    compare.write_json_file(path, {"meta": meta, "cells": cells})


# --------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA, help="images/ + masks/ dataset both read")
    p.add_argument("--hpcnet", default=DEFAULT_HPCNET, help="hpcnet binary (a copy is run)")
    p.add_argument("--smp-python", default=None,
                   help="Python with torch and segmentation_models_pytorch (deeplabv3_resnet50: "
                        "torchvision) (default: the first of " + ", ".join(DEFAULT_SMP_CANDIDATES)
                        + " that imports both)")
    p.add_argument("--model", default="unet_resnet18", choices=sorted(MODELS),
                   help="hpcnet's model; the PyTorch side: smp's Unet for unet_*, torchvision's "
                        "deeplabv3_resnet50")
    p.add_argument("--aux-loss", action="store_true",
                   help="deeplabv3_resnet50: both sides train the aux FCN head, loss out + 0.5 "
                        "aux")
    p.add_argument("--threads", default="2", help="comma list of thread counts")
    p.add_argument("--precision", default="fp32", help="comma list of fp32, bf16")
    p.add_argument("--steps", type=int, default=None,
                   help=f"stop after N steps (default {DEFAULT_STEPS}, or 0 = all epochs when "
                        "--epochs is given)")
    p.add_argument("--epochs", type=int, default=None,
                   help=f"epochs of the recipe (default {RECIPE_EPOCHS}); given without "
                        "--steps: a full run")
    p.add_argument("--repeat", type=int, default=1, help="runs per side and cell (median)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--imgsz", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--weight-decay", type=float, default=0.0001)
    p.add_argument("--lr-min", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="hpcnet's data-loading threads")
    p.add_argument("--eval-partial", action="store_true",
                   help="with --steps: validate both after the stop too (hpcnet eval in a "
                        "separate process; the smp script after its timed loop)")
    p.add_argument("--omp-wait-policy", default="",
                   help="OMP_WAIT_POLICY for every run ('' leaves the environment's)")
    p.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per process")
    p.add_argument("--markdown", action="store_true", help="print Markdown")
    p.add_argument("--json-out", default=None, help="write every run and summary here")
    p.add_argument("--render", metavar="JSON", default=None,
                   help="run nothing: print the table of an earlier --json-out file")
    p.add_argument("--keep-runs", action="store_true",
                   help="keep run directories and logs (the folder is printed at the end)")
    a = p.parse_args(argv)
    if a.render:
        return a
    if a.epochs is None:
        a.epochs = RECIPE_EPOCHS
        if a.steps is None:
            a.steps = DEFAULT_STEPS
    elif a.steps is None:
        a.steps = 0
    try:
        a.thread_list = [int(t) for t in a.threads.split(",") if t.strip()]
    except ValueError:
        p.error("--threads must be a comma list of integers")
    a.precision_list = [x.strip() for x in a.precision.split(",") if x.strip()]
    if not a.precision_list or any(x not in ("fp32", "bf16") for x in a.precision_list):
        p.error("--precision takes a comma list of fp32, bf16")
    if not a.thread_list or min(a.thread_list) < 1:
        p.error("--threads needs thread counts >= 1")
    for name in ("epochs", "repeat", "batch_size", "imgsz"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.aux_loss and a.model != "deeplabv3_resnet50":
        p.error("--aux-loss needs --model deeplabv3_resnet50")
    if a.steps < 0 or a.workers < 0:
        p.error("--steps and --workers must be >= 0")
    if not os.path.isdir(os.path.join(a.data, "images", "train")):
        p.error(f"--data {a.data} has no images/train folder")
    if not os.access(a.hpcnet, os.X_OK):
        p.error(f"--hpcnet {a.hpcnet} is not an executable (build it: cd build && ninja)")
    a.data = os.path.abspath(a.data)
    return a


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        print_report(saved["meta"], saved["cells"], args.markdown)
        return 1 if any("error" in r for c in saved["cells"] for side in ("hpcnet", "smp")
                        for r in c["runs"][side]) else 0

    loadavg_start = loadavg()
    lib = MODELS[args.model]["lib"]
    args.smp_python, smp_info = find_smp_python(args.smp_python, lib)
    workdir = tempfile.mkdtemp(prefix="hpcnet-compare-segment-")
    # Run a private copy: a rebuild of build/hpcnet during the comparison must not mix builds.
    binary = {"path": os.path.abspath(args.hpcnet), "sha256": compare.sha256_file(args.hpcnet),
              "mtime": datetime.datetime.fromtimestamp(os.path.getmtime(args.hpcnet))
              .isoformat(timespec="seconds")}
    args.hpcnet = os.path.join(workdir, "hpcnet")
    shutil.copy2(binary["path"], args.hpcnet)
    binary["copy"] = args.hpcnet
    log(f"hpcnet: {binary['path']} (mtime {binary['mtime']}, sha256 {binary['sha256']}), "
        f"running the copy {args.hpcnet}; {lib}: {args.smp_python}")
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv,
        "machine": compare.machine_info(),
        "cpu_flags": cpu_flags(),
        "loadavg_start": loadavg_start,
        "loadavg_end": None,
        "hpcnet": dict(hpcnet_versions(args.hpcnet), binary=binary),
        "smp": smp_info,
        "smp_python": args.smp_python,
        "train_images": count_split(args.data, "train"),
        "val_images": count_split(args.data, "val"),
        "settings": {k: getattr(args, k) for k in
                     ("data", "model", "imgsz", "epochs", "steps", "batch_size", "lr",
                      "weight_decay", "lr_min", "seed", "workers", "repeat", "omp_wait_policy",
                      "eval_partial", "aux_loss")} | {"threads": args.thread_list,
                                                      "precisions": args.precision_list},
        "startup_import": f"import torch, {LIB_MODULES[lib]}",
    }
    # Fixed cost of each side: the whole-process peak of a process that only starts up.
    meta["startup_rss_mb"] = {}
    for name, cmd in [("hpcnet", [args.hpcnet, "--version"]),
                      ("smp", [args.smp_python, "-c", meta["startup_import"]])]:
        rc, _, kib = compare.run_measured(cmd, run_env(args, 1), args.timeout,
                                          os.devnull, os.devnull)
        meta["startup_rss_mb"][name] = round(kib / 1024.0, 1) if rc == 0 else None

    cells = []
    try:
        for th in args.thread_list:
            for prec in args.precision_list:
                cell = {"threads": th, "precision": prec, "runs": {"hpcnet": [], "smp": []}}
                cells.append(cell)
                for rep in range(args.repeat):
                    # Interleaved, so a slow phase of a shared machine hits both sides.
                    for side, fn in (("hpcnet", run_hpcnet), ("smp", run_smp)):
                        tag = f"t{th}-{prec}-r{rep}-{side}"
                        log(f"[threads {th} {prec} run {rep + 1}/{args.repeat}] "
                            f"{side if side == 'hpcnet' else lib} "
                            f"(load {loadavg()}) ...")
                        r = fn(args, th, prec, workdir, tag)
                        r["repeat"] = rep
                        if "error" not in r:
                            check_run(args, r)
                        if "error" in r:
                            log(f"  FAILED ({r['error']}): {' '.join(r['cmd'])}\n" +
                                (r.get("stderr_tail") or "").rstrip())
                        else:
                            log(f"  train {r['train_seconds']:.2f} s ({r['steps']} steps), "
                                f"peak RSS {r['peak_rss_mb']:.0f} MB, wall "
                                f"{r['wall_seconds']:.1f} s, val mIoU {r.get('val_miou')}" +
                                "".join(f"  WARNING {w}" for w in r.get("warnings", [])))
                        cell["runs"][side].append(r)
                if args.json_out:  # after every cell: an interrupted run keeps what it measured
                    meta["loadavg_end"] = loadavg()
                    write_json(args.json_out, meta, cells)
        meta["loadavg_end"] = loadavg()
        print_report(meta, cells, args.markdown)
        if args.json_out:
            write_json(args.json_out, meta, cells)
            log(f"wrote {args.json_out}")
    finally:
        if args.keep_runs:
            log(f"run directories and logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any("error" in r for c in cells for side in ("hpcnet", "smp")
                    for r in c["runs"][side]) else 0


if __name__ == "__main__":
    sys.exit(main())
