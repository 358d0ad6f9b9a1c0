// Metrics logs: JSON Lines (one compact JSON object per line) and CSV (a header row, then one row
// per record), both flushed line by line so a killed run leaves every finished line readable.
#include <cerrno>
#include <cstring>
#include <istream>
#include <nlohmann/json.hpp>

#include "hpcnet/io.h"

namespace hpcnet {

namespace {
// True when the file at path exists, is not empty and its last byte is not '\n'.
bool ends_mid_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  std::streamoff size = in.tellg();
  if (size <= 0) return false;
  in.seekg(size - 1);
  char last = '\n';
  in.get(last);
  return in && last != '\n';
}
}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  const bool repair = append && ends_mid_line(path);
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) {
    int err = errno;
    throw InputError(path + ": cannot open the metrics log for writing: " + std::strerror(err));
  }
  if (repair) out_ << '\n' << std::flush;
}

void MetricsLog::write(const nlohmann::json& record) {
  HPCNET_CHECK(record.is_object(), path_ + ": a metrics record must be a JSON object, got " +
                                       std::string(record.type_name()));
  // Compact dump: strings have their newlines escaped, so a record is always one line.
  out_ << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  out_.flush();
  if (!out_) throw Error(path_ + ": writing the metrics log failed (disk full?)");
}

namespace {
// The CSV field for s: as it is, or quoted with its quotes doubled when it holds , " CR or LF.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_field(fields[i]);
  return line;
}

// The first line of the file without its line break ("" for a missing or empty file).
std::string first_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (in) std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}
}  // namespace

CsvLog::CsvLog(const std::string& path, std::vector<std::string> columns, bool append)
    : path_(path), columns_(std::move(columns)) {
  const std::string header = csv_line(columns_);
  const std::string existing = append ? first_line(path) : std::string();
  if (!existing.empty() && existing != header)
    throw InputError(path + ": its header row is '" + existing + "', not '" + header +
                     "' (another program's file?): move it away to continue the run");
  const bool repair = append && ends_mid_line(path);
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) {
    int err = errno;
    throw InputError(path + ": cannot open the CSV log for writing: " + std::strerror(err));
  }
  if (repair) out_ << '\n';
  if (existing.empty()) out_ << header << '\n';
  out_.flush();
  if (!out_) throw Error(path_ + ": writing the CSV log failed (disk full?)");
}

void CsvLog::write(const std::vector<std::string>& row) {
  HPCNET_CHECK(row.size() == columns_.size(),
               path_ + ": a CSV row of " + std::to_string(row.size()) + " fields, the header has " +
                   std::to_string(columns_.size()));
  out_ << csv_line(row) << '\n';
  out_.flush();
  if (!out_) throw Error(path_ + ": writing the CSV log failed (disk full?)");
}

}  // namespace hpcnet
