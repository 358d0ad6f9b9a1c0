// Differentiable ops (hpcnet::F), as torch.nn.functional: each computes its output with the
// backend kernels in src/ops/ops.h and, when an input requires grad and grad mode is on, records a
// Node whose backward sits beside the forward in its family's src/ops/FAMILY.cpp. Outputs are new
// tensors; no op here modifies its inputs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/tensor.h"

namespace hpcnet::F {

// x (N, C, H, W), weight (K, C, R, S), bias (K,) or undefined -> (N, K, P, Q) with
// P = (H + 2 padding - dilation (R - 1) - 1) / stride + 1 (torch.nn.functional.conv2d; dilation
// spreads the taps, as DeepLab's atrous convolutions).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1);
// conv2d followed by relu in one kernel (oneDNN post-op); same result as relu(conv2d(...)).
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
                   int64_t padding = 0, int64_t dilation = 1);
// silu(conv2d(...)) (YOLO's Conv after its BatchNorm is folded, at inference): one kernel (oneDNN
// swish post-op) when no gradient is needed; under autograd the two ops it stands for.
Tensor conv2d_silu(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
                   int64_t padding = 0, int64_t dilation = 1);
// torch.nn.functional.conv_transpose2d(x, weight, bias, stride, padding, output_padding,
// dilation=dilation): x (N, C, H, W), weight (C, K, R, S) (torch's layout: input channels
// first), bias (K,) or undefined -> (N, K, OH, OW), OH = (H - 1) stride - 2 padding +
// dilation (R - 1) + output_padding + 1. The gradient of conv2d with respect to its input, run
// forward: its backward is conv2d (for x) and conv2d's weight gradient with the roles swapped.
// Requires output_padding < stride or < dilation (as torch). Output row-major.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                        int64_t dilation = 1);
// x (N, C, H, W) -> (N, C, P, Q); stride defaults to kernel_size as in PyTorch.
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
// Depthwise convolution (torch's conv2d with groups = C, Ultralytics' DWConv): x (N, C, H, W),
// weight (C, 1, R, S), bias (C,) or undefined -> (N, C, P, Q), P as conv2d's; channel c is
// correlated with its own filter. float32 or float64; x may be blocked (the output is row-major).
// InputError for wrong ranks, a weight other than (C, 1, R, S), mismatched dtypes or devices,
// stride < 1, padding < 0, dilation < 1, or a kernel larger than the padded input.
Tensor depthwise_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1);
// x (N, IN), weight (OUT, IN), bias (OUT,) or undefined -> (N, OUT).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor relu(const Tensor& x);
// x sigmoid(x) (torch.nn.SiLU) and 1 / (1 + exp(-x)) (torch.sigmoid), any shape.
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// torch.nn.functional.gelu: x Phi(x) (approximate "none", erf) or its tanh approximation
// (approximate "tanh"); any shape, float32 or float64. Another `approximate` is an InputError.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// torch.softmax(x, dim): e^(x - max) / sum along dim (-rank <= dim < rank; a 0-d x has dims 0
// and -1), any rank, float32 or float64 (no bfloat16). Backward dx = y (dy - sum(dy y, dim)).
// InputError for an undefined or integer input or dim out of range.
Tensor softmax(const Tensor& x, int64_t dim);
// torch.bmm(op(a), op(b)) -> (B, M, N), where op transposes the last two dims of a when
// transpose_a and of b when transpose_b: a (B, M, K) (or (B, K, M) transposed), b (B, K, N) (or
// (B, N, K) transposed). float32 or float64; views are copied to contiguous first. YOLO11's
// attention: q^T k is bmm(q, k, true, false), v attn^T is bmm(v, attn, false, true). InputError
// for ranks other than 3, mismatched batch or inner sizes, dtypes or devices.
Tensor bmm(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
Tensor add(const Tensor& a, const Tensor& b);
// a * b elementwise (torch.mul without broadcasting: same shapes and dtypes).
Tensor mul(const Tensor& a, const Tensor& b);
// x * s for a constant s (torch's x * 0.5); gradient dy * s.
Tensor mul_scalar(const Tensor& x, double s);
// A view with a new shape (one dim may be -1); the input must be contiguous.
Tensor reshape(const Tensor& x, const Shape& shape);
// torch.flatten(x, start_dim): dims from start_dim on are merged.
Tensor flatten(const Tensor& x, int64_t start_dim = 1);
// Over dim 1 of (N, C).
Tensor log_softmax(const Tensor& x);
// Mean NLL of log-probabilities (N, C) at int64 targets (N,) -> 0-d.
Tensor nll_loss(const Tensor& logp, const Tensor& target);
// Mean cross-entropy of logits (N, C) at int64 targets (N,) -> 0-d (fused log_softmax + nll).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);
Tensor sum(const Tensor& x);   // -> 0-d
Tensor mean(const Tensor& x);  // -> 0-d
// torch.nn.functional.batch_norm over (N, C, H, W): normalises each channel with the batch's
// statistics (training; running_mean/var, when defined, are updated in place with PyTorch's
// momentum convention and the unbiased variance) or with the running statistics (eval).
// weight and bias may be undefined (1 and 0).
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);
// relu(batch_norm(x) + residual) in one kernel (residual may be undefined, relu optional).
Tensor batch_norm_act(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const Tensor& running_mean, const Tensor& running_var, bool training,
                      double momentum, double eps, const Tensor& residual, bool relu);
