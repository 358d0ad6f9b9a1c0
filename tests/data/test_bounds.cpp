// Hostile inputs (issue 17, "bounded inputs"): each is refused with one InputError line naming the
// file, before any large allocation. Every input is crafted here: image headers claiming huge
// sizes, FIFOs and devices, tar members claiming 10^15 bytes, symlink loops, hostile safetensors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/train.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// ---- measuring ----------------------------------------------------------------------------------

// This process's peak resident set so far, in MB (ru_maxrss is in KiB on Linux).
double peak_rss_mb() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Expects an InputError of one line holding every part and no library exception text.
template <class F>
void expect_input_error(F&& f, const std::string& what, std::initializer_list<std::string> parts) {
  const std::string e = input_error(std::forward<F>(f));
  EXPECT_EQ(e.find('\n'), std::string::npos) << what << ": one line: " << e;
  EXPECT_NE(e.rfind("wrong exception type", 0), 0u) << what << ": " << e;
  EXPECT_NE(e, "no exception") << what;
  for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << what << ": " << e;
  for (const char* bad : {"json.exception", "stoll", "bad_alloc", "basic_string"})
    EXPECT_EQ(e.find(bad), std::string::npos) << what << ": " << e;
}

// Sets the pixel limit for a scope, restoring the default after.
struct PixelLimit {
  explicit PixelLimit(int64_t n) { data::set_max_image_pixels(n); }
  ~PixelLimit() { data::set_max_image_pixels(data::kDefaultMaxImagePixels); }
};

// ---- crafted images -----------------------------------------------------------------------------

uint32_t crc32_of(const std::string& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string png_chunk(const std::string& type, const std::string& data) {
  return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc32_of(type + data));
}

// A PNG whose IHDR (valid CRC) claims width x height (color 2: RGB, 0: gray), followed by a
// tiny IDAT (an empty stored zlib stream) and IEND: only the header is plausible.
std::string png_bomb(uint32_t width, uint32_t height, char color = 2) {
  const std::string ihdr = be32(width) + be32(height) + std::string{8, color, 0, 0, 0};
  const std::string idat("\x78\x01\x01\x00\x00\xff\xff\x00\x00\x00\x01", 11);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", idat) +
         png_chunk("IEND", "");
}

// A real w x h JPEG (progressive or baseline), in memory.
std::string jpeg_of(int w, int h, bool progressive) {
  const std::vector<uint8_t> px = noisy_pixels(w, h, 90, 140, 200, 1, 2, 20);
  return jpeg_bytes(w, h, px.data(), {.quality = 75, .progressive = progressive});
}

// A small real JPEG whose SOF0/SOF2 segment is patched to claim width x height.
std::string jpeg_bomb(uint16_t width, uint16_t height, bool progressive) {
  std::string j = jpeg_of(16, 16, progressive);
  const char sof = progressive ? '\xC2' : '\xC0';
  for (size_t i = 2; i + 9 < j.size(); ++i) {
    if (j[i] == '\xFF' && j[i + 1] == sof) {  // FF Cx, length (2), precision (1), height, width
      j[i + 5] = static_cast<char>(height >> 8);
      j[i + 6] = static_cast<char>(height);
      j[i + 7] = static_cast<char>(width >> 8);
      j[i + 8] = static_cast<char>(width);
      return j;
    }
  }
  throw std::runtime_error("no SOF marker in the JPEG");
}

data::Image decode(const std::string& bytes, const std::string& name) {
  return data::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
}

// ---- crafted tar archives -----------------------------------------------------------------------

