#!/usr/bin/env python3
"""Convert checkpoints between PyTorch (.pth: smp, torchvision) and hpcnet's safetensors files.

  to-safetensors IN.pth OUT.safetensors [--model NAME] [--classes C] [--imgsz N]
      Reads a PyTorch checkpoint with torch.load(weights_only=True) (or a safetensors file, e.g.
      smp's save_pretrained model.safetensors, to add hpcnet's metadata): a plain state_dict, or a
      dict holding it under "model", "state_dict" or "model_state_dict" (torchvision's
      reference train.py saves {"model", "optimizer", "lr_scheduler", "epoch", "args"}; only
      the model's state_dict is kept). A whole pickled nn.Module needs --allow-pickle
      (weights_only=False: unpickling runs code from the file; use it only on files you trust).
      So does every Ultralytics .pt (best.pt, last.pt: a pickled DetectionModel): from it the
      EMA model when present, else "model" (as Ultralytics loads it), its tensors as float32,
      and its yaml (hpcnet.model: yolov8n.yaml -> yolov8n, any of yolov8{n,s,m,l,x} and
      yolo11{n,s,m,l,x}), names (hpcnet.classes) and train_args
      imgsz (hpcnet.imgsz) are read, so no other flag is needed.
      Strips DistributedDataParallel's "module." and torch.compile's "_orig_mod." prefixes,
      makes every tensor contiguous and writes it with safetensors.torch.save_file, under the
      metadata hpcnet reads (src/train/checkpoint.cpp):
        hpcnet.model    NAME (--model), so `hpcnet eval/predict --weights OUT` need no --model
        hpcnet.task     the model's task (unet_*: segment; lenet, resnet*, cifar_resnet18:
                        classify; yolov8*, yolo11*: detect)
        hpcnet.classes  JSON list of K class names, K from the classifier's shape: from
                        --classes (classes.txt, an Ultralytics data.yaml read as hpcnet reads
                        it for the task: for segmentation "background" then its names, for
                        detection its names, or "a,b,c"), else class_0 ... class_K-1
        hpcnet.imgsz    --imgsz, the input size the weights were trained at (eval and predict
                        resize to it; without it hpcnet uses the model's default, 128 for unet)
      hpcnet.classes is what hpcnet cannot do without: a file without it loads as a 10-class
      model (CIFAR-10's names), so an 11-class U-Net fails to load and eval refuses a dataset
      of another class count.

  to-pth IN.safetensors OUT.pth [--model NAME] [--ema] [--state-dict]
      The reverse: torch.save of the model's state_dict (an OrderedDict of tensors, BatchNorm's
      num_batches_tracked as int64). Reads hpcnet's model.safetensors (the state_dict alone) and
      its checkpoint.safetensors (hpcnet.format = hpcnet-checkpoint-1: the "model."-prefixed
      tensors are taken; the optimizer's "optim." moments are left out; --ema takes the "ema."
      averaged weights instead), or any other safetensors file; metadata is not carried over.
      For the YOLO models, when ultralytics is importable, OUT is an Ultralytics checkpoint
      instead, laid out as its trainer's final best.pt ({"model": the DetectionModel with the
      weights in float32, its names from hpcnet.classes, args imgsz from hpcnet.imgsz; "ema":
      None, "train_args", "epoch": -1, ...}), which YOLO(OUT) opens; --state-dict writes the
      bare state_dict. Without ultralytics it writes the bare state_dict and says so (YOLO()
      cannot open that: pip install ultralytics and convert again, or load it with
      DetectionModel('yolov8n.yaml', nc=K).load_state_dict(torch.load(OUT))).

With --model (or hpcnet.model in the file) naming unet_resnet18/34/50,
deeplabv3_resnet50, resnet18/34/50/101, yolov8{n,s,m,l,x} or yolo11{n,s,m,l,x}, the keys and
shapes are checked against smp.Unet(ENCODER, encoder_weights=None, classes=K), torchvision's
deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=K, aux_loss=<aux_classifier.*
present>), torchvision.models.resnetNN(weights=None, num_classes=K) or Ultralytics'
DetectionModel('<name>.yaml', nc=K) (8.4.190's names and shapes, which hpcnet builds, from
tests/golden/yolo_state_dicts.json; without that file, the installed ultralytics' model); other
names are not checked. smp, torchvision and ultralytics are imported only for this check (and
Ultralytics' checkpoints) and build no pretrained weights (YOLO_OFFLINE=1 is set).

Errors (a missing file, a file that is not a checkpoint, no state_dict in it, a value that is
not a tensor, keys that do not match the model) are one line on stderr and exit code 2.

    python3 scripts/convert_checkpoint.py to-safetensors unet.pth unet.safetensors \\
        --model unet_resnet18 --classes scenes/data.yaml
    build/hpcnet eval --weights unet.safetensors --dataset segmentation --data scenes --split val
    python3 scripts/convert_checkpoint.py to-pth runs/unet/model.safetensors unet.pth
    python3 -c "import torch, segmentation_models_pytorch as smp; \\
        smp.Unet('resnet18', encoder_weights=None, classes=11).load_state_dict(torch.load('unet.pth'))"
    python3 scripts/convert_checkpoint.py to-safetensors resnet50-0676ba61.pth r50.safetensors \\
        --model resnet50 --imgsz 224    # torchvision's ImageNet weights (or its train.py's
                                        # checkpoint.pth); then hpcnet train --model resnet50
                                        # --weights r50.safetensors fine-tunes to any class count
    python3 -c "import torch, torchvision; torch.save(torchvision.models.resnet34( \\
        weights='IMAGENET1K_V1').state_dict(), 'resnet34.pth')"   # on a machine with network
    python3 scripts/convert_checkpoint.py to-safetensors resnet34.pth r34.safetensors \\
        --model resnet34     # then hpcnet train --model unet_resnet34 --encoder-weights
                             # r34.safetensors: the U-Net's encoder from ImageNet (smp's
                             # encoder_weights="imagenet"; deeplabv3_resnet50 takes a resnet50)
    python3 scripts/convert_checkpoint.py to-safetensors runs/detect/train/weights/best.pt \\
        best.safetensors --allow-pickle          # an Ultralytics .pt: model, names, imgsz read
    python3 scripts/convert_checkpoint.py to-pth runs/det/best.safetensors best.pt
    python3 -c "from ultralytics import YOLO; YOLO('best.pt').val(data='data.yaml')"
"""

