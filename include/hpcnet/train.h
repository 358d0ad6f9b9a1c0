// The training loop the `hpcnet` command drives, its recipe and its run files. A run directory
// holds model.safetensors (PyTorch parameter names; loads with safetensors.torch.load_file),
// best.safetensors (the epoch of the best validation metric), checkpoint.safetensors (model,
// optimizer and EMA state, epoch and data-order state; written atomically after every epoch, every
// --save-every steps and on SIGINT/SIGTERM) and metrics.jsonl, metrics.csv and TensorBoard events
// (one record per log line and per epoch). What depends on the kind of target (loss, metric,
// transforms, predictions, a fresh run's defaults) is the task's (hpcnet/task.h).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/task.h"

namespace hpcnet::train {

// A run's settings. Every field but `progress`, `quiet` (how this invocation shows itself) and
// `given` has one row in the recipe table (recipe_fields(), src/train/recipe.cpp), which yields
// its flag, its config-file and checkpoint key, its help and its validation. These defaults are
// an API caller's and the classify tutorial's; a fresh CLI run of another task starts from that
// task's (task::Task::train_defaults(), applied by apply_task_defaults). The fields a task reads
// take their defaults from its options (hpcnet/task.h).
struct TrainConfig {
  static inline const task::ClassifyOptions kClassify{};
  static inline const task::SegmentOptions kSegment{};
  static inline const task::DetectOptions kDetect{};

