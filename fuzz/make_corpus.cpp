// Writes the seed corpora of the fuzz targets: OUT/<target>/<seed>, small valid inputs made here by
// hpcnet's own writers (safetensors, run files, PNG) or by the libraries it reads with (libjpeg,
// libpng, libarchive), so that no binary file is committed. Usage: fuzz_make_corpus OUT
#include <archive.h>
#include <archive_entry.h>
#include <png.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

// clang-format off
#include <jpeglib.h>  // after <cstdio>: it needs FILE
// clang-format on

#include "hpcnet/data.h"
#include "hpcnet/video.h"
#include "hpcnet/io.h"
#include "src/train/checkpoint.h"

namespace fs = std::filesystem;
using namespace hpcnet;

namespace {

fs::path g_out;

std::string bytes_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out / target);
  std::ofstream f(g_out / target / name, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + (g_out / target / name).string());
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// w x h RGB pixels, a gradient.
std::vector<uint8_t> pixels(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37 + 11);
  return px;
}

// An EXIF block (TIFF header, IFD0 with Make and Orientation), with the "Exif\0\0" of a JPEG's
// APP1 if asked, in either byte order.
std::string exif_block(int orientation, bool big_endian, bool app1) {
  std::string s = app1 ? std::string("Exif\0\0", 6) : std::string();
  auto u16 = [&](unsigned v) {
    const char b[2] = {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)};
    s += big_endian ? std::string{b[1], b[0]} : std::string{b[0], b[1]};
  };
  auto u32 = [&](uint32_t v) {
    u16(big_endian ? v >> 16 : v & 0xffff);
    u16(big_endian ? v & 0xffff : v >> 16);
  };
  s += big_endian ? "MM" : "II";
  u16(42);
  u32(8);       // IFD0 right after the header
  u16(2);       // entries
  u16(0x010f);  // Make: ASCII, 4 bytes, "cam" in the entry
  u16(2);
  u32(4);
  s += std::string("cam\0", 4);
  u16(0x0112);  // Orientation: SHORT, 1, the value in the entry's first 2 bytes
  u16(3);
  u32(1);
  u16(static_cast<unsigned>(orientation));
  u16(0);
  u32(0);  // no next IFD
  return s;
}

std::string jpeg(int w, int h, bool gray, bool progressive, const std::string& app1 = "") {
  const std::vector<uint8_t> rgb = pixels(w, h);
  std::vector<uint8_t> px = rgb;
  if (gray) px.resize(static_cast<size_t>(w * h));
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = gray ? 1 : 3;
  cinfo.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  if (!app1.empty())
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, reinterpret_cast<const JOCTET*>(app1.data()),
                      static_cast<unsigned>(app1.size()));
  const size_t stride = static_cast<size_t>(w) * cinfo.input_components;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = &px[cinfo.next_scanline * stride];
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

void png_append(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), n);
}

