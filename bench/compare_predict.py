#!/usr/bin/env python3
"""Side-by-side benchmark of detection on a video: hpcnet's predict against Ultralytics' predict
and against ONNX Runtime's forward pass alone, for the same YOLOv8n weights, in one run.

The weights: Ultralytics' DetectionModel("yolov8n.yaml", nc=80) with torch.manual_seed(0) (no
weights are downloaded), written as hpcnet's model file (scripts/convert_checkpoint.py
to-safetensors) and back as an Ultralytics checkpoint (to-pth), which YOLO() opens; the ONNX
model is `hpcnet export` of the same file. The video: FRAMES frames of 640x480 at 30 FPS written
with OpenCV (MPEG-4 part 2, "mp4v", in .mp4), from the scenes photographs when --photos names a
folder of JPEGs, else from moving coloured rectangles on noise.

  hpcnet       hpcnet predict --weights W --imgsz 640 --threads T --precision P --streams S
               --save OUT VIDEO (one row per --precision and --streams value: fp32 and bf16,
               1 and 2 streams by default; row "bf16 s2")
               (decoding, letterbox, forward, NMS, drawing and H.264 encoding of the annotated
               video, overlapped in threads; whole process)
  ultralytics  YOLO(W.pt).predict(source=VIDEO, imgsz=640, save=True, stream=True), torch with T
               threads (whole process: its own decoding, pre/postprocessing, drawing, writing)
  onnxruntime  InferenceSession(model.onnx, intra_op_num_threads=T).run on one (1, 3, 640, 640)
               input and one (1, 3, 480, 640), repeated: the forward pass alone, no decoding,
               no NMS, no drawing; and, as hpcnet's --streams, T sessions of 1 thread each
               running at once on (1, 3, 480, 640) (FPS: their runs over the wall time)

Each is its own process (wall time and peak RSS from os.wait4, bench/compare.py). Printed: FPS of
the whole pipeline (frames / process wall time) and of the forward pass alone (hpcnet: its Speed
line's inference ms, times its streams; ORT: the median run), peak RSS, and the ratios the issue
asks for: hpcnet's
pipeline FPS over ORT's forward-only FPS, and over Ultralytics' pipeline FPS.

Note: hpcnet's and Ultralytics' predict letterbox a 640x480 frame to the smallest multiple of 32
around it, (1, 3, 480, 640), 25% fewer pixels than the square; ONNX Runtime runs both the square
(1, 3, 640, 640) and (1, 3, 480, 640) (`hpcnet export --imgsz 480,640`), and hpcnet's ratio is
printed against each; the one on the same input is the fair one.

    /tmp/ref/bin/python bench/compare_predict.py                 # 300 frames, 2 threads
    /tmp/ref/bin/python bench/compare_predict.py --frames 60     # a quick run

Needs: a venv with torch, ultralytics, onnxruntime and opencv (ultralytics installs it);
--hpcnet build/hpcnet. Absolute times on a shared machine are noisy; the ratios of one run count.
"""

import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (process measurement, thread environment)


