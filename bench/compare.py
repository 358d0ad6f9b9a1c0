#!/usr/bin/env python3
"""Side-by-side benchmark: hpcnet against PyTorch's CIFAR-10 tutorial, in the same run.

For each workload, thread count and implementation this runs one training process
(`hpcnet train` or bench/pytorch_tutorial.py under each PyTorch interpreter) on the same data,
the same validation split, the same hyper-parameters and the same number of threads, and prints:

  train s      the tool's own training-loop time (data decoding and evaluation excluded)
  images/s     images trained / train s
  peak RSS MB  ru_maxrss of the whole process, from os.wait4() on it (measured here, the
               same way for both sides; it also covers any child the process reaped)
  final loss   the last running-loss report (mean over the last --log-every mini-batches)
  val acc %    accuracy on the held-out validation split after training
  speed ratio  torch train s / hpcnet train s   (above 1: hpcnet is faster)
  mem ratio    hpcnet peak RSS / torch peak RSS  (below 1: hpcnet uses less memory)

    python3 bench/compare.py                          # quick-b4, quick-b128 at 1 and 2 threads
    python3 bench/compare.py --workloads tutorial --threads 1,2 --torch /usr/bin/python3
    python3 bench/compare.py --repeat 3 --markdown --json-out /tmp/compare.json
    python3 bench/compare.py --baseline /tmp/old/build/hpcnet --torch ''   # before vs after

With --baseline, a second hpcnet binary (an earlier build) runs in every cell too, interleaved
with the others, and its row's speed ratio is baseline train s / hpcnet train s (above 1: the
current build is faster).

Absolute times on a shared machine are noisy; the ratios from one run are what counts.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data",
                                             "cifar10-train-jpg.tar.gz"))
DEFAULT_HPCNET = os.path.join(ROOT, "build", "hpcnet")
DEFAULT_TORCH_CANDIDATES = [sys.executable, "/usr/bin/python3", "/opt/torchvenv/bin/python"]
TORCH_SCRIPT = os.path.join(HERE, "pytorch_tutorial.py")

# name -> settings shared by both sides. steps None: run all epochs.
WORKLOADS = {
    "tutorial":   dict(batch_size=4,   epochs=2, steps=None, log_every=2000),
    "b128":       dict(batch_size=128, epochs=2, steps=None, log_every=50),
    "quick-b4":   dict(batch_size=4,   epochs=2, steps=4000, log_every=2000),
    "quick-b128": dict(batch_size=128, epochs=2, steps=300,  log_every=50),
}
DEFAULT_WORKLOADS = "quick-b4,quick-b128"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# Running one process and measuring it.
# --------------------------------------------------------------------------------------------

def run_measured(cmd, env, timeout, stdout_path, stderr_path):
    """Runs cmd, waits with os.wait4 and returns (returncode, wall_s, ru_maxrss_kib).

    ru_maxrss from wait4 is the child's peak resident set, or that of one of its own reaped
    children where larger (Linux reports max(self, children), never a sum)."""
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        timed_out = []

        def kill():
            timed_out.append(True)
            try:
                p.kill()
            except OSError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            while True:
                try:
                    _, status, ru = os.wait4(p.pid, 0)
                    break
                except InterruptedError:
                    continue
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        p.returncode = rc  # reaped here; keep Popen from waiting again
    if timed_out:
        rc = 124
    return rc, wall, ru.ru_maxrss


def read_jsonl(path):
    """The JSON objects of a file's lines that start with '{' (others skipped)."""
    out = []
    with open(path, "r", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def tail(path, n=15):
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def thread_env(threads):
    env = dict(os.environ)
    # Both sides are also told the thread count by flag; the environment keeps OpenMP/MKL
    # pools created before that (e.g. at `import torch`) from starting more threads.
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def workload_flags(args, wl, threads):
    """The training flags both programs take, with the same names and meanings."""
    flags = ["--data", args.data,
             "--batch-size", str(wl["batch_size"]), "--epochs", str(wl["epochs"]),
             "--lr", str(args.lr), "--momentum", str(args.momentum),
             "--workers", str(args.workers), "--threads", str(threads),
             "--seed", str(args.seed), "--val-split", str(args.val_split),
             "--log-every", str(wl["log_every"])]
    if wl["steps"]:
        flags += ["--steps", str(wl["steps"])]
    return flags


def launch(args, cmd, threads, workdir, tag):
    """Runs cmd measured, output to workdir/tag.{out,err}: (result dict, stdout path); the dict
    has "error" when the exit status is not 0."""
    so, se = os.path.join(workdir, tag + ".out"), os.path.join(workdir, tag + ".err")
    la0 = loadavg()
    rc, wall, rss_kib = run_measured(cmd, thread_env(threads), args.timeout, so, se)
    res = {"cmd": cmd, "rc": rc, "wall_seconds": round(wall, 3), "peak_rss_mb": rss_kib / 1024.0,
           "loadavg_before": la0, "loadavg_after": loadavg()}
    if rc != 0:
        res["error"] = f"exit {rc}: " + tail(se)
    return res, so


def run_hpcnet(args, wl, threads, workdir, tag, binary=None):
    binary = binary or args.hpcnet
    outdir = os.path.join(workdir, tag)
    shutil.rmtree(outdir, ignore_errors=True)
    cmd = ([binary, "train", "--out", outdir] + workload_flags(args, wl, threads)
           + ["--no-progress"])
    res, _ = launch(args, cmd, threads, workdir, tag)
    if "error" in res:
        return res
    end = None
    try:
        with open(os.path.join(outdir, "metrics.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("event") == "end":
                    end = rec
    except (OSError, ValueError) as e:
        res["error"] = f"cannot read metrics.jsonl: {e}"
        return res
    if end is None:
        res["error"] = "metrics.jsonl has no end record"
        return res
    res.update(train_seconds=end["train_seconds"], images=end["images"], steps=end["steps"],
               last_report_loss=end.get("last_report_loss"))
    acc = end.get("val_accuracy")
    res["val_accuracy"] = acc if acc is not None and acc >= 0 else None
    res["val_accuracy_from"] = "train" if res["val_accuracy"] is not None else None
    if res["val_accuracy"] is None and args.val_split > 0:
        # Stopped mid-epoch (--steps): evaluate the saved weights in a separate process, so
        # neither the timing nor the peak memory of the training process changes.
        weights = os.path.join(outdir, "model.safetensors")
        ecmd = [binary, "eval", "--weights", weights, "--data", args.data, "--split", "val",
                "--val-split", str(args.val_split), "--workers", str(args.workers),
                "--threads", str(threads), "--json"]
        try:
            p = subprocess.run(ecmd, capture_output=True, text=True, timeout=args.timeout,
                               env=thread_env(threads))
            if p.returncode == 0:
                res["val_accuracy"] = json.loads(p.stdout.strip().splitlines()[-1])["accuracy"]
                res["val_accuracy_from"] = "hpcnet eval"
            else:
                res["eval_error"] = f"exit {p.returncode}: {p.stderr[-500:]}"
        except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError) as e:
            res["eval_error"] = str(e)
    if not args.keep_runs:
        shutil.rmtree(outdir, ignore_errors=True)
    return res


def run_torch(args, interp, wl, threads, workdir, tag):
    cmd = [interp, TORCH_SCRIPT] + workload_flags(args, wl, threads) + ["--json"]
    res, so = launch(args, cmd, threads, workdir, tag)
    if "error" in res:
        return res
    rec = None
    try:
        with open(so) as f:
            for line in f:
                if line.startswith("{"):
                    rec = json.loads(line)
    except (OSError, ValueError) as e:
        res["error"] = f"cannot read the JSON line: {e}"
        return res
    if rec is None:
        res["error"] = "no JSON line in the output"
        return res
    if rec.get("threads") != threads:
        res["warning"] = f"torch ran with {rec.get('threads')} threads, asked {threads}"
    res.update(train_seconds=rec["train_seconds"], images=rec["images_seen"], steps=rec["steps"],
               last_report_loss=rec.get("last_report_loss"), val_accuracy=rec.get("val_accuracy"),
               val_accuracy_from="train" if rec.get("val_accuracy") is not None else None,
               load_seconds=rec.get("load_seconds"),
               self_reported_peak_rss_mb=rec.get("peak_rss_mb"),
               self_reported_children_peak_rss_mb=rec.get("peak_rss_children_mb"),
               torch_version=rec.get("torch_version"))
    return res


# --------------------------------------------------------------------------------------------
# Environment: interpreters, machine, hpcnet bench.
# --------------------------------------------------------------------------------------------

def probe_torch(interp):
    """Returns {"version", "module", "python"} or None when interp cannot import torch."""
    code = ("import json,platform,torch;print(json.dumps({'version':torch.__version__,"
            "'module':torch.__file__,'python':platform.python_version()}))")
    try:
        p = subprocess.run([interp, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def find_torches(spec):
    """spec: comma list of interpreters, or None for every default candidate with torch."""
    explicit = spec is not None
    cands = [s for s in spec.split(",") if s.strip()] if explicit else DEFAULT_TORCH_CANDIDATES
    found, seen = [], set()
    for interp in cands:
        interp = interp.strip()
        if not (shutil.which(interp) or os.path.exists(interp)):
            if explicit:
                raise SystemExit(f"error: --torch interpreter {interp} not found")
            continue
        info = probe_torch(interp)
        if info is None:
            if explicit:
                raise SystemExit(f"error: {interp} cannot import torch")
            continue
        key = info["module"]
        if key in seen:
            continue
        seen.add(key)
        found.append(dict(info, interp=interp))
    names = [f"torch {t['version']}" for t in found]
    for t in found:  # the label must identify the interpreter when two share a version
        t["label"] = f"torch {t['version']}"
        if names.count(t["label"]) > 1:
            t["label"] += f" ({t['interp']})"
    return found


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def machine_info():
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"cpu": model, "cpus": os.cpu_count(), "usable_cpus": usable, "mem_gib": mem_gib,
            "kernel": platform.release(), "python": platform.python_version(),
            "hostname": platform.node()}


def hpcnet_version(hpcnet):
    try:
        p = subprocess.run([hpcnet, "info"], capture_output=True, text=True, timeout=60)
        lines = [" ".join(l.split()) for l in p.stdout.splitlines() if l.strip()]
        return {"version": lines[0] if lines else "?",
                "cpu_backend": next((l for l in lines if l.startswith("cpu")), "?")}
    except (OSError, subprocess.TimeoutExpired):
        return {"version": "?", "cpu_backend": "?"}


def hpcnet_bench(args, threads):
    cmd = [args.hpcnet, "bench", "--model", "lenet", "--batch-size", "128",
           "--steps", str(args.bench_steps), "--threads", str(threads), "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                           env=thread_env(threads))
        if p.returncode != 0:
            return {"cmd": cmd, "error": f"exit {p.returncode}: {p.stderr[-500:]}"}
        b = json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        return {"cmd": cmd, "error": str(e)}
    return {"cmd": cmd, "threads": threads, "gflops": b.get("gflops"),
            "peak_gflops": b.get("peak_gflops"), "ms_per_step": b.get("ms_per_step"),
            "images_per_sec": b.get("images_per_sec"),
            "mflop_per_step": b.get("mflop_per_step"), "raw": b}


# --------------------------------------------------------------------------------------------
# Summaries and tables.
# --------------------------------------------------------------------------------------------

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def summarize(runs):
    ok = [r for r in runs if "error" not in r]
    s = {"runs": len(runs), "ok": len(ok)}
    if not ok:
        s["error"] = runs[-1].get("error", "failed") if runs else "not run"
        return s
    s["train_seconds"] = med([r["train_seconds"] for r in ok])
    s["train_seconds_all"] = [r["train_seconds"] for r in ok]
    s["images_per_sec"] = med([r["images"] / r["train_seconds"] for r in ok
                               if r["train_seconds"] > 0])
    s["images"] = ok[0]["images"]
    s["peak_rss_mb"] = med([r["peak_rss_mb"] for r in ok])
    s["wall_seconds"] = med([r["wall_seconds"] for r in ok])
    s["last_report_loss"] = med([r.get("last_report_loss") for r in ok])
    s["val_accuracy"] = med([r.get("val_accuracy") for r in ok])
    s["val_accuracy_from"] = ok[0].get("val_accuracy_from")
    for k in ("self_reported_peak_rss_mb", "self_reported_children_peak_rss_mb", "load_seconds"):
        if any(k in r for r in ok):
            s[k] = med([r.get(k) for r in ok])
    if len(runs) > len(ok):
        s["failed_runs"] = len(runs) - len(ok)
    return s


def fmt(v, spec, none="—"):
    return none if v is None else format(v, spec)


BASELINE = "hpcnet baseline"


def build_rows(results, torches):
    rows = []
    for cell in results:
        h = cell["impls"]["hpcnet"]
        rows.append(dict(workload=cell["workload"], threads=cell["threads"], impl="hpcnet",
                         s=h, speed=None, mem=None))
        others = ([{"label": BASELINE}] if BASELINE in cell["impls"] else []) + list(torches)
        for t in others:
            ts = cell["impls"][t["label"]]
            speed = mem = None
            if "error" not in h and "error" not in ts:
                speed = ts["train_seconds"] / h["train_seconds"] if h["train_seconds"] else None
                mem = h["peak_rss_mb"] / ts["peak_rss_mb"] if ts["peak_rss_mb"] else None
            fast = None
            if speed is not None:
                fast = min(ts["train_seconds_all"]) / min(h["train_seconds_all"])
            ts["speed_ratio"], ts["mem_ratio"], ts["speed_ratio_fastest"] = speed, mem, fast
            rows.append(dict(workload=cell["workload"], threads=cell["threads"], impl=t["label"],
                             s=ts, speed=speed, mem=mem, fast_speed=fast))
    return rows


HEADERS = ["workload", "threads", "implementation", "train s", "images/s", "peak RSS MB",
           "final loss", "val acc %", "speed ratio", "mem ratio", "process wall s"]


def row_cells(r):
    s = r["s"]
    if "error" in s:
        return [r["workload"], str(r["threads"]), r["impl"], "FAILED", "", "", "", "", "", "", ""]
    acc = fmt(s.get("val_accuracy"), ".2f")
    if s.get("val_accuracy_from") == "hpcnet eval":
        acc += "*"
    return [r["workload"], str(r["threads"]), r["impl"], fmt(s["train_seconds"], ".2f"),
            fmt(s["images_per_sec"], ".0f"), fmt(s["peak_rss_mb"], ".0f"),
            fmt(s.get("last_report_loss"), ".3f"), acc,
            fmt(r["speed"], ".2f") + ("x" if r["speed"] is not None else ""),
            fmt(r["mem"], ".2f") + ("x" if r["mem"] is not None else ""),
            fmt(s.get("wall_seconds"), ".1f")]


def render_rows(headers, rows, markdown, left):
    """A table of string cells: Markdown (columns in `left` left-aligned, the others right), or
    plain text padded to the widest cell. Shared by compare_resnet.py and compare_segment.py."""
    if markdown:
        out = ["| " + " | ".join(headers) + " |",
               "|" + "|".join("---" if i in left else "---:" for i in range(len(headers))) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(len(headers))]
    line = "  ".join(h.ljust(w) if i in left else h.rjust(w)
                     for i, (h, w) in enumerate(zip(headers, widths)))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(v.ljust(w) if i in left else v.rjust(w)
                             for i, (v, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


def render_table(rows, markdown):
    cells = [row_cells(r) for r in rows]
    if markdown:
        right = {1, 3, 4, 5, 6, 7, 8, 9, 10}
        out = ["| " + " | ".join(HEADERS) + " |",
               "|" + "|".join("---:" if i in right else "---" for i in range(len(HEADERS))) + "|"]
        out += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join(out)
    widths = [max(len(HEADERS[i]), *(len(c[i]) for c in cells)) for i in range(len(HEADERS))]
    line = "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths))
    out = [line, "-" * len(line)]
    for c in cells:
        out.append("  ".join((v.ljust(w) if i in (0, 2) else v.rjust(w))
                             for i, (v, w) in enumerate(zip(c, widths))))
    return "\n".join(out)


def render_header(meta, markdown):
    m = meta["machine"]
    b = meta["hpcnet"].get("binary")
    built = (f"; {b['path']} built {b['mtime']}, sha256 {b['sha256'][:12]}" if b else "")
    lines = [
        f"machine: {m['cpu']}, {m['cpus']} CPUs ({m['usable_cpus']} usable), "
        f"{m['mem_gib']} GiB, Linux {m['kernel']}",
        f"load average (1/5/15 min): start {meta['loadavg_start']}, end {meta['loadavg_end']}",
        f"hpcnet: {meta['hpcnet']['version']}; {meta['hpcnet']['cpu_backend']}{built}",
        "pytorch: " + (", ".join(f"{t['label']} (python {t['python']}, {t['interp']})"
                                 for t in meta["torches"]) or "none"),
        f"data: {meta['data']}; val split {meta['val_split']}; workers {meta['workers']}; "
        f"seed {meta['seed']}; lr {meta['lr']}; momentum {meta['momentum']}; "
        f"repeat {meta['repeat']} (median)",
    ]
    if meta.get("baseline"):
        lines.append(f"baseline: {meta['baseline']['path']}, sha256 "
                     f"{meta['baseline']['sha256'][:12]} (row '{BASELINE}': speed ratio = "
                     f"baseline train s / hpcnet train s)")
    if meta.get("startup_rss_mb"):
        lines.append("startup peak RSS (`hpcnet --version`; `python -c 'import torch'`): " +
                     ", ".join(f"{k} {fmt(v, '.0f')} MB" for k, v in meta["startup_rss_mb"].items()))
    for b in meta["bench"]:
        if "error" in b:
            lines.append(f"hpcnet bench batch 128: FAILED ({b['error'].strip()[:200]})")
        else:
            pct = 100.0 * b["gflops"] / b["peak_gflops"] if b.get("peak_gflops") else None
            lines.append(f"hpcnet bench lenet batch 128, {b['threads']} thread(s): "
                         f"{b['ms_per_step']:.2f} ms/step, {b['images_per_sec']:.0f} images/s, "
                         f"{b['gflops']:.1f} GFLOP/s of {b['peak_gflops']:.1f} peak "
                         f"({fmt(pct, '.1f')} %)")
    if markdown:
        return "\n".join("- " + l for l in lines)
    return "\n".join(lines)


def render_notes(rows, markdown):
    notes = []
    if any(r["s"].get("val_accuracy_from") == "hpcnet eval" for r in rows):
        notes.append("`*`: hpcnet stopped mid-epoch (--steps) and does not evaluate then; its "
                     "accuracy comes from `hpcnet eval --split val` on the saved weights, "
                     "in a separate process.")
    notes.append("speed ratio = torch train s / hpcnet train s (>1: hpcnet faster); "
                 "mem ratio = hpcnet peak RSS / torch peak RSS (<1: hpcnet smaller).")
    for r in rows:
        s = r["s"]
        parts = []
        if "error" not in s and len(s.get("train_seconds_all", [])) > 1:
            parts.append("train s of each run " +
                         ", ".join(f"{v:.2f}" for v in s["train_seconds_all"]))
        if r["impl"] != "hpcnet" and r.get("fast_speed") is not None and \
                len(s.get("train_seconds_all", [])) > 1:
            parts.append(f"speed ratio of the fastest runs {r['fast_speed']:.2f}x")
        if "self_reported_peak_rss_mb" in s and "error" not in s:
            parts.append(f"in-process peak RSS (RUSAGE_SELF at the end of the script) "
                         f"{s['self_reported_peak_rss_mb']:.0f} MB, its children "
                         f"{s.get('self_reported_children_peak_rss_mb') or 0:.0f} MB; "
                         f"data decode {s.get('load_seconds') or 0:.1f} s")
        if parts:
            notes.append(f"{r['workload']}/{r['threads']}/{r['impl']}: " + "; ".join(parts))
        if "error" in s:
            notes.append(f"{r['workload']}/{r['threads']}/{r['impl']} FAILED: "
                         f"{s['error'].strip()[:300]}")
    if markdown:
        return "\n".join("- " + n for n in notes)
    return "\n".join(notes)


# --------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                   help="comma list of: " + ", ".join(WORKLOADS))
    p.add_argument("--threads", default="1,2", help="comma list of thread counts")
    p.add_argument("--torch", default=None,
                   help="comma list of Python interpreters with torch (default: every one of "
                        + ", ".join(DEFAULT_TORCH_CANDIDATES) + " that imports torch); "
                        "'' for hpcnet only")
    p.add_argument("--repeat", type=int, default=1, help="runs per cell; the median is shown")
    p.add_argument("--workers", type=int, default=0,
                   help="data-loading workers, the same for both sides")
    p.add_argument("--data", default=DEFAULT_DATA, help="dataset both sides read")
    p.add_argument("--hpcnet", default=DEFAULT_HPCNET, help="hpcnet binary")
    p.add_argument("--baseline", default=None,
                   help="an earlier hpcnet binary to run in every cell too (before vs after)")
    p.add_argument("--val-split", type=int, default=5000)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bench-steps", type=int, default=200,
                   help="steps of `hpcnet bench` (batch 128) for the header; 0 skips it")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    p.add_argument("--markdown", action="store_true", help="print Markdown")
    p.add_argument("--json-out", default=None, help="write every run and summary here")
    p.add_argument("--render", metavar="JSON", default=None,
                   help="run nothing: print the tables of an earlier --json-out file")
    p.add_argument("--keep-runs", action="store_true",
                   help="keep the run directories and logs (printed at the end)")
    a = p.parse_args(argv)
    a.workload_list = [w.strip() for w in a.workloads.split(",") if w.strip()]
    for w in a.workload_list:
        if w not in WORKLOADS:
            p.error(f"unknown workload '{w}' (known: {', '.join(WORKLOADS)})")
    try:
        a.thread_list = [int(t) for t in a.threads.split(",") if t.strip()]
    except ValueError:
        p.error("--threads must be a comma list of integers")
    if not a.thread_list or min(a.thread_list) < 1:
        p.error("--threads needs thread counts >= 1")
    if a.repeat < 1 or a.workers < 0 or a.val_split < 0:
        p.error("--repeat must be >= 1, --workers and --val-split >= 0")
    if a.render:
        return a
    if not os.path.exists(a.data):
        p.error(f"--data {a.data} does not exist")
    if not os.access(a.hpcnet, os.X_OK):
        p.error(f"--hpcnet {a.hpcnet} is not an executable (build it: cd build && ninja)")
    if a.baseline and not os.access(a.baseline, os.X_OK):
        p.error(f"--baseline {a.baseline} is not an executable")
    a.data = os.path.abspath(a.data)
    return a


def write_json_file(path, obj):
    """obj as indented JSON, written to PATH.tmp and renamed (a crash leaves the old file).
    Shared by compare_resnet.py and compare_segment.py."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def write_json(path, meta, results):
    write_json_file(path, {"meta": meta, "results": results})


def cpu_flags():
    """The vector and matrix extensions of this CPU that the kernels care about (None when
    /proc/cpuinfo cannot be read). Shared by compare_resnet.py and compare_segment.py."""
    want = ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [w for w in want if w in have]
    except OSError:
        pass
    return None


def print_report(meta, results, markdown):
    rows = build_rows(results, meta["torches"])
    print(render_header(meta, markdown))
    print()
    print(render_table(rows, markdown))
    print()
    print(render_notes(rows, markdown))
    return rows


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        rows = print_report(saved["meta"], saved["results"], args.markdown)
        return 1 if any("error" in r["s"] for r in rows) else 0
    torches = find_torches(args.torch)
    if not torches:
        log("warning: no interpreter imports torch; running hpcnet only")
    workdir = tempfile.mkdtemp(prefix="hpcnet-compare-")
    # Run a private copy: a rebuild of build/hpcnet during a long comparison must not mix
    # two builds into one table.
    binary = {"path": os.path.abspath(args.hpcnet), "sha256": sha256_file(args.hpcnet),
              "mtime": datetime.datetime.fromtimestamp(os.path.getmtime(args.hpcnet))
              .isoformat(timespec="seconds")}
    args.hpcnet = os.path.join(workdir, "hpcnet")
    shutil.copy2(binary["path"], args.hpcnet)
    baseline = None
    if args.baseline:
        baseline = {"path": os.path.abspath(args.baseline), "sha256": sha256_file(args.baseline)}
        args.baseline = os.path.join(workdir, "hpcnet-baseline")
        shutil.copy2(baseline["path"], args.baseline)
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv,
        "machine": machine_info(),
        "loadavg_start": loadavg(),
        "hpcnet": dict(hpcnet_version(args.hpcnet), binary=binary),
        "baseline": baseline,
        "torches": torches,
        "data": args.data, "val_split": args.val_split, "workers": args.workers,
        "seed": args.seed, "lr": args.lr, "momentum": args.momentum, "repeat": args.repeat,
        "workloads": {w: WORKLOADS[w] for w in args.workload_list},
        "bench": [],
    }
    if args.bench_steps > 0:
        for t in args.thread_list:
            log(f"hpcnet bench lenet batch 128, {t} thread(s) ...")
            meta["bench"].append(hpcnet_bench(args, t))

    # Fixed cost of each side: the whole-process peak of a process that only starts up.
    meta["startup_rss_mb"] = {}
    for name, cmd in [("hpcnet", [args.hpcnet, "--version"])] + \
            [(t["label"], [t["interp"], "-c", "import torch"]) for t in torches]:
        rc, _, kib = run_measured(cmd, thread_env(1), args.timeout,
                                  os.devnull, os.devnull)
        meta["startup_rss_mb"][name] = round(kib / 1024.0, 1) if rc == 0 else None

    impls = [("hpcnet", None)] + ([(BASELINE, "baseline")] if args.baseline else []) + \
        [(t["label"], t) for t in torches]
    results = []
    for w in args.workload_list:
        wl = WORKLOADS[w]
        for th in args.thread_list:
            runs = {name: [] for name, _ in impls}
            for rep in range(args.repeat):
                # Interleave the implementations so slow phases of a shared machine hit all.
                for k, (name, t) in enumerate(impls):
                    tag = f"{w}-t{th}-r{rep}-{k}"
                    log(f"[{w} threads {th} run {rep + 1}/{args.repeat}] {name} "
                        f"(load {loadavg()}) ...")
                    if t is None:
                        r = run_hpcnet(args, wl, th, workdir, tag)
                    elif t == "baseline":
                        r = run_hpcnet(args, wl, th, workdir, tag, binary=args.baseline)
                    else:
                        r = run_torch(args, t["interp"], wl, th, workdir, tag)
                    if "error" in r:
                        log(f"  FAILED: {r['error'].strip()[:500]}")
                    else:
                        log(f"  train {r['train_seconds']:.2f} s, peak RSS "
                            f"{r['peak_rss_mb']:.0f} MB, loss {r.get('last_report_loss')}, "
                            f"val acc {r.get('val_accuracy')}")
                    runs[name].append(r)
            results.append({"workload": w, "threads": th, "settings": wl,
                            "impls": {name: summarize(runs[name]) for name, _ in impls},
                            "runs": runs})
            if args.json_out:  # after every cell, so an interrupted run keeps what it measured
                meta["loadavg_end"] = loadavg()
                write_json(args.json_out, meta, results)
    meta["loadavg_end"] = loadavg()

    rows = print_report(meta, results, args.markdown)

    if args.json_out:
        write_json(args.json_out, meta, results)
        log(f"wrote {args.json_out}")
    if args.keep_runs:
        log(f"run directories and logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    failed = any("error" in r["s"] for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
