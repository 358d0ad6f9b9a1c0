// --cache none|ram|disk|auto: decoded images kept in memory (an InMemoryDataset), in a
// memory-mapped cache file, or not at all. Both caches are filled by decoding the lazy dataset in
// order, in chunks on all cores, so they hold exactly what the loader would have decoded.
// Cache file (.hpcache), little-endian: "HPCNETC1", u64 n, u64 index_offset, then the pixels and
// masks of every item, then at index_offset n entries {u64 offset, u32 height, u32 width,
// u64 mask_offset (0: none)}; pixels (height, width, 3) at offset, the mask (height, width) at
// mask_offset.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "src/data/cache_file.h"
#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace detail {

std::string parse_cache_index(const uint8_t* data, size_t size, int64_t n,
                              std::vector<CacheEntry>* entries) {
  constexpr size_t kHeader = 24, kEntry = 24;
  if (size < kHeader || std::memcmp(data, kCacheMagic, 8) != 0) return "not an hpcnet cache file";
  uint64_t count = 0, index = 0;
  std::memcpy(&count, data + 8, 8);
  std::memcpy(&index, data + 16, 8);
  if (n >= 0 && count != static_cast<uint64_t>(n))
    return "holds " + std::to_string(count) + " images, the dataset " + std::to_string(n);
  if (index < kHeader || index > size || count > (size - index) / kEntry)
    return "index outside the file (truncated?)";
  entries->resize(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* p = data + index + i * kEntry;
    CacheEntry& e = (*entries)[static_cast<size_t>(i)];
    uint32_t h = 0, w = 0;
    std::memcpy(&e.offset, p, 8);
    std::memcpy(&h, p + 8, 4);
    std::memcpy(&w, p + 12, 4);
    std::memcpy(&e.mask_offset, p + 16, 8);
    e.height = h;
    e.width = w;
    const uint64_t px = uint64_t{h} * w;  // < 2^64: both < 2^32
    if (h == 0 || w == 0 || px > index / 3 || e.offset < kHeader || e.offset > index - px * 3)
      return "image " + std::to_string(i) + " lies outside the file (truncated?)";
    if (e.mask_offset != 0 && (e.mask_offset < kHeader || e.mask_offset > index - px))
      return "mask " + std::to_string(i) + " lies outside the file (truncated?)";
  }
  return "";
}

namespace {

std::string gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GB", bytes / 1e9);
  return b;
}

