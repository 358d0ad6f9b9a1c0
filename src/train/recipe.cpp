// The recipe table: every field of TrainConfig once, with its key (config file, checkpoint and,
// with dashes, the flag), help, role across runs and validation. Adding a field is one row here
// (and its member in TrainConfig); the CLI, config files, checkpoints and --resume follow.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "hpcnet/train.h"

namespace hpcnet::train {
namespace {

constexpr FieldRole kRecipe = FieldRole::kRecipe, kRun = FieldRole::kRun, kLog = FieldRole::kLog,
                    kSession = FieldRole::kSession;

template <class T>
std::string got(const T& v) {
  std::ostringstream os;
  os << v;
  return " (got " + os.str() + ")";
}
std::string got(const std::string& v) { return " (got '" + v + "')"; }

// A check: "" when ok, else "<flag> <what>" and the value.
template <class T>
std::string need(bool ok, const char* flag, const char* what, const T& v) {
  return ok ? std::string() : std::string(flag) + " " + what + got(v);
}

// "a, b, c".
std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The models of each task, from the model registry: " classify: lenet, ...; detect: yolov8n, ...".
std::string models_by_task() {
  std::string s;
  for (const std::string& t : task::task_names()) {
    std::vector<std::string> models;
    for (const std::string& m : nn::model_names())
      if (nn::model_info(m).task == t) models.push_back(m);
    if (!models.empty()) s += (s.empty() ? " " : "; ") + t + ": " + joined(models);
  }
  return s;
}

const std::vector<RecipeField> kFields = {
    {"model", &TrainConfig::model, "the network to train, by task:", kRecipe, kRequired,
     [](const TrainConfig& c) {
       nn::model_info(c.model);  // InputError listing the known models
       return std::string();
     },
     nullptr, nullptr, models_by_task},
    {"task", &TrainConfig::task,
     "what the model learns (default: the model's task; --task alone trains the task's default "
     "model, see --model):",
     kRecipe, kAuto,
     [](const TrainConfig& c) {
       if (!c.task.empty()) task::make_task(c.task);  // InputError listing the known tasks
       return std::string();
     },
     [](const TrainConfig& c) { return resolved_task(c); }, nullptr,
     [] { return " " + joined(task::task_names()); }},
    {"imgsz", &TrainConfig::imgsz, "input size in pixels, square (0 = the model's default)",
     kRecipe, kAuto,
     [](const TrainConfig& c) { return need(c.imgsz >= 0, "--imgsz", "must be >= 0", c.imgsz); },
     [](const TrainConfig& c) { return std::to_string(resolved_imgsz(c)); }},
    {"dataset", &TrainConfig::dataset,
     "cifar10 or imagefolder (classify); segmentation: images/ + masks/ (a folder, archive or "
     "its data.yaml); voc: PASCAL VOC (segment); detect: an Ultralytics data.yaml or COCO "
     "instances JSON; webdataset: tar shards (any task; also recognised from --data, see "
     "docs/data.md)",
     kRecipe, kRequired,
     [](const TrainConfig& c) {
       const std::vector<std::string>& known = data::dataset_formats();
       return std::find(known.begin(), known.end(), c.dataset) != known.end()
                  ? std::string()
                  : "unknown dataset '" + c.dataset + "' (known: " + joined(known) + ")";
     }},
    {"data", &TrainConfig::data,
     "dataset folder, archive or file: classify: cifar-10-batches-bin/, cifar-10-binary.tar.gz, "
     "or an image folder (train/<class>/*.jpg|png), unpacked or .tar/.tar.gz; segment: a folder "
     "or archive of images/ + masks/ (or its data.yaml), or PASCAL VOC; detect: a data.yaml, a "
     "COCO instances JSON, or a folder or archive holding one; WebDataset shards: "
     "'DIR/train-{000000..000009}.tar', a list file of .tar paths or a folder of .tar files",
     kRun, 0,
     [](const TrainConfig& c) {
       return c.data.empty() ? "--data is required: the dataset folder or archive" : "";
     }},
    {"out", &TrainConfig::out, "run directory for model.safetensors, checkpoint, metrics.jsonl",
     kSession, 0,
     [](const TrainConfig& c) {
       return c.out.empty() ? "--out is required: the run directory to write" : "";
     }},
    {"resume", &TrainConfig::resume, "continue the run in this directory from its last checkpoint",
     kSession},
    {"weights", &TrainConfig::weights,
     "start from these weights (a model file, checkpoint or PyTorch-saved safetensors of the same "
     "model and class count; fine-tuning)",
     kRecipe, 0},
    {"encoder_weights", &TrainConfig::encoder_weights,
     "torchvision's ImageNet ResNet weights for the encoder of unet_resnet18/34/50 or the backbone "
     "of deeplabv3_resnet50 (its resnet18/34/50 state_dict as safetensors, e.g. from "
     "scripts/convert_checkpoint.py; fc left out): smp's encoder_weights=\"imagenet\"; the "
     "inputs then take ImageNet's mean and std",
     kRecipe, 0,
     [](const TrainConfig& c) {
       if (c.encoder_weights.empty()) return std::string();
       if (!c.weights.empty())
         return "--encoder-weights " + c.encoder_weights + " and --weights " + c.weights +
                ": --weights sets every tensor, the encoder's too; give one";
       if (nn::model_info(c.model).encoder.empty()) {
         std::string with;
         for (const std::string& m : nn::model_names())
           if (!nn::model_info(m).encoder.empty()) with += (with.empty() ? "" : ", ") + m;
         return "--encoder-weights: model " + c.model +
                " has no ImageNet ResNet encoder (models with one: " + with + ")";
       }
       return std::string();
     }},
    {"freeze", &TrainConfig::freeze,
     "parameter-name prefixes to keep fixed, comma-separated (e.g. encoder, backbone, "
     "conv1,bn1,layer1): the trunk of a fine-tuning run",
     kRecipe, 0},
    {"epochs", &TrainConfig::epochs, "epochs to train (in total, counting resumed ones)", kRun, 0,
     [](const TrainConfig& c) {
       return need(c.epochs >= 1, "--epochs", "must be at least 1", c.epochs);
     }},
    {"batch_size", &TrainConfig::batch_size, "mini-batch size", kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(c.batch_size >= 1, "--batch-size", "must be at least 1", c.batch_size);
     }},
    {"lr", &TrainConfig::lr, "learning rate (the peak, with a schedule)", kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(std::isfinite(c.lr) && c.lr >= 0, "--lr", "must be a non-negative number", c.lr);
     }},
    {"momentum", &TrainConfig::momentum, "SGD momentum", kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(c.momentum >= 0 && c.momentum < 1 + 1e-12, "--momentum", "must be in [0, 1]",
                   c.momentum);
     }},
    {"dampening", &TrainConfig::dampening, "SGD dampening", kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(c.dampening >= 0 && c.dampening <= 1, "--dampening", "must be in [0, 1]",
                   c.dampening);
     }},
    {"weight_decay", &TrainConfig::weight_decay, "weight decay (L2 for sgd, decoupled for adamw)",
     kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(c.weight_decay >= 0, "--weight-decay", "must be >= 0", c.weight_decay);
     }},
    {"nesterov", &TrainConfig::nesterov, "Nesterov momentum", kRecipe, kRequired},
    {"lr_schedule", &TrainConfig::lr_schedule,
     "constant, multistep (--milestones, --lr-gamma), cosine (--lr-min), onecycle (peak --lr) or "
     "linear (Ultralytics': to --lrf x --lr at the end)",
     kRecipe, kRequired},
    {"milestones", &TrainConfig::milestones,
     "multistep: epochs where the rate is multiplied by --lr-gamma", kRecipe, kRequired},
    {"lr_gamma", &TrainConfig::lr_gamma, "multistep factor", kRecipe, kRequired},
    {"lr_min", &TrainConfig::lr_min, "cosine: final learning rate", kRecipe, kRequired},
    {"warmup_epochs", &TrainConfig::warmup_epochs,
     "warm-up epochs: linear from lr/10 (per epoch); with --lr-schedule linear, Ultralytics' "
     "per-step warm-up from 0 (biases from --warmup-bias-lr, SGD momentum from "
     "--warmup-momentum)",
     kRecipe, kRequired},
    {"lrf", &TrainConfig::lrf,
     "linear schedule: the last epochs' rate as a fraction of --lr (Ultralytics' lrf)", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.lrf > 0 && c.lrf <= 1, "--lrf", "must be in (0, 1]", c.lrf);
     }},
    {"warmup_bias_lr", &TrainConfig::warmup_bias_lr,
     "linear schedule: the biases' starting rate in the warm-up (0 with --optimizer auto)", kRecipe,
     0,
     [](const TrainConfig& c) {
       return need(c.warmup_bias_lr >= 0, "--warmup-bias-lr", "must be >= 0", c.warmup_bias_lr);
     }},
    {"warmup_momentum", &TrainConfig::warmup_momentum,
     "linear schedule: SGD's starting momentum in the warm-up", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.warmup_momentum >= 0 && c.warmup_momentum < 1, "--warmup-momentum",
                   "must be in [0, 1)", c.warmup_momentum);
     }},
    {"label_smoothing", &TrainConfig::label_smoothing, "classify: cross-entropy label smoothing",
     kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(c.label_smoothing >= 0 && c.label_smoothing <= 1, "--label-smoothing",
                   "must be in [0, 1]", c.label_smoothing);
     }},
    {"optimizer", &TrainConfig::optimizer,
     "sgd, adamw, or auto (Ultralytics: AdamW at lr 0.002 x 5 / (4 + classes) for runs of at most "
     "10,000 steps, else SGD lr 0.01 momentum 0.9)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.optimizer == "sgd" || c.optimizer == "adamw" || c.optimizer == "auto",
                   "--optimizer", "must be sgd, adamw or auto", c.optimizer);
     }},
    {"param_groups", &TrainConfig::param_groups,
     "weight decay on convolution and linear weights only, not on biases or BatchNorm weights "
     "(Ultralytics' three parameter groups; the biases warm up from --warmup-bias-lr)",
     kRecipe, 0},
    {"nbs", &TrainConfig::nbs,
     "nominal batch size: gradients are summed over accumulate = max(round(nbs / batch), 1) "
     "batches (global batch; ramped from 1 during the linear warm-up) before each optimizer "
     "step, and the weight decay is x batch x accumulate / nbs (Ultralytics' 64; 0 = off)",
     kRecipe, 0,
     [](const TrainConfig& c) { return need(c.nbs >= 0, "--nbs", "must be >= 0", c.nbs); }},
    {"beta1", &TrainConfig::beta1, "adamw: first-moment decay", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.beta1 >= 0 && c.beta1 < 1, "--beta1", "must be in [0, 1)", c.beta1);
     }},
    {"beta2", &TrainConfig::beta2, "adamw: second-moment decay", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.beta2 >= 0 && c.beta2 < 1, "--beta2", "must be in [0, 1)", c.beta2);
     }},
    {"adam_eps", &TrainConfig::adam_eps, "adamw: denominator epsilon", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.adam_eps >= 0, "--adam-eps", "must be >= 0", c.adam_eps);
     }},
    {"clip_grad_norm", &TrainConfig::clip_grad_norm,
     "clip the gradients' total 2-norm to this before each step (0 = off)", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.clip_grad_norm >= 0, "--clip-grad-norm", "must be >= 0 (0 = off)",
                   c.clip_grad_norm);
     }},
    {"ema_decay", &TrainConfig::ema_decay,
     "keep an exponential moving average of the weights (e.g. 0.999); evaluation and "
     "model.safetensors use it (0 = off)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.ema_decay == 0 || (c.ema_decay > 0 && c.ema_decay < 1), "--ema-decay",
                   "must be in (0, 1), e.g. 0.999 (0 = off)", c.ema_decay);
     }},
    {"ema_tau", &TrainConfig::ema_tau,
     "EMA ramp: the decay is ema_decay x (1 - exp(-updates / tau)) (Ultralytics' ModelEMA: 2000; "
     "0 = a constant decay)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.ema_tau >= 0, "--ema-tau", "must be >= 0", c.ema_tau);
     }},
    {"degrees", &TrainConfig::degrees, "detect, with --augment: random rotation range in degrees",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.degrees >= 0 && c.degrees <= 180, "--degrees", "must be in [0, 180]",
                   c.degrees);
     }},
    {"translate", &TrainConfig::translate,
     "detect, with --augment: random translation, fraction of imgsz", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.translate >= 0 && c.translate <= 0.5, "--translate", "must be in [0, 0.5]",
                   c.translate);
     }},
    {"scale", &TrainConfig::scale, "detect, with --augment: random scale gain range 1 +- scale",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.scale >= 0 && c.scale < 1, "--scale", "must be in [0, 1)", c.scale);
     }},
    {"shear", &TrainConfig::shear, "detect, with --augment: random shear range in degrees", kRecipe,
     0,
     [](const TrainConfig& c) {
       return need(c.shear >= 0 && c.shear < 90, "--shear", "must be in [0, 90)", c.shear);
     }},
    {"hsv_h", &TrainConfig::hsv_h, "detect, with --augment: hue gain (fraction of the hue circle)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.hsv_h >= 0 && c.hsv_h <= 1, "--hsv-h", "must be in [0, 1]", c.hsv_h);
     }},
    {"hsv_s", &TrainConfig::hsv_s, "detect, with --augment: saturation gain", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.hsv_s >= 0 && c.hsv_s <= 1, "--hsv-s", "must be in [0, 1]", c.hsv_s);
     }},
    {"hsv_v", &TrainConfig::hsv_v, "detect, with --augment: value (brightness) gain", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.hsv_v >= 0 && c.hsv_v <= 1, "--hsv-v", "must be in [0, 1]", c.hsv_v);
     }},
    {"fliplr", &TrainConfig::fliplr, "detect, with --augment: probability of a left-right flip",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.fliplr >= 0 && c.fliplr <= 1, "--fliplr", "must be in [0, 1]", c.fliplr);
     }},
    {"mosaic", &TrainConfig::mosaic,
     "detect, with --augment: probability of a 4-image mosaic (Ultralytics' Mosaic)", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.mosaic >= 0 && c.mosaic <= 1, "--mosaic", "must be in [0, 1]", c.mosaic);
     }},
    {"close_mosaic", &TrainConfig::close_mosaic,
     "detect: no mosaic in the last N epochs (0 = mosaic to the end)", kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.close_mosaic >= 0, "--close-mosaic", "must be >= 0", c.close_mosaic);
     }},
    {"cutout", &TrainConfig::cutout,
     "classify: Cutout, zero a square of this many pixels (0 = off; 16 for CIFAR-10)", kRecipe, 0,
     [](const TrainConfig& c) {
       const int64_t s = resolved_imgsz(c);
       return need(
           c.cutout >= 0 && c.cutout <= s, "--cutout",
           ("must be in [0, " + std::to_string(s) + "] pixels, the input size (0 = off)").c_str(),
           c.cutout);
     }},
    {"loss", &TrainConfig::loss,
     "segment: ce (per-pixel cross-entropy), dice (smp's multiclass DiceLoss) or ce+dice (their "
     "sum)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.loss == "ce" || c.loss == "dice" || c.loss == "ce+dice", "--loss",
                   "must be ce, dice or ce+dice", c.loss);
     }},
    {"class_weights", &TrainConfig::class_weights,
     "segment: comma-separated loss weight per class, background first (empty = all 1)", kRecipe, 0,
     [](const TrainConfig& c) {
       try {
         parse_class_weights(c.class_weights);
       } catch (const InputError& e) {
         return std::string(e.what());
       }
       return std::string();
     }},
    {"aux_loss", &TrainConfig::aux_loss,
     "deeplabv3: train an auxiliary FCN head on layer3, its loss weighted 0.5 (torchvision's "
     "--aux-loss)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return c.aux_loss && c.model.rfind("deeplabv3", 0) != 0
                  ? "--aux-loss: only the deeplabv3 models have an auxiliary head (model " +
                        c.model + ")"
                  : std::string();
     }},
    {"zero_init_residual", &TrainConfig::zero_init_residual,
     "resnet18/34/50/101: start every residual block's last BatchNorm at weight 0 (torchvision's "
     "zero_init_residual)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       for (const char* m : {"resnet18", "resnet34", "resnet50", "resnet101"})
         if (c.model == m) return std::string();
       return c.zero_init_residual
                  ? "--zero-init-residual: only torchvision's ResNets (resnet18, resnet34, "
                    "resnet50, resnet101) have it (model " +
                        c.model + ")"
                  : std::string();
     }},
    {"scale_min", &TrainConfig::scale_min,
     "segment, with --augment: random scale range low end (RandomScale; 1 and 1 = off; "
     "torchvision's reference: 0.5 to 2.0)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.scale_min > 0 && c.scale_min <= c.scale_max && c.scale_max <= 8, "--scale-min",
                   "must be in (0, --scale-max] and --scale-max at most 8", c.scale_min);
     }},
    {"scale_max", &TrainConfig::scale_max, "segment, with --augment: random scale range high end",
     kRecipe, 0},
    {"precision", &TrainConfig::precision,
     "fp32, or bf16: bfloat16 convolutions with float32 accumulation and master weights", kRecipe,
     0,
     [](const TrainConfig& c) {
       return need(c.precision == "fp32" || c.precision == "bf16", "--precision",
                   "must be fp32 or bf16", c.precision);
     }},
    {"conv_algorithm", &TrainConfig::conv_algorithm,
     "float32 CPU convolutions: auto (oneDNN picks Winograd or direct per shape), direct (as "
     "PyTorch), or winograd (F(4x4,3x3) for every 3x3 stride-1 convolution)",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.conv_algorithm == "auto" || c.conv_algorithm == "direct" ||
                       c.conv_algorithm == "winograd",
                   "--conv-algorithm", "must be auto, direct or winograd", c.conv_algorithm);
     },
     nullptr, "\"direct\""},  // checkpoints from before the key ran direct convolutions
    {"workers", &TrainConfig::workers, "data-loading threads (0 = in the training thread)", kLog, 0,
     [](const TrainConfig& c) {
       return need(c.workers >= 0 && c.workers <= 64, "--workers", "must be in [0, 64]", c.workers);
     }},
    {"cache", &TrainConfig::cache,
     "decoded images: none (decoded as read), ram, disk (decoded once into --cache-dir and "
     "memory-mapped) or auto (ram when they need under a quarter of the available memory)",
     kSession, 0,
     [](const TrainConfig& c) {
       return need(c.cache == "auto" || c.cache == "none" || c.cache == "ram" || c.cache == "disk",
                   "--cache", "must be none, ram, disk or auto", c.cache);
     }},
    {"cache_dir", &TrainConfig::cache_dir,
     "folder of --cache disk's files (default $HPCNET_CACHE_DIR, else ~/.cache/hpcnet)", kSession},
    {"shuffle_buffer", &TrainConfig::shuffle_buffer,
     "WebDataset shards: read each shard in turn (shards shuffled and dealt to the ranks every "
     "epoch) through a shuffle buffer of N samples, as webdataset's .shuffle(N); 0: a global "
     "permutation, read by offset",
     kRecipe, 0,
     [](const TrainConfig& c) {
       return need(c.shuffle_buffer >= 0, "--shuffle-buffer", "must be >= 0", c.shuffle_buffer);
     }},
    {"seed", &TrainConfig::seed, "seed for initialisation, data order and augmentation", kRecipe,
     kRequired},
    {"log_every", &TrainConfig::log_every, "mini-batches between loss lines", kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(c.log_every >= 1, "--log-every", "must be at least 1", c.log_every);
     }},
    {"val_split", &TrainConfig::val_split,
     "hold out N training images (fixed shuffle) as split 'val'", kRecipe, kRequired,
     [](const TrainConfig& c) {
       return need(c.val_split >= 0, "--val-split", "must be >= 0", c.val_split);
     }},
    {"augment", &TrainConfig::augment,
     "augmentation: alone or 'true', the task's own (classify: cifar); cifar: RandomCrop(imgsz, "
     "padding=4) + flip; imagenet: RandomResizedCrop(imgsz, scale=(0.08, 1)) + flip with "
     "ImageNet's mean/std, evaluated as Resize(imgsz*256/224) + CenterCrop(imgsz); false: none",
     kRecipe, kRequired,
     [](const TrainConfig& c) {
       const std::string& a = c.augment;
       task_augment(a);  // InputError for an unknown value
       if (a == "true" || a == "false") return std::string();
       const std::vector<std::string> own = task::make_task(resolved_task(c))->augment_policies();
       if (std::find(own.begin(), own.end(), a) != own.end()) return std::string();
       std::vector<std::string> owners;  // the tasks that know the policy
       for (const std::string& t : task::task_names()) {
         const std::vector<std::string> p = task::make_task(t)->augment_policies();
         if (std::find(p.begin(), p.end(), a) != p.end()) owners.push_back(t);
       }
       return "--augment " + a + " is for " + joined(owners) + "; use --augment (true) for " +
              resolved_task(c);
     }},
    {"download", &TrainConfig::download, "fetch CIFAR-10 into --data when it is missing", kSession},
    {"download_url", &TrainConfig::download_url, "where --download fetches from", kSession},
    {"threads", &TrainConfig::threads, "CPU threads for the kernels (0 = all cores)", kRun, 0,
     [](const TrainConfig& c) {
       return need(c.threads >= 0, "--threads", "must be >= 0 (0 = all cores)", c.threads);
     }},
    {"device", &TrainConfig::device, "auto, cpu or cuda", kSession},
    {"tf32", &TrainConfig::tf32,
     "CUDA: float32 convolutions and matrix products on TF32 tensor cores (PyTorch's cuDNN "
     "default; --tf32=false for full float32)",
     kRun},
    {"cuda_graph", &TrainConfig::cuda_graph,
     "CUDA: capture the training step once as a CUDA graph and replay it (fixed batch shape, SGD, "
     "one rank; other steps run eagerly)",
     kRun},
    {"deterministic", &TrainConfig::deterministic,
     "CUDA: deterministic cuDNN backward convolutions only (bit-reproducible runs; slower)", kRun},
    {"max_image_pixels", &TrainConfig::max_image_pixels,
     "refuse an image or mask whose header claims more pixels (width x height) than this, before "
     "decoding it (a guard against decompression bombs)",
     kSession, 0,
     [](const TrainConfig& c) {
       return need(c.max_image_pixels >= 1, "--max-image-pixels", "must be at least 1",
                   c.max_image_pixels);
     }},
    {"steps", &TrainConfig::max_steps, "stop after this many steps (0 = run all epochs)", kSession,
     0,
     [](const TrainConfig& c) {
       return need(c.max_steps >= 0, "--steps", "must be >= 0", c.max_steps);
     }},
    {"save_every", &TrainConfig::save_every,
     "also write the checkpoint every N steps, inside epochs (0 = at epoch ends only); --resume "
     "continues from the step it holds",
     kRun, 0,
     [](const TrainConfig& c) {
       return need(c.save_every >= 0, "--save-every", "must be >= 0 (0 = epoch ends only)",
                   c.save_every);
     }},
    {"exist_ok", &TrainConfig::exist_ok,
     "train into a run directory that is not empty, replacing its run (without it, a non-empty "
     "--out needs --resume)",
     kSession},
    {"nan_policy", &TrainConfig::nan_policy,
     "a non-finite loss on any rank: stop (the run ends, naming the step and the last "
     "checkpoint) or skip (that batch is dropped on every rank and counted; 10 in a row stop)",
     kSession, 0,
     [](const TrainConfig& c) {
       return need(c.nan_policy == "stop" || c.nan_policy == "skip", "--nan-policy",
                   "must be stop or skip", c.nan_policy);
     }},
    {"dist_timeout", &TrainConfig::dist_timeout,
     "with several ranks (mpirun/srun): seconds a rank may wait for the others in a collective "
     "before the job is aborted, naming the missing ranks (0 = forever)",
     kSession, 0,
     [](const TrainConfig& c) {
       return need(c.dist_timeout >= 0, "--dist-timeout", "must be >= 0 (0 = wait forever)",
                   c.dist_timeout);
     }},
    {"bucket_kb", &TrainConfig::bucket_kb,
     "with several ranks: KiB of gradients per all-reduce bucket, started during backward (0 = "
     "one all-reduce after backward)",
     kSession, 0,
     [](const TrainConfig& c) {
       return need(c.bucket_kb >= 0, "--bucket-kb", "must be >= 0 (0 = one all-reduce per step)",
                   c.bucket_kb);
     }},
    {"sync_bn", &TrainConfig::sync_bn,
     "with several ranks: BatchNorm layers normalise with the statistics of every rank's batch "
     "(torch.nn.SyncBatchNorm, torchvision's --sync-bn), so that N ranks at batch B train as one "
     "process at batch N x B; without it each rank's own batch",
     kRecipe},
    {"dist_backend", &TrainConfig::dist_backend,
     "with several ranks on CUDA: how gradients cross ranks: auto (NCCL where every rank has a GPU "
     "of its own and libnccl.so.2 loads, else host copies through MPI), nccl or mpi (PyTorch's "
     "init_process_group backend)",
     kSession, 0,
     [](const TrainConfig& c) {
       return need(c.dist_backend == "auto" || c.dist_backend == "nccl" || c.dist_backend == "mpi",
                   "--dist-backend", "must be auto, nccl or mpi", c.dist_backend);
     }},
    {"fail_at_step", &TrainConfig::fail_at, "testing: RANK:STEP[:kill|exit|hang|term|int|nan]",
     kSession, kHidden},
};

