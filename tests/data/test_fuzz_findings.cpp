// Regressions for what the fuzz targets (fuzz/, scripts/fuzz.sh; issue 17) found, one test per
// finding, each input crafted here; and the from-memory entry points those targets call, checked
// to agree with the file readers they stand for.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/io.h"
#include "src/data/internal.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// A w x h RGB JPEG of the given quality in memory; optimize: Huffman tables of its own.
std::string jpeg(int w, int h, int quality, bool optimize, uint64_t seed) {
  const std::vector<uint8_t> px = noisy_pixels(w, h, 90, 140, 200, seed, 2, 60);
  return jpeg_bytes(w, h, px.data(), {.quality = quality, .optimize = optimize});
}

// The JPEG without its marker segments of type `marker` before the scan (0xDB: quantization
// tables, 0xC4: Huffman tables).
std::string without_segments(const std::string& jpg, unsigned char marker) {
  std::string out = jpg.substr(0, 2);  // SOI
  size_t i = 2;
  while (i + 4 <= jpg.size() && static_cast<unsigned char>(jpg[i]) == 0xFF) {
    const unsigned char m = static_cast<unsigned char>(jpg[i + 1]);
    if (m == 0xDA) break;  // start of scan: the rest is entropy-coded data
    const size_t len =
        (static_cast<unsigned char>(jpg[i + 2]) << 8) | static_cast<unsigned char>(jpg[i + 3]);
    if (m != marker) out += jpg.substr(i, 2 + len);
    i += 2 + len;
  }
  return out + jpg.substr(i);
}

// What decoding bytes gives: "WxH" and the pixels' sum, or the error.
std::string outcome(const std::string& err, const data::Image& img) {
  if (!err.empty()) return "error: " + err;
  uint64_t sum = 0;
  for (uint8_t v : img.pixels) sum += v;
  return std::to_string(img.width) + "x" + std::to_string(img.height) + " sum " +
         std::to_string(sum);
}

std::string fresh_outcome(const std::string& bytes) {
  data::detail::ImageDecoder dec;
  data::Image img;
  const std::string err =
      dec.decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), img);
  return outcome(err, img);
}

}  // namespace

// ---- findings -----------------------------------------------------------------------------------

// fuzz_image: a JPEG lacking its own tables was decoded, by the decoder each loader thread reuses,
// with the tables of the JPEG that thread decoded before (libjpeg keeps them for abbreviated
// streams): without quantization tables it loaded (a fresh decoder refuses it), without Huffman
// tables it got other pixels than a fresh decoder's (which uses the standard tables). So an image
// folder's pixels depended on the order its images were decoded in. Now every image gets a fresh
// decompressor.
TEST(FuzzFindings, ReusedJpegDecoderUsesNoTablesOfEarlierImages) {
  const std::string before = jpeg(16, 16, 20, true, 1);  // own quantization and Huffman tables
  for (const auto& [what, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"no quantization tables", without_segments(jpeg(16, 16, 95, false, 2), 0xDB)},
           {"no Huffman tables", without_segments(jpeg(16, 16, 95, true, 3), 0xC4)}}) {
    data::detail::ImageDecoder reused;
    data::Image img;
    ASSERT_EQ(reused.decode(reinterpret_cast<const uint8_t*>(before.data()), before.size(), img),
              "");
    const std::string err =
        reused.decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), img);
    EXPECT_EQ(outcome(err, img), fresh_outcome(bytes)) << what;
  }

  // Through a loader: a folder's second JPEG, lacking quantization tables, is refused by name
  // (it loaded with the first one's tables before).
  TempDir tmp("fuzz_jpeg_tables");
  fs::create_directories(tmp / "train" / "cat");
  write_file(tmp / "train" / "cat" / "a.jpg", before);
  write_file(tmp / "train" / "cat" / "b.jpg", without_segments(jpeg(16, 16, 95, false, 2), 0xDB));
  EXPECT_TRUE(
      input_error([&] { test_util::decode_all(data::load_image_folder(tmp.str(), "train")); },
                  "train/cat/b.jpg: bad JPEG data"));
}

