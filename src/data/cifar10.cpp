// CIFAR-10 in the official binary layout (cifar-10-batches-bin/*.bin: records of 1 label byte and
// 3072 bytes of R, G, B planes of 32x32), from a folder or straight from cifar-10-binary.tar.gz.
// Records are converted from planar CHW to HWC as they are loaded.
#include <filesystem>

#include "src/data/internal.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace detail {
namespace {

constexpr int64_t kSide = 32;
constexpr int64_t kPlane = kSide * kSide;    // 1024
constexpr int64_t kRecord = 1 + 3 * kPlane;  // 3073
constexpr int64_t kNumClasses = 10;
constexpr const char* kMetaFile = "batches.meta.txt";
constexpr const char* kBatchesDir = "cifar-10-batches-bin";

std::vector<std::string> parse_meta(const std::vector<uint8_t>& bytes, const std::string& name) {
  std::vector<std::string> names;
  std::string line;
  auto flush = [&] {
    size_t b = line.find_first_not_of(" \t\r");
    size_t e = line.find_last_not_of(" \t\r");
    if (b != std::string::npos) names.push_back(line.substr(b, e - b + 1));
    line.clear();
  };
  for (uint8_t c : bytes) {
    if (c == '\n') {
      flush();
    } else {
      line.push_back(static_cast<char>(c));
    }
  }
  flush();
  HPCNET_REQUIRE(static_cast<int64_t>(names.size()) == kNumClasses,
                 "cifar10: " + name + " lists " + std::to_string(names.size()) +
                     " class names; expected 10, one per line (fix or delete the file)");
  return names;
}

}  // namespace

std::vector<std::string> cifar10_split_files(const std::string& split) {
  check_split(split, "cifar10");
  if (split == "test") return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
          "data_batch_5.bin"};
}

std::shared_ptr<InMemoryDataset> cifar10_from_buffers(
    const std::vector<std::pair<std::string, const std::vector<uint8_t>*>>& files,
    const std::vector<uint8_t>* meta, const std::string& meta_name,
    const std::string& description) {
  std::vector<std::string> classes = meta ? parse_meta(*meta, meta_name) : cifar10_class_names();
  int64_t total = 0;
  for (const auto& [name, bytes] : files) {
    const int64_t n = static_cast<int64_t>(bytes->size());
    HPCNET_REQUIRE(n > 0, "cifar10: " + name + " is empty; re-download cifar-10-binary.tar.gz");
    HPCNET_REQUIRE(n % kRecord == 0,
                   "cifar10: " + name + " is truncated (" + std::to_string(n) +
                       " bytes is not a multiple of the 3073-byte record); re-download "
                       "cifar-10-binary.tar.gz");
    total += n / kRecord;
  }
  auto ds = std::make_shared<InMemoryDataset>(std::move(classes), description);
  ds->reserve(total, total * kPlane);
  uint8_t hwc[kSide * kSide * 3];
  for (const auto& [name, bytes] : files) {
    const std::string base = fs::path(name).filename().string();
    const int64_t records = static_cast<int64_t>(bytes->size()) / kRecord;
    for (int64_t r = 0; r < records; ++r) {
      const uint8_t* rec = bytes->data() + r * kRecord;
      HPCNET_REQUIRE(rec[0] < kNumClasses, "cifar10: " + name + ": record " + std::to_string(r) +
                                               " has label " + std::to_string(rec[0]) +
                                               " (must be 0..9); the file is corrupt, "
                                               "re-download cifar-10-binary.tar.gz");
      const uint8_t* planes = rec + 1;
      for (int64_t i = 0; i < kPlane; ++i) {
        hwc[i * 3 + 0] = planes[i];
        hwc[i * 3 + 1] = planes[kPlane + i];
        hwc[i * 3 + 2] = planes[2 * kPlane + i];
      }
      ds->add(hwc, kSide, kSide, rec[0], base + "#" + std::to_string(r));
    }
  }
  return ds;
}

bool cifar10_archive_member(const std::string& path, const std::string& split, std::string* base) {
  std::vector<std::string> parts = split_path(path);
  if (parts.empty() || parts.size() > 2) return false;
  if (parts.size() == 2 && parts[0] != kBatchesDir) return false;
  const std::string& name = parts.back();
  bool wanted = name == kMetaFile;
  for (const std::string& f : cifar10_split_files(split)) wanted = wanted || name == f;
  if (wanted && base) *base = name;
  return wanted;
}

