// Images behind links that lead nowhere: the loaders (detection, segmentation, image folders) used
// to drop them unseen (half a dataset trained, exit 0), and a split of nothing else was called a
// folder without images. They are now left out and counted in one line, a folder of nothing else
// is refused naming the links, and predict reports each such link on its own line.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

void png(const fs::path& p, int seed) {
  write_png_file(p, 8, 8, noisy_pixels(8, 8, 100, 100, 100, static_cast<uint64_t>(seed), 3, 20));
}

// n images and n links to files that do not exist, in dir (names: a0.png ..., gone0.png ...).
void images_and_broken_links(const fs::path& dir, int n) {
  fs::create_directories(dir);
  for (int i = 0; i < n; ++i) {
    png(dir / ("a" + std::to_string(i) + ".png"), i);
    fs::create_symlink(dir / ("nowhere" + std::to_string(i) + ".png"),
                       dir / ("gone" + std::to_string(i) + ".png"));
  }
}

// What open_dataset printed to stderr (and its dataset's size, -1 when it threw; *error its
// message).
std::string opened(const std::string& name, const fs::path& path, const std::string& split,
                   int64_t* size, std::string* error = nullptr) {
  ::testing::internal::CaptureStderr();
  *size = -1;
  try {
    *size = data::open_dataset(name, path.string(), split)->size();
  } catch (const InputError& e) {
    if (error) *error = e.what();
  }
  return ::testing::internal::GetCapturedStderr();
}

}  // namespace

TEST(BrokenLinks, DetectionSaysHowManyImagesItLeftOut) {
  TempDir tmp("links_detect");
  const fs::path root = tmp.path();
  images_and_broken_links(root / "images" / "train", 4);
  images_and_broken_links(root / "images" / "val", 0);
  fs::create_directories(root / "labels" / "train");
  for (int i = 0; i < 4; ++i) {
    write_file(root / "labels" / "train" / ("a" + std::to_string(i) + ".txt"),
               "0 0.5 0.5 0.2 0.2\n");
    write_file(root / "labels" / "train" / ("gone" + std::to_string(i) + ".txt"),
               "0 0.5 0.5 0.2 0.2\n");
  }
  write_file(root / "data.yaml", "path: .\ntrain: images/train\nval: images/val\nnames: [x]\n");
  const fs::path yaml = root / "data.yaml";
  int64_t size = 0;
  std::string err = opened("detect", yaml, "train", &size);
  EXPECT_EQ(size, 4);
  EXPECT_EQ(count_of(err, "links that lead nowhere"), 1u) << err;
  EXPECT_NE(err.find("detect: 4 of 8 images of train are links that lead nowhere and are left "
                     "out (first: " +
                     (root / "images" / "train" / "gone0.png").string() + " -> " +
                     (root / "images" / "train" / "nowhere0.png").string() + ")"),
            std::string::npos)
      << err;
  // A val split of nothing but such links: refused, naming them, not "holds no images".
  for (int i = 0; i < 3; ++i)
    fs::create_symlink(root / "missing.jpg",
                       root / "images" / "val" / ("v" + std::to_string(i) + ".jpg"));
  std::string error;
  opened("detect", yaml, "val", &size, &error);
  EXPECT_EQ(size, -1);
  EXPECT_NE(error.find("holds no images for val, only 3 links that lead nowhere (first: "),
            std::string::npos)
      << error;
}

// A COCO file_name that is such a link is refused saying so (it always was refused, as missing).
TEST(BrokenLinks, CocoNamesTheLink) {
  TempDir tmp("links_coco");
  const fs::path root = tmp.path();
  fs::create_directories(root / "annotations");
  fs::create_directories(root / "images");
  png(root / "images" / "a.png", 1);
  fs::create_symlink(root / "elsewhere.png", root / "images" / "b.png");
  write_file(root / "annotations" / "instances_train.json",
             R"({"images": [{"id": 1, "file_name": "a.png", "width": 8, "height": 8},
                            {"id": 2, "file_name": "b.png", "width": 8, "height": 8}],
                 "annotations": [], "categories": [{"id": 1, "name": "x"}]})");
  EXPECT_TRUE(input_error(
      [&] {
        data::load_detection_dataset((root / "annotations" / "instances_train.json").string(),
                                     "train");
      },
      "b.png is a link to " + (root / "elsewhere.png").string() + ", which leads nowhere"));
}

