// Post-processing of the detection task: class-aware NMS as Ultralytics' non_max_suppression, the
// mapping of letterboxed boxes back to the original image (scale_boxes) and a batch's ground truth
// as the COCO metric takes it. Plain host code.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "hpcnet/data.h"
#include "src/task/detect/coco_eval.h"

namespace hpcnet::task::detect {

struct Detection {
  int64_t anchor = 0;          // the anchor (column of the decoded predictions)
  int64_t cls = 0;             // class index
  float score = 0;             // its sigmoid score
  std::array<float, 4> box{};  // x1, y1, x2, y2 in pixels
};

// Ultralytics' defaults: validation conf 0.001 multi-label, predict conf 0.25 single-label; IoU
// 0.7; at most 300 detections and 30,000 candidates into NMS.
struct NmsOptions {
  float conf = 0.001f;
  float iou = 0.7f;
  int64_t max_det = 300;
  int64_t max_nms = 30000;
  bool multi_label = false;
};

// pred: one image's decoded predictions (4 + nc, A) row-major (decode_predictions: cx, cy, w, h in
// pixels, then nc sigmoid scores). Candidates are the (anchor, class) pairs scoring above conf
// (multi_label) or each anchor's best class when it scores above conf; sorted by score (stable),
// at most max_nms; a candidate is dropped when its IoU with a kept box of the same class is above
// iou; the first max_det kept, by score.
std::vector<Detection> nms(const float* pred, int64_t A, int64_t nc, const NmsOptions& o);

// A box of a letterboxed imgsz x imgsz input (stride > 0: predict's letterbox, padded to a
// multiple of stride; data::Letterbox) in the pixels of the height x width original, clipped to
// it (Ultralytics' scale_boxes with the letterbox's own padding).
std::array<float, 4> unletterbox(const std::array<float, 4>& box, int64_t imgsz, int64_t height,
                                 int64_t width, int64_t stride = 0);

// The ground truth of item i of an evaluation batch (letterboxed to imgsz x imgsz; its original
// size in b.sizes, none: the input's) for the COCO metric, as pycocotools reads the dataset: every
// box in the original image's pixels (unletterbox), crowd regions and zero-size boxes included,
// with COCO's area when the box has one; image id = the dataset index, category = the class.
std::vector<CocoGroundTruth> batch_ground_truths(const data::Batch& b, int64_t i, int64_t imgsz);

}  // namespace hpcnet::task::detect