bool given(const TrainConfig& c, const RecipeField& f) {
  return !c.given || c.given->count(f.key) > 0;
}

}  // namespace

std::vector<double> parse_class_weights(const std::string& text) {
  std::vector<double> w;
  if (text.empty()) return w;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    HPCNET_REQUIRE(!item.empty() && end && *end == '\0' && std::isfinite(v) && v >= 0,
                   "--class-weights: '" + item +
                       "' is not a non-negative number (give e.g. "
                       "0.5,1,1,2: one weight per class, background first)");
    w.push_back(v);
  }
  double sum = 0;
  for (double v : w) sum += v;
  HPCNET_REQUIRE(sum > 0, "--class-weights: the weights must not all be 0");
  return w;
}

std::string RecipeField::flag() const {
  std::string s = std::string("--") + key;
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

const std::vector<RecipeField>& recipe_fields() { return kFields; }

const RecipeField& recipe_field(const std::string& key) {
  for (const RecipeField& f : kFields)
    if (key == f.key) return f;
  throw std::logic_error("no recipe field '" + key + "'");
}

std::string resolved_task(const TrainConfig& c) {
  return c.task.empty() ? nn::model_info(c.model).task : c.task;
}

int64_t resolved_imgsz(const TrainConfig& c) {
  return c.imgsz > 0 ? c.imgsz : nn::model_info(c.model).imgsz;
}

std::string task_augment(const std::string& augment) {
  // true, false and the policies the tasks name (Task::augment_policies()), each once.
  std::vector<std::string> known = {"true", "false"};
  for (const std::string& t : task::task_names())
    for (const std::string& p : task::make_task(t)->augment_policies())
      if (std::find(known.begin(), known.end(), p) == known.end()) known.push_back(p);
  if (std::find(known.begin(), known.end(), augment) == known.end()) {
    std::string list;
    for (size_t i = 0; i < known.size(); ++i)
      list += (i == 0 ? "" : i + 1 == known.size() ? " or " : ", ") + known[i];
    throw InputError("--augment must be " + list + " (got '" + augment + "')");
  }
  return augment == "false" ? "" : augment == "true" ? "default" : augment;
}

task::TaskOptions task_options(const TrainConfig& c) {
  task::TaskOptions o;
  o.imgsz = resolved_imgsz(c);
  o.augment = task_augment(c.augment);
  o.classify.cutout = c.cutout;
  o.classify.label_smoothing = c.label_smoothing;
  o.segment.loss = c.loss;
  o.segment.class_weights = parse_class_weights(c.class_weights);
  o.segment.scale_min = c.scale_min;
  o.segment.scale_max = c.scale_max;
  o.segment.imagenet_normalize = !c.encoder_weights.empty();
  task::DetectOptions& d = o.detect;
  d.degrees = c.degrees;
  d.translate = c.translate;
  d.scale = c.scale;
  d.shear = c.shear;
  d.hsv_h = c.hsv_h;
  d.hsv_s = c.hsv_s;
  d.hsv_v = c.hsv_v;
  d.fliplr = c.fliplr;
  d.mosaic = c.mosaic;
  d.close_mosaic = c.close_mosaic;
  return o;
}

namespace {

// Sets the task's defaults (Task::train_defaults()) of c that c.given leaves unset; with
// model_only, its model alone. A name that is no task's is left to validate().
void set_task_defaults(TrainConfig& c, const std::string& task, bool model_only) {
  const std::vector<std::string> names = task::task_names();
  if (std::find(names.begin(), names.end(), task) == names.end()) return;
  for (const auto& [key, value] : task::make_task(task)->train_defaults()) {
    if (c.given->count(key) || (model_only && key != "model")) continue;
    std::visit([&, &v = value](auto m) { c.*m = v.get<std::decay_t<decltype(c.*m)>>(); },
               recipe_field(key).ref);
  }
}

// A fresh run of the task from the CLI with nothing else given: the defaults it trains with.
TrainConfig fresh_run(const std::string& task) {
  TrainConfig c;
  c.task = task;
  c.given = std::set<std::string>{"task"};
  apply_task_defaults(c);
  return c;
}

// A field's value as --help shows it ("0.001", "off", "cifar10"; kAuto fields resolved).
std::string value_text(const RecipeField& f, const TrainConfig& c) {
  if (f.resolved) return f.resolved(c);
  return std::visit(
      [&](auto m) -> std::string {
        using T = std::decay_t<decltype(c.*m)>;
        const T& v = c.*m;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "on" : "off";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return v.empty() ? "\"\"" : v;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::string s;
          for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
          return s.empty() ? "none" : s;
        } else if constexpr (std::is_floating_point_v<T>) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%g", v);
          return buf;
        } else {
          return std::to_string(v);
        }
      },
      f.ref);
}

}  // namespace

