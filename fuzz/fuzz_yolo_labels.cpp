// Fuzzes the YOLO label-row parser (parse_yolo_label: `class cx cy w h` rows and polygon rows of a
// labels/<split>/NAME.txt) and, when the first byte's top bit is set, the detection dataset YAML
// reader (parse_detection_yaml). The first byte's low bits give the class count (1..100). Only
// hpcnet's typed errors are expected, and every row accepted must be a box inside its image.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/data/internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t num_classes = 1 + (data[0] & 0x7f) % 100;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace d = hpcnet::data::detail;
  try {
    if (data[0] & 0x80) {
      const d::DetectionYaml y = d::parse_detection_yaml(text, "fuzz/data.yaml");
      if (y.names.empty()) std::abort();
      return 0;
    }
    int64_t dups = 0, line = 0;
    const auto rows = d::parse_yolo_label(text, "fuzz/labels.txt", num_classes, &dups, &line);
    if (dups > 0 && line < 1) std::abort();
    for (const d::YoloRow& r : rows)
      if (r.cls < 0 || r.cls >= num_classes || r.line < 1 ||
          !(0 <= r.x1 && r.x1 <= r.x2 && r.x2 <= 1) || !(0 <= r.y1 && r.y1 <= r.y2 && r.y2 <= 1))
        std::abort();
    for (const hpcnet::data::Box& b : d::yolo_rows_to_boxes(rows, 7, 13))
      if (!(0 <= b.x1 && b.x1 <= b.x2 && b.x2 <= 13 && 0 <= b.y1 && b.y1 <= b.y2 && b.y2 <= 7))
        std::abort();
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
