// Reads TensorBoard event files (TFRecord framing around tb::Event protobufs) independently of
// hpcnet's writer: every record's length, both masked CRC-32Cs and the protobuf are checked. Shared
// by the tests of the writer (tests/io/) and of a run's event files (tests/train/).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hpcnet/io.h"
#include "src/io/tb_event.pb.h"
#include "test_util.h"

namespace hpcnet::test_util {

// The little-endian 64-bit (32-bit) integer at b[at].
inline uint64_t le64(const std::string& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
inline uint32_t le32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

// The events of a TFRecord file, every record's framing and both CRCs checked; "" in *error when
// the whole file is well formed, else what is wrong first.
inline std::vector<tb::Event> read_event_file(const fs::path& p, std::string* error) {
  const std::string b = read_file(p);
  std::vector<tb::Event> out;
  *error = "";
  size_t at = 0;
  while (at < b.size()) {
    if (b.size() - at < 12) {
      *error = "truncated header at byte " + std::to_string(at);
      return out;
    }
    const uint64_t len = le64(b, at);
    if (le32(b, at + 8) != crc32c_masked(crc32c(b.data() + at, 8))) {
      *error = "bad length CRC at byte " + std::to_string(at);
      return out;
    }
    if (b.size() - at - 12 < len + 4) {
      *error = "truncated data at byte " + std::to_string(at);
      return out;
    }
    const std::string data = b.substr(at + 12, len);
    if (le32(b, at + 12 + len) != crc32c_masked(crc32c(data.data(), data.size()))) {
      *error = "bad data CRC at byte " + std::to_string(at);
      return out;
    }
    tb::Event e;
    if (!e.ParseFromString(data)) {
      *error = "not an Event at byte " + std::to_string(at);
      return out;
    }
    out.push_back(e);
    at += 12 + len + 4;
  }
  return out;
}

}  // namespace hpcnet::test_util
