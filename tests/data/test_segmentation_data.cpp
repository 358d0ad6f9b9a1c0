// Semantic segmentation data (data::load_segmentation, src/data/segmentation.cpp): the layouts
// (images/ + masks/ with classes.txt or data.yaml, PASCAL VOC; folders and .tar.gz), their
// refusals (an image without a mask, a mask of another size, a class past the count, RGB and JPEG
// masks), mixed sizes batched after a Resize, and has_split inside archives.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/task.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// An h x w RGB image whose pixels encode the seed, as PNG.
std::string sg_image(int64_t h, int64_t w, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7 + seed * 31) % 256);
  return string_of(data::encode_png_rgb(px.data(), h, w));
}

// An h x w mask with values (x + y + seed) % classes (255 on the first row), as a palette PNG.
std::string sg_mask(int64_t h, int64_t w, int seed, int classes) {
  std::vector<uint8_t> m(static_cast<size_t>(h * w));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      m[static_cast<size_t>(y * w + x)] =
          y == 0 ? 255 : static_cast<uint8_t>((x + y + seed) % classes);
  return string_of(data::encode_png_index(m.data(), h, w, data::class_palette(256)));
}

// ROOT/images/<split>/NAME.png + ROOT/masks/<split>/NAME.png for names a, b, c.
void sg_generic(const fs::path& root, const std::string& split, int classes) {
  fs::create_directories(root / "images" / split);
  fs::create_directories(root / "masks" / split);
  int k = 0;
  for (const char* n : {"c", "a", "b"}) {
    write_file(root / "images" / split / (std::string(n) + ".png"), sg_image(8, 6, k));
    write_file(root / "masks" / split / (std::string(n) + ".png"), sg_mask(8, 6, k, classes));
    ++k;
  }
}

std::string sg_error(const std::string& path, const std::string& split = "train") {
  try {
    decode_all(data::load_segmentation(path, split));
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SegmentData, GenericLayoutWithClassesTxt) {
  TempDir d("seg");
  sg_generic(d.path(), "train", 3);
  write_file(d / "classes.txt", "sky\nroad\ncar\n");
  auto ds = data::load_segmentation(d.str(), "train");
  EXPECT_EQ(ds->target_kind(), data::TargetKind::kMask);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"sky", "road", "car"}));
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->item_name(0), "images/train/a.png");  // sorted by name
  EXPECT_EQ(ds->item_name(2), "images/train/c.png");
  data::Example e = test_util::item(*ds, 0);  // a.png was written with seed 1
  ASSERT_NE(e.mask, nullptr);
  EXPECT_EQ(e.height, 8);
  EXPECT_EQ(e.width, 6);
  EXPECT_EQ(e.mask[0], 255);                      // first row ignored
  EXPECT_EQ(e.mask[1 * 6 + 2], (2 + 1 + 1) % 3);  // (x + y + seed) % classes, a palette index
  EXPECT_EQ(e.pixels[0], static_cast<uint8_t>(31));
  EXPECT_TRUE(data::has_split("segmentation", d.str(), "train"));
  EXPECT_FALSE(data::has_split("segmentation", d.str(), "val"));
}

TEST(SegmentData, DataYamlNamesFollowBackground) {
  TempDir d("seg");
  sg_generic(d.path(), "val", 3);
  write_file(d / "data.yaml",
             "path: x\ntrain: images/train\nval: images/val\nnames:\n  0: cat\n  1: dog\n");
  auto ds = data::load_segmentation(d.str(), "val");
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"background", "cat", "dog"}));
  write_file(d / "data.yaml", "names: [cat, dog]\n");
  EXPECT_EQ(data::load_segmentation(d.str(), "val")->classes().size(), 3u);
}

TEST(SegmentData, VocLayoutFromATarGz) {
  TempDir d("seg");
  const fs::path voc = d / "VOCdevkit" / "VOC2012";
  fs::create_directories(voc / "JPEGImages");
  fs::create_directories(voc / "SegmentationClass");
  fs::create_directories(voc / "ImageSets" / "Segmentation");
  // JPEGImages hold JPEGs by name; a PNG's bytes under a .jpg name decode the same (by content).
  for (const char* n : {"2007_000032", "2007_000039", "2007_000063"}) {
    write_file(voc / "JPEGImages" / (std::string(n) + ".jpg"), sg_image(5, 7, 1));
    write_file(voc / "SegmentationClass" / (std::string(n) + ".png"), sg_mask(5, 7, 2, 21));
  }
  write_file(voc / "ImageSets" / "Segmentation" / "train.txt", "2007_000039\n2007_000032\n");
  write_file(voc / "ImageSets" / "Segmentation" / "val.txt", "2007_000063\n");
  auto folder = data::load_segmentation(d.str(), "train");
  ASSERT_EQ(folder->size(), 2);
  EXPECT_EQ(folder->classes().size(), 21u);
  EXPECT_EQ(folder->classes()[15], "person");
  EXPECT_EQ(data::load_segmentation(d.str(), "val")->size(), 1);
  ASSERT_EQ(std::system(("tar -czf " + shell_quote(d.str("voc.tar.gz")) + " -C " +
                         shell_quote(d.str()) + " VOCdevkit")
                            .c_str()),
            0);
  auto tar = data::load_segmentation(d.str("voc.tar.gz"), "train");
  ASSERT_EQ(tar->size(), 2);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(tar->item_name(i), folder->item_name(i));
    data::Example a = test_util::item(*tar, i), b = test_util::item(*folder, i);
    EXPECT_EQ(std::string(a.mask, a.mask + 35), std::string(b.mask, b.mask + 35));
  }
}

