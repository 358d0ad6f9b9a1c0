// Run metrics beyond metrics.jsonl (src/train/run_metrics.cpp, plot.cpp): the TensorBoard tags
// and CSV columns of each task's records, the validation loss of task::evaluate, and through the
// hpcnet binary: metrics.csv, the records' time and global_step, the event file of a run and of
// its resume, and `hpcnet plot`. The writers themselves: tests/io/test_metrics.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "event_file.h"
#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/task.h"
#include "src/io/tb_event.pb.h"
#include "src/train/plot.h"
#include "src/train/run_metrics.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// The event files of a run directory, sorted by name.
std::vector<fs::path> mt_event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// (tag -> [(step, value)]) of every summary event in the files, in order.
using Scalars = std::map<std::string, std::vector<std::pair<int64_t, float>>>;
Scalars mt_scalars(const std::vector<fs::path>& files) {
  Scalars s;
  for (const fs::path& f : files) {
    std::string err;
    for (const tb::Event& e : read_event_file(f, &err))
      if (e.has_summary())
        for (const auto& v : e.summary().value())
          s[v.tag()].emplace_back(e.step(), v.simple_value());
    EXPECT_EQ(err, "") << f;
  }
  return s;
}

std::vector<nlohmann::json> mt_records(const fs::path& run) {
  std::vector<nlohmann::json> out;
  for (const std::string& l : split_lines(read_file(run / "metrics.jsonl")))
    out.push_back(nlohmann::json::parse(l));
  return out;
}

}  // namespace

// ---- the record -> tag mapping -----------------------------------------------------------------

TEST(RunMetrics, TensorBoardScalarsOfRecords) {
  using V = std::vector<std::pair<std::string, double>>;
  EXPECT_EQ(train::tensorboard_scalars({{"event", "log"}, {"loss", 1.5}, {"lr", 0.1}}),
            (V{{"train/loss", 1.5}}));
  nlohmann::json epoch = {{"event", "epoch"},        {"train_loss", 2.0}, {"val_loss", 3.0},
                          {"val_miou", 40.0},        {"lr", 0.01},        {"seconds", 9.0},
                          {"images_per_sec", 100.0}, {"epoch", 1}};
  EXPECT_EQ(train::tensorboard_scalars(epoch), (V{{"train/epoch_loss", 2.0},
                                                  {"val/loss", 3.0},
                                                  {"val/miou", 40.0},
                                                  {"lr", 0.01},
                                                  {"images_per_sec", 100.0}}));
  epoch["val_loss"] = nullptr;  // NaN is written to metrics.jsonl as null: no event either
  epoch["train_loss"] = std::nan("");
  EXPECT_EQ(train::tensorboard_scalars(epoch).front().first, "val/miou");
  EXPECT_TRUE(train::tensorboard_scalars({{"event", "start"}, {"loss", 1.0}}).empty());
  // A detection epoch: its loss parts (train_X -> train/X, val_X -> val/X) and every metric.
  nlohmann::json det = {{"event", "epoch"},       {"train_loss", 6.0},
                        {"train_box_loss", 1.0},  {"train_cls_loss", 2.0},
                        {"train_dfl_loss", 3.0},  {"val_loss", 9.0},
                        {"val_box_loss", 2.0},    {"val_cls_loss", 3.0},
                        {"val_dfl_loss", 4.0},    {"val_map50_95", 26.1},
                        {"val_map50", 42.5},      {"val_precision", 55.0},
                        {"val_recall", 40.0},     {"lr", 0.01},
                        {"images_per_sec", 10.0}, {"data_wait_seconds", 0.5}};
  EXPECT_EQ(train::tensorboard_scalars(det), (V{{"train/epoch_loss", 6.0},
                                                {"train/box_loss", 1.0},
                                                {"train/cls_loss", 2.0},
                                                {"train/dfl_loss", 3.0},
                                                {"val/loss", 9.0},
                                                {"val/box_loss", 2.0},
                                                {"val/cls_loss", 3.0},
                                                {"val/dfl_loss", 4.0},
                                                {"val/map50", 42.5},
                                                {"val/map50_95", 26.1},
                                                {"val/precision", 55.0},
                                                {"val/recall", 40.0},
                                                {"lr", 0.01},
                                                {"images_per_sec", 10.0}}));
}

