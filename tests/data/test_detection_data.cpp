// Object detection data (load_detection_dataset): Ultralytics' YAML + images/ + labels/ layout
// (names as a map or a list, nc, folders and .tar.gz, missing and empty label files, polygon rows,
// duplicate rows, every bad row named FILE:LINE) and COCO instances JSON (the same boxes as the
// equivalent YOLO labels, split siblings, crowd and zero-size boxes kept, a missing image, bad
// fields).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "hpcnet/data.h"
#include "src/data/internal.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

constexpr int kW = 16, kH = 8;  // every test image: 16 wide, 8 high

// ROOT/images/<split>/NAME.png (kW x kH, pixels from the name) with ROOT/labels/<split>/NAME.txt
// holding the given text (no label file for nullopt).
void write_split(const fs::path& root, const std::string& split,
                 const std::map<std::string, std::optional<std::string>>& files) {
  fs::create_directories(root / "images" / split);
  fs::create_directories(root / "labels" / split);
  uint64_t seed = 1;
  for (const auto& [name, label] : files) {
    write_png_file(root / "images" / split / (name + ".png"), kW, kH,
                   noisy_pixels(kW, kH, 100, 50, 200, seed++, 5, 20));
    if (label) write_file(root / "labels" / split / (name + ".txt"), *label);
  }
}

const char* kMapYaml =
    "names:\n  0: cat\n  1: dog\n  2: car\ntrain: images/train\nval: images/val\n";

