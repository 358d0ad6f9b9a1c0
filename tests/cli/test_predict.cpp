// Tests of `hpcnet predict` (the binary, run as tests/cli/test_cli.cpp does) on folders: sorted
// order, skipped names, an unreadable image among good ones, empty folders, --json, another image
// size. The weights are a fresh lenet saved here; the expected predictions are computed in-process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// A w x h image of one colour with noise, HWC RGB.
std::vector<uint8_t> pr_pixels(int w, int h, int r, int g, int b, uint64_t seed) {
  return noisy_pixels(w, h, r, g, b, seed, 9, 20);
}

void pr_png(const fs::path& p, int seed, int w = 32, int h = 32) {
  write_png_file(p, w, h,
                 pr_pixels(w, h, (seed * 97) % 256, (seed * 57) % 256, (seed * 31) % 256,
                           static_cast<uint64_t>(seed)));
}

const std::vector<std::string> kPrClasses = {"apple", "banana", "cherry"};

// A lenet of three classes with fresh weights, saved once per process.
struct PrShared {
  TempDir tmp{"predict_shared"};
  fs::path weights = tmp / "model.safetensors";
  PrShared() { save_fresh_model(weights, "lenet", "classify", kPrClasses, 32, 11); }
};
PrShared& pr_shared() {
  static PrShared s;
  return s;
}

// What predict should say for the image file: class -> probability, from the saved weights, the
// task's evaluation transform and Task::predict in this process.
std::map<std::string, double> pr_expected(const fs::path& image) {
  static train::LoadedModel m = train::load_model(pr_shared().weights.string());
  task::TaskOptions o;
  o.imgsz = m.imgsz;
  const auto t = task::make_task(m.task, o);
  const data::Compose tf = t->eval_transform();
  const data::Image im = data::read_image_file(image.string());
  const data::Example ex{im.pixels.data(), im.height, im.width, 0};
  const auto s = tf.output_shape(im.height, im.width);
  Tensor x = Tensor::empty({1, s[0], s[1], s[2]});
  tf.apply(ex, 0, x.data<float>());
  NoGradGuard ng;
  task::PredictOptions po;
  po.top = 3;
  const task::Prediction p = t->predict(t->infer(*m.module, x, false), 0, m.classes, po);
  std::map<std::string, double> out;
  for (const auto& e : p.json.at("top")) out[e.at("class")] = e.at("probability");
  return out;
}

// The JSON line of one image: "image" is the path, "top" is sorted best first, sums to <= 1 and
// matches the prediction made in this process.
void pr_check_json(const std::string& line, const fs::path& dir, const std::string& image,
                   size_t top) {
  const nlohmann::json j = nlohmann::json::parse(line);
  ASSERT_TRUE(j.is_object()) << line;
  EXPECT_EQ(j.at("image"), image) << line;
  const nlohmann::json& t = j.at("top");
  ASSERT_EQ(t.size(), top) << line;
  const std::map<std::string, double> want = pr_expected(dir / image);
  double prev = 2, sum = 0;
  for (const auto& e : t) {
    const double p = e.at("probability");
    EXPECT_LE(p, prev) << "best first: " << line;
    prev = p;
    sum += p;
    ASSERT_TRUE(want.count(e.at("class"))) << line;
    EXPECT_NEAR(p, want.at(e.at("class")), 1e-4) << line;
  }
  EXPECT_LE(sum, 1.0 + 1e-6) << line;
}

class PredictTest : public ::testing::Test {
 protected:
  RunResult run(std::vector<std::string> args) const {
    args.insert(args.begin(), {"predict", "--weights", pr_shared().weights.string(), "--threads",
                               "1", "--device", "cpu"});
    return run_hpcnet(args, dir_);
  }
  // imgs/ with five images of mixed names and formats, and things that are not to be predicted.
  void make_folder() const {
    const fs::path d = dir_ / "imgs";
    fs::create_directories(d / "sub");
    pr_png(d / "b.png", 1);
    pr_png(d / "a.png", 2);
    pr_png(d / "Z.PNG", 3);  // upper case: an image, sorted before the lower-case names
    write_jpeg_file(d / "c.jpg", 32, 32, pr_pixels(32, 32, 30, 200, 90, 4));
    write_jpeg_file(d / "d.jpeg", 32, 32, pr_pixels(32, 32, 250, 250, 10, 5));
    pr_png(d / ".hidden.png", 6);                 // hidden
    write_file(d / "notes.txt", "not an image");  // not an image name
    pr_png(d / "e.png.bak", 7);                   // an image, but not by name
    pr_png(d / "sub" / "f.png", 8);               // sub-folders are not read
  }
  const std::vector<std::string> kSorted = {"imgs/Z.PNG", "imgs/a.png", "imgs/b.png", "imgs/c.jpg",
                                            "imgs/d.jpeg"};
  TempDir tmp_{"predict_t"};
  fs::path dir_ = tmp_.path();
};

}  // namespace