import argparse
import collections
import datetime
import json
import logging
import os
import pickle
import re
import sys

CHECKPOINT_FORMAT = "hpcnet-checkpoint-1"  # src/train/checkpoint.h, kCheckpointFormat
STATE_DICT_KEYS = ("model", "state_dict", "model_state_dict")
PREFIXES = ("module.", "_orig_mod.")
# Metadata kept from an hpcnet file given to to-safetensors (flags override it).
INHERITED = ("hpcnet.model", "hpcnet.task", "hpcnet.classes", "hpcnet.imgsz", "hpcnet.val_split",
             "hpcnet.normalize", "hpcnet.augment")

# What the converter knows of a model: its task (hpcnet.task), the weight whose first dimension
# is the class count, and how to build the reference for the key check (None: not checked).
KNOWN_MODELS = {
    "unet_resnet18": ("segment", "segmentation_head.0.weight", "smp:resnet18"),
    "unet_resnet34": ("segment", "segmentation_head.0.weight", "smp:resnet34"),
    "unet_resnet50": ("segment", "segmentation_head.0.weight", "smp:resnet50"),
    "deeplabv3_resnet50": ("segment", "classifier.4.weight", "torchvision:deeplabv3_resnet50"),
    "lenet": ("classify", "fc3.weight", None),
    "resnet20": ("classify", "linear.weight", None),
    "resnet32": ("classify", "linear.weight", None),
    "resnet56": ("classify", "linear.weight", None),
    "cifar_resnet18": ("classify", "linear.weight", None),  # "resnet18" before torchvision's
    "resnet18": ("classify", "fc.weight", "torchvision:resnet18"),
    "resnet34": ("classify", "fc.weight", "torchvision:resnet34"),
    "resnet50": ("classify", "fc.weight", "torchvision:resnet50"),
    "resnet101": ("classify", "fc.weight", "torchvision:resnet101"),
}
# Ultralytics' named detection models (yolov8.yaml: Detect is layer 22; yolo11.yaml: 23).
KNOWN_MODELS.update({f"yolov8{s}": ("detect", "model.22.cv3.0.2.weight",
                                    f"ultralytics:yolov8{s}.yaml") for s in "nsmlx"})
