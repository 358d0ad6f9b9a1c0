// Loading a located split: the image files of a YOLO split (with their label files) or of a COCO
// JSON, checked as they are listed, into a lazy dataset whose items are decoded when read.
#include <algorithm>
#include <filesystem>

#include "src/data/detection/internal.h"
#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"

namespace fs = std::filesystem;

namespace hpcnet::data::detail::detection {
namespace {

struct Item {
  std::string path;               // in the tree
  std::string name;               // item_name(): below the root
  std::vector<YoloRow> rows;      // yolo
  std::vector<Box> boxes;         // coco: in pixels of (width, height)
  int64_t width = 0, height = 0;  // coco: the JSON's size (0: none)
  int64_t id = 0;                 // coco image id
};

// The lazy dataset of the items: boxes from a yolo item's rows in the pixels of whatever its image
// decodes to, a coco item's boxes checked against its JSON size when it is read.
std::shared_ptr<Dataset> lazy_items(const FileTree& t, std::vector<Item>& items,
                                    std::vector<std::string> classes, bool coco,
                                    std::string description, int64_t* objects) {
  auto ds = std::make_shared<detail::LazyDataset>(t.store(), std::move(classes), TargetKind::kBoxes,
                                                  "detect", std::move(description));
  ds->reserve(items.size());
  for (Item& it : items) {
    detail::LazyItem li;
    li.image = t.ref(it.path);
    li.name = std::move(it.name);
    if (coco) {
      li.width = static_cast<int32_t>(it.width);
      li.height = static_cast<int32_t>(it.height);
      ds->add_boxes(std::move(li), it.boxes);
    } else {
      ds->add_rows(std::move(li), it.rows);
    }
    it.rows = {};
    it.boxes = {};
  }
  *objects = ds->objects();
  return ds;
}

// item_name(): p below root, else p itself.
std::string name_below(const FileTree& t, const std::string& root, const std::string& p) {
  if (t.is_archive()) {
    if (root.empty()) return p;
    return p.compare(0, root.size() + 1, root + "/") == 0 ? p.substr(root.size() + 1) : p;
  }
  const std::string rel =
      fs::path(p).lexically_relative(root.empty() ? "." : root).generic_string();
  return rel.empty() || rel == "." || rel.rfind("..", 0) == 0 ? p : rel;
}

// Ultralytics' img2label_paths: the last folder named `images` on the path becomes `labels`, the
// extension becomes .txt (no such folder: the label file lies beside the image).
std::string label_path(const std::string& image) {
  const size_t slash = image.rfind('/');
  const size_t file_begin = slash == std::string::npos ? 0 : slash + 1;
  std::string p = image;
  const size_t dot = p.rfind('.');
  if (dot != std::string::npos && dot >= file_begin) p.erase(dot);
  p += ".txt";
  size_t found = std::string::npos;
  for (size_t b = 0; b < file_begin;) {
    size_t e = p.find('/', b);
    if (e == std::string::npos || e >= file_begin) e = file_begin - 1;
    if (e - b == 6 && p.compare(b, 6, "images") == 0) found = b;
    b = e + 1;
  }
  if (found != std::string::npos) p.replace(found, 6, "labels");
  return p;
}

// The root of a YOLO dataset: the YAML's `path` (relative to the YAML's folder) where that is a
// folder, else the YAML's folder (a note in *report when a folder's `path` is not one).
std::string yolo_root(const FileTree& t, const DetectionYaml& y, const std::string& yaml_file,
                      DetectionReport* report) {
  const std::string yaml_dir = parent_of(yaml_file);
  if (y.path.empty()) return yaml_dir;
  const std::string p = t.join(yaml_dir, y.path);
  if (t.is_archive()) {
    if (!fs::path(y.path).is_absolute() && t.inside(p) && t.is_dir(p)) return p;
  } else if (t.is_dir(p)) {
    return p;
  } else {
    report->notes.push_back("path " + shown(y.path) + " of " + t.display(yaml_file) +
                            " is not a folder; reading " + t.display_dir(yaml_dir) +
                            " (the YAML's folder) instead");
  }
  return yaml_dir;
}

// The images of a split's folders (dirs, below root), sorted and unique; links that lead nowhere
// are counted in *report.
std::vector<std::string> list_split_images(const FileTree& t, const std::string& root,
                                           const std::vector<std::string>& dirs,
                                           const std::string& yaml_display,
                                           const std::string& split, DetectionReport* report) {
  std::vector<std::string> image_files;
  for (const std::string& d : dirs) {
    HPCNET_REQUIRE(!ends_with(to_lower(d), ".txt"),
                   "detect: " + yaml_display + ": " + split + ": " + shown(d) +
                       " is an image list; only folders of images are read, give the folder");
    const std::string dir = t.join(root, d);
    HPCNET_REQUIRE(t.inside(dir) && t.is_dir(dir), "detect: " + yaml_display + ": " + split +
                                                       " folder " + shown(d) + " (" +
                                                       t.display(dir) + ") does not exist");
    std::vector<std::string> broken;
    std::vector<std::string> found = t.list_images(dir, &broken);
    HPCNET_REQUIRE(
        !found.empty() || !broken.empty(),
        "detect: " + t.display_dir(dir) + " holds no images (.jpg, .jpeg, .png) for " + split);
    HPCNET_REQUIRE(!found.empty(), "detect: " + t.display_dir(dir) + " holds no images for " +
                                       split + ", only " + std::to_string(broken.size()) +
                                       " links that lead nowhere (first: " + broken[0] +
                                       "); fix or remove the links");
    if (!broken.empty() && report->broken_links == 0) report->first_broken_link = broken[0];
    report->broken_links += static_cast<int64_t>(broken.size());
    image_files.insert(image_files.end(), found.begin(), found.end());
  }
  std::sort(image_files.begin(), image_files.end());
  image_files.erase(std::unique(image_files.begin(), image_files.end()), image_files.end());
  return image_files;
}

// The rows of an item's label file (none when it has no label file), counted in *report.
void read_label_file(const FileTree& t, const std::string& label_file, int64_t num_classes,
                     Item* item, DetectionReport* report) {
  if (!t.is_file(label_file)) {
    if (report->missing_labels++ == 0) report->first_missing = t.display(label_file);
    return;
  }
  int64_t dups = 0, dup_line = 0;
  item->rows =
      parse_yolo_label(t.text(label_file), t.display(label_file), num_classes, &dups, &dup_line);
  if (item->rows.empty() && dups == 0 && report->empty_labels++ == 0)
    report->first_empty = t.display(label_file);
  if (dups > 0) {
    if (report->duplicate_files++ == 0)
      report->first_duplicate = t.display(label_file) + ":" + std::to_string(dup_line);
    report->duplicates += dups;
  }
  for (const YoloRow& r : item->rows) report->polygons += r.polygon ? 1 : 0;
}

}  // namespace

DetectionData load_yolo(Source& s, const std::string& split, DetectionReport report) {
  FileTree& t = s.tree;
  const std::string yaml_file = s.where.file;
  const std::string yaml_display = t.display(yaml_file);
  const DetectionYaml y = parse_detection_yaml(t.text(yaml_file), yaml_display);
  const std::string root = yolo_root(t, y, yaml_file, &report);
  const std::vector<std::string>& dirs = split == "train" ? y.train
                                         : split == "val" ? y.val
                                                          : y.test;
  HPCNET_REQUIRE(!dirs.empty(), "detect: " + yaml_display + " has no '" + split + "' (add " +
                                    split + ": images/" + split + ")");
  const std::vector<std::string> image_files =
      list_split_images(t, root, dirs, yaml_display, split, &report);
  std::vector<Item> items(image_files.size());
  std::vector<std::string> labels(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].path = image_files[i];
    items[i].name = name_below(t, root, image_files[i]);
    labels[i] = label_path(image_files[i]);
  }
  const int64_t num_classes = static_cast<int64_t>(y.names.size());
  for (size_t i = 0; i < items.size(); ++i)
    read_label_file(t, labels[i], num_classes, &items[i], &report);
  DetectionData out;
  out.dataset =
      lazy_items(t, items, y.names, false,
                 "detect " + split + " (yolo) from " + t.display_dir(root), &report.objects);
  out.classes = y.names;
  for (int64_t i = 0; i < out.dataset->size(); ++i) out.image_ids.push_back(i);
  report.images = out.dataset->size();
  out.report = std::move(report);
  return out;
}

