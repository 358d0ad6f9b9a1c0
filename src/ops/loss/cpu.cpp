// CPU softmax-family ops over dim 1 of (N, C): log_softmax, nll_loss, fused cross_entropy (with
// label smoothing, as torch.nn.functional.cross_entropy), and argmax; and cross_entropy2d over
// dim 1 of (N, C, H, W) (class weights, ignore_index). Row maxima are subtracted before
// exponentiating; sums accumulate in double. The row and pixel arithmetic is
// src/ops/loss/math.h's, which the CUDA kernels run too. cross_entropy2d sums its loss
// over fixed chunks of pixels, then the chunks in order: the same result for any thread count.
// Its float32 forward runs plane-wise instead (a class's pixels are contiguous), with the
// vectorised exp of vec_math.h: about 10x faster than a libm exp per logit; float64 keeps the
// pixel-wise arithmetic the CUDA kernel shares.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "src/ops/backend/cpu/cpu_ops.h"
#include "src/ops/backend/cpu/float_dispatch.h"
#include "src/ops/backend/cpu/vec_math.h"
#include "src/ops/loss/math.h"

namespace hpcnet::cpu {
namespace {

void check_label(const char* op, int64_t label, int64_t c, int64_t row) {
  if (label < 0 || label >= c)
    throw InputError(std::string(op) + ": label " + std::to_string(label) + " of sample " +
                     std::to_string(row) + " is out of range [0, " + std::to_string(c) + ")");
}

constexpr int64_t kPixelChunk = 1024;      // pixels per partial sum of cross_entropy2d
constexpr int64_t kParallelMin = 1 << 15;  // elements below which loops stay serial

// The first target of (N, H, W) outside [0, c) that is not ignore_index, as an InputError naming
// its value and pixel.
void check_pixel_labels(const Tensor& target, int64_t c, int64_t ignore_index,
                        const char* op = op_name::cross_entropy2d) {
  const int64_t* t = target.data<int64_t>();
  const int64_t h = target.size(1), w = target.size(2), total = target.numel();
  for (int64_t k = 0; k < total; ++k) {
    const int64_t v = t[k];
    if (v == ignore_index || (v >= 0 && v < c)) continue;
    throw InputError(std::string(op) + ": label " + std::to_string(v) + " at pixel (n=" +
                     std::to_string(k / (h * w)) + ", h=" + std::to_string(k / w % h) +
                     ", w=" + std::to_string(k % w) + ") is out of range [0, " + std::to_string(c) +
                     ") and is not ignore_index " + std::to_string(ignore_index));
  }
}

// cross_entropy2d's float32 forward over pixels [p0, p0 + len) of image b's planes (len <=
// kPlaneChunk): the probabilities into prob, and the (weighted loss, weight) sums of the counted
// pixels into part[0], part[1]. Per pixel: m = max_j x_j, s = sum_j e^(x_j - m), prob_j =
// e^(x_j - m) / s, loss = log s + m - x_t; each pass runs along the pixels, so it vectorises.
constexpr int64_t kPlaneChunk = 512;
void softmax_nll_planes_f32(const float* x, float* prob, const int64_t* tg, const float* pw,
                            int64_t c, int64_t hw, int64_t ignore_index, int64_t len,
                            double* part) {
  alignas(64) float mx[kPlaneChunk], sum[kPlaneChunk];  // sum: then 1 / sum
  for (int64_t p = 0; p < len; ++p) mx[p] = x[p];
  for (int64_t j = 1; j < c; ++j) {
    const float* xj = x + j * hw;
    for (int64_t p = 0; p < len; ++p) mx[p] = std::max(mx[p], xj[p]);
  }
  for (int64_t p = 0; p < len; ++p) sum[p] = 0.0f;
  for (int64_t j = 0; j < c; ++j) {
    const float* xj = x + j * hw;
    float* pj = prob + j * hw;
    for (int64_t p = 0; p < len; ++p) {
      const float e = exp_vec(xj[p] - mx[p]);
      pj[p] = e;
      sum[p] += e;
    }
  }
  double acc = 0, wsum = 0;
  for (int64_t p = 0; p < len; ++p) {
    const int64_t t = tg[p];
    if (t == ignore_index) continue;
    const double wt = pw ? static_cast<double>(pw[t]) : 1.0;
    acc += wt * (static_cast<double>(std::log(sum[p])) + mx[p] - x[t * hw + p]);
    wsum += wt;
  }
  float* inv = sum;  // the sums are not needed past here: their inverses take their place
  for (int64_t p = 0; p < len; ++p) inv[p] = 1.0f / sum[p];
  for (int64_t j = 0; j < c; ++j) {
    float* pj = prob + j * hw;
    for (int64_t p = 0; p < len; ++p) pj[p] *= inv[p];
  }
  part[0] = acc;
  part[1] = wsum;
}

// The mean loss of the (weighted loss, weight) pairs of the chunks into loss, their weight into
// total_weight (the backward divides by it): 0 / 0 = NaN when no pixel counts, as torch.
template <typename T>
void finish_mean_loss(const std::vector<double>& part, Tensor& loss, Tensor& total_weight) {
  double acc = 0, wsum = 0;
  for (size_t k = 0; k < part.size(); k += 2) acc += part[k], wsum += part[k + 1];
  loss.data<T>()[0] = static_cast<T>(acc / wsum);
  total_weight.data<double>()[0] = wsum;
}

}  // namespace

void log_softmax_forward(const Tensor& x, Tensor& y) {
  int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), op_name::log_softmax, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i)
      math::log_softmax_row(x.data<T>() + i * c, y.data<T>() + i * c, c);
  });
}

