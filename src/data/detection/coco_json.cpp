// A COCO instances JSON (parse_coco_instances, fuzzed in fuzz/fuzz_coco_json.cpp): categories,
// images and their boxes, every field checked as it is read.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "src/data/detection/internal.h"
#include "src/data/internal.h"

namespace hpcnet::data::detail {
namespace {

using detection::shown;

// COCO boxes may overhang their image by up to a pixel (they do in COCO itself).
constexpr double kCocoPixelTolerance = 1.0;

std::string num_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

using Json = nlohmann::json;

struct CocoReader {
  const std::string& file;
  InputError error(const std::string& field, const std::string& what) const {
    return InputError("detect: " + file + ": " + field + ": " + what);
  }
  // An integer (an integral float too, as some writers give 640.0).
  int64_t integer(const Json& o, const char* key, const std::string& where, bool required,
                  int64_t dflt = 0) const {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      if (required) throw error(where, std::string("no \"") + key + "\"");
      return dflt;
    }
    const std::string field = where + "." + key;
    if (it->is_boolean()) return it->get<bool>() ? 1 : 0;
    if (it->is_number_unsigned()) {
      const uint64_t u = it->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw error(field, "integer out of range");
      return static_cast<int64_t>(u);
    }
    if (it->is_number_integer()) return it->get<int64_t>();
    if (it->is_number_float()) {
      const double d = it->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0)
        return static_cast<int64_t>(d);
    }
    throw error(field, "expected an integer, got " + shown(it->dump()));
  }
  std::string string(const Json& o, const char* key, const std::string& where) const {
    auto it = o.find(key);
    if (it == o.end() || !it->is_string())
      throw error(where, std::string("expected a string \"") + key + "\"");
    return it->get<std::string>();
  }
  const Json& array(const Json& o, const char* key, bool required) const {
    static const Json empty = Json::array();
    auto it = o.find(key);
    if (it == o.end() || (it->is_null() && !required)) {
      if (required)
        throw error(key, "missing (a COCO instances JSON has images, annotations, categories)");
      return empty;
    }
    if (!it->is_array()) throw error(key, "expected an array");
    return *it;
  }
};

// Categories: class k is the k-th by ascending id (c->classes, c->category_ids); returns the
// class of each category id.
std::map<int64_t, int64_t> read_categories(const CocoReader& r, const Json& j, CocoInstances* c) {
  std::map<int64_t, std::string> cats;
  const Json& jc = r.array(j, "categories", true);
  for (size_t i = 0; i < jc.size(); ++i) {
    const std::string where = "categories[" + std::to_string(i) + "]";
    if (!jc[i].is_object()) throw r.error(where, "expected an object with id and name");
    const int64_t id = r.integer(jc[i], "id", where, true);
    if (!cats.emplace(id, r.string(jc[i], "name", where)).second)
      throw r.error(where, "category id " + std::to_string(id) + " appears twice");
    if (static_cast<int64_t>(cats.size()) > kMaxClasses)
      throw r.error("categories", "over " + std::to_string(kMaxClasses) + " classes");
  }
  if (cats.empty()) throw r.error("categories", "empty; name at least one class");
  std::map<int64_t, int64_t> class_of;
  for (auto& [id, name] : cats) {
    class_of[id] = static_cast<int64_t>(c->classes.size());
    c->category_ids.push_back(id);
    c->classes.push_back(std::move(name));
  }
  return class_of;
}

// Images, in the JSON's order (c->images); returns the position of each image id.
std::map<int64_t, size_t> read_images(const CocoReader& r, const Json& j, CocoInstances* c) {
  std::map<int64_t, size_t> image_of;
  const Json& ji = r.array(j, "images", true);
  c->images.reserve(ji.size());
  for (size_t i = 0; i < ji.size(); ++i) {
    const std::string where = "images[" + std::to_string(i) + "]";
    if (!ji[i].is_object())
      throw r.error(where, "expected an object with id, file_name, width, height");
    CocoImage im;
    im.id = r.integer(ji[i], "id", where, true);
    im.file_name = r.string(ji[i], "file_name", where);
    if (im.file_name.empty()) throw r.error(where + ".file_name", "empty");
    im.width = r.integer(ji[i], "width", where, true);
    im.height = r.integer(ji[i], "height", where, true);
    if (im.width < 1 || im.height < 1 || im.width >= (1 << 30) || im.height >= (1 << 30))
      throw r.error(where, "size " + std::to_string(im.width) + "x" + std::to_string(im.height) +
                               " is not a positive image size");
    if (!image_of.emplace(im.id, c->images.size()).second)
      throw r.error(where, "image id " + std::to_string(im.id) + " appears twice");
    c->images.push_back(std::move(im));
  }
  return image_of;
}