// One 512-byte ustar header (checksum filled in).
std::string tar_header(const std::string& name, uint64_t size, char type) {
  std::string h(512, '\0');
  auto put = [&](size_t at, const std::string& s) { h.replace(at, s.size(), s); };
  auto octal = [](uint64_t v, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%0*llo", digits, static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  put(0, name.substr(0, 99));
  put(100, "0000644");
  put(108, "0000000");
  put(116, "0000000");
  put(124, octal(size, 11));
  put(136, octal(0, 11));
  put(148, "        ");
  h[156] = type;
  put(257, std::string("ustar\0"
                       "00",
                       8));
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  put(148, octal(sum, 6));
  h[154] = '\0';
  h[155] = ' ';
  return h;
}

std::string tar_pad(std::string s) { return s.append((512 - s.size() % 512) % 512, '\0'); }

// "LEN key=value\n", LEN counting itself.
std::string pax_record(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

std::string pax_entry(const std::string& records) {
  return tar_header("PaxHeaders/x", records.size(), 'x') + tar_pad(records);
}

std::string tar_dir(const std::string& name) { return tar_header(name + "/", 0, '5'); }

std::string tar_end() { return std::string(1024, '\0'); }

// ---- weights for the binary ---------------------------------------------------------------------

// A fresh lenet of three classes, saved once per process.
const fs::path& bounds_weights() {
  static TempDir dir("bounds_weights");
  static const fs::path p = [] {
    const fs::path w = dir / "model.safetensors";
    manual_seed(5);
    auto model = nn::make_model("lenet", 3);
    train::ModelMeta meta;
    meta.model = "lenet";
    meta.classes = {"a", "b", "c"};
    meta.imgsz = 32;
    train::save_model(w.string(), *model, meta);
    return w;
  }();
  return p;
}

// `hpcnet ARGS` under timeout 60 and, where it exists, /usr/bin/time writing the peak RSS (KiB)
// to *rss_mb (in MB; -1 when unmeasured).
RunResult run_measured(const std::vector<std::string>& args, const fs::path& cwd, double* rss_mb) {
  const bool have_time = fs::exists("/usr/bin/time");
  const fs::path rss_file = cwd / "rss.txt";
  std::string wrap = "timeout 60 ";
  if (have_time) wrap += "/usr/bin/time -f %M -o " + shell_quote(rss_file.string()) + " ";
  RunResult r = run_shell(hpcnet_command_line(args, cwd, wrap));
  *rss_mb = -1;
  if (have_time) {
    // /usr/bin/time writes "Command exited with non-zero status N" before the number.
    const std::vector<std::string> lines = split_lines(read_file(rss_file));
    if (!lines.empty()) *rss_mb = std::atof(lines.back().c_str()) / 1024.0;
  }
  return r;
}

}  // namespace

// ---- images -------------------------------------------------------------------------------------

// A PNG header claiming 100000 x 100000 is refused right after png_read_info: the message gives
// the size, the limit and the option; nothing near 30 GB is ever allocated.
TEST(BoundsImage, PngBombHeaderIsRefusedBeforeDecoding) {
  const double rss0 = peak_rss_mb();
  expect_input_error([&] { decode(png_bomb(100000, 100000), "bomb.png"); }, "png bomb",
                     {"cannot decode image bomb.png",
                      "100000x100000 = 10000000000 pixels is over --max-image-pixels 100000000"});
  // Just over the limit and far below libpng's own limits: still refused from the header.
  expect_input_error([&] { decode(png_bomb(10001, 10000), "b.png"); }, "just over",
                     {"10001x10000 = 100010000 pixels"});
  EXPECT_LT(peak_rss_mb() - rss0, 20.0);
}

// A JPEG whose SOF claims 65500 x 65500 is refused after jpeg_read_header, before
// jpeg_start_decompress (which, for a progressive JPEG, allocates the whole coefficient image:
// about 25 GB here).
TEST(BoundsImage, JpegBombHeaderIsRefusedBeforeStartDecompress) {
  const double rss0 = peak_rss_mb();
  for (bool progressive : {false, true}) {
    const std::string bytes = jpeg_bomb(65500, 65500, progressive);
    ASSERT_EQ(decode(jpeg_of(16, 16, progressive), "ok.jpg").width, 16);
    expect_input_error([&] { decode(bytes, "bomb.jpg"); }, progressive ? "SOF2" : "SOF0",
                       {"cannot decode image bomb.jpg",
                        "65500x65500 = 4290250000 pixels is over --max-image-pixels 100000000"});
  }
  EXPECT_LT(peak_rss_mb() - rss0, 20.0);
}

// The limit is the library's setting: images at it decode, one pixel over is refused, and it must
// be at least 1.
TEST(BoundsImage, PixelLimitIsSettable) {
  EXPECT_EQ(data::max_image_pixels(), data::kDefaultMaxImagePixels);
  TempDir tmp("bounds_limit");
  write_png_file(tmp / "a.png", 16, 16, noisy_pixels(16, 16, 10, 20, 30, 1, 1, 5));
  const std::string png = read_file(tmp / "a.png");
  const std::string jpg = jpeg_of(16, 16, false);
  {
    PixelLimit limit(256);
    EXPECT_EQ(data::max_image_pixels(), 256);
    EXPECT_EQ(decode(png, "a.png").height, 16);
    EXPECT_EQ(decode(jpg, "a.jpg").height, 16);
  }
  {
    PixelLimit limit(255);
    expect_input_error([&] { decode(png, "a.png"); }, "png",
                       {"a.png", "16x16 = 256 pixels is over --max-image-pixels 255"});
    expect_input_error([&] { decode(jpg, "a.jpg"); }, "jpeg",
                       {"a.jpg", "16x16 = 256 pixels is over --max-image-pixels 255"});
    expect_input_error([&] { data::read_image_file((tmp / "a.png").string()); }, "file",
                       {(tmp / "a.png").string(), "--max-image-pixels 255"});
  }
  expect_input_error([] { data::set_max_image_pixels(0); }, "zero", {"--max-image-pixels"});
  EXPECT_EQ(data::max_image_pixels(), data::kDefaultMaxImagePixels);
}

// A class mask's header is checked too.
TEST(BoundsImage, MaskBombIsRefused) {
  TempDir tmp("bounds_mask");
  fs::create_directories(tmp / "images/train");
  fs::create_directories(tmp / "masks/train");
  write_png_file(tmp / "images/train/a.png", 4, 4, noisy_pixels(4, 4, 10, 20, 30, 1, 1, 5));
  write_file(tmp / "masks/train/a.png", png_bomb(100000, 100000, 0));
  write_file(tmp / "classes.txt", "background\nthing\n");
  const double rss0 = peak_rss_mb();
  expect_input_error([&] { decode_all(data::load_segmentation(tmp.str(), "train")); }, "mask bomb",
                     {"masks/train/a.png",
                      "100000x100000 = 10000000000 pixels is over "
                      "--max-image-pixels 100000000"});
  EXPECT_LT(peak_rss_mb() - rss0, 20.0);
}

// 10,000 refused bombs (PNG, baseline and progressive JPEG) leave the peak RSS flat: nothing
// leaks on the error paths, which leave libpng and libjpeg by longjmp.
TEST(BoundsImage, TenThousandFailingDecodesKeepRssFlat) {
  const std::string bombs[3] = {png_bomb(100000, 100000), jpeg_bomb(65500, 65500, false),
                                jpeg_bomb(65500, 65500, true)};
  for (const std::string& b : bombs) EXPECT_FALSE(input_error([&] { decode(b, "x"); }).empty());
  const double rss0 = peak_rss_mb();
  int refused = 0;
  for (int i = 0; i < 10000; ++i) {
    try {
      decode(bombs[i % 3], "bomb");
    } catch (const InputError&) {
      ++refused;
    }
  }
  EXPECT_EQ(refused, 10000);
#ifndef HPCNET_SANITIZED  // ASan's quarantine holds freed blocks back: RSS grows by design there
  EXPECT_LT(peak_rss_mb() - rss0, 20.0);
#endif
}

// ---- files read whole ---------------------------------------------------------------------------

// A FIFO, a device, a folder and a file over 1 GiB (sparse) are refused from stat, at once.
TEST(BoundsFile, SpecialAndHugeFilesAreRefusedAtOnce) {
  TempDir tmp("bounds_files");
  const fs::path fifo = tmp / "pipe.png";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Should a reader block on the FIFO, a writer that comes after 20 s lets it go (and fail).
  std::thread unblock([&] {
    for (int i = 0; i < 200; ++i) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) {  // a reader is waiting: only when it blocked
        std::this_thread::sleep_for(std::chrono::seconds(20));
        ::close(fd);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const fs::path big = tmp / "big.png";
  {
    const int fd = ::open(big.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, (off_t{1} << 31) + 1), 0);  // 2 GiB + 1 byte, all hole
    ::close(fd);
  }
  const double rss0 = peak_rss_mb();
  const auto t0 = std::chrono::steady_clock::now();
  expect_input_error([&] { data::read_image_file(fifo.string()); }, "fifo",
                     {fifo.string(), "not a regular file (a FIFO)"});
  expect_input_error([&] { data::read_image_file("/dev/zero"); }, "/dev/zero",
                     {"/dev/zero", "not a regular file (a character device)"});
  expect_input_error([&] { data::read_image_file(tmp.str()); }, "folder",
                     {tmp.str(), "not a regular file (a folder)"});
  expect_input_error([&] { data::read_image_file(big.string()); }, "2 GiB",
                     {big.string(), "2147483649 bytes, over the 1 GiB limit"});
  expect_input_error([&] { load_safetensors(fifo.string()); }, "safetensors fifo",
                     {fifo.string(), "not a regular file"});
  expect_input_error([&] { load_safetensors("/dev/zero"); }, "safetensors /dev/zero",
                     {"/dev/zero", "not a regular file"});
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_LT(peak_rss_mb() - rss0, 20.0);
  unblock.join();
}

// The binary: predict on /dev/zero, a FIFO, a decompression bomb (PNG and progressive JPEG) or
// with --max-image-pixels below an image's size prints one line, exits 2 at once, and stays small;
// --max-image-pixels 0 is a usage error for train, eval and predict.
TEST(BoundsFile, PredictRefusesHostileImagesAtOnce) {
  TempDir tmp("bounds_predict");
  const std::string w = bounds_weights().string();
  write_png_file(tmp / "good.png", 16, 16, noisy_pixels(16, 16, 10, 200, 30, 1, 1, 5));
  write_file(tmp / "bomb.png", png_bomb(100000, 100000));
  write_file(tmp / "bomb.jpg", jpeg_bomb(65500, 65500, true));
  ASSERT_EQ(::mkfifo((tmp / "pipe.png").c_str(), 0600), 0);

  double base_mb = 0;
  const RunResult ok = run_measured({"predict", "--weights", w, "good.png"}, tmp.path(), &base_mb);
  ASSERT_EQ(ok.rc, 0) << ok.err;
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {{"/dev/zero"}, {"/dev/zero", "not a regular file"}},
      {{"pipe.png"}, {"pipe.png", "not a regular file (a FIFO)"}},
      {{"bomb.png"}, {"bomb.png", "100000x100000 = 10000000000 pixels", "--max-image-pixels"}},
      {{"bomb.jpg"}, {"bomb.jpg", "65500x65500 = 4290250000 pixels", "--max-image-pixels"}},
      {{"--max-image-pixels", "255", "good.png"},
       {"good.png", "16x16 = 256 pixels is over --max-image-pixels 255"}},
      {{"--max-image-pixels", "0", "good.png"}, {"--max-image-pixels must be at least 1"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"predict", "--weights", w};
    args.insert(args.end(), c.args.begin(), c.args.end());
    double mb = 0;
    const RunResult r = run_measured(args, tmp.path(), &mb);
    std::string what = "predict";
    for (const std::string& a : c.args) what += " " + a;
    EXPECT_EQ(r.rc, 2) << what << ": " << r.err;
    EXPECT_EQ(r.err_lines().size(), 1u) << what << ": " << r.err;
    for (const std::string& p : c.parts) EXPECT_NE(r.err.find(p), std::string::npos) << r.err;
    EXPECT_LT(r.seconds, 20.0) << what;
    if (mb >= 0) EXPECT_LT(mb, base_mb + 200) << what << ": peak RSS (MB)";
    std::printf("[ measured ] %s: exit %d in %.2f s, peak RSS %.0f MB (a good image: %.0f MB)\n",
                what.c_str(), r.rc, r.seconds, mb, base_mb);
  }
  double mb = 0;
  RunResult r = run_measured(
      {"train", "--data", tmp.str(), "--out", tmp.str("run"), "--max-image-pixels", "0"},
      tmp.path(), &mb);
  expect_refused(r, "train --max-image-pixels 0", {"--max-image-pixels", "at least 1"});
  r = run_measured({"eval", "--weights", w, "--data", tmp.str(), "--max-image-pixels", "0"},
                   tmp.path(), &mb);
  expect_refused(r, "eval --max-image-pixels 0", {"--max-image-pixels", "at least 1"});
}

// train --config on a FIFO or a device is refused at once instead of waiting for a writer.
TEST(BoundsFile, ConfigFifoIsRefusedAtOnce) {
  TempDir tmp("bounds_config");
  ASSERT_EQ(::mkfifo((tmp / "recipe.json").c_str(), 0600), 0);
  double mb = 0;
  for (const std::string& config : {(tmp / "recipe.json").string(), std::string("/dev/zero")}) {
    const RunResult r =
        run_measured({"train", "--config", config, "--data", tmp.str(), "--out", tmp.str("run")},
                     tmp.path(), &mb);
    expect_refused(r, "--config " + config, {config, "not a regular file"});
    EXPECT_LT(r.seconds, 20.0);
  }
}

// ---- archives -----------------------------------------------------------------------------------

// A tar member whose PAX size record claims 10^15 bytes, and a sparse member (PAX GNU sparse 1.0)
// of that logical size, are refused naming the archive and the member, before any buffer is
// reserved (not std::bad_alloc).
TEST(BoundsArchive, MembersClaimingHugeSizesAreRefused) {
  TempDir tmp("bounds_tar");
  const std::string head = tar_dir("train") + tar_dir("train/cat");
  const fs::path pax = tmp / "pax.tar";
  write_file(pax, head + pax_entry(pax_record("size", "1000000000000000")) +
                      tar_header("train/cat/a.png", 0, '0') + tar_end());
  const fs::path sparse = tmp / "sparse.tar";
  const std::string map = tar_pad("1\n999999999999488\n512\n");
  write_file(sparse, head +
                         pax_entry(pax_record("GNU.sparse.major", "1") +
                                   pax_record("GNU.sparse.minor", "0") +
                                   pax_record("GNU.sparse.name", "train/cat/b.png") +
                                   pax_record("GNU.sparse.realsize", "1000000000000000")) +
                         tar_header("train/cat/GNUSparseFile.0/b.png", 1024, '0') + map +
                         std::string(512, 'x') + tar_end());
  const double rss0 = peak_rss_mb();
  expect_input_error([&] { data::load_image_folder(pax.string(), "train"); }, "pax size",
                     {pax.string(), "train/cat/a.png", "1000000000000000 bytes"});
  expect_input_error([&] { data::load_image_folder(sparse.string(), "train"); }, "sparse",
                     {sparse.string(), "train/cat/b.png", "sparse member"});
  const fs::path seg = tmp / "seg.tar";
  write_file(seg, tar_dir("images") + tar_dir("images/train") +
                      pax_entry(pax_record("size", "5000000000")) +
                      tar_header("images/train/a.png", 0, '0') + tar_end());
  expect_input_error([&] { decode_all(data::load_segmentation(seg.string(), "train")); },
                     "segmentation", {seg.string(), "images/train/a.png", "5000000000 bytes"});
  EXPECT_LT(peak_rss_mb() - rss0, 20.0);

  // The binary says it in one line, exit 2.
  const RunResult r = run_hpcnet(
      {"train", "--dataset", "imagefolder", "--data", pax.string(), "--out", tmp.str("run")},
      tmp.path());
  expect_refused(r, "train on the PAX archive",
                 {"pax.tar", "train/cat/a.png", "1000000000000000 bytes"});
}

// ---- folders ------------------------------------------------------------------------------------

// Directory links inside a class folder that lead back to it, to an ancestor or to a folder
// already listed are not followed: each image is listed once (before, a class folder holding
// loop -> .. listed 861 images for two, dog's among them, and one holding self -> . 41 copies).
TEST(BoundsFolder, SymlinkLoopsDoNotMultiplyImages) {
  TempDir tmp("bounds_loop");
  const fs::path cat = tmp / "train/cat", dog = tmp / "train/dog";
  fs::create_directories(cat / "sub");
  fs::create_directories(dog);
  const auto px = noisy_pixels(4, 4, 10, 20, 30, 1, 1, 5);
  write_png_file(cat / "a.png", 4, 4, px);
  write_png_file(cat / "sub/b.png", 4, 4, px);
  write_png_file(dog / "c.png", 4, 4, px);
  fs::create_directory_symlink("..", cat / "up");             // train/: would take in dog/
  fs::create_directory_symlink("../../..", cat / "sub/top");  // the dataset root
  fs::create_directory_symlink(".", cat / "self");
  fs::create_directory_symlink("sub", cat / "again");  // a folder listed anyway
  fs::create_directory_symlink(".", dog / "self");
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<data::Dataset> ds;
  EXPECT_EQ(input_error([&] { ds = data::load_image_folder(tmp.str(), "train"); }), "no exception");
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 3);
  std::vector<std::string> names;
  for (int64_t i = 0; i < ds->size(); ++i) names.push_back(ds->item_name(i));
  ASSERT_EQ(names.size(), 3u);
  EXPECT_TRUE(names[0] == "train/cat/a.png") << names[0];
  EXPECT_TRUE(names[1] == "train/cat/sub/b.png" || names[1] == "train/cat/again/b.png") << names[1];
  EXPECT_EQ(names[2], "train/dog/c.png");
  EXPECT_LT(seconds_since(t0), 5.0);
}

// ---- safetensors --------------------------------------------------------------------------------

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A safetensors file of this header (padded to 8 bytes) and data.
void write_st(const fs::path& p, std::string header, const std::string& data = "") {
  header.append((8 - header.size() % 8) % 8, ' ');
  write_file(p, le64(header.size()) + header + data);
}

}  // namespace

