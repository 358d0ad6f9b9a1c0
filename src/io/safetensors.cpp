// safetensors reader and writer (https://github.com/huggingface/safetensors, format only).
// Writing goes through write_file_atomic; reading (a file, or bytes in memory) validates the header
// against the data before any tensor is built, then reads each tensor's bytes straight into its own
// storage. Hostile headers are bounded: size, nesting depth, metadata size and shape rank; parsing
// is O(n log n).
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <streambuf>

#include "hpcnet/io.h"

namespace hpcnet {

static_assert(
    std::endian::native == std::endian::little,
    "safetensors data is little-endian; hpcnet's reader and writer copy bytes as they are");

namespace {

// The Hugging Face reader refuses headers above 100 MB; so do we, before allocating one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A header nests 3 deep (header, tensor, shape); deeper JSON is refused while parsing, so that
// nothing recursive (dump, destruction) ever meets a 100,000-deep value.
constexpr int kMaxJsonDepth = 64;
// __metadata__ keys and values together (hpcnet's largest, a list of class names, is far less).
constexpr uint64_t kMaxMetadataBytes = uint64_t{8} << 20;
// Dimensions of one tensor (PyTorch tensors rarely have more than 8).
constexpr size_t kMaxRank = 64;

struct DTypeCode {
  const char* code;
  DType dtype;
};
constexpr DTypeCode kDTypeCodes[] = {
    {"F32", DType::kFloat32}, {"F64", DType::kFloat64}, {"BF16", DType::kBFloat16},
    {"F16", DType::kFloat16}, {"I64", DType::kInt64},   {"I32", DType::kInt32},
    {"U8", DType::kUInt8},
};

// A name for a message, cut at 200 characters (a hostile header may hold megabyte names).
std::string in_quotes(const std::string& s) {
  return "'" + (s.size() <= 200 ? s : s.substr(0, 200) + "...") + "'";
}

// A JSON value for a message: its text, cut at 80 characters.
template <class Json>
std::string brief(const Json& v) {
  std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 80) + "...";
}

// A tensor's entry in the header, checked on its own.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
  std::map<std::string, Tensor>::iterator slot;  // its place in SafetensorsFile::tensors
};

using Json = nlohmann::json;  // std::map objects: O(log n) per key, unlike ordered_json's O(n)

uint64_t json_u64(const Json& v, const std::string& what, const std::string& where) {
  HPCNET_REQUIRE(v.is_number_unsigned(),
                 where + ": " + what + " must be a non-negative integer, got " + brief(v));
  return v.get<uint64_t>();
}

// The header in one pass of nlohmann's SAX parser: each top-level value (a tensor's entry, the
// metadata) is built as a small json on its own and handed to on_value(key, value) as soon as it
// ends, so the whole header never exists as one json. Nesting over kMaxJsonDepth stops parsing
// as it starts. (nlohmann's parser callback, like ordered_json, is O(n^2) in an object's size:
// it scans the parent after each child object.)
struct HeaderReader final : nlohmann::json_sax<Json> {
  std::function<void(const std::string&, Json&&)> on_value;
  int depth = 0;
  bool too_deep = false;
  std::string top_key, key_in_value, last_key;  // last_key: the last key read, for messages
  std::string error;                            // why parsing stopped, when not too_deep
  size_t error_byte = 0;
  Json value;               // the top-level value being read
  std::vector<Json*> open;  // its containers being filled, innermost last