// A folder: one line per image, in sorted order, "PATH: class p, class p, class p".
TEST_F(PredictTest, AFolderIsPredictedInSortedOrder) {
  make_folder();
  RunResult r = run({"imgs"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), kSorted.size()) << r.out;
  const std::regex entry(R"(: [a-z]+ \d\.\d{3}, [a-z]+ \d\.\d{3}, [a-z]+ \d\.\d{3})");
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_EQ(lines[i].rfind(kSorted[i] + ":", 0), 0u) << lines[i];
    EXPECT_TRUE(std::regex_match(lines[i].substr(kSorted[i].size()), entry)) << lines[i];
  }
  // A file and a folder: the file first, then the folder's images.
  pr_png(dir_ / "first.png", 9);
  r = run({"first.png", "imgs"});
  ASSERT_EQ(r.rc, 0) << r.err;
  lines = r.out_lines();
  ASSERT_EQ(lines.size(), kSorted.size() + 1) << r.out;
  EXPECT_EQ(lines[0].rfind("first.png:", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("imgs/Z.PNG:", 0), 0u) << lines[1];
}

// --json: one object per image, "image" and "top", the probabilities those of this process.
TEST_F(PredictTest, JsonGivesOneObjectPerImage) {
  make_folder();
  RunResult r = run({"--json", "imgs"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), kSorted.size()) << r.out;
  for (size_t i = 0; i < lines.size(); ++i) pr_check_json(lines[i], dir_, kSorted[i], 3);
  r = run({"--json", "--top", "2", "imgs"});
  ASSERT_EQ(r.rc, 0) << r.err;
  lines = r.out_lines();
  ASSERT_EQ(lines.size(), kSorted.size());
  EXPECT_EQ(nlohmann::json::parse(lines[4]).at("top").size(), 2u);
}

