// The targets of the YOLO golden fixtures (tests/golden/make_golden_yolo*.py): gt.batch_idx,
// gt.cls and gt.bboxes_xywhn (Ultralytics' batch layout) as hpcnet's per-image boxes in the
// pixels of a side x side input.
#pragma once

#include <vector>

#include "hpcnet/io.h"
#include "src/task/detect/yolo_loss.h"

namespace hpcnet::test_util {

inline std::vector<task::detect::ImageTargets> yolo_fixture_targets(const SafetensorsFile& g,
                                                                    int64_t images = 2,
                                                                    float side = 64) {
  auto bi = g.at("gt.batch_idx").to_vector(), cls = g.at("gt.cls").to_vector(),
       bx = g.at("gt.bboxes_xywhn").to_vector();
  std::vector<task::detect::ImageTargets> t(static_cast<size_t>(images));
  for (size_t k = 0; k < bi.size(); ++k) {
    const float cx = bx[4 * k] * side, cy = bx[4 * k + 1] * side, w = bx[4 * k + 2] * side,
                h = bx[4 * k + 3] * side;
    auto& img = t[static_cast<size_t>(bi[k])];
    img.boxes.push_back({cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2});
    img.labels.push_back(static_cast<int64_t>(cls[k]));
  }
  return t;
}

}  // namespace hpcnet::test_util