// The message of the InputError that loading throws ("(no error)" otherwise).
std::string load_error(const std::string& path, const std::string& split = "train",
                       const data::DetectionOptions& o = {}) {
  try {
    decode_all(data::load_detection_dataset(path, split, o).dataset);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string parse_error(const std::string& text, int64_t nc = 3) {
  try {
    data::detail::parse_yolo_label(text, "lab.txt", nc);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<data::Box> boxes_of(const data::Dataset& ds, int64_t i) {
  data::Example e = test_util::item(ds, i);
  return std::vector<data::Box>(e.boxes, e.boxes + e.num_boxes);
}

// The boxes of item i but crowd regions (which YOLO labels cannot express).
std::vector<data::Box> objects_of(const data::Dataset& ds, int64_t i) {
  std::vector<data::Box> out = boxes_of(ds, i);
  std::erase_if(out, [](const data::Box& b) { return b.crowd; });
  return out;
}

// Two datasets with the same images (pixels, names) and boxes, crowd regions aside.
void expect_same(const data::Dataset& a, const data::Dataset& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.classes(), b.classes());
  for (int64_t i = 0; i < a.size(); ++i) {
    data::Example x = test_util::item(a, i), y = test_util::item(b, i);
    EXPECT_EQ(a.item_name(i), b.item_name(i));
    ASSERT_EQ(x.height, y.height);
    ASSERT_EQ(x.width, y.width);
    EXPECT_EQ(std::memcmp(x.pixels, y.pixels, x.nbytes()), 0) << a.item_name(i);
    EXPECT_EQ(objects_of(a, i), objects_of(b, i)) << a.item_name(i);
  }
}

}  // namespace

TEST(DetectionData, YamlMapNamesFolder) {
  TempDir d("det");
  write_split(d.path(), "train",
              {{"b", "0 0.5 0.5 0.25 0.5\n2 0.25 0.75 0.5 0.5\n"}, {"a", "1 0.5 0.5 1 1\n"}});
  write_file(d / "data.yaml", kMapYaml);
  data::DetectionData dd = data::load_detection_dataset(d.str("data.yaml"), "train");
  const data::Dataset& ds = *dd.dataset;
  EXPECT_EQ(ds.target_kind(), data::TargetKind::kBoxes);
  EXPECT_EQ(dd.classes, (std::vector<std::string>{"cat", "dog", "car"}));
  EXPECT_EQ(ds.classes(), dd.classes);
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.item_name(0), "images/train/a.png");  // sorted by path
  EXPECT_EQ(ds.item_name(1), "images/train/b.png");
  EXPECT_EQ(test_util::item(ds, 0).width, kW);
  EXPECT_EQ(test_util::item(ds, 0).height, kH);
  EXPECT_EQ(boxes_of(ds, 0), (std::vector<data::Box>{{1, 0, 0, 16, 8}}));
  // cx 0.5 w 0.25 -> x 6..10 of 16; cy 0.5 h 0.5 -> y 2..6 of 8; the second box is clipped at
  // neither edge: x 0..8, y 4..8.
  EXPECT_EQ(boxes_of(ds, 1), (std::vector<data::Box>{{0, 6, 2, 10, 6}, {2, 0, 4, 8, 8}}));
  EXPECT_EQ(dd.report.format, "yolo");
  EXPECT_EQ(dd.report.images, 2);
  EXPECT_EQ(dd.report.objects, 3);
  EXPECT_EQ(dd.report.missing_labels, 0);
  EXPECT_TRUE(dd.report.lines().empty());
  // The folder itself finds its data.yaml.
  expect_same(*data::load_detection_dataset(d.str(), "train").dataset, ds);
  EXPECT_TRUE(data::detection_has_split(d.str("data.yaml"), "train"));
  EXPECT_TRUE(data::detection_has_split(d.str("data.yaml"), "val"));
  EXPECT_FALSE(data::detection_has_split(d.str("data.yaml"), "test"));
  EXPECT_NE(load_error(d.str("data.yaml"), "test").find("has no 'test'"), std::string::npos);
  EXPECT_NE(load_error(d.str("data.yaml"), "val").find("images/val"), std::string::npos);
}

TEST(DetectionData, YamlListNamesPathAndNc) {
  TempDir d("det");
  write_split(d / "ds", "val", {{"x", "1 0.5 0.5 0.5 0.5\n"}});
  fs::create_directories(d / "cfg");
  // path relative to the YAML's folder; names as a list; nc agreeing.
  write_file(d / "cfg" / "mine.yaml", "path: ../ds\nval: images/val\nnc: 2\nnames: [cat, dog]\n");
  data::DetectionData dd = data::load_detection_dataset(d.str("cfg/mine.yaml"), "val");
  EXPECT_EQ(dd.classes, (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(dd.dataset->size(), 1);
  EXPECT_EQ(dd.dataset->item_name(0), "images/val/x.png");
  EXPECT_EQ(boxes_of(*dd.dataset, 0), (std::vector<data::Box>{{1, 4, 2, 12, 6}}));
  // nc alone names the classes class_K.
  write_file(d / "cfg" / "mine.yaml", "path: ../ds\nval: images/val\nnc: 2\n");
  EXPECT_EQ(data::load_detection_dataset(d.str("cfg/mine.yaml"), "val").classes,
            (std::vector<std::string>{"class_0", "class_1"}));
  // nc disagreeing with names, names with a gap, no names at all.
  write_file(d / "cfg" / "mine.yaml", "path: ../ds\nval: images/val\nnc: 3\nnames: [cat, dog]\n");
  std::string e = load_error(d.str("cfg/mine.yaml"), "val");
  EXPECT_NE(e.find("mine.yaml"), std::string::npos) << e;
  EXPECT_NE(e.find("nc is 3 but names has 2"), std::string::npos) << e;
  write_file(d / "cfg" / "mine.yaml", "path: ../ds\nval: images/val\nnames: {0: cat, 2: car}\n");
  EXPECT_NE(load_error(d.str("cfg/mine.yaml"), "val").find("numbered 0, 1"), std::string::npos);
  write_file(d / "cfg" / "mine.yaml", "path: ../ds\nval: images/val\n");
  EXPECT_NE(load_error(d.str("cfg/mine.yaml"), "val").find("no names"), std::string::npos);
  write_file(d / "cfg" / "mine.yaml", "path: ../ds\nval: [images/val\n");
  EXPECT_NE(load_error(d.str("cfg/mine.yaml"), "val").find("not valid YAML"), std::string::npos);
  // A class past a list of two is refused at its row.
  write_file(d / "cfg" / "mine.yaml", "path: ../ds\nval: images/val\nnames: [cat]\n");
  e = load_error(d.str("cfg/mine.yaml"), "val");
  EXPECT_NE(e.find("labels/val/x.txt:1: class 1 is outside 0..0"), std::string::npos) << e;
}

TEST(DetectionData, TarGzSameAsFolder) {
  TempDir d("det");
  const fs::path root = d / "scenes";
  write_split(root, "train", {{"a", "0 0.5 0.5 0.25 0.5\n"}, {"b", ""}, {"c", std::nullopt}});
  write_split(root, "val", {{"v", "2 0.5 0.5 0.5 0.5\n"}});
  // An absolute path that only holds on the machine that wrote it: inside an archive the YAML's
  // folder is the root.
  write_file(root / "data.yaml", std::string("path: /nonexistent/scenes\n") + kMapYaml);
  ASSERT_EQ(std::system(("tar -czf " + shell_quote(d.str("scenes.tar.gz")) + " -C " +
                         shell_quote(d.str()) + " scenes")
                            .c_str()),
            0);
  // The folder itself: the absolute path is missing, so the YAML's folder is read (and said once).
  data::DetectionData folder = data::load_detection_dataset((root / "data.yaml").string(), "train");
  ASSERT_EQ(folder.report.notes.size(), 1u);
  EXPECT_NE(folder.report.notes[0].find("/nonexistent/scenes"), std::string::npos);
  data::DetectionData tar = data::load_detection_dataset(d.str("scenes.tar.gz"), "train");
  expect_same(*tar.dataset, *folder.dataset);
  EXPECT_EQ(tar.report.missing_labels, 1);
  EXPECT_EQ(tar.report.empty_labels, 1);
  EXPECT_NE(tar.report.first_missing.find("scenes.tar.gz:scenes/labels/train/c.txt"),
            std::string::npos)
      << tar.report.first_missing;
  EXPECT_TRUE(tar.report.notes.empty());
  expect_same(*data::load_detection_dataset(d.str("scenes.tar.gz"), "val").dataset,
              *data::load_detection_dataset(root.string(), "val").dataset);
  EXPECT_TRUE(data::detection_has_split(d.str("scenes.tar.gz"), "val"));
  EXPECT_FALSE(data::detection_has_split(d.str("scenes.tar.gz"), "test"));
  // A bad row inside the archive names the member and its line.
  write_file(root / "labels" / "train" / "a.txt", "0 0.5 0.5 0.25 0.5\n0 0.5 0.5 0.25\n");
  ASSERT_EQ(std::system(("tar -czf " + shell_quote(d.str("bad.tar.gz")) + " -C " +
                         shell_quote(d.str()) + " scenes")
                            .c_str()),
            0);
  const std::string e = load_error(d.str("bad.tar.gz"));
  EXPECT_NE(e.find("bad.tar.gz:scenes/labels/train/a.txt:2: 4 columns"), std::string::npos) << e;
}

TEST(DetectionData, MissingLabelsCountedOnceAndEmptyFiles) {
  TempDir d("det");
  write_split(d.path(), "train",
              {{"a", std::nullopt},
               {"b", std::nullopt},
               {"c", "\n\n"},
               {"d", std::nullopt},
               {"e", "0 0.5 0.5 0.5 0.5\n"}});
  write_file(d / "data.yaml", kMapYaml);
  data::DetectionData dd = data::load_detection_dataset(d.str(), "train");
  ASSERT_EQ(dd.dataset->size(), 5);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(test_util::item(*dd.dataset, i).num_boxes, 0) << i;
  EXPECT_EQ(test_util::item(*dd.dataset, 4).num_boxes, 1);
  EXPECT_EQ(dd.report.missing_labels, 3);
  EXPECT_EQ(dd.report.empty_labels, 1);
  EXPECT_EQ(dd.report.first_missing, (d / "labels" / "train" / "a.txt").string());
  const std::vector<std::string> lines = dd.report.lines();
  ASSERT_EQ(lines.size(), 1u);  // once, not per image
  EXPECT_NE(lines[0].find("3 of 5 images of train have no label file"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("labels/train/a.txt"), std::string::npos) << lines[0];
}

// A split without a single object says so in one line, naming the label folder to check (the
// training loop refuses such a train split: tests/task/detect/test_detect.cpp).
TEST(DetectionData, ASplitWithoutOneObjectSaysSo) {
  TempDir d("det");
  write_split(d.path(), "val", {{"a", std::nullopt}, {"b", std::nullopt}, {"c", "\n"}});
  write_file(d / "data.yaml", kMapYaml);
  data::DetectionData dd = data::load_detection_dataset(d.str(), "val");
  EXPECT_EQ(dd.report.objects, 0);
  const std::string labels = (d / "labels" / "val").string();
  EXPECT_EQ(dd.report.lines(),
            std::vector<std::string>{
                "detect: no labels found in " + (d / "data.yaml").string() +
                ": every image of val (3) has no objects: 2 have no label file (first: " + labels +
                "/a.txt), 1 has an empty one; check " + labels +
                "/ (one NAME.txt per image NAME.jpg, rows 'class cx cy w h')"});
  // Only empty label files; and one object anywhere is enough.
  TempDir e("det");
  write_split(e.path(), "train", {{"a", ""}, {"b", "\n"}});
  write_file(e / "data.yaml", kMapYaml);
  dd = data::load_detection_dataset(e.str(), "train");
  ASSERT_EQ(dd.report.lines().size(), 1u);
  EXPECT_NE(dd.report.lines()[0].find(": 2 have an empty one (first: " +
                                      (e / "labels" / "train" / "a.txt").string() + ")"),
            std::string::npos)
      << dd.report.lines()[0];
  write_file(e / "labels" / "train" / "b.txt", "1 0.5 0.5 0.5 0.5\n");
  dd = data::load_detection_dataset(e.str(), "train");
  EXPECT_TRUE(dd.report.lines().empty());
}

TEST(DetectionData, BadRowsNameFileAndLine) {
  // Through the loader: the label file's path and line.
  TempDir d("det");
  write_split(d.path(), "train", {{"a", "0 0.5 0.5 0.5 0.5\n\n1 0.5 1.5 0.2 0.2\n"}});
  write_file(d / "data.yaml", kMapYaml);
  const std::string e = load_error(d.str());
  EXPECT_NE(e.find((d / "labels" / "train" / "a.txt").string() + ":3: cy = 1.5 is outside 0..1"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);  // one line
  // Each kind of bad row, by the parser itself.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"3 0.5 0.5 0.1 0.1", "lab.txt:1: class 3 is outside 0..2"},
      {"0 0.5 0.5 0.1 0.1\n-1 0.5 0.5 0.1 0.1", "lab.txt:2: class -1 is outside 0..2"},
      {"1.5 0.5 0.5 0.1 0.1", "lab.txt:1: class 1.5 is not an integer"},
      {"0 1.2 0.5 0.1 0.1", "lab.txt:1: cx = 1.2 is outside 0..1"},
      {"0 0.5 -0.1 0.1 0.1", "lab.txt:1: cy = -0.1 is outside 0..1"},
      {"0 0.5 0.5 1.0001 0.1", "lab.txt:1: w = 1.0001 is outside 0..1"},
      {"0 0.5 0.5 0.1 2", "lab.txt:1: h = 2 is outside 0..1"},
      {"0", "lab.txt:1: 1 column;"},
      {"0 0.5", "lab.txt:1: 2 columns;"},
      {"0 0.5 0.5", "lab.txt:1: 3 columns;"},
      {"\n\n0 0.5 0.5 0.1", "lab.txt:3: 4 columns;"},
      {"0 0.5 0.5 0.1 0.1 0.1", "lab.txt:1: 6 columns;"},
      {"0 0.1 0.1 0.2 0.2 0.3 0.3 0.4", "lab.txt:1: 8 columns;"},
      {"0 0.5 abc 0.1 0.1", "lab.txt:1: column 3 'abc' is not a number"},
      {"0 0.5 nan 0.1 0.1", "lab.txt:1: column 3 'nan' is not a number"},
      {"0 0.5 0.5 inf 0.1", "lab.txt:1: column 4 'inf' is not a number"},
      {"0 0.5 0.5 0x1 0.1", "lab.txt:1: column 4 '0x1' is not a number"},
      {"0 0.1 0.1 0.2 0.2 1.3 0.3", "lab.txt:1: x3 = 1.3 is outside 0..1"},
  };
  for (const auto& [text, part] : cases) {
    const std::string m = parse_error(text);
    EXPECT_NE(m.find(part), std::string::npos) << "row '" << text << "': " << m;
    EXPECT_EQ(m.rfind("detect: ", 0), 0u) << m;
  }
  // Tiny excursions are clamped; CRLF, tabs, '+' and exponents are fine.
  const auto rows = data::detail::parse_yolo_label(
      "0 0.5 0.5 1.0000001 -0.0000001\r\n1\t+0.5 5e-1  0.5 0.5\r\n", "lab.txt", 3);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].x1, 0.0);
  EXPECT_EQ(rows[0].x2, 1.0);
  EXPECT_EQ(rows[0].y1, 0.5);
  EXPECT_EQ(rows[0].y2, 0.5);
  EXPECT_EQ(rows[1].cls, 1);
  EXPECT_EQ(rows[1].line, 2);
  EXPECT_EQ(rows[1].x1, 0.25);
  EXPECT_EQ(rows[1].y2, 0.75);
}

// A UTF-8 byte order mark (Windows tools write one) before the first row is not part of it; one
// anywhere else is still an error naming the line.
TEST(DetectionData, AByteOrderMarkBeforeTheFirstRowIsAccepted) {
  TempDir d("det");
  write_split(d.path(), "train",
              {{"a",
                "\xEF\xBB\xBF"
                "2 0.5 0.5 0.5 0.5\r\n1 0.5 0.5 0.25 0.5\r\n"}});
  write_file(d / "data.yaml", kMapYaml);
  data::DetectionData dd = data::load_detection_dataset(d.str(), "train");
  EXPECT_EQ(boxes_of(*dd.dataset, 0), (std::vector<data::Box>{{2, 4, 2, 12, 6}, {1, 6, 2, 10, 6}}));
  EXPECT_NE(parse_error("0 0.5 0.5 0.1 0.1\n\xEF\xBB\xBF"
                        "1 0.5 0.5 0.1 0.1")
                .find("lab.txt:2: column 1"),
            std::string::npos);
}

TEST(DetectionData, PolygonRowsTakeTheirBoundingBox) {
  TempDir d("det");
  // A triangle (0.25,0.25) (0.75,0.5) (0.5,1) and a quadrilateral; 2 and 4 columns stay errors.
  write_split(d.path(), "train",
              {{"a", "0 0.25 0.25 0.75 0.5 0.5 1\n2 0 0 1 0 1 0.5 0 0.5\n1 0.5 0.5 0.5 0.5\n"}});
  write_file(d / "data.yaml", kMapYaml);
  data::DetectionData dd = data::load_detection_dataset(d.str(), "train");
  EXPECT_EQ(boxes_of(*dd.dataset, 0),
            (std::vector<data::Box>{{0, 4, 2, 12, 8}, {2, 0, 0, 16, 4}, {1, 4, 2, 12, 6}}));
  EXPECT_EQ(dd.report.polygons, 2);
  EXPECT_TRUE(dd.report.lines().empty());
}

TEST(DetectionData, DuplicateRowsDroppedAndReportedOnce) {
  TempDir d("det");
  write_split(d.path(), "train",
              {{"a", "0 0.5 0.5 0.25 0.5\n1 0.5 0.5 0.25 0.5\n0 0.50 0.5 0.25 0.50\n"},
               {"b", "2 0.5 0.5 0.5 0.5\n2 0.5 0.5 0.5 0.5\n2 0.5 0.5 0.5 0.5\n"},
               {"c", "2 0.5 0.5 0.5 0.5\n"}});
  write_file(d / "data.yaml", kMapYaml);
  data::DetectionData dd = data::load_detection_dataset(d.str(), "train");
  EXPECT_EQ(boxes_of(*dd.dataset, 0), (std::vector<data::Box>{{0, 6, 2, 10, 6}, {1, 6, 2, 10, 6}}));
  EXPECT_EQ(boxes_of(*dd.dataset, 1), (std::vector<data::Box>{{2, 4, 2, 12, 6}}));
  EXPECT_EQ(boxes_of(*dd.dataset, 2), (std::vector<data::Box>{{2, 4, 2, 12, 6}}));
  EXPECT_EQ(dd.report.duplicates, 3);
  EXPECT_EQ(dd.report.duplicate_files, 2);
  EXPECT_EQ(dd.report.first_duplicate, (d / "labels" / "train" / "a.txt").string() + ":3");
  const auto lines = dd.report.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("3 duplicate label rows dropped in 2 files"), std::string::npos)
      << lines[0];
  int64_t dups = 0, line = 0;
  EXPECT_EQ(
      data::detail::parse_yolo_label("0 .5 .5 .1 .1\n0 .5 .5 .1 .1\n", "f", 1, &dups, &line).size(),
      1u);
  EXPECT_EQ(dups, 1);
  EXPECT_EQ(line, 2);
}

TEST(DetectionData, LabelsFolderIsTheLastImagesComponent) {
  // The root itself lies below a folder named images: only the last one becomes labels.
  TempDir d("det");
  const fs::path root = d / "images" / "ds";
  write_split(root, "train", {{"a", "1 0.5 0.5 0.5 0.5\n"}});
  fs::create_directories(root / "images" / "train" / "sub");
  write_png_file(root / "images" / "train" / "sub" / "b.png", kW, kH,
                 noisy_pixels(kW, kH, 1, 2, 3, 9, 9, 1));
  fs::create_directories(root / "labels" / "train" / "sub");
  write_file(root / "labels" / "train" / "sub" / "b.txt", "2 0.5 0.5 1 1\n");
  write_file(root / "data.yaml", kMapYaml);
  data::DetectionData dd = data::load_detection_dataset(root.string(), "train");
  ASSERT_EQ(dd.dataset->size(), 2);  // sub-folders are read too
  EXPECT_EQ(dd.dataset->item_name(1), "images/train/sub/b.png");
  EXPECT_EQ(boxes_of(*dd.dataset, 0), (std::vector<data::Box>{{1, 4, 2, 12, 6}}));
  EXPECT_EQ(boxes_of(*dd.dataset, 1), (std::vector<data::Box>{{2, 0, 0, 16, 8}}));
  EXPECT_EQ(dd.report.missing_labels, 0);
}

TEST(DetectionData, MaxImagePixelsApplies) {
  TempDir d("det");
  write_split(d.path(), "train", {{"a", ""}});
  write_file(d / "data.yaml", kMapYaml);
  data::set_max_image_pixels(100);  // 16 x 8 = 128 pixels
  const std::string e = load_error(d.str());
  data::set_max_image_pixels(data::kDefaultMaxImagePixels);
  EXPECT_NE(e.find("images/train/a.png"), std::string::npos) << e;
  EXPECT_NE(e.find("--max-image-pixels"), std::string::npos) << e;
}

namespace {

// COCO JSON equivalent to write_split's labels below: categories 10, 20, 30 (cat, dog, car).
const char* kCocoTrain = R"({
  "images": [{"id": 2, "file_name": "images/train/b.png", "width": 16, "height": 8},
             {"id": 1, "file_name": "images/train/a.png", "width": 16, "height": 8},
             {"id": 3, "file_name": "images/train/c.png", "width": 16, "height": 8}],
  "annotations": [
    {"id": 1, "image_id": 2, "category_id": 10, "bbox": [6, 2, 4, 4], "iscrowd": 0},
    {"id": 2, "image_id": 2, "category_id": 30, "bbox": [0, 4, 8, 4], "iscrowd": 0},
    {"id": 3, "image_id": 1, "category_id": 20, "bbox": [0, 0, 16, 8]},
    {"id": 4, "image_id": 1, "category_id": 20, "bbox": [1, 1, 2, 2], "iscrowd": 1}],
  "categories": [{"id": 30, "name": "car"}, {"id": 10, "name": "cat"}, {"id": 20, "name": "dog"}]
})";

}  // namespace