def make_video(path, frames, photos):
    import cv2
    import numpy as np

    w, h = 640, 480
    out = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (w, h))
    files = sorted(glob.glob(os.path.join(photos, "**", "*.jpg"), recursive=True)) if photos else []
    rng = np.random.default_rng(0)
    for k in range(frames):
        if files:
            img = cv2.resize(cv2.imread(files[(k // 10) % len(files)]), (w, h))
            img = np.roll(img, 4 * (k % 10), axis=1)  # pans, so that frames differ
        else:
            img = rng.integers(60, 140, size=(h, w, 3), dtype=np.uint8)
            for i, color in enumerate([(40, 40, 230), (60, 220, 40), (230, 160, 30)]):
                x = (30 + 11 * k * (i + 1)) % (w - 120)
                y = 60 + 130 * i
                img[y:y + 100, x:x + 120] = color
        out.write(img)
    out.release()


def make_weights(py, work, threads):
    """The same random yolov8n for all three: W.safetensors (hpcnet), W.pt (Ultralytics)."""
    sd = os.path.join(work, "sd.safetensors")
    code = (
        "import torch, safetensors.torch as st\n"
        "from ultralytics.nn.tasks import DetectionModel\n"
        "torch.manual_seed(0)\n"
        "m = DetectionModel('yolov8n.yaml', nc=80, verbose=False)\n"
        f"st.save_file({{k: v.contiguous() for k, v in m.state_dict().items()}}, {sd!r})\n")
    env = dict(os.environ, YOLO_OFFLINE="1")
    subprocess.run([py, "-c", code], check=True, env=env)
    conv = os.path.join(ROOT, "scripts", "convert_checkpoint.py")
    w = os.path.join(work, "yolov8n.safetensors")
    subprocess.run([py, conv, "to-safetensors", sd, w, "--model", "yolov8n", "--imgsz", "640"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    pt = os.path.join(work, "yolov8n.pt")
    subprocess.run([py, conv, "to-pth", w, pt, "--model", "yolov8n"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return w, pt


ULTRALYTICS = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[3]))
from ultralytics import YOLO
model = YOLO(sys.argv[1])
n = 0
for r in model.predict(source=sys.argv[2], imgsz=640, save=True, stream=True, verbose=False,
                       device="cpu", project=sys.argv[4], name="run", exist_ok=True):
    n += 1
print("frames", n)
"""

ORT = """
import sys, time, statistics, numpy as np, onnxruntime as ort
o = ort.SessionOptions()
o.intra_op_num_threads = int(sys.argv[2])
o.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).random(tuple(s.get_inputs()[0].shape), dtype=np.float32)
name = s.get_inputs()[0].name
for _ in range(5):
    s.run(None, {name: x})
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    s.run(None, {name: x})
    times.append(time.perf_counter() - t)
print("median_ms", 1000 * statistics.median(times))
"""


ORT_STREAMS = """
import sys, time, threading, numpy as np, onnxruntime as ort
n, runs = int(sys.argv[2]), int(sys.argv[3])
def session():
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    return ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
sessions = [session() for _ in range(n)]
x = np.random.default_rng(0).random(tuple(sessions[0].get_inputs()[0].shape), dtype=np.float32)
name = sessions[0].get_inputs()[0].name
for s in sessions:
    s.run(None, {name: x})
def loop(s):
    for _ in range(runs):
        s.run(None, {name: x})
threads = [threading.Thread(target=loop, args=(s,)) for s in sessions]
t = time.perf_counter()
for th in threads:
    th.start()
for th in threads:
    th.join()
print("fps", n * runs / (time.perf_counter() - t))
"""


def measured(cmd, env, work, tag, timeout=3600):
    out, err = os.path.join(work, tag + ".out"), os.path.join(work, tag + ".err")
    rc, wall, rss_kib = compare.run_measured(cmd, env, timeout, out, err)
    if rc != 0:
        sys.exit(f"compare_predict: {tag} failed (exit {rc}):\n" + compare.tail(err))
    return wall, rss_kib / 1024.0, open(out).read(), open(err).read()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hpcnet", default=os.path.join(ROOT, "build", "hpcnet"))
    p.add_argument("--python", default=sys.executable, help="interpreter with ultralytics, ORT")
    p.add_argument("--photos", default="", help="a folder of JPEGs for the video's frames")
    p.add_argument("--ort-runs", type=int, default=50)
    p.add_argument("--precision", default="fp32,bf16",
                   help="hpcnet predict's --precision values, one row each (fp32, bf16, int8: "
                        "with --calibrate)")
    p.add_argument("--calibrate", default="",
                   help="a detection data.yaml whose val images calibrate the int8 row "
                        "(`hpcnet quantize`); needed when --precision names int8")
    p.add_argument("--streams", default="1,2",
                   help="hpcnet predict's --streams values, one row each per precision (sN)")
    p.add_argument("--work", default="",
                   help="a folder to keep the video, weights and outputs in (default: a temporary"
                        " folder, removed at the end)")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="compare_predict_")
    os.makedirs(work, exist_ok=True)
    env = dict(compare.thread_env(a.threads), YOLO_OFFLINE="1")
    video = os.path.join(work, "video.mp4")
    make_video(video, a.frames, a.photos)
    weights, pt = make_weights(a.python, work, a.threads)
    # ORT at the square input and at the one hpcnet's and Ultralytics' predict feed a 640x480
    # frame (their letterbox pads only to a multiple of 32: (1, 3, 480, 640)).
    onnx = {}
    for shape in ("640,640", "480,640"):
        onnx[shape] = os.path.join(work, "yolov8n-" + shape.replace(",", "x") + ".onnx")
        subprocess.run([a.hpcnet, "export", "--weights", weights, "--imgsz", shape, "--out",
                        onnx[shape]], check=True, stdout=subprocess.DEVNULL)
    binary = os.path.join(work, "hpcnet")
    shutil.copy2(a.hpcnet, binary)
    weights_of = {"fp32": weights, "bf16": weights}
    if "int8" in a.precision.split(","):
        if not a.calibrate:
            sys.exit("compare_predict: --precision int8 needs --calibrate DATA.yaml")
        weights_of["int8"] = os.path.join(work, "yolov8n-int8.safetensors")
        subprocess.run([a.hpcnet, "quantize", "--weights", weights, "--data", a.calibrate,
                        "--imgsz", "640", "--images", "64", "--threads", str(a.threads), "--out",
                        weights_of["int8"]], check=True, stdout=subprocess.DEVNULL)

    rows = []
    for prec in a.precision.split(","):
        for n in a.streams.split(","):
            tag = f"hpcnet-{prec}-streams{n}"
            wall, rss, out, err = measured(
                [binary, "predict", "--weights", weights_of[prec], "--imgsz", "640", "--threads",
                 str(a.threads), "--device", "cpu", "--precision", prec, "--streams", n, "--save",
                 os.path.join(work, "hpcnet-out"), "--exist-ok", video], env, work, tag)
            infer = re.search(r"Speed: .*?, ([\d.]+)ms inference", err)
            # --streams: that many forward passes at once, each taking the inference time
            streams = re.search(r"(\d+) streams at once", err)
            per_s = int(streams.group(1)) if streams else 1
            shape = re.search(r"at shape (\(.*?\))", err)
            frames = len([l for l in out.splitlines() if l.strip()])
            rows.append((f"hpcnet predict {prec} s{per_s}", frames / wall,
                         per_s * 1000.0 / float(infer.group(1)) if infer else None, rss,
                         shape.group(1) if shape else "?"))
    wall, rss, out, err = measured(
        [a.python, "-c", ULTRALYTICS, pt, video, str(a.threads), os.path.join(work, "ul-out")],
        env, work, "ultralytics")
    ul_frames = int(re.search(r"frames (\d+)", out).group(1))
    rows.append(("ultralytics predict", ul_frames / wall, None, rss, "(1, 3, 480, 640)"))
    ort = {}
    for shape, path in onnx.items():
        wall, rss, out, err = measured(
            [a.python, "-c", ORT, path, str(a.threads), str(a.ort_runs)], env, work,
            "onnxruntime-" + shape.replace(",", "x"))
        ort_ms = float(re.search(r"median_ms ([\d.]+)", out).group(1))
        h, w = shape.split(",")
        ort[f"(1, 3, {h}, {w})"] = 1000.0 / ort_ms
        rows.append(("onnxruntime forward only", None, 1000.0 / ort_ms, rss, f"(1, 3, {h}, {w})"))
    if a.threads > 1:
        wall, rss, out, err = measured(
            [a.python, "-c", ORT_STREAMS, onnx["480,640"], str(a.threads), str(a.ort_runs)],
            env, work, "onnxruntime-streams")
        fps = float(re.search(r"fps ([\d.]+)", out).group(1))
        ort[f"(1, 3, 480, 640), {a.threads} x 1 thread"] = fps
        rows.append((f"onnxruntime {a.threads} sessions", None, fps, rss, "(1, 3, 480, 640)"))

    print(f"\n{a.frames} frames of 640x480, yolov8n (random weights, seed 0), {a.threads} threads,"
          f" load {compare.loadavg()}")
    print(f"{'':26s} {'pipeline FPS':>13s} {'forward FPS':>12s} {'peak RSS MB':>12s}  input")
    for name, fps, fwd, rss, shape in rows:
        f = lambda v: f"{v:.1f}" if v is not None else "-"
        print(f"{name:26s} {f(fps):>13s} {f(fwd):>12s} {rss:12.0f}  {shape}")
    ul = next(r[1] for r in rows if r[0] == "ultralytics predict")
    for name, hp, _, _, shape in rows:
        if not name.startswith("hpcnet"):
            continue
        for ort_shape, ort_fps in ort.items():
            same = " (the same input)" if ort_shape.startswith(shape) else ""
            print(f"{name} pipeline / ORT forward alone at {ort_shape}{same}: {hp / ort_fps:.2f}x")
        print(f"{name} pipeline / Ultralytics pipeline: {hp / ul:.2f}x")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