  std::string model = "lenet";
  std::string task;   // "" = the model's task (nn::model_info(model).task)
  int64_t imgsz = 0;  // square input size; 0 = the model's default (32 for the CIFAR models)
  std::string dataset = "cifar10";
  std::string data;    // dataset path (folder or archive)
  std::string out;     // run directory
  std::string resume;  // run directory to continue from ("" = fresh run)
  std::string weights;  // a fresh run starts from these weights ("" = initialised)
  // A fresh run's encoder (unet_resnet*) or backbone (deeplabv3_resnet50) from torchvision's
  // ImageNet ResNet state_dict in this file, fc left out (smp's encoder_weights="imagenet"); the
  // inputs then take ImageNet's mean and std (task::SegmentOptions::imagenet_normalize).
  std::string encoder_weights;
  // Parameter-name prefixes kept fixed ("encoder", "backbone", "conv1,bn1,layer1"): no gradient,
  // no optimizer state, not all-reduced. Their batch-norm statistics still follow the data in
  // training mode, as in PyTorch and Ultralytics' freeze.
  std::string freeze;
  int64_t epochs = 2;
  int64_t batch_size = 4;
  double lr = 0.001;
  double momentum = 0.9;
  double dampening = 0.0;
  std::string lr_schedule = "constant";  // constant | multistep | cosine | onecycle | linear
  std::vector<int64_t> milestones;       // multistep epochs
  double lr_gamma = 0.1;                 // multistep factor
  double lr_min = 0.0;                   // cosine floor
  int64_t warmup_epochs = 0;  // warm-up from lr / 10 per epoch (linear: Ultralytics' per step)
  double lrf = 0.01;                     // linear: the last rate as a fraction of lr
  double warmup_bias_lr = 0.1;           // linear warm-up: the biases' starting rate
  double warmup_momentum = 0.8;          // linear warm-up: SGD's starting momentum
  bool param_groups = false;             // Ultralytics' groups: no decay on biases and norms
  int64_t nbs = 0;                       // nominal batch: accumulate round(nbs / batch) batches
  double ema_tau = 0.0;                  // > 0: EMA decay ramp (Ultralytics' 2000)
  // detect, augmenting (task::DetectOptions)
  double degrees = kDetect.degrees, translate = kDetect.translate, scale = kDetect.scale,
         shear = kDetect.shear;
  double hsv_h = kDetect.hsv_h, hsv_s = kDetect.hsv_s, hsv_v = kDetect.hsv_v;
  double fliplr = kDetect.fliplr;
  double mosaic = kDetect.mosaic;
  int64_t close_mosaic = kDetect.close_mosaic;
  double label_smoothing = kClassify.label_smoothing;  // classify (task::ClassifyOptions)
  double weight_decay = 0.0;
  bool nesterov = false;
  std::string optimizer = "sgd";      // sgd | adamw (beta1/2, adam_eps) | auto (Ultralytics')
  double beta1 = 0.9, beta2 = 0.999;  // adamw
  double adam_eps = 1e-8;             // adamw
  double clip_grad_norm = 0.0;        // > 0: clip the gradients' 2-norm to this each step
  double ema_decay = 0.0;             // > 0: keep an EMA of weights; eval and model file use it
  int64_t cutout = kClassify.cutout;  // classify: > 0: Cutout(size) after the other augmentation
  std::string loss = kSegment.loss;   // segment (task::SegmentOptions): ce | dice | ce+dice
  std::string class_weights;          // segment: "w0,w1,..." per-class loss weights ("" = 1)
  bool aux_loss = false;  // deeplabv3: auxiliary FCN head (its loss weighted aux_weight, 0.5)
  bool zero_init_residual = false;  // resnet18/34/50/101: torchvision's zero_init_residual
  double scale_min = kSegment.scale_min, scale_max = kSegment.scale_max;  // with --augment
  int workers = 2;
  // Decoded images: none (decoded as read), ram, disk (decoded once to cache_dir and mapped) or
  // auto (ram when they need under a quarter of the available memory); see data::cache_dataset.
  std::string cache = "auto";
  std::string cache_dir;  // --cache disk's folder ("" = data::default_cache_dir())
  // > 0: WebDataset shards streamed shard by shard through a shuffle buffer of this many samples
  // (data::DataLoaderOptions::shuffle_buffer); 0: a global permutation of all samples.
  int64_t shuffle_buffer = 0;
  uint64_t seed = 0;
  int64_t log_every = 2000;  // mini-batches between loss lines
  int64_t val_split = 0;     // images held out of the training split as "val"
  // The task's augmentation: "false" (none), "true" (the task's own: classify as "cifar"; detect
  // Ultralytics'; segment flip and scale), "cifar" (RandomCrop(imgsz, padding=4) + flip) or
  // "imagenet" (RandomResizedCrop(imgsz) + flip, ImageNet's normalisation; classify).
  std::string augment = "false";
  bool download = false;
  std::string download_url;  // empty: the official CIFAR-10 URL
  int threads = 0;           // 0 = all cores
  std::string device = "auto";
  // CUDA only (ops::set_cuda_tf32 / set_cuda_deterministic): TF32 tensor cores for float32
  // convolutions and matrix products (PyTorch's cuDNN default), and deterministic cuDNN backward
  // algorithms only (torch.backends.cudnn.deterministic).
  bool tf32 = true;
  bool deterministic = false;
  // CUDA: replay a captured CUDA graph of the training step where the step is fixed (see
  // src/train/loop.cpp, graph_usable); elsewhere, and where a capture fails, eager steps.
  bool cuda_graph = false;
  // Images (and masks) whose header claims more pixels are refused before decoding (see
  // data::set_max_image_pixels); this invocation only.
  int64_t max_image_pixels = data::kDefaultMaxImagePixels;
  // fp32, or bf16: convolutions compute in bfloat16 (inputs and weights rounded, float32
  // accumulation and outputs; master weights, optimizer state and other ops stay float32).
  std::string precision = "fp32";
  // auto, direct or winograd: the algorithm of float32 CPU convolutions (ops::ConvAlgorithm).
  std::string conv_algorithm = "auto";
  int64_t max_steps = 0;  // stop after this many steps in total (0 = no limit)
  int64_t save_every = 0;  // > 0: also write the checkpoint every this many steps
  bool exist_ok = false;   // train into a non-empty --out without --resume (replaces its run)
  int progress = -1;      // -1 auto (a terminal, outside launchers), 0 off, 1 on
  bool quiet = false;     // no per-step lines (benchmarks)
  // Data-parallel runs (started by mpirun/srun; see dist.h). Each rank reads its share of every
  // epoch at batch_size images per step (global batch = world size x batch_size); gradients are
  // averaged over ranks before each step; rank 0 alone prints and writes the run directory.
  double dist_timeout = 45;  // seconds a rank may wait for its peers in a collective (0 = forever)
  int64_t bucket_kb = 100;   // gradient all-reduce buckets; 0 = one all-reduce after backward
  bool sync_bn = false;      // BatchNorm statistics over every rank's batch (SyncBatchNorm)
  // How CUDA gradients cross ranks: auto (NCCL where every rank has a GPU of its own and NCCL
  // loads, else host copies through MPI), nccl (refused where it cannot be used) or mpi.
  std::string dist_backend = "auto";
  // A non-finite loss (on any rank): "stop" ends the run naming the step and the last checkpoint;
  // "skip" drops that batch on every rank (no gradient, no step), counts it, and stops as "stop"
  // does after 10 skipped in a row (the weights themselves are then likely broken).
  std::string nan_policy = "stop";
  std::string fail_at;       // testing only: "RANK:STEP[:kill|exit|hang|term|int|nan]"
  // The recipe keys the user set (the CLI fills it from its flags and --config). On --resume a
  // given recipe key must equal the checkpoint's, and the run keys (data, epochs, threads) that
  // were not given come from the checkpoint. nullopt: every field was set deliberately.
  std::optional<std::set<std::string>> given;
};

// ---- the recipe table ---------------------------------------------------------------------------

// How a field behaves across runs.
enum class FieldRole {
  kRecipe,   // saved in the checkpoint; --resume takes it, and refuses a different given value
  kRun,      // saved; --resume takes it unless given (data, epochs, threads)
  kLog,      // saved for the record only (workers)
  kSession,  // this invocation only, not saved (out, resume, device, ...)
};
using FieldRef = std::variant<bool TrainConfig::*, int TrainConfig::*, int64_t TrainConfig::*,
                              uint64_t TrainConfig::*, double TrainConfig::*,
                              std::string TrainConfig::*, std::vector<int64_t> TrainConfig::*>;
struct RecipeField {
  const char* key;  // config-file and checkpoint key ("batch_size"); the flag is --batch-size
  FieldRef ref;
  const char* help;
  FieldRole role;
  // Field flags: kRequired, in every checkpoint since the first format (absent = corrupt);
  // kAuto, the default value means "decided later" (never a conflict on resume); kHidden, not in
  // --help (testing switches).
  unsigned flags = 0;
  // The field's validation: "" when the value is fine, else the one-line error.
  std::function<std::string(const TrainConfig&)> check = nullptr;
  // kAuto fields: the value the field resolves to (as text), so that resuming a run saved with
  // the auto value accepts the explicit value it stood for (a run of imgsz 0 = 32 and --imgsz 32).
  std::function<std::string(const TrainConfig&)> resolved = nullptr;
  // The value (JSON text) a checkpoint that predates the key ran with, where that is not today's
  // default: conv_algorithm's "direct" (the default became "auto" after the key was added).
  const char* absent = nullptr;
  // What --help appends to help, read from other tables (the models by task, the tasks).
  std::function<std::string()> lists = nullptr;
  std::string flag() const;
};
inline constexpr unsigned kRequired = 1, kAuto = 2, kHidden = 4;
// Every field, in --help order.
const std::vector<RecipeField>& recipe_fields();
// The field of that key (std::logic_error when there is none: a key is the code's, not input).
const RecipeField& recipe_field(const std::string& key);
// Runs every field's check (InputError with the first message), then the cross-field ones.
void validate(const TrainConfig& c);
// The saved fields (roles kRecipe, kRun, kLog) as one JSON object, keys as in the table.
nlohmann::json recipe_json(const TrainConfig& c);
// Merges a checkpoint's recipe into c, as --resume does (see TrainConfig::given). `where` names
// the checkpoint in errors. InputError for a corrupt recipe or a given value that differs.
void merge_resumed_recipe(TrainConfig& c, const nlohmann::json& saved, const std::string& where);
// The task and input size a config resolves to (task "" = the model's, imgsz 0 = the model's).
std::string resolved_task(const TrainConfig& c);
// A fresh run from the CLI: the fields its flags and --config left unset take the task's defaults
// (task::Task::train_defaults(): segment's model and dataset, detect's Ultralytics values).
// --task alone also takes the task's model. Does nothing without c.given (API callers set every
// field themselves).
void apply_task_defaults(TrainConfig& c);
// The default of recipe field `key` in a fresh run of `task` (nothing else given), as --help
// writes it ("segmentation", "100", "0.937", "on"); eval's --dataset takes the model's task's.
std::string task_default(const std::string& task, const std::string& key);
// A field's defaults over the tasks where they differ, from what the run applies (TrainConfig,
// the tasks' train_defaults(), the model registry for kAuto fields): "2 (classify, segment),
// 100 (detect)"; "" when every task has the same default.
std::string defaults_by_task(const RecipeField& f);
// A field's --help text: its help, its lists, and "[default: ...]" where defaults_by_task says.
std::string recipe_help(const RecipeField& f);
// The optimizer a run uses: --optimizer sgd or adamw as given, or auto as Ultralytics chooses;
// weight decay scaled by the nominal batch (--nbs).
struct ResolvedOptimizer {
  std::string name;  // "SGD" or "AdamW"
  double lr = 0, momentum = 0, weight_decay = 0;  // momentum: AdamW's beta1
  bool nesterov = false;
  std::string note;  // what differs from Ultralytics, when something does
};
ResolvedOptimizer resolve_optimizer(const TrainConfig& c, int64_t train_images,
                                    size_t num_classes, int world_size);
int64_t resolved_imgsz(const TrainConfig& c);
// --class-weights "0.5,1,2" -> {0.5, 1, 2} ("" -> {}); InputError for a bad item.
std::vector<double> parse_class_weights(const std::string& text);
task::TaskOptions task_options(const TrainConfig& c);
// The learning-rate schedule of the recipe (InputError when it is inconsistent).
optim::LrSchedule make_schedule(const TrainConfig& c);

struct TrainResult {
  double train_seconds = 0;  // wall time of the training steps (data loading overlapped)
  int64_t steps = 0;         // steps run in this invocation
  int64_t skipped_steps = 0; // --nan-policy skip: batches dropped for a non-finite loss
  int64_t images = 0;
  double last_report_loss = 0;
  double val_accuracy = -1;  // the task's headline validation metric in percent (classify:
                             // accuracy; segment: mIoU; detect: mAP50-95), when a val split exists
  double data_wait_seconds = 0;  // time the training thread waited for the DataLoader
  int world_size = 1;            // processes that trained together (images counts all of them)
  // The losses stayed on the device and were read at loss lines, checkpoints and epoch ends (no
  // wait for a GPU inside a step; see src/train/loop.cpp, defers_losses).
  bool deferred_loss_reads = false;
  int64_t graph_steps = 0;  // --cuda-graph: steps that were replays of a captured graph
  // 0, or 128 + the signal when SIGINT or SIGTERM stopped the run (130, 143: the shell's codes)
  // after the checkpoint of the step it was in was written.
  int exit_code = 0;
};

// Validates the config (InputError on bad values), then trains, printing the tutorial's lines to
// out. Throws InputError for bad data or checkpoints before anything is written. In a process group
// of several ranks (dist::world()), every rank calls it with the same config; only rank 0 writes
// to out and to cfg.out, and the losses it prints are means over all ranks.
TrainResult run_training(const TrainConfig& cfg, std::ostream& out);

// ---- evaluation (the classification API of earlier versions; other tasks: task::evaluate) -----

struct EvalResult {
  int64_t correct = 0, total = 0;
  std::vector<int64_t> class_correct, class_total;
  std::vector<std::string> classes;
  double accuracy() const { return total ? 100.0 * correct / total : 0.0; }
};
// The classify task's evaluation as counts: classifies every image of the loader with the model
// in eval mode. flip_tta: test-time augmentation, the argmax of the summed logits of each image
// and its left-right mirror. (Other tasks: task::evaluate.)
EvalResult evaluate(nn::Module& model, data::DataLoader& loader, bool flip_tta = false);

// task::flip_left_right (kept here for callers of the classification API).
Tensor flip_left_right(const Tensor& x);

// The classify task's evaluation transform at 32x32: Resize(32), ToTensor, and the tutorial's
// Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).
data::Compose eval_transform();

// ---- run files ---------------------------------------------------------------------------------

// What a model file records besides its tensors.
struct ModelMeta {
  std::string model;  // "" when the file names none (a PyTorch-saved file)
  std::string task = "classify";
  std::vector<std::string> classes;  // class names, label order
  int64_t imgsz = 0;                 // input size the model was trained at (0: not recorded)
  int64_t val_split = 0;             // images the run held out as "val"
  // The augmentation policy that decides the evaluation transform: "imagenet" (Resize(imgsz * 256
  // / 224) + CenterCrop(imgsz), ImageNet's mean and std), else "" (Resize(imgsz), mean and std
  // 0.5). Recorded as hpcnet.augment; eval and predict apply it.
  std::string eval_policy;
  // The mean and std the task's evaluation transform applies to pixels / 255, recorded as
  // hpcnet.normalize; unset (a file written by save_model without it): ImageNet's for the
  // "imagenet" policy, else 0.5 and 0.5.
  std::optional<data::Normalize> normalize;
  // `hpcnet quantize`'s calibration, recorded as hpcnet.int8 (a JSON object): the largest |x| of
  // each int8-capable Conv's input by module name; --precision int8 needs it.
  std::map<std::string, double> int8_ranges;
};

// Model weights with metadata (model name, task, class names, input size, normalisation) for
// eval and predict.
void save_model(const std::string& path, const nn::Module& model, const ModelMeta& meta);
void save_model(const std::string& path, const nn::Module& model, const std::string& model_name,
                const std::vector<std::string>& classes, int64_t val_split);
struct LoadedModel {
  std::shared_ptr<nn::Module> module;
  std::string name;
  std::vector<std::string> classes;
  bool classes_recorded = false;  // the file names them (hpcnet.classes); else CIFAR-10's are taken
  int64_t val_split = 0;
  std::string task = "classify";
  int64_t imgsz = 32;
  std::string eval_policy;  // ModelMeta::eval_policy
  bool int8_calibrated = false;  // the file holds hpcnet.int8 (applied to the model's Convs)
};
// Builds the model named in the file's metadata (or `model_name` when given; a mismatch is an
// InputError) and loads its weights. Takes a model file or a checkpoint.
LoadedModel load_model(const std::string& path, const std::string& model_name = "");

// Applies --precision ("fp32" or "bf16") to the kernels of `device`; InputError for other
// values, and for bf16 on a CPU without AVX-512 (the CPU's bf16 convolutions need it).
void apply_precision(const std::string& precision, Device device = cpu_device());
// Applies --tf32 and --deterministic (the CUDA kernels' float32 math and algorithms).
void apply_cuda_math(bool tf32, bool deterministic);
// eval's and predict's --precision: "fp32", "bf16", or "int8" for a model file `path` that holds
// `hpcnet quantize`'s calibration (its calibrated convolutions in int8, the others in bf16).
void apply_inference_precision(const std::string& precision, const LoadedModel& m,
                               const std::string& path);
// InputError unless precision is one of those three.
void check_inference_precision(const std::string& precision);
// Applies --conv-algorithm ("auto", "direct" or "winograd"); InputError for other values.
void apply_conv_algorithm(const std::string& algorithm);

// Resolves --device: "cpu", "cuda", "auto". Returns the device to use or throws InputError.
Device resolve_device(const std::string& name);

}  // namespace hpcnet::train