TEST(DetectionData, CocoJsonGivesTheSameBoxesAsYolo) {
  TempDir d("det");
  write_split(d.path(), "train",
              {{"b", "0 0.5 0.5 0.25 0.5\n2 0.25 0.75 0.5 0.5\n"},
               {"a", "1 0.5 0.5 1 1\n"},
               {"c", std::nullopt}});
  write_split(d.path(), "val", {{"v", "2 0.5 0.5 0.5 0.5\n"}});
  write_file(d / "data.yaml", kMapYaml);
  fs::create_directories(d / "annotations");
  write_file(d / "annotations" / "instances_train.json", kCocoTrain);
  write_file(d / "annotations" / "instances_val.json",
             R"({"images": [{"id": 0, "file_name": "images/val/v.png", "width": 16, "height": 8}],
                 "annotations": [{"image_id": 0, "category_id": 30, "bbox": [4, 2, 8, 4]}],
                 "categories": [{"id": 10, "name": "cat"}, {"id": 20, "name": "dog"},
                                {"id": 30, "name": "car"}]})");
  data::DetectionData yolo = data::load_detection_dataset(d.str("data.yaml"), "train");
  data::DetectionData coco =
      data::load_detection_dataset(d.str("annotations/instances_train.json"), "train");
  EXPECT_EQ(coco.report.format, "coco");
  expect_same(*coco.dataset, *yolo.dataset);  // ids 1, 2, 3 are a, b, c: the same order
  EXPECT_EQ(coco.image_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(coco.category_ids, (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(yolo.image_ids, (std::vector<int64_t>{0, 1, 2}));
  // A YOLO dataset's results use categories 1..nc, as Ultralytics' for a dataset not COCO's own.
  EXPECT_EQ(yolo.category_ids, (std::vector<int64_t>{1, 2, 3}));
  // The crowd region is kept, flagged, after image 1's other box: an ignore region for the metric.
  EXPECT_EQ(coco.report.crowd, 1);
  EXPECT_EQ(coco.report.objects, 4);
  ASSERT_EQ(test_util::item(*coco.dataset, 0).num_boxes, 2);
  EXPECT_FALSE(test_util::item(*coco.dataset, 0).boxes[0].crowd);
  EXPECT_EQ(test_util::item(*coco.dataset, 0).boxes[1], (data::Box{1, 1, 1, 3, 3, -1.f, true}));
  ASSERT_EQ(coco.report.lines().size(), 1u);
  EXPECT_NE(coco.report.lines()[0].find("1 crowd annotations (iscrowd) of train: ignore regions"),
            std::string::npos)
      << coco.report.lines()[0];
  // The train JSON's path reads its val sibling for val; the folder prefers the YAML.
  expect_same(
      *data::load_detection_dataset(d.str("annotations/instances_train.json"), "val").dataset,
      *data::load_detection_dataset(d.str(), "val").dataset);
  EXPECT_EQ(data::load_detection_dataset(d.str(), "train").report.format, "yolo");
  EXPECT_TRUE(data::detection_has_split(d.str("annotations/instances_train.json"), "val"));
  EXPECT_FALSE(data::detection_has_split(d.str("annotations/instances_train.json"), "test"));
  EXPECT_NE(
      load_error(d.str("annotations/instances_train.json"), "test").find("instances_test.json"),
      std::string::npos);
  // Without the YAML the folder finds annotations/instances_<split>.json; a .tar.gz of it too.
  fs::remove(d / "data.yaml");
  expect_same(*data::load_detection_dataset(d.str(), "train").dataset, *yolo.dataset);
  ASSERT_EQ(std::system(("tar -czf " + shell_quote(d.str("coco.tar.gz")) + " -C " +
                         shell_quote(d.str()) + " images annotations")
                            .c_str()),
            0);
  expect_same(*data::load_detection_dataset(d.str("coco.tar.gz"), "train").dataset, *yolo.dataset);
  // COCO's own layout: file_name alone, the images in images/<split word>/ beside annotations/.
  TempDir c("det");
  write_split(c.path(), "val2017", {{"v", std::nullopt}});
  fs::create_directories(c / "annotations");
  write_file(c / "annotations" / "instances_val2017.json",
             R"({"images": [{"id": 7, "file_name": "v.png", "width": 16.0, "height": 8}],
                 "categories": [{"id": 1, "name": "person"}]})");
  data::DetectionData v =
      data::load_detection_dataset(c.str("annotations/instances_val2017.json"), "val");
  ASSERT_EQ(v.dataset->size(), 1);
  EXPECT_EQ(test_util::item(*v.dataset, 0).num_boxes, 0);
  EXPECT_EQ(v.classes, (std::vector<std::string>{"person"}));
}

TEST(DetectionData, CocoMissingImageAndBadFields) {
  TempDir d("det");
  write_split(d.path(), "train", {{"a", std::nullopt}, {"b", std::nullopt}});
  fs::create_directories(d / "annotations");
  const fs::path json = d / "annotations" / "instances_train.json";
  auto with = [&](const std::string& images, const std::string& anns) {
    write_file(json, R"({"images": [)" + images + R"(], "annotations": [)" + anns +
                         R"(], "categories": [{"id": 1, "name": "cat"}]})");
    return load_error(json.string());
  };
  const std::string ab =
      R"({"id": 1, "file_name": "images/train/a.png", "width": 16, "height": 8},
         {"id": 2, "file_name": "images/train/b.png", "width": 16, "height": 8})";
  EXPECT_EQ(with(ab, R"({"image_id": 1, "category_id": 1, "bbox": [0, 0, 16.5, 8]})"),
            "(no error)");
  // A missing image is named with the JSON.
  std::string e = with(
      ab + R"(, {"id": 3, "file_name": "images/train/gone.png", "width": 16, "height": 8})", "");
  EXPECT_NE(
      e.find("instances_train.json: image id 3 file_name images/train/gone.png: no such file"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find((d / "images" / "train" / "gone.png").string()), std::string::npos) << e;
  // Bad fields name the JSON and the field.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"image_id": 9, "category_id": 1, "bbox": [0, 0, 1, 1]})",
       "annotations[0]: image_id 9 is not in images"},
      {R"({"id": 5, "image_id": 1, "category_id": 4, "bbox": [0, 0, 1, 1]})",
       "annotations[0] (id 5): category_id 4 is not in categories"},
      {R"({"image_id": 1, "category_id": 1, "bbox": [0, 0, 1]})",
       "bbox must be [x, y, width, height]"},
      {R"({"image_id": 1, "category_id": 1, "bbox": [0, 0, -1, 1]})", "negative width or height"},
      {R"({"image_id": 1, "category_id": 1, "bbox": [10, 0, 8, 1]})",
       "is outside image id 1 (16x8)"},
      {R"({"image_id": 1, "category_id": 1, "bbox": [0, "a", 1, 1]})",
       "bbox[1] \"a\" is not a number"},
      {R"({"image_id": "1", "category_id": 1, "bbox": [0, 0, 1, 1]})",
       "annotations[0].image_id: expected an integer"},
      {R"({"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "area": -3})",
       "area -3 is not a number >= 0"},
      {R"({"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "area": "big"})",
       "area \"big\" is not a number >= 0"},
  };
  for (const auto& [ann, part] : bad) {
    e = with(ab, ann);
    EXPECT_NE(e.find("instances_train.json: annotations[0]"), std::string::npos) << e;
    EXPECT_NE(e.find(part), std::string::npos) << ann << ": " << e;
  }
  e = with(R"({"id": 1, "file_name": "images/train/a.png", "width": 17, "height": 8})", "");
  EXPECT_NE(e.find("is 17x8 in the JSON but"), std::string::npos) << e;
  e = with(ab + "," + ab, "");
  EXPECT_NE(e.find("image id 1 appears twice"), std::string::npos) << e;
  write_file(json, "{\"images\": [");
  EXPECT_NE(load_error(json.string()).find("not valid JSON"), std::string::npos);
  // COCO's "area" rides with the box (the metric's area ranges use it, as pycocotools does);
  // without it the box has none (-1: its own area is used).
  with(ab, R"({"image_id": 1, "category_id": 1, "bbox": [0, 0, 4, 4], "area": 7.5},
              {"image_id": 2, "category_id": 1, "bbox": [0, 0, 4, 4]})");
  data::DetectionData ar = data::load_detection_dataset(json.string(), "train");
  ASSERT_EQ(test_util::item(*ar.dataset, 0).num_boxes, 1);
  EXPECT_EQ(test_util::item(*ar.dataset, 0).boxes[0].area, 7.5f);
  EXPECT_EQ(test_util::item(*ar.dataset, 1).boxes[0].area, -1.f);
  // Boxes of zero width or height are kept and counted, as pycocotools counts them (training
  // leaves them out, as Ultralytics' COCO converter does).
  with(ab, R"({"image_id": 1, "category_id": 1, "bbox": [3, 3, 0, 2], "area": 0},
              {"image_id": 1, "category_id": 1, "bbox": [3, 3, 5, 0], "iscrowd": 1})");
  data::DetectionData dd = data::load_detection_dataset(json.string(), "train");
  EXPECT_EQ(dd.report.degenerate, 1);
  EXPECT_EQ(dd.report.crowd, 1);
  EXPECT_EQ(dd.report.objects, 2);
  ASSERT_EQ(test_util::item(*dd.dataset, 0).num_boxes, 2);
  EXPECT_EQ(test_util::item(*dd.dataset, 0).boxes[0], (data::Box{0, 3, 3, 3, 5, 0.f, false}));
  EXPECT_EQ(test_util::item(*dd.dataset, 0).boxes[1], (data::Box{0, 3, 3, 8, 3, -1.f, true}));
}
