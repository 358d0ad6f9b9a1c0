// The staged assigner and loss (src/task/detect/tal_math.h, v8_detection_loss_staged): what the GPU
// computes, run here with the same per-element functions in host loops, against the plain C++
// path (tal_assign, whose assignment matches Ultralytics' in tests/nn/models/test_yolo_golden.cpp):
// the assignment bit for bit, the loss, its parts and its gradients to float summation order. The
// inputs make every stage's awkward case happen: gts under 16 px (enlarged candidate boxes),
// overlapping gts (anchors claimed twice), gts with fewer candidates than topk, candidates of zero
// overlap (metric ties), an image without objects, a zero box, and a batch without any object.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "src/task/detect/yolo_loss.h"

namespace hpcnet {
namespace {

namespace det = task::detect;

struct Case {
  Tensor boxes, scores;  // (B, 64, A), (B, nc, A) leaves
  std::vector<det::ImageTargets> gts;
  int64_t side = 64, nc = 5;
};

Case make_case(uint64_t seed, bool no_objects = false) {
  Case c;
  const int64_t B = 4, A = 8 * 8 + 4 * 4 + 2 * 2;
  Rng rng(seed, 0);
  std::vector<float> bx(B * 64 * A), sc(B * c.nc * A);
  for (float& v : bx) v = static_cast<float>(rng.normal() * 2);
  // Every other anchor of image 0 predicts a point (all four sides in bin 0): zero overlap, so
  // metric 0, and its candidates tie; topk must take the lowest anchors among them.
  for (int64_t a = 0; a < A; a += 2)
    for (int64_t k = 0; k < 4; ++k) bx[(k * 16) * A + a] += 30.f;
  for (float& v : sc) v = static_cast<float>(rng.normal() * 1.5 - 1);
  c.boxes = Tensor::from_vector(bx, {B, 64, A});
  c.scores = Tensor::from_vector(sc, {B, c.nc, A});
  c.gts.resize(B);
  if (no_objects) return c;
  auto add = [&](int64_t b, float x1, float y1, float x2, float y2, int64_t label) {
    c.gts[b].boxes.push_back({x1, y1, x2, y2});
    c.gts[b].labels.push_back(label);
  };
  add(0, 4, 4, 40, 36, 1);    // large
  add(0, 10, 8, 44, 30, 3);   // overlapping the first: anchors claimed by both
  add(0, 50, 50, 56, 58, 2);  // under 16 px: enlarged candidate box
  add(1, 0, 0, 0, 0, 4);      // a zero box (masked)
  add(1, 20, 20, 60, 62, 0);
  // image 2: no objects
  for (int k = 0; k < 7; ++k) {  // many small random boxes on image 3
    const float x = rng.uniform(0.f, 50.f), y = rng.uniform(0.f, 50.f);
    add(3, x, y, x + rng.uniform(2.f, 14.f), y + rng.uniform(2.f, 14.f), k % c.nc);
  }
  return c;
}

// The staged path's assignment equals tal_assign's exactly.
void expect_same_assignment(const det::Assignment& a, const det::Assignment& b, bool any_fg) {
  ASSERT_EQ(a.fg.size(), b.fg.size());
  int fg = 0;
  for (size_t i = 0; i < a.fg.size(); ++i) {
    EXPECT_EQ(a.fg[i], b.fg[i]) << "fg of anchor " << i;
    EXPECT_EQ(a.gt_idx[i], b.gt_idx[i]) << "gt of anchor " << i;
    EXPECT_EQ(a.labels[i], b.labels[i]) << "label of anchor " << i;
    fg += a.fg[i];
  }
  EXPECT_EQ(a.bboxes, b.bboxes);
  EXPECT_EQ(a.scores, b.scores);
  EXPECT_EQ(fg > 0, any_fg) << fg << " foreground anchors";
}

double rel_diff(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = x.to_vector(), b = y.to_vector();
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(b[i])));
  }
  return m > 0 ? d / m : d;
}

struct LossRun {
  det::LossResult r;
  Tensor dboxes, dscores;
};

LossRun run(const Case& c, bool staged, Device dev = cpu_device()) {
  Tensor bx = c.boxes.to(dev), sc = c.scores.to(dev);
  bx.set_requires_grad(true);
  sc.set_requires_grad(true);
  LossRun out;
  out.r = staged ? det::v8_detection_loss_staged(bx, sc, c.side, c.side, c.gts, {}, true)
                 : det::v8_detection_loss(bx, sc, c.side, c.side, c.gts);
  out.r.total.backward();
  out.dboxes = bx.grad().to(cpu_device());
  out.dscores = sc.grad().to(cpu_device());
  return out;
}