KNOWN_MODELS.update({f"yolo11{s}": ("detect", "model.23.cv3.0.2.weight",
                                    f"ultralytics:yolo11{s}.yaml") for s in "nsmlx"})
# Without --model: the first of these present gives K (the last: torchvision's classifiers).
HEAD_KEYS = ("segmentation_head.0.weight", "classifier.4.weight", "linear.weight", "fc3.weight",
             "model.22.cv3.0.2.weight", "model.23.cv3.0.2.weight", "fc.weight")
# The names and shapes of every Ultralytics model above (8.4.190, nc=80), as hpcnet builds them
# (tests/golden/make_yolo_state_dicts.py): the key check's reference for the YOLO models.
YOLO_STATE_DICTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "golden", "yolo_state_dicts.json")
# The Detect head's class branch (model.<last>.cv3.<level>.*) is c3 = max(c, min(nc, 100)) wide,
# c the P3 level's channels (model.<last>.cv2.0.0.conv.weight's dimension 1); its last
# convolution (cv3.<level>.2) gives nc.
YOLO_CLASS_BRANCH = re.compile(r"model\.(\d+)\.cv3\.\d+\.")
YOLO_CLASS_KEY = re.compile(r"model\.\d+\.cv3\.\d+\.2\.(weight|bias)$")
# hpcnet reads these safetensors dtypes (src/io/safetensors.cpp).
HPCNET_DTYPES = ("float32", "float64", "bfloat16", "float16", "int64", "int32", "uint8")


class ConvertError(Exception):
    """Bad input: reported as one line, exit code 2."""


def import_torch():
    try:
        import torch  # noqa: F401
        import safetensors.torch  # noqa: F401
    except ImportError as e:
        raise ConvertError(f"needs PyTorch and safetensors (pip install torch safetensors): {e}")
    return torch


def require_file(path):
    if not os.path.exists(path):
        raise ConvertError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: not a file")


def strip_prefixes(sd):
    """Drops "module." / "_orig_mod." where every key has it (repeatedly: DDP around a compiled
    model), and "_orig_mod." path components anywhere (a compiled submodule)."""
    changed = True
    while changed and sd:
        changed = False
        for p in PREFIXES:
            if all(k.startswith(p) for k in sd):
                sd = collections.OrderedDict((k[len(p):], v) for k, v in sd.items())
                changed = True
    out = collections.OrderedDict()
    for k, v in sd.items():
        out[k.replace("._orig_mod.", ".")] = v
    return out


def tensor_state_dict(obj, path):
    """The state_dict as an OrderedDict of tensors; ConvertError for a non-tensor value."""
    torch = import_torch()
    if not obj:
        raise ConvertError(f"{path}: the state_dict is empty")
    sd = collections.OrderedDict()
    for k, v in obj.items():
        if not isinstance(k, str):
            raise ConvertError(f"{path}: state_dict key {k!r} is not a string")
        if not isinstance(v, torch.Tensor):
            raise ConvertError(f"{path}: state_dict entry '{k}' is of type {type(v).__name__}, not a tensor")
        if v.is_sparse or v.is_quantized:
            raise ConvertError(f"{path}: state_dict entry '{k}' is a sparse or quantized tensor")
        sd[k] = v
    return sd


