// The shape rules of cat and narrow, shared by the kernel API (kernels.cpp) and F::cat / F::narrow
// (functional.cpp): torch's dim wrap, the output shape, and when the blocked layout is kept.
#pragma once

#include <string>
#include <vector>

#include "src/ops/dispatch.h"

namespace hpcnet::ops {

// torch's wrap of a possibly negative dim for a rank (InputError outside [-rank, rank)).
inline int64_t wrap_dim(int64_t dim, int64_t rank) {
  HPCNET_REQUIRE(rank >= 1, "cat: zero-dimensional tensors cannot be concatenated");
  HPCNET_REQUIRE(dim >= -rank && dim < rank, "cat: dim " + std::to_string(dim) +
                                                 " is out of range for tensors of rank " +
                                                 std::to_string(rank));
  return dim < 0 ? dim + rank : dim;
}

// The shape of cat(xs, dim) (dim already wrapped); InputError naming the offending input when
// ranks, dtypes or the sizes outside dim disagree.
inline Shape cat_shape(const std::vector<Tensor>& xs, int64_t dim) {
  HPCNET_REQUIRE(!xs.empty(), "cat: needs at least one tensor");
  const Tensor& first = xs[0];
  Shape out = first.shape();
  out[dim] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    HPCNET_REQUIRE(x.defined(), "cat: tensor " + std::to_string(i) + " is undefined");
    const std::string which = "cat: tensor " + std::to_string(i) + " " + shape_str(x.shape());
    HPCNET_REQUIRE(x.dim() == first.dim(),
                   which + " has another rank than tensor 0 " + shape_str(first.shape()));
    HPCNET_REQUIRE(x.dtype() == first.dtype(), which + " has dtype " + dtype_name(x.dtype()) +
                                                   ", tensor 0 " + dtype_name(first.dtype()));
    for (int64_t d = 0; d < x.dim(); ++d)
      HPCNET_REQUIRE(d == dim || x.size(d) == first.size(d),
                     which + " does not match tensor 0 " + shape_str(first.shape()) +
                         " outside dim " + std::to_string(dim));
    out[dim] += x.size(dim);
  }
  return out;
}

// Whether cat(xs, dim) keeps the blocked layout: channels of blocked tensors only.
inline bool cat_keeps_blocked(const std::vector<Tensor>& xs, int64_t dim) {
  if (dim != 1 || xs.empty()) return false;
  for (const Tensor& x : xs)
    if (!x.defined() || x.layout() != Layout::kBlocked16) return false;
  return true;
}

// Whether a piece of `length` channels starting at channel `start` of a blocked tensor of
// `channels` channels is whole 16-channel blocks (and so stays blocked), along dim 1 only.
inline bool whole_blocks(int64_t dim, int64_t start, int64_t length, int64_t channels) {
  return dim == 1 && start % 16 == 0 && length % 16 == 0 && channels % 16 == 0 && length > 0;
}

}  // namespace hpcnet::ops