DetectionData load_coco(Source& s, const std::string& split, const DetectionOptions& options,
                        DetectionReport report) {
  FileTree& t = s.tree;
  const std::string json = s.where.file;
  const std::string json_display = t.display(json);
  HPCNET_REQUIRE(s.where.found, "detect: no COCO JSON for split " + split + ": " + json_display +
                                    " does not exist");
  detail::CocoInstances c = detail::parse_coco_instances(t.text(json), json_display);
  HPCNET_REQUIRE(!c.images.empty(), "detect: " + json_display + " lists no images");
  // Where file_name is relative to.
  std::vector<std::string> bases;
  if (!options.coco_images.empty()) {
    bases.push_back(t.join("", options.coco_images));
  } else {
    std::string base = parent_of(json);
    if (base_name(base) == "annotations") base = parent_of(base);
    const std::string token = split_word(base_name(json)).token;
    bases.push_back(base);
    if (!token.empty()) {
      bases.push_back(t.join(base, "images/" + token));
      bases.push_back(t.join(base, token));
    }
    bases.push_back(t.join(base, "images"));
  }
  size_t best = 0;
  int64_t best_hits = -1;
  const size_t probe = std::min<size_t>(c.images.size(), 16);
  for (size_t b = 0; b < bases.size(); ++b) {
    int64_t hits = 0;
    for (size_t i = 0; i < probe; ++i) hits += t.is_file(t.join(bases[b], c.images[i].file_name));
    if (hits > best_hits) {
      best = b;
      best_hits = hits;
    }
  }
  if (best_hits == 0) {
    std::string tried;
    for (const std::string& b : bases) tried += (tried.empty() ? "" : ", ") + t.display_dir(b);
    throw InputError("detect: " + json_display + ": image id " + std::to_string(c.images[0].id) +
                     " file_name " + shown(c.images[0].file_name) + " is not in " + tried +
                     (options.coco_images.empty() ? "; put the images there" : ""));
  }
  const std::string base = bases[best];
  std::vector<Item> items(c.images.size());
  for (size_t i = 0; i < items.size(); ++i) {
    detail::CocoImage& im = c.images[i];
    Item& it = items[i];
    it.path = t.join(base, im.file_name);
    if (std::string target; !t.is_archive() && detail::is_broken_link(it.path, &target))
      throw InputError("detect: " + json_display + ": image id " + std::to_string(im.id) +
                       " file_name " + shown(im.file_name) + ": " + t.display(it.path) +
                       " is a link to " + target +
                       ", which leads nowhere; fix the link or "
                       "remove the image from the JSON");
    HPCNET_REQUIRE(t.inside(it.path) && t.is_file(it.path),
                   "detect: " + json_display + ": image id " + std::to_string(im.id) +
                       " file_name " + shown(im.file_name) + ": no such file " +
                       t.display(it.path) + "; add it or remove the image from the JSON");
    it.name = im.file_name;
    it.boxes = std::move(im.boxes);
    it.width = im.width;
    it.height = im.height;
    it.id = im.id;
  }
  report.crowd = c.crowd;
  report.degenerate = c.degenerate;
  DetectionData out;
  out.dataset = lazy_items(t, items, c.classes, true,
                           "detect " + split + " (coco) from " + json_display, &report.objects);
  out.classes = c.classes;
  out.category_ids = c.category_ids;
  for (const Item& it : items) out.image_ids.push_back(it.id);
  report.images = out.dataset->size();
  out.report = std::move(report);
  return out;
}

}  // namespace hpcnet::data::detail::detection