// --save DIR twice: the second run keeps the first's results and writes into DIR2 (then DIR3), as
// Ultralytics does, saying where on stderr; --exist-ok writes into DIR itself.
TEST_F(PredictTest, SaveNeverOverwritesEarlierResults) {
  make_folder();
  RunResult r = run({"--save", "out", "imgs"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "hpcnet: results saved to out\n");
  const std::string first = read_file(dir_ / "out" / "predictions.jsonl");
  ASSERT_EQ(split_lines(first).size(), kSorted.size());
  r = run({"--save", "out/", "imgs/a.png"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err,
            "hpcnet: results saved to out2 (out/ holds earlier results; --exist-ok "
            "writes into it)\n");
  EXPECT_EQ(read_file(dir_ / "out" / "predictions.jsonl"), first);
  EXPECT_EQ(split_lines(read_file(dir_ / "out2" / "predictions.jsonl")).size(), 1u);
  r = run({"--save", "out", "imgs/a.png"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "out3" / "predictions.jsonl"));
  r = run({"--save", "out", "--exist-ok", "imgs/a.png"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "hpcnet: results saved to out\n");
  EXPECT_EQ(split_lines(read_file(dir_ / "out" / "predictions.jsonl")).size(), 1u);
  EXPECT_FALSE(fs::exists(dir_ / "out4"));
}

// --imgsz: the size images are brought to, by default the model file's (lenet: 32, which its
// classifier needs, so another size fails in the model and not in the argument parser).
TEST_F(PredictTest, ImgszDefaultsToTheModelFilesSize) {
  make_folder();
  const RunResult plain = run({"imgs/a.png"});
  ASSERT_EQ(plain.rc, 0) << plain.err;
  RunResult r = run({"--imgsz", "32", "imgs/a.png"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  r = run({"--imgsz", "48", "imgs/a.png"});
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(r.err.find("--imgsz"), std::string::npos) << r.err;  // parsed, then used
}

// An undecodable file among good ones: the good ones are predicted, the bad one is named on a
// line of its own (and a summary line counts it), and the exit code is 2.
TEST_F(PredictTest, AnUnreadableImageAmongGoodOnes) {
  const fs::path d = dir_ / "mixed";
  fs::create_directories(d);
  pr_png(d / "a.png", 1);
  write_file(d / "b.png", "this is not a picture");
  pr_png(d / "c.png", 3);
  for (bool json : {false, true}) {
    RunResult r = json ? run({"--json", "mixed"}) : run({"mixed"});
    EXPECT_EQ(r.rc, 2) << r.err;
    auto out = r.out_lines();
    ASSERT_EQ(out.size(), 2u) << r.out;
    if (json) {
      pr_check_json(out[0], dir_, "mixed/a.png", 3);
      pr_check_json(out[1], dir_, "mixed/c.png", 3);
    } else {
      EXPECT_EQ(out[0].rfind("mixed/a.png:", 0), 0u) << out[0];
      EXPECT_EQ(out[1].rfind("mixed/c.png:", 0), 0u) << out[1];
    }
    int naming_bad = 0;
    for (const std::string& l : r.err_lines()) {
      if (l.find("b.png") == std::string::npos) continue;
      ++naming_bad;
      EXPECT_EQ(l.find("a.png"), std::string::npos) << l;
      EXPECT_EQ(l.find("c.png"), std::string::npos) << l;
    }
    EXPECT_EQ(naming_bad, 1) << r.err;
    EXPECT_NE(r.err.find("1 of 3 images"), std::string::npos) << r.err;
    EXPECT_EQ(r.err_lines().size(), 2u) << r.err;
  }
}

// A folder without images is bad input: exit 2, one line naming it, nothing predicted.
TEST_F(PredictTest, AFolderWithoutImagesIsRefused) {
  fs::create_directories(dir_ / "empty");
  RunResult r = run({"empty"});
  expect_refused(r, "empty folder", {"empty"});
  EXPECT_EQ(r.out, "");
  fs::create_directories(dir_ / "text");
  write_file(dir_ / "text" / "notes.txt", "no images here");
  pr_png(dir_ / "text" / ".hidden.png", 1);
  r = run({"text"});
  expect_refused(r, "folder of non-images", {"text"});
  EXPECT_EQ(r.out, "");
}

// Entries with an image's name that are not images one can stat (links to nowhere) do not make the
// folder unlistable: the good image is still predicted. (list_image_files reuses one error_code
// for listing and for each entry's is_regular_file, so whether the folder "cannot be listed"
// depends on which entry the directory happens to return last; with many such links one of them
// almost surely is.)
TEST_F(PredictTest, LinksToNowhereDoNotHideTheFolder) {
  const fs::path d = dir_ / "links";
  fs::create_directories(d);
  for (int i = 0; i < 24; ++i)
    fs::create_symlink(dir_ / "nowhere", d / ("gone" + std::to_string(i) + ".png"));
  pr_png(d / "good.png", 1);
  RunResult r = run({"links"});
  EXPECT_EQ(r.err.find("cannot list"), std::string::npos) << r.err;
  bool predicted = false;
  for (const std::string& l : r.out_lines())
    predicted = predicted || l.rfind("links/good.png:", 0) == 0;
  EXPECT_TRUE(predicted) << "stdout:\n" << r.out << "stderr:\n" << r.err;
}

// A 50x40 PNG is resized to the model's 32x32 input (lenet takes no other size) and predicted as
// this process predicts it through the task's evaluation transform.
TEST_F(PredictTest, AnImageOfAnotherSizeIsResized) {
  write_png_file(dir_ / "wide.png", 50, 40, pr_pixels(50, 40, 200, 40, 40, 12));
  RunResult r = run({"--json", "wide.png"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 1u) << r.out;
  pr_check_json(lines[0], dir_, "wide.png", 3);
  r = run({"wide.png"});
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(r.out_lines().size(), 1u);
  EXPECT_EQ(r.out.rfind("wide.png: ", 0), 0u) << r.out;
}
