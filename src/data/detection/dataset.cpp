// Object detection datasets (load_detection_dataset): Ultralytics' dataset YAML with images/ and
// labels/ folders, and COCO instances JSON, from a folder or a .tar/.tar.gz read by offset through
// one FileTree (file_tree.h). The split's file is found by locate.cpp and its images listed by
// load.cpp; label rows and JSON fields are checked as they are read (FILE:LINE or the field
// named: yolo_labels.cpp, dataset_yaml.cpp, coco_json.cpp). Images are decoded when the dataset's
// items are read, and the dataset's order (image path, or COCO image id) is fixed when it is
// listed. Boxes are stored as pixel corners of the decoded image.
#include <filesystem>

#include "src/data/detection/internal.h"
#include "src/data/internal.h"

namespace fs = std::filesystem;

namespace hpcnet::data {

using detail::detection::load_coco;
using detail::detection::load_yolo;
using detail::detection::locate;
using detail::detection::Source;

std::string DetectionReport::no_objects() const {
  if (objects > 0 || images == 0) return "";
  std::string s = "no labels found in " + source + ": every image of " + split + " (" +
                  std::to_string(images) + ") has no objects";
  if (format == "coco") return s + "; check that its annotations name these images' ids";
  const std::string first = missing_labels > 0 ? first_missing : first_empty;
  auto have = [](int64_t n) { return std::to_string(n) + (n == 1 ? " has" : " have"); };
  if (missing_labels > 0)
    s += ": " + have(missing_labels) + " no label file (first: " + first_missing + ")";
  if (empty_labels > 0)
    s += std::string(missing_labels > 0 ? ", " : ": ") + have(empty_labels) + " an empty one" +
         (missing_labels > 0 ? "" : " (first: " + first_empty + ")");
  const std::string dir = fs::path(first).parent_path().string();
  return s + "; check " + (dir.empty() ? std::string("the labels folder") : dir + "/") +
         " (one NAME.txt per image NAME.jpg, rows 'class cx cy w h')";
}

std::vector<std::string> DetectionReport::lines() const {
  std::vector<std::string> out;
  if (broken_links > 0)
    out.push_back("detect: " + std::to_string(broken_links) + " of " +
                  std::to_string(images + broken_links) + " images of " + split +
                  " are links that lead nowhere and are left out (first: " + first_broken_link +
                  "); fix or remove the links");
  if (const std::string none = no_objects(); !none.empty())
    out.push_back("detect: " + none);
  else if (missing_labels > 0)
    out.push_back("detect: " + std::to_string(missing_labels) + " of " + std::to_string(images) +
                  " images of " + split + " have no label file and are used without objects " +
                  "(first: " + first_missing + ")");
  if (duplicates > 0)
    out.push_back("detect: " + std::to_string(duplicates) + " duplicate label rows dropped in " +
                  std::to_string(duplicate_files) + " files of " + split +
                  " (first: " + first_duplicate + ")");
  if (crowd > 0)
    out.push_back("detect: " + std::to_string(crowd) + " crowd annotations (iscrowd) of " + split +
                  ": ignore regions for the metric, as pycocotools; not trained on");
  if (degenerate > 0)
    out.push_back("detect: " + std::to_string(degenerate) + " boxes of zero width or height of " +
                  split + ": objects for the metric, as pycocotools; not trained on");
  for (const std::string& n : notes) out.push_back("detect: " + n);
  return out;
}

DetectionData load_detection_dataset(const std::string& path, const std::string& split,
                                     const DetectionOptions& options) {
  Source s = locate(path, split);
  DetectionReport report;
  report.format = s.where.coco ? "coco" : "yolo";
  report.source = s.tree.display(s.where.file);
  report.split = split;
  if (s.where.coco) return load_coco(s, split, options, std::move(report));
  DetectionData d = load_yolo(s, split, std::move(report));
  // Ultralytics' class_map for a dataset other than COCO itself: class k is category k + 1.
  for (size_t k = 0; k < d.classes.size(); ++k)
    d.category_ids.push_back(static_cast<int64_t>(k) + 1);
  return d;
}

bool detection_has_split(const std::string& path, const std::string& split) {
  try {
    Source s = locate(path, split);
    if (s.where.coco) return s.where.found && (s.where.named || split == "train");
    const detail::DetectionYaml y =
        detail::parse_detection_yaml(s.tree.text(s.where.file), s.tree.display(s.where.file));
    return !(split == "train" ? y.train : split == "val" ? y.val : y.test).empty();
  } catch (const InputError&) {
    return false;
  }
}

}  // namespace hpcnet::data