// metrics.csv's columns: the classify and segment layout of earlier versions, and a detection
// run's loss parts (train and val) and four metrics, as Ultralytics' results.csv has them.
TEST(RunMetrics, CsvColumnsOfEachTask) {
  using S = std::vector<std::string>;
  EXPECT_EQ(train::metrics_csv_columns({{"val_accuracy"}, {}}),
            (S{"epoch", "step", "time", "train_loss", "val_loss", "val_accuracy", "lr", "seconds",
               "images_per_sec"}));
  auto t = task::make_task("detect");
  const S values = t->make_metric({"a", "b"})->value_keys();
  EXPECT_EQ(values, (S{"val_map50_95", "val_map50", "val_precision", "val_recall"}));
  EXPECT_EQ(train::metrics_csv_columns({values, t->loss_part_names()}),
            (S{"epoch", "step", "time", "train_loss", "train_box_loss", "train_cls_loss",
               "train_dfl_loss", "val_loss", "val_box_loss", "val_cls_loss", "val_dfl_loss",
               "val_map50_95", "val_map50", "val_precision", "val_recall", "lr", "seconds",
               "images_per_sec"}));
  EXPECT_EQ(task::make_task("segment")->make_metric({"a", "b"})->value_keys(), S{"val_miou"});
  EXPECT_TRUE(task::make_task("classify")->loss_part_names().empty());
}

// Resuming a detection run whose metrics.csv has the columns of an earlier version (and its
// metrics in fractions) keeps that file as metrics.1.csv and starts a new one; a file of another
// program is still refused; a start record says the unit.
TEST(RunMetrics, ResumeMovesAnEarlierVersionsCsvAside) {
  TempDir dir("rm_legacy");
  const train::RunMetricKeys det = {{"val_map50_95", "val_map50", "val_precision", "val_recall"},
                                    {"box_loss", "cls_loss", "dfl_loss"}};
  const std::string old =
      "epoch,step,time,train_loss,val_loss,val_map50_95,lr,seconds,images_per_sec\n"
      "1,4,1.5,12.1,11.9,0.00022,0.0005,8.4,0.95\n";
  write_file(dir.path() / "metrics.csv", old);
  {
    train::RunMetrics m(true, dir.str(), true, det);
    m.write({{"event", "start"}}, 4);
  }
  EXPECT_EQ(read_file(dir.path() / "metrics.1.csv"), old);
  const std::vector<std::string> now = split_lines(read_file(dir.path() / "metrics.csv"));
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].rfind("epoch,step,time,train_loss,train_box_loss,", 0), 0u) << now[0];
  const auto start = nlohmann::json::parse(split_lines(read_file(dir.path() / "metrics.jsonl"))[0]);
  EXPECT_EQ(start.at("metric_unit"), "percent");
  write_file(dir.path() / "metrics.csv", "a,b\n");
  EXPECT_TRUE(input_error([&] { train::RunMetrics m(true, dir.str(), true, det); }, "header"));
  EXPECT_FALSE(fs::exists(dir.path() / "metrics.2.csv"));
}

