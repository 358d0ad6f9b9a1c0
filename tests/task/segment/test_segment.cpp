// The segment task (src/task/segment/segment.cpp): its metric (torchvision's confusion matrix: IoU,
// mIoU, pixel accuracy; summed over shards), its losses and pictures, a weights file without
// metadata taking its task from the model, and through the hpcnet binary: train, eval, predict and
// resume on a tiny dataset, the dataset inferred from the model's task, DeepLab with its options,
// and the shipped configs. The dataset layouts: tests/data/test_segmentation_data.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <tuple>

#include "hpcnet/data.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

TEST(SegmentTask, MetricIsTorchvisionsConfusionMatrix) {
  auto t = task::make_task("segment");
  const std::vector<std::string> classes{"bg", "a", "b"};
  // 1 image, 2 x 3 pixels. Targets: [0 1 2 / 1 255 2]; predictions (argmax): [0 1 1 / 1 0 2].
  data::Batch b;
  b.size = 1;
  b.masks = Tensor::from_labels({0, 1, 2, 1, 255, 2}).view_nograd({1, 2, 3});
  std::vector<float> l(3 * 6, 0.f);
  const int pred[6] = {0, 1, 1, 1, 0, 2};
  for (int p = 0; p < 6; ++p) l[static_cast<size_t>(pred[p] * 6 + p)] = 1.f;
  Tensor logits = Tensor::from_vector(l, {1, 3, 2, 3});
  auto m = t->make_metric(classes);
  m->add({logits}, b);
  // h[target][pred]: (0,0)=1, (1,1)=2, (2,1)=1, (2,2)=1; the 255 pixel is left out.
  const std::vector<double> want{1, 0, 0, 0, 2, 0, 0, 1, 1};
  EXPECT_EQ(m->state(), want);
  EXPECT_EQ(m->count(), 5);
  // IoU: bg 1/1, a 2/(2+3-2) = 2/3, b 1/(2+1-1) = 1/2; mIoU = mean; pixel accuracy 4/5.
  const double miou = 100.0 * (1.0 + 2.0 / 3.0 + 0.5) / 3.0;
  EXPECT_NEAR(m->value(), miou, 1e-12);
  nlohmann::json j = m->to_json();
  EXPECT_NEAR(j.at("pixel_accuracy").get<double>(), 80.0, 1e-12);
  EXPECT_NEAR(j.at("per_class_iou").at("a").get<double>(), 200.0 / 3.0, 1e-12);
  const std::string r = m->report("val");
  char last[96];
  std::snprintf(last, sizeof last, "mIoU: %.2f%% pixel accuracy: 80.00%%\n", miou);
  EXPECT_EQ(r.substr(r.size() - std::string(last).size()), last) << r;
  // Two shards summed = the metric of both.
  auto m2 = t->make_metric(classes);
  m2->add({logits}, b);
  std::vector<double> s = m->state(), s2 = m2->state();
  for (size_t i = 0; i < s.size(); ++i) s[i] += s2[i];
  auto both = t->make_metric(classes);
  both->add({logits}, b);
  both->add({logits}, b);
  EXPECT_EQ(both->state(), s);
  EXPECT_THROW(m->set_state({1, 2}), InputError);
}

// A class in neither the masks nor the predictions has no IoU: mIoU is the mean over the others
// (mmseg's nanmean, torchmetrics), the report names it, and no NaN is printed or written.
TEST(SegmentTask, AClassAbsentFromTheSplitIsLeftOutOfTheMeanAndNamed) {
  auto t = task::make_task("segment");
  // Targets [0 1 1 / 1 255 0]; predictions [0 1 0 / 1 0 0]; class b nowhere.
  data::Batch b;
  b.size = 1;
  b.masks = Tensor::from_labels({0, 1, 1, 1, 255, 0}).view_nograd({1, 2, 3});
  std::vector<float> l(3 * 6, 0.f);
  const int pred[6] = {0, 1, 0, 1, 0, 0};
  for (int p = 0; p < 6; ++p) l[static_cast<size_t>(pred[p] * 6 + p)] = 1.f;
  auto m = t->make_metric({"bg", "a", "b"});
  m->add({Tensor::from_vector(l, {1, 3, 2, 3})}, b);
  // IoU: bg 2/(2+3-2) = 2/3, a 2/(3+2-2) = 2/3, b none: mIoU over 2 classes.
  EXPECT_NEAR(m->value(), 200.0 / 3.0, 1e-12);
  EXPECT_EQ(m->value_text(), "val_miou 66.67% (over 2 of 3 classes; absent: b)");
  const std::string r = m->report("val");
  EXPECT_NE(r.find("IoU for class: b            is n/a (absent from val)\n"), std::string::npos)
      << r;
  EXPECT_NE(r.find("mIoU: 66.67% pixel accuracy: 80.00% (over 2 of 3 classes; absent: b)\n"),
            std::string::npos)
      << r;
  EXPECT_EQ(r.find("nan"), std::string::npos) << r;
  const nlohmann::json j = m->to_json();
  EXPECT_NEAR(j.at("miou").get<double>(), 200.0 / 3.0, 1e-12);
  EXPECT_EQ(j.at("absent_classes"), nlohmann::json::array({"b"}));
  // No labelled pixel at all: n/a, not NaN.
  auto empty = t->make_metric({"bg", "a", "b"});
  EXPECT_EQ(empty->value_text(), "val_miou n/a (no labelled pixels)");
  EXPECT_EQ(empty->report("val").find("nan"), std::string::npos) << empty->report("val");
}

