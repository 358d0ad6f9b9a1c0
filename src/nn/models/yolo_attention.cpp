// YOLO11's attention modules under Ultralytics' names: Attention (qkv, proj, pe), PSABlock (attn,
// ffn) and C2PSA (cv1, cv2, m). The attention is two batched matrix products and a softmax over
// (B nh) heads: q, k (B nh, kd, N), v (B nh, hd, N), N = H W positions.
#include <algorithm>
#include <cmath>
#include <string>

#include "hpcnet/functional.h"
#include "src/nn/models/models.h"
#include "src/nn/models/yolo_internal.h"
#include "src/ops/dispatch.h"
#include "src/ops/ops.h"

namespace hpcnet::nn {

YoloAttention::YoloAttention(int64_t dim, int64_t num_heads, double attn_ratio)
    : num_heads(num_heads),
      head_dim(dim / num_heads),
      key_dim(static_cast<int64_t>(static_cast<double>(dim / num_heads) * attn_ratio)),
      scale(std::pow(static_cast<double>(key_dim), -0.5)) {
  HPCNET_REQUIRE(num_heads >= 1 && dim % num_heads == 0 && key_dim >= 1,
                 "Attention: " + std::to_string(num_heads) + " heads must divide dim " +
                     std::to_string(dim) + " into heads of at least one key channel");
  const int64_t h = dim + 2 * key_dim * num_heads;
  qkv = register_module("qkv", std::make_shared<YoloConv>(dim, h, 1, 1, false));
  proj = register_module("proj", std::make_shared<YoloConv>(dim, dim, 1, 1, false));
  pe = register_module("pe", std::make_shared<YoloConv>(dim, dim, 3, 1, false, dim));
}

Tensor YoloAttention::forward(const Tensor& x) {
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), N = H * W;
  // qkv (B, nh (2 kd + hd), H, W) as (B nh, 2 kd + hd, N): per head its q, k and v rows.
  // (narrow's slices are row-major: views where they are one run, copies otherwise.)
  const Tensor t = F::reshape(qkv->forward(x), {B * num_heads, 2 * key_dim + head_dim, N});
  const Tensor q = F::mul_scalar(F::narrow(t, 1, 0, key_dim), scale);  // (B nh, kd, N)
  const Tensor k = F::narrow(t, 1, key_dim, key_dim);                  // (B nh, kd, N)
  const Tensor v = F::narrow(t, 1, 2 * key_dim, head_dim);             // (B nh, hd, N)
  const Tensor attn = F::softmax(F::bmm(q, k, true, false), 2);        // (B nh, N query, N key)
  const Tensor o = F::bmm(v, attn, false, true);                       // (B nh, hd, N)
  const Tensor y = F::add(F::reshape(o, {B, C, H, W}), pe->forward(F::reshape(v, {B, C, H, W})));
  return proj->forward(y);
}

PsaBlock::PsaBlock(int64_t c, double attn_ratio, int64_t num_heads, bool shortcut) : add(shortcut) {
  attn = register_module("attn", std::make_shared<YoloAttention>(c, num_heads, attn_ratio));
  ffn = register_module("ffn", std::make_shared<YoloSequential>());
  ffn->add(std::make_shared<YoloConv>(c, 2 * c, 1));
  ffn->add(std::make_shared<YoloConv>(2 * c, c, 1, 1, false));
}

Tensor PsaBlock::forward(const Tensor& x) {
  if (!add) return ffn->forward(attn->forward(x));
  const Tensor y = F::add(x, attn->forward(x));
  return F::add(y, ffn->forward(y));
}

C2Psa::C2Psa(int64_t c1, int64_t c2, int64_t n, double e)
    : c(static_cast<int64_t>(static_cast<double>(c1) * e)) {
  HPCNET_REQUIRE(c1 == c2, "C2PSA: input and output channels must be equal, got " +
                               std::to_string(c1) + " and " + std::to_string(c2));
  cv1 = register_module("cv1", std::make_shared<YoloConv>(c1, 2 * c, 1));
  cv2 = register_module("cv2", std::make_shared<YoloConv>(2 * c, c1, 1));
  m = register_module("m", std::make_shared<YoloSequential>());
  for (int64_t i = 0; i < n; ++i)
    m->add(std::make_shared<PsaBlock>(c, 0.5, std::max<int64_t>(c / 64, 1)));
}

Tensor C2Psa::pieces(const Tensor& x) {
  const Tensor y = cv1->forward(x);
  return F::cat({F::narrow(y, 1, 0, c), m->forward(F::narrow(y, 1, c, c))}, 1);
}

Tensor C2Psa::forward(const Tensor& x) { return cv2->forward(pieces(x)); }
void C2Psa::forward_into(const Tensor& x, Tensor& out) { cv2->forward_into(pieces(x), out); }

}  // namespace hpcnet::nn
