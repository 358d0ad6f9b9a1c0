// Run directories users can trust, through the hpcnet binary: a non-empty --out is refused unless
// --resume or --exist-ok; SIGTERM and SIGINT stop after the current step with a checkpoint (exit
// 143 / 130) and --resume then ends bit-identical to an uninterrupted run, also from a
// --save-every checkpoint after a SIGKILL; best.safetensors follows the validation metric; one
// summary line per epoch; and nothing non-finite is written, trained on, evaluated or predicted
// with.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "hpcnet/io.h"
#include "src/train/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// The tutorial recipe on tiny CIFAR-10 data: 5 x 12 training images at batch 4 = 15 steps per
// epoch; `workers` data-loading threads.
std::vector<std::string> rn_args(const fs::path& data, const fs::path& out, int epochs,
                                 int workers = 0) {
  return tiny_train_args(data, out, epochs, {.workers = std::to_string(workers)});
}

std::vector<std::string> with(std::vector<std::string> a, std::initializer_list<const char*> more) {
  for (const char* m : more) a.push_back(m);
  return a;
}

// The "log" records of RUN/metrics.jsonl without their wall-clock fields.
std::vector<nlohmann::json> rn_log_records(const fs::path& run) {
  std::vector<nlohmann::json> out;
  for (const std::string& l : split_lines(read_file(run / "metrics.jsonl"))) {
    nlohmann::json j = nlohmann::json::parse(l);
    if (j.at("event") != "log") continue;
    j.erase("elapsed_s");
    j.erase("time");
    out.push_back(j);
  }
  return out;
}

class RunsTest : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_cifar10(dir_ / "data", 12, 8); }
  RunResult run(const std::vector<std::string>& args) { return run_hpcnet(args, dir_.path()); }
  fs::path data() const { return dir_ / "data"; }
  TempDir dir_{"runs"};
};

}  // namespace