// Calls emit(i, example) for every item in order; the items are decoded in chunks on `threads`
// threads, each with its own buffers (peak memory: one chunk of decoded images).
template <class Emit>
void decode_in_order(const Dataset& ds, int threads, Emit emit) {
  const int64_t n = ds.size();
  constexpr int64_t kChunk = 256;
  const int t =
      std::max(1, threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<ExampleBuffer> buffers(static_cast<size_t>(std::min(n, kChunk)));
  std::vector<Example> examples(buffers.size());
  for (int64_t chunk = 0; chunk < n; chunk += kChunk) {
    const int64_t m = std::min(kChunk, n - chunk);
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::exception_ptr error;
    int64_t error_at = m;
    auto work = [&] {
      for (int64_t i; (i = next.fetch_add(1)) < m;) {
        try {
          examples[static_cast<size_t>(i)] = ds.get(chunk + i, buffers[static_cast<size_t>(i)]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (i < error_at) error_at = i, error = std::current_exception();
        }
      }
    };
    std::vector<std::thread> pool;
    for (int k = 1; k < std::min<int64_t>(t, m); ++k) pool.emplace_back(work);
    work();
    for (std::thread& th : pool) th.join();
    if (error) std::rethrow_exception(error);  // the first failing item, whatever the threads
    for (int64_t i = 0; i < m; ++i) emit(chunk + i, examples[static_cast<size_t>(i)]);
  }
}

// The (height, width) a cache keeps the images of ds at: o.resize for a class-label dataset
// (boxes and masks would need moving too, and detection and segmentation start otherwise), else
// {0, 0}, as decoded.
std::array<int64_t, 2> kept_size(const Dataset& ds, const CacheOptions& o) {
  if (o.resize[0] > 0 && o.resize[1] > 0 && ds.target_kind() == TargetKind::kLabel) return o.resize;
  return {0, 0};
}

// ex with its pixels resized to `size` into dst (size[0] * size[1] * 3 bytes); ex itself when
// size is {0, 0} or ex already has that size.
Example resized(const Example& ex, const std::array<int64_t, 2>& size, std::vector<uint8_t>& dst) {
  if (size[0] <= 0 || (ex.height == size[0] && ex.width == size[1])) return ex;
  dst.resize(static_cast<size_t>(size[0] * size[1] * 3));
  resize_bilinear(ex, size[0], size[1], dst.data());
  Example r = ex;
  r.pixels = dst.data();
  r.height = size[0];
  r.width = size[1];
  return r;
}

// A lazy dataset whose images are kept in memory the first time they are read (the first epoch
// decodes in the loader's workers as --cache none does; later reads copy nothing and decode
// nothing), resized to `size` when it is not {0, 0}. Each item's slot is filled once, by
// whichever thread reads it first; a slot is read only after its release store, so readers never
// see a half-written image.
class RamCachedDataset : public Dataset {
 public:
  RamCachedDataset(std::shared_ptr<const LazyDataset> lazy, std::array<int64_t, 2> size)
      : lazy_(std::move(lazy)), size_(size), slots_(new Slot[static_cast<size_t>(lazy_->size())]) {}

  int64_t size() const override { return lazy_->size(); }
  Example get(int64_t i, ExampleBuffer& b) const override {
    HPCNET_CHECK(i >= 0 && i < size(), "dataset index out of range");
    Slot& s = slots_[static_cast<size_t>(i)];
    if (s.state.load(std::memory_order_acquire) == kReady) return from_slot(i, s, b);
    const Example ex = lazy_->get(i, b);
    int empty = kEmpty;
    if (!s.state.compare_exchange_strong(empty, kFilling, std::memory_order_acq_rel))
      return resized(ex, size_, b.resized);  // another thread fills the slot
    const Example r = resized(ex, size_, s.pixels);
    if (r.pixels != s.pixels.data()) s.pixels.assign(r.pixels, r.pixels + r.nbytes());
    if (r.mask) s.mask.assign(r.mask, r.mask + r.height * r.width);
    s.height = r.height;
    s.width = r.width;
    s.state.store(kReady, std::memory_order_release);
    return from_slot(i, s, b);
  }
  const std::vector<std::string>& classes() const override { return lazy_->classes(); }
  TargetKind target_kind() const override { return lazy_->target_kind(); }
  std::string item_name(int64_t i) const override { return lazy_->item_name(i); }
  std::vector<int64_t> shard_starts() const override { return lazy_->shard_starts(); }
  std::string describe() const override { return lazy_->describe() + " (kept in ram once read)"; }

 private:
  static constexpr int kEmpty = 0, kFilling = 1, kReady = 2;
  struct Slot {
    std::atomic<int> state{kEmpty};
    std::vector<uint8_t> pixels, mask;
    int64_t height = 0, width = 0;
  };
  Example from_slot(int64_t i, const Slot& s, ExampleBuffer& b) const {
    Example ex;
    ex.pixels = s.pixels.data();
    ex.height = s.height;
    ex.width = s.width;
    lazy_->fill_target(i, s.height, s.width, s.mask.empty() ? nullptr : s.mask.data(), b, ex);
    return ex;
  }
  std::shared_ptr<const LazyDataset> lazy_;
  std::array<int64_t, 2> size_;
  std::unique_ptr<Slot[]> slots_;
};

// A lazy dataset's images read from a memory-mapped cache file; targets from the lazy index.
class DiskCachedDataset : public Dataset {
 public:
  DiskCachedDataset(std::shared_ptr<const LazyDataset> lazy, const std::string& path)
      : lazy_(std::move(lazy)), path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    HPCNET_REQUIRE(fd >= 0, "cache: cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw InputError("cache: cannot read " + path + "; delete it and run again");
    }
    size_ = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    HPCNET_REQUIRE(p != MAP_FAILED, "cache: cannot map " + path + ": " + std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
    const std::string e = parse_cache_index(data_, size_, lazy_->size(), &entries_);
    if (!e.empty()) {
      ::munmap(const_cast<uint8_t*>(data_), size_);
      throw InputError("cache: " + path + " " + e + "; delete it and run again");
    }
  }
  ~DiskCachedDataset() override { ::munmap(const_cast<uint8_t*>(data_), size_); }
  DiskCachedDataset(const DiskCachedDataset&) = delete;
  DiskCachedDataset& operator=(const DiskCachedDataset&) = delete;

  int64_t size() const override { return lazy_->size(); }
  Example get(int64_t i, ExampleBuffer& b) const override {
    HPCNET_CHECK(i >= 0 && i < size(), "dataset index out of range");
    const CacheEntry& c = entries_[static_cast<size_t>(i)];
    Example ex;
    ex.pixels = data_ + c.offset;
    ex.height = c.height;
    ex.width = c.width;
    const uint8_t* mask = c.mask_offset ? data_ + c.mask_offset : nullptr;
    if (target_kind() == TargetKind::kMask && !mask) lazy_->read_mask(i, c.height, c.width, b);
    lazy_->fill_target(i, c.height, c.width, mask ? mask : b.mask.data(), b, ex);
    return ex;
  }
  const std::vector<std::string>& classes() const override { return lazy_->classes(); }
  TargetKind target_kind() const override { return lazy_->target_kind(); }
  std::string item_name(int64_t i) const override { return lazy_->item_name(i); }
  std::vector<int64_t> shard_starts() const override { return lazy_->shard_starts(); }
  std::string describe() const override { return lazy_->describe() + " (cached in " + path_ + ")"; }

 private:
  std::shared_ptr<const LazyDataset> lazy_;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<CacheEntry> entries_;
};

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      throw InputError("cache: cannot write " + path + ": " + std::strerror(errno) +
                       "; free space there or pass --cache-dir");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

// Decodes every item of ds into the cache file at path (a temporary file, flushed and renamed),
// its pixels resized to `size` unless that is {0, 0}.
void write_cache_file(const Dataset& ds, const std::string& path, int threads,
                      const std::array<int64_t, 2>& size) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HPCNET_REQUIRE(fd >= 0, "cache: cannot create " + tmp + ": " + std::strerror(errno) +
                              "; pass --cache-dir (or set HPCNET_CACHE_DIR) to a writable folder");
  try {
    uint8_t header[24] = {};
    std::memcpy(header, kCacheMagic, 8);
    write_all(fd, header, sizeof header, tmp);
    uint64_t at = sizeof header;
    std::vector<uint8_t> index;
    index.reserve(static_cast<size_t>(ds.size()) * 24);
    std::vector<uint8_t> buffer;
    decode_in_order(ds, threads, [&](int64_t, const Example& decoded) {
      const Example e = resized(decoded, size, buffer);
      const uint64_t px = static_cast<uint64_t>(e.height * e.width);
      uint8_t entry[24];
      const uint32_t h = static_cast<uint32_t>(e.height), w = static_cast<uint32_t>(e.width);
      const uint64_t mask_at = e.mask ? at + px * 3 : 0;
      std::memcpy(entry, &at, 8);
      std::memcpy(entry + 8, &h, 4);
      std::memcpy(entry + 12, &w, 4);
      std::memcpy(entry + 16, &mask_at, 8);
      index.insert(index.end(), entry, entry + 24);
      write_all(fd, e.pixels, px * 3, tmp);
      at += px * 3;
      if (e.mask) {
        write_all(fd, e.mask, px, tmp);
        at += px;
      }
    });
    write_all(fd, index.data(), index.size(), tmp);
    const uint64_t n = static_cast<uint64_t>(ds.size());
    std::memcpy(header + 8, &n, 8);
    std::memcpy(header + 16, &at, 8);
    if (::pwrite(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
        ::fsync(fd) != 0)
      throw InputError("cache: cannot write " + tmp + ": " + std::strerror(errno));
    ::close(fd);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw InputError("cache: cannot rename " + tmp + " to " + path + ": " + why);
  }
}

}  // namespace
}  // namespace detail