void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  int64_t n = y.size(0), c = y.size(1);
  dispatch_float(y.dtype(), "log_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    T* pdx = dx.data<T>();
    for (int64_t i = 0; i < n; ++i)
      math::log_softmax_backward_row(pdy + i * c, py + i * c, pdx + i * c, c);
  });
}

void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss) {
  int64_t n = logp.size(0), c = logp.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(logp.dtype(), op_name::nll_loss, [&](auto tag) {
    using T = decltype(tag);
    const T* p = logp.data<T>();
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      check_label(op_name::nll_loss, t[i], c, i);
      acc -= p[i * c + t[i]];
    }
    loss.data<T>()[0] = static_cast<T>(acc / n);
  });
}

void nll_loss_backward(const Tensor& dloss, const Tensor& target, Tensor& dlogp) {
  int64_t n = dlogp.size(0), c = dlogp.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(dlogp.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    T g = math::nll_grad_scale(dloss.data<T>()[0], n);
    T* p = dlogp.data<T>();
    for (int64_t i = 0; i < n * c; ++i) p[i] = T(0);
    for (int64_t i = 0; i < n; ++i) p[i * c + t[i]] = g;
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, Tensor& loss,
                           Tensor& prob) {
  int64_t n = logits.size(0), c = logits.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(logits.dtype(), op_name::cross_entropy, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* pr = prob.data<T>();
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      check_label(op_name::cross_entropy, t[i], c, i);
      acc += math::cross_entropy_row(x + i * c, pr + i * c, c, t[i], eps);
    }
    loss.data<T>()[0] = static_cast<T>(acc / n);
  });
}

void cross_entropy_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                            double eps, Tensor& dlogits) {
  int64_t n = prob.size(0), c = prob.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(prob.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pr = prob.data<T>();
    T* d = dlogits.data<T>();
    T g = math::cross_entropy_grad_scale(dloss.data<T>()[0], n);
    math::SmoothedTarget w = math::smoothed_target(eps, c);
    T on = static_cast<T>(w.on), off = static_cast<T>(w.off);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j)
        d[i * c + j] = math::cross_entropy_grad(g, pr[i * c + j], j == t[i], on, off);
  });
}

void cross_entropy2d_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                             int64_t ignore_index, Tensor& loss, Tensor& prob,
                             Tensor& total_weight) {
  const int64_t n = logits.size(0), c = logits.size(1), hw = logits.size(2) * logits.size(3);
  const int64_t pixels = n * hw;
  check_pixel_labels(target, c, ignore_index);
  const int64_t* tg = target.data<int64_t>();
  if (logits.dtype() == DType::kFloat32) {
    const float* x = logits.data<float>();
    float* pr = prob.data<float>();
    const float* pw = weight.defined() ? weight.data<float>() : nullptr;
    const int64_t per = (hw + kPlaneChunk - 1) / kPlaneChunk, tasks = n * per;
    std::vector<double> part(2 * tasks);  // (loss, weight) per chunk
#pragma omp parallel for schedule(static) if (pixels * c > kParallelMin)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / per, p0 = task % per * kPlaneChunk;
      const int64_t off = b * c * hw + p0;
      softmax_nll_planes_f32(x + off, pr + off, tg + b * hw + p0, pw, c, hw, ignore_index,
                             std::min(kPlaneChunk, hw - p0), &part[2 * task]);
    }
    finish_mean_loss<float>(part, loss, total_weight);
    return;
  }
  dispatch_float(logits.dtype(), op_name::cross_entropy2d, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* pr = prob.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const int64_t chunks = (pixels + kPixelChunk - 1) / kPixelChunk;
    std::vector<double> part(2 * chunks);  // (loss, weight) per chunk
#pragma omp parallel for schedule(static) if (pixels * c > kParallelMin)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      double acc = 0, wsum = 0;
      const int64_t end = std::min(pixels, (ch + 1) * kPixelChunk);
      for (int64_t k = ch * kPixelChunk; k < end; ++k) {
        const int64_t off = (k / hw) * c * hw + k % hw, t = tg[k];
        const bool counted = t != ignore_index;
        double nll = math::softmax_nll_strided(x + off, pr + off, c, hw, counted ? t : -1);
        if (counted) {
          const double wt = pw ? static_cast<double>(pw[t]) : 1.0;
          acc += wt * nll;
          wsum += wt;
        }
      }
      part[2 * ch] = acc;
      part[2 * ch + 1] = wsum;
    }
    finish_mean_loss<T>(part, loss, total_weight);
  });
}