void apply_task_defaults(TrainConfig& c) {
  if (!c.given) return;
  // --task alone: the task's model (then the defaults of the model's task, the same task).
  if (!c.task.empty()) set_task_defaults(c, c.task, true);
  set_task_defaults(c, resolved_task(c), false);
}

std::string task_default(const std::string& task, const std::string& key) {
  return value_text(recipe_field(key), fresh_run(task));
}

std::string defaults_by_task(const RecipeField& f) {
  if (std::string(f.key) == "task") return "";              // each task's is itself
  std::vector<std::pair<std::string, std::string>> groups;  // value, its tasks
  for (const std::string& t : task::task_names()) {
    const std::string v = value_text(f, fresh_run(t));
    auto g =
        std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == v; });
    if (g == groups.end())
      groups.emplace_back(v, t);
    else
      g->second += ", " + t;
  }
  if (groups.size() < 2) return "";
  std::string s;
  for (const auto& [v, tasks] : groups) s += (s.empty() ? "" : ", ") + v + " (" + tasks + ")";
  return s;
}

std::string recipe_help(const RecipeField& f) {
  std::string h = f.help;
  if (f.lists) h += f.lists();
  if (const std::string d = defaults_by_task(f); !d.empty()) h += " [default: " + d + "]";
  return h;
}

