// EXIF orientation: hpcnet decodes a picture upright, as Pillow's ImageOps.exif_transpose, OpenCV's
// imread and Ultralytics show it. The fixtures (tests/fixtures/exif/, written by make_exif.py with
// Pillow 13) store one 40x24 picture with each orientation 1..8 and Pillow's upright pixels; the
// tests compare hpcnet's decoders, its DCT-scaled decode, its dataset loaders (YOLO, COCO,
// segmentation, image folders: the labels fall on the upright pixels) and `hpcnet predict` with
// them, and the EXIF reader with Pillow's reading of hand-made blocks (exif_cases.json).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/train.h"
#include "src/data/internal.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

const fs::path kFix = fs::path(HPCNET_SOURCE_DIR) / "tests" / "fixtures" / "exif";
constexpr int kW = 40, kH = 24;  // the stored picture

std::vector<uint8_t> bytes_of(const fs::path& p) {
  const std::string s = read_file(p);
  EXPECT_FALSE(s.empty()) << "missing fixture " << p;
  return {s.begin(), s.end()};
}

data::Image decode(const fs::path& p, int64_t min_side = 0) {
  return data::read_image_file(p.string(), min_side);
}

// The largest difference of two images' samples; -1 when their sizes differ.
int max_diff(const data::Image& a, const data::Image& b) {
  if (a.height != b.height || a.width != b.width || a.pixels.size() != b.pixels.size()) return -1;
  int m = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i)
    m = std::max(m, std::abs(int{a.pixels[i]} - int{b.pixels[i]}));
  return m;
}

// Orientation 6 written out independently of hpcnet: turned 90 degrees clockwise, out(y, x) =
// in(H - 1 - x, y).
data::Image turn_clockwise(const data::Image& in) {
  data::Image out;
  out.height = in.width;
  out.width = in.height;
  out.pixels.resize(in.pixels.size());
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x)
      for (int c = 0; c < 3; ++c)
        out.pixels[(y * out.width + x) * 3 + c] =
            in.pixels[((in.height - 1 - x) * in.width + y) * 3 + c];
  return out;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

// The reader against Pillow on 97 hand-made EXIF blocks (exif_cases.json, from make_exif.py): both
// byte orders and 42 either way round, the APP1 prefix once or twice, every value type (integers,
// floats and ratios equal to 1..8 count; bytes, text, fractions and NaN do not), counts of 0, 2
// and 3 (the first value decides), values at offsets, a first entry that decides over a later
// one, offsets and counts past the end (which end Pillow's scan, or skip the entry), IFD0 past
// the end or inside the header, 65535 entries claimed, and every truncation of a camera's block.
// Where Pillow raises (not TIFF, cut inside the header) hpcnet keeps the picture as stored (1).
TEST(Exif, OrientationOfHandMadeBlocksMatchesPillow) {
  const nlohmann::json j = nlohmann::json::parse(read_file(kFix / "exif_cases.json"));
  ASSERT_GE(j.at("cases").size(), 90u);
  for (const auto& c : j.at("cases")) {
    const std::vector<uint8_t> b = from_hex(c.at("exif").get<std::string>());
    EXPECT_EQ(data::detail::exif_orientation(b.data(), b.size()), c.at("orientation").get<int>())
        << c.at("name").get<std::string>() << ": " << c.at("exif").get<std::string>();
  }
}

// Every orientation of the JPEG fixture decodes to Pillow's exif_transpose of it: the upright size
// (24x40 for 5..8) and its pixels (the same libjpeg-turbo IDCT: equal, within 1 for safety).
TEST(Exif, JpegOrientationsMatchPillow) {
  for (int k = 1; k <= 8; ++k) {
    const data::Image got = decode(kFix / ("o" + std::to_string(k) + ".jpg"));
    const data::Image want = decode(kFix / ("up" + std::to_string(k) + ".png"));
    EXPECT_EQ(got.width, k <= 4 ? kW : kH) << k;
    EXPECT_EQ(got.height, k <= 4 ? kH : kW) << k;
    const int d = max_diff(got, want);
    EXPECT_GE(d, 0) << "orientation " << k << ": size differs";
    EXPECT_LE(d, 1) << "orientation " << k;
  }
  // The per-thread decoder of the loaders, reused from image to image, agrees.
  data::detail::ImageDecoder dec;
  for (int k : {6, 1, 8, 3}) {
    const std::vector<uint8_t> b = bytes_of(kFix / ("o" + std::to_string(k) + ".jpg"));
    data::Image im;
    ASSERT_EQ(dec.decode(b.data(), b.size(), im), "");
    EXPECT_EQ(max_diff(im, decode(kFix / ("o" + std::to_string(k) + ".jpg"))), 0) << k;
  }
}

