// TensorBoard event files: CRC-32C, TFRecord framing and the writer of scalar summaries. The
// messages are src/io/tb_event.proto's (TensorFlow's field numbers), serialized by protobuf; each
// record is flushed whole, so a killed run leaves every event before the last one readable.
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "hpcnet/io.h"
#include "src/io/tb_event.pb.h"

namespace hpcnet {

namespace {
// The byte-at-a-time table of the reflected Castagnoli polynomial.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}
}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t crc32c_masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view data) {
  std::string rec;
  rec.reserve(data.size() + 16);
  put_le(rec, data.size(), 8);
  put_le(rec, crc32c_masked(crc32c(rec.data(), 8)), 4);
  rec.append(data);
  put_le(rec, crc32c_masked(crc32c(data.data(), data.size())), 4);
  return rec;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, double wall_time) {
  namespace fs = std::filesystem;
  const std::string base =
      "events.out.tfevents." +
      [&] {
        char t[32];
        std::snprintf(t, sizeof t, "%010lld", static_cast<long long>(std::floor(wall_time)));
        return std::string(t);
      }() +
      "." + host_name() + "." + std::to_string(::getpid());
  path_ = (fs::path(dir) / base).string();
  std::error_code ec;
  for (int k = 1; fs::exists(path_, ec); ++k)
    path_ = (fs::path(dir) / base).string() + "." + std::to_string(k);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) {
    int err = errno;
    throw InputError(path_ + ": cannot create the TensorBoard event file: " + std::strerror(err));
  }
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  write_event(e.SerializeAsString());
}

void TensorBoardWriter::add_scalars(int64_t step, double wall_time,
                                    const std::vector<std::pair<std::string, double>>& scalars) {
  if (scalars.empty()) return;
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tb::Summary* s = e.mutable_summary();
  for (const auto& [tag, v] : scalars) {
    tb::Summary::Value* val = s->add_value();
    val->set_tag(tag);
    val->set_simple_value(static_cast<float>(v));
  }
  write_event(e.SerializeAsString());
}

void TensorBoardWriter::write_event(const std::string& serialized) {
  const std::string rec = tfrecord_frame(serialized);
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
  out_.flush();
  if (!out_) throw Error(path_ + ": writing the TensorBoard event file failed (disk full?)");
}

}  // namespace hpcnet
