// Tests of the training loop behind `hpcnet train` through its C++ API (run_training writing to a
// std::ostringstream): the tutorial's loss lines, the run directory (model.safetensors with
// PyTorch names, checkpoint, metrics.jsonl), bit-exact resume, --steps, the val split, evaluate,
// save_model/load_model, and refusals of bad configs, data and checkpoints before anything is
// written. The data is a tiny CIFAR-10 binary folder made here (a colour per class plus noise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/train.h"
#include "src/core/cuda_device.h"
#include "src/ops/ops.h"
#include "src/train/checkpoint.h"
#include "src/train/progress.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// A temporary folder with the tiny dataset in DIR/data; run directories go beside it. Restores the
// process's kernel thread count (run_training sets it) afterwards.
class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = ops::get_num_threads();
    write_tiny_cifar10(dir_ / "data", 40, 40);  // 200 training images: 50 steps of 4 per epoch
  }
  void TearDown() override { ops::set_num_threads(threads_); }
  train::TrainConfig config(const std::string& run) const {
    train::TrainConfig c;
    c.data = (dir_ / "data").string();
    c.out = (dir_ / run).string();
    c.epochs = 1;
    c.batch_size = 4;
    c.lr = 0.001;
    c.momentum = 0.9;
    c.workers = 0;
    c.threads = 1;
    c.seed = 0;
    c.log_every = 10;
    c.progress = 0;
    return c;
  }
  std::string train(const train::TrainConfig& c, train::TrainResult* res = nullptr) {
    std::ostringstream out;
    train::TrainResult r = train::run_training(c, out);
    if (res) *res = r;
    return out.str();
  }
  fs::path run(const std::string& name) const { return dir_ / name; }

  TempDir tmp_{"train"};
  fs::path dir_ = tmp_.path();
  int threads_ = 0;
};

}  // namespace

// ---- the loop and its output -----------------------------------------------------------------

TEST_F(TrainTest, LossLinesHaveTheTutorialFormat) {
  auto c = config("run");
  c.epochs = 2;
  train::TrainResult res;
  const std::string out = train(c, &res);
  std::vector<std::string> lines = tutorial_lines(out);
  // 50 steps per epoch, a line every 10: 5 per epoch, then "Finished Training"; beside them
  // hpcnet's one summary line per epoch, after that epoch's loss lines.
  ASSERT_EQ(lines.size(), 11u);
  ASSERT_EQ(split_lines(out).size(), 13u) << out;
  EXPECT_EQ(split_lines(out)[5].rfind("epoch 1/2  train_loss ", 0), 0u) << out;
  EXPECT_EQ(lines.back(), "Finished Training");
  const std::regex re(R"(\[(\d), +(\d+)\] loss: (\d\.\d{3}))");
  for (size_t k = 0; k < 10; ++k) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[k], m, re)) << lines[k];
    int epoch = std::stoi(m[1]), step = std::stoi(m[2]);
    EXPECT_EQ(epoch, static_cast<int>(k / 5) + 1) << lines[k];
    EXPECT_EQ(step, static_cast<int>(k % 5 + 1) * 10) << lines[k];
    // Exactly print('[%d, %5d] loss: %.3f' % (epoch + 1, i + 1, running_loss / 2000)).
    char want[64];
    std::snprintf(want, sizeof want, "[%d, %5d] loss: %.3f", epoch, step, std::stod(m[3]));
    EXPECT_EQ(lines[k], want);
    double loss = std::stod(m[3]);
    EXPECT_GT(loss, 1.0);
    EXPECT_LT(loss, 3.5);
  }
  EXPECT_EQ(lines[0].substr(0, 11), "[1,    10] ");
  // Ten classes, untrained: the first average is close to ln(10) = 2.303.
  EXPECT_NEAR(std::stod(lines[0].substr(lines[0].size() - 5)), 2.303, 0.1);
  EXPECT_EQ(res.steps, 100);
  EXPECT_EQ(res.images, 400);
  EXPECT_EQ(res.val_accuracy, -1);
}

TEST_F(TrainTest, LogEveryCountsMiniBatchesAndPartialBatchesAreKept) {
  auto c = config("run");
  c.batch_size = 7;  // 200 = 28 * 7 + 4: 29 steps, the last one of 4 images
  c.log_every = 5;
  train::TrainResult res;
  std::vector<std::string> lines = tutorial_lines(train(c, &res));
  ASSERT_EQ(lines.size(), 6u);  // steps 5, 10, ..., 25
  EXPECT_EQ(lines[0].substr(0, 11), "[1,     5] ");
  EXPECT_EQ(lines[4].substr(0, 11), "[1,    25] ");
  EXPECT_EQ(res.steps, 29);
  EXPECT_EQ(res.images, 200);
}

// The tutorial's own numbers: a line every 2000 mini-batches, "[1,  2000] loss: ...".
TEST_F(TrainTest, TwoThousandStepLineMatchesTheTutorial) {
  write_tiny_cifar10(dir_ / "big", 400, 10);  // 2000 images
  auto c = config("run");
  c.data = (dir_ / "big").string();
  c.batch_size = 1;
  c.log_every = 2000;
  std::vector<std::string> lines = tutorial_lines(train(c));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(std::regex_match(lines[0], std::regex(R"(\[1,  2000\] loss: \d\.\d{3})")))
      << lines[0];
  EXPECT_EQ(lines[1], "Finished Training");
}

TEST_F(TrainTest, QuietPrintsNothing) {
  auto c = config("run");
  c.quiet = true;
  EXPECT_EQ(train(c), "");
  EXPECT_TRUE(fs::exists(run("run") / "model.safetensors"));
}

