// Tests of the data module: CIFAR-10 binary batches (folder and .tar.gz), image folders (JPEG and
// PNG; folder, .tar, .tar.gz), broken inputs, transforms, the DataLoader's order and workers, the
// validation split, and the download against a local HTTP server. All data is made here, in a
// temporary folder; nothing touches the network or ../shared.
#include <archive.h>
#include <archive_entry.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <png.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "hpcnet/data.h"
#include "hpcnet/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::data;
using hpcnet::test_util::TempDir;

namespace {

// ---- helpers: files, images, archives ---------------------------------------------------------

using Bytes = std::vector<uint8_t>;

void write_file(const fs::path& p, const Bytes& data) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(f.good()) << p;
}

Bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A recognisable HWC RGB image.
Bytes pattern(int seed, int h, int w) {
  Bytes p(static_cast<size_t>(h * w * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        p[(y * w + x) * 3 + c] = (seed * 37 + y * 11 + x * 5 + c * 71) & 255;
  return p;
}

// A smooth image (JPEG-friendly, no wrap-around edges).
Bytes smooth(int seed, int h, int w) {
  Bytes p(static_cast<size_t>(h * w * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) p[(y * w + x) * 3 + c] = 30 + seed * 10 + c * 40 + y * 3 + x * 2;
  return p;
}

Bytes encode_jpeg(const Bytes& rgb, int h, int w) {
  const std::string j =
      test_util::jpeg_bytes(w, h, rgb.data(), {.quality = 100, .full_chroma = true});
  return Bytes(j.begin(), j.end());
}

void png_write_vec(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void png_flush_noop(png_structp) {}

// raw: rows of samples as PNG stores them (16-bit samples big-endian).
Bytes encode_png(const Bytes& raw, int h, int w, int color_type, int bit_depth,
                 const std::vector<png_color>& palette = {}) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(png, &out, png_write_vec, png_flush_noop);
  png_set_IHDR(png, info, w, h, bit_depth, color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  png_write_info(png, info);
  const size_t stride = raw.size() / h;
  for (int y = 0; y < h; ++y) png_write_row(png, raw.data() + y * stride);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Bytes encode_png_rgb(const Bytes& rgb, int h, int w) {
  return encode_png(rgb, h, w, PNG_COLOR_TYPE_RGB, 8);
}

struct TreeEntry {
  std::string path;
  Bytes data;
  bool dir = false;
};

void write_tree(const fs::path& root, const std::vector<TreeEntry>& entries) {
  for (const TreeEntry& e : entries) {
    if (e.dir) {
      fs::create_directories(root / e.path);
    } else {
      write_file(root / e.path, e.data);
    }
  }
}

void write_archive(const fs::path& file, const std::vector<TreeEntry>& entries, bool gzip,
                   const std::string& prefix = "") {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip) archive_write_add_filter_gzip(a);
  ASSERT_EQ(archive_write_open_filename(a, file.c_str()), ARCHIVE_OK);
  for (const TreeEntry& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, (prefix + e.path).c_str());
    archive_entry_set_filetype(entry, e.dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(entry, e.dir ? 0755 : 0644);
    archive_entry_set_size(entry, e.dir ? 0 : static_cast<la_int64_t>(e.data.size()));
    ASSERT_EQ(archive_write_header(a, entry), ARCHIVE_OK);
    if (!e.dir && !e.data.empty()) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// Expects an InputError whose message contains every one of `parts`.
template <class F>
void expect_input_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no InputError thrown";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

// ---- CIFAR-10 binary --------------------------------------------------------------------------

// Record r of a file: label (file * 7 + r) % 10, pixel (c, y, x) = (file * 50 + r * 13 + c * 3 +
// y + x) & 255.
Bytes cifar_file(int file, int records) {
  Bytes out;
  for (int r = 0; r < records; ++r) {
    out.push_back(static_cast<uint8_t>((file * 7 + r) % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out.push_back((file * 50 + r * 13 + c * 3 + y + x) & 255);
  }
  return out;
}

std::vector<TreeEntry> cifar_tree(bool meta) {
  std::vector<TreeEntry> t;
  t.push_back({"cifar-10-batches-bin", {}, true});
  for (int f = 1; f <= 5; ++f)
    t.push_back(
        {"cifar-10-batches-bin/data_batch_" + std::to_string(f) + ".bin", cifar_file(f, 3)});
  t.push_back({"cifar-10-batches-bin/test_batch.bin", cifar_file(0, 2)});
  if (meta)
    t.push_back({"cifar-10-batches-bin/batches.meta.txt",
                 to_bytes("c0\nc1\nc2\nc3\nc4\nc5\nc6\nc7\nc8\nc9\n\n")});
  return t;
}

void check_cifar_train(const Dataset& ds) {
  ASSERT_EQ(ds.size(), 15);
  for (int64_t i = 0; i < ds.size(); ++i) {
    const int file = static_cast<int>(i / 3) + 1, r = static_cast<int>(i % 3);
    Example e = test_util::item(ds, i);
    ASSERT_EQ(e.height, 32);
    ASSERT_EQ(e.width, 32);
    EXPECT_EQ(e.label, (file * 7 + r) % 10);
    for (int y : {0, 5, 31})
      for (int x : {0, 17, 31})
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(e.pixels[(y * 32 + x) * 3 + c], (file * 50 + r * 13 + c * 3 + y + x) & 255);
  }
}

TEST(DataCifar10, BinaryFolder) {
  TempDir tmp("data");
  write_tree(tmp.path(), cifar_tree(true));
  for (std::string path : {tmp.str(), tmp.str("cifar-10-batches-bin")}) {
    auto train = load_cifar10_binary(path, "train");
    check_cifar_train(*train);
    EXPECT_EQ(train->classes()[3], "c3");
    EXPECT_EQ(train->item_name(4), "data_batch_2.bin#1");
    auto test = open_dataset("cifar10", path, "test");
    ASSERT_EQ(test->size(), 2);
    EXPECT_EQ(test_util::item(*test, 1).label, 1);
    EXPECT_EQ(test_util::item(*test, 1).pixels[0], 13);
  }
}

TEST(DataCifar10, BinaryArchive) {
  TempDir tmp("data");
  write_archive(tmp.path() / "cifar-10-binary.tar.gz", cifar_tree(false), true);
  write_archive(tmp.path() / "dotted.tar.gz", cifar_tree(false), true, "./");
  for (std::string path :
       {tmp.str("cifar-10-binary.tar.gz"), tmp.str(), tmp.str("dotted.tar.gz")}) {
    auto train = open_dataset("cifar10", path, "train");
    check_cifar_train(*train);
    EXPECT_EQ(train->classes(), cifar10_class_names());
    EXPECT_EQ(open_dataset("cifar10", path, "test")->size(), 2);
  }
  EXPECT_EQ(cifar10_class_names().front(), "airplane");
  EXPECT_EQ(cifar10_class_names().back(), "truck");
}

TEST(DataCifar10, BrokenInputs) {
  TempDir tmp("data");
  const fs::path dir = tmp.path() / "cifar-10-batches-bin";
  write_tree(tmp.path(), cifar_tree(false));
  // Truncated.
  Bytes b = cifar_file(1, 2);
  b.resize(b.size() - 5);
  write_file(dir / "data_batch_1.bin", b);
  expect_input_error([&] { load_cifar10_binary(tmp.str(), "train"); },
                     {"data_batch_1.bin", "truncated", "3073"});
  // Label out of range, record 1.
  b = cifar_file(1, 3);
  b[3073] = 10;
  write_file(dir / "data_batch_1.bin", b);
  expect_input_error([&] { load_cifar10_binary(tmp.str(), "train"); },
                     {"data_batch_1.bin", "record 1", "label 10"});
  // Empty.
  write_file(dir / "data_batch_1.bin", {});
  expect_input_error([&] { load_cifar10_binary(tmp.str(), "train"); },
                     {"data_batch_1.bin", "empty"});
  // Missing.
  write_file(dir / "data_batch_1.bin", cifar_file(1, 3));
  fs::remove(dir / "data_batch_3.bin");
  expect_input_error([&] { open_dataset("cifar10", tmp.str(), "train"); },
                     {"data_batch_3.bin", "cifar-10-binary.tar.gz"});
  EXPECT_EQ(load_cifar10_binary(tmp.str(), "test")->size(), 2);
  // Bad meta file.
  write_file(dir / "batches.meta.txt", to_bytes("a\nb\n"));
  expect_input_error([&] { load_cifar10_binary(tmp.str(), "test"); }, {"batches.meta.txt", "10"});
  // Archive missing a member; unknown split; nothing there.
  std::vector<TreeEntry> partial = cifar_tree(false);
  partial.erase(partial.begin() + 2);  // data_batch_2.bin
  write_archive(tmp.path() / "partial.tar.gz", partial, true);
  expect_input_error([&] { open_dataset("cifar10", tmp.str("partial.tar.gz"), "train"); },
                     {"partial.tar.gz", "data_batch_2.bin"});
  expect_input_error([&] { open_dataset("cifar10", tmp.str(), "val"); }, {"val", "train or test"});
  expect_input_error([&] { open_dataset("cifar10", tmp.str("nothing"), "train"); },
                     {"nothing", "does not exist"});
  fs::create_directories(tmp.path() / "emptydir");
  expect_input_error([&] { open_dataset("cifar10", tmp.str("emptydir"), "train"); },
                     {"emptydir", "cifar-10-batches-bin"});
  write_file(tmp.path() / "junk.tar.gz", to_bytes("not an archive at all"));
  expect_input_error([&] { open_dataset("cifar10", tmp.str("junk.tar.gz"), "train"); },
                     {"junk.tar.gz"});
  expect_input_error([&] { open_dataset("mnist", tmp.str(), "train"); }, {"mnist", "cifar10"});
}

// ---- images -----------------------------------------------------------------------------------

TEST(DataImages, DecodePngVariants) {
  const int h = 3, w = 4;
  // RGB 8-bit: exact.
  Bytes rgb = pattern(1, h, w);
  Bytes png = encode_png_rgb(rgb, h, w);
  Image im = decode_image(png.data(), png.size(), "a");
  EXPECT_EQ(im.height, h);
  EXPECT_EQ(im.width, w);
  EXPECT_EQ(im.pixels, rgb);
  // Gray 8-bit -> R = G = B.
  Bytes gray(h * w);
  for (int i = 0; i < h * w; ++i) gray[i] = static_cast<uint8_t>(i * 20);
  png = encode_png(gray, h, w, PNG_COLOR_TYPE_GRAY, 8);
  im = decode_image(png.data(), png.size(), "gray");
  for (int i = 0; i < h * w; ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(im.pixels[i * 3 + c], gray[i]);
  // Palette.
  std::vector<png_color> pal = {{10, 20, 30}, {200, 100, 50}};
  Bytes idx(h * w);
  for (int i = 0; i < h * w; ++i) idx[i] = static_cast<uint8_t>(i % 2);
  png = encode_png(idx, h, w, PNG_COLOR_TYPE_PALETTE, 8, pal);
  im = decode_image(png.data(), png.size(), "pal");
  for (int i = 0; i < h * w; ++i) {
    ASSERT_EQ(im.pixels[i * 3 + 0], pal[i % 2].red);
    ASSERT_EQ(im.pixels[i * 3 + 1], pal[i % 2].green);
    ASSERT_EQ(im.pixels[i * 3 + 2], pal[i % 2].blue);
  }
  // RGBA: alpha dropped (not composited).
  Bytes rgba;
  for (int i = 0; i < h * w; ++i) {
    rgba.insert(rgba.end(), {rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2], static_cast<uint8_t>(i)});
  }
  png = encode_png(rgba, h, w, PNG_COLOR_TYPE_RGB_ALPHA, 8);
  im = decode_image(png.data(), png.size(), "rgba");
  EXPECT_EQ(im.pixels, rgb);
  // 16-bit RGB: high byte kept.
  Bytes rgb16;
  for (uint8_t v : rgb) rgb16.insert(rgb16.end(), {v, static_cast<uint8_t>(255 - v)});
  png = encode_png(rgb16, h, w, PNG_COLOR_TYPE_RGB, 16);
  im = decode_image(png.data(), png.size(), "rgb16");
  EXPECT_EQ(im.pixels, rgb);
  // Gray + alpha, 16-bit.
  Bytes ga16;
  for (uint8_t v : gray) ga16.insert(ga16.end(), {v, 7, 255, 255});
  png = encode_png(ga16, h, w, PNG_COLOR_TYPE_GRAY_ALPHA, 16);
  im = decode_image(png.data(), png.size(), "ga16");
  for (int i = 0; i < h * w; ++i) ASSERT_EQ(im.pixels[i * 3 + 2], gray[i]);
}

TEST(DataImages, DecodeJpegAndErrors) {
  const int h = 8, w = 16;
  Bytes rgb = smooth(1, h, w);
  Bytes jpg = encode_jpeg(rgb, h, w);
  Image im = decode_image(jpg.data(), jpg.size(), "x.jpg");
  ASSERT_EQ(im.height, h);
  ASSERT_EQ(im.width, w);
  for (size_t i = 0; i < rgb.size(); ++i) ASSERT_NEAR(im.pixels[i], rgb[i], 6) << i;
  // Truncated JPEG, garbage, empty, truncated PNG.
  Bytes cut(jpg.begin(), jpg.begin() + static_cast<std::ptrdiff_t>(jpg.size() / 2));
  expect_input_error([&] { decode_image(cut.data(), cut.size(), "cut.jpg"); }, {"cut.jpg", "JPEG"});
  Bytes junk = to_bytes("hello, not an image");
  expect_input_error([&] { decode_image(junk.data(), junk.size(), "junk.png"); },
                     {"junk.png", "not a JPEG or PNG"});
  expect_input_error([&] { decode_image(nullptr, 0, "zero.jpg"); }, {"zero.jpg"});
  Bytes png = encode_png_rgb(pattern(2, h, w), h, w);
  png.resize(png.size() - 20);
  expect_input_error([&] { decode_image(png.data(), png.size(), "cut.png"); }, {"cut.png", "PNG"});
  // The decoder stays usable after errors.
  im = decode_image(jpg.data(), jpg.size(), "again.jpg");
  EXPECT_EQ(im.width, w);
  TempDir tmp("data");
  write_file(tmp.path() / "f.png", encode_png_rgb(rgb, h, w));
  EXPECT_EQ(read_image_file(tmp.str("f.png")).pixels, rgb);
  expect_input_error([&] { read_image_file(tmp.str("missing.png")); }, {"missing.png"});
}

// ---- image folders ----------------------------------------------------------------------------

// Classes "bird" (3 PNG incl. one in a sub-folder), "ant" (2: a JPEG and a gray PNG), plus files
// that must be skipped. Expected order: ant/a.jpg, ant/b.png, bird/x.png, bird/z.png,
// bird/sub/y.png (files of the class folder first, then sub-folders).
std::vector<TreeEntry> folder_tree(const std::string& split) {
  const int h = 6, w = 5;
  Bytes gray(h * w, 99);
  return {
      {split, {}, true},
      {split + "/bird", {}, true},
      {split + "/bird/z.png", encode_png_rgb(pattern(3, h, w), h, w)},
      {split + "/bird/x.png", encode_png_rgb(pattern(2, h, w), h, w)},
      {split + "/bird/sub", {}, true},
      {split + "/bird/sub/y.png", encode_png_rgb(pattern(4, h, w), h, w)},
      {split + "/bird/notes.txt", to_bytes("skip me")},
      {split + "/bird/.hidden.png", to_bytes("skip me too")},
      {split + "/ant", {}, true},
      {split + "/ant/b.PNG", encode_png(gray, h, w, PNG_COLOR_TYPE_GRAY, 8)},
      {split + "/ant/a.jpg", encode_jpeg(smooth(1, h, w), h, w)},
  };
}

void check_folder(const Dataset& ds, const std::string& split) {
  const int h = 6, w = 5;
  ASSERT_EQ(ds.size(), 5);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"ant", "bird"}));
  const std::vector<std::string> names = {split + "/ant/a.jpg", split + "/ant/b.PNG",
                                          split + "/bird/x.png", split + "/bird/z.png",
                                          split + "/bird/sub/y.png"};
  const std::vector<int64_t> labels = {0, 0, 1, 1, 1};
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ds.item_name(i), names[i]);
    Example e = test_util::item(ds, i);
    EXPECT_EQ(e.label, labels[i]);
    ASSERT_EQ(e.height, h);
    ASSERT_EQ(e.width, w);
  }
  Bytes want = smooth(1, h, w);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(test_util::item(ds, 0).pixels[i], want[i], 6);
  EXPECT_EQ(test_util::item(ds, 1).pixels[7], 99);
  for (int k = 0; k < 3; ++k) {
    Bytes p = pattern(2 + k, h, w);
    const Example e = test_util::item(ds, 2 + k);
    EXPECT_EQ(Bytes(e.pixels, e.pixels + p.size()), p);
  }
}

TEST(DataImageFolder, FolderTarAndTarGz) {
  TempDir tmp("data");
  std::vector<TreeEntry> tree = folder_tree("train");
  std::vector<TreeEntry> test_tree = folder_tree("test");
  tree.insert(tree.end(), test_tree.begin(), test_tree.end());
  write_tree(tmp.path() / "root", tree);
  write_archive(tmp.path() / "plain.tar", tree, false);
  write_archive(tmp.path() / "packed.tar.gz", tree, true, "./");
  write_archive(tmp.path() / "top.tgz", tree, true, "mydata/");
  // Without directory entries: folders implied by file paths.
  std::vector<TreeEntry> files_only;
  for (const TreeEntry& e : tree)
    if (!e.dir) files_only.push_back(e);
  write_archive(tmp.path() / "nodirs.tar.gz", files_only, true, "./top/");
  for (std::string p : {"root", "plain.tar", "packed.tar.gz", "top.tgz", "nodirs.tar.gz"}) {
    SCOPED_TRACE(p);
    check_folder(*load_image_folder(tmp.str(p), "train"), "train");
    check_folder(*open_dataset("imagefolder", tmp.str(p), "test"), "test");
    // "cifar10" recognises an image folder too.
    check_folder(*open_dataset("cifar10", tmp.str(p), "train"), "train");
  }
}

// index_fingerprint (what a checkpoint records of its data): the same files in a folder, a tar or
// a .tar.gz below a top folder digest the same; another label, item or size does not.
TEST(DataFingerprint, TheSameDataAnywhereDigestsTheSame) {
  TempDir tmp("data");
  const std::vector<TreeEntry> tree = folder_tree("train");
  write_tree(tmp.path() / "root", tree);
  write_archive(tmp.path() / "plain.tar", tree, false);
  write_archive(tmp.path() / "top.tgz", tree, true, "mydata/");
  const std::string fp = index_fingerprint(*load_image_folder(tmp.str("root"), "train"));
  EXPECT_EQ(fp.size(), 16u) << fp;
  for (std::string p : {"plain.tar", "top.tgz"})
    EXPECT_EQ(index_fingerprint(*load_image_folder(tmp.str(p), "train")), fp) << p;
  fs::copy(tmp.path() / "root", tmp.path() / "moved", fs::copy_options::recursive);
  EXPECT_EQ(index_fingerprint(*load_image_folder(tmp.str("moved"), "train")), fp);
  // An image moved to another class (its label changes), one more image: other digests.
  fs::rename(tmp.path() / "moved/train/bird/x.png", tmp.path() / "moved/train/ant/x.png");
  const std::string relabelled = index_fingerprint(*load_image_folder(tmp.str("moved"), "train"));
  EXPECT_NE(relabelled, fp);
  fs::copy_file(tmp.path() / "moved/train/ant/x.png", tmp.path() / "moved/train/ant/x2.png");
  EXPECT_NE(index_fingerprint(*load_image_folder(tmp.str("moved"), "train")), relabelled);

  // CIFAR-10's batches (in memory): the folder and the archive digest the same; a record's label
  // or a record more does not.
  write_tree(tmp.path() / "cifar", cifar_tree(false));
  write_archive(tmp.path() / "cifar-10-binary.tar.gz", cifar_tree(false), true);
  const std::string cfp = index_fingerprint(*open_dataset("cifar10", tmp.str("cifar"), "train"));
  EXPECT_EQ(index_fingerprint(*open_dataset("cifar10", tmp.str("cifar-10-binary.tar.gz"), "train")),
            cfp);
  EXPECT_NE(cfp, fp);
  const fs::path batch = tmp.path() / "cifar/cifar-10-batches-bin/data_batch_2.bin";
  Bytes bytes = read_file(batch);
  bytes[0] = static_cast<uint8_t>((bytes[0] + 1) % 10);
  write_file(batch, bytes);
  EXPECT_NE(index_fingerprint(*open_dataset("cifar10", tmp.str("cifar"), "train")), cfp);
  write_file(batch, cifar_file(2, 4));
  EXPECT_NE(index_fingerprint(*open_dataset("cifar10", tmp.str("cifar"), "train")), cfp);
}

TEST(DataFingerprint, PlaceholderClassNames) {
  EXPECT_TRUE(placeholder_class_names({"class_0", "class_1"}));
  EXPECT_FALSE(placeholder_class_names({"class_1", "class_0"}));
  EXPECT_FALSE(placeholder_class_names({"class_0", "cat"}));
  EXPECT_FALSE(placeholder_class_names({}));
}

TEST(DataImageFolder, BrokenInputs) {
  TempDir tmp("data");
  // Undecodable image, named, in a folder and in an archive.
  std::vector<TreeEntry> tree = folder_tree("train");
  tree.push_back({"train/bird/broken.jpg", to_bytes("\xFF\xD8\xFF garbage")});
  write_tree(tmp.path() / "bad", tree);
  write_archive(tmp.path() / "bad.tar.gz", tree, true);
  expect_input_error([&] { test_util::decode_all(load_image_folder(tmp.str("bad"), "train")); },
                     {"train/bird/broken.jpg", "JPEG"});
  expect_input_error(
      [&] { test_util::decode_all(load_image_folder(tmp.str("bad.tar.gz"), "train")); },
      {"bad.tar.gz", "train/bird/broken.jpg"});
  // Empty class folder (only a non-image inside), folder and archive.
  tree = folder_tree("train");
  tree.push_back({"train/cat", {}, true});
  tree.push_back({"train/cat/readme.txt", to_bytes("x")});
  write_tree(tmp.path() / "empty", tree);
  write_archive(tmp.path() / "empty.tar", tree, false);
  expect_input_error([&] { load_image_folder(tmp.str("empty"), "train"); },
                     {"train/cat", "no images"});
  expect_input_error([&] { open_dataset("cifar10", tmp.str("empty.tar"), "train"); },
                     {"train/cat", "no images"});
  // No class folders.
  write_tree(tmp.path() / "noclass", {{"train", {}, true}, {"train/loose.png", {}}});
  expect_input_error([&] { load_image_folder(tmp.str("noclass"), "train"); },
                     {"train", "no class folders"});
  // Missing split; unknown split.
  write_tree(tmp.path() / "trainonly", folder_tree("train"));
  write_archive(tmp.path() / "trainonly.tar.gz", folder_tree("train"), true);
  expect_input_error([&] { load_image_folder(tmp.str("trainonly"), "test"); }, {"test/"});
  expect_input_error([&] { open_dataset("cifar10", tmp.str("trainonly.tar.gz"), "test"); },
                     {"trainonly.tar.gz", "test/", "train/"});
  expect_input_error([&] { load_image_folder(tmp.str("trainonly"), "valid"); }, {"valid"});
  expect_input_error([&] { load_image_folder(tmp.str("nowhere"), "train"); }, {"nowhere"});
}

// ---- validation split -------------------------------------------------------------------------

TEST(DataSplit, TrainValDisjointAndFixed) {
  TrainValSplit s = split_train_val(100, 20);
  ASSERT_EQ(s.train.size(), 80u);
  ASSERT_EQ(s.val.size(), 20u);
  EXPECT_TRUE(std::is_sorted(s.train.begin(), s.train.end()));
  EXPECT_TRUE(std::is_sorted(s.val.begin(), s.val.end()));
  std::vector<int64_t> all = s.train;
  all.insert(all.end(), s.val.begin(), s.val.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(all[i], i);  // disjoint and complete
  // Fixed: the documented rule, and the same on every call.
  Rng rng(0x5EED5EEDULL, 0);
  std::vector<int64_t> perm = random_permutation(100, rng);
  std::vector<int64_t> val(perm.begin() + 80, perm.end());
  std::sort(val.begin(), val.end());
  EXPECT_EQ(s.val, val);
  EXPECT_EQ(split_train_val(100, 20).val, s.val);
  EXPECT_TRUE(split_train_val(10, 0).val.empty());
  expect_input_error([] { split_train_val(10, 10); }, {"10"});
  expect_input_error([] { split_train_val(10, -1); }, {"-1"});
  // Subset.
  auto base = std::make_shared<InMemoryDataset>(std::vector<std::string>{"a", "b"});
  for (int i = 0; i < 4; ++i)
    base->add(pattern(i, 2, 2).data(), 2, 2, i % 2, "img" + std::to_string(i));
  Subset sub(base, {3, 1});
  ASSERT_EQ(sub.size(), 2);
  EXPECT_EQ(test_util::item(sub, 0).pixels, test_util::item(*base, 3).pixels);
  EXPECT_EQ(sub.item_name(1), "img1");
  EXPECT_EQ(sub.classes(), base->classes());
  expect_input_error([&] { Subset(base, {4}); }, {"4"});
  expect_input_error([&] { base->add(pattern(0, 2, 2).data(), 2, 2, 2); }, {"label 2"});
  EXPECT_EQ(base->class_counts(), (std::vector<int64_t>{2, 2}));
}

// ---- transforms -------------------------------------------------------------------------------

struct SmallImage {
  Bytes pixels;
  int64_t h, w;
  Example ex(int64_t label = 0) const { return Example{pixels.data(), h, w, label}; }
};

TEST(DataTransforms, ToTensorNormalize) {
  SmallImage im{pattern(5, 3, 4), 3, 4};
  Compose plain;
  EXPECT_EQ(plain.output_shape(3, 4), (std::array<int64_t, 3>{3, 3, 4}));
  std::vector<float> out(36, -7.f);
  plain.apply(im.ex(), 1, out.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x)
        ASSERT_EQ(out[(c * 3 + y) * 4 + x],
                  static_cast<float>(im.pixels[(y * 4 + x) * 3 + c]) / 255.f);
  Normalize n{{0.5f, 0.25f, 0.125f}, {0.5f, 0.2f, 0.3f}};
  Compose norm({ToTensor{}, n});
  norm.apply(im.ex(), 1, out.data());
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 12; ++i) {
      float x = static_cast<float>(im.pixels[i * 3 + c]) / 255.f;
      ASSERT_EQ(out[c * 12 + i], (x - n.mean[c]) / n.std[c]);
    }
  EXPECT_EQ(norm.str(),
            "Compose(ToTensor(), Normalize(mean=(0.5, 0.25, 0.125), std=(0.5, 0.2, 0.3)))");
  // Ordering rules.
  expect_input_error([] { Compose(std::vector<Transform>{}); }, {"ToTensor"});
  expect_input_error([&] { Compose({n, ToTensor{}}); }, {"Normalize", "after"});
  expect_input_error([&] { Compose({ToTensor{}, n, RandomHorizontalFlip{}}); }, {"before"});
  expect_input_error([] { Compose({ToTensor{}, Normalize{{0, 0, 0}, {1, 0, 1}}}); }, {"std"});
}

TEST(DataTransforms, HorizontalFlip) {
  SmallImage im{pattern(6, 2, 5), 2, 5};
  std::vector<float> a(30), b(30);
  Compose({ToTensor{}}).apply(im.ex(), 3, a.data());
  Compose({RandomHorizontalFlip{1.0}, ToTensor{}}).apply(im.ex(), 3, b.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 5; ++x) ASSERT_EQ(b[(c * 2 + y) * 5 + x], a[(c * 2 + y) * 5 + 4 - x]);
  Compose({RandomHorizontalFlip{0.0}, ToTensor{}}).apply(im.ex(), 3, b.data());
  EXPECT_EQ(a, b);
  // p = 0.5 flips when the sample's first uniform draw is below 0.5.
  int flips = 0;
  Compose half({RandomHorizontalFlip{}, ToTensor{}});
  for (uint64_t seed = 0; seed < 64; ++seed) {
    half.apply(im.ex(), seed, b.data());
    Rng rng(seed);
    bool flipped = rng.uniform() < 0.5;
    flips += flipped;
    ASSERT_EQ(b[4], flipped ? a[0] : a[4]);
  }
  EXPECT_GT(flips, 10);
  EXPECT_LT(flips, 54);
}

// Reference: pad with zeros, crop at the documented offsets, optional flip, as float.
std::vector<float> reference_crop_flip(const SmallImage& im, int64_t size, int64_t pad,
                                       double flip_p, uint64_t seed) {
  Rng rng(seed);
  const int64_t ph = im.h + 2 * pad, pw = im.w + 2 * pad;
  const int64_t top = static_cast<int64_t>(rng.randint(ph - size + 1));
  const int64_t left = static_cast<int64_t>(rng.randint(pw - size + 1));
  const bool flip = flip_p > 0 && rng.uniform() < flip_p;
  std::vector<float> out(3 * size * size);
  for (int c = 0; c < 3; ++c)
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x) {
        int64_t xs = flip ? size - 1 - x : x;
        int64_t sy = top + y - pad, sx = left + xs - pad;
        uint8_t v = 0;
        if (sy >= 0 && sy < im.h && sx >= 0 && sx < im.w) v = im.pixels[(sy * im.w + sx) * 3 + c];
        out[(c * size + y) * size + x] = static_cast<float>(v) / 255.f;
      }
  return out;
}

TEST(DataTransforms, RandomCropPadding) {
  SmallImage im{pattern(7, 4, 5), 4, 5};
  // The only possible window when size = H + 2p... (here H = 4, W = 5: size 6, padding 1 fits
  // rows exactly and allows two column offsets; check against the reference for many seeds).
  Compose crop({RandomCrop{6, 1}, ToTensor{}});
  EXPECT_EQ(crop.output_shape(4, 5), (std::array<int64_t, 3>{3, 6, 6}));
  std::vector<float> out(3 * 36);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    crop.apply(im.ex(), seed, out.data());
    ASSERT_EQ(out, reference_crop_flip(im, 6, 1, 0, seed)) << seed;
    for (int x = 0; x < 6; ++x) ASSERT_EQ(out[x], 0.f);  // top row is padding
  }
  Compose crop_flip({RandomCrop{3, 2}, RandomHorizontalFlip{0.5}, ToTensor{}});
  std::vector<float> small(27);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    crop_flip.apply(im.ex(), seed, small.data());
    ASSERT_EQ(small, reference_crop_flip(im, 3, 2, 0.5, seed)) << seed;
  }
  // Padding becomes the normalised value of 0, as torchvision pads before Normalize.
  Normalize n{{0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}};
  Compose crop_norm({RandomCrop{8, 2}, ToTensor{}, n});
  std::vector<float> big(3 * 64);
  crop_norm.apply(im.ex(), 0, big.data());
  EXPECT_EQ(big[0], (0.f - 0.5f) / 0.25f);
  // Crop after ToTensor behaves the same.
  Compose late({ToTensor{}, RandomCrop{3, 2}, RandomHorizontalFlip{0.5}});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    late.apply(im.ex(), seed, small.data());
    ASSERT_EQ(small, reference_crop_flip(im, 3, 2, 0.5, seed));
  }
  // Two crops in a row: the second crop's padding is zero even over image pixels cut away.
  Compose twice({RandomCrop{2, 0}, RandomCrop{4, 1}, ToTensor{}});
  std::vector<float> t(3 * 16);
  twice.apply(im.ex(), 11, t.data());
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(t[c * 16 + i], 0.f);          // top row
      EXPECT_EQ(t[c * 16 + 12 + i], 0.f);     // bottom row
      EXPECT_EQ(t[c * 16 + i * 4], 0.f);      // left column
      EXPECT_EQ(t[c * 16 + i * 4 + 3], 0.f);  // right column
    }
  expect_input_error([&] { crop.output_shape(2, 2); }, {"RandomCrop(6, padding=1)", "2x2"});
}