// ---- the fuzz targets' entry points -------------------------------------------------------------

// parse_safetensors reads bytes as load_safetensors reads the file holding them, message included.
TEST(FuzzEntryPoints, ParseSafetensorsAgreesWithLoad) {
  TempDir tmp("fuzz_safetensors");
  const std::string path = tmp.str("w.safetensors");
  save_safetensors(
      path,
      {{"a", Tensor::from_vector({1, 2, 3, 4}, {2, 2})}, {"b", Tensor::from_labels({7, 8, 9})}},
      {{"format", "pt"}});
  const std::string bytes = read_file(path);
  const SafetensorsFile f =
      parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
  const SafetensorsFile g = load_safetensors(path);
  EXPECT_EQ(f.order, g.order);
  EXPECT_EQ(f.metadata, g.metadata);
  EXPECT_EQ(f.path, path);
  for (const std::string& n : g.order) EXPECT_TRUE(same_bytes(f.at(n), g.at(n))) << n;

  const std::string cut = bytes.substr(0, bytes.size() - 3);
  write_file(path, cut);
  const std::string from_file = input_error([&] { load_safetensors(path); });
  EXPECT_NE(from_file.find("truncated"), std::string::npos) << from_file;
  EXPECT_EQ(input_error([&] {
              parse_safetensors(reinterpret_cast<const uint8_t*>(cut.data()), cut.size(), path);
            }),
            from_file);
}

// scan_archive_memory keeps what scan_archive keeps from the same .tar.gz.
TEST(FuzzEntryPoints, ScanArchiveMemoryAgreesWithScanArchive) {
  TempDir tmp("fuzz_archive");
  const std::string path = tmp.str("a.tar.gz");
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_gzip(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const std::string& name : {"./train/cat/a.png", "train/dog/b.jpg", "notes.txt"}) {
    archive_entry* e = archive_entry_new();
    const std::string data = "bytes of " + name;
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK);
    archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  auto want = [](const std::string& p, bool) { return p != "notes.txt"; };
  const std::vector<data::detail::ArchiveEntry> from_file = data::detail::scan_archive(path, want);
  const std::string bytes = read_file(path);
  const std::vector<data::detail::ArchiveEntry> from_memory = data::detail::scan_archive_memory(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, want);
  ASSERT_EQ(from_memory.size(), 2u);
  ASSERT_EQ(from_file.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(from_memory[i].path, from_file[i].path);
    EXPECT_EQ(from_memory[i].data, from_file[i].data);
  }
  EXPECT_EQ(from_memory[0].path, "train/cat/a.png");

  const std::string junk = "not an archive at all, just text";
  EXPECT_TRUE(input_error(
      [&] {
        data::detail::scan_archive_memory(reinterpret_cast<const uint8_t*>(junk.data()),
                                          junk.size(), "junk.tar.gz", want);
      },
      "cannot read archive junk.tar.gz"));
}

// data_yaml_class_names: "background", then the names, from a list or a numbered map.
TEST(FuzzEntryPoints, DataYamlClassNames) {
  using data::detail::data_yaml_class_names;
  const std::vector<std::string> expect = {"background", "sky", "road"};
  EXPECT_EQ(data_yaml_class_names("names:\n  - sky\n  - road\n", "d/data.yaml"), expect);
  EXPECT_EQ(data_yaml_class_names("nc: 2\nnames: {1: road, 0: sky}\n", "d/data.yaml"), expect);
  EXPECT_TRUE(input_error([] { data_yaml_class_names("names: {0: a, 2: b}", "d/data.yaml"); },
                          "segmentation: d/data.yaml: names must be numbered 0, 1, ..."));
  EXPECT_TRUE(input_error([] { data_yaml_class_names("nc: 2\n", "d/data.yaml"); },
                          "segmentation: d/data.yaml has no names"));
  EXPECT_TRUE(input_error([] { data_yaml_class_names("names: [a, [b]]", "d/data.yaml"); },
                          "segmentation: d/data.yaml: "));
  EXPECT_TRUE(input_error([] { data_yaml_class_names("names: [a, b", "d/data.yaml"); },
                          "segmentation: d/data.yaml: "));
}
