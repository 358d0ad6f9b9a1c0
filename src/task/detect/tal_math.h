// The TaskAlignedAssigner and the v8 loss's targets in stages of independent elements, written once
// as __host__ __device__ functions: the CUDA kernels (tal_cuda.cu) run each stage as a grid, and
// tal_assign_staged (yolo_loss.cpp) runs the same functions in host loops, which is how the CPU
// tests check them against tal_assign, the plain C++ reference, bit for bit.
// Stages (each reads only what earlier stages wrote):
//   metric (b, j, a)  candidate test, CIoU overlap and alignment metric of gt j and anchor a;
//   topk   (b, j)     the topk candidates by metric (ties: lower anchor first) become positive;
//   resolve (b, a)    an anchor positive for several gts keeps the gt of highest overlap;
//   stats  (b, j)     max metric and max overlap over gt j's positives;
//   target (b, a)     the assignment and the dense loss targets of anchor a (zero weight for the
//                     background, so the loss needs no list of foreground anchors).
// Invariants: float arithmetic as tal_assign's; no allocation, no exceptions.
#pragma once

#include <cstdint>

#include "src/ops/box/math.h"

namespace hpcnet::task::detect {

constexpr int64_t kRegMax = 16;  // DFL bins per box side (Ultralytics' reg_max)

}  // namespace hpcnet::task::detect

