// cat (torch.cat along any dim of same-rank tensors): F::cat, with its
// backward beside it: each input's gradient is its slice of the output gradient along dim. And
// narrow (torch.narrow, the pieces of split/chunk), its transpose: the forward is one slice of
// cat's backward, the backward a cat of the gradient between zeros, on every backend.
// Along the channels of oneDNN's blocked nChw16c layout (CPU convolution outputs), an image's
// C_i channels are C_i / 16 blocks of H * W * 16 values, contiguous: the same runs of C_i * H * W
// values per image as in NCHW. So cat of blocked tensors along dim 1 and narrow of a blocked
// tensor at multiples of 16 run the row-major kernels on the blocked bytes and stay blocked: no
// reorder to NCHW and back around YOLO's C2f, SPPF and head concatenations. A narrow whose slice
// is one run of the input's memory (along dim 0, or along the channels of one image: YOLO's C2f
// chunk at predict time) is a view of the input, without a copy.
#include <cstring>
#include <string>

#include "hpcnet/functional.h"
#include "src/ops/cat/shapes.h"
#include "src/ops/dispatch.h"
#include "src/ops/op_record.h"
#include "src/ops/trace.h"

namespace hpcnet {
namespace {

struct CatNode : Node {
  std::vector<Shape> shapes;  // the inputs' shapes, in order
  int64_t dim = 0;
  const char* name() const override { return "CatBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    // A blocked gradient splits into blocked pieces when every piece is whole 16-channel blocks.
    bool blocked = g_in.layout() == Layout::kBlocked16;
    int64_t start = 0;
    for (const Shape& s : shapes) {
      blocked = blocked && ops::whole_blocks(dim, start, s[1], g_in.size(1));
      start += dim == 1 ? s[1] : 0;
    }
    Tensor g = blocked ? g_in : g_in.contiguous();
    const Layout layout = blocked ? Layout::kBlocked16 : Layout::kStrided;
    std::vector<int64_t> sizes(shapes.size());
    std::vector<Tensor> dxs(shapes.size());  // undefined where the input needs no gradient
    for (size_t i = 0; i < shapes.size(); ++i) {
      sizes[i] = shapes[i][dim];
      if (edges[i].active())
        dxs[i] = Tensor::empty_layout(shapes[i], g.dtype(), g.device(), layout);
    }
    ops::cat_backward(g, sizes, dxs, dim);
    return dxs;
  }
};

}  // namespace

Tensor F::cat(const std::vector<Tensor>& xs_in, int64_t dim_in) {
  HPCNET_REQUIRE(!xs_in.empty(), "cat: needs at least one tensor");
  HPCNET_REQUIRE(xs_in[0].defined(), "cat: tensor 0 is undefined");
  const int64_t dim = ops::wrap_dim(dim_in, xs_in[0].dim());
  const Shape out_shape = ops::cat_shape(xs_in, dim);
  // Blocked inputs stay blocked when all are (see the top); otherwise all become row-major.
  const bool blocked = ops::cat_keeps_blocked(xs_in, dim);
  std::vector<Tensor> xs;
  xs.reserve(xs_in.size());
  for (const Tensor& x : xs_in) xs.push_back(blocked ? x : x.contiguous());
  Tensor y = Tensor::empty_layout(out_shape, xs[0].dtype(), xs[0].device(),
                                  blocked ? Layout::kBlocked16 : Layout::kStrided);
  ops::cat_forward(xs, y, dim);
  bool needs_grad = false;
  for (const Tensor& x : xs_in) needs_grad = needs_grad || any_requires_grad({&x});
  if (needs_grad) {
    auto node = std::make_shared<CatNode>();
    node->dim = dim;
    for (const Tensor& x : xs) node->shapes.push_back(x.shape());
    // record() takes a fixed list of inputs: connect the output with none, then add one edge per
    // input as record() would.
    record(node, {}, y);
    for (const Tensor& x : xs_in) {
      Node::Edge e;
      if (x.requires_grad()) {
        if (x.grad_fn())
          e.fn = x.grad_fn();
        else
          e.leaf = x.impl_ptr();
      }
      node->edges.push_back(std::move(e));
    }
  }
  trace::add(op_record::cat, xs_in, y, {{"dim", dim}});
  return y;
}

namespace {
struct NarrowNode : Node {
  Shape in_shape;
  int64_t dim = 0, start = 0;
  const char* name() const override { return "NarrowBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    // A blocked gradient (its slice starts at a multiple of 16: NarrowNode is blocked only then)
    // goes back blocked; zeros are the same bytes in either layout.
    const bool blocked = g_in.layout() == Layout::kBlocked16 &&
                         ops::whole_blocks(dim, start, g_in.size(1), in_shape[1]);
    Tensor g = blocked ? g_in : g_in.contiguous();
    Shape before = in_shape, after = in_shape;
    before[dim] = start;
    after[dim] = in_shape[dim] - start - g.size(dim);
    const Layout layout = blocked ? Layout::kBlocked16 : Layout::kStrided;
    auto zeros = [&](const Shape& s) {  // the bytes of zeros are zeros in either layout
      if (!blocked) return Tensor::zeros(s, g.dtype(), g.device());
      Tensor z = Tensor::empty_layout(s, g.dtype(), g.device(), layout);  // (CPU)
      if (z.numel() > 0) std::memset(z.raw_data(), 0, z.nbytes());
      return z;
    };
    Tensor dx = Tensor::empty_layout(in_shape, g.dtype(), g.device(), layout);
    ops::cat_forward({zeros(before), g, zeros(after)}, dx, dim);
    return {dx};
  }
};
}  // namespace

namespace {
// Whether every slice of dense x along dim is one run of its memory: each dim before `dim` has
// extent 1 (a split along the first dim, or along the channels of a batch of one image). For a
// blocked x the caller has checked that the slice is whole 16-channel blocks, which lie as
// NCHW's channels do (see the top).
bool one_run(const Tensor& x, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d)
    if (x.size(d) != 1) return false;
  return true;
}
}  // namespace

