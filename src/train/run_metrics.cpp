// RunMetrics: each record of the training loop written once per sink, metrics.jsonl first, then
// the CSV row and the TensorBoard event. The loop decides what a record holds; this file decides
// only where its numbers go and under which names.
#include "src/train/run_metrics.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>

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

std::vector<std::string> metrics_csv_columns(const std::string& metric_key) {
  return {"epoch",    "step", "time",    "train_loss",    "val_loss",
          metric_key, "lr",   "seconds", "images_per_sec"};
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
    add("val_loss", "val/loss");
    for (const auto& [key, value] : record.items())
      if (key.rfind("val_", 0) == 0 && key != "val_loss") add(key, "val/" + key.substr(4));
    add("lr", "lr");
    add("images_per_sec", "images_per_sec");
  }
  return out;
}

RunMetrics::RunMetrics(bool lead, const std::string& dir, bool append,
                       const std::string& metric_key)
    : metric_key_(metric_key) {
  if (!lead) return;
  if (!append) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
        fs::remove(e.path(), ec);
  }
  jsonl_.emplace((fs::path(dir) / "metrics.jsonl").string(), append);
  csv_.emplace((fs::path(dir) / "metrics.csv").string(), metrics_csv_columns(metric_key), append);
  events_.emplace(dir, unix_now());
}

void RunMetrics::write(nlohmann::json record, int64_t global_step) {
  if (!jsonl_) return;
  HPCNET_CHECK(record.is_object() && record.contains("event") && record.at("event").is_string(),
               "a metrics record must be a JSON object with a string \"event\"");
  const double now = unix_now();
  record["time"] = now;
  record["global_step"] = global_step;
  jsonl_->write(record);
  if (record.at("event").get_ref<const std::string&>() == "epoch") {
    std::vector<std::string> row;
    for (const std::string& c : csv_->columns())
      row.push_back(c == "step" ? std::to_string(global_step) : csv_number(record, c));
    csv_->write(row);
  }
  events_->add_scalars(global_step, now, tensorboard_scalars(record));
}

}  // namespace hpcnet::train
