// max_pool2d: F::max_pool2d. Backward routes each output gradient to the
// input position that held the window's maximum (kept in the forward's workspace).
#include "hpcnet/functional.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {
struct MaxPool2dNode : Node {
  Tensor workspace;
  Shape x_shape;
  DType dtype;
  Device device;
  ops::Pool2dParams p;
  const char* name() const override { return "MaxPool2dBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_out) override {
    Tensor dx = Tensor::empty(x_shape, dtype, device);
    ops::max_pool2d_backward(grad_out.contiguous(), workspace, dx, p);
    return {dx};
  }
  void release() override { workspace = Tensor(); }
};
}  // namespace

Tensor F::max_pool2d(const Tensor& x_in, int64_t kernel_size, int64_t stride, int64_t padding) {
  if (stride == 0) stride = kernel_size;
  HPCNET_CHECK(x_in.defined(), "max_pool2d: the input is an undefined tensor");
  HPCNET_CHECK(x_in.dim() == 4, "max_pool2d: input must be (N, C, H, W), got " +
                                    shape_str(x_in.shape()));
  HPCNET_CHECK(kernel_size >= 1 && stride >= 1 && padding >= 0 && 2 * padding <= kernel_size,
               "max_pool2d: need kernel_size >= 1, stride >= 1, 0 <= padding <= kernel_size / 2, "
               "got kernel_size " + std::to_string(kernel_size) + ", stride " +
                   std::to_string(stride) + ", padding " + std::to_string(padding));
  Tensor x = x_in.contiguous();
  ops::Pool2dParams p{kernel_size, kernel_size, stride, stride, padding, padding};
  int64_t oh = ops::conv_out_size(x.size(2), kernel_size, stride, padding);
  int64_t ow = ops::conv_out_size(x.size(3), kernel_size, stride, padding);
  // (conv_out_size truncates towards 0, so a too-large window with stride > 1 still gives 1.)
  const bool fits =
      x.size(2) + 2 * padding >= kernel_size && x.size(3) + 2 * padding >= kernel_size;
  HPCNET_CHECK(fits && oh > 0 && ow > 0, "max_pool2d: window " + std::to_string(kernel_size) +
                                             " larger than input " + shape_str(x.shape()));
  Tensor y = Tensor::empty({x.size(0), x.size(1), oh, ow}, x.dtype(), x.device());
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<MaxPool2dNode>();
    ops::max_pool2d_forward(x, y, &node->workspace, p);
    node->x_shape = x.shape();
    node->dtype = x.dtype();
    node->device = x.device();
    node->p = p;
    record(node, {&x_in}, y);
  } else {
    ops::max_pool2d_forward(x, y, nullptr, p);
  }
  trace::add(op_record::max_pool2d, {x_in}, y,
             {{"kernel_size", kernel_size}, {"stride", stride}, {"padding", padding}});
  return y;
}

}  // namespace hpcnet