// A header length over 100 MB is refused before the header is read (the file is sparse: 150 MB
// of hole after the length).
TEST(BoundsSafetensors, HeaderOver100MBIsRefusedBeforeReading) {
  TempDir tmp("bounds_st_big");
  const fs::path p = tmp / "big.safetensors";
  write_file(p, le64(150'000'000));
  {
    const int fd = ::open(p.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 150'000'100), 0);
    ::close(fd);
  }
  const double rss0 = peak_rss_mb();
  expect_input_error([&] { load_safetensors(p.string()); }, "150 MB header",
                     {p.string(), "header length 150000000 is implausible"});
  EXPECT_LT(peak_rss_mb() - rss0, 20.0);
}

// JSON nested 100,000 deep (a 200 KB header) is one line, not a stack overflow: in a metadata
// value, in a shape, and as a tensor's entry.
TEST(BoundsSafetensors, DeepNestingIsOneLine) {
  TempDir tmp("bounds_st_deep");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_obj = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "{\"a\":";
    s += "1";
    return s + std::string(100000, '}');
  }();
  const std::vector<std::pair<std::string, std::string>> headers = {
      {"metadata", "{\"__metadata__\":{\"x\":" + deep + "}}"},
      {"shape", "{\"t\":{\"dtype\":\"F32\",\"shape\":" + deep + ",\"data_offsets\":[0,0]}}"},
      {"entry", "{\"t\":" + deep_obj + "}"},
      {"unclosed", "{\"t\":" + std::string(200000, '[')},
  };
  for (const auto& [what, header] : headers) {
    const fs::path p = tmp / (what + ".safetensors");
    write_st(p, header);
    expect_input_error([&] { load_safetensors(p.string()); }, what,
                       {p.string(), "nested over 64 levels deep"});
  }
  // Through the binary too: one line, exit 2 (a stack overflow would be signal 11).
  const RunResult r = run_hpcnet(
      {"predict", "--weights", (tmp / "metadata.safetensors").string(), "x.png"}, tmp.path());
  expect_refused(r, "predict --weights deep", {"metadata.safetensors", "nested"});
}

