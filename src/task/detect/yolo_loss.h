// Ultralytics' YOLOv8 training target and loss (utils/tal.py TaskAlignedAssigner, utils/loss.py
// v8DetectionLoss, 8.4) and the decoding of the Detect head's raw outputs. The assignment is plain
// C++ on the CPU (tal_assign, no gradient), and on a GPU the same arithmetic in stages of
// independent elements (tal_math.h, tal_cuda.cu), so that nothing is copied to the host; the loss
// is built from differentiable ops (bce_with_logits, gather_anchors, dfl_expect, ciou_loss,
// dfl_loss) so its gradient flows to the head outputs on their device.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/functional.h"
#include "hpcnet/tensor.h"
#include "src/task/detect/tal_math.h"  // (kRegMax)

namespace hpcnet::task::detect {
constexpr int64_t kNumLevels = 3;
constexpr int64_t kStrides[kNumLevels] = {8, 16, 32};

// make_anchors(feats, strides, 0.5) for an input of h x w pixels (multiples of 32): anchor
// centres in grid units, level by level, row-major within a level.
struct Anchors {
  std::vector<float> xy;      // (A, 2) x, y in grid cells (+0.5)
  std::vector<float> stride;  // (A,)
  int64_t size() const { return static_cast<int64_t>(stride.size()); }
};
Anchors make_anchors(int64_t h, int64_t w);

// The loss hyperparameters (Ultralytics' default.yaml box, cls, dfl gains) and the assigner's.
struct LossOptions {
  double box = 7.5, cls = 0.5, dfl = 1.5;
  int64_t topk = 10;
  double alpha = 0.5, beta = 6.0;
  // Data-parallel training on `world` ranks (sum adds doubles over them): the target-score sum
  // that normalises the three parts is the global batch's, and the total is scaled by world^2,
  // so that the ranks' averaged gradient is one process's at the global batch. Empty: one process.
  F::RankSum rank_sum;
  int world = 1;
  // With rank_sum, on a GPU whose ranks reduce on the device (NCCL): sums the (1,) float64 score
  // sum over the ranks there, so that the staged path reads nothing back.
  std::function<void(Tensor&)> device_rank_sum;
};

// One image's objects in input pixels: gt[k] = (x1, y1, x2, y2), label[k] in [0, nc).
struct ImageTargets {
  std::vector<std::array<float, 4>> boxes;
  std::vector<int64_t> labels;
};
// The training targets of a batch's boxes: all but crowd regions and boxes under one pixel wide or
// high (which the transforms keep for the metric).
std::vector<ImageTargets> targets_of(const std::vector<std::vector<data::Box>>& boxes);

// TaskAlignedAssigner(topk, nc, alpha, beta, stride=[8, 16, 32]) on one batch:
//   pd_scores (B, A, nc) sigmoid class scores, pd_bboxes (B, A, 4) xyxy pixels, anc (A, 2)
//   anchor centres in pixels, gts per image.
// Writes target_labels (B, A), target_bboxes (B, A, 4) pixels, target_scores (B, A, nc),
// fg (B, A) 0/1 and target_gt_idx (B, A), as Ultralytics' forward returns them (background
// anchors get gt 0's label and box, or label nc and zeros for an image without objects when no
// image has any). Among anchors of equal alignment metric the lower index is taken first (torch's
// topk order among ties is unspecified).
struct Assignment {
  std::vector<int64_t> labels, gt_idx;
  std::vector<float> bboxes, scores;
  std::vector<uint8_t> fg;
};
Assignment tal_assign(const float* pd_scores, const float* pd_bboxes, const float* anc, int64_t B,
                      int64_t A, int64_t nc, const std::vector<ImageTargets>& gts,
                      const LossOptions& o = {});

// The v8 detection loss of a batch: boxes (B, 64, A) and scores (B, nc, A) raw head outputs (the
// YoloV8 model's forward_all) for inputs of h x w pixels, with targets in input pixels.
// total = (box + cls + dfl) * B as a 0-d tensor with its graph (Ultralytics returns the 3-vector
// times B and trains on its sum); items = the three gained components (Ultralytics' loss_items).
// parts: the three on the loss's device, (3,) float32, not yet read (reading waits for the
// device): items() reads them once.
struct LossResult {
  Tensor total;
  Tensor parts;
  Assignment assignment;  // for tests (the staged path fills it only with keep_assignment)
  std::array<double, 3> items() const;
};
// On a CUDA device the assignment and the targets are computed there, by the staged assigner
// (v8_detection_loss_staged); HPCNET_DETECT_LOSS=host brings the outputs to the host for
// tal_assign instead. On the CPU, tal_assign.
LossResult v8_detection_loss(const Tensor& boxes, const Tensor& scores, int64_t h, int64_t w,
                             const std::vector<ImageTargets>& gts, const LossOptions& o = {});
// The staged path on any device: the assigner's stages (tal_math.h) as CUDA kernels on a GPU or
// host loops on the CPU, then the loss over every anchor with zero weight for the background
// (no list of foreground anchors, so nothing is read back). The same loss as tal_assign's path up
// to float summation order; keep_assignment also copies the assignment to res.assignment.
LossResult v8_detection_loss_staged(const Tensor& boxes, const Tensor& scores, int64_t h,
                                    int64_t w, const std::vector<ImageTargets>& gts,
                                    const LossOptions& o = {}, bool keep_assignment = false);

// The Detect head's inference output (Ultralytics' _inference): (B, 4 + nc, A) float32 on the
// CPU, rows 0..3 the box centre x, y and width, height in input pixels (DFL expectation, then
// dist2bbox times the stride), rows 4.. the sigmoid class scores. boxes and scores on any device.
// Under a trace::Scope it records "yolo_decode" (inputs boxes, scores, anchor centres (1, 2, A)
// in grid cells, strides (1, 1, A); attr reg_max), which the ONNX exporter writes as nodes.
Tensor decode_predictions(const Tensor& boxes, const Tensor& scores, int64_t h, int64_t w);

// Image b's anchors that may score above conf, decoded: `anchor` lists them (ascending) and
// `pred` is (4 + nc, anchor.size()) row-major, each column equal to that anchor's column of
// decode_predictions(boxes, scores, h, w) for image b. An anchor is left out only when its best
// class logit is below logit(conf) by a margin (1e-3) far above float rounding, so none whose
// sigmoid score exceeds conf is missed; predict's NMS on these equals NMS on the whole decoding,
// without the DFL and sigmoid of the thousands of anchors that cannot pass.
struct Candidates {
  std::vector<int64_t> anchor;
  std::vector<float> pred;
};
Candidates decode_candidates(const Tensor& boxes, const Tensor& scores, int64_t h, int64_t w,
                             int64_t b, float conf);

}  // namespace hpcnet::task::detect
