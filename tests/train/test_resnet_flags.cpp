// The `hpcnet train` flags of the ResNet recipe end to end (the binary on a tiny CIFAR-10): AdamW +
// EMA + gradient clipping + Cutout write their state, --resume with them is bit-exact, and bad
// values of each flag exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

// ---- `hpcnet train` end to end -----------------------------------------------------------------

namespace {

// 5 x 16 training images (16 held out as val: 4 steps of 16 per epoch) and 16 test images, and
// the uninterrupted 2-epoch run, made once per process.
struct RsShared {
  TempDir tmp{"resnet_shared"};
  fs::path dir = tmp.path();
  RsShared() { write_tiny_cifar10(dir / "cifar", 16, 16); }
  fs::path cifar() const { return dir / "cifar"; }
  const RunResult& straight() {
    if (straight_.rc < 0) straight_ = run_hpcnet(args(dir / "straight", 2), dir);
    return straight_;
  }
  fs::path straight_dir() {
    straight();
    return dir / "straight";
  }
  std::vector<std::string> args(const fs::path& out, int epochs) const {
    return {"train",
            "--model",
            "resnet20",
            "--data",
            cifar().string(),
            "--out",
            out.string(),
            "--epochs",
            std::to_string(epochs),
            "--batch-size",
            "16",
            "--optimizer",
            "adamw",
            "--lr",
            "1e-3",
            "--weight-decay",
            "0.05",
            "--ema-decay",
            "0.9",
            "--clip-grad-norm",
            "1",
            "--cutout",
            "8",
            "--augment",
            "--val-split",
            "16",
            "--workers",
            "0",
            "--threads",
            "1",
            "--seed",
            "0",
            "--log-every",
            "1000"};
  }

 private:
  RunResult straight_;
};

RsShared& rs_shared() {
  static RsShared s;
  return s;
}

class ResnetCli : public ::testing::Test {
 protected:
  TempDir tmp_{"resnet_t"};
  fs::path dir_ = tmp_.path();
};

}  // namespace

TEST_F(ResnetCli, AdamWEmaClipCutoutRunWritesTheirState) {
  const RunResult& r = rs_shared().straight();
  ASSERT_EQ(r.rc, 0) << r.out << "\n" << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
  const fs::path d = rs_shared().straight_dir();

  int epochs = 0;
  for (const auto& l : split_lines(read_file(d / "metrics.jsonl"))) {
    auto j = nlohmann::json::parse(l);
    if (j.at("event") == "start") {
      EXPECT_EQ(j.at("train_images"), 64);
      EXPECT_EQ(j.at("val_images"), 16);
      EXPECT_EQ(j.at("config").at("optimizer"), "adamw") << l;
    }
    if (j.at("event") != "epoch") continue;
    ++epochs;
    EXPECT_EQ(j.at("steps"), 4) << l;
    ASSERT_TRUE(j.contains("val_accuracy")) << l;
    double acc = j.at("val_accuracy");
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 100.0);
    EXPECT_TRUE(std::isfinite(j.at("train_loss").get<double>())) << l;
  }
  EXPECT_EQ(epochs, 2);

  SafetensorsFile ck = load_safetensors((d / "checkpoint.safetensors").string());
  SafetensorsFile model = load_safetensors((d / "model.safetensors").string());
  int n_model = 0, n_ema = 0, n_avg = 0, n_avg_sq = 0, n_momentum = 0;
  for (const auto& n : ck.order) {
    n_model += n.rfind("model.", 0) == 0;
    n_ema += n.rfind("ema.", 0) == 0;
    n_avg += n.rfind("optim.exp_avg.", 0) == 0;
    n_avg_sq += n.rfind("optim.exp_avg_sq.", 0) == 0;
    n_momentum += n.rfind("optim.momentum_buffer.", 0) == 0;
  }
  auto m = nn::make_model("resnet20");
  const int n_state = static_cast<int>(m->state_dict().size());
  const int n_params = static_cast<int>(m->named_parameters().size());
  EXPECT_EQ(n_model, n_state);
  EXPECT_EQ(n_ema, n_state);
  EXPECT_EQ(n_avg, n_params);
  EXPECT_EQ(n_avg_sq, n_params);
  EXPECT_EQ(n_momentum, 0);
  EXPECT_TRUE(ck.contains("ema.conv1.weight"));
  EXPECT_TRUE(ck.contains("optim.exp_avg.conv1.weight"));
  // The model file holds the averaged weights (the EMA), which differ from the trained ones.
  ASSERT_EQ(static_cast<int>(model.order.size()), n_state);
  bool any_diff = false;
  for (const auto& n : model.order) {
    ASSERT_TRUE(ck.contains("ema." + n)) << n;
    EXPECT_TRUE(same_bytes(model.at(n), ck.at("ema." + n))) << n;
    any_diff |= !same_bytes(ck.at("model." + n), ck.at("ema." + n));
  }
  EXPECT_TRUE(any_diff) << "EMA equals the trained weights: no averaging happened";
}

TEST_F(ResnetCli, ResumeWithAdamWAndEmaIsBitExact) {
  const fs::path straight = rs_shared().straight_dir();
  ASSERT_EQ(rs_shared().straight().rc, 0) << rs_shared().straight().err;
  const fs::path resumed = dir_ / "resumed";
  RunResult first = run_hpcnet(rs_shared().args(resumed, 1), dir_);
  ASSERT_EQ(first.rc, 0) << first.err;
  ASSERT_TRUE(fs::exists(resumed / "checkpoint.safetensors"));
  auto args = rs_shared().args(resumed, 2);
  args.insert(args.end(), {"--resume", resumed.string()});
  RunResult second = run_hpcnet(args, dir_);
  ASSERT_EQ(second.rc, 0) << second.err;

  EXPECT_EQ(read_file(straight / "model.safetensors"), read_file(resumed / "model.safetensors"))
      << "model.safetensors differs from the uninterrupted run";
  expect_same_tensors(straight / "checkpoint.safetensors", resumed / "checkpoint.safetensors");
}

TEST_F(ResnetCli, BadValuesOfTheNewFlagsExitTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--optimizer", "adam"}, "--optimizer"},
      {{"--precision", "fp16"}, "--precision"},
      {{"--ema-decay", "1.5"}, "--ema-decay"},
      {{"--cutout", "-1"}, "--cutout"}};
  for (const auto& [extra, flag] : cases) {
    const fs::path out = dir_ / ("run" + flag);
    std::vector<std::string> args = {
        "train", "--model",    "resnet20", "--data", rs_shared().cifar().string(),
        "--out", out.string(), "--epochs", "1",      "--threads",
        "1",     "--workers",  "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = run_hpcnet(args, dir_);
    const std::string what = extra[0] + " " + extra[1];
    expect_refused(r, what, {flag});
    EXPECT_FALSE(fs::exists(out)) << what << ": a run directory was written";
  }
}
