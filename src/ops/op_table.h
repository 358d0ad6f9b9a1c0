// The op table: one line per op, the one place an op's name is written. Each op NAME has
//   - op_name::NAME, the name as a string, which errors, tracing and export read (below);
//   - its record, op_record::NAME (src/ops/op_record.h): the name, the ONNX mapping (or "not
//     exportable" and why), defined in its family's folder, src/ops/<family>/record.cpp;
//   - a kernel API in src/ops/kernels.inc, defined in src/ops/<family>/kernels.cpp, with kernels in
//     cpu.cpp and cuda.cu beside it, and the differentiable F::NAME in functional.cpp;
//   - its checks in tests/ops/, one gtest per op and kind, Ops/NAME.*: GradcheckFloat64 (finite
//     differences), ErrorInputsCpu / ErrorInputsCuda, and where the op has them
//     PyTorchGoldenFloat64, CudaParity, OnnxRoundTrip; the older multi-op tests (the segmentation
//     and DeepLab goldens, most CUDA parity tests, test_ops_cpu.cpp) still cover the rest.
// A name listed here without a record fails to link; the tests fail when an op has no finite-
// difference case, fewer than three error inputs or no CUDA parity test.
// Layer: kernels (names only; it includes nothing), so the kernel API's errors use the same names.
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
  X(dfl_loss)              \
  X(gelu)                  \
  X(softmax)               \
  X(bmm)                   \
  X(depthwise_conv2d)

// Ops without a gradient (no record, no gradient check): their names only.
#define HPCNET_OP_TABLE_NO_GRAD(X) X(argmax)

namespace hpcnet::op_name {

#define HPCNET_OP_NAME(NAME) inline constexpr char NAME[] = #NAME;
HPCNET_OP_TABLE(HPCNET_OP_NAME)
HPCNET_OP_TABLE_NO_GRAD(HPCNET_OP_NAME)
#undef HPCNET_OP_NAME

}  // namespace hpcnet::op_name