namespace hpcnet::train {

// `hpcnet bench`: training steps on synthetic data of the model's input shape, timed per step
// and per kernel, with the achieved GFLOP/s against the machine's peak.
struct BenchConfig {
  std::string model = "lenet";
  int64_t imgsz = 0;  // 0 = the model's default input size
  int64_t batch_size = 4;
  int64_t steps = 2000;
  int64_t warmup = 50;
  int threads = 0;
  std::string precision = "fp32";  // fp32 | bf16 (see TrainConfig::precision)
  std::string conv_algorithm = "auto";  // see TrainConfig::conv_algorithm
  // cpu, cuda or cuda:N: the model, its optimizer state and the synthetic batches live there; a
  // CUDA run times whole steps between two device synchronisations (no wait inside a step).
  std::string device = "cpu";
  bool tf32 = true, deterministic = false;  // TrainConfig's, for CUDA
  // CUDA: the whole step (forward, loss, backward, SGD) captured once as a CUDA graph and
  // replayed, each batch copied into the graph's input buffers first (CudaGraph); a step that
  // cannot be captured is timed eagerly, saying why.
  bool cuda_graph = false;
  bool profile = true;             // per-kernel table (adds a clock read around each kernel)
  // --loader: the input pipeline alone over `data` (decode, augment, batch into float tensors).
  bool loader = false;
  std::string data, dataset = "imagefolder", augment = "imagenet", cache = "none";
  int workers = 2;
  int64_t epochs = 1;
};
// The input pipeline alone (`hpcnet bench --loader`): the classify task's training transforms
// (its --augment policy at imgsz) over the train split of `data`, one shuffled pass per epoch
// through a DataLoader of `workers` threads (with --cache as given).
struct LoaderBenchResult {
  int64_t images = 0;          // read per epoch
  double seconds = 0;          // the last epoch's, wall clock
  double images_per_sec = 0;   // the last epoch's
  double start_seconds = 0;    // opening (listing or indexing) the dataset and the cache
  double peak_rss_mb = 0;
  std::string transform, cache_line;
};
LoaderBenchResult run_loader_bench(const BenchConfig& cfg);

// TaskOptions::augment of an --augment value (TrainConfig::augment): "false" -> "" (none),
// "true" -> "default" (the task's own), "cifar" and "imagenet" as they are; InputError for any
// other value.
std::string task_augment(const std::string& augment);
struct BenchResult {
  bool cuda_graph = false;  // the steps were replays of a CUDA graph
  double seconds_per_step = 0;
  double images_per_sec = 0;
  double flops_per_step = 0;            // counted by the conv and linear kernels
  double gflops = 0;                    // achieved over the whole step
  double peak_gflops = 0;               // this machine's FP32 peak (estimate, see peak_fp32_gflops)
  uint64_t system_allocs_per_step = 0;  // CPU allocator misses in steady state
  double allocator_peak_mb = 0;         // the most bytes the CPU allocator had handed out
  double allocator_held_mb = 0;         // handed out + cached for reuse, at the end
  double peak_rss_mb = 0;               // the process's peak resident set (getrusage)
  std::vector<std::pair<std::string, std::array<double, 3>>>
      kernels;  // name: ms/step, calls/step, GFLOP/s
};
BenchResult run_bench(const BenchConfig& cfg);
// cores x FMA units (2) x fp32 lanes (16 with AVX-512, 8 with AVX2) x 2 x clock (from cpuinfo).
double peak_fp32_gflops(int threads, std::string* how = nullptr);

}  // namespace hpcnet::train