std::shared_ptr<InMemoryDataset> cifar10_from_archive_entries(
    const std::string& archive, const std::string& split,
    const std::vector<ArchiveEntry>& entries) {
  std::vector<std::pair<std::string, const std::vector<uint8_t>*>> files;
  const std::vector<uint8_t>* meta = nullptr;
  auto find = [&](const std::string& want) -> const ArchiveEntry* {
    for (const ArchiveEntry& e : entries) {
      std::string base;
      if (cifar10_archive_member(e.path, split, &base) && base == want) return &e;
    }
    return nullptr;
  };
  for (const std::string& f : cifar10_split_files(split)) {
    const ArchiveEntry* e = find(f);
    HPCNET_REQUIRE(e != nullptr, "cifar10: archive " + archive + " has no " + kBatchesDir + "/" +
                                     f + "; it is incomplete, re-download " + kCifar10Archive +
                                     " from " + kCifar10Url);
    files.emplace_back(archive + ":" + e->path, &e->data);
  }
  std::string meta_name;
  if (const ArchiveEntry* e = find(kMetaFile)) {
    meta = &e->data;
    meta_name = archive + ":" + e->path;
  }
  return cifar10_from_buffers(files, meta, meta_name, "cifar10 " + split + " from " + archive);
}

}  // namespace detail

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {
      "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  return names;
}

std::shared_ptr<InMemoryDataset> load_cifar10_binary(const std::string& path,
                                                     const std::string& split) {
  detail::check_split(split, "cifar10");
  fs::path p(path);
  std::error_code ec;
  const std::string hint = "; download " + std::string(kCifar10Url) + " and put " +
                           kCifar10Archive + " or its unpacked " + detail::kBatchesDir + "/ there";
  if (fs::is_regular_file(p, ec)) {
    auto want = [&](const std::string& entry, bool is_dir) {
      return !is_dir && detail::cifar10_archive_member(entry, split, nullptr);
    };
    std::vector<detail::ArchiveEntry> entries = detail::scan_archive(path, want);
    return detail::cifar10_from_archive_entries(path, split, entries);
  }
  HPCNET_REQUIRE(fs::is_directory(p, ec), "cifar10: " + path + " does not exist" + hint);
  fs::path dir;
  if (fs::is_regular_file(p / "data_batch_1.bin", ec) ||
      fs::is_regular_file(p / "test_batch.bin", ec) || p.filename() == detail::kBatchesDir) {
    dir = p;
  } else if (fs::is_directory(p / detail::kBatchesDir, ec)) {
    dir = p / detail::kBatchesDir;
  } else if (fs::is_regular_file(p / kCifar10Archive, ec)) {
    return load_cifar10_binary((p / kCifar10Archive).string(), split);
  } else {
    throw InputError("cifar10: " + path + " holds neither " + detail::kBatchesDir + "/ nor " +
                     kCifar10Archive + hint);
  }
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<std::string> names;
  for (const std::string& f : detail::cifar10_split_files(split)) {
    fs::path fp = dir / f;
    HPCNET_REQUIRE(fs::is_regular_file(fp, ec),
                   "cifar10: missing " + fp.string() + " (" + split + " needs " +
                       (split == "train" ? "data_batch_1..5.bin" : "test_batch.bin") + ")" + hint);
    buffers.push_back(detail::read_whole_file(fp.string(), "cifar10"));
    names.push_back(fp.string());
  }
  std::vector<std::pair<std::string, const std::vector<uint8_t>*>> files;
  for (size_t i = 0; i < buffers.size(); ++i) files.emplace_back(names[i], &buffers[i]);
  std::vector<uint8_t> meta;
  bool has_meta = fs::is_regular_file(dir / detail::kMetaFile, ec);
  if (has_meta) meta = detail::read_whole_file((dir / detail::kMetaFile).string(), "cifar10");
  return detail::cifar10_from_buffers(files, has_meta ? &meta : nullptr,
                                      (dir / detail::kMetaFile).string(),
                                      "cifar10 " + split + " from " + dir.string());
}

}  // namespace hpcnet::data