  // Places v where the value being read expects it; returns it.
  Json* place(Json&& v) {
    if (open.empty()) {
      value = std::move(v);
      return &value;
    }
    Json& parent = *open.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    Json& slot = parent[key_in_value];
    slot = std::move(v);
    return &slot;
  }
  bool scalar(Json&& v) {
    if (depth == 1 && open.empty()) {
      on_value(top_key, std::move(v));
      return true;
    }
    place(std::move(v));
    return true;
  }
  bool start(Json&& container) {
    if (++depth > kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    if (depth == 1) return true;  // the header object itself
    open.push_back(place(std::move(container)));
    return true;
  }
  bool end() {
    --depth;
    if (depth == 0) return true;
    open.pop_back();
    if (open.empty()) on_value(top_key, std::move(value));
    return true;
  }

  bool null() override { return scalar(Json()); }
  bool boolean(bool v) override { return scalar(Json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(Json(v)); }
  bool string(string_t& v) override { return scalar(Json(std::move(v))); }
  bool binary(binary_t&) override { return scalar(Json()); }  // JSON text holds none
  bool start_object(std::size_t) override { return start(Json::object()); }
  bool start_array(std::size_t) override { return start(Json::array()); }
  bool end_object() override { return end(); }
  bool end_array() override { return end(); }
  bool key(string_t& k) override {
    last_key = k;
    if (depth == 1)
      top_key = k;
    else
      key_in_value = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::json::exception& e) override {
    error_byte = position;
    const std::string t = token.size() <= 40 ? token : token.substr(0, 40) + "...";
    error = e.id == 406 ? "number " + t + " is out of range" : "unexpected '" + t + "'";
    return false;
  }
};

Entry parse_entry(const std::string& name, const Json& info, const std::string& path) {
  const std::string where = path + ": tensor " + in_quotes(name);
  HPCNET_REQUIRE(info.is_object(), where + " is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    HPCNET_REQUIRE(info.contains(key), where + " has no \"" + key + "\"");
  Entry e;
  e.name = name;

  const auto& dt = info["dtype"];
  HPCNET_REQUIRE(dt.is_string(), where + " has a dtype that is not a string: " + brief(dt));
  const std::string code = dt.get<std::string>();
  bool found = false;
  for (const auto& c : kDTypeCodes) {
    if (code == c.code) {
      e.dtype = c.dtype;
      found = true;
    }
  }
  HPCNET_REQUIRE(found,
                 where + " has dtype " + in_quotes(code.substr(0, 20)) +
                     ", which hpcnet cannot read (it reads F32, F64, BF16, F16, I64, I32, U8)");

  const auto& sh = info["shape"];
  HPCNET_REQUIRE(sh.is_array(), where + " has a shape that is not a list: " + brief(sh));
  HPCNET_REQUIRE(sh.size() <= kMaxRank, where + " has a shape of " + std::to_string(sh.size()) +
                                            " dimensions (at most " + std::to_string(kMaxRank) +
                                            " are read)");
  // Elements, with an overflow guard: numel * 8 bytes must fit in int64.
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8;
  uint64_t numel = 1;
  for (const auto& d : sh) {
    uint64_t n = json_u64(d, "each shape dimension", where);
    HPCNET_REQUIRE(n <= limit && (n == 0 || numel <= limit / n),
                   where + " has an impossibly large shape " + brief(sh));
    numel *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }

  const auto& off = info["data_offsets"];
  HPCNET_REQUIRE(off.is_array() && off.size() == 2,
                 where + " has data_offsets that are not [begin, end]: " + brief(off));
  e.begin = json_u64(off[0], "data_offsets", where);
  e.end = json_u64(off[1], "data_offsets", where);
  HPCNET_REQUIRE(e.begin <= e.end,
                 where + " has data_offsets " + brief(off) + " whose begin is after its end");
  const uint64_t want = numel * dtype_size(e.dtype);
  HPCNET_REQUIRE(e.end - e.begin == want, where + " has shape " + shape_str(e.shape) +
                                              " and dtype " + code + " (" + std::to_string(want) +
                                              " bytes) but data_offsets " + brief(off) + " span " +
                                              std::to_string(e.end - e.begin) + " bytes");
  return e;
}

}  // namespace

const char* safetensors_dtype_code(DType t) {
  for (const auto& c : kDTypeCodes)
    if (c.dtype == t) return c.code;
  HPCNET_CHECK(false, std::string("no safetensors code for dtype ") + dtype_name(t));
  return "";
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  auto it = tensors.find(name);
  HPCNET_REQUIRE(it != tensors.end(), path + ": has no tensor " + in_quotes(name));
  return it->second;
}

// ---- writing ----

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> data;
  data.reserve(tensors.size());
  std::set<std::string> seen;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header["__metadata__"];
    meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HPCNET_CHECK(name != "__metadata__",
                 path + ": \"__metadata__\" is reserved and cannot name a tensor");
    HPCNET_CHECK(seen.insert(name).second,
                 path + ": tensor name " + in_quotes(name) + " given twice");
    HPCNET_CHECK(t.defined(), path + ": tensor " + in_quotes(name) + " is undefined");
    HPCNET_CHECK(t.device().is_cpu(), path + ": tensor " + in_quotes(name) + " is on " +
                                          t.device().str() + "; copy it to the CPU to save it");
    Tensor c = t.contiguous();
    const uint64_t nbytes = c.nbytes();
    header[name] = {{"dtype", safetensors_dtype_code(c.dtype())},
                    {"shape", c.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(std::move(c));
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    throw InputError(path + ": a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t n = text.size();

  write_file_atomic(path, [&](std::ostream& os) {
    char len[8];
    std::memcpy(len, &n, 8);
    os.write(len, 8);
    os.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const Tensor& t : data)
      os.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  });
}

// ---- reading ----

namespace {

// A read-only, seekable stream buffer over bytes in memory (parse_safetensors).
class MemoryBuf final : public std::streambuf {
 public:
  MemoryBuf(const uint8_t* data, size_t size) {
    char* p = const_cast<char*>(reinterpret_cast<const char*>(data));
    setg(p, p, p + size);
  }

 protected:
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    const off_type base = dir == std::ios_base::beg   ? 0
                          : dir == std::ios_base::cur ? gptr() - eback()
                                                      : egptr() - eback();
    if (off < -base || off > (egptr() - eback()) - base) return pos_type(off_type(-1));
    setg(eback(), eback() + (base + off), egptr());
    return pos_type(base + off);
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override {
    return seekoff(off_type(pos), std::ios_base::beg, which);
  }
};

// Whether a torch.save zip archive pickles one of Ultralytics' classes (its best.pt / last.pt hold
// a DetectionModel): the archive's first member, data.pkl, is stored uncompressed and names the
// class as "ultralytics.nn.tasks" within its first few hundred bytes; the first 256 KiB are read.
bool pickles_ultralytics_model(std::istream& in, uint64_t file_size) {
  std::string head(static_cast<size_t>(std::min<uint64_t>(file_size, 256 * 1024)), '\0');
  in.clear();
  in.seekg(0);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return head.find("ultralytics.nn.") != std::string::npos;
}

// torch.save writes a zip archive ("PK\3\4") or, before PyTorch 1.6, a pickle (0x80, protocol):
// such a file (its first 8 bytes in first8) is refused with the command that converts it.
void refuse_torch_save(uint64_t first8, std::istream& in, uint64_t file_size,
                       const std::string& path) {
  unsigned char head[8];
  std::memcpy(head, &first8, 8);
  const bool zip = head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
  const bool pickle = head[0] == 0x80 && head[1] >= 2 && head[1] <= 5;
  if (zip && pickles_ultralytics_model(in, file_size))
    throw InputError(path +
                     ": an Ultralytics checkpoint (a pickled model), not safetensors: "
                     "convert it with python3 scripts/convert_checkpoint.py to-safetensors " +
                     path +
                     " OUT.safetensors --allow-pickle (it reads the model, class names "
                     "and imgsz from the file; --allow-pickle runs code from the file: only for "
                     "files you trust)");
  if (zip || pickle)
    throw InputError(path + ": a PyTorch " + (zip ? "torch.save file" : "pickle") +
                     ", not safetensors: convert it with python3 scripts/convert_checkpoint.py "
                     "to-safetensors " + path + " OUT.safetensors --model NAME");
}

// The header's JSON text (`in` at 0 holding file_size bytes); *header_bytes gets its length.
std::string read_header_text(std::istream& in, uint64_t file_size, const std::string& path,
                             uint64_t* header_bytes) {
  HPCNET_REQUIRE(file_size >= 8, path + ": not a safetensors file (" + std::to_string(file_size) +
                                     " bytes, too short for the 8-byte header length)");
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  HPCNET_REQUIRE(in.good(), path + ": read failed");
  refuse_torch_save(n, in, file_size, path);
  HPCNET_REQUIRE(n >= 2 && n <= kMaxHeaderBytes, path + ": not a safetensors file (header length " +
                                                     std::to_string(n) + " is implausible)");
  HPCNET_REQUIRE(n <= file_size - 8, path + ": truncated: header says its JSON is " +
                                         std::to_string(n) + " bytes, file has " +
                                         std::to_string(file_size - 8) + " bytes after the length");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  HPCNET_REQUIRE(in.good(), path + ": read failed in the header");
  HPCNET_REQUIRE(text[0] == '{',
                 path + ": not a safetensors file (header does not start with '{')");
  // nlohmann's parser stops at a NUL byte and would accept whatever follows it.
  const size_t nul = text.find('\0');
  HPCNET_REQUIRE(nul == std::string::npos, path + ": header is not valid JSON (NUL byte at byte " +
                                               std::to_string(nul) + " of the header)");
  *header_bytes = n;
  return text;
}

// The header's tensors in its order (which breaks ties between empty tensors), each with its slot
// in out->tensors; out->metadata gets __metadata__.
std::vector<Entry> parse_header(const std::string& text, const std::string& path,
                                SafetensorsFile* out) {
  std::vector<Entry> entries;
  bool seen_metadata = false;
  HeaderReader reader;
  reader.on_value = [&](const std::string& key, Json&& value) {
    if (key != "__metadata__") {
      // The tensor's slot in out->tensors, filled later: one lookup per name, duplicates caught.
      auto [slot, fresh] = out->tensors.try_emplace(key);
      HPCNET_REQUIRE(fresh, path + ": header names " + in_quotes(key) + " twice");
      entries.push_back(parse_entry(key, value, path));
      entries.back().slot = slot;
      return;
    }
    HPCNET_REQUIRE(!seen_metadata, path + ": header names " + in_quotes(key) + " twice");
    seen_metadata = true;
    HPCNET_REQUIRE(value.is_object(), path + ": __metadata__ is not a JSON object");
    uint64_t bytes = 0;
    for (auto& [mk, mv] : value.items()) {
      HPCNET_REQUIRE(mv.is_string(), path + ": __metadata__ value of " + in_quotes(mk) +
                                         " is not a string: " + brief(mv));
      bytes += mk.size() + mv.get_ref<const std::string&>().size();
      HPCNET_REQUIRE(bytes <= kMaxMetadataBytes,
                     path + ": __metadata__ holds over " + std::to_string(kMaxMetadataBytes >> 20) +
                         " MiB of text (at key " + in_quotes(mk) + "); not a weights file's");
      out->metadata[mk] = std::move(mv.get_ref<std::string&>());
    }
  };
  if (!Json::sax_parse(text, &reader)) {
    const std::string at =
        reader.last_key.empty() ? std::string() : ", after key " + in_quotes(reader.last_key);
    if (reader.too_deep)
      throw InputError(path + ": not a safetensors header (JSON nested over " +
                       std::to_string(kMaxJsonDepth) + " levels deep" + at + ")");
    throw InputError(path + ": header is not valid JSON (" + reader.error + " at byte " +
                     std::to_string(reader.error_byte) + " of the header" + at + ")");
  }
  return entries;
}

// The data must be covered exactly: entries sorted by offset, no overlap, no gap, nothing after.
void sort_and_check_layout(std::vector<Entry>& entries, uint64_t data_size,
                           const std::string& path) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    HPCNET_REQUIRE(e.begin == pos || e.end <= data_size,
                   path + ": tensor " + in_quotes(e.name) +
                       " has offsets outside the data (bytes [" + std::to_string(e.begin) + ", " +
                       std::to_string(e.end) + "), data is " + std::to_string(data_size) +
                       " bytes)");
    HPCNET_REQUIRE(e.begin >= pos, path + ": tensors " + in_quotes(prev ? prev->name : "") +
                                       " and " + in_quotes(e.name) + " overlap in the data");
    HPCNET_REQUIRE(e.begin == pos, path + ": " + std::to_string(e.begin - pos) +
                                       " unused bytes before tensor " + in_quotes(e.name));
    pos = e.end;
    prev = &e;
  }
  HPCNET_REQUIRE(pos <= data_size, path + ": truncated: header says " + std::to_string(pos) +
                                       " bytes of data, file has " + std::to_string(data_size));
  HPCNET_REQUIRE(pos == data_size, path + ": " + std::to_string(data_size - pos) +
                                       " bytes after the last tensor's data (header says " +
                                       std::to_string(pos) + " bytes of data)");
}

// The reader behind load_safetensors and parse_safetensors: `in` holds file_size bytes, at 0.
SafetensorsFile read_safetensors(std::istream& in, uint64_t file_size, const std::string& path) {
  uint64_t header_bytes = 0;
  const std::string text = read_header_text(in, file_size, path, &header_bytes);
  SafetensorsFile out;
  out.path = path;
  std::vector<Entry> entries = parse_header(text, path, &out);
  sort_and_check_layout(entries, file_size - 8 - header_bytes, path);
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (t.nbytes() > 0) {
      in.seekg(static_cast<std::streamoff>(8 + header_bytes + e.begin));
      in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
      HPCNET_REQUIRE(in.good(), path + ": read failed in the data of tensor " + in_quotes(e.name));
    }
    out.order.push_back(e.name);
    e.slot->second = std::move(t);
  }
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::error_code ec;
  HPCNET_REQUIRE(!std::filesystem::is_directory(path, ec),
                 path + ": is a folder; expected a .safetensors file");
  // Opening a FIFO would wait for a writer, and a device has no size to check.
  if (struct stat st; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw InputError(path + ": not a regular file (a " +
                     (S_ISFIFO(st.st_mode)  ? "FIFO"
                      : S_ISCHR(st.st_mode) ? "character device"
                                            : "special file") +
                     "); expected a .safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    throw InputError(path + ": cannot open: " + std::strerror(err));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size_off = in.tellg();
  HPCNET_REQUIRE(size_off >= 0, path + ": cannot determine the file size");
  in.seekg(0);
  return read_safetensors(in, static_cast<uint64_t>(size_off), path);
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
  MemoryBuf buf(data, size);
  std::istream in(&buf);
  return read_safetensors(in, size, name);
}

}  // namespace hpcnet