// The panels of a detection run with fewer steps than --log-every: the train-loss panel falls back
// to the epochs' train loss at their global step (it said "no records"), each loss part has a
// panel of its train and val curves, the four metrics share two panels in percent, and a file of
// an earlier version (no "metric_unit", mAP as a fraction) is drawn in percent too.
TEST(Plot, PanelsOfADetectionRunAndAnEarlierVersionsFile) {
  TempDir dir("plot_panels");
  auto epoch = [](int e, double map) {
    return nlohmann::json{{"event", "epoch"},          {"epoch", e},
                          {"global_step", 4 * e},      {"train_loss", 6.0 - e},
                          {"train_box_loss", 1.0},     {"train_cls_loss", 2.0},
                          {"train_dfl_loss", 3.0 - e}, {"val_loss", 9.0},
                          {"val_box_loss", 2.0},       {"val_cls_loss", 3.0},
                          {"val_dfl_loss", 4.0},       {"val_map50_95", map},
                          {"val_map50", 2 * map},      {"val_precision", 50.0},
                          {"val_recall", 40.0},        {"lr", 0.01}}
        .dump();
  };
  const fs::path now = dir.path() / "now.jsonl";
  write_file(now, "{\"event\": \"start\", \"metric_unit\": \"percent\"}\n" + epoch(1, 20) + "\n" +
                      epoch(2, 26) + "\n");
  const train::RunCurves c = train::read_run_curves(now.string());
  const std::vector<train::Panel> p = train::run_panels(c);
  std::vector<std::string> titles;
  for (const train::Panel& x : p) titles.push_back(x.title);
  EXPECT_EQ(titles,
            (std::vector<std::string>{"train loss (per epoch: no log records)", "loss per epoch",
                                      "box_loss per epoch", "cls_loss per epoch",
                                      "dfl_loss per epoch", "map50, map50_95 per epoch",
                                      "precision, recall per epoch", "learning rate"}));
  ASSERT_EQ(p.size(), 8u);
  EXPECT_EQ(*p[0].lines.at(0).second, (train::Curve{{4, 5}, {8, 4}}));
  ASSERT_EQ(p[4].lines.size(), 2u);
  EXPECT_EQ(*p[4].lines[0].second, (train::Curve{{1, 2}, {2, 1}}));  // train dfl
  EXPECT_EQ(*p[4].lines[1].second, (train::Curve{{1, 4}, {2, 4}}));  // val dfl
  EXPECT_EQ(p[5].ylabel, "%");
  EXPECT_EQ(p[5].lines[1].first, "map50_95");
  EXPECT_EQ(*p[5].lines[1].second, (train::Curve{{1, 20}, {2, 26}}));
  EXPECT_EQ(*p[6].lines[0].second, (train::Curve{{1, 50}, {2, 50}}));

  const fs::path old = dir.path() / "old.jsonl";  // an earlier version's detection run
  write_file(old,
             "{\"event\": \"start\"}\n"
             "{\"event\": \"epoch\", \"epoch\": 1, \"global_step\": 4, \"train_loss\": 12.1, "
             "\"val_loss\": 11.9, \"val_map50_95\": 0.25, \"lr\": 0.0005}\n");
  const train::RunCurves o = train::read_run_curves(old.string());
  EXPECT_EQ(o.metric_keys, std::vector<std::string>{"val_map50_95"});
  EXPECT_EQ(o.epoch.at("val_map50_95"), (train::Curve{{1, 25}}));
  const std::vector<train::Panel> op = train::run_panels(o);
  ASSERT_EQ(op.size(), 4u);
  EXPECT_EQ(op[2].ylabel, "val_map50_95 (%)");
  // A classification run's accuracy was always percent: left as it is.
  const fs::path cls = dir.path() / "cls.jsonl";
  write_file(cls, "{\"event\": \"epoch\", \"epoch\": 1, \"val_accuracy\": 52.5}\n");
  EXPECT_EQ(train::read_run_curves(cls.string()).epoch.at("val_accuracy"),
            (train::Curve{{1, 52.5}}));
}

// Only the lead rank writes anything.
TEST(RunMetrics, OtherRanksWriteNothing) {
  TempDir dir("rm");
  train::RunMetrics m(false, dir.str(), false, {{"val_accuracy"}, {}});
  m.write({{"event", "epoch"}, {"train_loss", 1.0}}, 5);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// ---- the validation loss -----------------------------------------------------------------------

// task::evaluate's LossSum weights each batch by its images: over batches of 4 (10 images, the
// last batch of 2) its mean equals the cross-entropy of all 10 images at once; the model is left
// in training mode; no LossSum, no change to the metric.
TEST(ValLoss, EvaluateLossIsTheMeanPerImage) {
  manual_seed(4);
  auto model = nn::make_model("lenet", 3);
  auto ds = std::make_shared<data::InMemoryDataset>(std::vector<std::string>{"r", "g", "b"});
  Rng rng(8, 2);
  std::vector<uint8_t> px(32 * 32 * 3);
  for (int i = 0; i < 10; ++i) {
    for (auto& v : px) v = static_cast<uint8_t>(rng.randint(256));
    ds->add(px.data(), 32, 32, i % 3);
  }
  auto t = task::make_task("classify");
  data::DataLoaderOptions o;
  o.batch_size = 4;
  data::DataLoader loader(ds, t->eval_transform(), o);
  task::LossSum loss;
  model->train();
  auto m = task::evaluate(*t, *model, loader, false, &loss);
  EXPECT_TRUE(model->is_training());
  EXPECT_EQ(loss.count, 10);
  data::DataLoaderOptions all = o;
  all.batch_size = 10;
  data::DataLoader one(ds, t->eval_transform(), all);
  model->eval();
  NoGradGuard ng;
  one.begin_epoch(0);
  data::Batch b;
  ASSERT_TRUE(one.next(b));
  const double whole = F::cross_entropy(model->forward(b.images), b.labels).item();
  EXPECT_NEAR(loss.mean(), whole, 1e-5 * std::abs(whole));
  EXPECT_EQ(task::evaluate(*t, *model, loader)->state(), m->state());
  EXPECT_TRUE(std::isnan(task::LossSum{}.mean()));
}

// ---- through the binary ------------------------------------------------------------------------

namespace {

// The tutorial recipe on 5 x 12 tiny CIFAR-10 images, 20 held out for validation: 40 training
// images at batch 4 = 10 steps per epoch, a loss line every 4.
std::vector<std::string> mt_args(const fs::path& data, const fs::path& out, int epochs) {
  return tiny_train_args(
      data, out, epochs,
      {.model = "", .dataset = "", .momentum = "", .extra = {"--val-split", "20"}});
}

class MetricsRunTest : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_cifar10(dir_ / "data", 12, 8); }
  RunResult run(const std::vector<std::string>& args) { return run_hpcnet(args, dir_.path()); }
  TempDir dir_{"metrics"};
};