// 200,000 zero-size tensors load in well under a second (the header is 13 MB): parsing is
// O(n log n), where nlohmann's parser callback and ordered_json made it quadratic (minutes).
TEST(BoundsSafetensors, TwoHundredThousandTensorsLoadFast) {
  TempDir tmp("bounds_st_many");
  std::string header = "{";
  for (int i = 0; i < 200000; ++i)
    header += std::string(i ? "," : "") + "\"t" + std::to_string(i) +
              "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  header += ",\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
  const fs::path p = tmp / "many.safetensors";
  write_st(p, header, "ab");
  const auto t0 = std::chrono::steady_clock::now();
  const SafetensorsFile f = load_safetensors(p.string());
  const double s = seconds_since(t0);
#ifdef HPCNET_SANITIZED
  const double limit = 20.0;  // ASan and -O1: linear still, about 10x slower
#else
  const double limit = 2.0;
#endif
  EXPECT_LT(s, limit) << "seconds to load 200,000 tensors";
  std::printf("[ timing ] 200,000 zero-size tensors loaded in %.3f s\n", s);
  ASSERT_EQ(f.tensors.size(), 200001u);
  // The empty tensors keep the header's order (they tie at offset 0, before w).
  EXPECT_EQ(f.order[0], "t0");
  EXPECT_EQ(f.order[1], "t1");
  EXPECT_EQ(f.order[199999], "t199999");
  EXPECT_EQ(f.order[200000], "w");
}

