// Writing WebDataset shards (`hpcnet shard`): every item of a dataset as KEY.jpg|png (the source
// file's bytes when the dataset is lazy), KEY.cls / KEY.txt / KEY.mask.png and KEY.json, into pax
// tars written with libarchive, each closed before it would pass the size limit.
// Invariant: headers carry mtime 0 and mode 0644, so the same data gives byte-identical shards.
#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "hpcnet/io.h"
#include "hpcnet/rng.h"
#include "hpcnet/shards.h"
#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace {

constexpr uint64_t kBlock = 512;
uint64_t member_bytes(uint64_t size) { return kBlock + (size + kBlock - 1) / kBlock * kBlock; }

struct Member {
  std::string name;
  std::vector<uint8_t> data;
};

// One shard being written: to PATH.tmp, renamed to PATH by close(); removed when abandoned.
class TarWriter {
 public:
  explicit TarWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    archive_ = archive_write_new();
    HPCNET_CHECK(archive_ != nullptr, "archive_write_new failed");
    if (archive_write_set_format_pax_restricted(archive_) != ARCHIVE_OK ||
        archive_write_add_filter_none(archive_) != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(archive_, 10240) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(archive_, 1) != ARCHIVE_OK ||
        archive_write_open_filename(archive_, tmp_.c_str()) != ARCHIVE_OK)
      fail("cannot create");
  }
  ~TarWriter() {
    if (archive_) archive_write_free(archive_);
    if (!closed_) {
      std::error_code ec;
      fs::remove(tmp_, ec);
    }
  }
  void add(const Member& m) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(m.data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_mtime(e, 0, 0);
    const int r = archive_write_header(archive_, e);
    archive_entry_free(e);
    if (r != ARCHIVE_OK) fail("cannot write " + m.name + " to");
    size_t done = 0;
    while (done < m.data.size()) {
      const la_ssize_t n = archive_write_data(archive_, m.data.data() + done, m.data.size() - done);
      if (n <= 0) fail("cannot write " + m.name + " to");
      done += static_cast<size_t>(n);
    }
  }
  void close() {
    if (archive_write_close(archive_) != ARCHIVE_OK) fail("cannot finish");
    archive_write_free(archive_);
    archive_ = nullptr;
    std::error_code ec;
    fs::rename(tmp_, path_, ec);
    if (ec) throw InputError("shard: cannot rename " + tmp_ + " to " + path_ + ": " + ec.message());
    closed_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw InputError("shard: " + what + " " + tmp_ + ": " +
                     (archive_ && archive_error_string(archive_) ? archive_error_string(archive_) : "unknown error") +
                     "; check the --out folder (space, permissions)");
  }
  std::string path_, tmp_;
  archive* archive_ = nullptr;
  bool closed_ = false;
};

// The shortest text that reads back as the same double.
std::string number(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A YOLO row from normalised corners.
std::string yolo_row(int64_t cls, double x1, double y1, double x2, double y2) {
  return std::to_string(cls) + " " + number((x1 + x2) / 2) + " " + number((y1 + y2) / 2) + " " +
         number(x2 - x1) + " " + number(y2 - y1) + "\n";
}

const char* image_ext(const std::vector<uint8_t>& b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "jpg";
  if (b.size() >= 8 && b[0] == 0x89 && b[1] == 'P' && b[2] == 'N' && b[3] == 'G') return "png";
  return nullptr;
}

std::string key_of(int64_t k) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%09lld", static_cast<long long>(k));
  return buf;
}

std::string shard_name(const ShardOptions& o, size_t k) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "-%06zu.tar", k);
  return (fs::path(o.out) / (o.prefix + buf)).string();
}