const char* kCsvHeader =
    "epoch,step,time,train_loss,val_loss,val_accuracy,lr,seconds,images_per_sec";

// Row k of metrics.csv against epoch record k of metrics.jsonl.
void mt_expect_rows_match(const std::vector<std::string>& rows,
                          const std::vector<nlohmann::json>& epochs) {
  ASSERT_EQ(rows.size(), epochs.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    SCOPED_TRACE(rows[k]);
    std::vector<std::string> f;
    std::stringstream ss(rows[k]);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 9u);
    const nlohmann::json& e = epochs[k];
    EXPECT_EQ(f[0], std::to_string(e.at("epoch").get<int64_t>()));
    EXPECT_EQ(f[1], std::to_string(e.at("global_step").get<int64_t>()));
    EXPECT_DOUBLE_EQ(std::stod(f[2]), e.at("time").get<double>());
    EXPECT_DOUBLE_EQ(std::stod(f[3]), e.at("train_loss").get<double>());
    EXPECT_DOUBLE_EQ(std::stod(f[4]), e.at("val_loss").get<double>());
    EXPECT_DOUBLE_EQ(std::stod(f[5]), e.at("val_accuracy").get<double>());
    EXPECT_DOUBLE_EQ(std::stod(f[6]), e.at("lr").get<double>());
    EXPECT_DOUBLE_EQ(std::stod(f[7]), e.at("seconds").get<double>());
    EXPECT_DOUBLE_EQ(std::stod(f[8]), e.at("images_per_sec").get<double>());
  }
}

// The scalars metrics.jsonl implies (docs/metrics.md), written out here rather than through
// tensorboard_scalars, so a change of the mapping fails this test.
Scalars mt_expected_scalars(const std::vector<nlohmann::json>& recs) {
  Scalars s;
  for (const nlohmann::json& r : recs) {
    const int64_t step = r.at("global_step");
    auto put = [&](const char* key, const char* tag) {
      s[tag].emplace_back(step, static_cast<float>(r.at(key).get<double>()));
    };
    if (r.at("event") == "log") put("loss", "train/loss");
    if (r.at("event") == "epoch") {
      put("train_loss", "train/epoch_loss");
      put("val_loss", "val/loss");
      put("val_accuracy", "val/accuracy");
      put("lr", "lr");
      put("images_per_sec", "images_per_sec");
    }
  }
  return s;
}

}  // namespace