def find_state_dict(obj, path, allow_pickle):
    """The model's state_dict in what torch.load returned."""
    torch = import_torch()
    if allow_pickle and isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if not isinstance(obj, dict):
        raise ConvertError(f"{path}: holds a {type(obj).__name__}, not a state_dict or a dict of one")
    if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj
    for key in STATE_DICT_KEYS:
        if key in obj:
            inner = obj[key]
            if allow_pickle and isinstance(inner, torch.nn.Module):
                return inner.state_dict()
            if isinstance(inner, dict):
                return inner
            raise ConvertError(f"{path}: '{key}' holds a {type(inner).__name__}, not a state_dict"
                               + ("" if allow_pickle else " (a pickled module needs --allow-pickle)"))
    if obj and any(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj  # a state_dict with a non-tensor value: tensor_state_dict names it
    keys = ", ".join(repr(k) for k in list(obj)[:8])
    raise ConvertError(f"{path}: no state_dict found (top-level keys: {keys or 'none'}; "
                       f"looked for a dict of tensors or one under {', '.join(STATE_DICT_KEYS)})")


def is_safetensors(path):
    """A safetensors file: an 8-byte little-endian header length, then the JSON header."""
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{" and 2 <= int.from_bytes(head[:8], "little") < 10**8


def load_safetensors(path, ema=False):
    """(state_dict, metadata) of a safetensors file; of an hpcnet checkpoint, the model's tensors
    ("model."-prefixed, or with ema the "ema." ones), not the optimizer's."""
    import_torch()
    from safetensors import safe_open
    require_file(path)
    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            tensors = collections.OrderedDict((k, f.get_tensor(k)) for k in f.keys())
    except Exception as e:
        text = " ".join(str(e).split())
        raise ConvertError(f"{path}: not a safetensors file ({type(e).__name__}: {text[:200]})")
    if meta.get("hpcnet.format") == CHECKPOINT_FORMAT:
        prefix = "ema." if ema else "model."
        sd = collections.OrderedDict((k[len(prefix):], v) for k, v in tensors.items()
                                     if k.startswith(prefix))
        if not sd:
            raise ConvertError(f"{path}: an hpcnet checkpoint without '{prefix}' tensors"
                               + (" (the run used no --ema-decay)" if ema else ""))
    else:
        if ema:
            raise ConvertError(f"{path}: --ema needs an hpcnet checkpoint.safetensors (a model "
                               "file already holds the averaged weights of an --ema-decay run)")
        sd = tensors
    if not sd:
        raise ConvertError(f"{path}: holds no tensors")
    return sd, meta


def load_pth(path, allow_pickle):
    torch = import_torch()
    require_file(path)
    if is_safetensors(path):  # e.g. smp's save_pretrained model.safetensors: add the metadata
        sd, meta = load_safetensors(path)
        return strip_prefixes(sd), {k: v for k, v in meta.items() if k in INHERITED}
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split())
        found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        if not allow_pickle and isinstance(e, pickle.UnpicklingError) and found and \
                found.group(1).startswith("ultralytics."):
            raise ConvertError(f"{path}: an Ultralytics checkpoint (a pickled "
                               f"{found.group(1).split('.')[-1]}): add --allow-pickle, which "
                               "loads it with weights_only=False and runs code from the file (only "
                               "for files you trust); the model, class names and imgsz are read "
                               "from it")
        if not allow_pickle and isinstance(e, pickle.UnpicklingError) and found:
            raise ConvertError(f"{path}: holds a {found.group(1)} (a pickled nn.Module?); "
                               "--allow-pickle loads it with weights_only=False, which runs code "
                               "from the file: only for files you trust")
        if isinstance(e, pickle.UnpicklingError) and "WeightsUnpickler error:" in text:
            text = text[text.index("WeightsUnpickler error:"):].split(" Check the documentation")[0]
        raise ConvertError(f"{path}: not a PyTorch checkpoint ({type(e).__name__}: {text[:200]})")
    if allow_pickle:
        found = ultralytics_checkpoint(obj, path)
        if found is not None:
            return found
    return strip_prefixes(tensor_state_dict(find_state_dict(obj, path, allow_pickle), path)), {}


def class_count(sd, model, path):
    """K from the classifier's shape (None when the model is unknown and no head key matches)."""
    keys = [KNOWN_MODELS[model][1]] if model in KNOWN_MODELS else [] if model else HEAD_KEYS
    for k in keys:
        if k in sd:
            return int(sd[k].shape[0])
    if model in KNOWN_MODELS:
        raise ConvertError(f"{path}: no '{keys[0]}' (the {model} classifier): is this a {model} "
                           "checkpoint?")
    return None


def yolo_shapes(model, k):
    """{name: shape} of Ultralytics' DetectionModel('<model>.yaml', nc=k) in state_dict order, from
    YOLO_STATE_DICTS (no ultralytics needed), or None when that file is not there."""
    try:
        with open(YOLO_STATE_DICTS, encoding="utf-8") as f:
            entry = json.load(f)["models"][f"{model}@80"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError) as e:
        raise ConvertError(f"{YOLO_STATE_DICTS}: no names and shapes of {model} ({e})")
    bns = set(entry["batchnorms"])
    head = YOLO_CLASS_BRANCH.match(next(n for n, _ in entry["params"] if YOLO_CLASS_BRANCH.match(n)))
    c = dict(entry["params"])[f"model.{head.group(1)}.cv2.0.0.conv.weight"][1]
    # The branch's width at the file's nc and at k (where they differ, c < 80, and no level's
    # input has c3_80 channels: 64, 128, 256 at scale n).
    c3_80, c3 = max(c, min(entry["nc"], 100)), max(c, min(k, 100))
    out = collections.OrderedDict()
    for name, shape in entry["params"]:
        shape = tuple(shape)
        if YOLO_CLASS_BRANCH.match(name):
            shape = tuple(c3 if d == c3_80 else d for d in shape)
        if YOLO_CLASS_KEY.match(name):
            shape = (k,) + shape[1:]
        out[name] = shape
        prefix, leaf = name.rsplit(".", 1)
        if prefix in bns and leaf == "bias":  # BatchNorm2d: weight, bias, then its buffers
            out[prefix + ".running_mean"] = out[prefix + ".running_var"] = shape
            out[prefix + ".num_batches_tracked"] = ()
    return out


def reference_state_dict(model, sd, path):
    """{name: shape} of the reference model, in its state_dict order, for the key check; None when
    the model is not checked. The YOLO models: their names and shapes in YOLO_STATE_DICTS (what
    hpcnet builds), else those of the installed ultralytics' DetectionModel."""
    if model not in KNOWN_MODELS or KNOWN_MODELS[model][2] is None:
        return None
    k = class_count(sd, model, path)
    lib, name = KNOWN_MODELS[model][2].split(":")
    if lib == "ultralytics":
        shapes = yolo_shapes(model, k)
        if shapes is not None:
            return shapes
        return shape_dict(ultralytics_model(model, k).state_dict())
    try:
        if lib == "smp":
            import segmentation_models_pytorch as smp
            ref = smp.Unet(name, encoder_weights=None, classes=k)
        elif name.startswith("resnet"):  # torchvision's ImageNet classifiers
            import torchvision
            ref = getattr(torchvision.models, name)(weights=None, num_classes=k)
        else:
            import torchvision
            aux = any(key.startswith("aux_classifier.") for key in sd)
            ref = getattr(torchvision.models.segmentation, name)(
                weights=None, weights_backbone=None, num_classes=k, aux_loss=aux)
    except ImportError as e:
        raise ConvertError(f"checking the keys of {model} needs "
                           f"{'segmentation_models_pytorch' if lib == 'smp' else 'torchvision'}: {e}")
    return shape_dict(ref.state_dict())


def shape_dict(sd):
    return collections.OrderedDict((name, tuple(t.shape)) for name, t in sd.items())


def import_ultralytics():
    """The ultralytics package (offline: it builds models from its yaml files, downloads nothing),
    or None when it is not installed."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    try:
        import ultralytics  # noqa: F401
        from ultralytics.nn.tasks import DetectionModel  # noqa: F401
    except ImportError:
        return None
    return ultralytics


def ultralytics_model(model, k):
    """Ultralytics' DetectionModel('<model>.yaml', nc=k), randomly initialised."""
    if import_ultralytics() is None:
        raise ConvertError(f"checking the keys of {model} needs ultralytics (pip install "
                           "ultralytics)")
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils import LOGGER
    level = LOGGER.level
    LOGGER.setLevel(logging.WARNING)  # not its "Overriding model.yaml nc=80 with nc=K"
    try:
        return DetectionModel(KNOWN_MODELS[model][2].split(":")[1], nc=k, verbose=False)
    finally:
        LOGGER.setLevel(level)


def is_ultralytics(model):
    return model in KNOWN_MODELS and (KNOWN_MODELS[model][2] or "").startswith("ultralytics:")


def ultralytics_checkpoint(obj, path):
    """(state_dict, metadata) of an Ultralytics checkpoint (torch.load with weights_only=False of
    its best.pt / last.pt: a dict whose "ema" or "model" is a DetectionModel), or None for any
    other object. As Ultralytics loads it: the EMA model when present, else "model"; its tensors
    as float32 (Ultralytics saves half precision); hpcnet.model from its yaml file (yolov8n.yaml),
    hpcnet.classes from its names, hpcnet.imgsz from train_args."""
    torch = import_torch()
    if not isinstance(obj, dict):
        return None
    module = obj.get("ema") or obj.get("model")
    if not isinstance(module, torch.nn.Module) or not type(module).__module__.startswith(
            "ultralytics."):
        return None
    sd = collections.OrderedDict(
        (k, v.float() if v.is_floating_point() else v) for k, v in module.state_dict().items())
    meta = {}
    yaml_file = (getattr(module, "yaml", None) or {}).get("yaml_file", "")
    name = os.path.splitext(os.path.basename(str(yaml_file)))[0]
    if name:
        if name not in KNOWN_MODELS:
            raise ConvertError(f"{path}: an Ultralytics {name} ({yaml_file}); hpcnet has "
                               + ", ".join(m for m in KNOWN_MODELS if is_ultralytics(m)))
        meta["hpcnet.model"] = name
    names = getattr(module, "names", None)
    if isinstance(names, dict):
        names = [names[i] for i in sorted(names)]
    if names:
        meta["hpcnet.classes"] = json.dumps([str(n) for n in names], separators=(",", ":"),
                                            ensure_ascii=False)
    args = obj.get("train_args") or getattr(module, "args", None)  # the latter: Model.save()'s
    imgsz = args.get("imgsz") if isinstance(args, dict) else None
    if isinstance(imgsz, int) and imgsz > 0:
        meta["hpcnet.imgsz"] = str(imgsz)
    return strip_prefixes(sd), meta


def check_keys(model, sd, path):
    """ConvertError listing up to 5 missing, unexpected or misshapen keys; returns the reference's
    key order (or None when the model is not checked)."""
    ref = reference_state_dict(model, sd, path)
    if ref is None:
        return None
    missing = [k for k in ref if k not in sd]
    unexpected = [k for k in sd if k not in ref]
    shapes = [f"{k} {tuple(sd[k].shape)} (the model: {ref[k]})"
              for k in ref if k in sd and tuple(sd[k].shape) != ref[k]]
    parts = []
    for what, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes)):
        if items:
            more = f" and {len(items) - 5} more" if len(items) > 5 else ""
            parts.append(f"{len(items)} {what}: " + ", ".join(items[:5]) + more)
    if parts:
        raise ConvertError(f"{path}: does not match {model}: " + "; ".join(parts))
    return list(ref)