Tensor F::narrow(const Tensor& x_in, int64_t dim_in, int64_t start, int64_t length) {
  HPCNET_REQUIRE(x_in.defined(), "narrow: the input is an undefined tensor");
  const int64_t rank = x_in.dim();
  HPCNET_REQUIRE(rank >= 1, "narrow: a zero-dimensional tensor cannot be narrowed");
  HPCNET_REQUIRE(dim_in >= -rank && dim_in < rank,
                 "narrow: dim " + std::to_string(dim_in) + " is out of range for input " +
                     shape_str(x_in.shape()));
  const int64_t dim = dim_in < 0 ? dim_in + rank : dim_in;
  const int64_t size = x_in.size(dim);
  HPCNET_REQUIRE(start >= 0 && length >= 0 && start + length <= size,
                 "narrow: start " + std::to_string(start) + " and length " +
                     std::to_string(length) + " do not fit in dim " + std::to_string(dim) +
                     " of input " + shape_str(x_in.shape()) + " (need 0 <= start, 0 <= length, " +
                     "start + length <= " + std::to_string(size) + ")");
  // Whole 16-channel blocks of a blocked tensor stay blocked (see the top).
  const bool blocked = x_in.layout() == Layout::kBlocked16 &&
                       ops::whole_blocks(dim, start, length, x_in.size(1));
  Tensor x = blocked ? x_in : x_in.contiguous();
  Shape out_shape = x.shape();
  out_shape[dim] = length;
  Tensor y;
  if (one_run(x, dim)) {
    // The slice is one run of x's memory: a view of it, no copy. Nothing in hpcnet writes into
    // an op's output in place, and the autograd engine copies a gradient whose storage is shared.
    int64_t inner = 1;
    for (int64_t d = dim + 1; d < rank; ++d) inner *= x.size(d);
    y = x.detach();
    y.impl()->offset += start * inner;
    y.impl()->shape = out_shape;
    y.impl()->strides = contiguous_strides(out_shape);
  } else {
    y = Tensor::empty_layout(out_shape, x.dtype(), x.device(),
                             blocked ? Layout::kBlocked16 : Layout::kStrided);
    std::vector<Tensor> pieces = {Tensor(), y, Tensor()};
    ops::cat_backward(x, {start, length, size - start - length}, pieces, dim);
  }
  if (any_requires_grad({&x_in})) {
    auto node = std::make_shared<NarrowNode>();
    node->in_shape = x.shape();
    node->dim = dim;
    node->start = start;
    record(node, {&x_in}, y);
  }
  trace::add(op_record::narrow, {x_in}, y, {{"dim", dim}, {"start", start}, {"length", length}});
  return y;
}

}  // namespace hpcnet
