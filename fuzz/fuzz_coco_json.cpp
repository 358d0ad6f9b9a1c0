// Fuzzes the COCO instances JSON reader (parse_coco_instances: images, annotations, categories,
// by nlohmann-json). Only hpcnet's typed errors are expected; what it accepts must be consistent:
// classes by ascending category id, images by ascending id, every box a class in range inside
// its image.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/data/internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace d = hpcnet::data::detail;
  try {
    const d::CocoInstances c = d::parse_coco_instances(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz/instances.json");
    const int64_t nc = static_cast<int64_t>(c.classes.size());
    if (nc < 1 || c.category_ids.size() != c.classes.size()) std::abort();
    for (size_t k = 1; k < c.category_ids.size(); ++k)
      if (c.category_ids[k - 1] >= c.category_ids[k]) std::abort();
    int64_t boxes = 0;
    for (size_t i = 0; i < c.images.size(); ++i) {
      const d::CocoImage& im = c.images[i];
      if (i > 0 && c.images[i - 1].id >= im.id) std::abort();
      if (im.width < 1 || im.height < 1 || im.file_name.empty()) std::abort();
      const float w = static_cast<float>(im.width), h = static_cast<float>(im.height);
      for (const hpcnet::data::Box& b : im.boxes)
        if (b.cls < 0 || b.cls >= nc || !(0 <= b.x1 && b.x1 <= b.x2 && b.x2 <= w) ||
            !(0 <= b.y1 && b.y1 <= b.y2 && b.y2 <= h))
          std::abort();
      boxes += static_cast<int64_t>(im.boxes.size());
    }
    if (boxes != c.annotations) std::abort();
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
