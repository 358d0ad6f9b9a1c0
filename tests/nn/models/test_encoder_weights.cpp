// --encoder-weights (nn::load_encoder_weights, src/nn/models/encoder_weights.cpp): torchvision's
// ImageNet ResNet state_dict into a U-Net's encoder or DeepLabV3's backbone, as smp's
// encoder_weights="imagenet" (fc dropped, the rest strict). The state dicts are made here: the
// names and shapes of hpcnet's torchvision ResNets (held to torchvision's by
// test_torchvision_resnet.cpp) filled from the golden formula. Checked: the encoder's every tensor
// equals the file's and nothing else moves; one-line errors for another depth, a missing key, a
// wrong shape, a whole model's file and a model without an encoder; the segment task's ImageNet
// normalisation; and through the binary, train --encoder-weights (its line, the model file's
// tensors and normalisation, eval of it) and its refusals.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <variant>

#include "hpcnet/data.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/task.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

using State = std::map<std::string, Tensor>;

// torchvision's resnetNN(num_classes=1000) state_dict names and shapes (fc included), every tensor
// from the formula of the golden fixtures.
State torchvision_state(const std::string& resnet) {
  auto m = nn::make_model(resnet, nn::ModelOptions{1000});
  State s;
  for (auto& [name, t] : m->state_dict()) {
    fill_from_formula(name, t);
    s.emplace(name, t);
  }
  return s;
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector_f64() == b.to_vector_f64();
}

// Loads state into a fresh model_name and checks that every tensor under prefix + "." equals the
// file's, and every other tensor is the one the model was made with. Returns the line said.
std::string load_and_compare(const std::string& model_name, const std::string& prefix,
                             const State& state) {
  auto m = nn::make_model(model_name, nn::ModelOptions{3});
  std::map<std::string, Tensor> before;
  for (auto& [n, t] : m->state_dict()) before.emplace(n, t.clone());
  const std::string line = nn::load_encoder_weights(*m, model_name, state, "--encoder-weights F");
  size_t loaded = 0;
  for (auto& [n, t] : m->state_dict()) {
    if (n.rfind(prefix + ".", 0) == 0) {
      const std::string key = n.substr(prefix.size() + 1);
      EXPECT_TRUE(state.count(key)) << n;
      if (state.count(key)) EXPECT_TRUE(equal(t, state.at(key))) << n;
      ++loaded;
    } else {
      EXPECT_TRUE(equal(t, before.at(n))) << n << " moved";
    }
  }
  EXPECT_EQ(loaded + 2, state.size()) << model_name;  // all but fc.weight and fc.bias
  return line;
}

