// Files hpcnet writes and reads: safetensors checkpoints (the Hugging Face format, so a model saved
// here loads in PyTorch and back), crash-safe atomic file writes, and JSON Lines metrics logs.
// Invariants: a file written through write_file_atomic is either the complete new file or the
// previous one, never a mix; load_safetensors returns only tensors that passed every check.
#pragma once

#include <cstddef>
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
// says ("truncated: ...") or trailing bytes after it, or non-string metadata.
SafetensorsFile load_safetensors(const std::string& path);

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

}  // namespace hpcnet