TEST(BrokenLinks, SegmentationSaysHowManyImagesItLeftOut) {
  TempDir tmp("links_seg");
  const fs::path root = tmp.path();
  images_and_broken_links(root / "images" / "train", 3);
  fs::create_directories(root / "masks" / "train");
  const std::vector<uint8_t> m(64, 0);
  const std::vector<uint8_t> mask = data::encode_png_index(m.data(), 8, 8, data::class_palette(2));
  for (int i = 0; i < 3; ++i)
    for (const std::string stem : {"a", "gone"})
      write_file(root / "masks" / "train" / (stem + std::to_string(i) + ".png"),
                 std::string(mask.begin(), mask.end()));
  write_file(root / "classes.txt", "background\nthing\n");
  int64_t size = 0;
  std::string err = opened("segmentation", root, "train", &size);
  EXPECT_EQ(size, 3);
  EXPECT_EQ(count_of(err, "links that lead nowhere"), 1u) << err;
  EXPECT_NE(err.find("segmentation: 3 of 6 images of train are links that lead nowhere and are "
                     "left out (first: "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("images/train/gone0.png -> " +
                     (root / "images" / "train" / "nowhere0.png").string()),
            std::string::npos)
      << err;
  // Nothing but links in images/val/: refused, naming them.
  fs::create_directories(root / "images" / "val");
  fs::create_directories(root / "masks" / "val");
  fs::create_symlink(root / "missing.jpg", root / "images" / "val" / "v.jpg");
  write_file(root / "masks" / "val" / "v.png", std::string(mask.begin(), mask.end()));
  std::string error;
  opened("segmentation", root, "val", &size, &error);
  EXPECT_EQ(size, -1);
  EXPECT_NE(error.find("images/val/ holds no images, only 1 links that lead nowhere (first: "),
            std::string::npos)
      << error;
  // A mask that is such a link: the refusal says so.
  fs::remove(root / "masks" / "train" / "a1.png");
  fs::create_symlink(root / "lost.png", root / "masks" / "train" / "a1.png");
  opened("segmentation", root, "train", &size, &error);
  EXPECT_NE(error.find("has no mask (masks/train/a1.png (a link to " +
                       (root / "lost.png").string() + ", which leads nowhere))"),
            std::string::npos)
      << error;
}

TEST(BrokenLinks, ImageFolderSaysHowManyImagesItLeftOut) {
  TempDir tmp("links_folder");
  const fs::path root = tmp.path();
  images_and_broken_links(root / "train" / "cat", 2);
  images_and_broken_links(root / "train" / "dog", 3);
  int64_t size = 0;
  std::string err = opened("imagefolder", root, "train", &size);
  EXPECT_EQ(size, 5);
  EXPECT_EQ(count_of(err, "links that lead nowhere"), 1u) << err;
  EXPECT_NE(err.find("imagefolder: 5 of 10 images of train are links that lead nowhere and are "
                     "left out (first: train/cat/gone0.png -> "),
            std::string::npos)
      << err;
  // A class of nothing but such links: refused, naming them.
  for (int i = 0; i < 3; ++i)
    fs::remove(root / "train" / "dog" / ("a" + std::to_string(i) + ".png"));
  std::string error;
  opened("imagefolder", root, "train", &size, &error);
  EXPECT_EQ(size, -1);
  EXPECT_NE(error.find("class folder " + (root / "train" / "dog").string() +
                       " holds no images, only 3 links that lead nowhere (first: train/dog/gone"),
            std::string::npos)
      << error;
}

// predict: each such link is an unreadable image, reported on its own line (exit 2); the other
// images are predicted.
TEST(BrokenLinks, ReadingOneSaysWhatItIs) {
  TempDir tmp("links_read");
  fs::create_symlink(tmp / "nowhere.png", tmp / "gone.png");
  EXPECT_TRUE(input_error([&] { data::read_image_file((tmp / "gone.png").string()); },
                          "cannot read " + (tmp / "gone.png").string() + ": a link to " +
                              (tmp / "nowhere.png").string() +
                              ", which does not exist; fix or remove the link"));
  images_and_broken_links(tmp / "dir", 2);
  const std::vector<std::string> files = data::list_image_files((tmp / "dir").string());
  EXPECT_EQ(files.size(), 4u);  // the links too: predict reports them
}