// A second run into the same --out is refused (exit 2, one line naming --resume and --exist-ok)
// and leaves the first run's files alone; --exist-ok replaces the run (no old checkpoint left to
// be resumed by mistake).
TEST_F(RunsTest, NonEmptyOutNeedsResumeOrExistOk) {
  RunResult r = run(rn_args(data(), dir_ / "a", 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string model = read_file(dir_ / "a" / "model.safetensors");
  const std::string metrics = read_file(dir_ / "a" / "metrics.jsonl");
  r = run(rn_args(data(), dir_ / "a", 1));
  expect_refused(r, "non-empty --out", {"--out", "--resume", "--exist-ok"});
  EXPECT_EQ(read_file(dir_ / "a" / "model.safetensors"), model);
  EXPECT_EQ(read_file(dir_ / "a" / "metrics.jsonl"), metrics);
  // A stray file counts too; an empty folder does not.
  fs::create_directories(dir_ / "b");
  ASSERT_EQ(run(rn_args(data(), dir_ / "b", 1)).rc, 0);
  fs::create_directories(dir_ / "c");
  write_file(dir_ / "c" / "notes.txt", "mine");
  EXPECT_EQ(run(rn_args(data(), dir_ / "c", 1)).rc, 2);
  // --exist-ok: a 2-epoch run replaces the 1-epoch one.
  r = run(with(rn_args(data(), dir_ / "a", 2), {"--exist-ok", "--steps", "3"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "a" / "checkpoint.safetensors"));  // 3 steps: no epoch ended
  EXPECT_NE(read_file(dir_ / "a" / "model.safetensors"), model);
}

// SIGTERM at step 6 (of 15 per epoch), delivered while the step runs: the step finishes, the
// checkpoint holds it, exit 143 with a line that says how to continue; --resume prints where it
// starts and ends with the bytes of an uninterrupted run. The same with 2 data-loading threads
// and SIGINT (130), stopping in the second epoch.
TEST_F(RunsTest, SigtermAndSigintStopWithACheckpointAndResumeIsBitExact) {
  for (int workers : {0, 2}) {
    SCOPED_TRACE(workers);
    const std::string w = std::to_string(workers);
    const fs::path straight = dir_ / ("straight" + w), cut = dir_ / ("cut" + w);
    RunResult r = run(rn_args(data(), straight, 2, workers));
    ASSERT_EQ(r.rc, 0) << r.err;
    const char* at = workers == 0 ? "0:6:term" : "0:20:int";
    r = run(with(rn_args(data(), cut, 2, workers), {"--fail-at-step", at}));
    EXPECT_EQ(r.rc, workers == 0 ? 143 : 130) << r.err;
    EXPECT_NE(r.err.find(workers == 0 ? "SIGTERM: stopped after step 6"
                                      : "SIGINT: stopped after step 20"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("--resume " + cut.string()), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("Finished Training"), std::string::npos);
    train::RunFile f = train::read_run_file((cut / "checkpoint.safetensors").string());
    ASSERT_TRUE(f.train.has_value());
    EXPECT_EQ(f.train->steps, workers == 0 ? 6 : 20);
    EXPECT_EQ(f.train->epoch_step, workers == 0 ? 6 : 5);
    r = run({"train", "--resume", cut.string(), "--workers", w});  // workers: not in the recipe
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out_lines().at(0),
              "resuming " + cut.string() +
                  (workers == 0 ? " from epoch 1 step 7 (of 2)" : " from epoch 2 step 6 (of 2)"))
        << r.out;
    EXPECT_TRUE(read_file(cut / "model.safetensors") == read_file(straight / "model.safetensors"));
    EXPECT_TRUE(read_file(cut / "checkpoint.safetensors") ==
                read_file(straight / "checkpoint.safetensors"));
    // The loss lines after the resume are the uninterrupted run's (the log window's sum is kept).
    EXPECT_EQ(rn_log_records(cut), rn_log_records(straight));
  }
}

// --save-every 4, then SIGKILL at step 11: the checkpoint of step 8 survives and the resumed run
// ends with the uninterrupted run's bytes.
TEST_F(RunsTest, SaveEveryThenSigkillResumesFromTheLastSavedStep) {
  RunResult r = run(with(rn_args(data(), dir_ / "straight", 2), {"--save-every", "4"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run(
      with(rn_args(data(), dir_ / "cut", 2), {"--save-every", "4", "--fail-at-step", "0:11:kill"}));
  EXPECT_EQ(r.rc, 128 + 9) << r.err;
  train::RunFile f = train::read_run_file((dir_ / "cut" / "checkpoint.safetensors").string());
  EXPECT_EQ(f.train->steps, 8);
  EXPECT_EQ(f.train->epoch_step, 8);
  // A SIGKILLed writer's temporary file (pid 2^22 + 7 is above Linux's pid_max default of 2^22)
  // is removed by the next run in that directory; one of a live process (ours) is left alone.
  write_file(dir_ / "cut" / "checkpoint.safetensors.tmp.4194311", "half");
  const fs::path live = dir_ / "cut" / ("model.safetensors.tmp." + std::to_string(::getpid()));
  write_file(live, "busy");
  r = run({"train", "--resume", (dir_ / "cut").string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "cut" / "checkpoint.safetensors.tmp.4194311"));
  EXPECT_TRUE(fs::exists(live));
  fs::remove(live);
  EXPECT_TRUE(read_file(dir_ / "cut" / "model.safetensors") ==
              read_file(dir_ / "straight" / "model.safetensors"));
}

// One writer per run folder: while a run trains (here hanging before step 3, with the checkpoint
// of step 2), a second `--out X --exist-ok` and a `--resume X` are refused at once (exit 2)
// naming the first's PID, and leave its files alone; once the first is killed with kill -9 the
// kernel has released its lock (RUN/.lock stays, unlocked) and --resume continues the run.
TEST_F(RunsTest, OneWriterPerRunFolderAndAKilledRunLeavesNoLock) {
  const fs::path run_dir = dir_ / "a", log = dir_ / "first.log", pid_file = dir_ / "first.pid";
  std::string cmd = "(cd " + shell_quote(dir_.str()) +
                    " && exec env -u SLURM_NTASKS -u SLURM_PROCID -u SLURM_LOCALID -u WORLD_SIZE "
                    "-u RANK -u LOCAL_RANK " +
                    hpcnet_command();
  for (const auto& a :
       with(rn_args(data(), run_dir, 2), {"--save-every", "1", "--fail-at-step", "0:3:hang"}))
    cmd += " " + shell_quote(a);
  cmd += ") </dev/null >" + shell_quote(log.string()) + " 2>&1 & echo $! >" +
         shell_quote(pid_file.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const pid_t pid = std::stoi(read_file(pid_file));
  struct Killer {  // the first run never ends by itself
    pid_t pid;
    ~Killer() { ::kill(pid, SIGKILL); }
  } killer{pid};
  const auto t0 = std::chrono::steady_clock::now();
  while (read_file(log).find("hang before step 3") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120)) << read_file(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string ckpt = read_file(run_dir / "checkpoint.safetensors");
  ASSERT_FALSE(ckpt.empty());
  const std::string holder = "PID " + std::to_string(pid) + " on host ";
  RunResult r = run(with(rn_args(data(), run_dir, 2), {"--exist-ok"}));
  expect_refused(r, "a second writer with --exist-ok", {"--out " + run_dir.string(), holder});
  r = run({"train", "--resume", run_dir.string()});
  expect_refused(r, "--resume of a run still training", {"--resume " + run_dir.string(), holder});
  EXPECT_TRUE(read_file(run_dir / "checkpoint.safetensors") == ckpt);
  EXPECT_EQ(read_file(run_dir / ".lock").rfind(std::to_string(pid) + " ", 0), 0u);
  // kill -9: no chance to clean up, and still no stale lock.
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto alive = [&] {  // a zombie has closed its files
    return ::kill(pid, 0) == 0 &&
           read_file("/proc/" + std::to_string(pid) + "/stat").find(") Z") == std::string::npos;
  };
  for (int i = 0; i < 200 && alive(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  r = run({"train", "--resume", run_dir.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
}

// One summary line per epoch, after the tutorial's loss lines; with a val split it carries the
// metric, and best.safetensors holds the best epoch's weights.
TEST_F(RunsTest, EpochSummaryLineAndBestModel) {
  RunResult r = run(with(rn_args(data(), dir_ / "v", 3), {"--val-split", "12"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::regex line(
      R"(epoch [123]/3  train_loss \d+\.\d{3}  val_accuracy \d+\.\d\d%  lr 0\.0100  \d+\.\d s)");
  int summaries = 0;
  for (const std::string& l : r.out_lines())
    if (l.rfind("epoch ", 0) == 0) {
      EXPECT_TRUE(std::regex_match(l, line)) << l;
      ++summaries;
    }
  EXPECT_EQ(summaries, 3) << r.out;
  EXPECT_EQ(r.out_lines().back(), "Finished Training");
  ASSERT_TRUE(fs::exists(dir_ / "v" / "best.safetensors"));
  train::RunFile f = train::read_run_file((dir_ / "v" / "checkpoint.safetensors").string());
  ASSERT_TRUE(f.train->best.has_value());
  double best = -1;
  for (const std::string& l : split_lines(read_file(dir_ / "v" / "metrics.jsonl")))
    if (l.find("\"event\":\"epoch\"") != std::string::npos)
      best = std::max(best, nlohmann::json::parse(l).at("val_accuracy").get<double>());
  EXPECT_DOUBLE_EQ(*f.train->best, best);
}

// Nothing non-finite: the writer refuses a NaN tensor and keeps the previous file; a model file or
// checkpoint holding NaN is refused by eval, predict and --resume, naming the tensor.
TEST_F(RunsTest, NonFiniteWeightsAreNeverWrittenOrUsed) {
  RunResult r = run(rn_args(data(), dir_ / "a", 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path model = dir_ / "a" / "model.safetensors";
  const std::string good = read_file(model);
  train::RunFile f = train::read_run_file(model.string());
  nn::NamedTensors tensors(f.model.begin(), f.model.end());
  for (auto& [n, t] : tensors)
    if (n == "conv2.weight") {
      t = t.clone();
      t.data<float>()[7] = NAN;
    }
  try {
    train::write_model_file(model.string(), f.meta, tensors);
    FAIL() << "a NaN tensor was written";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2.weight (1 of 2400 values are NaN or Inf)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(model), good);
  // A NaN file made behind hpcnet's back (as a diverged run elsewhere would leave it).
  std::map<std::string, std::string> meta = {{"hpcnet.model", "lenet"}};
  nn::NamedTensors bad = tensors;
  save_safetensors((dir_ / "nan.safetensors").string(), bad, meta);
  write_png_file(dir_ / "cat.png", 32, 32, noisy_pixels(32, 32, 90, 60, 30, 1, 5, 10));
  r = run(
      {"predict", "--weights", (dir_ / "nan.safetensors").string(), (dir_ / "cat.png").string()});
  expect_refused(r, "predict with NaN weights", {"nan.safetensors", "conv2.weight", "NaN"});
  r = run({"eval", "--weights", (dir_ / "nan.safetensors").string(), "--data", data().string()});
  expect_refused(r, "eval with NaN weights", {"conv2.weight"});
}

// A non-finite loss stops the run at that step with one line naming the step and the last good
// checkpoint (here epoch 1's, which stays as it was); no file is written after it.
TEST_F(RunsTest, ANonFiniteLossStopsTheRunNamingTheStepAndTheCheckpoint) {
  // 60 images at batch 4: 15 steps per epoch; step 18 is epoch 2's 3rd.
  RunResult r = run(with(rn_args(data(), dir_ / "n", 2), {"--fail-at-step", "0:18:nan"}));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("loss became nan at epoch 2 step 3; nothing after the last checkpoint is "
                       "saved (" +
                       (dir_ / "n" / "checkpoint.safetensors").string() + " holds it)"),
            std::string::npos)
      << r.err;
  train::RunFile f = train::read_run_file((dir_ / "n" / "checkpoint.safetensors").string());
  EXPECT_EQ(f.train->epochs_done, 1);
  EXPECT_EQ(r.out.find("Finished Training"), std::string::npos);
}

// --nan-policy skip: a batch whose loss is not finite is dropped on every rank (no gradient, no
// step), said on stderr and in metrics.jsonl; 10 such batches in a row are tolerated, the 11th
// stops the run as --nan-policy stop does. (--fail-at-step R:S:nan: the loss is NaN from step S
// on, 60 images at batch 4: 15 steps per epoch.)
TEST_F(RunsTest, NanPolicySkipDropsTheBatchAndFinishes) {
  // NaN from step 21 (epoch 2 step 6) on: steps 21-30 are skipped, and the run (30 steps)
  // finishes with the weights of step 20, finite.
  RunResult r = run(
      with(rn_args(data(), dir_ / "s", 2), {"--fail-at-step", "0:21:nan", "--nan-policy", "skip"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("loss became nan at epoch 2 step 6: batch skipped (--nan-policy skip; 1 so "
                       "far)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("at epoch 2 step 15: batch skipped (--nan-policy skip; 10 so far)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos);
  int skipped = 0;
  for (const std::string& l : split_lines(read_file(dir_ / "s" / "metrics.jsonl"))) {
    const auto j = nlohmann::json::parse(l);
    if (j.at("event") != "skipped") continue;
    EXPECT_EQ(j.at("step"), 6 + skipped);
    EXPECT_EQ(j.at("loss"), "nan");
    ++skipped;
  }
  EXPECT_EQ(skipped, 10);
  EXPECT_NO_THROW(train::read_run_file((dir_ / "s" / "model.safetensors").string()));
  // From step 20 on: the 11th non-finite batch in a row (step 30) stops the run.
  r = run(with(rn_args(data(), dir_ / "s11", 2),
               {"--fail-at-step", "0:20:nan", "--nan-policy", "skip"}));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("loss became nan at epoch 2 step 15 (and in the 10 batches before it, "
                       "skipped); nothing after the last checkpoint is saved"),
            std::string::npos)
      << r.err;
  r = run(with(rn_args(data(), dir_ / "bad", 1), {"--nan-policy", "sometimes"}));
  expect_refused(r, "--nan-policy sometimes", {"--nan-policy", "stop or skip"});
}

// --weights of the same model with a classifier of another class count (here lenet's fc3 with 3
// classes, the data 10): fine-tuning. The classifier is replaced and re-initialised (said in one
// line), every other tensor loaded from the file (with --lr 0, the run's model is the file's
// outside fc3, and fc3 is what the seed initialises, as in a run without --weights).
TEST_F(RunsTest, TrainFromWeightsOfAnotherClassCountReplacesTheClassifier) {
  RunResult r = run(tiny_train_args(data(), dir_ / "fresh", 1, {.lr = "0"}));  // the seed's init
  ASSERT_EQ(r.rc, 0) << r.err;
  // A file of lenet weights with 3 classes, every tensor distinct from the seed's init.
  nn::NamedTensors three;
  for (auto& [n, t] : load_safetensors((dir_ / "fresh" / "model.safetensors").string()).tensors) {
    Tensor v = n.rfind("fc3.", 0) == 0
                   ? Tensor::full(n == "fc3.weight" ? Shape{3, 84} : Shape{3}, 0.25f)
                   : t.clone();
    if (n.rfind("fc3.", 0) != 0) {
      float* p = v.data<float>();
      for (int64_t i = 0; i < v.numel(); ++i) p[i] = 0.5f * p[i] + 0.01f;
    }
    three.emplace_back(n, v);
  }
  save_safetensors((dir_ / "three.safetensors").string(), three);
  r = run(tiny_train_args(data(), dir_ / "tuned", 1,
                          {.lr = "0", .extra = {"--weights", (dir_ / "three.safetensors").string()}}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("three.safetensors: its classifier fc3 has 3 classes, this run's data 10: "
                       "fc3 is replaced and re-initialised, every other tensor loaded from the "
                       "file\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(count_of(r.err, "re-initialised"), 1) << r.err;
  SafetensorsFile tuned = load_safetensors((dir_ / "tuned" / "model.safetensors").string());
  SafetensorsFile fresh = load_safetensors((dir_ / "fresh" / "model.safetensors").string());
  std::map<std::string, Tensor> file(three.begin(), three.end());
  int loaded = 0, replaced = 0;
  for (const std::string& n : tuned.order) {
    const Tensor& want = n.rfind("fc3.", 0) == 0 ? fresh.at(n) : file.at(n);
    ASSERT_EQ(tuned.at(n).shape(), want.shape()) << n;
    EXPECT_EQ(tuned.at(n).to_vector(), want.to_vector()) << n;
    ++(n.rfind("fc3.", 0) == 0 ? replaced : loaded);
  }
  EXPECT_EQ(replaced, 2);
  EXPECT_EQ(loaded, 8);
}

// --zero-init-residual reaches the model: torchvision's resnet18 starts every block's bn2 at
// weight 0 (with --lr 0 the model file holds the initial weights); without it they start at 1.
TEST_F(RunsTest, ZeroInitResidualStartsTheBlocksLastBatchNormAtZero) {
  for (bool zero : {false, true}) {
    TinyTrain o{.model = "resnet18", .lr = "0", .extra = {"--imgsz", "32", "--steps", "1"}};
    if (zero) o.extra.push_back("--zero-init-residual");
    const fs::path out = dir_ / (zero ? "zero" : "plain");
    RunResult r = run(tiny_train_args(data(), out, 1, o));
    ASSERT_EQ(r.rc, 0) << r.err;
    SafetensorsFile f = load_safetensors((out / "model.safetensors").string());
    int blocks = 0;
    for (const std::string& n : f.order) {
      if (n.rfind("layer", 0) != 0 || n.size() < 11 || n.compare(n.size() - 11, 11, ".bn2.weight"))
        continue;
      for (double v : f.at(n).to_vector_f64()) ASSERT_EQ(v, zero ? 0.0 : 1.0) << n;
      ++blocks;
    }
    EXPECT_EQ(blocks, 8);
    for (double v : f.at("layer1.0.bn1.weight").to_vector_f64()) ASSERT_EQ(v, 1.0);
  }
  expect_refused(run(tiny_train_args(data(), dir_ / "lenet", 1, {.extra = {"--zero-init-residual"}})),
                 "--zero-init-residual on lenet", {"--zero-init-residual", "lenet"});
}

// A run of the CIFAR ResNet-18 written when it was called "resnet18" (its files' hpcnet.model and
// its checkpoint's recipe say so) resumes as cifar_resnet18, saying once that the name changed.
TEST_F(RunsTest, ARunOfTheOldResnet18NameResumesAsCifarResnet18) {
  const fs::path out = dir_ / "old";
  RunResult r = run(tiny_train_args(data(), out, 1, {.model = "cifar_resnet18"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* file : {"checkpoint.safetensors", "model.safetensors"}) {
    const std::string path = (out / file).string();
    SafetensorsFile f = load_safetensors(path);
    ASSERT_EQ(f.metadata.at("hpcnet.model"), "cifar_resnet18");
    f.metadata["hpcnet.model"] = "resnet18";
    if (f.metadata.count("hpcnet.config")) {
      nlohmann::json j = nlohmann::json::parse(f.metadata.at("hpcnet.config"));
      ASSERT_EQ(j.at("model"), "cifar_resnet18");
      j["model"] = "resnet18";
      f.metadata["hpcnet.config"] = j.dump();
    }
    nn::NamedTensors tensors;
    for (const std::string& n : f.order) tensors.emplace_back(n, f.at(n));
    save_safetensors(path, tensors, f.metadata);
  }
  r = run({"train", "--resume", out.string(), "--epochs", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "is now called 'cifar_resnet18'"), 1u) << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
  SafetensorsFile f = load_safetensors((out / "model.safetensors").string());
  EXPECT_EQ(f.metadata.at("hpcnet.model"), "cifar_resnet18");
}

// --weights starts a fresh run from a file's weights (here with --lr 0, so the run's model is the
// file's own); a file of another model or shape is refused, listing the tensors; a torch.save
// file is answered with the command that converts it.
TEST_F(RunsTest, TrainFromWeightsAndPyTorchPicklesAreNamed) {
  RunResult r = run(rn_args(data(), dir_ / "a", 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> args = rn_args(data(), dir_ / "b", 1);
  args[12] = "0";  // --lr 0
  args.push_back("--weights");
  args.push_back((dir_ / "a" / "checkpoint.safetensors").string());
  r = run(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_same_tensors(dir_ / "a" / "model.safetensors", dir_ / "b" / "model.safetensors");
  // Weights of a model with other shapes: one line naming the tensors.
  std::map<std::string, Tensor> state =
      load_safetensors((dir_ / "a" / "model.safetensors").string()).tensors;
  nn::NamedTensors odd;
  for (auto& [n, t] : state) odd.emplace_back(n, n == "fc3.weight" ? Tensor::zeros({3, 84}) : t);
  save_safetensors((dir_ / "odd.safetensors").string(), odd);
  args = with(rn_args(data(), dir_ / "c", 1), {"--weights"});
  args.push_back((dir_ / "odd.safetensors").string());
  r = run(args);
  expect_refused(r, "--weights of another shape",
                 {"--weights", "'fc3.weight' has shape (3, 84), the model expects (10, 84)"});
  // The bias alone of another size is no classifier of another class count: still refused.
  odd.clear();
  for (auto& [n, t] : state) odd.emplace_back(n, n == "fc3.bias" ? Tensor::zeros({3}) : t);
  save_safetensors((dir_ / "odd_bias.safetensors").string(), odd);
  args = with(rn_args(data(), dir_ / "c2", 1), {"--weights"});
  args.push_back((dir_ / "odd_bias.safetensors").string());
  r = run(args);
  expect_refused(r, "--weights with a classifier bias of another size",
                 {"--weights", "'fc3.bias' has shape (3,), the model expects (10,)"});
  // torch.save's zip archive, and an old-style pickle.
  write_file(dir_ / "net.pth", std::string("PK\x03\x04", 4) + std::string(64, '\0'));
  r = run({"predict", "--weights", (dir_ / "net.pth").string(), (dir_ / "net.pth").string()});
  expect_refused(r, "torch.save file",
                 {"net.pth: a PyTorch torch.save file", "convert_checkpoint.py to-safetensors"});
  // Ultralytics' best.pt: a zip whose data.pkl pickles ultralytics.nn.tasks.DetectionModel; the
  // converter needs --allow-pickle for it (and reads the model and class names from it).
  write_file(dir_ / "best.pt", std::string("PK\x03\x04", 4) + std::string(26, '\0') +
                                   "best/data.pkl (pickle) cdatetime\ndatetime\n ... "
                                   "cultralytics.nn.tasks\nDetectionModel\n" +
                                   std::string(64, '\0'));
  r = run({"predict", "--weights", (dir_ / "best.pt").string(), (dir_ / "best.pt").string()});
  expect_refused(r, "Ultralytics .pt",
                 {"best.pt: an Ultralytics checkpoint (a pickled model)",
                  "convert_checkpoint.py to-safetensors " + (dir_ / "best.pt").string() +
                      " OUT.safetensors --allow-pickle"});
  write_file(dir_ / "old.pt", std::string("\x80\x02", 2) + std::string(64, 'x'));
  args = with(rn_args(data(), dir_ / "d", 1), {"--weights"});
  args.push_back((dir_ / "old.pt").string());
  r = run(args);
  expect_refused(r, "pickle", {"old.pt: a PyTorch pickle"});
}