// Numbers out of range, non-string metadata values, oversized metadata and shapes of absurd rank
// are one line naming the file (and the key), never a json exception's text.
TEST(BoundsSafetensors, HostileValuesNameTheFileAndKey) {
  TempDir tmp("bounds_st_values");
  const std::string t = "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
  struct Case {
    std::string name, header;
    std::vector<std::string> parts;
  };
  std::string rank1000 = "[";
  for (int i = 0; i < 1000; ++i) rank1000 += i ? ",1" : "1";
  rank1000 += "]";
  const std::vector<Case> cases = {
      {"inf", "{\"__metadata__\":{\"x\":1e999}," + t + "}", {"1e999", "out of range", "'x'"}},
      {"neginf", "{\"__metadata__\":{\"y\":-1e999}," + t + "}", {"-1e999", "'y'"}},
      {"offsets",
       "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1e999]}}",
       {"1e999", "'data_offsets'"}},
      {"list", "{\"__metadata__\":{\"z\":[1,2]}," + t + "}", {"'z'", "is not a string", "[1,2]"}},
      {"number", "{\"__metadata__\":{\"n\":12}," + t + "}", {"'n'", "is not a string"}},
      {"big meta",
       "{\"__metadata__\":{\"k\":\"" + std::string(9 << 20, 'a') + "\"}," + t + "}",
       {"__metadata__", "8 MiB", "'k'"}},
      {"rank",
       "{\"t\":{\"dtype\":\"U8\",\"shape\":" + rank1000 + ",\"data_offsets\":[0,1]}}",
       {"'t'", "1000 dimensions"}},
  };
  for (const Case& c : cases) {
    const fs::path p = tmp / (c.name + ".safetensors");
    write_st(p, c.header, "a");
    std::vector<std::string> parts = c.parts;
    const std::string e = input_error([&] { load_safetensors(p.string()); });
    expect_input_error([&] { load_safetensors(p.string()); }, c.name, {p.string()});
    for (const std::string& part : parts) EXPECT_NE(e.find(part), std::string::npos) << e;
    EXPECT_LT(e.size(), 600u) << c.name << ": a short line";
  }
}