TEST(TalStaged, AssignmentIsTalAssignsBitForBit) {
  for (uint64_t seed : {1, 2, 3}) {
    const Case c = make_case(seed);
    const LossRun plain = run(c, false), staged = run(c, true);
    expect_same_assignment(staged.r.assignment, plain.r.assignment, true);
  }
  // No object in the whole batch: Ultralytics' early return (label nc everywhere, no target).
  const Case e = make_case(4, true);
  const LossRun plain = run(e, false), staged = run(e, true);
  expect_same_assignment(staged.r.assignment, plain.r.assignment, false);
  EXPECT_EQ(staged.r.assignment.labels[0], e.nc);
}

// Every anchor in the loss, the background with weight 0: the same total, parts and gradients as
// the foreground list of the plain path, to float summation order.
TEST(TalStaged, DenseLossIsTheForegroundLoss) {
  for (uint64_t seed : {1, 5}) {
    const Case c = make_case(seed);
    const LossRun plain = run(c, false), staged = run(c, true);
    const auto a = staged.r.items(), b = plain.r.items();
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(a[k], b[k], 1e-5 * std::abs(b[k]) + 1e-7) << k;
    EXPECT_NEAR(staged.r.total.item(), plain.r.total.item(), 1e-5 * plain.r.total.item());
    EXPECT_LT(rel_diff(staged.dboxes, plain.dboxes), 1e-5);
    EXPECT_LT(rel_diff(staged.dscores, plain.dscores), 1e-5);
  }
  const Case e = make_case(4, true);  // no objects: the class loss alone, no NaN from the rest
  const LossRun plain = run(e, false), staged = run(e, true);
  EXPECT_EQ(staged.r.items()[0], 0.0);
  EXPECT_NEAR(staged.r.items()[1], plain.r.items()[1], 1e-5 * plain.r.items()[1]);
  EXPECT_LT(rel_diff(staged.dboxes, plain.dboxes), 1e-5);
  EXPECT_LT(rel_diff(staged.dscores, plain.dscores), 1e-5);
}

// On a GPU the staged path is what v8_detection_loss runs: against the CPU's plain path.
// powf on the device may differ from the host's in the last bit, which can reorder two
// candidates of nearly equal metric: at most 2 anchors' assignment may differ. Where none does,
// the loss is within 1e-4 and the gradients within 1e-3 (float summation order); where one does,
// the loss within 1e-2. The batch without objects checks the padding rows and Ultralytics' label.
TEST(TalStaged, CudaMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  for (uint64_t seed : {1, 2, 0}) {
    const Case c = seed ? make_case(seed) : make_case(4, true);
    SCOPED_TRACE(seed ? "seed " + std::to_string(seed) : std::string("no objects"));
    const LossRun cpu = run(c, false), gpu = run(c, true, cuda_device(0));
    int differ = 0;
    for (size_t i = 0; i < cpu.r.assignment.fg.size(); ++i)
      differ += gpu.r.assignment.fg[i] != cpu.r.assignment.fg[i] ||
                (cpu.r.assignment.fg[i] &&
                 gpu.r.assignment.gt_idx[i] != cpu.r.assignment.gt_idx[i]);
    EXPECT_LE(differ, 2);
    if (!seed) EXPECT_EQ(gpu.r.assignment.labels[0], c.nc);
    const double tol = differ == 0 ? 1e-4 : 1e-2;
    EXPECT_NEAR(gpu.r.total.item(), cpu.r.total.item(), tol * cpu.r.total.item());
    if (differ == 0) {
      EXPECT_LT(rel_diff(gpu.dboxes, cpu.dboxes), 1e-3);
      EXPECT_LT(rel_diff(gpu.dscores, cpu.dscores), 1e-3);
    }
    // And through v8_detection_loss itself (the path training takes on CUDA).
    Tensor bx = c.boxes.to(cuda_device(0)), sc = c.scores.to(cuda_device(0));
    det::LossResult r = det::v8_detection_loss(bx, sc, c.side, c.side, c.gts);
    EXPECT_NEAR(r.total.item(), cpu.r.total.item(), tol * cpu.r.total.item());
  }
}

}  // namespace
}  // namespace hpcnet