TEST(SegmentTask, LossIgnoresPixelsAndPicturesAreImages) {
  auto t = task::make_task("segment", task::TaskOptions{16});
  data::Batch b;
  b.size = 1;
  b.masks = Tensor::from_labels({0, 1, 255, 1}).view_nograd({1, 2, 2});
  std::vector<float> l{2, 0, 0, 1, 0, 3, 5, -1};  // (1, 2, 2, 2): channel planes
  Tensor logits = Tensor::from_vector(l, {1, 2, 2, 2});
  // By hand: pixels 0, 1, 3 (pixel 2 ignored); -log softmax at the target, averaged over 3.
  auto nll = [](double t, double o) { return -(t - std::log(std::exp(t) + std::exp(o))); };
  const double want = (nll(2, 0) + nll(3, 0) + nll(-1, 1)) / 3.0;
  EXPECT_NEAR(t->loss({logits}, b).item(), want, 1e-6);
  data::Image im;
  im.height = 3;
  im.width = 5;
  im.pixels.assign(3 * 5 * 3, 100);
  auto pics = t->pictures(im, {logits}, 0, {"bg", "x"}, {});
  ASSERT_EQ(pics.size(), 2u);
  EXPECT_EQ(pics[0].first, "_mask.png");
  data::Image overlay = data::decode_image(pics[1].second.data(), pics[1].second.size(), "overlay");
  EXPECT_EQ(overlay.height, 3);
  EXPECT_EQ(overlay.width, 5);
  task::Prediction p = t->predict({logits}, 0, {"bg", "x"}, {});
  EXPECT_NEAR(p.json.at("pixels").at("x").get<double>(), 0.5, 1e-12);  // argmax: x at 2 of 4
}

// The loss options: Dice and ce+dice are the ops' values, class weights reach both, a second
// output (an auxiliary head) adds aux_weight times its loss, and a batch whose every pixel is
// ignored gives 0 instead of torch's NaN (so one such batch cannot stop a run).
TEST(SegmentTask, LossKindsClassWeightsAuxAndAllIgnored) {
  data::Batch b;
  b.size = 1;
  b.masks = Tensor::from_labels({0, 1, 255, 1}).view_nograd({1, 2, 2});
  Tensor logits = Tensor::from_vector({2, 0, 0, 1, 0, 3, 5, -1}, {1, 2, 2, 2});
  Tensor aux = Tensor::from_vector({1, 1, 0, 0, 0, 2, 1, 1}, {1, 2, 2, 2});
  Tensor w = Tensor::from_vector({0.5, 2}, {2});
  auto loss_of = [&](task::TaskOptions o, const nn::Outputs& outs) {
    o.imgsz = 16;
    return task::make_task("segment", o)->loss(outs, b).item();
  };
  task::TaskOptions o;
  const double ce = F::cross_entropy2d(logits, b.masks).item();
  const double dice = F::dice_loss(logits, b.masks).item();
  EXPECT_NEAR(loss_of(o, {logits}), ce, 1e-7);
  o.segment.loss = "dice";
  EXPECT_NEAR(loss_of(o, {logits}), dice, 1e-7);
  o.segment.loss = "ce+dice";
  EXPECT_NEAR(loss_of(o, {logits}), ce + dice, 1e-6);
  o.segment.class_weights = {0.5, 2};
  EXPECT_NEAR(
      loss_of(o, {logits}),
      F::cross_entropy2d(logits, b.masks, w).item() + F::dice_loss(logits, b.masks, w).item(),
      1e-6);
  o.segment.class_weights.clear();
  o.segment.loss = "ce";
  EXPECT_NEAR(loss_of(o, {logits, aux}), ce + 0.5 * F::cross_entropy2d(aux, b.masks).item(), 1e-6);
  o.segment.class_weights = {1, 1, 1};  // three weights, two classes
  EXPECT_TRUE(input_error([&] { loss_of(o, {logits}); }, "--class-weights has 3 values"));
  o.segment.class_weights.clear();
  b.masks = Tensor::full({1, 2, 2}, 255, DType::kInt64);
  EXPECT_EQ(loss_of(o, {logits}), 0.0);
}