ResolvedOptimizer resolve_optimizer(const TrainConfig& c, int64_t train_images,
                                    size_t num_classes, int world_size) {
  ResolvedOptimizer r;
  const int64_t batch = c.batch_size * std::max(world_size, 1);  // Ultralytics' batch is global
  r.weight_decay = c.weight_decay;
  if (c.nbs > 0) {
    const int64_t accumulate = std::max<int64_t>(
        static_cast<int64_t>(std::nearbyint(static_cast<double>(c.nbs) / batch)), 1);
    r.weight_decay = c.weight_decay * static_cast<double>(batch * accumulate) / c.nbs;
  }
  if (c.optimizer == "adamw") {
    r.name = "AdamW", r.lr = c.lr, r.momentum = c.beta1;
  } else if (c.optimizer == "sgd") {
    r.name = "SGD", r.lr = c.lr, r.momentum = c.momentum, r.nesterov = c.nesterov;
  } else {
    // Ultralytics' build_optimizer("auto"): iterations = ceil(N / max(batch, nbs)) x epochs.
    const int64_t per = std::max<int64_t>(batch, c.nbs);
    const int64_t iterations = (train_images + per - 1) / per * c.epochs;
    if (iterations > 10000) {
      r.name = "SGD", r.lr = 0.01, r.momentum = 0.9, r.nesterov = true;
      r.note = "(a run of over 10,000 steps: Ultralytics 8.4.190 would choose MuSGD, which hpcnet "
               "does not have; SGD as Ultralytics 8.4.0 chose)";
    } else {
      r.name = "AdamW";
      r.lr = std::nearbyint(0.002 * 5 / (4.0 + static_cast<double>(num_classes)) * 1e6) / 1e6;
      r.momentum = 0.9;
    }
  }
  return r;
}

