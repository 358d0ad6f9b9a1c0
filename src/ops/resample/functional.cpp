// global_avg_pool2d, subsample_pad (the ResNet option-A shortcut), dropout and
// upsample_nearest2d (the U-Net decoder's): the F:: functions, with their
// backward formulas:
//   global_avg_pool2d: dx = dy / (H W) broadcast;  subsample_pad: dx = dy at the sampled positions
//   of the kept channels, 0 elsewhere;  dropout: dx = dy * mask / (1 - p);
//   upsample_nearest2d (scale s): dx[i, j] = sum of dy over the s x s block [i s, j s].
#include "hpcnet/functional.h"
#include "hpcnet/rng.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {
struct GlobalAvgPoolNode : Node {
  Shape x_shape;
  const char* name() const override { return "GlobalAvgPool2dBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(x_shape, g.dtype(), g.device());
    ops::global_avg_pool2d_backward(g.contiguous(), dx);
    return {dx};
  }
};

struct SubsamplePadNode : Node {
  Shape x_shape;
  int64_t stride = 1, pad = 0;
  const char* name() const override { return "SubsamplePadBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(x_shape, g.dtype(), g.device());
    ops::subsample_pad_backward(g.contiguous(), dx, stride, pad);
    return {dx};
  }
};

struct DropoutNode : Node {
  Tensor mask;
  double scale = 1;
  const char* name() const override { return "DropoutBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    Tensor g = g_in.contiguous();
    Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
    ops::mask_scale(g, mask, scale, dx);
    return {dx};
  }
  void release() override { mask = Tensor(); }
};

struct UpsampleNearest2dNode : Node {
  Shape x_shape;  // (N, C, H, W)
  int64_t scale = 1;
  const char* name() const override { return "UpsampleNearest2dBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    // A blocked gradient (the forward kept x's blocked layout) gives a blocked dx.
    const bool blocked = g.layout() == Layout::kBlocked16;
    Tensor dx = Tensor::empty_layout(x_shape, g.dtype(), g.device(),
                                     blocked ? Layout::kBlocked16 : Layout::kStrided);
    ops::upsample_nearest2d_backward(blocked ? g : g.contiguous(), dx, scale);
    return {dx};
  }
};
struct UpsampleBilinear2dNode : Node {
  Shape x_shape;  // (N, C, H, W)
  bool align_corners = false;
  const char* name() const override { return "UpsampleBilinear2dBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(x_shape, g.dtype(), g.device());
    ops::upsample_bilinear2d_backward(g.contiguous(), dx, align_corners);
    return {dx};
  }
};
}  // namespace

Tensor F::global_avg_pool2d(const Tensor& x_in) {
  HPCNET_CHECK(x_in.defined(), "global_avg_pool2d: the input is an undefined tensor");
  HPCNET_CHECK(x_in.dim() == 4,
               "global_avg_pool2d: input must be (N, C, H, W), got " + shape_str(x_in.shape()));
  // As torch's adaptive_avg_pool2d: only the batch may be empty (an average of 0 values is 0/0).
  HPCNET_CHECK(
      x_in.size(1) >= 1 && x_in.size(2) >= 1 && x_in.size(3) >= 1,
      "global_avg_pool2d: input " + shape_str(x_in.shape()) + " must have C, H and W >= 1");
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), x.device());
  ops::global_avg_pool2d_forward(x, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<GlobalAvgPoolNode>();
    node->x_shape = x.shape();
    record(node, {&x_in}, y);
  }
  trace::add(op_record::global_avg_pool2d, {x_in}, y);
  return y;
}

Tensor F::subsample_pad(const Tensor& x_in, int64_t stride, int64_t pad) {
  HPCNET_CHECK(x_in.defined(), "subsample_pad: the input is an undefined tensor");
  HPCNET_CHECK(x_in.dim() == 4,
               "subsample_pad: input must be (N, C, H, W), got " + shape_str(x_in.shape()));
  HPCNET_CHECK(stride >= 1 && pad >= 0,
               "subsample_pad: need stride >= 1 and pad >= 0, got stride " +
                   std::to_string(stride) + " and pad " + std::to_string(pad));
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({x.size(0), x.size(1) + 2 * pad, (x.size(2) + stride - 1) / stride,
                            (x.size(3) + stride - 1) / stride},
                           x.dtype(), x.device());
  ops::subsample_pad_forward(x, y, stride, pad);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<SubsamplePadNode>();
    node->x_shape = x.shape();
    node->stride = stride;
    node->pad = pad;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::subsample_pad, {x_in}, y, {{"stride", stride}, {"pad", pad}});
  return y;
}