def read_class_names(spec, k, path, task=None):
    """Class names from --classes: a classes.txt, a data.yaml, or a comma-separated list. A
    data.yaml's names as hpcnet reads them for the task: for segmentation "background" first
    (src/data/segmentation.cpp), for detection as they are (src/data/detection/dataset_yaml.cpp)."""
    if spec is None:
        return [f"class_{i}" for i in range(k)]
    if os.path.isdir(spec):
        for name in ("classes.txt", "data.yaml"):
            if os.path.isfile(os.path.join(spec, name)):
                spec = os.path.join(spec, name)
                break
        else:
            raise ConvertError(f"--classes {spec}: a folder without classes.txt or data.yaml")
    if os.path.isfile(spec):
        with open(spec, encoding="utf-8") as f:
            text = f.read()
        if spec.endswith((".yaml", ".yml")):
            names = yaml_names(text, spec)
            if task != "detect":
                names = ["background"] + names  # as src/data/segmentation.cpp
        else:
            names = [line.rstrip("\r ") for line in text.splitlines() if line.rstrip("\r ")]
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
    if k is not None and len(names) != k:
        raise ConvertError(f"--classes {spec}: names {len(names)} classes, the checkpoint's "
                           f"classifier has {k}")
    return names


def yaml_names(text, path):
    try:
        import yaml
        y = yaml.safe_load(text)
        n = y.get("names") if isinstance(y, dict) else None
    except ImportError:  # no PyYAML: the simple "names:" block of data.yaml, one "i: name" a line
        n, block = {}, False
        for line in text.splitlines():
            if line.startswith("names:"):
                block = True
                continue
            if block:
                if not line.startswith((" ", "\t")) or ":" not in line:
                    break
                i, name = line.split(":", 1)
                n[int(i)] = name.strip().strip("'\"")
    except Exception as e:
        raise ConvertError(f"{path}: {e}")
    if isinstance(n, list):
        return [str(v) for v in n]
    if isinstance(n, dict) and sorted(n) == list(range(len(n))):
        return [str(n[i]) for i in range(len(n))]
    raise ConvertError(f"{path}: no names list (names: 0: ..., 1: ..., numbered from 0)")