namespace hpcnet::task::detect::tal {

// One batch's buffers (host or device memory). gt rows j >= the image's object count are padding
// (label -1); N = the largest count (>= 1).
struct View {
  int64_t B = 0, A = 0, nc = 0, N = 0;
  int64_t topk = 10;
  float alpha = 0.5f, beta = 6.0f;
  int32_t no_object_label = 0;  // an image without objects: nc when no image has any, else 0
  // inputs
  const float* boxes = nullptr;   // (B, 64, A) raw DFL logits
  const float* scores = nullptr;  // (B, nc, A) raw class logits
  const float* anc = nullptr;     // (A, 2) anchor centres in grid cells
  const float* stride = nullptr;  // (A,)
  const float* gt = nullptr;      // (B, N, 4) xyxy pixels
  const float* label = nullptr;   // (B, N) class as a float (exact), -1 = padding
  // work
  float* pd = nullptr;         // (B, A, 4) decoded boxes, pixels
  float* overlap = nullptr;    // (B, N, A)
  float* metric = nullptr;     // (B, N, A)
  uint8_t* pos = nullptr;      // (B, N, A): 0 no, 1 candidate, 2 positive
  float* pos_align = nullptr;  // (B, N)
  float* pos_ov = nullptr;     // (B, N)
  // the assignment (tal_assign's, for the tests)
  uint8_t* fg = nullptr;      // (B, A)
  int32_t* gt_idx = nullptr;  // (B, A)
  int32_t* labels = nullptr;  // (B, A)
  float* bboxes = nullptr;    // (B, A, 4) pixels
  // the dense loss targets
  float* tgt_cls = nullptr;  // (B, nc, A) target scores laid out as the logits
  float* tbox = nullptr;     // (B A, 4) target box in grid cells
  float* weight = nullptr;   // (B A,) sum of the target scores (0: background)
  float* tltrb = nullptr;    // (B A 4,) target sides in bins, clamped
  float* w4 = nullptr;       // (B A 4,) weight / 4
  float* sign = nullptr;     // (B A, 4) -1, -1, 1, 1
  float* offs = nullptr;     // (B A, 4) ax, ay, ax, ay
  int64_t* index = nullptr;  // (B A,) b A + a (gather_anchors of every anchor)
};

// The DFL expectation of side k (0..3) of anchor a from one image's boxes (64, A), in grid cells.
HPCNET_HD float side_expectation(const float* boxes_b, int64_t A, int64_t a, int64_t k) {
  float row[kRegMax];
  for (int64_t j = 0; j < kRegMax; ++j) row[j] = boxes_b[(k * kRegMax + j) * A + a];
  return math::dfl_expect_row(row, kRegMax);
}

// Anchor a's box from one image's boxes (64, A), xyxy in pixels: the anchor centre (ax, ay, grid
// cells) -+ the DFL expectation of each side, times the stride s.
HPCNET_HD void decode_box(const float* boxes_b, int64_t A, int64_t a, float ax, float ay, float s,
                          float* out) {
  float d[4];
  for (int k = 0; k < 4; ++k) d[k] = side_expectation(boxes_b, A, a, k);
  out[0] = (ax - d[0]) * s;
  out[1] = (ay - d[1]) * s;
  out[2] = (ax + d[2]) * s;
  out[3] = (ay + d[3]) * s;
}

// The decoded box of (b, a) in pixels.
HPCNET_HD void decode(const View& v, int64_t b, int64_t a) {
  decode_box(v.boxes + b * 4 * kRegMax * v.A, v.A, a, v.anc[2 * a], v.anc[2 * a + 1], v.stride[a],
             v.pd + (b * v.A + a) * 4);
}

// Whether gt row (b, j) takes part: a real object whose coordinates do not sum to 0 (Ultralytics
// pads with zero boxes and masks those).
HPCNET_HD bool gt_valid(const View& v, int64_t b, int64_t j) {
  if (v.label[b * v.N + j] < 0) return false;
  const float* g = v.gt + (b * v.N + j) * 4;
  return g[0] + g[1] + g[2] + g[3] > 0.f;
}

HPCNET_HD void metric(const View& v, int64_t b, int64_t j, int64_t a) {
  const int64_t i = (b * v.N + j) * v.A + a;
  v.overlap[i] = 0.f;
  v.metric[i] = 0.f;
  v.pos[i] = 0;
  if (!gt_valid(v, b, j)) return;
  const float* box = v.gt + (b * v.N + j) * 4;
  // Candidates: anchor centres strictly inside the box, sides under 16 px enlarged to 16.
  const float stride_val = 16.f, eps_in = 1e-9f;
  const float cx = (box[0] + box[2]) / 2, cy = (box[1] + box[3]) / 2;
  float bw = box[2] - box[0], bh = box[3] - box[1];
  if (bw < stride_val) bw = stride_val;
  if (bh < stride_val) bh = stride_val;
  const float x1 = cx - bw / 2, y1 = cy - bh / 2, x2 = cx + bw / 2, y2 = cy + bh / 2;
  const float ax = v.anc[2 * a] * v.stride[a], ay = v.anc[2 * a + 1] * v.stride[a];
  if (!(ax - x1 > eps_in && ay - y1 > eps_in && x2 - ax > eps_in && y2 - ay > eps_in)) return;
  v.pos[i] = 1;
  const float ov = math::max_t(math::ciou(box, v.pd + (b * v.A + a) * 4), 0.f);
  const int32_t c = static_cast<int32_t>(v.label[b * v.N + j]);
  const float sc = math::sigmoid(v.scores[(b * v.nc + c) * v.A + a]);
  v.overlap[i] = ov;
  v.metric[i] = ::powf(sc, v.alpha) * ::powf(ov, v.beta);
}

HPCNET_HD void topk(const View& v, int64_t b, int64_t j) {
  uint8_t* pos = v.pos + (b * v.N + j) * v.A;
  const float* m = v.metric + (b * v.N + j) * v.A;
  for (int64_t r = 0; r < v.topk; ++r) {
    int64_t best = -1;
    for (int64_t a = 0; a < v.A; ++a)
      if (pos[a] == 1 && (best < 0 || m[a] > m[best])) best = a;
    if (best < 0) return;  // fewer candidates than topk
    pos[best] = 2;
  }
}

HPCNET_HD void resolve(const View& v, int64_t b, int64_t a) {
  int count = 0;
  for (int64_t j = 0; j < v.N; ++j) count += v.pos[(b * v.N + j) * v.A + a] == 2;
  if (count <= 1) return;
  int64_t best = 0;
  for (int64_t j = 1; j < v.N; ++j)
    if (v.overlap[(b * v.N + j) * v.A + a] > v.overlap[(b * v.N + best) * v.A + a]) best = j;
  for (int64_t j = 0; j < v.N; ++j) {
    uint8_t& p = v.pos[(b * v.N + j) * v.A + a];
    p = j == best ? 2 : (p == 2 ? 1 : p);
  }
}

HPCNET_HD void stats(const View& v, int64_t b, int64_t j) {
  const int64_t row = (b * v.N + j) * v.A;
  float align = 0.f, ov = 0.f;
  for (int64_t a = 0; a < v.A; ++a)
    if (v.pos[row + a] == 2) {
      align = math::max_t(align, v.metric[row + a]);
      ov = math::max_t(ov, v.overlap[row + a]);
    }
  v.pos_align[b * v.N + j] = align;
  v.pos_ov[b * v.N + j] = ov;
}

// Returns the anchor's target score (0 for the background), the term of the target-score sum.
HPCNET_HD float target(const View& v, int64_t b, int64_t a) {
  float norm = 0.f;
  int64_t jj = -1;
  for (int64_t j = 0; j < v.N; ++j) {
    const int64_t i = (b * v.N + j) * v.A + a;
    if (v.pos[i] != 2) continue;
    if (jj < 0) jj = j;
    norm =
        math::max_t(norm, v.metric[i] * v.pos_ov[b * v.N + j] / (v.pos_align[b * v.N + j] + 1e-9f));
  }
  const bool fg = jj >= 0;
  if (!fg) jj = 0;
  const bool has = v.label[b * v.N] >= 0;  // the image has objects (padding comes last)
  const int64_t i = b * v.A + a;
  const int32_t c = has ? static_cast<int32_t>(v.label[b * v.N + jj]) : v.no_object_label;
  v.fg[i] = fg;
  v.gt_idx[i] = static_cast<int32_t>(jj);
  v.labels[i] = c;
  float box[4];
  for (int k = 0; k < 4; ++k) {
    box[k] = has ? v.gt[(b * v.N + jj) * 4 + k] : 0.f;
    v.bboxes[4 * i + k] = box[k];
  }
  for (int64_t k = 0; k < v.nc; ++k) v.tgt_cls[(b * v.nc + k) * v.A + a] = 0.f;
  const float score = fg ? norm : 0.f;
  if (fg) v.tgt_cls[(b * v.nc + c) * v.A + a] = score;
  // The loss's targets in grid cells (v8DetectionLoss divides the boxes by the stride).
  const float s = v.stride[a], ax = v.anc[2 * a], ay = v.anc[2 * a + 1];
  float t[4];
  for (int k = 0; k < 4; ++k) t[k] = box[k] / s;
  const float d[4] = {ax - t[0], ay - t[1], t[2] - ax, t[3] - ay};
  const double hi = static_cast<double>(kRegMax - 1) - 0.01;
  const float sg[4] = {-1.f, -1.f, 1.f, 1.f}, of[4] = {ax, ay, ax, ay};
  for (int k = 0; k < 4; ++k) {
    v.tbox[4 * i + k] = t[k];
    const double dk = static_cast<double>(d[k]);
    v.tltrb[4 * i + k] = static_cast<float>(dk < 0.0 ? 0.0 : (dk > hi ? hi : dk));
    v.w4[4 * i + k] = static_cast<float>(static_cast<double>(score) / 4);
    v.sign[4 * i + k] = sg[k];
    v.offs[4 * i + k] = of[k];
  }
  v.weight[i] = score;
  v.index[i] = i;
  return score;
}

}  // namespace hpcnet::task::detect::tal