Tensor F::dropout(const Tensor& x_in, double p, bool training) {
  HPCNET_CHECK(x_in.defined(), "dropout: the input is an undefined tensor");
  HPCNET_CHECK(p >= 0 && p <= 1,
               "dropout: probability must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0) return x_in;
  Tensor x = x_in.contiguous();
  // The mask is drawn on the host from the default generator (reproducible under manual_seed on
  // every device), then moved to x's device.
  Tensor mask = Tensor::empty(x.shape(), DType::kUInt8);
  uint8_t* pm = mask.data<uint8_t>();
  Rng& rng = default_rng();
  for (int64_t i = 0; i < mask.numel(); ++i) pm[i] = rng.uniform() >= p ? 1 : 0;
  if (!x.device().is_cpu()) mask = mask.to(x.device());
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::mask_scale(x, mask, scale, y);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<DropoutNode>();
    node->mask = mask;
    node->scale = scale;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::dropout, {x_in}, y);  // only in training mode (eval returns x)
  return y;
}

Tensor F::upsample_nearest2d(const Tensor& x_in, int64_t scale) {
  HPCNET_REQUIRE(x_in.defined(), "upsample_nearest2d: the input is an undefined tensor");
  HPCNET_REQUIRE(x_in.dim() == 4,
                 "upsample_nearest2d: input must be (N, C, H, W), got " + shape_str(x_in.shape()));
  HPCNET_REQUIRE(scale >= 1, "upsample_nearest2d: scale must be an integer >= 1, got " +
                                 std::to_string(scale) + " for input " + shape_str(x_in.shape()));
  HPCNET_REQUIRE(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
                 std::string("upsample_nearest2d: input must be float32 or float64, got ") +
                     dtype_name(x_in.dtype()));
  // Blocked activations stay blocked (the concatenation after it in YOLO's head and the U-Net
  // decoder then stays blocked too); strided views become row-major.
  const bool blocked = x_in.layout() == Layout::kBlocked16;
  Tensor x = blocked ? x_in : x_in.contiguous();
  Tensor y = Tensor::empty_layout({x.size(0), x.size(1), x.size(2) * scale, x.size(3) * scale},
                                  x.dtype(), x.device(),
                                  blocked ? Layout::kBlocked16 : Layout::kStrided);
  ops::upsample_nearest2d_forward(x, y, scale);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<UpsampleNearest2dNode>();
    node->x_shape = x.shape();
    node->scale = scale;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::upsample_nearest2d, {x_in}, y, {{"scale", scale}});
  return y;
}

Tensor F::upsample_bilinear2d(const Tensor& x_in, int64_t out_h, int64_t out_w,
                              bool align_corners) {
  HPCNET_REQUIRE(x_in.defined(), "upsample_bilinear2d: the input is an undefined tensor");
  HPCNET_REQUIRE(x_in.dim() == 4,
                 "upsample_bilinear2d: input must be (N, C, H, W), got " + shape_str(x_in.shape()));
  HPCNET_REQUIRE(out_h >= 1 && out_w >= 1 && x_in.size(2) >= 1 && x_in.size(3) >= 1,
                 "upsample_bilinear2d: sizes must be >= 1, got input " + shape_str(x_in.shape()) +
                     " and output " + std::to_string(out_h) + "x" + std::to_string(out_w));
  HPCNET_REQUIRE(x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kFloat64,
                 std::string("upsample_bilinear2d: input must be float32 or float64, got ") +
                     dtype_name(x_in.dtype()));
  Tensor x = x_in.contiguous();  // blocked activations become row-major
  Tensor y = Tensor::empty({x.size(0), x.size(1), out_h, out_w}, x.dtype(), x.device());
  ops::upsample_bilinear2d_forward(x, y, align_corners);
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<UpsampleBilinear2dNode>();
    node->x_shape = x.shape();
    node->align_corners = align_corners;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::upsample_bilinear2d, {x_in}, y, {{"align_corners", align_corners}});
  return y;
}

}  // namespace hpcnet
