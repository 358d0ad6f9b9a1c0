// GradReducer: gradient averaging in buckets that start all-reducing during backward. The bucket
// layout is fixed at construction (reverse parameter order, about bucket_cap_bytes each) and is
// the same on every rank, so every rank starts the same all-reduces in the same order.
// Invariant between steps: no bucket is in flight, every copied_ flag is false.
// CUDA parameters take the host-staged path: each gradient is copied to its bucket's host buffer
// when it is ready, and the averaged bucket is copied back to the device (MPI moves host memory;
// the NCCL process group, which would reduce on the device, is not implemented).
#include <algorithm>
#include <cstring>

#include "hpcnet/autograd.h"
#include "hpcnet/dist.h"

namespace hpcnet::dist {

GradReducer::GradReducer(ProcessGroup& group, std::vector<Tensor> params, ReducerOptions options)
    : group_(group), params_(std::move(params)), options_(options) {
  const size_t n = params_.size();
  where_.assign(n, {0, 0});
  copied_.assign(n, false);
  for (const Tensor& p : params_) {
    HPCNET_CHECK(p.defined() && p.requires_grad(), "GradReducer: a parameter that needs no grad");
    HPCNET_CHECK(p.dtype() == DType::kFloat32, "GradReducer: parameters must be float32");
  }
  // Reverse registration order: the last layers' gradients are ready first.
  Bucket cur;
  size_t cur_bytes = 0;
  for (size_t k = n; k-- > 0;) {
    const size_t bytes = static_cast<size_t>(params_[k].numel()) * sizeof(float);
    if (!cur.params.empty() && options_.bucket_cap_bytes > 0 &&
        cur_bytes + bytes > options_.bucket_cap_bytes) {
      buckets_.push_back(std::move(cur));
      cur = Bucket{};
      cur_bytes = 0;
    }
    cur.params.push_back(k);
    cur_bytes += bytes;
  }
  if (!cur.params.empty()) buckets_.push_back(std::move(cur));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bk = buckets_[b];
    size_t off = 0;
    for (size_t s = 0; s < bk.params.size(); ++s) {
      where_[bk.params[s]] = {b, s};
      bk.offsets.push_back(off);
      off += static_cast<size_t>(params_[bk.params[s]].numel());
    }
    bk.buffer.assign(off, 0.0f);
    total_floats_ += off;
  }
}

GradReducer::~GradReducer() = default;

void GradReducer::on_grad_ready(TensorImpl* leaf) {
  // Few parameters (tens to hundreds): a linear search costs less than the hashing would.
  size_t k = 0;
  while (k < params_.size() && params_[k].impl() != leaf) ++k;
  if (k == params_.size() || copied_[k]) return;  // not ours, or already in its bucket
  auto [b, s] = where_[k];
  Bucket& bk = buckets_[b];
  const Tensor& g = leaf->grad;
  HPCNET_CHECK(g.dtype() == DType::kFloat32 && g.numel() == params_[k].numel(),
               "GradReducer: gradient of the wrong type or size");
  Tensor gc = g.to(cpu_device()).contiguous();  // (a CPU tensor stays itself)
  std::memcpy(bk.buffer.data() + bk.offsets[s], gc.data<float>(), gc.nbytes());
  copied_[k] = true;
  ++bk.ready;
  launch_in_order();
  // Let the collectives in flight progress (MPI moves non-blocking collectives only inside calls).
  for (size_t i = 0; i < next_launch_; ++i)
    if (buckets_[i].work) buckets_[i].work->test();
}

void GradReducer::launch_in_order() {
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    Bucket& bk = buckets_[next_launch_++];
    bk.work = group_.allreduce_sum_async(bk.buffer.data(), bk.buffer.size());
    bk.launched = true;
  }
}

void GradReducer::finish() {
  // Gradients the hook did not see (no gradient on this rank, or no hook) go in now; parameters
  // without a gradient contribute zeros.
  for (Bucket& bk : buckets_) {
    if (bk.launched) continue;
    for (size_t s = 0; s < bk.params.size(); ++s) {
      const size_t k = bk.params[s];
      if (copied_[k]) continue;
      float* dst = bk.buffer.data() + bk.offsets[s];
      const Tensor& g = params_[k].grad();
      if (g.defined()) {
        Tensor gc = g.to(cpu_device()).contiguous();  // (a CPU tensor stays itself)
        std::memcpy(dst, gc.data<float>(), gc.nbytes());
      } else {
        std::fill(dst, dst + params_[k].numel(), 0.0f);
      }
      copied_[k] = true;
      ++bk.ready;
    }
  }
  launch_in_order();
  const float scale = 1.0f / static_cast<float>(group_.world_size());
  for (Bucket& bk : buckets_) {
    bk.work->wait();
    bk.work.reset();
    for (size_t s = 0; s < bk.params.size(); ++s) {
      Tensor& p = params_[bk.params[s]];
      Tensor& g = p.mutable_grad();
      if (!p.device().is_cpu()) {  // host-staged: the average goes back to the device
        Tensor h = Tensor::empty(p.shape());
        const float* src = bk.buffer.data() + bk.offsets[s];
        float* dst = h.data<float>();
        for (int64_t i = 0, n = p.numel(); i < n; ++i) dst[i] = src[i] * scale;
        g = h.to(p.device());
        continue;
      }
      if (!g.defined() || !g.is_contiguous() || g.impl()->storage.use_count() > 1 ||
          g.impl_ptr().use_count() > 1)
        g = Tensor::empty(p.shape(), DType::kFloat32, p.device());  // never write a shared buffer
      const float* src = bk.buffer.data() + bk.offsets[s];
      float* dst = g.data<float>();
      for (int64_t i = 0, n = p.numel(); i < n; ++i) dst[i] = src[i] * scale;
    }
    bk.ready = 0;
    bk.launched = false;
  }
  next_launch_ = 0;
  std::fill(copied_.begin(), copied_.end(), false);
}

void GradReducer::backward(const Tensor& loss) {
  if (group_.world_size() == 1) {
    loss.backward();
    return;
  }
  if (options_.bucket_cap_bytes > 0) {
    GradReadyHookScope scope([this](TensorImpl* leaf) { on_grad_ready(leaf); });
    loss.backward();
  } else {
    loss.backward();
  }
  finish();
}

void GradReducer::allreduce_grads() {
  if (group_.world_size() == 1) return;
  finish();
}

}  // namespace hpcnet::dist
