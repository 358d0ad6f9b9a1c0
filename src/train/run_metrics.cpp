// RunMetrics: each record of the training loop written once per sink, metrics.jsonl first, then
// the CSV row and the TensorBoard event. The loop decides what a record holds; this file decides
// only where its numbers go and under which names.
#include "src/train/run_metrics.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace hpcnet::train {

namespace {
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The record's field as a finite number, or nothing.
std::optional<double> number(const nlohmann::json& r, const std::string& key) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

// A CSV field: integers as integers, other numbers in their shortest round-trip form, "" for a
// missing or non-finite value.
std::string csv_number(const nlohmann::json& r, const std::string& key) {
  auto it = r.find(key);
  if (it == r.end()) return "";
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  const std::optional<double> v = number(r, key);
  if (!v) return "";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, *v);
  return std::string(buf, res.ptr);
}
}  // namespace

std::vector<std::string> metrics_csv_columns(const RunMetricKeys& keys) {
  std::vector<std::string> c = {"epoch", "step", "time", "train_loss"};
  for (const std::string& p : keys.loss_parts) c.push_back("train_" + p);
  c.push_back("val_loss");
  for (const std::string& p : keys.loss_parts) c.push_back("val_" + p);
  c.insert(c.end(), keys.values.begin(), keys.values.end());
  for (const char* k : {"lr", "seconds", "images_per_sec"}) c.push_back(k);
  return c;
}

void put_named(nlohmann::json& rec, const std::string& prefix,
               const std::vector<std::string>& names, const std::vector<double>& values) {
  HPCNET_CHECK(names.size() == values.size(), prefix + ": " + std::to_string(values.size()) +
                                                  " values for " + std::to_string(names.size()) +
                                                  " names");
  for (size_t k = 0; k < names.size(); ++k) rec[prefix + names[k]] = values[k];
}

void LossPartSums::add(const std::vector<double>& parts) {
  if (parts.empty()) return;
  HPCNET_CHECK(parts.size() == sums_.size(), "loss parts: " + std::to_string(parts.size()) +
                                                 " numbers for " +
                                                 std::to_string(sums_.size()) + " names");
  for (size_t k = 0; k < parts.size(); ++k) sums_[k] += parts[k];
  ++steps_;
}

void LossPartSums::put_means(nlohmann::json& rec, const std::string& prefix,
                             dist::ProcessGroup& pg) {
  if (names_.empty()) return;
  std::vector<double> s = sums_;
  s.push_back(steps_);
  if (pg.world_size() > 1) pg.allreduce_sum(s.data(), s.size());
  const double n = s.back();
  for (size_t k = 0; k < names_.size(); ++k)
    rec[prefix + names_[k]] = n > 0 ? s[k] / n : std::nan("");
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record) {
  std::vector<std::pair<std::string, double>> out;
  if (!record.is_object()) return out;
  auto add = [&](const std::string& key, const std::string& tag) {
    if (std::optional<double> v = number(record, key)) out.emplace_back(tag, *v);
  };
  const std::string event = record.value("event", "");
  if (event == "log") {
    add("loss", "train/loss");
  } else if (event == "epoch") {
    add("train_loss", "train/epoch_loss");
    for (const auto& [key, value] : record.items())
      if (key.rfind("train_", 0) == 0 && key != "train_loss") add(key, "train/" + key.substr(6));
    add("val_loss", "val/loss");
    for (const auto& [key, value] : record.items())
      if (key.rfind("val_", 0) == 0 && key != "val_loss") add(key, "val/" + key.substr(4));
    add("lr", "lr");
    add("images_per_sec", "images_per_sec");
  }
  return out;
}

namespace {
// A resumed run's metrics.csv with the columns of an earlier version (before a task's loss parts
// and further values had columns: epoch ... val_loss, the headline, lr, seconds, images_per_sec)
// is moved to metrics.<n>.csv, the first n free, so the run goes on in a new file.
void move_legacy_csv(const fs::path& csv, const RunMetricKeys& keys) {
  const std::vector<std::string> now = metrics_csv_columns(keys);
  const std::vector<std::string> old =
      metrics_csv_columns({{keys.values.empty() ? "" : keys.values.front()}, {}});
  if (now == old) return;
  std::ifstream in(csv);
  std::string first;
  if (!in || !std::getline(in, first)) return;
  std::string header;
  for (const std::string& c : old) header += (header.empty() ? "" : ",") + c;
  if (first != header) return;  // CsvLog says what is wrong with another file
  in.close();
  for (int n = 1;; ++n) {
    const fs::path to = csv.parent_path() / ("metrics." + std::to_string(n) + ".csv");
    std::error_code ec;
    if (fs::exists(to, ec)) continue;
    fs::rename(csv, to, ec);
    HPCNET_REQUIRE(!ec, csv.string() + ": cannot move the file of an earlier version to " +
                            to.string() + ": " + ec.message());
    return;
  }
}
}  // namespace

RunMetrics::RunMetrics(bool lead, const std::string& dir, bool append,
                       const RunMetricKeys& keys) {
  if (!lead) return;
  if (!append) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
        fs::remove(e.path(), ec);
  }
  jsonl_.emplace((fs::path(dir) / "metrics.jsonl").string(), append);
  const fs::path csv = fs::path(dir) / "metrics.csv";
  if (append) move_legacy_csv(csv, keys);
  csv_.emplace(csv.string(), metrics_csv_columns(keys), append);
  events_.emplace(dir, unix_now());
}

void RunMetrics::write(nlohmann::json record, int64_t global_step) {
  if (!jsonl_) return;
  HPCNET_CHECK(record.is_object() && record.contains("event") && record.at("event").is_string(),
               "a metrics record must be a JSON object with a string \"event\"");
  const double now = unix_now();
  record["time"] = now;
  record["global_step"] = global_step;
  const std::string event = record.at("event").get<std::string>();
  if (event == "start") record["metric_unit"] = kMetricUnit;
  jsonl_->write(record);
  if (event == "epoch") {
    std::vector<std::string> row;
    for (const std::string& c : csv_->columns())
      row.push_back(c == "step" ? std::to_string(global_step) : csv_number(record, c));
    csv_->write(row);
  }
  events_->add_scalars(global_step, now, tensorboard_scalars(record));
}

}  // namespace hpcnet::train