void refuse_old_shards(const ShardOptions& o) {
  std::error_code ec;
  fs::create_directories(o.out, ec);
  HPCNET_REQUIRE(!ec && fs::is_directory(o.out), "shard: cannot create the folder " + o.out + ": " +
                                                     ec.message() + "; check --out");
  for (const auto& e : fs::directory_iterator(o.out, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(o.prefix + "-", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".tar")
      throw InputError("shard: " + o.out + " already holds " + n + "; remove the " + o.prefix +
                       "-*.tar shards there or choose another --out");
  }
}

// Sample i of the dataset as members named KEY.EXT (reusing the buffers of *out).
void sample_members(const Dataset& ds, const detail::LazyDataset* lazy, int64_t i,
                    const std::string& key, ExampleBuffer& buf, std::vector<Member>* out,
                    ShardReport* report) {
  out->clear();
  Example ex;
  bool decoded = false;
  auto decode = [&]() {
    if (!decoded) ex = ds.get(i, buf);
    decoded = true;
  };
  Member image, target;
  std::string source;
  if (lazy) {
    const detail::LazyItem& it = lazy->item(i);
    lazy->store().read(it.image, image.data, "shard");
    source = lazy->store().display(it.image);
    const char* ext = image_ext(image.data);
    HPCNET_REQUIRE(ext != nullptr,
                   "shard: " + source + " is neither a JPEG nor a PNG file; replace or remove it");
    image.name = key + "." + ext;
  } else {
    decode();
    image.data = encode_png_rgb(ex.pixels, ex.height, ex.width);
    image.name = key + ".png";
    source = ds.item_name(i);
    ++report->reencoded;
  }
  out->push_back(std::move(image));
  const TargetKind kind = ds.target_kind();
  std::string text;
  if (kind == TargetKind::kLabel) {
    if (!lazy) decode();
    out->push_back({key + ".cls", {}});
    text = std::to_string(lazy ? lazy->item(i).label : ex.label);
  } else if (kind == TargetKind::kBoxes) {
    const std::vector<detail::YoloRow> rows =
        lazy ? lazy->rows_of(i) : std::vector<detail::YoloRow>{};
    for (const detail::YoloRow& r : rows) text += yolo_row(r.cls, r.x1, r.y1, r.x2, r.y2);
    std::vector<Box> boxes = lazy ? lazy->boxes_of(i) : std::vector<Box>{};
    double w = lazy ? lazy->item(i).width : 0, h = lazy ? lazy->item(i).height : 0;
    if (!lazy || (rows.empty() && !boxes.empty() && (w <= 0 || h <= 0))) {
      decode();
      boxes.assign(ex.boxes, ex.boxes + ex.num_boxes);
      w = static_cast<double>(ex.width), h = static_cast<double>(ex.height);
    }
    for (const Box& b : boxes) {
      if (b.crowd) {
        ++report->dropped_crowd;
        continue;
      }
      text += yolo_row(b.cls, b.x1 / w, b.y1 / h, b.x2 / w, b.y2 / h);
    }
    out->push_back({key + ".txt", {}});
  } else {
    Member mask{key + ".mask.png", {}};
    if (lazy) {
      lazy->store().read(lazy->item(i).mask, mask.data, "shard");
    } else {
      decode();
      mask.data = encode_png_index(ex.mask, ex.height, ex.width, class_palette(256));
    }
    out->push_back(std::move(mask));
  }
  if (!text.empty() || kind != TargetKind::kMask) out->back().data.assign(text.begin(), text.end());
  const std::string json = nlohmann::json{{"source", source}}.dump();
  out->push_back({key + ".json", std::vector<uint8_t>(json.begin(), json.end())});
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= 1'000'000)
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f KB", static_cast<double>(b) / 1e3);
  return buf;
}

}  // namespace

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  const std::string bad = flag + " " + text + ": expected a size such as 1GB, 500MB, 64KiB or 1e9";
  double v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  HPCNET_REQUIRE(r.ec == std::errc() && std::isfinite(v), bad);
  std::string unit = detail::to_lower(std::string(r.ptr, end));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  double scale = 0;
  if (unit.empty()) scale = 1;
  const char* kUnits = "kmgt";
  for (int k = 0; k < 4; ++k) {
    if (unit == std::string(1, kUnits[k])) scale = std::pow(1000.0, k + 1);
    if (unit == std::string(1, kUnits[k]) + "i") scale = std::pow(1024.0, k + 1);
  }
  HPCNET_REQUIRE(scale > 0 && v * scale >= 1 && v * scale < 1.8e19, bad);
  return static_cast<uint64_t>(v * scale);
}

