// Files hpcnet writes and reads: safetensors checkpoints (the Hugging Face format, so a model saved
// here loads in PyTorch and back), crash-safe atomic file writes, JSON Lines and CSV metrics logs,
// and TensorBoard event files.
// Invariants: a file written through write_file_atomic is either the complete new file or the
// previous one, never a mix; load_safetensors returns only tensors that passed every check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hpcnet/tensor.h"

namespace hpcnet {

// ---- atomic writes ----

// Writes a file so that a crash or an exception never leaves it half-written.
// Requires: the folder of `path` exists and is writable.
// Ensures: writer's bytes go to `path + ".tmp.<pid>"` in the same folder, which is flushed,
// fsync'ed and renamed over `path`, after which the folder is fsync'ed. If `path` existed, the new
// file keeps its permission bits. If writer throws, or any write fails, the temp file is removed,
// the previous `path` (if any) is left untouched, and the exception is rethrown.
// Throws: InputError when the temp file cannot be created (missing folder, no permission);
// Error when writing, syncing or renaming fails (e.g. disk full).
// Not for two threads of one process writing the same path at once (they share the temp name).
// Testing: HPCNET_TEST_WRITE_FAULT (src/io/write_fault.h) kills the process or fails a write with
// ENOSPC at a chosen byte of a chosen write; unset, it costs nothing.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer);
// The same for bytes already in memory.
void write_file_atomic(const std::string& path, std::string_view bytes);

// ---- safetensors ----
//
// Layout: u64 little-endian N | N bytes of JSON header | raw little-endian tensor data.
// Header: {"__metadata__": {str: str}, "name": {"dtype": "F32", "shape": [..],
//          "data_offsets": [begin, end]}, ...}; offsets are relative to the start of the data;
// the header is padded with spaces so the data starts at a multiple of 8 bytes.

// The safetensors dtype code of t: "F32", "F64", "BF16", "F16", "I64", "I32", "U8".
const char* safetensors_dtype_code(DType t);

// Saves tensors, in the given order, with optional string metadata, through write_file_atomic.
// Requires: unique names, none equal to "__metadata__"; every tensor defined and on the CPU
// (non-contiguous tensors are written as their contiguous copy; autograd state is not saved).
// Ensures: the data of tensor i follows that of tensor i-1 with no gap; the header lists
// "__metadata__" first (omitted when metadata is empty), then the tensors in the given order.
// Throws: Error for a broken requirement; as write_file_atomic for file failures.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;        // contiguous CPU tensors, by name
  std::vector<std::string> order;               // names in the order their data lies in the file
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
  // The tensor called name. Throws InputError naming the file and the missing entry.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const { return tensors.count(name) != 0; }
  std::string path;  // where it was loaded from, for messages
};

// Loads and validates a whole safetensors file.
// Throws InputError, one line beginning "<path>: ", when the file cannot be read or is not valid:
// shorter than 8 bytes, an implausible header length, a header that is not a JSON object,
// duplicate names, an unknown dtype, a malformed shape or data_offsets, offsets that disagree
// with shape x dtype size, overlapping tensors or gaps between them, data shorter than the header
// says ("truncated: ...") or trailing bytes after it, or non-string metadata. Hostile files are
// refused before a large allocation: not a regular file (a FIFO, a device), a header over 100 MB,
// JSON nested over 64 deep, a number out of range, over 8 MiB of metadata, over 64 dimensions.
// Linear in the header's size (O(n log n) in its tensor count).
SafetensorsFile load_safetensors(const std::string& path);
// The same checks on a whole safetensors file held in memory (size bytes at data); messages and
// SafetensorsFile::path use `name` as the file's.
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

// ---- metrics log ----

// A JSON Lines file: one JSON object per line, each flushed as it is written, so a run that is
// killed leaves every finished record readable. Non-finite numbers are written as null (JSON has
// no NaN); invalid UTF-8 in strings is replaced by U+FFFD.
class MetricsLog {
 public:
  // append = false truncates an existing file. With append = true, a last line cut short by a
  // crash is ended with a newline first, so the next record starts on a line of its own.
  // Throws InputError when the file cannot be opened for writing.
  MetricsLog(const std::string& path, bool append);
  MetricsLog(MetricsLog&&) = default;
  MetricsLog& operator=(MetricsLog&&) = default;

  // Requires: record is a JSON object. Throws Error when the write fails (e.g. disk full).
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// ---- CSV log ----

// A CSV file (RFC 4180: fields holding a comma, a quote or a line break are quoted) with a header
// row of fixed columns and one row per write, each flushed as it is written.
class CsvLog {
 public:
  // append = false truncates an existing file and writes the header. append = true keeps the
  // file's rows, ends a last line cut short by a crash, and writes the header only when the file
  // is new or empty.
  // Throws InputError when the file cannot be opened, or (append) when its header row is not
  // `columns` (another program's file, or one of another task: move it away).
  CsvLog(const std::string& path, std::vector<std::string> columns, bool append);
  CsvLog(CsvLog&&) = default;
  CsvLog& operator=(CsvLog&&) = default;

  // Requires row.size() == columns().size() (Error otherwise); "" is an empty (missing) field.
  // Throws Error when the write fails.
  void write(const std::vector<std::string>& row);
  const std::vector<std::string>& columns() const { return columns_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> columns_;
  std::ofstream out_;
};

// ---- TensorBoard event files ----
//
// A file of TFRecords: per record u64 little-endian length | u32 masked CRC-32C of the length's 8
// bytes | the data | u32 masked CRC-32C of the data, where masked(c) = ((c >> 15) | (c << 17)) +
// 0xa282ead8. Each record's data is a serialized Event (src/io/tb_event.proto, TensorFlow's field
// numbers); the first holds file_version "brain.Event:2".

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of n bytes, continuing from crc (0 for a
// new checksum): crc32c("123456789") = 0xe3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The TFRecord mask of a CRC (see above).
uint32_t crc32c_masked(uint32_t crc);
// The whole TFRecord (header, data, footer) of data.
std::string tfrecord_frame(std::string_view data);

// Writes one TensorBoard event file: DIR/events.out.tfevents.<unix time, 10 digits>.<hostname>.
// <pid> (".N" added in the unlikely case that name exists), TensorBoard's own naming, so
// `tensorboard --logdir DIR` finds it. Every event is flushed as it is written.
class TensorBoardWriter {
 public:
  // Creates the file and writes the file_version event at wall_time (unix seconds).
  // Requires: dir exists. Throws InputError when the file cannot be created.
  TensorBoardWriter(const std::string& dir, double wall_time);
  TensorBoardWriter(TensorBoardWriter&&) = default;
  TensorBoardWriter& operator=(TensorBoardWriter&&) = default;

  // One Event at (step, wall_time) whose Summary holds each (tag, value) as a float32
  // simple_value, in the given order; nothing is written for an empty list.
  // Throws Error when the write fails.
  void add_scalars(int64_t step, double wall_time,
                   const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& serialized);
  std::string path_;
  std::ofstream out_;
};

}  // namespace hpcnet
