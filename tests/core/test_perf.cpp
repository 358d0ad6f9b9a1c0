// Steady-state guarantees of the training step that performance depends on: after warm-up, a
// LeNet step takes no memory from the system (the caching allocator serves every tensor) and
// creates no oneDNN primitive (each is made once per shape and reused).
#include <gtest/gtest.h>

#include "hpcnet/functional.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/rng.h"
#include "src/core/block_cache.h"
#include "src/ops/backend/cpu/dnnl_util.h"

using namespace hpcnet;

namespace {
void train_steps(nn::Module& model, optim::SGD& opt, const Tensor& x, const Tensor& y, int n) {
  for (int i = 0; i < n; ++i) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model.forward(x), y);
    loss.backward();
    opt.step();
  }
}
}  // namespace

TEST(Perf, LenetStepAllocatesNothingAndBuildsNoPrimitiveInSteadyState) {
  for (int64_t batch : {4, 32}) {
    manual_seed(0);
    auto model = nn::make_model("lenet");
    optim::SGD opt(model->named_parameters(), {0.001, 0.9, 0, 0, false});
    Tensor x = Tensor::full({batch, 3, 32, 32}, 0.25);
    std::vector<int64_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = i % 10;
    Tensor y = Tensor::from_labels(labels);
    train_steps(*model, opt, x, y, 3);  // warm-up: caches fill
    uint64_t allocs = cpu_allocator_stats().system_allocs;
    size_t prims = cpu::dnnl_cache_size();
    train_steps(*model, opt, x, y, 20);
    EXPECT_EQ(cpu_allocator_stats().system_allocs, allocs) << "batch " << batch;
    EXPECT_EQ(cpu::dnnl_cache_size(), prims) << "batch " << batch;
  }
}

TEST(Perf, BlockCacheRoundsSizesAndReusesFreedBlocks) {
  // Fine steps up to the limit, then quarters of the next power of two.
  EXPECT_EQ(round_block_size(0, 64, 4096), 64u);
  EXPECT_EQ(round_block_size(65, 64, 4096), 128u);
  EXPECT_EQ(round_block_size(4096, 64, 4096), 4096u);
  EXPECT_EQ(round_block_size(4097, 64, 4096), 6144u);
  EXPECT_EQ(round_block_size(6145, 64, 4096), 8192u);
  EXPECT_EQ(round_block_size(9000, 512, 1 << 20), 9216u);

  BlockCache c;
  int a = 0, b = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    EXPECT_EQ(c.take_locked(128), nullptr);
    c.count_system_alloc_locked(128);
    c.count_system_alloc_locked(256);
  }
  c.give_back(&a, 128);
  c.give_back(&b, 256);
  AllocatorStats s = c.snapshot();
  EXPECT_EQ(s.bytes_cached, 384u);
  EXPECT_EQ(s.system_allocs, 2u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  std::lock_guard<std::mutex> lock(c.mu);
  EXPECT_EQ(c.take_locked(128), &a);  // the block of that size, counted as a hit
  EXPECT_EQ(c.take_locked(128), nullptr);
  EXPECT_EQ(c.stats.cache_hits, 1u);
  std::vector<void*> freed;
  c.release_locked([&](void* p) { freed.push_back(p); });
  EXPECT_EQ(freed, std::vector<void*>{&b});
  EXPECT_EQ(c.stats.bytes_cached, 0u);
}