void validate(const TrainConfig& c) {
  for (const RecipeField& f : kFields)
    if (f.check) {
      std::string msg = f.check(c);
      if (!msg.empty()) throw InputError(msg);
    }
  const nn::ModelInfo& info = nn::model_info(c.model);
  const std::string t = resolved_task(c);
  HPCNET_REQUIRE(t == info.task, "--task " + t + ": model " + c.model + " is a " + info.task +
                                     " model (use --task " + info.task + " or another model)");
  HPCNET_REQUIRE(!info.fixed_size || resolved_imgsz(c) == info.imgsz,
                 "--imgsz " + std::to_string(c.imgsz) + ": " + c.model + " takes " +
                     std::to_string(info.imgsz) + "x" + std::to_string(info.imgsz) +
                     " images only");
  HPCNET_REQUIRE(resolved_imgsz(c) % info.size_multiple == 0,
                 "--imgsz " + std::to_string(resolved_imgsz(c)) + ": " + c.model +
                     " takes sizes that are multiples of " + std::to_string(info.size_multiple));
  make_schedule(c);  // throws for a bad schedule
}

optim::LrSchedule make_schedule(const TrainConfig& c) {
  optim::LrSchedule s;
  s.kind = c.lr_schedule;
  s.lr = c.lr;
  s.milestones = c.milestones;
  s.gamma = c.lr_gamma;
  s.eta_min = c.lr_min;
  s.warmup_epochs = c.warmup_epochs;
  s.lrf = c.lrf;
  s.warmup_bias_lr = c.warmup_bias_lr;
  s.warmup_momentum = c.warmup_momentum;
  s.validate();
  return s;
}