// A 2-epoch run: every metrics.jsonl record has a wall-clock time and the global step, epoch
// records a finite val_loss and the lr; metrics.csv holds the header and one row per epoch equal
// to those records; the event file holds exactly their scalars. --resume to 3 epochs appends a
// row (no second header) and adds a second event file; a run replacing it (--exist-ok) starts
// both afresh.
TEST_F(MetricsRunTest, CsvJsonlAndEventsOfARunAndItsResume) {
  const fs::path run_dir = dir_ / "run";
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  RunResult r = run(mt_args(dir_ / "data", run_dir, 2));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<nlohmann::json> recs = mt_records(run_dir);
  std::vector<nlohmann::json> epochs;
  int64_t logs = 0;
  double last_time = 0;
  for (const nlohmann::json& j : recs) {
    SCOPED_TRACE(j.dump());
    ASSERT_TRUE(j.contains("time") && j.at("time").is_number_float());
    ASSERT_TRUE(j.contains("global_step") && j.at("global_step").is_number_integer());
    EXPECT_GE(j.at("time").get<double>(), before - 1);
    EXPECT_GE(j.at("time").get<double>(), last_time);
    last_time = j.at("time");
    if (j.at("event") == "start") EXPECT_EQ(j.at("global_step"), 0);
    if (j.at("event") == "log") {
      ++logs;
      EXPECT_EQ(j.at("global_step"),
                (j.at("epoch").get<int64_t>() - 1) * 10 + j.at("step").get<int64_t>());
    }
    if (j.at("event") == "epoch") {
      epochs.push_back(j);
      EXPECT_EQ(j.at("global_step"), j.at("epoch").get<int64_t>() * 10);
      ASSERT_TRUE(j.at("val_loss").is_number());
      EXPECT_TRUE(std::isfinite(j.at("val_loss").get<double>()));
      EXPECT_GT(j.at("val_loss").get<double>(), 0);
      EXPECT_DOUBLE_EQ(j.at("lr").get<double>(), 0.01);
    }
    if (j.at("event") == "end") EXPECT_EQ(j.at("global_step"), 20);
  }
  EXPECT_EQ(logs, 4);  // steps 4 and 8 of each epoch
  ASSERT_EQ(epochs.size(), 2u);

  std::vector<std::string> csv = split_lines(read_file(run_dir / "metrics.csv"));
  ASSERT_EQ(csv.size(), 3u) << read_file(run_dir / "metrics.csv");
  EXPECT_EQ(csv[0], kCsvHeader);
  mt_expect_rows_match({csv.begin() + 1, csv.end()}, epochs);

  std::vector<fs::path> files = mt_event_files(run_dir);
  ASSERT_EQ(files.size(), 1u);
  std::string err;
  std::vector<tb::Event> ev = read_event_file(files[0], &err);
  EXPECT_EQ(err, "");
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  Scalars got = mt_scalars(files);
  EXPECT_EQ(got, mt_expected_scalars(recs));
  EXPECT_EQ(got["train/loss"].size(), 4u);
  EXPECT_EQ(got["val/accuracy"].size(), 2u);

  // --resume to 3 epochs.
  r = run({"train", "--resume", run_dir.string(), "--epochs", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  recs = mt_records(run_dir);
  epochs.clear();
  for (const nlohmann::json& j : recs)
    if (j.at("event") == "epoch") epochs.push_back(j);
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_EQ(epochs.back().at("global_step"), 30);
  csv = split_lines(read_file(run_dir / "metrics.csv"));
  ASSERT_EQ(csv.size(), 4u) << read_file(run_dir / "metrics.csv");
  EXPECT_EQ(csv[0], kCsvHeader);
  mt_expect_rows_match({csv.begin() + 1, csv.end()}, epochs);
  files = mt_event_files(run_dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(mt_scalars(files), mt_expected_scalars(recs));

  // --exist-ok replaces the run: one event file, a fresh CSV.
  std::vector<std::string> replace = mt_args(dir_ / "data", run_dir, 1);
  replace.push_back("--exist-ok");
  r = run(replace);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(mt_event_files(run_dir).size(), 1u);
  EXPECT_EQ(split_lines(read_file(run_dir / "metrics.csv")).size(), 2u);
}

// `hpcnet plot RUN` writes RUN/results.png (a PNG: its signature, non-trivial size) and prints its
// path; --out elsewhere; an empty folder, a metrics.jsonl without log or epoch records, a folder
// that does not exist and an --out in a missing folder are refused with one line and exit 2.
TEST_F(MetricsRunTest, PlotWritesAPngAndRefusesWhatItCannotPlot) {
#ifndef HPCNET_WITH_PLPLOT
  GTEST_SKIP() << "built without PLplot (-DHPCNET_PLOT=OFF)";
#endif
  const fs::path run_dir = dir_ / "run";
  ASSERT_EQ(run(mt_args(dir_ / "data", run_dir, 2)).rc, 0);
  RunResult r = run({"plot", run_dir.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, (run_dir / "results.png").string() + "\n");
  const std::string png = read_file(run_dir / "results.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  // Width and height, big-endian in IHDR.
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(png[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(png[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(png[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(png[at + 3]));
  };
  EXPECT_EQ(be32(16), 1600u);
  EXPECT_EQ(be32(20), 1100u);
  for (const auto& e : fs::directory_iterator(run_dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();

  r = run({"plot", run_dir.string(), "--out", (dir_ / "elsewhere.png").string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_file(dir_ / "elsewhere.png").substr(1, 3), "PNG");

  fs::create_directories(dir_ / "empty");
  expect_refused(run({"plot", (dir_ / "empty").string()}), "empty folder", {"metrics.jsonl"});
  write_file(dir_ / "empty" / "metrics.jsonl", "{\"event\": \"start\"}\n");
  expect_refused(run({"plot", (dir_ / "empty").string()}), "no records", {"no log or epoch"});
  expect_refused(run({"plot", (dir_ / "missing").string()}), "missing folder", {"missing"});
  expect_refused(run({"plot", run_dir.string(), "--out", (dir_ / "no" / "x.png").string()}),
                 "--out in a missing folder", {"does not exist"});
}