// ---- DataLoader -------------------------------------------------------------------------------

// n images of h x w whose first pixel encodes the index.
std::shared_ptr<InMemoryDataset> indexed_dataset(int n, int h = 4, int w = 4) {
  auto ds = std::make_shared<InMemoryDataset>(std::vector<std::string>{"a", "b", "c"});
  for (int i = 0; i < n; ++i) {
    Bytes p = pattern(i, h, w);
    p[0] = static_cast<uint8_t>(i);
    ds->add(p.data(), h, w, i % 3);
  }
  return ds;
}

std::vector<std::vector<float>> run_epoch(DataLoader& loader, int64_t epoch,
                                          std::vector<std::vector<int64_t>>* indices = nullptr) {
  loader.begin_epoch(epoch);
  std::vector<std::vector<float>> out;
  Batch b;
  while (loader.next(b)) {
    EXPECT_EQ(b.index, static_cast<int64_t>(out.size()));
    std::vector<float> v = b.images.to_vector();
    std::vector<float> l = b.labels.to_vector();
    v.insert(v.end(), l.begin(), l.end());
    out.push_back(std::move(v));
    if (indices) indices->push_back(b.indices);
  }
  return out;
}

TEST(DataLoaderTest, OrderAndBatches) {
  auto ds = indexed_dataset(10);
  DataLoaderOptions o;
  o.batch_size = 3;
  DataLoader plain(ds, Compose(), o);
  EXPECT_EQ(plain.num_batches(), 4);
  std::vector<std::vector<int64_t>> idx;
  auto batches = run_epoch(plain, 0, &idx);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(idx[0], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(idx[3], (std::vector<int64_t>{9}));  // last partial batch
  Batch b;
  plain.begin_epoch(0);
  ASSERT_TRUE(plain.next(b));
  EXPECT_EQ(b.images.shape(), (Shape{3, 3, 4, 4}));
  EXPECT_EQ(b.labels.shape(), (Shape{3}));
  EXPECT_EQ(b.labels.dtype(), DType::kInt64);
  EXPECT_EQ(b.labels.data<int64_t>()[2], 2);
  EXPECT_EQ(b.size, 3);
  EXPECT_EQ(b.images.data<float>()[16 * 3], 1.f / 255.f);  // sample 1, channel 0, pixel 0

  o.drop_last = true;
  DataLoader dropping(ds, Compose(), o);
  EXPECT_EQ(dropping.num_batches(), 3);
  EXPECT_EQ(run_epoch(dropping, 0).size(), 3u);
  EXPECT_FALSE(dropping.next(b));  // stays at the end until the next begin_epoch

  o.shuffle = true;
  o.drop_last = false;
  o.seed = 42;
  DataLoader shuffled(ds, Compose(), o);
  Rng rng(42, 1000 + 1);
  EXPECT_EQ(shuffled.epoch_order(1), random_permutation(10, rng));
  EXPECT_EQ(shuffled.epoch_order(1), shuffled.epoch_order(1));
  EXPECT_NE(shuffled.epoch_order(1), shuffled.epoch_order(2));
  std::vector<std::vector<int64_t>> i1, i1b, i2;
  run_epoch(shuffled, 1, &i1);
  run_epoch(shuffled, 1, &i1b);
  run_epoch(shuffled, 2, &i2);
  EXPECT_EQ(i1, i1b);
  EXPECT_NE(i1, i2);
  std::vector<int64_t> flat;
  for (auto& v : i1) flat.insert(flat.end(), v.begin(), v.end());
  EXPECT_EQ(flat, shuffled.epoch_order(1));
  // next() without begin_epoch starts epoch 0.
  DataLoader fresh(ds, Compose(), o);
  ASSERT_TRUE(fresh.next(b));
  const std::vector<int64_t> order0 = fresh.epoch_order(0);
  EXPECT_EQ(b.indices, std::vector<int64_t>(order0.begin(), order0.begin() + 3));
  expect_input_error([&] { DataLoader(ds, Compose(), DataLoaderOptions{0}); }, {"batch_size"});
}

TEST(DataLoaderTest, WorkersMatchSingleThread) {
  auto ds = indexed_dataset(37, 6, 6);
  Compose tf({RandomCrop{6, 2}, RandomHorizontalFlip{}, ToTensor{},
              Normalize{{0.4f, 0.5f, 0.6f}, {0.2f, 0.25f, 0.3f}}});
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.seed = 7;
  DataLoader serial(ds, tf, o);
  o.num_workers = 2;
  DataLoader parallel(ds, tf, o);
  o.num_workers = 3;
  o.prefetch_factor = 1;
  DataLoader parallel3(ds, tf, o);
  for (int64_t epoch : {0, 1, 0}) {
    auto a = run_epoch(serial, epoch);
    ASSERT_EQ(a.size(), 10u);
    EXPECT_EQ(a, run_epoch(parallel, epoch));
    EXPECT_EQ(a, run_epoch(parallel3, epoch));
  }
  EXPECT_NE(run_epoch(serial, 0), run_epoch(serial, 1));  // augmentation differs per epoch
}

TEST(DataLoaderTest, EarlyStopAndErrors) {
  auto ds = indexed_dataset(50);
  DataLoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 2;
  {
    DataLoader loader(ds, Compose(), o);
    Batch b;
    loader.begin_epoch(0);
    ASSERT_TRUE(loader.next(b));
    // Restart mid-epoch, then read a whole epoch: complete and in order.
    std::vector<std::vector<int64_t>> idx;
    run_epoch(loader, 3, &idx);
    ASSERT_EQ(idx.size(), 25u);
    EXPECT_EQ(idx[24], (std::vector<int64_t>{48, 49}));
    loader.begin_epoch(4);
    ASSERT_TRUE(loader.next(b));
  }  // destroyed mid-epoch: threads joined
  { DataLoader never_used(ds, Compose(), o); }
  // Mixed sizes in one batch: InputError, from the calling thread and from workers.
  auto mixed = indexed_dataset(5, 4, 4);
  Bytes p = pattern(0, 3, 4);
  mixed->add(p.data(), 3, 4, 0, "odd.png");
  for (int workers : {0, 2}) {
    o.num_workers = workers;
    o.batch_size = 3;
    DataLoader loader(mixed, Compose(), o);
    loader.begin_epoch(0);
    Batch b;
    ASSERT_TRUE(loader.next(b));
    expect_input_error([&] { loader.next(b); }, {"odd.png", "3x4", "4x4"});
    if (workers > 0) {
      EXPECT_FALSE(loader.next(b));  // the epoch ended with the error
    }
  }
  // Batch size 1 accepts any sizes; a crop that does not fit fails in the worker.
  o.num_workers = 2;
  o.batch_size = 1;
  DataLoader ones(mixed, Compose(), o);
  EXPECT_EQ(run_epoch(ones, 0).size(), 6u);
  DataLoader too_big(mixed, Compose({RandomCrop{5, 0}, ToTensor{}}), o);
  too_big.begin_epoch(0);
  Batch b;
  expect_input_error([&] { too_big.next(b); }, {"RandomCrop"});
}

// ---- download ---------------------------------------------------------------------------------

// Serves fixed responses on 127.0.0.1 (ephemeral port) from a thread, one request a connection.
class HttpServer {
 public:
  struct Response {
    int status = 200;
    std::string body;
    std::string location;  // for redirects
  };
  explicit HttpServer(std::map<std::string, Response> routes) : routes_(std::move(routes)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd_, 8) != 0)
      throw std::runtime_error("test server: bind/listen failed");
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~HttpServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string req;
      char buf[1024];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      std::string path;
      size_t a = req.find(' '), b = req.find(' ', a + 1);
      if (a != std::string::npos && b != std::string::npos) path = req.substr(a + 1, b - a - 1);
      Response r{404, "not found", ""};
      if (auto it = routes_.find(path); it != routes_.end()) r = it->second;
      std::string head = "HTTP/1.1 " + std::to_string(r.status) +
                         (r.status == 200   ? " OK"
                          : r.status == 302 ? " Found"
                                            : " Not Found") +
                         "\r\nContent-Length: " + std::to_string(r.body.size()) +
                         "\r\nConnection: close\r\n";
      if (!r.location.empty()) head += "Location: " + r.location + "\r\n";
      std::string resp = head + "\r\n" + r.body;
      size_t sent = 0;
      while (sent < resp.size()) {
        ssize_t n = ::send(c, resp.data() + sent, resp.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      ::close(c);
    }
  }

  std::map<std::string, Response> routes_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(DataDownload, LocalServer) {
  ::setenv("no_proxy", "*", 1);
  ::setenv("NO_PROXY", "*", 1);
  TempDir tmp("data");
  // A small fake archive and its MD5 (computed by file_md5 on a copy).
  write_archive(tmp.path() / "fake.tar.gz", cifar_tree(false), true);
  Bytes archive = read_file(tmp.path() / "fake.tar.gz");
  const std::string md5 = file_md5(tmp.str("fake.tar.gz"));
  ASSERT_EQ(md5.size(), 32u);
  write_file(tmp.path() / "abc.txt", to_bytes("abc"));
  EXPECT_EQ(file_md5(tmp.str("abc.txt")), "900150983cd24fb0d6963f7d28e17f72");

  const std::string body(archive.begin(), archive.end());
  HttpServer server({{"/cifar.tar.gz", {200, body, ""}}, {"/moved", {302, "", "/cifar.tar.gz"}}});
  // Success, through a redirect; the result loads as cifar10.
  const fs::path dir = tmp.path() / "dl";
  std::string got = download_cifar10(dir.string(), server.url("/moved"), md5);
  EXPECT_EQ(got, (dir / "cifar-10-binary.tar.gz").string());
  EXPECT_EQ(read_file(got), archive);
  EXPECT_EQ(test_util::files_in(dir), std::vector<std::string>{"cifar-10-binary.tar.gz"});
  EXPECT_EQ(open_dataset("cifar10", dir.string(), "train")->size(), 15);
  // Already there with the right MD5: nothing fetched (the URL is unreachable).
  EXPECT_EQ(download_cifar10(dir.string(), server.url("/missing"), md5), got);

  // 404, wrong MD5, connection refused: InputError, nothing left behind.
  const fs::path dir2 = tmp.path() / "dl2";
  expect_input_error([&] { download_cifar10(dir2.string(), server.url("/missing"), md5); },
                     {"cannot download", "/missing", "404", dir2.string()});
  EXPECT_TRUE(test_util::files_in(dir2).empty());
  expect_input_error(
      [&] { download_cifar10(dir2.string(), server.url("/cifar.tar.gz"), std::string(32, '0')); },
      {"MD5", md5, dir2.string()});
  EXPECT_TRUE(test_util::files_in(dir2).empty());
  int port = 0;
  {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    ::close(s);  // nothing listens there now
  }
  const std::string refused = "http://127.0.0.1:" + std::to_string(port) + "/x.tar.gz";
  expect_input_error([&] { download_cifar10(dir2.string(), refused, md5, 5, 5); },
                     {"cannot download", refused, "cifar-10-batches-bin"});
  EXPECT_TRUE(test_util::files_in(dir2).empty());
}

}  // namespace