// Annotation i (a), checked, as a box of its image (c->images), counted in c.
void read_annotation(const CocoReader& r, const Json& a, size_t i,
                     const std::map<int64_t, int64_t>& class_of,
                     const std::map<int64_t, size_t>& image_of, CocoInstances* c) {
  std::string where = "annotations[" + std::to_string(i) + "]";
  if (!a.is_object()) throw r.error(where, "expected an object with image_id, category_id, bbox");
  if (a.contains("id") && (a["id"].is_number_integer() || a["id"].is_number_unsigned()))
    where += " (id " + shown(a["id"].dump()) + ")";
  const int64_t image_id = r.integer(a, "image_id", where, true);
  const int64_t category_id = r.integer(a, "category_id", where, true);
  const int64_t crowd = r.integer(a, "iscrowd", where, false, 0);
  auto im = image_of.find(image_id);
  if (im == image_of.end())
    throw r.error(where, "image_id " + std::to_string(image_id) + " is not in images");
  auto cls = class_of.find(category_id);
  if (cls == class_of.end())
    throw r.error(where, "category_id " + std::to_string(category_id) + " is not in categories");
  if (crowd != 0 && crowd != 1)
    throw r.error(where, "iscrowd " + std::to_string(crowd) + " is not 0 or 1");
  auto bb = a.find("bbox");
  if (bb == a.end() || !bb->is_array() || bb->size() != 4)
    throw r.error(where, "bbox must be [x, y, width, height] in pixels");
  double v[4];
  for (size_t k = 0; k < 4; ++k) {
    const Json& e = (*bb)[k];
    if (!e.is_number() || !std::isfinite(e.get<double>()))
      throw r.error(where,
                    "bbox[" + std::to_string(k) + "] " + shown(e.dump()) + " is not a number");
    v[k] = e.get<double>();
  }
  const std::string box = "bbox [" + num_str(v[0]) + ", " + num_str(v[1]) + ", " + num_str(v[2]) +
                          ", " + num_str(v[3]) + "]";
  if (v[2] < 0 || v[3] < 0) throw r.error(where, box + " has a negative width or height");
  // Crowd regions and boxes of zero width or height are kept, as pycocotools keeps them (an
  // ignore region; an object nothing can match); detect::targets_of leaves them out of training.
  c->crowd += crowd ? 1 : 0;
  c->degenerate += !crowd && (v[2] == 0 || v[3] == 0) ? 1 : 0;
  // COCO's "area" (the object's mask area in make_scenes.py and COCO itself), for the metric's
  // area ranges; absent: the box's.
  float area = -1;
  if (auto ar = a.find("area"); ar != a.end()) {
    if (!ar->is_number() || !std::isfinite(ar->get<double>()) || ar->get<double>() < 0)
      throw r.error(where, "area " + shown(ar->dump()) + " is not a number >= 0");
    area = static_cast<float>(ar->get<double>());
  }
  CocoImage& img = c->images[im->second];
  const double w = static_cast<double>(img.width), h = static_cast<double>(img.height);
  if (v[0] < -kCocoPixelTolerance || v[1] < -kCocoPixelTolerance ||
      v[0] + v[2] > w + kCocoPixelTolerance || v[1] + v[3] > h + kCocoPixelTolerance)
    throw r.error(where, box + " is outside image id " + std::to_string(image_id) + " (" +
                             std::to_string(img.width) + "x" + std::to_string(img.height) +
                             ") by more than a pixel");
  img.boxes.push_back({cls->second, static_cast<float>(std::clamp(v[0], 0.0, w)),
                       static_cast<float>(std::clamp(v[1], 0.0, h)),
                       static_cast<float>(std::clamp(v[0] + v[2], 0.0, w)),
                       static_cast<float>(std::clamp(v[1] + v[3], 0.0, h)), area, crowd == 1});
  c->annotations++;
}

}  // namespace

CocoInstances parse_coco_instances(const std::string& text, const std::string& file) {
  const CocoReader r{file};
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw InputError("detect: " + file + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object())
    throw r.error("top level", "expected an object with images, annotations, categories");
  CocoInstances c;
  const std::map<int64_t, int64_t> class_of = read_categories(r, j, &c);
  const std::map<int64_t, size_t> image_of = read_images(r, j, &c);
  const Json& ja = r.array(j, "annotations", false);
  for (size_t i = 0; i < ja.size(); ++i) read_annotation(r, ja[i], i, class_of, image_of, &c);
  std::sort(c.images.begin(), c.images.end(),
            [](const CocoImage& a, const CocoImage& b) { return a.id < b.id; });
  return c;
}

}  // namespace hpcnet::data::detail