// ---- the hpcnet command, end to end ------------------------------------------------------------

namespace {

// A tiny learnable set: 32x32 images whose left half is red where the mask is class 1, right
// half blue where it is class 2 (background elsewhere); train 8 images, val 4.
void sg_tiny_set(const fs::path& root) {
  for (const char* split : {"train", "val"}) {
    fs::create_directories(root / "images" / split);
    fs::create_directories(root / "masks" / split);
    const int n = std::string(split) == "train" ? 8 : 4;
    for (int k = 0; k < n; ++k) {
      std::vector<uint8_t> px(32 * 32 * 3), m(32 * 32);
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) {
          const bool on = (y + k * 3) % 16 < 8;
          const int cls = on ? (x < 16 ? 1 : 2) : 0;
          m[static_cast<size_t>(y * 32 + x)] = static_cast<uint8_t>(cls);
          uint8_t* p = &px[static_cast<size_t>((y * 32 + x) * 3)];
          p[0] = cls == 1 ? 220 : 30;
          p[1] = 40;
          p[2] = cls == 2 ? 220 : 30;
        }
      const std::string name = "img" + std::to_string(k);
      write_file(root / "images" / split / (name + ".png"),
                 string_of(data::encode_png_rgb(px.data(), 32, 32)));
      write_file(root / "masks" / split / (name + ".png"),
                 string_of(data::encode_png_index(m.data(), 32, 32, data::class_palette(3))));
    }
  }
  write_file(root / "classes.txt", "background\nred\nblue\n");
}

std::vector<std::string> sg_train_args(const fs::path& data, const fs::path& out, int epochs) {
  return {"train",
          "--model",
          "unet_resnet18",
          "--dataset",
          "segmentation",
          "--data",
          data.string(),
          "--imgsz",
          "32",
          "--epochs",
          std::to_string(epochs),
          "--batch-size",
          "4",
          "--optimizer",
          "adamw",
          "--lr",
          "0.001",
          "--threads",
          "1",
          "--workers",
          "0",
          "--log-every",
          "1",
          "--seed",
          "5",
          "--out",
          out.string()};
}

}  // namespace