// A model file whose metadata holds a number stoll cannot take, a JSON value nested deep, or a
// class list of 3,000,000 (or 150,000) names: one line naming the file and the key.
TEST(BoundsSafetensors, HostileModelMetadataNamesTheKey) {
  TempDir tmp("bounds_st_meta");
  const SafetensorsFile good = load_safetensors(bounds_weights().string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : good.order) tensors.emplace_back(n, good.at(n));
  auto resave = [&](const std::string& name, const std::string& key, const std::string& value) {
    std::map<std::string, std::string> meta = good.metadata;
    meta[key] = value;
    const fs::path p = tmp / (name + ".safetensors");
    save_safetensors(p.string(), tensors, meta);
    return p.string();
  };
  auto names = [](size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += i ? ",\"c\"" : "\"c\"";
    return s + "]";
  };
  struct Case {
    std::string name, key, value;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"imgsz", "hpcnet.imgsz", "99999999999999999999", {"hpcnet.imgsz", "not an integer"}},
      {"imgsz_text", "hpcnet.imgsz", "32px", {"hpcnet.imgsz", "not an integer"}},
      {"val_split", "hpcnet.val_split", "1e999", {"hpcnet.val_split", "not an integer"}},
      {"classes_deep",
       "hpcnet.classes",
       std::string(100000, '[') + std::string(100000, ']'),
       {"hpcnet.classes", "nests"}},
      {"classes_150k", "hpcnet.classes", names(150000), {"hpcnet.classes", "100000"}},
      {"classes_3m", "hpcnet.classes", names(3000000), {"__metadata__", "8 MiB"}},
  };
  for (const Case& c : cases) {
    const std::string p = resave(c.name, c.key, c.value);
    const double rss0 = peak_rss_mb();
    const auto t0 = std::chrono::steady_clock::now();
    const std::string e = input_error([&] { train::load_model(p); });
    expect_input_error([&] { train::load_model(p); }, c.name, {p});
    for (const std::string& part : c.parts) EXPECT_NE(e.find(part), std::string::npos) << e;
    EXPECT_LT(e.size(), 600u) << c.name << ": a short line";
    EXPECT_LT(seconds_since(t0), 5.0) << c.name;
    EXPECT_LT(peak_rss_mb() - rss0, 100.0) << c.name;
  }
  // A checkpoint's epoch count that stoll would half-read ("12abc") names its key.
  std::map<std::string, std::string> meta = good.metadata;
  meta["hpcnet.format"] = "hpcnet-checkpoint-1";
  meta["hpcnet.epochs_done"] = "12abc";
  meta["hpcnet.steps"] = "3";
  const std::string ck = (tmp / "ck.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> prefixed;
  for (const auto& [n, v] : tensors) prefixed.emplace_back("model." + n, v);
  save_safetensors(ck, prefixed, meta);
  expect_input_error([&] { train::load_model(ck); }, "epochs_done",
                     {ck, "hpcnet.epochs_done", "12abc"});
}