// PNG: Pillow applies an eXIf chunk's orientation, before the image data or after it; so does
// hpcnet (lossless: equal pixels). A class mask with an eXIf chunk turns as its image would.
TEST(Exif, PngExifChunkBeforeAndAfterTheImageData) {
  data::Image got = decode(kFix / "o6.png");
  EXPECT_EQ(got.width, kH);
  EXPECT_EQ(got.height, kW);
  EXPECT_EQ(max_diff(got, decode(kFix / "up6_png.png")), 0);
  got = decode(kFix / "o8_late.png");
  EXPECT_EQ(got.width, kH);
  EXPECT_EQ(max_diff(got, decode(kFix / "up8_late.png")), 0);

  data::detail::ImageDecoder dec;
  std::vector<uint8_t> mask, want;
  int64_t h = 0, w = 0, wh = 0, ww = 0;
  std::vector<uint8_t> b = bytes_of(kFix / "mask_o6.png");
  ASSERT_EQ(dec.decode_mask(b.data(), b.size(), mask, &h, &w), "");
  b = bytes_of(kFix / "up_mask6.png");
  ASSERT_EQ(dec.decode_mask(b.data(), b.size(), want, &wh, &ww), "");
  EXPECT_EQ(h, kW);
  EXPECT_EQ(w, kH);
  EXPECT_EQ(wh, kW);
  EXPECT_EQ(mask, want);
}

// A reduced DCT decode (the classification loaders' set_decode_min_side) is turned too: the scale
// is chosen on the shorter side, which a turn keeps, and the result is the reduced picture turned.
TEST(Exif, DctScaledDecodeIsTurnedToo) {
  // The test's own turn agrees with Pillow at full size.
  EXPECT_LE(max_diff(turn_clockwise(decode(kFix / "o1.jpg")), decode(kFix / "up6.png")), 1);
  for (int64_t min_side : {12, 6, 3}) {  // 1/2, 1/4, 1/8 of the 24-pixel shorter side
    const data::Image got = decode(kFix / "o6.jpg", min_side);
    const data::Image plain = decode(kFix / "o1.jpg", min_side);
    EXPECT_EQ(got.width, min_side) << min_side;
    EXPECT_EQ(got.height, min_side * kW / kH) << min_side;
    EXPECT_EQ(max_diff(got, turn_clockwise(plain)), 0) << min_side;
  }
}