void cross_entropy2d_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                              const Tensor& weight, const Tensor& total_weight,
                              int64_t ignore_index, Tensor& dlogits) {
  const int64_t n = prob.size(0), c = prob.size(1), hw = prob.size(2) * prob.size(3);
  check_pixel_labels(target, c, ignore_index);
  const int64_t* tg = target.data<int64_t>();
  const double tw = total_weight.data<double>()[0];
  dispatch_float(prob.dtype(), "cross_entropy2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pr = prob.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T g = dloss.data<T>()[0];
    T* d = dlogits.data<T>();
    // Plane by plane (b, class j), pixels innermost: contiguous reads and writes.
#pragma omp parallel for collapse(2) schedule(static) if (prob.numel() > kParallelMin)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t j = 0; j < c; ++j) {
        const int64_t* tb = tg + b * hw;
        const T* pp = pr + (b * c + j) * hw;
        T* dp = d + (b * c + j) * hw;
        for (int64_t p = 0; p < hw; ++p) {
          const int64_t t = tb[p];
          if (t == ignore_index) {
            dp[p] = T(0);
            continue;
          }
          const T scale =
              math::cross_entropy2d_grad_scale(g, pw ? static_cast<double>(pw[t]) : 1.0, tw);
          dp[p] = math::cross_entropy_grad(scale, pp[p], j == t, T(1), T(0));
        }
      }
  });
}

void dice_loss_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                       int64_t ignore_index, double smooth, double eps, Tensor& loss, Tensor& prob,
                       Tensor& coef) {
  const int64_t n = logits.size(0), c = logits.size(1), hw = logits.size(2) * logits.size(3);
  const int64_t pixels = n * hw;
  check_pixel_labels(target, c, ignore_index, op_name::dice_loss);
  const int64_t* tg = target.data<int64_t>();
  dispatch_float(logits.dtype(), op_name::dice_loss, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* pr = prob.data<T>();
    const int64_t chunks = (pixels + kPixelChunk - 1) / kPixelChunk;
    std::vector<double> part(3 * c * chunks, 0.0);  // (I, P, T) per class per chunk
#pragma omp parallel for schedule(static) if (pixels * c > kParallelMin)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      double* acc = part.data() + 3 * c * ch;
      const int64_t end = std::min(pixels, (ch + 1) * kPixelChunk);
      for (int64_t k = ch * kPixelChunk; k < end; ++k) {
        const int64_t off = (k / hw) * c * hw + k % hw, t = tg[k];
        math::softmax_nll_strided(x + off, pr + off, c, hw, int64_t{-1});
        if (t == ignore_index) continue;
        for (int64_t j = 0; j < c; ++j) acc[c + j] += static_cast<double>(pr[off + j * hw]);
        acc[t] += static_cast<double>(pr[off + t * hw]);
        acc[2 * c + t] += 1.0;
      }
    }
    std::vector<double> sum(3 * c, 0.0);
    for (int64_t ch = 0; ch < chunks; ++ch)
      for (int64_t j = 0; j < 3 * c; ++j) sum[j] += part[3 * c * ch + j];
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    double W = 0;
    for (int64_t j = 0; j < c; ++j) W += pw ? static_cast<double>(pw[j]) : 1.0;
    double* cf = coef.data<double>();
    double total = 0;
    for (int64_t j = 0; j < c; ++j)
      total += math::dice_class_terms(sum[j], sum[c + j], sum[2 * c + j],
                                      pw ? static_cast<double>(pw[j]) : 1.0, W, smooth, eps, cf[j],
                                      cf[c + j]);
    loss.data<T>()[0] = static_cast<T>(total);
  });
}

void dice_loss_backward(const Tensor& dloss, const Tensor& prob, const Tensor& target,
                        const Tensor& coef, int64_t ignore_index, Tensor& dlogits) {
  const int64_t n = prob.size(0), c = prob.size(1), hw = prob.size(2) * prob.size(3);
  const int64_t pixels = n * hw;
  check_pixel_labels(target, c, ignore_index, op_name::dice_loss);
  const int64_t* tg = target.data<int64_t>();
  const double* cf = coef.data<double>();
  dispatch_float(prob.dtype(), "dice_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pr = prob.data<T>();
    T* d = dlogits.data<T>();
    const double g = static_cast<double>(dloss.data<T>()[0]);
#pragma omp parallel for schedule(static) if (prob.numel() > kParallelMin)
    for (int64_t k = 0; k < pixels; ++k) {
      const int64_t off = (k / hw) * c * hw + k % hw, t = tg[k];
      if (t == ignore_index) {
        for (int64_t j = 0; j < c; ++j) d[off + j * hw] = T(0);
        continue;
      }
      math::dice_grad_pixel(pr + off, d + off, c, hw, t, cf, g);
    }
  });
}

void argmax(const Tensor& x, Tensor& out) {
  int64_t n = x.size(0), c = x.size(1);
  int64_t* po = out.data<int64_t>();
  dispatch_float(x.dtype(), op_name::argmax, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0; i < n; ++i) po[i] = math::argmax_row(p + i * c, c);
  });
}

}  // namespace hpcnet::cpu