// ImageNet's layout: synset folders named by LOC_synset_mapping.txt beside train/ (a name used
// twice keeps its folder); a file that leaves a folder unnamed names none.
TEST(DataImageFolder, ClassNamesFromASynsetMapping) {
  TempDir tmp("data");
  for (const char* d : {"n01", "n02", "n03"}) {
    fs::create_directories(tmp.path() / "train" / d);
    std::ofstream(tmp.path() / "train" / d / "a.png", std::ios::binary)
        << std::string(reinterpret_cast<const char*>(
                           encode_png(Bytes(6 * 5, 7), 6, 5, PNG_COLOR_TYPE_GRAY, 8).data()),
                       encode_png(Bytes(6 * 5, 7), 6, 5, PNG_COLOR_TYPE_GRAY, 8).size());
  }
  std::ofstream(tmp.path() / "LOC_synset_mapping.txt")
      << "n01 tench, Tinca tinca\nn02 crane\r\nn03 crane\nn99 unused\n";
  EXPECT_EQ(load_image_folder(tmp.str(), "train")->classes(),
            (std::vector<std::string>{"tench, Tinca tinca", "crane (n02)", "crane (n03)"}));
  std::ofstream(tmp.path() / "LOC_synset_mapping.txt") << "n01 tench\n";
  EXPECT_EQ(load_image_folder(tmp.str(), "train")->classes(),
            (std::vector<std::string>{"n01", "n02", "n03"}));
}