TEST_F(TrainTest, ProgressBarOnlyWhenAsked) {
  auto c = config("run");
  c.progress = 1;
  testing::internal::CaptureStdout();
  std::string lines = train(c);
  std::string bar = testing::internal::GetCapturedStdout();
  EXPECT_NE(bar.find("epoch 1/1"), std::string::npos) << bar;
  EXPECT_NE(bar.find('\r'), std::string::npos);
  EXPECT_NE(bar.find("\x1b[K"), std::string::npos);  // and erased again
  EXPECT_EQ(lines.find('\r'), std::string::npos);    // loss lines stay clean
  c.progress = 0;
  c.out = run("run2").string();
  testing::internal::CaptureStdout();
  train(c);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

// --freeze conv1,conv2 from --weights: those four tensors end bit-identical to the file's, every
// other parameter moves; the optimizer holds state for the trainable ones only.
TEST_F(TrainTest, FreezeKeepsTheNamedParametersFixed) {
  auto start = config("start");
  start.max_steps = 5;
  train(start);
  const std::string weights = (run("start") / "model.safetensors").string();
  auto c = config("frozen");
  c.weights = weights;
  c.freeze = "conv1, conv2";
  train(c);  // one epoch (a stopped one writes no checkpoint)
  SafetensorsFile before = load_safetensors(weights);
  SafetensorsFile after = load_safetensors((run("frozen") / "model.safetensors").string());
  for (const std::string& name : before.order) {
    const bool frozen = name.rfind("conv", 0) == 0;
    EXPECT_EQ(same_bytes(before.at(name), after.at(name)), frozen) << name;
  }
  SafetensorsFile ckpt = load_safetensors((run("frozen") / "checkpoint.safetensors").string());
  int conv_state = 0, fc_state = 0;
  for (const std::string& name : ckpt.order) {
    if (name.rfind("optim.", 0) != 0) continue;
    conv_state += name.find("conv") != std::string::npos;
    fc_state += name.find("fc") != std::string::npos;
  }
  EXPECT_EQ(conv_state, 0);
  EXPECT_EQ(fc_state, 6);  // the momentum buffers of fc1, fc2, fc3 (weight and bias)
  // A prefix is a whole name component; one that names nothing lists the model's names.
  auto bad = config("bad");
  bad.freeze = "conv";
  EXPECT_TRUE(input_error([&] { train(bad); },
                          "--freeze conv: names no parameter of lenet (its parameters start with "
                          "conv1, conv2, fc1, fc2, fc3)"));
  bad.freeze = "conv1,conv2,fc1,fc2,fc3";
  bad.out = run("bad2").string();
  EXPECT_TRUE(input_error([&] { train(bad); }, "leaves no parameter of lenet to train"));
}

TEST(ProgressBar, LineFitsTheWidthGivingUpRateThenCountsThenBar) {
  using train::fit_bar_line;
  const std::string wide = fit_bar_line("epoch 3/30", 5760, 11250, 1840, "0:03", 120);
  EXPECT_EQ(wide,
            "epoch 3/30 [###############...............]  51% 5760/11250 1840 img/s ETA 0:03");
  // 60 columns: the bar shrinks to 10 first; 40: the rate and the counts go, the bar stays.
  const std::string mid = fit_bar_line("epoch 3/30", 5760, 11250, 1840, "0:03", 60);
  EXPECT_EQ(mid, "epoch 3/30 [#####.....]  51% 5760/11250 1840 img/s ETA 0:03");
  EXPECT_EQ(mid.size(), 59u);
  const std::string narrow = fit_bar_line("epoch 3/30", 5760, 11250, 1840, "0:03", 40);
  EXPECT_EQ(narrow, "epoch 3/30 [######......]  51% ETA 0:03");
  EXPECT_EQ(fit_bar_line("epoch 3/30", 5760, 11250, 1840, "0:03", 30), "epoch 3/30  51% ETA 0:03");
  EXPECT_EQ(fit_bar_line("epoch 3/30", 5760, 11250, 1840, "0:03", 8), "epoch 3");
  for (int cols = 1; cols <= 130; ++cols)
    EXPECT_LE(static_cast<int>(fit_bar_line("val", 7, 9, 12.5, "1:02:03", cols).size()),
              std::max(cols - 1, 0))
        << cols;
}

// Validation draws a bar of its own ("val 1/1 [...]"), erased before the epoch's summary line.
TEST_F(TrainTest, ValidationHasAProgressBar) {
  auto c = config("run");
  c.progress = 1;
  c.val_split = 40;
  testing::internal::CaptureStdout();
  std::string lines = train(c);
  std::string bar = testing::internal::GetCapturedStdout();
  EXPECT_NE(bar.find("\rval 1/1 ["), std::string::npos) << bar;
  EXPECT_NE(bar.find("100% 1/1 "), std::string::npos) << bar;  // 40 images, one eval batch
  EXPECT_NE(lines.find("val_accuracy"), std::string::npos) << lines;
  EXPECT_EQ(lines.find('\r'), std::string::npos);
}

TEST_F(TrainTest, RunDirectoryHoldsModelCheckpointAndMetrics) {
  auto c = config("run");
  c.epochs = 2;
  train(c);
  // model.safetensors: PyTorch's names in PyTorch's order, with class names in the metadata.
  SafetensorsFile m = load_safetensors((run("run") / "model.safetensors").string());
  EXPECT_EQ(m.order, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight",
                                               "conv2.bias", "fc1.weight", "fc1.bias", "fc2.weight",
                                               "fc2.bias", "fc3.weight", "fc3.bias"}));
  EXPECT_EQ(m.at("fc1.weight").shape(), (Shape{120, 400}));
  EXPECT_EQ(m.at("fc1.weight").dtype(), DType::kFloat32);
  EXPECT_EQ(m.metadata.at("format"), "pt");
  EXPECT_EQ(m.metadata.at("hpcnet.model"), "lenet");
  EXPECT_EQ(nlohmann::json::parse(m.metadata.at("hpcnet.classes")).get<std::vector<std::string>>(),
            data::cifar10_class_names());

  // The checkpoint: model and momentum buffers, epoch, steps, RNG state, recipe.
  SafetensorsFile ck = load_safetensors((run("run") / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.metadata.at("hpcnet.epochs_done"), "2");
  EXPECT_EQ(ck.metadata.at("hpcnet.steps"), "100");
  EXPECT_TRUE(ck.metadata.count("hpcnet.rng_state"));
  auto cfg = nlohmann::json::parse(ck.metadata.at("hpcnet.config"));
  EXPECT_EQ(cfg.at("seed"), 0);
  EXPECT_EQ(cfg.at("batch_size"), 4);
  for (const auto& n : m.order) {
    ASSERT_TRUE(ck.contains("model." + n)) << n;
    ASSERT_TRUE(ck.contains("optim.momentum_buffer." + n)) << n;
    const Tensor& a = ck.at("model." + n);
    EXPECT_EQ(std::memcmp(a.raw_data(), m.at(n).raw_data(), a.nbytes()), 0) << n;
  }
  EXPECT_EQ(ck.tensors.size(), 20u);

  // metrics.jsonl: start, 5 log lines + 1 epoch record per epoch (other kinds may follow).
  auto lines = split_lines(read_file(run("run") / "metrics.jsonl"));
  ASSERT_GE(lines.size(), 13u);
  EXPECT_EQ(nlohmann::json::parse(lines.front()).at("event"), "start");
  int logs = 0, epochs = 0, starts = 0;
  for (const auto& l : lines) {
    auto j = nlohmann::json::parse(l);
    std::string ev = j.at("event");
    if (ev == "log") {
      ++logs;
      EXPECT_TRUE(j.at("loss").is_number());
    } else if (ev == "epoch") {
      ++epochs;
      EXPECT_EQ(j.at("steps"), 50);
      EXPECT_EQ(j.at("epoch"), epochs);
    } else if (ev == "start") {
      ++starts;
      EXPECT_EQ(j.at("train_images"), 200);
    }
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(logs, 10);
  EXPECT_EQ(epochs, 2);
  // Beside them only metrics.csv, one TensorBoard event file and the run's lock file (.lock, whose
  // flock the kernel released when the run ended; no temporary files left behind).
  EXPECT_TRUE(fs::is_regular_file(run("run") / ".lock"));
  int files = 0, events = 0;
  for (auto& e : fs::directory_iterator(run("run"))) {
    events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
    ++files;
  }
  EXPECT_TRUE(fs::is_regular_file(run("run") / "metrics.csv"));
  EXPECT_EQ(events, 1);
  EXPECT_EQ(files, 6);
}

TEST_F(TrainTest, SameSeedSameWeightsOtherSeedOtherWeights) {
  auto c = config("a");
  train(c);
  c.out = run("b").string();
  c.workers = 2;  // the data order does not depend on the workers
  train(c);
  EXPECT_EQ(read_file(run("a") / "model.safetensors"), read_file(run("b") / "model.safetensors"));
  c.out = run("c").string();
  c.seed = 1;
  train(c);
  EXPECT_NE(read_file(run("a") / "model.safetensors"), read_file(run("c") / "model.safetensors"));
}

TEST_F(TrainTest, LearnsTheColourCode) {
  auto c = config("run");
  c.epochs = 4;
  c.lr = 0.01;
  c.val_split = 50;
  train::TrainResult res;
  std::vector<std::string> lines = split_lines(train(c, &res));
  EXPECT_GT(res.val_accuracy, 40.0) << "chance is 10%";
  // The last loss line ("[4,    20] loss: 1.234") is well below the first.
  std::vector<double> losses;
  for (const std::string& line : lines) {
    const size_t at = line.find("] loss: ");
    if (at != std::string::npos) losses.push_back(std::stod(line.substr(at + 8)));
  }
  ASSERT_GE(losses.size(), 2u) << "no loss lines in the output";
  EXPECT_LT(losses.back(), losses.front() - 0.5);
}

// ---- resume ------------------------------------------------------------------------------------

// (workers, augment, threads): the final weights of 1 epoch + resume to 2 equal a straight 2-epoch
// run.
class TrainResumeTest : public TrainTest,
                        public ::testing::WithParamInterface<std::tuple<int, bool, int>> {};

TEST_P(TrainResumeTest, ResumeIsBitExact) {
  auto [workers, augment, threads] = GetParam();
  auto c = config("straight");
  c.workers = workers;
  c.augment = augment ? "true" : "false";
  c.threads = threads;
  c.epochs = 2;
  std::string straight = train(c);

  c.out = run("resumed").string();
  c.epochs = 1;
  std::string first = train(c);
  ASSERT_TRUE(fs::exists(run("resumed") / "checkpoint.safetensors"));
  c.resume = c.out;
  c.epochs = 2;
  train::TrainResult res;
  std::string second = train(c, &res);
  EXPECT_EQ(res.steps, 50);

  expect_same_tensors(run("straight") / "model.safetensors", run("resumed") / "model.safetensors");
  expect_same_tensors(run("straight") / "checkpoint.safetensors",
                      run("resumed") / "checkpoint.safetensors");
  EXPECT_EQ(read_file(run("straight") / "model.safetensors"),
            read_file(run("resumed") / "model.safetensors"));
  // The printed lines continue where the first run stopped.
  auto all = tutorial_lines(straight);
  auto a = tutorial_lines(first), b = tutorial_lines(second);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i], all[i]);
    EXPECT_EQ(b[i], all[5 + i]);
  }
  // metrics.jsonl is appended to, not replaced: two start records.
  int starts = 0;
  for (const auto& l : split_lines(read_file(run("resumed") / "metrics.jsonl")))
    starts += nlohmann::json::parse(l).at("event") == "start";
  EXPECT_EQ(starts, 2);
}