def write_atomic(path, write):
    """write(tmp) into a temporary file beside path, then renamed: nothing half-written."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConvertError(f"{path}: the folder {folder} does not exist")
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def to_safetensors(a):
    import_torch()
    from safetensors.torch import save_file
    sd, meta = load_pth(a.input, a.allow_pickle)
    meta["format"] = "pt"
    if a.model and meta.get("hpcnet.model", a.model) != a.model:
        raise ConvertError(f"{a.input}: holds weights of model '{meta['hpcnet.model']}', "
                           f"not '{a.model}'")
    model = a.model or meta.get("hpcnet.model")
    order = check_keys(model, sd, a.input) if model else None
    k = class_count(sd, model, a.input)
    if model:
        meta["hpcnet.model"] = model
        if model in KNOWN_MODELS:
            meta["hpcnet.task"] = KNOWN_MODELS[model][0]
        if (KNOWN_MODELS.get(model, (0, 0, ""))[2] or "").startswith("torchvision:resnet"):
            # torchvision's ImageNet evaluation transform (Resize + CenterCrop, ImageNet's mean
            # and std), as eval and predict apply it for hpcnet.augment = imagenet
            meta.setdefault("hpcnet.augment", "imagenet")
    if "hpcnet.classes" in meta and a.classes is None:
        pass  # an hpcnet file's own names
    elif k is not None or a.classes is not None:
        task = KNOWN_MODELS[model][0] if model in KNOWN_MODELS else meta.get("hpcnet.task")
        meta["hpcnet.classes"] = json.dumps(read_class_names(a.classes, k, a.input, task),
                                            separators=(",", ":"), ensure_ascii=False)
    if a.imgsz is not None:
        if a.imgsz < 1:
            raise ConvertError(f"--imgsz must be at least 1 (got {a.imgsz})")
        meta["hpcnet.imgsz"] = str(a.imgsz)
    out, seen = collections.OrderedDict(), set()
    for name in order or sd:
        t = sd[name].detach().cpu().contiguous()
        storage = t.untyped_storage().data_ptr()
        if storage in seen and t.numel() > 0:  # shared memory (tied weights): save_file refuses it
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    odd = sorted({str(t.dtype).replace("torch.", "") for t in out.values()} - set(HPCNET_DTYPES))
    if odd:
        print(f"convert_checkpoint: warning: tensors of dtype {', '.join(odd)}, which hpcnet "
              "cannot read", file=sys.stderr)
    write_atomic(a.output, lambda tmp: save_file(out, tmp, metadata=meta))
    shown = ", ".join(f"{key}={v if len(v) < 60 else v[:57] + '...'}"
                      for key, v in meta.items() if key != "format")
    print(f"{a.output}: {len(out)} tensors ({sum(t.numel() for t in out.values()):,} values); "
          f"metadata: {shown or 'none'}")


def ultralytics_pt(model, sd, meta, path):
    """An Ultralytics checkpoint of the weights, as its trainer's final best.pt holds them (after
    strip_optimizer): {"model": DetectionModel with the weights, its names and args, "ema": None,
    "train_args", "epoch": -1, ...}, which YOLO(file) opens. Float32 (Ultralytics saves half;
    YOLO() loads either)."""
    import ultralytics
    torch = import_torch()
    k = class_count(sd, model, path)
    m = ultralytics_model(model, k)
    try:
        m.load_state_dict(sd, strict=True)
    except RuntimeError as e:  # another ultralytics version than hpcnet's names (8.4.190)
        text = " ".join(str(e).split())
        raise ConvertError(f"{path}: does not load into ultralytics {ultralytics.__version__}'s "
                           f"{model}: {text[:300]}")
    try:
        names = json.loads(meta.get("hpcnet.classes", "null"))
    except ValueError:
        names = None
    if isinstance(names, list) and len(names) == k:
        m.names = {i: str(n) for i, n in enumerate(names)}
    imgsz = int(meta["hpcnet.imgsz"]) if meta.get("hpcnet.imgsz", "").isdigit() else 640
    train_args = {"task": "detect", "model": KNOWN_MODELS[model][2].split(":")[1], "imgsz": imgsz}
    m.args = dict(train_args)
    m.eval()
    return {"date": datetime.datetime.now().isoformat(), "version": ultralytics.__version__, "license": "AGPL-3.0",
            "docs": "converted from hpcnet by scripts/convert_checkpoint.py", "epoch": -1,
            "best_fitness": None, "model": m, "ema": None, "updates": None, "optimizer": None,
            "train_args": train_args, "train_metrics": None, "train_results": None}


def to_pth(a):
    torch = import_torch()
    sd, meta = load_safetensors(a.input, a.ema)
    model = a.model or meta.get("hpcnet.model", "")
    if a.model and meta.get("hpcnet.model") and a.model != meta["hpcnet.model"]:
        raise ConvertError(f"{a.input}: holds weights of model '{meta['hpcnet.model']}', "
                           f"not '{a.model}'")
    ultra = is_ultralytics(model) and not a.state_dict
    if ultra and import_ultralytics() is None:
        print(f"convert_checkpoint: warning: ultralytics is not importable, so {a.output} holds "
              f"the bare state_dict, which YOLO() cannot open: pip install ultralytics and run "
              f"to-pth again, or load it with ultralytics.nn.tasks.DetectionModel("
              f"'{KNOWN_MODELS[model][2].split(':')[1]}', nc=K).load_state_dict(torch.load(...))",
              file=sys.stderr)
        ultra = False
    checkable = not is_ultralytics(model) or os.path.isfile(YOLO_STATE_DICTS) or \
        import_ultralytics() is not None  # the YOLO key check needs one of them
    order = check_keys(model, sd, a.input) if model and checkable else None
    out = collections.OrderedDict()
    for name in order or sorted(sd):
        t = sd[name]
        if name.endswith("num_batches_tracked"):
            t = t.to(torch.int64)
        out[name] = t.contiguous()
    if ultra:
        ckpt = ultralytics_pt(model, out, meta, a.input)
        write_atomic(a.output, lambda tmp: torch.save(ckpt, tmp))
        print(f"{a.output}: an Ultralytics checkpoint of {model} ({len(out)} tensors, "
              f"{len(ckpt['model'].names)} classes): YOLO('{a.output}') opens it")
        return
    write_atomic(a.output, lambda tmp: torch.save(out, tmp))
    print(f"{a.output}: {len(out)} tensors" + (f" of {model}" if model else ""))


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="convert_checkpoint.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`convert_checkpoint.py COMMAND --help` for a command's options; "
               "docs/segmentation.md, 'Converting checkpoints'.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("to-safetensors", help="PyTorch .pth -> hpcnet safetensors",
                       description="PyTorch checkpoint (state_dict, or a dict with 'model', "
                       "'state_dict' or 'model_state_dict') -> safetensors with hpcnet metadata")
    s.add_argument("input", metavar="IN.pth")
    s.add_argument("output", metavar="OUT.safetensors")
    s.add_argument("--model", metavar="NAME",
                   help="hpcnet model name, written as hpcnet.model (unet_resnet18/34/50, "
                   "resnet18/34/50/101, deeplabv3_resnet50, yolov8n..x, yolo11n..x: keys checked "
                   "against smp / "
                   "torchvision / ultralytics)")
    s.add_argument("--classes", metavar="C",
                   help="class names for hpcnet.classes: classes.txt, data.yaml ('background' + "
                   "its names for segmentation, its names for detection, as hpcnet reads it), a "
                   "dataset folder holding one, or 'a,b,c' "
                   "(default: class_0 ... class_K-1, K from the classifier)")
    s.add_argument("--imgsz", type=int, metavar="N",
                   help="input size the weights were trained at, written as hpcnet.imgsz "
                   "(default: none; hpcnet then uses the model's default)")
    s.add_argument("--allow-pickle", action="store_true",
                   help="accept a whole pickled nn.Module, as every Ultralytics .pt is (torch.load "
                   "weights_only=False: runs code from the file; only for files you trust)")
    s.set_defaults(run=to_safetensors)
    t = sub.add_parser("to-pth", help="safetensors (hpcnet model or checkpoint) -> PyTorch .pth",
                       description="safetensors (hpcnet model.safetensors, checkpoint.safetensors "
                       "or any other) -> torch.save of the model's state_dict")
    t.add_argument("input", metavar="IN.safetensors")
    t.add_argument("output", metavar="OUT.pth")
    t.add_argument("--model", metavar="NAME",
                   help="check the keys against this model (default: hpcnet.model of the file)")
    t.add_argument("--ema", action="store_true",
                   help="from an hpcnet checkpoint, take the EMA-averaged weights ('ema.')")
    t.add_argument("--state-dict", action="store_true",
                   help="yolov8*: write the bare state_dict instead of an Ultralytics checkpoint")
    t.set_defaults(run=to_pth)
    a = p.parse_args(argv)
    try:
        a.run(a)
    except ConvertError as e:
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # writing the output
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
