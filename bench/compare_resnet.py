#!/usr/bin/env python3
"""Side-by-side benchmark of ResNet training steps: hpcnet fp32/bf16 against PyTorch fp32/bf16.

In one run, with the same model, batch, thread count, warm-up and step count, this times
(implementations interleaved within each repeat, so a slow phase of a shared machine hits all):

  hpcnet fp32      hpcnet bench --model M --precision fp32 --no-profile --json
  hpcnet bf16      hpcnet bench --model M --precision bf16 --no-profile --json
  torch X fp32     bench/pytorch_resnet.py --precision fp32 --json   (under each PyTorch)
  torch X bf16     bench/pytorch_resnet.py --precision bf16 --json   (torch.autocast bfloat16)

Both sides train on synthetic data (a pool of 8 fixed random batches, reused round-robin):
training steps only (zero_grad, forward, loss, backward, SGD step), no data loading. Columns:

  ms/step        mean over the timed steps of one run (the figure `hpcnet bench` reports; the
                 PyTorch script's mean, ms_per_step_mean), median over --repeat runs
  images/s       batch x 1000 / ms/step
  epoch s (est.) 50,000 (CIFAR-10; ImageNet models 1,281,167) / batch x ms/step: an estimate
                 extrapolated from --steps timed steps
  peak RSS MB    ru_maxrss of the whole process from os.wait4() (the same way for both sides)
  T fp32 / this  the ms/step of PyTorch T in fp32 divided by this row's (above 1: this row is
                 faster than PyTorch T fp32; 2.0x: in half the time)
  T bf16 / this  the same against PyTorch T with bf16 autocast

    python3 bench/compare_resnet.py                       # resnet20, batch 128, 2 threads
    python3 bench/compare_resnet.py --repeat 5 --markdown --json-out /tmp/resnet.json
    python3 bench/compare_resnet.py --torch /opt/torchvenv/bin/python --threads 1
    python3 bench/compare_resnet.py --steps 2 --warmup 1 --repeat 1   # smoke test
    python3 bench/compare_resnet.py --model resnet50 --batch 32 --steps 3 --warmup 1 \
        --torch /tmp/ref/bin/python          # torchvision's ResNet-50 at 224 px

--model resnet18/34/50/101 are torchvision's ImageNet ResNets (hpcnet's resnet18/34/50/101
against torchvision.models.resnetN(num_classes=10)) at --imgsz 224 by default; their epoch
estimate counts ImageNet-1k's 1,281,167 images. hpcnet's bf16 is bfloat16 convolutions (oneDNN,
float32 accumulation) for the stride-1 convolutions whose input channels are a multiple of 16;
the 7x7 stem, the stride-2 convolutions (ResNet-50: the 3x3 of each stage's first bottleneck
and its 1x1 downsample), batch norm, ReLU, pooling, the classifier and the optimizer stay
float32 (src/ops/conv2d/cpu.cpp, conv_bf16). PyTorch's is torch.autocast("cpu", bfloat16): every
convolution and the classifier in bfloat16, bfloat16 activations between the layers.

Every run gets OMP_WAIT_POLICY=passive (--omp-wait-policy): both hpcnet and PyTorch use GNU
OpenMP, whose threads otherwise spin at barriers. On a shared 2-core node a spinning team of 2
competes with the neighbour for the core its other thread needs, and single runs then take
several times as long (bench/README.md, "Reading the numbers"); passive threads sleep instead.

Absolute times on a shared machine are noisy; the ratios from one run are what counts.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_HPCNET = os.path.join(ROOT, "build", "hpcnet")
TORCH_SCRIPT = os.path.join(HERE, "pytorch_resnet.py")
CIFAR_MODELS = ["resnet20", "resnet32", "resnet56", "cifar_resnet18"]
# torchvision's ImageNet ResNets: hpcnet's resnet18/34/50/101 and torchvision.models.resnetN
# (num_classes=10, as `hpcnet bench` builds them), timed at 224 px by default.
IMAGENET_MODELS = ["resnet18", "resnet34", "resnet50", "resnet101"]
MODELS = CIFAR_MODELS + IMAGENET_MODELS  # known to both tools


def epoch_images(model):
    """The training-set size an epoch estimate counts: CIFAR-10's or ImageNet-1k's."""
    return 1281167 if model in IMAGENET_MODELS else 50000


# bench/compare.py (beside this file): its process measurement, interpreter discovery and machine
# description are reused here, not copied.
sys.path.insert(0, HERE)
import compare  # noqa: E402
log, loadavg, med, fmt, tail = compare.log, compare.loadavg, compare.med, compare.fmt, compare.tail
cpu_flags = compare.cpu_flags


# --------------------------------------------------------------------------------------------
# Runs.
# --------------------------------------------------------------------------------------------

def run_env(args):
    env = compare.thread_env(args.threads)  # OMP_NUM_THREADS, MKL_NUM_THREADS
    if args.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    return env


def impl_cmd(args, impl):
    if impl["side"] == "hpcnet":
        return [args.hpcnet, "bench", "--model", args.model, "--imgsz", str(args.imgsz),
                "--batch-size", str(args.batch),
                "--steps", str(args.steps), "--warmup", str(args.warmup),
                "--threads", str(args.threads), "--precision", impl["precision"],
                "--no-profile", "--json"]
    return [impl["interp"], TORCH_SCRIPT, "--model", args.model, "--imgsz", str(args.imgsz),
            "--precision", impl["precision"], "--batch", str(args.batch),
            "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--threads", str(args.threads), "--json"]


def last_json_line(path):
    rec = None
    with open(path, "r", errors="replace") as f:
        for line in f:
            if line.lstrip().startswith("{"):
                rec = json.loads(line)
    return rec


def run_one(args, impl, workdir, tag):
    cmd = impl_cmd(args, impl)
    so, se = os.path.join(workdir, tag + ".out"), os.path.join(workdir, tag + ".err")
    la0 = loadavg()
    rc, wall, rss_kib = compare.run_measured(cmd, run_env(args), args.timeout, so, se)
    res = {"impl": impl["key"], "side": impl["side"], "precision": impl["precision"],
           "cmd": cmd, "rc": rc, "wall_seconds": round(wall, 3),
           "peak_rss_mb": round(rss_kib / 1024.0, 1), "loadavg_before": la0,
           "loadavg_after": loadavg()}
    if rc != 0:
        res["error"] = f"exit {rc}" + (" (timed out)" if rc == 124 else "")
        res["stderr_tail"] = tail(se)
        return res
    try:
        rec = last_json_line(so)
    except (OSError, ValueError) as e:
        rec, res["error"] = None, f"cannot read the JSON line: {e}"
    if rec is None:
        res.setdefault("error", "no JSON line in the output")
        res["stderr_tail"] = tail(se) or tail(so)
        return res
    res["raw"] = rec
    try:
        if impl["side"] == "hpcnet":
            res["ms_per_step"] = float(rec["ms_per_step"])  # total time / timed steps
        else:
            res["ms_per_step"] = float(rec["ms_per_step_mean"])
            res["ms_per_step_median_of_steps"] = rec.get("ms_per_step")
            res["self_reported_peak_rss_mb"] = rec.get("peak_rss_mb")
            res["torch_version"] = rec.get("torch_version")
    except (KeyError, TypeError, ValueError) as e:
        res["error"] = f"JSON line lacks a number: {e}"
        res["stderr_tail"] = tail(se)
        return res
    warn = []
    if rec.get("threads") != args.threads:
        warn.append(f"ran with {rec.get('threads')} threads, asked {args.threads}")
    if rec.get("steps") not in (None, args.steps):
        warn.append(f"timed {rec.get('steps')} steps, asked {args.steps}")
    if warn:
        res["warning"] = "; ".join(warn)
    return res


# --------------------------------------------------------------------------------------------
# Environment.
# --------------------------------------------------------------------------------------------

def run_env_for_probe():
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    return env


def torch_cpu_info(interp):
    """mkldnn (oneDNN) availability and the CPU kernel level torch dispatches to."""
    code = ("import json,torch;c=getattr(torch.backends,'cpu',None);"
            "f=getattr(c,'get_cpu_capability',None);"
            "print(json.dumps({'mkldnn':torch.backends.mkldnn.is_available(),"
            "'cpu_capability':f() if f else None,"
            "'openmp':torch.backends.openmp.is_available()}))")
    try:
        p = subprocess.run([interp, "-c", code], capture_output=True, text=True,
                           timeout=300, env=run_env_for_probe())
        return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return {}


def make_impls(args, torches):
    impls = [{"key": f"hpcnet {p}", "side": "hpcnet", "label": "hpcnet", "precision": p}
             for p in args.precision_list]
    for t in torches:
        impls += [{"key": f"{t['label']} {p}", "side": "torch", "label": t["label"],
                   "precision": p, "interp": t["interp"]} for p in args.precision_list]
    return impls


# --------------------------------------------------------------------------------------------
# Summary and tables.
# --------------------------------------------------------------------------------------------

def summarize(meta, runs):
    batch = meta["settings"]["batch"]
    n_epoch = meta["settings"]["epoch_images"]
    out = {}
    for impl in meta["impls"]:
        rs = [r for r in runs if r["impl"] == impl["key"]]
        ok = [r for r in rs if "error" not in r]
        s = {"runs": len(rs), "ok": len(ok)}
        if not ok:
            s["error"] = "not run" if not rs else rs[-1]["error"]
            out[impl["key"]] = s
            continue
        ms = med([r["ms_per_step"] for r in ok])
        s.update(ms_per_step=ms, ms_per_step_all=[r["ms_per_step"] for r in ok],
                 images_per_sec=batch * 1000.0 / ms if ms else None,
                 epoch_seconds_est=n_epoch / batch * ms / 1000.0,
                 peak_rss_mb=med([r["peak_rss_mb"] for r in ok]))
        if len(ok) < len(rs):
            s["failed_runs"] = len(rs) - len(ok)
        out[impl["key"]] = s
    # Ratios: reference ms/step (PyTorch T, fp32 or bf16) / this row's ms/step.
    for impl in meta["impls"]:
        s = out[impl["key"]]
        s["ratios"], s["ratios_fastest"] = {}, {}
        for t in meta["torches"]:
            for p in ("fp32", "bf16"):
                ref = out.get(f"{t['label']} {p}")
                col = f"{t['label']} {p}"
                if "error" in s or not ref or "error" in ref:
                    s["ratios"][col] = s["ratios_fastest"][col] = None
                    continue
                s["ratios"][col] = ref["ms_per_step"] / s["ms_per_step"]
                s["ratios_fastest"][col] = min(ref["ms_per_step_all"]) / min(s["ms_per_step_all"])
    return out


def ratio_columns(meta):
    return [f"{t['label']} {p}" for t in meta["torches"] for p in ("fp32", "bf16")
            if p in meta["settings"]["precisions"]]


def table(meta, summary):
    cols = ratio_columns(meta)
    headers = ["implementation", "precision", "ms/step", "images/s",
               f"epoch s (est., {meta['settings']['steps']} steps)", "peak RSS MB"] + \
              [f"{c} / this" for c in cols]
    rows = []
    for impl in meta["impls"]:
        s = summary[impl["key"]]
        prec = impl["precision"] + (" autocast" if impl["side"] == "torch" and
                                    impl["precision"] == "bf16" else "")
        if "error" in s:
            rows.append([impl["label"], prec, "FAILED"] + [""] * (len(headers) - 3))
            continue
        rows.append([impl["label"], prec, fmt(s["ms_per_step"], ".1f"),
                     fmt(s["images_per_sec"], ".0f"), fmt(s["epoch_seconds_est"], ".0f"),
                     fmt(s["peak_rss_mb"], ".0f")] +
                    [fmt(s["ratios"][c], ".2f") + ("x" if s["ratios"][c] is not None else "")
                     for c in cols])
    return headers, rows


def render_table(headers, rows, markdown):
    return compare.render_rows(headers, rows, markdown, left={0, 1})


def render_header(meta):
    m, st, b = meta["machine"], meta["settings"], meta["hpcnet"]["binary"]
    lines = [
        f"machine: {m['cpu']}, {m['cpus']} CPUs ({m['usable_cpus']} usable), {m['mem_gib']} GiB, "
        f"Linux {m['kernel']}; CPU flags: {', '.join(meta.get('cpu_flags') or []) or '?'}",
        f"load average (1/5/15 min): start {meta['loadavg_start']}, end {meta['loadavg_end']}",
        f"hpcnet: {meta['hpcnet']['version']}; {meta['hpcnet']['cpu_backend']}; ran a copy of "
        f"{b['path']} (mtime {b['mtime']}, sha256 {b['sha256']})",
        "pytorch: " + (", ".join(
            f"{t['label']} (python {t['python']}, {t['interp']}; mkldnn "
            f"{t.get('cpu', {}).get('mkldnn', '?')}, cpu capability "
            f"{t.get('cpu', {}).get('cpu_capability') or 'n/a'})" for t in meta["torches"])
            or "none"),
        f"workload: {st['model']} at {st.get('imgsz', 32)} px, batch {st['batch']}, "
        f"{st['threads']} thread(s) "
        f"(OMP_NUM_THREADS, MKL_NUM_THREADS and each tool's --threads), OMP_WAIT_POLICY="
        f"{st['omp_wait_policy'] or '(inherited)'}; {st['warmup']} warm-up + {st['steps']} timed "
        f"steps per run, repeat {st['repeat']} (median), implementations interleaved",
        "synthetic data (8 random batches reused), training steps only: no data loading on "
        "either side; bf16 = hpcnet's bfloat16 convolutions / PyTorch's "
        "torch.autocast('cpu', bfloat16), parameters and optimizer in fp32 on both sides",
    ]
    return lines


def render_notes(meta, summary, runs):
    st = meta["settings"]
    notes = [
        f"ms/step: mean over the {st['steps']} timed steps of a run, median over "
        f"{st['repeat']} run(s). epoch s (est.) = {st['epoch_images']:,} / {st['batch']} x "
        f"ms/step ({'ImageNet-1k' if st['epoch_images'] > 50000 else 'CIFAR-10'}), "
        f"an estimate extrapolated from {st['steps']} steps, not a measured epoch.",
        "`T fp32 / this`, `T bf16 / this`: PyTorch T's ms/step (fp32, or bf16 autocast) divided "
        "by this row's; above 1: this row is faster (2.00x: half the time). The hpcnet bf16 "
        "row's entries are its speed-up over each PyTorch fp32 and bf16.",
        "peak RSS: ru_maxrss of the whole process (os.wait4), interpreter and libraries "
        "included for PyTorch.",
    ]
    for impl in meta["impls"]:
        s = summary[impl["key"]]
        mine = [r for r in runs if r["impl"] == impl["key"]]
        parts = []
        if len(s.get("ms_per_step_all", [])) > 1:
            parts.append("ms/step of each run " +
                         ", ".join(f"{v:.1f}" for v in s["ms_per_step_all"]))
            fast = {c: v for c, v in s.get("ratios_fastest", {}).items()
                    if v is not None and not c.startswith(impl["label"] + " ")}
            if fast:
                parts.append("ratios of the fastest runs (min/min) " +
                             ", ".join(f"{c} / this {v:.2f}x" for c, v in fast.items()))
        med_steps = [r.get("ms_per_step_median_of_steps") for r in mine if "error" not in r]
        if any(v is not None for v in med_steps):
            parts.append("median single step " + ", ".join(fmt(v, ".1f") for v in med_steps)
                         + " ms")
        for r in mine:
            if r.get("warning"):
                parts.append("WARNING " + r["warning"])
        if parts:
            notes.append(f"{impl['key']}: " + "; ".join(parts))
    for r in runs:
        if "error" in r:
            tl = (r.get("stderr_tail") or "").rstrip()
            notes.append(f"{r['impl']} FAILED ({r['error']}): `{' '.join(r['cmd'])}`" +
                         ("\n    stderr tail:\n" + "\n".join("    " + l for l in tl.splitlines())
                          if tl else ""))
    return notes


def print_report(meta, runs, markdown):
    summary = summarize(meta, runs)
    bullet = "- " if markdown else ""
    print("\n".join(bullet + l for l in render_header(meta)))
    print()
    print(render_table(*table(meta, summary), markdown))
    print()
    print("\n".join(bullet + l for l in render_notes(meta, summary, runs)))
    return summary


def write_json(path, meta, runs):
    compare.write_json_file(path, {"meta": meta, "summary": summarize(meta, runs), "runs": runs})


# --------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="resnet20", choices=MODELS)
    p.add_argument("--batch", "--batch-size", dest="batch", type=int, default=128)
    p.add_argument("--imgsz", type=int, default=0,
                   help="input size (0: 224 for " + "/".join(IMAGENET_MODELS) + ", else 32)")
    p.add_argument("--threads", type=int, default=2,
                   help="OMP_NUM_THREADS, MKL_NUM_THREADS and each tool's --threads")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first, per run")
    p.add_argument("--repeat", type=int, default=3, help="runs per implementation (median)")
    p.add_argument("--precisions", default="fp32,bf16", help="comma list of fp32, bf16")
    p.add_argument("--torch", default=None,
                   help="comma list of Python interpreters with torch (default: each of "
                        + ", ".join(compare.DEFAULT_TORCH_CANDIDATES) +
                        " that imports torch); '' for hpcnet only")
    p.add_argument("--hpcnet", default=DEFAULT_HPCNET, help="hpcnet binary (a copy is run)")
    p.add_argument("--omp-wait-policy", default="passive",
                   help="OMP_WAIT_POLICY for every run; '' leaves the environment's")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    p.add_argument("--markdown", action="store_true", help="print Markdown")
    p.add_argument("--json-out", default=None,
                   help="write settings, every raw run and the summary here (after each repeat)")
    p.add_argument("--render", metavar="JSON", default=None,
                   help="run nothing: print the table of an earlier --json-out file")
    a = p.parse_args(argv)
    if a.render:
        return a
    a.precision_list = [x.strip() for x in a.precisions.split(",") if x.strip()]
    if not a.precision_list or any(x not in ("fp32", "bf16") for x in a.precision_list):
        p.error("--precisions takes a comma list of fp32, bf16")
    for name in ("batch", "threads", "steps", "repeat"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.imgsz < 0:
        p.error("--imgsz must be >= 0")
    a.imgsz = a.imgsz or (224 if a.model in IMAGENET_MODELS else 32)
    if not os.access(a.hpcnet, os.X_OK):
        p.error(f"--hpcnet {a.hpcnet} is not an executable (build it: cd build && ninja)")
    return a


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        print_report(saved["meta"], saved["runs"], args.markdown)
        return 1 if any("error" in r for r in saved["runs"]) else 0

    loadavg_start = loadavg()
    torches = compare.find_torches(args.torch)
    if not torches:
        log("warning: no interpreter imports torch; timing hpcnet only")
    for t in torches:
        t["cpu"] = torch_cpu_info(t["interp"])
    workdir = tempfile.mkdtemp(prefix="hpcnet-compare-resnet-")
    # Run a private copy: a rebuild of build/hpcnet during the comparison must not mix builds.
    binary = {"path": os.path.abspath(args.hpcnet), "sha256": compare.sha256_file(args.hpcnet),
              "mtime": datetime.datetime.fromtimestamp(os.path.getmtime(args.hpcnet))
              .isoformat(timespec="seconds")}
    args.hpcnet = os.path.join(workdir, "hpcnet")
    shutil.copy2(binary["path"], args.hpcnet)
    binary["copy"] = args.hpcnet
    log(f"hpcnet: {binary['path']} (mtime {binary['mtime']}, sha256 {binary['sha256']}), "
        f"running the copy {args.hpcnet}")
    impls = make_impls(args, torches)
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv,
        "machine": compare.machine_info(),
        "cpu_flags": cpu_flags(),
        "loadavg_start": loadavg_start,
        "loadavg_end": None,
        "hpcnet": dict(compare.hpcnet_version(args.hpcnet), binary=binary),
        "torches": torches,
        "settings": {"model": args.model, "imgsz": args.imgsz, "batch": args.batch,
                     "threads": args.threads,
                     "steps": args.steps, "warmup": args.warmup, "repeat": args.repeat,
                     "precisions": args.precision_list, "omp_wait_policy": args.omp_wait_policy,
                     "epoch_images": epoch_images(args.model)},
        "impls": impls,
    }
    runs = []
    try:
        for rep in range(args.repeat):
            for k, impl in enumerate(impls):
                log(f"[run {rep + 1}/{args.repeat}] {impl['key']} (load {loadavg()}) ...")
                r = run_one(args, impl, workdir, f"r{rep}-{k}")
                r["repeat"] = rep
                if "error" in r:
                    log(f"  FAILED ({r['error']}): {' '.join(r['cmd'])}\n" +
                        (r.get("stderr_tail") or "").rstrip())
                else:
                    log(f"  {r['ms_per_step']:.1f} ms/step, peak RSS {r['peak_rss_mb']:.0f} MB"
                        + (f"  WARNING {r['warning']}" if r.get("warning") else ""))
                runs.append(r)
            if args.json_out:  # after every repeat, so an interrupted run keeps what it measured
                meta["loadavg_end"] = loadavg()
                write_json(args.json_out, meta, runs)
        meta["loadavg_end"] = loadavg()
        print_report(meta, runs, args.markdown)
        if args.json_out:
            write_json(args.json_out, meta, runs)
            log(f"wrote {args.json_out}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