// The message of the InputError that load_encoder_weights throws ("" when none).
std::string error_of(const std::string& model_name, const State& state) {
  auto m = nn::make_model(model_name, nn::ModelOptions{3});
  try {
    nn::load_encoder_weights(*m, model_name, state, "--encoder-weights F");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void expect_one_line(const std::string& msg, std::initializer_list<std::string> parts) {
  EXPECT_FALSE(msg.empty());
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " not in: " << msg;
}

}  // namespace

TEST(EncoderWeights, Resnet18FileLoadsIntoUnetEncoderExactly) {
  TempDir d("encw");
  const State s = torchvision_state("resnet18");
  std::vector<std::pair<std::string, Tensor>> ordered(s.begin(), s.end());
  save_safetensors((d / "r18.safetensors").string(), ordered);
  const SafetensorsFile f = load_safetensors((d / "r18.safetensors").string());
  EXPECT_EQ(f.tensors.size(), 122u);  // 62 parameters, 60 BatchNorm buffers (fc included)
  const std::string line = load_and_compare("unet_resnet18", "encoder", f.tensors);
  expect_one_line(line, {"--encoder-weights F", "resnet18", "unet_resnet18's encoder",
                         "120 tensors", "fc left out"});
}

TEST(EncoderWeights, Resnet34And50IntoUnetsAndDeeplabBackbone) {
  load_and_compare("unet_resnet34", "encoder", torchvision_state("resnet34"));
  const State r50 = torchvision_state("resnet50");
  load_and_compare("unet_resnet50", "encoder", r50);
  const std::string line = load_and_compare("deeplabv3_resnet50", "backbone", r50);
  expect_one_line(line, {"resnet50", "deeplabv3_resnet50's backbone"});
}

TEST(EncoderWeights, ErrorsAreOneLineAndSayWhatDiffers) {
  const State r18 = torchvision_state("resnet18");
  // Another depth: named.
  expect_one_line(error_of("unet_resnet34", r18),
                  {"--encoder-weights F", "holds torchvision's resnet18",
                   "unet_resnet34's encoder is a resnet34", "missing 'layer1.2."});
  expect_one_line(error_of("deeplabv3_resnet50", torchvision_state("resnet34")),
                  {"holds torchvision's resnet34", "backbone is a resnet50"});
  // A missing tensor (BatchNorm buffers count: smp loads strictly).
  State s = r18;
  s.erase("layer4.1.bn2.running_var");
  expect_one_line(error_of("unet_resnet18", s),
                  {"not torchvision's resnet18", "missing 'layer4.1.bn2.running_var'"});
  // A shape that differs, and a key left over.
  s = r18;
  s["conv1.weight"] = Tensor::zeros({64, 3, 3, 3});
  s["layer5.0.conv1.weight"] = Tensor::zeros({1});
  expect_one_line(error_of("unet_resnet18", s),
                  {"unexpected 'layer5.0.conv1.weight'",
                   "'conv1.weight' has shape (64, 3, 3, 3), the encoder's (64, 3, 7, 7)"});
  // A whole model's file (a U-Net's names), and a model without an encoder.
  State unet;
  for (auto& [n, t] : nn::make_model("unet_resnet18", nn::ModelOptions{3})->state_dict())
    unet.emplace(n, t);
  expect_one_line(error_of("unet_resnet18", unet),
                  {"not a torchvision ResNet state_dict", "no conv1.weight", "--weights"});
  expect_one_line(error_of("resnet18", r18),
                  {"model resnet18 has no ImageNet ResNet encoder", "unet_resnet18",
                   "unet_resnet50", "deeplabv3_resnet50"});
  // fc is dropped whatever its shape (another class count).
  s = r18;
  s["fc.weight"] = Tensor::zeros({7, 512});
  s["fc.bias"] = Tensor::zeros({7});
  EXPECT_EQ(error_of("unet_resnet18", s), "");
}

TEST(EncoderWeights, SegmentTaskNormalisesWithImageNetsMeanAndStd) {
  task::TaskOptions o;
  o.imgsz = 32;
  auto last_normalize = [](const data::Compose& c) {
    const auto* n = std::get_if<data::Normalize>(&c.transforms().back());
    EXPECT_NE(n, nullptr);
    return n ? *n : data::Normalize{};
  };
  auto plain = task::make_task("segment", o);
  EXPECT_EQ(last_normalize(plain->eval_transform()).mean[0], 0.5f);
  o.segment.imagenet_normalize = true;
  o.augment = "default";
  auto imagenet = task::make_task("segment", o);
  for (const data::Compose& c : {imagenet->train_transform(), imagenet->eval_transform()}) {
    const data::Normalize n = last_normalize(c);
    EXPECT_EQ(n.mean, (std::array<float, 3>{0.485f, 0.456f, 0.406f}));
    EXPECT_EQ(n.std, (std::array<float, 3>{0.229f, 0.224f, 0.225f}));
  }
}

namespace {

// ROOT/images/{train,val} + masks/{train,val}: 32x32 images of stripes (classes 0 and 1), four
// for training and two for validation.
void tiny_segmentation(const fs::path& root) {
  for (const std::string split : {"train", "val"}) {
    fs::create_directories(root / "images" / split);
    fs::create_directories(root / "masks" / split);
    for (int k = 0; k < (split == "train" ? 4 : 2); ++k) {
      std::vector<uint8_t> px(32 * 32 * 3), m(32 * 32);
      for (size_t i = 0; i < m.size(); ++i) {
        m[i] = static_cast<uint8_t>((i / 32 + static_cast<size_t>(k)) % 16 < 8);
        for (size_t c = 0; c < 3; ++c) px[i * 3 + c] = m[i] ? 200 : 40;
      }
      const std::string name = "img" + std::to_string(k) + ".png";
      write_file(root / "images" / split / name,
                 string_of(data::encode_png_rgb(px.data(), 32, 32)));
      write_file(root / "masks" / split / name,
                 string_of(data::encode_png_index(m.data(), 32, 32, data::class_palette(2))));
    }
  }
  write_file(root / "classes.txt", "background\nstripe\n");
}

std::vector<std::string> train_args(const std::string& model, const fs::path& data,
                                    const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> a = {"train",     "--model", model,      "--data",    data.string(),
                                "--imgsz",   "32",      "--epochs", "1",         "--batch-size",
                                "4",         "--lr",    "0",        "--threads", "1",
                                "--workers", "0",       "--out",    out.string()};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST(EncoderWeightsCli, TrainLoadsTheEncoderAndNormalisesAsImageNet) {
  TempDir d("encwcli");
  tiny_segmentation(d / "data");
  const State r18 = torchvision_state("resnet18");
  save_safetensors((d / "r18.safetensors").string(),
                   std::vector<std::pair<std::string, Tensor>>(r18.begin(), r18.end()));
  const std::string file = (d / "r18.safetensors").string();
  RunResult r = run_hpcnet(
      train_args("unet_resnet18", d / "data", d / "run", {"--encoder-weights", file}), d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "--encoder-weights " + file +
                                ": torchvision's resnet18 loaded into unet_resnet18's encoder.*"),
            1u)
      << r.err;
  // lr 0: the parameters are the file's (the BatchNorm statistics followed the batch).
  SafetensorsFile f = load_safetensors((d / "run" / "model.safetensors").string());
  EXPECT_EQ(f.metadata.at("hpcnet.normalize"),
            "{\"mean\":[0.485,0.456,0.406],\"std\":[0.229,0.224,0.225]}");
  int same = 0;
  for (const auto& [n, t] : f.tensors)
    if (n.rfind("encoder.", 0) == 0 && n.find("running_") == std::string::npos &&
        n.find("num_batches") == std::string::npos) {
      EXPECT_TRUE(equal(t, r18.at(n.substr(8)))) << n;
      ++same;
    }
  EXPECT_EQ(same, 62 - 2);  // resnet18's parameters less fc
  // Without it: the usual normalisation.
  r = run_hpcnet(train_args("unet_resnet18", d / "data", d / "plain", {}), d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("--encoder-weights"), std::string::npos) << r.err;
  EXPECT_EQ(load_safetensors((d / "plain" / "model.safetensors").string())
                .metadata.at("hpcnet.normalize"),
            "{\"mean\":[0.5,0.5,0.5],\"std\":[0.5,0.5,0.5]}");
  // eval takes the model (its transform from the file: hpcnet.augment imagenet).
  r = run_hpcnet({"eval", "--weights", (d / "run" / "model.safetensors").string(), "--data",
                  (d / "data").string(), "--split", "val", "--threads", "1", "--json"},
                 d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(f.metadata.at("hpcnet.augment"), "imagenet");
  // Refusals: another depth, a model without an encoder, with --weights.
  expect_refused(
      run_hpcnet(train_args("unet_resnet34", d / "data", d / "r34", {"--encoder-weights", file}),
                 d.path()),
      "resnet18 file for unet_resnet34", {"holds torchvision's resnet18", "resnet34"});
  expect_refused(
      run_hpcnet(train_args("lenet", d / "data", d / "lenet", {"--encoder-weights", file}),
                 d.path()),
      "lenet", {"--encoder-weights", "has no ImageNet ResNet encoder"});
  expect_refused(run_hpcnet(train_args("unet_resnet18", d / "data", d / "both",
                                       {"--encoder-weights", file, "--weights",
                                        (d / "run" / "model.safetensors").string()}),
                            d.path()),
                 "with --weights", {"--encoder-weights", "--weights", "give one"});
}
