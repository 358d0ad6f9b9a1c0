// GradReducer: gradient averaging in buckets that start all-reducing during backward. The bucket
// layout is fixed at construction (reverse parameter order, about bucket_cap_bytes each) and is
// the same on every rank, so every rank starts the same all-reduces in the same order.
// Invariant between steps: no bucket is in flight, every copied_ flag is false.
// CUDA parameters: with a group that reduces on the device (NCCL) each bucket is a device buffer,
// a ready gradient is copied into it on hpcnet's stream and the bucket's all-reduce runs on the
// group's stream while backward goes on (NCCL's average: the sum times 1 / world size); finish()
// puts hpcnet's stream behind the all-reduces, then copies the buckets into the gradients, all
// without the host waiting. With any other group they take the host-staged path: each gradient
// is copied to its bucket's host buffer when it is ready, and the averaged bucket is copied back
// to the device (MPI moves host memory).
#include <algorithm>
#include <cstring>

#include "hpcnet/autograd.h"
#include "hpcnet/dist.h"
#include "src/core/cuda_device.h"

namespace hpcnet::dist {

GradReducer::GradReducer(ProcessGroup& group, std::vector<Tensor> params, ReducerOptions options)
    : group_(group), params_(std::move(params)), options_(options) {
  const size_t n = params_.size();
  where_.assign(n, {0, 0});
  copied_.assign(n, false);
  for (const Tensor& p : params_) {
    HPCNET_CHECK(p.defined() && p.requires_grad(), "GradReducer: a parameter that needs no grad");
    HPCNET_CHECK(p.dtype() == DType::kFloat32, "GradReducer: parameters must be float32");
    HPCNET_CHECK(p.device() == params_[0].device(), "GradReducer: parameters on several devices");
  }
  on_device_ = n > 0 && params_[0].device().is_cuda() && group_.reduces_on_device();
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
    if (on_device_)
      bk.device_buffer =
          Tensor::zeros({static_cast<int64_t>(off)}, DType::kFloat32, params_[0].device());
    else
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
  copy_into_bucket(bk, s, g);
  copied_[k] = true;
  ++bk.ready;
  launch_in_order();
  // Let the collectives in flight progress (MPI moves non-blocking collectives only inside calls).
  for (size_t i = 0; i < next_launch_; ++i)
    if (buckets_[i].work) buckets_[i].work->test();
}

// Gradient g (or zeros when undefined) into slot s of bucket bk.
void GradReducer::copy_into_bucket(Bucket& bk, size_t s, const Tensor& g) {
  const Tensor& p = params_[bk.params[s]];
  const size_t bytes = static_cast<size_t>(p.numel()) * sizeof(float);
  if (on_device_) {
    float* dst = bk.device_buffer.data<float>() + bk.offsets[s];
    if (!g.defined()) {
      const float zero = 0;
      cuda_fill_bytes(dst, p.device(), &zero, sizeof zero, p.numel());
      return;
    }
    Tensor gc = g.to(p.device()).contiguous();
    cuda_copy_bytes(dst, p.device(), gc.raw_data(), p.device(), bytes);  // queued, on the device
    return;
  }
  float* dst = bk.buffer.data() + bk.offsets[s];
  if (!g.defined()) {
    std::fill(dst, dst + p.numel(), 0.0f);
    return;
  }
  Tensor gc = g.to(cpu_device()).contiguous();  // (a CPU tensor stays itself)
  std::memcpy(dst, gc.data<float>(), bytes);
}

void GradReducer::launch_in_order() {
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    Bucket& bk = buckets_[next_launch_++];
    bk.work = on_device_
                  ? group_.allreduce_device_async(bk.device_buffer.data<float>(),
                                                  static_cast<size_t>(bk.device_buffer.numel()),
                                                  true)
                  : group_.allreduce_sum_async(bk.buffer.data(), bk.buffer.size());
    bk.launched = true;
  }
}

// After bk's all-reduce: each gradient of bk becomes its sum times scale (device buckets hold
// the average already).
void GradReducer::set_grads_from(Bucket& bk, float scale) {
  for (size_t s = 0; s < bk.params.size(); ++s) {
    Tensor& p = params_[bk.params[s]];
    Tensor& g = p.mutable_grad();
    if (on_device_) {  // a fresh gradient: the old one may be shared (an optimizer's history)
      g = Tensor::empty(p.shape(), DType::kFloat32, p.device());
      cuda_copy_bytes(g.raw_data(), p.device(), bk.device_buffer.data<float>() + bk.offsets[s],
                      p.device(), g.nbytes());
      continue;
    }
    const float* src = bk.buffer.data() + bk.offsets[s];
    if (!p.device().is_cpu()) {  // host-staged: the average goes back to the device
      Tensor h = Tensor::empty(p.shape());
      float* dst = h.data<float>();
      for (int64_t i = 0, n = p.numel(); i < n; ++i) dst[i] = src[i] * scale;
      g = h.to(p.device());
      continue;
    }
    if (!g.defined() || !g.is_contiguous() || g.impl()->storage.use_count() > 1 ||
        g.impl_ptr().use_count() > 1)
      g = Tensor::empty(p.shape(), DType::kFloat32, p.device());  // never write a shared buffer
    float* dst = g.data<float>();
    for (int64_t i = 0, n = p.numel(); i < n; ++i) dst[i] = src[i] * scale;
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
      copy_into_bucket(bk, s, params_[k].grad());
      copied_[k] = true;
      ++bk.ready;
    }
  }
  launch_in_order();
  const float scale = 1.0f / static_cast<float>(group_.world_size());
  for (Bucket& bk : buckets_) {
    bk.work->wait();
    bk.work.reset();
    set_grads_from(bk, scale);
    bk.ready = 0;
    bk.launched = false;
  }
  next_launch_ = 0;
  std::fill(copied_.begin(), copied_.end(), false);
}

void GradReducer::backward(const Tensor& loss) {
  if (group_.world_size() == 1 && !options_.reduce_single) {
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
  if (group_.world_size() == 1 && !options_.reduce_single) return;
  finish();
}

}  // namespace hpcnet::dist