TEST(SegmentData, BadPairsAreOneLineNamingTheFile) {
  TempDir d("seg");
  sg_generic(d.path(), "train", 3);
  write_file(d / "classes.txt", "a\nb\nc\n");
  const fs::path m = d / "masks" / "train";
  // A class past the count (4 of 3 classes): rewrite b's mask with values up to 4.
  write_file(m / "b.png", sg_mask(8, 6, 0, 5));
  std::string e = sg_error(d.str());
  EXPECT_NE(e.find("masks/train/b.png"), std::string::npos) << e;
  EXPECT_NE(e.find("class"), std::string::npos) << e;
  // Another size than its image.
  write_file(m / "b.png", sg_mask(6, 8, 0, 3));
  e = sg_error(d.str());
  EXPECT_NE(e.find("b.png"), std::string::npos) << e;
  EXPECT_NE(e.find("size"), std::string::npos) << e;
  // An RGB mask, a JPEG mask, a missing mask.
  write_file(m / "b.png", sg_image(8, 6, 0));
  e = sg_error(d.str());
  EXPECT_NE(e.find("RGB mask"), std::string::npos) << e;
  write_file(m / "b.png", std::string("\xFF\xD8\xFF\xE0junk", 8));
  e = sg_error(d.str());
  EXPECT_NE(e.find("JPEG mask"), std::string::npos) << e;
  fs::remove(m / "b.png");
  e = sg_error(d.str());
  EXPECT_NE(e.find("images/train/b.png has no mask"), std::string::npos) << e;
  for (const std::string& msg : {e}) EXPECT_EQ(msg.find('\n'), std::string::npos);
  // No class names at all.
  write_file(m / "b.png", sg_mask(8, 6, 0, 3));
  fs::remove(d / "classes.txt");
  e = sg_error(d.str());
  EXPECT_NE(e.find("classes.txt"), std::string::npos) << e;
}

// Images of several sizes share a batch once a Resize brings them to one size.
TEST(SegmentData, MixedSizesBatchAfterAResize) {
  TempDir d("segmix");
  fs::create_directories(d / "images" / "train");
  fs::create_directories(d / "masks" / "train");
  const int64_t sizes[3][2] = {{8, 6}, {5, 9}, {12, 12}};
  for (int k = 0; k < 3; ++k) {
    const std::string n = "m" + std::to_string(k);
    write_file(d / "images" / "train" / (n + ".png"), sg_image(sizes[k][0], sizes[k][1], k));
    write_file(d / "masks" / "train" / (n + ".png"), sg_mask(sizes[k][0], sizes[k][1], k, 3));
  }
  write_file(d / "classes.txt", "a\nb\nc\n");
  auto ds = data::load_segmentation(d.str(), "train");
  data::DataLoaderOptions o;
  o.batch_size = 3;
  data::DataLoader loader(ds, task::make_task("segment", task::TaskOptions{16})->train_transform(),
                          o);
  data::Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.images.shape(), (Shape{3, 3, 16, 16}));
  EXPECT_EQ(b.masks.shape(), (Shape{3, 16, 16}));
  // Without the Resize the sizes still clash, in one line naming both images.
  data::DataLoader raw(ds, data::Compose({data::ToTensor{}}), o);
  std::string e = input_error([&] { raw.next(b); });
  EXPECT_NE(e.find("m1.png"), std::string::npos) << e;
}

// has_split reads an archive's names: a train-only archive has no val split.
TEST(SegmentData, HasSplitLooksIntoArchives) {
  TempDir d("segsplit");
  sg_generic(d / "ds", "train", 3);
  write_file(d / "ds" / "classes.txt", "a\nb\nc\n");
  ASSERT_EQ(std::system(("tar -czf " + shell_quote(d.str("ds.tar.gz")) + " -C " +
                         shell_quote(d.str("ds")) + " .")
                            .c_str()),
            0);
  EXPECT_TRUE(data::has_split("segmentation", d.str("ds.tar.gz"), "train"));
  EXPECT_FALSE(data::has_split("segmentation", d.str("ds.tar.gz"), "val"));
  EXPECT_FALSE(data::has_split("cifar10", d.str("ds"), "val"));
}