// A segmentation dataset without a val split (no images/val/, no VOC val.txt) trains, saying that
// it goes on without validation. (A class absent from val: SegmentTask.AClassAbsent... above; a
// model this briefly trained still predicts every class somewhere, so the CLI cannot show it.)
TEST(SegmentCli, TrainingWithoutAValSplitSaysSo) {
  TempDir d("segnoval");
  sg_tiny_set(d / "data");
  std::vector<std::string> args = sg_train_args(d / "data", d / "run", 1);
  fs::remove_all(d / "data" / "images" / "val");
  fs::remove_all(d / "data" / "masks" / "val");
  args.insert(args.end(), {"--steps", "1"});
  RunResult r = run_hpcnet(args, d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("has no val split"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ImageSets/Segmentation/val.txt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("training without validation"), std::string::npos) << r.err;
}

TEST(SegmentCli, TrainEvalPredictAndExactResume) {
  TempDir d("segcli");
  sg_tiny_set(d / "data");
  RunResult r = run_hpcnet(sg_train_args(d / "data", d / "straight", 2), d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("[2,     2] loss: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos);
  // metrics.jsonl: the val split of the dataset itself, evaluated by mIoU.
  int epochs = 0;
  for (const std::string& l : split_lines(read_file(d / "straight" / "metrics.jsonl"))) {
    nlohmann::json j = nlohmann::json::parse(l);
    if (j.at("event") == "start") EXPECT_EQ(j.at("val_images"), 4);
    if (j.at("event") == "epoch") {
      ++epochs;
      EXPECT_TRUE(j.contains("val_miou")) << l;
    }
  }
  EXPECT_EQ(epochs, 2);
  SafetensorsFile f = load_safetensors((d / "straight" / "model.safetensors").string());
  EXPECT_EQ(f.metadata.at("hpcnet.task"), "segment");
  EXPECT_EQ(f.metadata.at("hpcnet.imgsz"), "32");
  // 1 epoch, then --resume to 2: the same bytes.
  r = run_hpcnet(sg_train_args(d / "data", d / "resumed", 1), d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_hpcnet({"train", "--resume", (d / "resumed").string(), "--epochs", "2"}, d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_file(d / "resumed" / "model.safetensors"),
            read_file(d / "straight" / "model.safetensors"));
  // eval: per-class IoU, the summary last; --json one object.
  const std::string w = (d / "straight" / "model.safetensors").string();
  r = run_hpcnet({"eval", "--weights", w, "--dataset", "segmentation", "--data",
                  (d / "data").string(), "--split", "val", "--threads", "1"},
                 d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_NE(lines[1].find("IoU for class: background"), std::string::npos) << r.out;
  EXPECT_EQ(lines.back().rfind("mIoU: ", 0), 0u) << r.out;
  EXPECT_NE(lines.back().find("% pixel accuracy: "), std::string::npos) << r.out;
  r = run_hpcnet({"eval", "--weights", w, "--dataset", "segmentation", "--data",
                  (d / "data").string(), "--split", "val", "--json"},
                 d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("pixels"), 4 * 32 * 32);
  EXPECT_TRUE(j.contains("miou"));
  // predict --save: an index mask and an overlay per image, at the image's size, and the JSON.
  r = run_hpcnet({"predict", "--weights", w, (d / "data" / "images" / "val").string(), "--save",
                  (d / "pred").string()},
                 d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out_lines().size(), 4u) << r.out;
  EXPECT_NE(r.out.find("img0.png: "), std::string::npos) << r.out;
  for (const char* s : {"img0_mask.png", "img3_overlay.png", "predictions.jsonl"})
    EXPECT_TRUE(fs::exists(d / "pred" / s)) << s;
  const std::string png = read_file(d / "pred" / "img0_mask.png");
  data::Image mask =
      data::decode_image(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "m");
  EXPECT_EQ(mask.height, 32);
  EXPECT_EQ(split_lines(read_file(d / "pred" / "predictions.jsonl")).size(), 4u);
  // A classification dataset for a segmentation model is refused in one line.
  r = run_hpcnet({"train", "--model", "unet_resnet18", "--dataset", "cifar10", "--data",
                  (d / "data").string(), "--out", (d / "bad").string()},
                 d.path());
  EXPECT_EQ(r.rc, 2) << r.err;
}

// Segmentation infers its dataset as detection does: a segmentation model, or --task segment
// alone (which trains unet_resnet18), reads --data as a segmentation dataset, also given as its
// data.yaml; eval of the model reads it the same way (its val split where there is no test).
TEST(SegmentCli, TheDatasetIsInferredFromTheModelsTaskAndTheData) {
  TempDir d("seginfer");
  sg_tiny_set(d / "data");
  const std::vector<std::string> common = {"--imgsz",   "32", "--epochs",  "1", "--steps", "1",
                                           "--threads", "1",  "--workers", "0"};
  auto train = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "train");
    args.insert(args.end(), common.begin(), common.end());
    return run_hpcnet(args, d.path());
  };
  RunResult r = train({"--model", "unet_resnet18", "--data", (d / "data").string(), "--out",
                       (d / "by_model").string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json start =
      nlohmann::json::parse(split_lines(read_file(d / "by_model" / "metrics.jsonl")).at(0));
  EXPECT_EQ(start.at("config").at("dataset"), "segmentation");
  SafetensorsFile f = load_safetensors((d / "by_model" / "model.safetensors").string());
  EXPECT_EQ(f.metadata.at("hpcnet.classes"), R"(["background","red","blue"])");

  // --task segment alone; the data given as an Ultralytics data.yaml whose names win over
  // classes.txt (background first).
  write_file(d / "data" / "data.yaml",
             "path: .\ntrain: images/train\nval: images/val\nnames: [rouge, bleu]\n");
  r = train({"--task", "segment", "--data", (d / "data" / "data.yaml").string(), "--out",
             (d / "by_task").string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  f = load_safetensors((d / "by_task" / "model.safetensors").string());
  EXPECT_EQ(f.metadata.at("hpcnet.model"), "unet_resnet18");
  EXPECT_EQ(f.metadata.at("hpcnet.task"), "segment");
  EXPECT_EQ(f.metadata.at("hpcnet.classes"), R"(["background","rouge","bleu"])");

  // eval without --dataset: the model's task reads --data (no test split: val); the folder (its
  // classes.txt) for the model trained on it, the YAML for the other.
  for (const auto& [run, data, name] :
       {std::tuple<std::string, fs::path, std::string>{"by_model", d / "data", "red"},
        {"by_task", d / "data" / "data.yaml", "rouge"}}) {
    r = run_hpcnet({"eval", "--weights", (d / run / "model.safetensors").string(), "--data",
                    data.string(), "--threads", "1", "--workers", "0"},
                   d.path());
    ASSERT_EQ(r.rc, 0) << data << ": " << r.err;
    EXPECT_NE(r.err.find("has no test split; evaluating val"), std::string::npos) << r.err;
    EXPECT_EQ(r.out_lines().back().rfind("mIoU: ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("IoU for class: " + name), std::string::npos) << r.out;
  }
  // A YAML elsewhere whose path: names the folder, relative to the YAML's.
  fs::create_directories(d / "outer");
  write_file(d / "outer" / "seg.yml", "path: ../data\nnames: [rouge, bleu]\n");
  r = run_hpcnet({"eval", "--weights", (d / "by_task" / "model.safetensors").string(), "--data",
                  (d / "outer" / "seg.yml").string(), "--threads", "1", "--workers", "0", "--json"},
                 d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("pixels"), 4 * 32 * 32);
}

// DeepLabV3 with its auxiliary head, the ce+dice loss, class weights and random scaling trains
// (two steps), and eval and predict rebuild the model with the aux head from the file alone.
TEST(SegmentCli, DeepLabWithAuxDiceWeightsAndScaleTrainsEvalsAndPredicts) {
  TempDir d("segdl");
  sg_tiny_set(d / "data");
  std::vector<std::string> args = sg_train_args(d / "data", d / "dl", 1);
  args[2] = "deeplabv3_resnet50";
  for (const char* a : {"--aux-loss", "--loss", "ce+dice", "--class-weights", "0.5,1,2",
                        "--augment", "--scale-min", "0.5", "--scale-max", "2", "--steps", "2"})
    args.push_back(a);
  RunResult r = run_hpcnet(args, d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("[1,     2] loss: "), std::string::npos) << r.out;
  const std::string w = (d / "dl" / "model.safetensors").string();
  SafetensorsFile f = load_safetensors(w);
  EXPECT_TRUE(f.contains("aux_classifier.4.bias"));
  EXPECT_TRUE(f.contains("classifier.0.convs.4.1.weight"));
  r = run_hpcnet({"eval", "--weights", w, "--dataset", "segmentation", "--data",
                  (d / "data").string(), "--split", "val", "--threads", "1", "--json"},
                 d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("pixels"), 4 * 32 * 32);
  r = run_hpcnet({"predict", "--weights", w, (d / "data" / "images" / "val").string()}, d.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out_lines().size(), 4u) << r.out;
  // --aux-loss on a model without an auxiliary head is refused in one line.
  args = sg_train_args(d / "data", d / "bad", 1);
  args.push_back("--aux-loss");
  r = run_hpcnet(args, d.path());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--aux-loss"), std::string::npos) << r.err;
}

// The shipped segmentation recipes run on the tiny set (at 32 pixels, one step).
TEST(SegmentCli, ShippedSegmentationConfigsRun) {
  TempDir d("segcfg");
  sg_tiny_set(d / "data");
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(HPCNET_SOURCE_DIR) / "configs")) {
    const nlohmann::json recipe = nlohmann::json::parse(read_file(e.path()));
    if (recipe.value("dataset", "") != "segmentation") continue;
    RunResult r = run_hpcnet({"train", "--config", e.path().string(), "--data",
                              (d / "data").string(), "--out", (d / "run").string(), "--imgsz", "32",
                              "--batch-size", "4", "--steps", "1", "--threads", "1"},
                             d.path());
    EXPECT_EQ(r.rc, 0) << e.path() << ": " << r.err;
    fs::remove_all(d / "run");
    ++n;
  }
  EXPECT_GE(n, 1);
}

// A weights file without hpcnet's metadata (as PyTorch saves one) takes its task from the model.
TEST(SegmentData, AFileWithoutMetadataTakesTheModelsTask) {
  TempDir d("segmeta");
  auto m = nn::make_model("unet_resnet18", nn::ModelOptions{10});  // 10: the default class names
  save_safetensors(d.str("plain.safetensors"), m->state_dict());
  train::LoadedModel l = train::load_model(d.str("plain.safetensors"), "unet_resnet18");
  EXPECT_EQ(l.task, "segment");
  EXPECT_EQ(l.imgsz, 128);
}