// Sums `count` doubles in place over the ranks of a data-parallel job; every rank calls it with
// the same count in the same order. Empty (or the identity): one process.
using RankSum = std::function<void(double* data, size_t count)>;
// torch.nn.SyncBatchNorm in training: batch_norm_act whose batch statistics are those of every
// rank's batch together (per-channel sums added by `sum`, two reductions: the mean, then the
// variance about it), running statistics updated from them (unbiased with the global count),
// and whose backward adds the ranks' sums of g and g (x - mean) before forming dx. dweight and
// dbias are this rank's own, as torch's: the data-parallel gradient average combines them. CPU
// tensors (float32 or float64) only.
Tensor sync_batch_norm_act(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var, double momentum,
                           double eps, const Tensor& residual, bool relu, const RankSum& sum);
// (N, C, H, W) -> (N, C): adaptive_avg_pool2d(x, 1) flattened.
Tensor global_avg_pool2d(const Tensor& x);
// The ResNet option-A shortcut: F.pad(x[:, :, ::stride, ::stride], (0, 0, 0, 0, pad, pad)).
Tensor subsample_pad(const Tensor& x, int64_t stride, int64_t pad);
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) in training; the
// identity in eval. The mask comes from default_rng().
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
// torch.nn.functional.interpolate(x, scale_factor=scale, mode="nearest") for an integer scale:
// x (N, C, H, W) -> (N, C, H scale, W scale), y[n, c, i, j] = x[n, c, i / scale, j / scale].
// Requires scale >= 1 (scale 1 copies). Backward sums each scale x scale block of the gradient.
// x may be blocked (Layout::kBlocked16); the output is row-major. InputError for a rank other
// than 4 or a scale < 1.
Tensor upsample_nearest2d(const Tensor& x, int64_t scale);
// torch.nn.functional.interpolate(x, size=(out_h, out_w), mode="bilinear", align_corners):
// x (N, C, H, W) float32/float64 (may be blocked) -> (N, C, out_h, out_w) row-major, up or down.
// align_corners true maps corner samples onto each other (src = dst (H - 1) / (out_h - 1));
// false maps pixel centres (src = (dst + 0.5) H / out_h - 0.5, clamped at 0), torch's default
// and DeepLabV3's. Backward: each input receives its bilinear weights' share of the gradient.
// InputError for a rank other than 4, a size < 1 or an integer dtype.
Tensor upsample_bilinear2d(const Tensor& x, int64_t out_h, int64_t out_w,
                           bool align_corners = false);