ShardReport write_shards(const Dataset& ds, const ShardOptions& o,
                         const std::function<void(const std::string&)>& on_shard) {
  HPCNET_REQUIRE(o.shard_size >= 10'000, "shard: --shard-size " + std::to_string(o.shard_size) +
                                             " bytes is under 10 KB; give a size such as 1GB");
  HPCNET_REQUIRE(!o.prefix.empty() && o.prefix.find('/') == std::string::npos,
                 "shard: the shard name prefix '" + o.prefix + "' must be a plain file name");
  HPCNET_REQUIRE(ds.size() > 0, "shard: the dataset has no images");
  refuse_old_shards(o);
  ShardReport report;
  report.classes_file = (fs::path(o.out) / "classes.txt").string();
  std::string names;
  for (const std::string& c : ds.classes()) names += c + "\n";
  write_file_atomic(report.classes_file, names);

  std::vector<int64_t> order(static_cast<size_t>(ds.size()));
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
  if (o.shuffle) {
    Rng rng(o.seed, 0);
    order = random_permutation(ds.size(), rng);
  }
  const auto* lazy = dynamic_cast<const detail::LazyDataset*>(&ds);
  ExampleBuffer buf;
  std::vector<Member> members;
  std::unique_ptr<TarWriter> tar;
  uint64_t bytes = 0;  // of the shard being written, its two closing blocks included
  int64_t first = 0, count = 0;
  auto close = [&]() {
    tar->close();
    tar.reset();
    const std::string& path = report.shards.back();
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    report.bytes += size;
    if (on_shard)
      on_shard(path + ": " + std::to_string(count) + " samples (keys " + key_of(first) + ".." +
               key_of(first + count - 1) + "), " + human_bytes(size));
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string key = key_of(static_cast<int64_t>(k));
    sample_members(ds, lazy, order[k], key, buf, &members, &report);
    uint64_t need = 0;
    for (const Member& m : members) need += member_bytes(m.data.size());
    if (tar && bytes + need > o.shard_size) close();
    if (!tar) {
      report.shards.push_back(shard_name(o, report.shards.size()));
      tar = std::make_unique<TarWriter>(report.shards.back());
      bytes = 2 * kBlock;
      first = static_cast<int64_t>(k);
      count = 0;
    }
    for (const Member& m : members) tar->add(m);
    bytes += need;
    ++count;
  }
  close();
  report.samples = ds.size();
  const size_t n = report.shards.size();
  // A brace pattern even for one shard: it is what --data recognises as shards.
  const std::string last = fs::path(shard_name(o, n - 1)).stem().string();
  report.pattern =
      (fs::path(o.out) / (o.prefix + "-{000000.." + last.substr(o.prefix.size() + 1) + "}.tar"))
          .string();
  return report;
}

std::string guess_dataset_name(const std::string& path, const std::string& split) {
  if (is_webdataset_path(path)) return "webdataset";
  std::error_code ec;
  for (const char* root : {"", "VOCdevkit/VOC2012/", "VOCdevkit/VOC2007/", "VOC2012/"}) {
    const fs::path r = fs::path(path) / root;
    if (fs::is_directory(r / "masks", ec) || fs::is_directory(r / "SegmentationClass", ec))
      return "segmentation";
  }
  if (detection_has_split(path, split)) return "detect";
  if (fs::is_directory(fs::path(path) / split, ec)) return "imagefolder";
  return "cifar10";
}

}  // namespace hpcnet::data