// A w x h PNG of any colour type and bit depth (pixel values from a pattern), Adam7 if asked, with
// an eXIf chunk if exif is not empty.
std::string png(int w, int h, int color, int depth, bool interlace, std::string exif = "") {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) throw std::runtime_error("libpng write failed");
  png_set_write_fn(png, &out, png_append, nullptr);
  png_set_IHDR(png, info, w, h, depth, color, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (color == PNG_COLOR_TYPE_PALETTE) {
    png_color palette[4] = {{0, 0, 0}, {128, 0, 0}, {0, 128, 0}, {128, 128, 0}};
    png_set_PLTE(png, info, palette, 4);
  }
  if (!exif.empty())
    png_set_eXIf_1(png, info, static_cast<png_uint_32>(exif.size()),
                   reinterpret_cast<png_bytep>(exif.data()));
  png_write_info(png, info);
  const int channels = color == PNG_COLOR_TYPE_RGB          ? 3
                       : color == PNG_COLOR_TYPE_RGB_ALPHA  ? 4
                       : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                            : 1;
  const size_t row_bytes = (static_cast<size_t>(w) * channels * depth + 7) / 8;
  std::vector<std::vector<uint8_t>> rows(static_cast<size_t>(h), std::vector<uint8_t>(row_bytes));
  std::vector<png_bytep> row_ptrs;
  for (int y = 0; y < h; ++y) {
    for (size_t x = 0; x < row_bytes; ++x)
      rows[y][x] = depth < 8 ? static_cast<uint8_t>((x + y) % 2 == 0 ? 0x1b : 0x01)  // 0..3
                   : color == PNG_COLOR_TYPE_PALETTE ? static_cast<uint8_t>((x + y) % 4)
                                                     : static_cast<uint8_t>(x * 19 + y * 7);
    row_ptrs.push_back(rows[y].data());
  }
  png_write_image(png, row_ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// n CIFAR-10 records: label byte, then 3072 bytes of R, G, B planes.
std::string cifar_records(int n) {
  std::string s;
  for (int r = 0; r < n; ++r) {
    s.push_back(static_cast<char>(r % 10));
    for (int i = 0; i < 3072; ++i) s.push_back(static_cast<char>((i * 7 + r * 31) & 0xff));
  }
  return s;
}

struct Member {
  std::string path;
  std::string data;  // ignored for a folder
  bool dir = false;
};

// A tar in the format set_format sets (archive_write_set_format_pax_restricted, _ustar or _gnutar),
// gzip-compressed if asked, in memory.
std::string tar(const std::vector<Member>& members, bool gzip, int (*set_format)(archive*)) {
  std::vector<char> buf(1 << 20);
  size_t used = 0;
  archive* a = archive_write_new();
  set_format(a);
  if (gzip) archive_write_add_filter_gzip(a);
  archive_write_set_bytes_in_last_block(a, 1);  // no padding to 10 KiB
  if (archive_write_open_memory(a, buf.data(), buf.size(), &used) != ARCHIVE_OK)
    throw std::runtime_error("libarchive: cannot open");
  for (const Member& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.path.c_str());
    archive_entry_set_filetype(e, m.dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, m.dir ? 0755 : 0644);
    archive_entry_set_size(e, m.dir ? 0 : static_cast<la_int64_t>(m.data.size()));
    if (archive_write_header(a, e) != ARCHIVE_OK)
      throw std::runtime_error(std::string("libarchive: ") + archive_error_string(a));
    if (!m.dir) archive_write_data(a, m.data.data(), m.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buf.data(), used);
}

Tensor tensor(const Shape& shape, DType dtype) {
  Tensor t = Tensor::zeros(shape, dtype);
  if (dtype == DType::kFloat32)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.25f * static_cast<float>(i);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_corpus OUT\n";
    return 2;
  }
  g_out = argv[1];
  const fs::path tmp = g_out / ".tmp";
  fs::create_directories(tmp);

  // safetensors: tensors of several dtypes with metadata; metadata alone; an empty tensor.
  save_safetensors((tmp / "a").string(),
                   {{"conv1.weight", tensor({2, 2}, DType::kFloat32)},
                    {"steps", tensor({3}, DType::kInt64)},
                    {"half", tensor({2}, DType::kBFloat16)}},
                   {{"format", "pt"}, {"note", "x"}});
  seed("safetensors", "tensors", file_bytes(tmp / "a"));
  save_safetensors((tmp / "b").string(), {}, {{"format", "pt"}});
  seed("safetensors", "metadata_only", file_bytes(tmp / "b"));
  save_safetensors((tmp / "c").string(), {{"empty", tensor({0, 3}, DType::kFloat32)},
                                          {"u8", tensor({4}, DType::kUInt8)}});
  seed("safetensors", "empty_tensor", file_bytes(tmp / "c"));

  // run files: a model file and a checkpoint saved inside an epoch (every metadata key).
  train::ModelMeta meta;
  meta.model = "lenet";
  meta.classes = {"cat", "dog"};
  meta.imgsz = 32;
  meta.val_split = 10;
  const nn::NamedTensors model = {{"fc.weight", tensor({2, 2}, DType::kFloat32)},
                                  {"fc.bias", tensor({2}, DType::kFloat32)}};
  train::write_model_file((tmp / "m").string(), meta, model);
  seed("run_file", "model", file_bytes(tmp / "m"));
  seed("safetensors", "model", file_bytes(tmp / "m"));
  train::TrainState st;
  st.epochs_done = 1;
  st.steps = 20;
  st.epoch_step = 5;
  st.epoch_loss = 1.5;
  st.running_loss = 0.25;
  st.best = 0.5;
  st.rng = {1, 2, 3, 4};
  st.recipe = {{"model", "lenet"}, {"epochs", 2}, {"lr", 0.001}};
  st.world_size = 2;
  train::write_checkpoint((tmp / "k").string(), meta, model,
                          {{"fc.weight.momentum_buffer", tensor({2, 2}, DType::kFloat32)}},
                          {{"ema.fc.weight", tensor({2, 2}, DType::kFloat32)}}, st);
  seed("run_file", "checkpoint", file_bytes(tmp / "k"));

  // CIFAR-10: byte 0 = length of batches.meta.txt (0: none), the meta file, then the batch.
  const std::string names =
      "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
  seed("cifar10", "two_records", std::string(1, '\0') + cifar_records(2));
  seed("cifar10", "with_meta",
       std::string(1, static_cast<char>(names.size())) + names + cifar_records(2));

  // Images: 4x4 JPEG (baseline, progressive, gray) and PNG (RGB, palette, gray 1-bit, gray +
  // alpha, 16-bit RGBA interlaced).
  const std::vector<uint8_t> px = pixels(4, 4);
  seed("image", "rgb.jpg", jpeg(4, 4, false, false));
  seed("image", "progressive.jpg", jpeg(4, 4, false, true));
  seed("image", "gray.jpg", jpeg(4, 4, true, false));
  seed("image", "rgb.png", bytes_of(data::encode_png_rgb(px.data(), 4, 4)));
  seed("image", "palette.png", png(4, 4, PNG_COLOR_TYPE_PALETTE, 8, false));
  seed("image", "gray1.png", png(4, 4, PNG_COLOR_TYPE_GRAY, 1, false));
  seed("image", "gray_alpha.png", png(4, 4, PNG_COLOR_TYPE_GRAY_ALPHA, 8, false));
  seed("image", "rgba16_adam7.png", png(4, 4, PNG_COLOR_TYPE_RGB_ALPHA, 16, true));
  // With EXIF orientations (turned when decoded): a JPEG's APP1, a PNG's eXIf chunk.
  seed("image", "exif6.jpg", jpeg(4, 2, false, false, exif_block(6, false, true)));
  seed("image", "exif3_mm.jpg", jpeg(2, 4, false, true, exif_block(3, true, true)));
  seed("image", "exif8.png", png(4, 2, PNG_COLOR_TYPE_RGB, 8, false, exif_block(8, false, false)));
  // EXIF blocks alone: both byte orders, with and without the APP1 prefix.
  seed("exif", "ii6", exif_block(6, false, false));
  seed("exif", "mm5_app1", exif_block(5, true, true));
  seed("exif", "ii8_app1", exif_block(8, false, true));

  // Masks: palette (hpcnet's writer), 8-bit gray, 2-bit palette, interlaced gray + alpha.
  const std::vector<uint8_t> index = {0, 1, 2, 255, 1, 1, 0, 0, 2, 2, 2, 2, 0, 1, 255, 0};
  seed("mask", "palette.png",
       bytes_of(data::encode_png_index(index.data(), 4, 4, data::class_palette(256))));
  seed("mask", "gray8.png", png(4, 4, PNG_COLOR_TYPE_GRAY, 8, false));
  seed("mask", "palette2.png", png(4, 4, PNG_COLOR_TYPE_PALETTE, 2, false));
  seed("mask", "gray_alpha_adam7.png", png(4, 4, PNG_COLOR_TYPE_GRAY_ALPHA, 8, true));
  seed("mask", "rgb.png", bytes_of(data::encode_png_rgb(px.data(), 4, 4)));
  seed("mask", "gray8_exif7.png",
       png(4, 2, PNG_COLOR_TYPE_GRAY, 8, false, exif_block(7, true, false)));

  // Archives: an image folder and a CIFAR-10 test batch, as .tar.gz (pax) and .tar (ustar).
  const std::vector<Member> members = {
      {"./train/", "", true},
      {"./train/cat/a.png", bytes_of(data::encode_png_rgb(px.data(), 4, 4)), false},
      {"./train/dog/b.jpg", jpeg(4, 4, false, false), false},
      {"cifar-10-batches-bin/test_batch.bin", cifar_records(2), false},
      {"cifar-10-batches-bin/batches.meta.txt", names, false}};
  const auto pax = archive_write_set_format_pax_restricted;
  const auto ustar = archive_write_set_format_ustar;
  seed("archive", "mixed.tar.gz", tar(members, true, pax));
  seed("archive", "image_folder.tar", tar({members[0], members[1], members[2]}, false, ustar));
  seed("archive", "cifar.tar.gz", tar({members[3]}, true, ustar));

  // Uncompressed tars for the index: ustar (a long path split into prefix and name), GNU (an 'L'
  // long name) and pax (an 'x' header: a path over 255 bytes).
  const std::string deep = "deep/" + std::string(120, 'd') + "/";
  seed("tar_index", "ustar.tar",
       tar({members[0], members[1], {deep + "c.txt", "c", false}, members[4]}, false, ustar));
  seed("tar_index", "gnu_long_name.tar",
       tar({members[0], {deep + std::string(80, 'n') + ".bin", names, false}, members[2]}, false,
           archive_write_set_format_gnutar));
  seed("tar_index", "pax_long_path.tar",
       tar({{deep + std::string(200, 'p') + "/x.bin", cifar_records(1), false}, members[1]}, false,
           pax));

  // Videos: four 16x16 frames in each container the writer makes (H.264 and MPEG-4).
  for (const char* name : {"h264.mp4", "h264.mkv", "mpeg4.avi"}) {
    const fs::path file = tmp / name;
    {
      data::VideoWriter writer(file.string(), 16, 16, 10.0);
      data::Image frame{16, 16, std::vector<uint8_t>(16 * 16 * 3)};
      for (int k = 0; k < 4; ++k) {
        for (size_t i = 0; i < frame.pixels.size(); ++i)
          frame.pixels[i] = static_cast<uint8_t>(i * 7 + static_cast<size_t>(k) * 40);
        writer.write(frame);
      }
      writer.close();
    }
    seed("video", name, file_bytes(file));
  }

  // Config files: train's keys in both spellings, a comment, every JSON value kind allowed.
  seed("config", "recipe.json",
       R"({"#": "a comment", "model": "lenet", "epochs": 2, "batch_size": 4, "lr": 0.001,)"
       R"( "momentum": 0.9, "nesterov": false, "seed": 0, "log-every": 2000})");
  seed("config", "small.json", R"({"model":"resnet20","lr":1e-1})");

  // data.yaml: names as a list, as a numbered map, inline, with other Ultralytics keys.
  seed("data_yaml", "list.yaml", "path: scenes\ntrain: images/train\nnames:\n  - sky\n  - road\n");
  seed("data_yaml", "map.yaml", "names:\n  0: sky\n  1: road\n  2: 'car'\n");
  seed("data_yaml", "inline.yaml", "nc: 2\nnames: [sky, \"road\"]\n");

  // YOLO labels: byte 0 = class count (top bit: the rest is a dataset YAML instead), then the
  // label file: boxes, a polygon, CRLF and a duplicate row, an empty file.
  auto first = [](int byte, const std::string& rest) {
    return std::string(1, static_cast<char>(byte)) + rest;
  };
  seed("yolo_labels", "boxes.txt", first(3, "0 0.5 0.5 0.25 0.5\n2 0.1 0.9 0.2 0.2\n"));
  seed("yolo_labels", "polygon.txt", first(2, "1 0.25 0.25 0.75 0.5 0.5 1\n0 0.5 0.5 1 1\n"));
  seed("yolo_labels", "crlf_duplicate.txt",
       first(10, "9 0.5 0.5 1.0000001 0.1\r\n9 +0.5 5e-1 1 0.1\r\n\r\n4 .5 .5 .1 .1\r\n"));
  seed("yolo_labels", "empty.txt", first(1, ""));
  seed("yolo_labels", "map.yaml",
       first(0x80,
             "path: ../scenes\ntrain: images/train\nval: [images/val, images/extra]\nnc: 2\n"
             "names:\n  0: T-shirt/top\n  1: Trouser\n"));
  seed("yolo_labels", "list.yaml", first(0x81, "train: images/train\nnames: [cat, dog, 'car']\n"));

  // COCO instances JSON: categories out of order with gaps, a crowd and a zero-size box, a float
  // width, an image without annotations.
  seed(
      "coco_json", "instances_val.json",
      R"({"images": [{"id": 2, "file_name": "images/val/000002.jpg", "width": 128, "height": 96},)"
      R"( {"id": 0, "file_name": "a.png", "width": 16.0, "height": 8}],)"
      R"( "annotations": [{"id": 1, "image_id": 2, "category_id": 9, "bbox": [10.5, 4, 30, 20.25],)"
      R"( "area": 607.5, "iscrowd": 0}, {"id": 2, "image_id": 2, "category_id": 1,)"
      R"( "bbox": [0, 0, 128, 96], "iscrowd": 1}, {"id": 3, "image_id": 0, "category_id": 1,)"
      R"( "bbox": [3, 3, 0, 2]}, {"id": 4, "image_id": 0, "category_id": 3, "bbox": [0, 0, 16.5, 8]}],)"
      R"( "categories": [{"id": 9, "name": "car"}, {"id": 1, "name": "person"},)"
      R"( {"id": 3, "name": "dog", "supercategory": "animal"}]})");
  seed(
      "coco_json", "minimal.json",
      R"({"images":[{"id":1,"file_name":"x.jpg","width":4,"height":4}],"categories":[{"id":1,"name":"a"}]})");

  // WebDataset shards (byte 0: 0 a brace pattern, 1 a member list, 2 a tar): ranges, padding and
  // lists; keys with dots in folders, a hidden name, metadata; a shard as webdataset writes one.
  const std::string b0(1, '\0');
  seed("shard_keys", "braces.txt", b0 + "s/train-{000000..000146}.tar");
  seed("shard_keys", "braces_list.txt", b0 + "x{a,b{1,2}}-{08..10..2}-{c..a}.tar");
  seed("shard_keys", "members.txt",
       "\x01a.jpg\na.cls\n__info__\nd.e/b.PNG\nd.e/b.seg.png\nd/.x\nc.jpeg\nc.json\nc.txt");
  seed("shard_keys", "shard.tar",
       "\x02" + tar({{"000.png", bytes_of(data::encode_png_rgb(px.data(), 4, 4)), false},
                     {"000.cls", "1\n", false},
                     {"001.jpg", jpeg(4, 4, false, false), false},
                     {"001.cls", " 7 ", false},
                     {"001.txt", "0 0.5 0.5 0.2 0.2\n", false}},
                    false, pax));

  // Decoded-image cache files (.hpcache, the layout of src/data/cache.cpp's header): two images,
  // the second with a mask; and an empty one.
  {
    auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
    auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
    const std::string a(2 * 3 * 3, '\x40'), b(1 * 2 * 3, '\x80'), bm(1 * 2, '\x01');
    const uint64_t index = 24 + a.size() + b.size() + bm.size();
    seed("cache_index", "two.hpcache",
         std::string("HPCNETC1") + u64(2) + u64(index) + a + b + bm + u64(24) + u32(2) + u32(3) +
             u64(0) + u64(24 + a.size()) + u32(1) + u32(2) + u64(24 + a.size() + b.size()));
    seed("cache_index", "empty.hpcache", std::string("HPCNETC1") + u64(0) + u64(24));
  }

  fs::remove_all(tmp);
  return 0;
}
