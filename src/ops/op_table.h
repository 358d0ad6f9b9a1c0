// The op table: one line per op, the single list that names every differentiable op. Each op
// NAME has a backend-neutral autograd wrapper (F::NAME, in its family's src/ops/FAMILY.cpp) that
// defines HPCNET_DEFINE_OP(NAME), kernels in src/ops/cpu/FAMILY.cpp (and src/ops/cuda/FAMILY.cu),
// a finite-difference gradient check in tests/ops/test_gradcheck.cpp and a CUDA parity test in
// tests/ops/test_cuda.cpp. A name listed here without its wrapper fails to link; the two tests fail
// when an op has no check.
#pragma once

#define HPCNET_OP_TABLE(X) \
  X(conv2d)                \
  X(conv_transpose2d)      \
  X(max_pool2d)            \
  X(linear)                \
  X(relu)                  \
  X(add)                   \
  X(mul_scalar)            \
  X(reshape)               \
  X(log_softmax)           \
  X(nll_loss)              \
  X(cross_entropy)         \
  X(sum)                   \
  X(mean)                  \
  X(batch_norm)            \
  X(global_avg_pool2d)     \
  X(subsample_pad)         \
  X(dropout)               \
  X(upsample_nearest2d)    \
  X(upsample_bilinear2d)   \
  X(cat)                   \
  X(cross_entropy2d)       \
  X(dice_loss)             \
  X(silu)                  \
  X(sigmoid)               \
  X(mul)                   \
  X(narrow)                \
  X(bce_with_logits)       \
  X(gather_anchors)        \
  X(dfl_expect)            \
  X(ciou_loss)             \
  X(dfl_loss)

// Non-differentiable ops (no gradient check): argmax.

namespace hpcnet::ops {

struct OpInfo {
  const char* name;
};

#define HPCNET_DECLARE_OP_INFO(NAME) extern const OpInfo op_info_##NAME;
HPCNET_OP_TABLE(HPCNET_DECLARE_OP_INFO)
#undef HPCNET_DECLARE_OP_INFO

#define HPCNET_DEFINE_OP(NAME) const ::hpcnet::ops::OpInfo op_info_##NAME{#NAME};

// Every op's info, in table order.
inline const OpInfo* const kAllOps[] = {
#define HPCNET_OP_INFO_PTR(NAME) &op_info_##NAME,
    HPCNET_OP_TABLE(HPCNET_OP_INFO_PTR)
#undef HPCNET_OP_INFO_PTR
};

}  // namespace hpcnet::ops
