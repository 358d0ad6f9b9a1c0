// JSON Lines metrics log: one compact JSON object per line, flushed line by line.
#include <cerrno>
#include <cstring>
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

}  // namespace hpcnet