// torch.cat(xs, dim): tensors of one rank, dtype and device whose sizes agree except along dim
// (-rank <= dim < rank; negative counts from the end) -> their concatenation along dim, a new
// row-major tensor (also for one input). Any dim and rank >= 1; inputs may be blocked. Any dtype
// forward; gradients flow to the float inputs that require grad (the backward splits the
// gradient). InputError for no inputs, mismatched ranks, sizes or dtypes, or dim out of range.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
// torch.narrow(x, dim, start, length): the slice [start, start + length) of x along dim: a view
// sharing x's memory when the slice is one run of it (dim 0, or the channels of one image), else
// a new tensor; do not write into the result. Whole 16-channel blocks of a blocked x stay
// blocked, other slices are row-major; torch's chunk/split are narrows. Any dtype forward;
// gradient for float inputs (the gradient placed between zeros). InputError when dim is out of
// range or the slice does not fit.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// torch.nn.functional.cross_entropy(logits, target, weight=weight, ignore_index=ignore_index,
// reduction="mean") for dense prediction: logits (N, C, H, W) float32/float64 (may be blocked),
// target (N, H, W) int64, weight (C,) of logits' dtype or undefined (every class 1) -> 0-d
//   sum over pixels with target != ignore_index of w[t] * -log_softmax(logits, dim 1)[t]
//   divided by the sum of w[t] over those pixels
// (without weight: the mean over the counted pixels). No counted pixel (all ignored, or an empty
// batch) gives NaN, as torch; the gradient is then 0. A target value outside [0, C) that is not
// ignore_index is an InputError naming the value and the pixel (on CUDA it is found
// asynchronously: the loss is NaN and the InputError comes at the next synchronisation, e.g.
// item()). Gradient for logits only (weight and target are constants): w[t] / total weight *
// (softmax - onehot) at counted pixels, 0 at ignored ones. InputError for wrong ranks, shapes or
// dtypes.
Tensor cross_entropy2d(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                       int64_t ignore_index = 255);
// segmentation_models_pytorch's DiceLoss(mode="multiclass", from_logits=True, smooth, eps,
// ignore_index, class_weights=weight): logits (N, C, H, W) float32/float64 (may be blocked),
// target (N, H, W) int64, weight (C,) or undefined -> 0-d. With p = softmax over C and, over the
// pixels whose target is not ignore_index, per class c: I_c = sum p_c [t = c], P_c = sum p_c,
// T_c = count(t = c),
//   loss = sum_c w_c [T_c > 0] (1 - (I_c + smooth) / max((P_c + T_c) / 2 + smooth, eps)) / sum w
// (without weight the mean over all C classes; classes absent from the target contribute 0, as
// smp; no counted pixel gives 0). Gradient for logits only. InputErrors as cross_entropy2d.
Tensor dice_loss(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                 int64_t ignore_index = 255, double smooth = 0.0, double eps = 1e-7);
// ---- detection losses (Ultralytics' v8DetectionLoss is built from these) ----
// torch's binary_cross_entropy_with_logits(logits, target, reduction="sum"): logits any shape,
// float32/float64; target of its shape and dtype (a constant). Gradient for logits.
Tensor bce_with_logits(const Tensor& logits, const Tensor& target);
// The foreground anchors' columns of a head output x (B, C, A): idx (M,) int64 with values
// b A + a -> (M, C), row m = x[b, :, a]. Gradient: scatter-add back into (B, C, A). InputError
// for an index outside [0, B A) (checked on the CPU).
Tensor gather_anchors(const Tensor& x, const Tensor& idx);
// Ultralytics' DFL module on rows: x (N, R) bin logits -> (N,) sum_j softmax(x)_j j.
Tensor dfl_expect(const Tensor& x);
// Weighted CIoU loss, Ultralytics' BboxLoss IoU term before its division: pred and target (M, 4)
// xyxy boxes, weight (M,) -> 0-d sum_m weight[m] (1 - CIoU(pred[m], target[m])) with
// bbox_iou(xywh=False, CIoU=True)'s formula (eps 1e-7). Gradient for pred only; alpha is held
// constant as Ultralytics computes it under no_grad, unless alpha_grad (the full derivative).
Tensor ciou_loss(const Tensor& pred, const Tensor& target, const Tensor& weight,
                 bool alpha_grad = false);
// Weighted distribution focal loss (Ultralytics' DFLoss per box side): pred (N, R) logits,
// target (N,) distances in bins (clamped to [0, R - 1.01]), weight (N,) -> 0-d
//   sum_n weight[n] (-(l + 1 - t) log_softmax(pred[n])[l] - (t - l) log_softmax(pred[n])[l + 1])
// with l = floor(t). Gradient for pred only.
Tensor dfl_loss(const Tensor& pred, const Tensor& target, const Tensor& weight);
// Not differentiable: (N, C) -> (N,) int64.
Tensor argmax(const Tensor& x);

}  // namespace hpcnet::F