nlohmann::json recipe_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const RecipeField& f : kFields)
    if (f.role != FieldRole::kSession) std::visit([&](auto m) { j[f.key] = c.*m; }, f.ref);
  return j;
}

void merge_resumed_recipe(TrainConfig& c, const nlohmann::json& saved, const std::string& where) {
  HPCNET_REQUIRE(saved.is_object(), where + ": corrupt checkpoint: config is not a JSON object");
  // Names both values: "--model differs from the recipe in CKPT (given resnet20, the run's lenet)".
  auto refuse = [&](const RecipeField& f, const nlohmann::json& given_v,
                    const nlohmann::json& saved_v) {
    auto text = [](const nlohmann::json& j) {
      return j.is_string() ? j.get<std::string>() : j.dump();
    };
    throw InputError(f.flag() + " differs from the recipe in " + where + " (given " +
                     text(given_v) + ", the run's " + text(saved_v) +
                     "); --resume continues the same run (start a new --out to change it)");
  };
  // kAuto fields saved with their auto value and given explicitly: compared once the rest of the
  // recipe (the model) is merged, by what each resolves to.
  std::vector<std::pair<const RecipeField*, TrainConfig>> deferred;
  for (const RecipeField& f : kFields) {
    if (f.role != FieldRole::kRecipe && f.role != FieldRole::kRun) continue;
    std::visit(
        [&](auto m) {
          using T = std::decay_t<decltype(c.*m)>;
          // Keys added after the first checkpoint format may be absent: those runs used the
          // default (or the field's `absent` value, where the default changed since), which is
          // then the saved value (a given flag must equal it).
          if (!saved.contains(f.key) && (f.flags & kRequired))
            throw InputError(where + ": corrupt checkpoint: config lacks " + f.key);
          T value = TrainConfig{}.*m;
          if (!saved.contains(f.key) && f.absent) value = nlohmann::json::parse(f.absent).get<T>();
          if (saved.contains(f.key)) {
            try {
              const nlohmann::json& v = saved.at(f.key);
              if constexpr (std::is_same_v<T, std::string>) {
                // A field that was a bool before it took words (--augment) reads "true"/"false".
                value = v.is_boolean() ? std::string(v.get<bool>() ? "true" : "false")
                                       : v.get<T>();
              } else {
                value = v.get<T>();
              }
            } catch (const nlohmann::json::exception&) {
              throw InputError(where + ": corrupt checkpoint: config " + f.key +
                               " has the wrong type");
            }
          }
          const bool auto_field = (f.flags & kAuto) != 0;
          const bool given_auto = auto_field && c.*m == TrainConfig{}.*m;
          const bool saved_auto = auto_field && value == TrainConfig{}.*m;
          if (f.role == FieldRole::kRecipe) {
            if (given(c, f) && !given_auto && value != c.*m) {
              if (!saved_auto) refuse(f, c.*m, value);
              TrainConfig explicit_value;  // only the given value matters here
              explicit_value.*m = c.*m;
              deferred.emplace_back(&f, explicit_value);
            }
            c.*m = value;
          } else if (!given(c, f)) {
            c.*m = value;  // kRun: the run's value unless given (bit-exact resume needs threads)
          }
        },
        f.ref);
  }
  for (auto& [f, explicit_value] : deferred) {
    TrainConfig with_given = c;  // the merged recipe with the explicit value put back
    // (init-capture: clang before 16 cannot capture a structured binding)
    std::visit([&, &given_value = explicit_value](auto m) { with_given.*m = given_value.*m; },
               f->ref);
    if (!f->resolved || f->resolved(with_given) != f->resolved(c))
      refuse(*f, f->resolved ? f->resolved(with_given) : std::string(),
             f->resolved ? f->resolved(c) : std::string());
    c = with_given;
  }
  if (c.out.empty()) c.out = c.resume;
}

}  // namespace hpcnet::train