void set_decode_min_side(Dataset& ds, int64_t min_side) {
  if (auto* lazy = dynamic_cast<detail::LazyDataset*>(&ds)) lazy->set_decode_min_side(min_side);
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("HPCNET_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/hpcnet";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/hpcnet";
  return "";
}

int64_t available_memory_bytes() {
  int64_t avail = -1;
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    int64_t kb = 0;
    in >> kb;
    if (key == "MemAvailable:") avail = kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  // A cgroup v2 limit (a Slurm job, a container) bounds what this process may take.
  std::ifstream lim("/sys/fs/cgroup/memory.max"), cur("/sys/fs/cgroup/memory.current");
  std::string max_text;
  int64_t used = 0;
  if (lim >> max_text && max_text != "max" && cur >> used) {
    const int64_t left = std::max<int64_t>(0, std::atoll(max_text.c_str()) - used);
    avail = avail < 0 ? left : std::min(avail, left);
  }
  return avail;
}

int64_t estimate_decoded_bytes(const Dataset& ds, int64_t samples) {
  const int64_t n = ds.size();
  if (n == 0) return 0;
  const int64_t k = std::min(n, std::max<int64_t>(1, samples));
  ExampleBuffer b;
  double bytes = 0;
  for (int64_t j = 0; j < k; ++j) {
    const Example e = ds.get(j * n / k, b);
    bytes += static_cast<double>(e.height * e.width) * (e.mask ? 4 : 3);
  }
  return static_cast<int64_t>(
      std::llround(bytes / static_cast<double>(k) * static_cast<double>(n)));
}

CachedDataset cache_dataset(std::shared_ptr<const Dataset> ds, const CacheOptions& o) {
  HPCNET_REQUIRE(o.mode == "auto" || o.mode == "none" || o.mode == "ram" || o.mode == "disk",
                 "--cache " + o.mode + ": use none, ram, disk or auto");
  if (ds->in_memory()) return {ds, "memory", ""};
  auto lazy = std::dynamic_pointer_cast<const detail::LazyDataset>(ds);
  HPCNET_CHECK(lazy != nullptr, "cache_dataset: a dataset neither in memory nor lazy");
  const int64_t n = ds->size();
  std::string mode = o.mode;
  std::string why;
  // Decoding up to 16 images spread over the dataset both estimates the memory they need and
  // probes the data, whatever the mode: files that are not images (a wrong folder, a corrupt
  // download) then fail before the run writes anything. Kept at the training size, each image
  // takes the same bytes: the need is exact.
  const std::array<int64_t, 2> size = detail::kept_size(*ds, o);
  const int64_t decoded = estimate_decoded_bytes(*ds);
  const int64_t need = mode == "none" || mode == "disk" ? 0
                       : size[0] > 0                    ? n * size[0] * size[1] * 3
                                                        : decoded;
  const std::string at_size = size[0] > 0 ? " at " + std::to_string(size[0]) + "x" +
                                                std::to_string(size[1]) + " (the training size)"
                                          : "";
  const int64_t avail = available_memory_bytes();
  const std::string sizes = "the " + std::to_string(n) + " decoded images" + at_size +
                            " need about " +
                            detail::gb(static_cast<double>(need)) + ", " +
                            detail::gb(static_cast<double>(avail)) + " is available";
  if (mode == "auto") {
    mode = avail > 0 && need < avail / 4 ? "ram" : "none";
    why = " (auto: " + sizes +
          (mode == "ram" ? "; under a quarter of it)"
                         : "; over a quarter of it: decoded by the loader's "
                           "workers as they are read; --cache disk decodes "
                           "them once to disk)");
  }
  if (mode == "none") {
    return {ds, "none", "cache: none" + (why.empty() ? " (images decoded as they are read)" : why)};
  }
  if (mode == "ram") {
    HPCNET_REQUIRE(avail <= 0 || need < avail * 9 / 10,
                   "--cache ram: " + sizes + "; use --cache disk or --cache none");
    return {std::make_shared<detail::RamCachedDataset>(lazy, size), "ram",
            "cache: ram, about " + detail::gb(static_cast<double>(need)) + " for " +
                std::to_string(n) + " images" + at_size + ", kept as they are first read" +
                (why.empty() ? "" : why)};
  }
  const std::string dir = o.dir.empty() ? default_cache_dir() : o.dir;
  HPCNET_REQUIRE(!dir.empty(), "--cache disk: no cache folder (HOME is not set); pass --cache-dir "
                               "or set HPCNET_CACHE_DIR to a folder with room");
  std::error_code ec;
  fs::create_directories(dir, ec);
  HPCNET_REQUIRE(!ec, "cache: cannot create " + dir + ": " + ec.message() +
                          "; pass --cache-dir (or set HPCNET_CACHE_DIR) to a writable folder");
  const std::string path = dir + "/" + lazy->fingerprint() +
                           (size[0] > 0 ? "-" + std::to_string(size[0]) + "x" +
                                              std::to_string(size[1])
                                        : "") +
                           ".hpcache";
  std::string line = "cache: disk, " + path;
  if (!fs::exists(path, ec)) {
    std::fprintf(stderr, "cache: decoding %lld images once into %s\n", static_cast<long long>(n),
                 path.c_str());
    detail::write_cache_file(*ds, path, o.threads, size);
  } else {
    line += " (reused)";
  }
  return {std::make_shared<detail::DiskCachedDataset>(lazy, path), "disk", line};
}

}  // namespace hpcnet::data
