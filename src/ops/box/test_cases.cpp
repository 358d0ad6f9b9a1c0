// The test cases of bce_with_logits, gather_anchors, dfl_expect, ciou_loss and dfl_loss
// (src/ops/op_cases.h; tests/ops/op_checks.cpp runs them as Ops/<op>.*): samples for the
// finite-difference and CUDA parity checks, error inputs and PyTorch goldens (Ultralytics'
// bbox_iou, DFLoss and DFL in make_golden.py). Compiled into the test binary only.
#include <string>
#include <vector>

#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/op_cases.h"

namespace hpcnet {
namespace {

using namespace ops::cases;
using D = Device;

std::vector<ops::SampleCase> bce_with_logits_samples() {
  return {
      {"bce_with_logits, soft targets",
       [](auto& v) {
         Tensor t =
             Tensor::from_vector_f64({0, 1, 0.3, 0.9, 0, 0, 1, 0.5, 0.05, 0, 0.7, 1}, {3, 4});
         return F::bce_with_logits(v[0], t);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 4}, r, 4.0)};
       }},
      {"bce_with_logits of (6, 50), targets 0.25",
       [](auto& v) {
         return F::bce_with_logits(v[0], like(Tensor::full({6, 50}, 0.25), v[0]));
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({6, 50}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> bce_with_logits_errors() {
  return {
      err("target of another shape",
          [](D d) {
            return F::bce_with_logits(f32({2, 3}, d), f32({3, 2}, d));
          },
          {"target", "(2, 3)", "(3, 2)"}),
      err("int64 target",
          [](D d) {
            return F::bce_with_logits(f32({2, 3}, d), i64({2, 3}, d));
          },
          {"target", "int64"}),
      err("int64 logits",
          [](D d) {
            return F::bce_with_logits(i64({2, 3}, d), i64({2, 3}, d));
          },
          {"int64"}),
      ok_value(
          "empty input (torch: a sum of 0)",
          [](D d) {
            return F::bce_with_logits(f32({0, 3}, d), f32({0, 3}, d));
          },
          0.0),
  };
}

std::vector<ops::SampleCase> gather_anchors_samples() {
  return {
      {"gather_anchors with a repeated anchor",
       [](auto& v) {
         return F::gather_anchors(v[0], Tensor::from_labels({5, 0, 7, 5}));
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 3, 4}, r)};
       }},
      {"gather_anchors of (2, 5, 14), a repeated anchor",
       [](auto& v) {
         return F::gather_anchors(v[0], like(Tensor::from_labels({0, 13, 7, 13, 27}), v[0]));
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({2, 5, 14}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> gather_anchors_errors() {
  return {
      err("input of rank 2",
          [](D d) {
            return F::gather_anchors(f32({2, 3}, d), i64({1}, d));
          },
          {"(2, 3)"}),
      err("float index",
          [](D d) {
            return F::gather_anchors(f32({2, 3, 4}, d), f32({1}, d));
          },
          {"idx", "float32"}),
      err("index past B A",
          [](D) {
            Tensor idx = Tensor::zeros({2}, DType::kInt64);
            idx.data<int64_t>()[1] = 8;
            return F::gather_anchors(f32({2, 3, 4}, cpu_device()), idx);
          },
          {"idx[1] = 8", "(2, 3, 4)"}),
      ok("no anchors (an empty result)",
         [](D d) {
           return F::gather_anchors(f32({2, 3, 4}, d), i64({0}, d));
         },
         {0, 3}),
  };
}

std::vector<ops::SampleCase> dfl_expect_samples() {
  return {
      {op_name::dfl_expect, [](auto& v) { return F::dfl_expect(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({5, 16}, r, 2.0)};
       },
       ops::kCheckGrad | ops::kCheckCudaParity},
      {"dfl_expect of (37, 16)", [](auto& v) { return F::dfl_expect(v[0]); },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({37, 16}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> dfl_expect_errors() {
  return {
      err("input of rank 3",
          [](D d) {
            return F::dfl_expect(f32({2, 4, 16}, d));
          },
          {"(2, 4, 16)"}),
      err("0 bins",
          [](D d) {
            return F::dfl_expect(f32({3, 0}, d));
          },
          {"(3, 0)"}),
      err("int64 input",
          [](D d) {
            return F::dfl_expect(i64({3, 16}, d));
          },
          {"int64"}),
      ok("no rows (an empty result)",
         [](D d) {
           return F::dfl_expect(f32({0, 16}, d));
         },
         {0}),
  };
}

std::vector<ops::SampleCase> ciou_loss_samples() {
  return {
      {"ciou_loss, full derivative (alpha_grad)",
       [](auto& v) {
         // Boxes (x1, y1, x2, y2) from v[0] (M, 4) as (cx, cy, log w, log h) offsets, so sizes
         // stay positive and no min/max ties occur.
         Tensor target =
             Tensor::from_vector_f64({2, 3, 6, 9, 0, 0, 4, 4, 10, 10, 12, 20, -3, 1, 5, 2}, {4, 4});
         Tensor w = Tensor::from_vector_f64({1.0, 0.5, 2.0, 0.25}, {4});
         return F::ciou_loss(v[0], target, w, true);
       },
       [](Rng& r) {
         Tensor p = Tensor::from_vector_f64(
             {2.5, 2.1, 6.7, 8.2, 1.3, -0.4, 3.1, 5.6, 9.1, 12.2, 14.3, 17.7, -2.2, 0.3, 4.1, 2.9},
             {4, 4});
         double* pp = p.data<double>();
         for (int64_t i = 0; i < 16; ++i) pp[i] += 0.05 * r.normal();
         return std::vector<Tensor>{p};
       }},
      {"ciou_loss of disjoint boxes, full derivative",
       [](auto& v) {
         Tensor target = Tensor::from_vector_f64({10, 10, 14, 11}, {1, 4});
         return F::ciou_loss(v[0], target, Tensor::from_vector_f64({1.5}, {1}), true);
       },
       [](Rng&) {
         return std::vector<Tensor>{Tensor::from_vector_f64({0, 1, 3, 7}, {1, 4})};
       }},
      {"ciou_loss of 3 boxes, offsets from fixed boxes",
       [](auto& v) {
         Tensor q =
             like(Tensor::from_vector_f64({0, 0, 4, 4, 1, 2, 3, 9, -2, -2, 5, 1}, {3, 4}), v[0]);
         Tensor w = like(Tensor::from_vector_f64({1, 0.5, 2}, {3}), v[0]);
         Tensor p = F::add(
             v[0],
             like(Tensor::from_vector_f64({0, 0, 5, 5, 1, 1, 4, 8, -1, -3, 4, 2}, {3, 4}), v[0]));
         return F::ciou_loss(p, q, w);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({3, 4}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> ciou_loss_errors() {
  return {
      err("boxes of 5 values",
          [](D d) {
            return F::ciou_loss(f32({3, 5}, d), f32({3, 5}, d), f32({3}, d));
          },
          {"(3, 5)"}),
      err("target of another count",
          [](D d) {
            return F::ciou_loss(f32({3, 4}, d), f32({2, 4}, d), f32({3}, d));
          },
          {"target", "(2, 4)", "(3, 4)"}),
      err("float64 weight with float32 boxes",
          [](D d) {
            return F::ciou_loss(f32({3, 4}, d), f32({3, 4}, d), f64({3}, d));
          },
          {"weight", "float64"}),
      ok_value(
          "no boxes (a sum of 0)",
          [](D d) {
            return F::ciou_loss(f32({0, 4}, d), f32({0, 4}, d), f32({0}, d));
          },
          0.0),
  };
}

std::vector<ops::SampleCase> dfl_loss_samples() {
  return {
      {"dfl_loss, targets inside and at both clamps",
       [](auto& v) {
         Tensor t = Tensor::from_vector_f64({0.3, 7.5, 14.99, 20.0, -1.0, 3.0}, {6});
         Tensor w = Tensor::from_vector_f64({1, 0.5, 2, 1, 0.25, 1}, {6});
         return F::dfl_loss(v[0], t, w);
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({6, 16}, r, 2.0)};
       }},
      {"dfl_loss of (4, 16)",
       [](auto& v) {
         Tensor t = like(Tensor::from_vector_f64({0.5, 3.2, 14.99, 9.0}, {4}), v[0]);
         return F::dfl_loss(v[0], t, like(Tensor::full({4}, 0.5), v[0]));
       },
       [](Rng& r) {
         return std::vector<Tensor>{randn64({4, 16}, r)};
       },
       ops::kCheckCudaParity},
  };
}

std::vector<ops::ErrorCase> dfl_loss_errors() {
  return {
      err("1 bin",
          [](D d) {
            return F::dfl_loss(f32({3, 1}, d), f32({3}, d), f32({3}, d));
          },
          {"(3, 1)"}),
      err("target of another count",
          [](D d) {
            return F::dfl_loss(f32({3, 16}, d), f32({4}, d), f32({3}, d));
          },
          {"target", "(4,)", "(3,)"}),
      err("int64 target",
          [](D d) {
            return F::dfl_loss(f32({3, 16}, d), i64({3}, d), f32({3}, d));
          },
          {"target", "int64"}),
      ok_value(
          "no rows (a sum of 0)",
          [](D d) {
            return F::dfl_loss(f32({0, 16}, d), f32({0}, d), f32({0}, d));
          },
          0.0),
  };
}

}  // namespace

// The goldens' targets and weights are constants of the fixture (no gradient), passed after the
// inputs: v[1], v[2].
ops::OpCases op_cases::bce_with_logits() {
  return {.samples = bce_with_logits_samples(),
          .errors = bce_with_logits_errors(),
          .goldens = {{op_name::bce_with_logits,
                       {"x"},
                       [](auto& v) { return F::bce_with_logits(v[0], v[1]); },
                       {"target"}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::gather_anchors() {
  return {.samples = gather_anchors_samples(),
          .errors = gather_anchors_errors(),
          .goldens = {{op_name::gather_anchors,
                       {"x", "idx"},
                       [](auto& v) { return F::gather_anchors(v[0], v[1]); }}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::dfl_expect() {
  return {.samples = dfl_expect_samples(),
          .errors = dfl_expect_errors(),
          .goldens = {{op_name::dfl_expect, {"x"}, [](auto& v) { return F::dfl_expect(v[0]); }}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::ciou_loss() {
  return {.samples = ciou_loss_samples(),
          .errors = ciou_loss_errors(),
          .goldens = {{op_name::ciou_loss,
                       {"pred"},
                       [](auto& v) { return F::ciou_loss(v[0], v[1], v[2]); },
                       {"target", "weight"}},
                      {"ciou_loss_alpha_grad",
                       {"pred"},
                       [](auto& v) { return F::ciou_loss(v[0], v[1], v[2], true); },
                       {"target", "weight"}}},
          .no_bf16 = kNoBf16};
}

ops::OpCases op_cases::dfl_loss() {
  return {.samples = dfl_loss_samples(),
          .errors = dfl_loss_errors(),
          .goldens = {{op_name::dfl_loss,
                       {"pred"},
                       [](auto& v) { return F::dfl_loss(v[0], v[1], v[2]); },
                       {"target", "weight"}},
                      {"dfl_loss_r8",
                       {"pred"},
                       [](auto& v) { return F::dfl_loss(v[0], v[1], v[2]); },
                       {"target", "weight"}}},
          .no_bf16 = kNoBf16};
}

}  // namespace hpcnet