// Training reads the upright pixels with the labels on them: a YOLO row in the upright picture's
// normalised coordinates lands on its pixels; a COCO image whose JSON gives the upright size
// passes the size check; a segmentation mask of the upright size fits; an image folder's reduced
// decode is upright.
TEST(Exif, DatasetsReadTheUprightPictureAndItsLabels) {
  TempDir tmp("exif_data");
  const data::Image up = decode(kFix / "up6.png");  // 24 wide, 40 high
  // YOLO: one box over the upright picture's top-left quarter.
  const fs::path y = tmp / "yolo";
  fs::create_directories(y / "images" / "train");
  fs::create_directories(y / "labels" / "train");
  fs::copy_file(kFix / "o6.jpg", y / "images" / "train" / "a.jpg");
  write_file(y / "labels" / "train" / "a.txt", "0 0.25 0.25 0.5 0.5\n");
  write_file(y / "data.yaml", "path: .\ntrain: images/train\nval: images/train\nnames: [thing]\n");
  data::DetectionData d = data::load_detection_dataset((y / "data.yaml").string(), "train");
  data::Example ex = item(*d.dataset, 0);
  EXPECT_EQ(ex.width, kH);
  EXPECT_EQ(ex.height, kW);
  ASSERT_EQ(ex.num_boxes, 1);
  EXPECT_FLOAT_EQ(ex.boxes[0].x2, 12.f);  // half of 24
  EXPECT_FLOAT_EQ(ex.boxes[0].y2, 20.f);  // half of 40
  data::Image im{ex.height, ex.width,
                 std::vector<uint8_t>(ex.pixels, ex.pixels + ex.height * ex.width * 3)};
  EXPECT_LE(max_diff(im, up), 1);

  // COCO: the JSON's width and height are the upright ones (as annotation tools show the image).
  const fs::path c = tmp / "coco";
  fs::create_directories(c / "annotations");
  fs::create_directories(c / "images" / "train");
  fs::copy_file(kFix / "o6.jpg", c / "images" / "train" / "a.jpg");
  write_file(c / "annotations" / "instances_train.json",
             R"({"images": [{"id": 1, "file_name": "a.jpg", "width": 24, "height": 40}],
                 "annotations": [{"id": 1, "image_id": 1, "category_id": 1,
                                  "bbox": [2, 30, 20, 9], "area": 180, "iscrowd": 0}],
                 "categories": [{"id": 1, "name": "thing"}]})");
  d = data::load_detection_dataset((c / "annotations" / "instances_train.json").string(), "train");
  ex = item(*d.dataset, 0);  // no "decodes to 40x24" refusal
  EXPECT_EQ(ex.width, kH);
  EXPECT_EQ(ex.height, kW);
  ASSERT_EQ(ex.num_boxes, 1);
  EXPECT_FLOAT_EQ(ex.boxes[0].y2, 39.f);

  // Segmentation: the mask was drawn on the upright picture (24x40).
  const fs::path s = tmp / "seg";
  fs::create_directories(s / "images" / "train");
  fs::create_directories(s / "masks" / "train");
  fs::copy_file(kFix / "o6.jpg", s / "images" / "train" / "a.jpg");
  std::vector<uint8_t> mask(static_cast<size_t>(kH * kW), 0);
  for (int x = 0; x < kH; ++x) mask[static_cast<size_t>(x)] = 1;  // the top row
  const std::vector<uint8_t> png =
      data::encode_png_index(mask.data(), kW, kH, data::class_palette(2));
  write_file(s / "masks" / "train" / "a.png", std::string(png.begin(), png.end()));
  write_file(s / "classes.txt", "background\nsky\n");
  auto seg = data::load_segmentation(s.string(), "train");
  ex = item(*seg, 0);  // no "masks must have their image's size" refusal
  EXPECT_EQ(ex.width, kH);
  EXPECT_EQ(ex.height, kW);
  EXPECT_EQ(ex.mask[0], 1);

  // An image folder decoded at a reduced scale: upright, 12x20.
  const fs::path f = tmp / "folder";
  fs::create_directories(f / "train" / "thing");
  fs::copy_file(kFix / "o6.jpg", f / "train" / "thing" / "a.jpg");
  auto folder = data::load_image_folder(f.string(), "train");
  data::set_decode_min_side(*folder, 12);
  ex = item(*folder, 0);
  EXPECT_EQ(ex.width, 12);
  EXPECT_EQ(ex.height, 20);
}

// predict reads the picture upright: the drawn picture has the upright size and pixels (at
// --conf 1 nothing is drawn on it), and the YOLO rows it writes are relative to that size.
TEST(ExifCli, PredictDrawsOnTheUprightPicture) {
  TempDir tmp("exif_predict");
  save_fresh_model(tmp / "m.safetensors", "yolov8n", "detect", {"a", "b"}, 64, 5);
  fs::copy_file(kFix / "o6.jpg", tmp / "photo.jpg");
  RunResult r = run_hpcnet({"predict", "--weights", (tmp / "m.safetensors").string(), "--threads",
                            "1", "--conf", "1", "--save", (tmp / "pred").string(), "photo.jpg"},
                           tmp.path());
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const data::Image pic = decode(tmp / "pred" / "photo_boxes.png");
  EXPECT_EQ(pic.width, kH);
  EXPECT_EQ(pic.height, kW);
  EXPECT_LE(max_diff(pic, decode(kFix / "up6.png")), 1);
}