INSTANTIATE_TEST_SUITE_P(TrainResume, TrainResumeTest,
                         ::testing::Values(std::make_tuple(0, false, 1),
                                           std::make_tuple(2, false, 1),
                                           std::make_tuple(2, true, 1),
                                           std::make_tuple(2, false, 2)),
                         [](const auto& info) {
                           return "workers" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_augment" : "") + "_threads" +
                                  std::to_string(std::get<2>(info.param));
                         });

// --nbs: batches of 2 with gradients summed over round(4 / 2) = 2 of them before each step take
// the steps of batches of 4 at twice the rate (the loss is a batch mean, LeNet has no BatchNorm,
// SGD with momentum and no weight decay: the same update up to rounding); without accumulation
// the weights differ.
TEST_F(TrainTest, NominalBatchAccumulatesGradientsLikeOneLargerBatch) {
  auto c = config("accumulated");
  c.batch_size = 2;
  c.nbs = 4;
  c.lr = 0.01;
  train::TrainResult res;
  train(c, &res);
  EXPECT_EQ(res.steps, 100);  // batches
  const train::RunFile ck = train::read_run_file((run("accumulated") / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.train->steps, 100);
  EXPECT_EQ(ck.train->optimizer_steps, 50);
  EXPECT_EQ(ck.train->last_opt_step, 99);
  EXPECT_TRUE(ck.grad.empty());  // written at an optimizer step: nothing pending

  auto big = config("large_batch");
  big.batch_size = 4;
  big.lr = 0.02;
  train(big);
  auto plain = c;
  plain.out = run("not_accumulated").string();
  plain.nbs = 0;
  train(plain);
  const auto a = load_safetensors((run("accumulated") / "model.safetensors").string()).tensors;
  const auto b = load_safetensors((run("large_batch") / "model.safetensors").string()).tensors;
  const auto p = load_safetensors((run("not_accumulated") / "model.safetensors").string()).tensors;
  double diff = 0, control = 0;
  for (const auto& [name, t] : a) {
    const auto x = t.to_vector(), y = b.at(name).to_vector(), z = p.at(name).to_vector();
    for (size_t i = 0; i < x.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
      control = std::max(control, static_cast<double>(std::fabs(z[i] - y[i])));
    }
  }
  EXPECT_LT(diff, 2e-5) << control;
  EXPECT_GT(control, 100 * diff);
}

// A checkpoint written between two optimizer steps holds the gradients summed so far; resumed
// there (and at an epoch end inside an accumulation: 100 batches per epoch, steps every 3), the
// run ends bit-exactly as one without the interruption.
TEST_F(TrainTest, ResumeBetweenAccumulatedStepsIsBitExact) {
  auto c = config("straight");
  c.batch_size = 2;
  c.nbs = 6;
  c.lr = 0.01;
  c.epochs = 2;
  train(c);
  c.out = run("resumed").string();
  c.save_every = 7;
  c.max_steps = 7;  // batch 7: steps after batches 3 and 6, batch 7's gradient pending
  train(c);
  const train::RunFile ck = train::read_run_file((run("resumed") / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.train->steps, 7);
  EXPECT_EQ(ck.train->optimizer_steps, 2);
  EXPECT_EQ(ck.train->last_opt_step, 5);
  EXPECT_EQ(ck.grad.size(), 10u);  // LeNet's 10 parameters
  c.max_steps = 93;                // to the end of epoch 1 (batch 100: its step was at 99)
  c.resume = c.out;
  train(c);
  const train::RunFile end1 =
      train::read_run_file((run("resumed") / "checkpoint.safetensors").string());
  EXPECT_EQ(end1.train->epochs_done, 1);
  EXPECT_EQ(end1.train->last_opt_step, 98);
  EXPECT_FALSE(end1.grad.empty());
  c.max_steps = 0;
  train(c);
  EXPECT_EQ(read_file(run("straight") / "model.safetensors"),
            read_file(run("resumed") / "model.safetensors"));
  expect_same_tensors(run("straight") / "checkpoint.safetensors",
                      run("resumed") / "checkpoint.safetensors");
}

// A negative control for the test above: dropping the momentum buffers from the checkpoint
// changes the resumed weights, so the comparison would catch an optimizer state not restored.
TEST_F(TrainTest, ResumeWithoutMomentumStateDiffers) {
  auto c = config("straight");
  c.epochs = 2;
  train(c);
  c.out = run("resumed").string();
  c.epochs = 1;
  train(c);
  const fs::path ck = run("resumed") / "checkpoint.safetensors";
  SafetensorsFile f = load_safetensors(ck.string());
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : f.order)
    if (n.rfind("optim.", 0) != 0) ts.emplace_back(n, f.at(n));
  ASSERT_EQ(ts.size(), 10u);
  save_safetensors(ck.string(), ts, f.metadata);
  c.resume = c.out;
  c.epochs = 2;
  train(c);
  EXPECT_NE(read_file(run("straight") / "model.safetensors"),
            read_file(run("resumed") / "model.safetensors"));
}

TEST_F(TrainTest, ResumeOfAFinishedRunTrainsNothing) {
  auto c = config("run");
  train(c);
  std::string model = read_file(run("run") / "model.safetensors");
  c.resume = c.out;
  train::TrainResult res;
  EXPECT_EQ(train(c, &res), "Finished Training\n");
  EXPECT_EQ(res.steps, 0);
  EXPECT_EQ(read_file(run("run") / "model.safetensors"), model);
}

TEST_F(TrainTest, ResumeIntoAnotherDirectory) {
  auto c = config("first");
  train(c);
  c.resume = c.out;
  c.out = run("second").string();
  c.epochs = 2;
  train(c);
  EXPECT_TRUE(fs::exists(run("second") / "model.safetensors"));
  SafetensorsFile ck = load_safetensors((run("second") / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.metadata.at("hpcnet.epochs_done"), "2");
  EXPECT_EQ(ck.metadata.at("hpcnet.steps"), "100");
}

// --resume with --data: the checkpoint records the data (path, split sizes, index fingerprint).
// Other data is refused naming both, and so is the run's folder changed since; the same data moved
// elsewhere resumes (saying so) to the weights of an uninterrupted run; a checkpoint from before
// the record resumes as before.
TEST_F(TrainTest, ResumeChecksThatTheDataIsTheRunsOwn) {
  auto straight = config("straight");
  straight.epochs = 2;
  train(straight);
  auto c = config("run");
  c.save_every = 5;  // a checkpoint inside the epoch: other data used to fail in the DataLoader
  c.max_steps = 20;
  train(c);
  const fs::path ck = run("run") / "checkpoint.safetensors";
  SafetensorsFile f = load_safetensors(ck.string());
  const nlohmann::json rec = nlohmann::json::parse(f.metadata.at("hpcnet.data"));
  EXPECT_EQ(rec.at("path"), c.data);
  EXPECT_EQ(rec.at("train_images"), 200);
  EXPECT_EQ(rec.at("val_images"), 0);
  const std::string index = rec.at("index");
  const std::string model = read_file(run("run") / "model.safetensors");

  write_tiny_cifar10(dir_ / "other", 4, 4);  // 20 images
  auto rc = config("run");
  rc.resume = rc.out;
  rc.epochs = 2;
  rc.data = (dir_ / "other").string();
  std::string msg = input_error([&] { train(rc); });
  for (const std::string& part : std::vector<std::string>{
           ck.string(), "the data given is another", c.data, "200 train + 0 val images", rc.data,
           "20 train + 0 val images", index, "--weights"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(read_file(run("run") / "model.safetensors"), model);

  // The same folder, its data changed since (one label).
  fs::copy(dir_ / "data", dir_ / "moved", fs::copy_options::recursive);
  const fs::path batch = dir_ / "data" / "cifar-10-batches-bin" / "data_batch_3.bin";
  std::string bytes = read_file(batch);
  bytes[0] = static_cast<char>((bytes[0] + 1) % 10);
  write_file(batch, bytes);
  rc.data = c.data;
  msg = input_error([&] { train(rc); });
  EXPECT_NE(msg.find("that data has changed since"), std::string::npos) << msg;

  // The same data moved: resumed, saying so, to the uninterrupted run's weights; the record then
  // names the new path.
  rc.data = (dir_ / "moved").string();
  ::testing::internal::CaptureStderr();
  train(rc);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("resuming with --data " + rc.data + ": the run trained on " + c.data +
                     ", which held the same data (index " + index + ")"),
            std::string::npos)
      << err;
  EXPECT_EQ(read_file(run("run") / "model.safetensors"),
            read_file(run("straight") / "model.safetensors"));
  f = load_safetensors(ck.string());
  EXPECT_EQ(nlohmann::json::parse(f.metadata.at("hpcnet.data")).at("path"), rc.data);

  // A checkpoint without the record (written before it existed) resumes.
  auto old = config("old");
  old.max_steps = 20;
  old.save_every = 5;
  old.data = rc.data;
  train(old);
  const fs::path old_ck = run("old") / "checkpoint.safetensors";
  f = load_safetensors(old_ck.string());
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : f.order) ts.emplace_back(n, f.at(n));
  auto meta = f.metadata;
  ASSERT_EQ(meta.erase("hpcnet.data"), 1u);
  save_safetensors(old_ck.string(), ts, meta);
  auto ro = old;
  ro.resume = ro.out;
  ro.max_steps = 0;
  ro.epochs = 2;
  train(ro);
  EXPECT_EQ(read_file(run("old") / "model.safetensors"),
            read_file(run("straight") / "model.safetensors"));
}

// Every broken checkpoint is an InputError naming it, and the run directory is left as it was.
TEST_F(TrainTest, BadCheckpointsAreRefusedBeforeAnythingIsWritten) {
  auto c = config("run");
  train(c);
  const fs::path ck = run("run") / "checkpoint.safetensors";
  const std::string good = read_file(ck);
  const std::string model = read_file(run("run") / "model.safetensors");
  const std::string metrics = read_file(run("run") / "metrics.jsonl");
  SafetensorsFile f = load_safetensors(ck.string());
  auto resave = [&](const std::function<void(std::vector<std::pair<std::string, Tensor>>&,
                                             std::map<std::string, std::string>&)>& edit) {
    std::vector<std::pair<std::string, Tensor>> ts;
    for (const auto& n : f.order) ts.emplace_back(n, f.at(n));
    auto meta = f.metadata;
    edit(ts, meta);
    save_safetensors(ck.string(), ts, meta);
  };
  auto rc = config("run");
  rc.resume = rc.out;
  rc.epochs = 2;
  auto expect_refused = [&](const std::string& what, std::initializer_list<std::string> parts) {
    std::string msg = input_error([&] { train(rc); });
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": one line";
    EXPECT_EQ(read_file(run("run") / "model.safetensors"), model) << what;
    EXPECT_EQ(read_file(run("run") / "metrics.jsonl"), metrics) << what;
  };

  write_file(ck, good.substr(0, good.size() / 2));
  expect_refused("truncated", {"checkpoint.safetensors", "truncated"});
  write_file(ck, "");
  expect_refused("empty", {"checkpoint.safetensors"});
  write_file(ck, model);  // weights only, not a checkpoint
  expect_refused("model file", {"checkpoint.safetensors", "not an hpcnet checkpoint"});
  resave([](auto& ts, auto&) { ts[4].second = Tensor::zeros({120, 401}); });  // model.fc1.weight
  expect_refused("wrong shape", {"checkpoint.safetensors", "fc1.weight", "(120, 401)"});
  resave([](auto& ts, auto&) { ts.erase(ts.begin() + 2); });  // model.conv2.weight
  expect_refused("missing tensor", {"checkpoint.safetensors", "conv2.weight"});
  resave([](auto& ts, auto&) {
    ts.emplace_back("optim.momentum_buffer.fc9.weight", Tensor::zeros({2}));
  });
  expect_refused("unexpected optimizer state", {"checkpoint.safetensors", "fc9"});
  resave([](auto&, auto& meta) { meta["hpcnet.model"] = "resnet20"; });
  expect_refused("other model", {"checkpoint.safetensors", "resnet20"});
  resave([](auto&, auto& meta) { meta["hpcnet.epochs_done"] = "one"; });
  expect_refused("bad epoch", {"checkpoint.safetensors", "epoch"});
  resave([](auto&, auto& meta) { meta.erase("hpcnet.rng_state"); });
  expect_refused("no rng state", {"checkpoint.safetensors", "rng"});
  fs::remove(ck);
  expect_refused("no checkpoint", {run("run").string(), "checkpoint.safetensors"});

  // The intact checkpoint still resumes.
  write_file(ck, good);
  EXPECT_NO_THROW(train(rc));
}

// ---- --steps -----------------------------------------------------------------------------------

TEST_F(TrainTest, MaxStepsStopsMidEpochWithoutACheckpoint) {
  auto c = config("run");
  c.epochs = 2;
  c.max_steps = 7;
  c.log_every = 5;
  train::TrainResult res;
  auto lines = split_lines(train(c, &res));
  EXPECT_EQ(res.steps, 7);
  EXPECT_EQ(res.images, 28);
  EXPECT_EQ(lines, (std::vector<std::string>{lines[0], "Finished Training"}));
  EXPECT_TRUE(fs::exists(run("run") / "model.safetensors"));
  EXPECT_FALSE(fs::exists(run("run") / "checkpoint.safetensors"));  // a partial epoch
}

TEST_F(TrainTest, MaxStepsAtAnEpochEndCheckpointsThatEpoch) {
  auto c = config("straight");
  c.epochs = 2;
  train(c);
  c.out = run("stepped").string();
  c.max_steps = 50;  // exactly one epoch
  train::TrainResult res;
  train(c, &res);
  EXPECT_EQ(res.steps, 50);
  ASSERT_TRUE(fs::exists(run("stepped") / "checkpoint.safetensors"));
  SafetensorsFile ck = load_safetensors((run("stepped") / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.metadata.at("hpcnet.epochs_done"), "1");
  c.max_steps = 0;
  c.resume = c.out;
  train(c);
  expect_same_tensors(run("straight") / "model.safetensors", run("stepped") / "model.safetensors");
}

// ---- val split, evaluate, save/load ------------------------------------------------------------

TEST_F(TrainTest, ValSplitHoldsOutImagesAndReportsAccuracy) {
  auto c = config("run");
  c.val_split = 40;
  train::TrainResult res;
  train(c, &res);
  EXPECT_EQ(res.images, 160);
  EXPECT_GE(res.val_accuracy, 0.0);
  EXPECT_LE(res.val_accuracy, 100.0);
  auto lines = split_lines(read_file(run("run") / "metrics.jsonl"));
  auto start = nlohmann::json::parse(lines.front());
  EXPECT_EQ(start.at("train_images"), 160);
  EXPECT_EQ(start.at("val_images"), 40);
  nlohmann::json epoch;
  for (const auto& l : lines)
    if (auto j = nlohmann::json::parse(l); j.at("event") == "epoch") epoch = j;
  ASSERT_TRUE(epoch.is_object());
  EXPECT_DOUBLE_EQ(epoch.at("val_accuracy").get<double>(), res.val_accuracy);

  // The model file records the split; evaluating its val images gives the same accuracy.
  train::LoadedModel m = train::load_model((run("run") / "model.safetensors").string());
  EXPECT_EQ(m.val_split, 40);
  auto full = data::open_dataset("cifar10", c.data, "train");
  auto val = std::make_shared<data::Subset>(full, data::split_train_val(200, 40).val);
  data::DataLoaderOptions o;
  o.batch_size = 16;
  data::DataLoader loader(val, train::eval_transform(), o);
  train::EvalResult r = train::evaluate(*m.module, loader);
  EXPECT_EQ(r.total, 40);
  EXPECT_DOUBLE_EQ(r.accuracy(), res.val_accuracy);

  // A split that leaves nothing to train on is refused before the run directory exists.
  c.out = run("run2").string();
  c.val_split = 200;
  std::string msg = input_error([&] { train(c); });
  EXPECT_NE(msg.find("--val-split"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(run("run2")));
}

TEST(Eval, FlipLeftRightMirrorsEveryRow) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor x = Tensor::empty({2, 2, 3, 4}, dt);
    Tensor x64 = Tensor::empty({2, 2, 3, 4}, DType::kFloat64);
    for (int64_t i = 0; i < x.numel(); ++i) x64.data<double>()[i] = static_cast<double>(i);
    x.copy_(x64);
    Tensor y = train::flip_left_right(x).to(DType::kFloat64);
    EXPECT_EQ(y.shape(), x.shape());
    const double* py = y.data<double>();
    for (int64_t r = 0; r < 2 * 2 * 3; ++r)
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(py[r * 4 + j], r * 4 + (3 - j)) << r << " " << j;
  }
  EXPECT_THROW(train::flip_left_right(Tensor::zeros({3, 4})), Error);
}

TEST_F(TrainTest, EvaluateWithFlipTtaSumsTheLogitsOfEachImageAndItsMirror) {
  // A fresh network with its weights scaled up, so that its predictions vary from image to image
  // (a briefly trained one predicts one class for these 40 images, mirrored or not).
  auto c = config("run");
  manual_seed(0);
  auto model = nn::make_model("lenet");
  for (auto& [name, p] : model->named_parameters()) {
    float* v = p.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) v[i] *= 4.f;
  }
  model->eval();
  auto test = data::open_dataset("cifar10", c.data, "test");
  data::DataLoaderOptions o;
  o.batch_size = 16;
  auto loader_of = [&](std::shared_ptr<data::Dataset> ds) {
    return std::make_unique<data::DataLoader>(ds, train::eval_transform(), o);
  };
  // By hand, image by image: the argmax of logits(x) + logits(mirror of x) against logits(x)'s.
  std::vector<int64_t> differ;  // right in one mode, wrong in the other
  int64_t gained = 0;           // of those, right with the mirror
  int64_t correct = 0, seen = 0;
  {
    NoGradGuard no_grad;
    auto loader = loader_of(test);
    loader->begin_epoch(0);
    data::Batch b;
    while (loader->next(b)) {
      Tensor l1 = model->forward(b.images);
      Tensor l2 = model->forward(train::flip_left_right(b.images));
      Tensor both = F::argmax(F::add(l1, l2)), one = F::argmax(l1);
      for (int64_t i = 0; i < b.size; ++i, ++seen) {
        const int64_t label = b.labels.data<int64_t>()[i];
        correct += both.data<int64_t>()[i] == label;
        const bool r2 = both.data<int64_t>()[i] == label, r1 = one.data<int64_t>()[i] == label;
        if (r1 != r2) differ.push_back(seen);
        gained += r2 && !r1;
      }
    }
  }
  train::EvalResult tta = train::evaluate(*model, *loader_of(test), true);
  EXPECT_EQ(tta.total, 40);
  EXPECT_EQ(tta.correct, correct);
  // On the images where exactly one mode is right, each mode scores its own ones.
  ASSERT_FALSE(differ.empty()) << "the mirror changes no outcome: the test shows nothing";
  auto sub = std::make_shared<data::Subset>(test, differ);
  EXPECT_EQ(train::evaluate(*model, *loader_of(sub), true).correct, gained);
  EXPECT_EQ(train::evaluate(*model, *loader_of(sub)).correct,
            static_cast<int64_t>(differ.size()) - gained);
}

TEST_F(TrainTest, EvaluateCountsPerClass) {
  auto c = config("run");
  c.lr = 0.01;
  train(c);
  train::LoadedModel m = train::load_model((run("run") / "model.safetensors").string(), "lenet");
  EXPECT_FALSE(m.module->is_training());
  EXPECT_EQ(m.classes, data::cifar10_class_names());
  auto test = data::open_dataset("cifar10", c.data, "test");
  data::DataLoaderOptions o;
  o.batch_size = 16;  // 40 = 16 + 16 + 8
  data::DataLoader loader(test, train::eval_transform(), o);
  train::EvalResult r = train::evaluate(*m.module, loader);
  EXPECT_EQ(r.total, 40);
  ASSERT_EQ(r.class_total.size(), 10u);
  int64_t total = 0, correct = 0;
  for (size_t k = 0; k < 10; ++k) {
    EXPECT_LE(r.class_correct[k], r.class_total[k]);
    total += r.class_total[k];
    correct += r.class_correct[k];
  }
  EXPECT_EQ(total, 40);
  EXPECT_EQ(correct, r.correct);
  // The same as counting argmax by hand over the whole split.
  Tensor x = Tensor::empty({40, 3, 32, 32});
  std::vector<int64_t> labels;
  data::Compose tf = train::eval_transform();
  for (int64_t i = 0; i < 40; ++i) {
    tf.apply(test_util::item(*test, i), 0, x.data<float>() + i * 3072);
    labels.push_back(test_util::item(*test, i).label);
  }
  NoGradGuard ng;
  Tensor pred = F::argmax(m.module->forward(x));
  int64_t by_hand = 0;
  for (int64_t i = 0; i < 40; ++i) by_hand += pred.data<int64_t>()[i] == labels[i];
  EXPECT_EQ(by_hand, r.correct);
}

TEST_F(TrainTest, SaveAndLoadModelKeepNamesClassesAndWeights) {
  manual_seed(3);
  auto model = nn::make_model("lenet", 3);
  const std::string path = (dir_ / "m.safetensors").string();
  train::save_model(path, *model, "lenet", {"cat", "dog", "emu"}, 7);
  train::LoadedModel m = train::load_model(path);
  EXPECT_EQ(m.name, "lenet");
  EXPECT_EQ(m.classes, (std::vector<std::string>{"cat", "dog", "emu"}));
  EXPECT_EQ(m.val_split, 7);
  auto a = model->named_parameters(), b = m.module->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector());

  std::string msg = input_error([&] { train::load_model(path, "resnet20"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("resnet20"), std::string::npos) << msg;

  // A file with other tensors: named, with the key at fault.
  save_safetensors(path, {{"weight", Tensor::zeros({2, 2})}}, {{"hpcnet.model", "lenet"}});
  msg = input_error([&] { train::load_model(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("conv1.weight"), std::string::npos) << msg;
  // No model name anywhere.
  save_safetensors(path, model->state_dict(), {});
  msg = input_error([&] { train::load_model(path); });
  EXPECT_NE(msg.find("--model"), std::string::npos) << msg;
  // Plain PyTorch weights (no metadata) load with the model named: 10 CIFAR-10 classes.
  auto ten = nn::make_model("lenet");
  save_safetensors(path, ten->state_dict(), {});
  EXPECT_EQ(train::load_model(path, "lenet").classes, data::cifar10_class_names());
}

// ---- refusals before anything is written
// ---------------------------------------------------------

TEST_F(TrainTest, BadConfigsAreInputErrorsAndWriteNothing) {
  struct Case {
    const char* what;
    std::function<void(train::TrainConfig&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"batch 0", [](auto& c) { c.batch_size = 0; }, "--batch-size"},
      {"negative lr", [](auto& c) { c.lr = -0.1; }, "--lr"},
      {"nan lr", [](auto& c) { c.lr = std::nan(""); }, "--lr"},
      {"epochs 0", [](auto& c) { c.epochs = 0; }, "--epochs"},
      {"momentum", [](auto& c) { c.momentum = -1; }, "--momentum"},
      {"workers", [](auto& c) { c.workers = -1; }, "--workers"},
      {"threads", [](auto& c) { c.threads = -2; }, "--threads"},
      {"log every", [](auto& c) { c.log_every = 0; }, "--log-every"},
      {"model", [](auto& c) { c.model = "vgg"; }, "vgg"},
      {"dataset", [](auto& c) { c.dataset = "mnist"; }, "mnist"},
      {"no data", [](auto& c) { c.data = ""; }, "--data"},
      {"no out", [](auto& c) { c.out = ""; }, "--out"},
      {"cuda", [](auto& c) { c.device = "cuda:99"; }, "cuda:99"},
      {"device", [](auto& c) { c.device = "tpu"; }, "tpu"},
      {"nesterov",
       [](auto& c) {
         c.nesterov = true;
         c.momentum = 0;
       },
       "nesterov"},
      {"missing data", [](auto& c) { c.data += "/nowhere"; }, "nowhere"},
  };
  for (const auto& k : cases) {
    auto c = config("run");
    k.edit(c);
    std::string msg = input_error([&] { train(c); });
    EXPECT_NE(msg.find(k.expect), std::string::npos) << k.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << k.what;
    EXPECT_FALSE(fs::exists(run("run"))) << k.what;
  }
  // An --out that cannot be a directory.
  write_file(dir_ / "file", "x");
  auto c = config("file");
  std::string msg = input_error([&] { train(c); });
  EXPECT_NE(msg.find("--out"), std::string::npos) << msg;
}

TEST_F(TrainTest, BadDataIsAnInputErrorNamingTheFileAndWritesNothing) {
  const fs::path b = dir_ / "data" / "cifar-10-batches-bin";
  auto c = config("run");
  auto expect_refused = [&](const std::string& what, std::initializer_list<std::string> parts) {
    std::string msg = input_error([&] { train(c); });
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << what << ": " << msg;
    EXPECT_FALSE(fs::exists(run("run"))) << what;
  };
  // Truncated: not a multiple of 3073 bytes.
  std::string good = read_file(b / "data_batch_3.bin");
  write_file(b / "data_batch_3.bin", good.substr(0, good.size() - 100));
  expect_refused("truncated", {"data_batch_3.bin", "3073"});
  // A label of 10.
  std::string bad = good;
  bad[3073 * 7] = 10;
  write_file(b / "data_batch_3.bin", bad);
  expect_refused("label", {"data_batch_3.bin", "record 7", "10"});
  write_file(b / "data_batch_3.bin", good);
  // Empty and missing files.
  write_file(b / "data_batch_5.bin", "");
  expect_refused("empty", {"data_batch_5.bin"});
  fs::remove(b / "data_batch_5.bin");
  expect_refused("missing", {"data_batch_5.bin"});
}

TEST(TrainDevice, ResolveDevice) {
  EXPECT_TRUE(train::resolve_device("cpu").is_cpu());
  if (cuda_available()) {  // a GPU machine: auto is the GPU, a missing index is refused
    EXPECT_FALSE(train::resolve_device("auto").is_cpu());
    EXPECT_FALSE(train::resolve_device("cuda").is_cpu());
    EXPECT_THROW(train::resolve_device("cuda:99"), InputError);
    EXPECT_THROW(train::resolve_device("gpu"), InputError);
    return;
  }
  EXPECT_TRUE(train::resolve_device("auto").is_cpu());
  for (const char* d : {"cuda", "cuda:1"}) {
    try {
      train::resolve_device(d);
      ADD_FAILURE() << d << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(train::resolve_device("gpu"), InputError);
}

// A learning-rate schedule is a function of the global step, so resuming keeps it exact too.
TEST_F(TrainTest, ResumeWithAScheduleIsBitExact) {
  for (const char* kind : {"cosine", "onecycle", "multistep"}) {
    auto c = config(std::string("straight_") + kind);
    c.lr = 0.05;
    c.lr_schedule = kind;
    c.milestones = {1, 2};
    c.warmup_epochs = std::string(kind) == "cosine" ? 1 : 0;
    c.label_smoothing = 0.1;
    c.epochs = 3;
    train(c);
    // Interrupted after 2 of the 3 epochs (50 steps each), then resumed with the same recipe.
    c.out = run(std::string("resumed_") + kind).string();
    c.max_steps = 100;
    train(c);
    c.max_steps = 0;
    c.resume = c.out;
    train(c);
    EXPECT_EQ(read_file(run(std::string("straight_") + kind) / "model.safetensors"),
              read_file(run(std::string("resumed_") + kind) / "model.safetensors"))
        << kind;
  }
}

// ---- lazy data and --cache -------------------------------------------------------------------

// A photograph-like image folder (JPEGs and PNGs of several sizes, larger than the model's input,
// so JPEGs decode at a reduced DCT scale), trained with --cache none, ram and disk and from the
// same files as an uncompressed tar: the weights are the same bytes every time, and the epoch's
// record says how many images this rank read.
TEST_F(TrainTest, CacheModesAndATarTrainToIdenticalWeights) {
  const fs::path root = dir_ / "photos";
  for (int k = 0; k < 24; ++k) {
    const int w = 70 + 7 * (k % 5), h = 64 + 5 * (k % 3);
    const fs::path f = root / "train" / (k % 2 ? "cat" : "dog") /
                       ("img" + std::to_string(k) + (k % 4 == 3 ? ".png" : ".jpg"));
    fs::create_directories(f.parent_path());
    const std::vector<uint8_t> px = noisy_pixels(w, h, k % 2 ? 200 : 60, 120, k % 2 ? 40 : 190,
                                                 static_cast<uint64_t>(k), 0, 40);
    if (k % 4 == 3)
      write_png_file(f, w, h, px);
    else
      write_jpeg_file(f, w, h, px);
  }
  ASSERT_EQ(std::system(("tar -cf " + shell_quote((dir_ / "photos.tar").string()) + " -C " +
                         shell_quote(root.string()) + " train")
                            .c_str()),
            0);
  auto run_with = [&](const std::string& name, const std::string& data, const std::string& cache) {
    auto c = config(name);
    c.model = "lenet";
    c.dataset = "imagefolder";
    c.data = data;
    c.imgsz = 32;
    c.augment = "cifar";
    c.workers = 2;
    c.cache = cache;
    c.cache_dir = (dir_ / "cache").string();
    const std::string out = train(c);
    EXPECT_NE(out.find("cache: " + cache), std::string::npos) << out;
    if (cache == "ram")
      EXPECT_NE(out.find("images at 32x32 (the training size)"), std::string::npos) << out;
    return read_file(run(name) / "model.safetensors");
  };
  const std::string none = run_with("none", root.string(), "none");
  EXPECT_EQ(run_with("ram", root.string(), "ram"), none);
  EXPECT_EQ(run_with("disk", root.string(), "disk"), none);
  EXPECT_EQ(run_with("disk_again", root.string(), "disk"), none);  // the cache file reused
  // Both caches keep the images at the size the pipelines first resize them to (32x32): the
  // cache file holds 24 such images (3,072 bytes each), its header and its index, nothing more.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "cache")) {
    const std::string name = e.path().filename().string();
    if (name.size() < 14 || name.substr(name.size() - 14) != "-32x32.hpcache") continue;
    ++files;
    EXPECT_EQ(fs::file_size(e.path()), 24u + 24u * 32 * 32 * 3 + 24u * 24) << name;
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(run_with("tar", (dir_ / "photos.tar").string(), "none"), none);
  std::ifstream metrics(run("none") / "metrics.jsonl");
  bool seen = false;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("event", "") != "epoch") continue;
    seen = true;
    EXPECT_EQ(j.at("images_read_per_rank"), nlohmann::json::array({24.0}));
    EXPECT_GE(j.at("data_wait_share").get<double>(), 0.0);
  }
  EXPECT_TRUE(seen);
}

// CUDA runs keep the losses on the device and read them when a line is printed, a checkpoint
// written or an epoch ends (Trainer::defer_loss_; HPCNET_DEFER_LOSS=1 takes that path on the CPU):
// the same loss lines, epoch losses and weights, bit for bit, and a diverging run stops naming
// the same step.
TEST_F(TrainTest, DeferredLossReadsGiveTheSameRunAndTheSameNanStep) {
  struct DeferGuard {
    explicit DeferGuard(const char* v) { ::setenv("HPCNET_DEFER_LOSS", v, 1); }
    ~DeferGuard() { ::unsetenv("HPCNET_DEFER_LOSS"); }
  };
  auto c = config("now");
  c.epochs = 2;
  c.save_every = 7;  // mid-epoch checkpoints read the pending losses first
  train::TrainResult r_now, r_later;
  const std::string now = train(c, &r_now);
  std::string later;
  {
    DeferGuard defer("1");
    c.out = run("later").string();
    later = train(c, &r_later);
  }
  EXPECT_FALSE(r_now.deferred_loss_reads);  // the CPU reads each loss at once by default
  EXPECT_TRUE(r_later.deferred_loss_reads);
  EXPECT_EQ(tutorial_lines(later), tutorial_lines(now));
  EXPECT_EQ(read_file(run("later") / "model.safetensors"), read_file(run("now") / "model.safetensors"));
  auto train_losses = [](const fs::path& metrics) {
    std::vector<double> v;
    std::istringstream in(read_file(metrics));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("train_loss")) v.push_back(j["train_loss"].get<double>());
    }
    return v;
  };
  EXPECT_EQ(train_losses(run("later") / "metrics.jsonl"), train_losses(run("now") / "metrics.jsonl"));
  EXPECT_EQ(train_losses(run("now") / "metrics.jsonl").size(), 2u);

  auto diverge = [&](const std::string& name) {
    auto d = config(name);
    d.lr = 1e12;
    try {
      train(d);
    } catch (const Error& e) {
      const std::string what = e.what();
      return what.substr(0, what.find(';'));
    }
    return std::string("no error");
  };
  const std::string stop_now = diverge("nan-now");
  std::string stop_later;
  {
    DeferGuard defer("1");
    stop_later = diverge("nan-later");
  }
  EXPECT_NE(stop_now.find("loss became "), std::string::npos) << stop_now;
  EXPECT_EQ(stop_later, stop_now);
}
