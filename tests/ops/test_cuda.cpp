// The CUDA backend beyond single ops: the runtime's answers with and without a device, tensors
// and the caching allocator on the device, autograd through small networks (LeNet-, U-Net- and
// DeepLab-style steps) against the CPU, the optimizer kernels, the 10-step golden LeNet run
// (tests/golden/) on the GPU, and the pooling index math on the host. Each op's own CUDA parity
// checks (samples through autograd, kernels with outputs pre-filled with NaN) are its
// Ops/<op>.CudaParity, from src/ops/<family>/test_cases.cpp. Every GPU test skips itself, saying
// why, where cuda_available() is false (no GPU, no driver, or a build without -DHPCNET_CUDA=ON).
// Tolerances (absolute + relative to the CPU value):
//   float32, CUDA vs CPU: 1e-4 (1 + |cpu|)  (different summation orders; no TF32)
//   float64, CUDA vs CPU: 1e-10 (1 + |cpu|)
//   argmax, max-pool positions, int results: exact
//   golden LeNet on CUDA vs PyTorch: logits and loss 2e-5, gradients 1e-5, parameters after
//   10 SGD steps 1e-5, step losses 2e-5 (the CPU test's, loosened for cuDNN's orders).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/optim.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "src/ops/max_pool2d/math.h"
#include "src/ops/op_cases.h"
#include "src/ops/ops.h"
#include "lenet_sgd_golden.h"
#include "test_paths.h"

using namespace hpcnet;

namespace {

#define REQUIRE_CUDA()                                                                      \
  do {                                                                                      \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason(); \
  } while (0)

const Device kGpu = cuda_device(0);

using namespace ops::case_checks;  // randn, gpu, nan_gpu, expect_close, ... (op_checks.cpp)

// Runs `net` on the CPU and on the GPU, each time on fresh leaf copies of `inputs` that require
// gradients; net returns {loss, other outputs...}. Expects the loss, the other outputs and every
// leaf's gradient on the GPU within 1e-4 (1 + |cpu|) of the CPU's.
void expect_autograd_parity(
    const std::vector<Tensor>& inputs,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&, Device)>& net) {
  auto run = [&](Device d) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : inputs) {
      Tensor l = t.to(d);
      if (l.same(t)) l = t.clone();
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    std::vector<Tensor> out = net(leaves, d);
    out[0].backward();
    for (Tensor& o : out) o = o.detach();
    for (const Tensor& l : leaves) out.push_back(l.grad());
    return out;
  };
  auto c = run(cpu_device()), g = run(kGpu);
  for (size_t i = 0; i < c.size(); ++i)
    expect_close(g[i], c[i], 1e-4, "autograd output " + std::to_string(i));
}

}  // namespace

// ---- runtime: these run everywhere, GPU or not ----

TEST(CudaRuntime, AvailabilityIsAnAnswerNeverACrash) {
  bool avail = cuda_available();  // must not throw, whatever the machine
  EXPECT_EQ(avail, cuda_device_count() > 0);
  if (!avail) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  } else {
    EXPECT_TRUE(cuda_built());
    EXPECT_NE(cuda_describe().find("cuda:0"), std::string::npos) << cuda_describe();
  }
  if (!cuda_built()) {
    EXPECT_FALSE(avail);
    EXPECT_NE(cuda_unavailable_reason().find("HPCNET_CUDA"), std::string::npos);
  }
}

TEST(CudaRuntime, WithoutADeviceCudaTensorsAreAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present; this checks its absence";
  try {
    Tensor t = Tensor::zeros({2, 2}, DType::kFloat32, kGpu);
    FAIL() << "a CUDA tensor was created without a usable device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
  // The CPU keeps working in the same process.
  Tensor c = Tensor::full({3}, 2.0);
  EXPECT_EQ(c.to_vector()[2], 2.0f);
  EXPECT_EQ(cuda_allocator_stats().bytes_in_use, 0u);
}

// ---- tensors and memory on the device ----

TEST(CudaTensor, CopiesFillsAndMovesRoundTrip) {
  REQUIRE_CUDA();
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor g = a.to(kGpu);
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.to_vector(), a.to_vector());
  EXPECT_EQ(g.clone().to(cpu_device()).to_vector(), a.to_vector());
  // dtype conversion and item() on the device
  EXPECT_EQ(g.to(DType::kFloat64).to_vector_f64(), a.to_vector_f64());
  EXPECT_EQ(Tensor::full({}, 2.5, DType::kFloat32, kGpu).item(), 2.5);
  // fills: zeros, full, fill_ of every dtype
  EXPECT_EQ(Tensor::zeros({5}, DType::kFloat32, kGpu).to_vector(), std::vector<float>(5, 0.f));
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kUInt8,
                  DType::kFloat16, DType::kBFloat16}) {
    Tensor f = Tensor::empty({7}, t, kGpu);
    f.fill_(3.0);
    EXPECT_EQ(f.to_vector_f64(), std::vector<double>(7, 3.0)) << dtype_name(t);
  }
  // a strided (transposed) view on the device, copied both ways
  Tensor tv = g.detach();
  tv.impl()->shape = {3, 2};
  tv.impl()->strides = {1, 3};
  EXPECT_EQ(tv.contiguous().to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor back = Tensor::zeros({2, 3}, DType::kFloat32, kGpu);
  Tensor bv = back.detach();
  bv.impl()->shape = {3, 2};
  bv.impl()->strides = {1, 3};
  bv.copy_(Tensor::from_vector({1, 4, 2, 5, 3, 6}, {3, 2}));
  EXPECT_EQ(back.to_vector(), a.to_vector());
  // to_ moves a shared tensor in place, with its grad
  Tensor p = Tensor::from_vector({1, 2}, {2});
  p.set_grad(Tensor::from_vector({3, 4}, {2}));
  Tensor alias = p;
  p.to_(kGpu);
  EXPECT_TRUE(alias.device().is_cuda());
  EXPECT_TRUE(alias.grad().device().is_cuda());
  EXPECT_EQ(alias.grad().to_vector(), (std::vector<float>{3, 4}));
}

TEST(CudaAllocator, RepeatedShapesHitTheCache) {
  REQUIRE_CUDA();
  { Tensor warm = Tensor::empty({1000, 1000}, DType::kFloat32, kGpu); }
  AllocatorStats before = cuda_allocator_stats(0);
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty({1000, 1000}, DType::kFloat32, kGpu);
    EXPECT_GE(cuda_allocator_stats(0).bytes_in_use, 4000000u);
  }
  AllocatorStats after = cuda_allocator_stats(0);
  EXPECT_EQ(after.system_allocs, before.system_allocs);
  EXPECT_GE(after.cache_hits, before.cache_hits + 10);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

// ---- op parity, forward and backward ----

// A DeepLab head step on the device through autograd: a dilated conv, a transposed conv with
// bias, bilinear resizing, x 0.5 and the Dice loss plus cross-entropy; the same on the CPU.
TEST(CudaParity, AutogradThroughDeepLabStyleOps) {
  REQUIRE_CUDA();
  Rng rng(29);
  Tensor x = randn({2, 3, 6, 6}, rng), w1 = randn({4, 3, 3, 3}, rng);
  Tensor wt = randn({4, 5, 2, 2}, rng), bt = randn({5}, rng);
  std::vector<int64_t> labels(2 * 16 * 16);
  for (auto& l : labels) l = rng.uniform() < 0.1 ? 255 : static_cast<int64_t>(rng.randint(5));
  Tensor tgt = Tensor::from_labels(labels).view_nograd({2, 16, 16});
  expect_autograd_parity({x, w1, wt, bt}, [&](const std::vector<Tensor>& leaves, Device d) {
    Tensor h = F::conv2d_relu(leaves[0], leaves[1], Tensor(), 1, 2, 2);  // (2, 4, 6, 6)
    h = F::conv_transpose2d(h, leaves[2], leaves[3], 2, 0, 0);           // (2, 5, 12, 12)
    Tensor logits = F::upsample_bilinear2d(h, 16, 16, false);            // (2, 5, 16, 16)
    Tensor loss = F::add(F::cross_entropy2d(logits, tgt.to(d), Tensor(), 255),
                         F::mul_scalar(F::dice_loss(logits, tgt.to(d)), 0.5));
    return std::vector<Tensor>{loss, logits};
  });
}

// A U-Net decoder step on the device: conv, upsample, cat with a skip, conv, cross_entropy2d
// with weights and ignored pixels, through autograd; the same on the CPU.
TEST(CudaParity, AutogradThroughAUNetDecoderStep) {
  REQUIRE_CUDA();
  Rng rng(26);
  Tensor x = randn({2, 3, 4, 4}, rng), skip = randn({2, 2, 8, 8}, rng);
  Tensor w1 = randn({4, 3, 3, 3}, rng), w2 = randn({5, 6, 3, 3}, rng), b2 = randn({5}, rng);
  Tensor weight = Tensor::from_vector({1, 2, 0.5, 1, 3}, {5});
  std::vector<int64_t> labels(2 * 8 * 8);
  for (auto& l : labels) l = rng.uniform() < 0.1 ? 255 : static_cast<int64_t>(rng.randint(5));
  Tensor tgt = Tensor::from_labels(labels).view_nograd({2, 8, 8});
  expect_autograd_parity({x, skip, w1, w2, b2}, [&](const std::vector<Tensor>& leaves, Device d) {
    Tensor h = F::conv2d_relu(leaves[0], leaves[2], Tensor(), 1, 1);  // (2, 4, 4, 4)
    h = F::cat({F::upsample_nearest2d(h, 2), leaves[1]}, 1);          // (2, 6, 8, 8)
    Tensor logits = F::conv2d(h, leaves[3], leaves[4], 1, 1);         // (2, 5, 8, 8)
    Tensor loss = F::cross_entropy2d(logits, tgt.to(d), weight.to(d), 255);
    return std::vector<Tensor>{loss, logits};
  });
}

// The optimizer kernels beside the ops' (AdamW two steps, the sum of squares of gradient clipping,
// lerp); the ops' kernel checks are in their folders (src/ops/<family>/test_cases.cpp).
TEST(CudaParity, AdamWSumOfSquaresAndLerp) {
  REQUIRE_CUDA();
  Rng rng(22);
  for (DType t : kFloatTypes) {
    std::string tag = dtype_name(t);
    Tensor x = randn({3, 4, 5, 7}, rng, t);
    std::vector<Tensor> ps{randn({5, 3}, rng, t)}, gs{randn({5, 3}, rng, t)};
    std::vector<Tensor> ms{Tensor::zeros({5, 3}, t)}, vs{Tensor::zeros({5, 3}, t)};
    std::vector<Tensor> gps{gpu(ps[0])}, ggs{gpu(gs[0])}, gms{gpu(ms[0])}, gvs{gpu(vs[0])};
    for (int64_t step = 1; step <= 2; ++step) {
      ops::AdamWParams h{1e-2, 0.9, 0.999, 1e-8, 0.05, step};
      ops::adamw_step(ps, gs, ms, vs, h);
      ops::adamw_step(gps, ggs, gms, gvs, h);
    }
    expect_close(gps[0], ps[0], tol_for(t), "adamw " + tag);
    Tensor ss = Tensor::empty({}, DType::kFloat64), gss = Tensor::empty({}, DType::kFloat64, kGpu);
    ops::sum_squares(x, ss);
    ops::sum_squares(gpu(x), gss);
    expect_close(gss, ss, 1e-10, "sum_squares " + tag);
    Tensor a = x.clone(), ga = gpu(x), b = randn(x.shape(), rng, t);
    ops::lerp_inplace(a, b, 0.25);
    ops::lerp_inplace(ga, gpu(b), 0.25);
    expect_close(ga, a, tol_for(t), "lerp " + tag);
  }
}

TEST(CudaParity, SgdStepMatchesTheCpu) {
  REQUIRE_CUDA();
  Rng rng(16);
  struct Run {
    double lr, momentum, dampening, wd;
    bool nesterov;
  };
  for (DType t : kFloatTypes)
    for (const Run& r :
         {Run{0.1, 0, 0, 0, false}, Run{0.1, 0, 0, 0.01, false}, Run{0.01, 0.9, 0, 0, false},
          Run{0.01, 0.9, 0.1, 5e-4, false}, Run{0.01, 0.9, 0, 1e-3, true}}) {
      std::vector<Tensor> p, g, b, gp, gg, gb;
      for (Shape s : {Shape{6, 3, 5, 5}, Shape{6}, Shape{120, 400}, Shape{10}}) {
        p.push_back(randn(s, rng, t));
        g.push_back(randn(s, rng, t));
        b.push_back(Tensor::empty(s, t));
        gp.push_back(gpu(p.back()));
        gg.push_back(gpu(g.back()));
        gb.push_back(Tensor::empty(s, t, kGpu));
      }
      g[1] = gg[1] = Tensor();  // a parameter without a gradient is left alone
      for (int step = 0; step < 3; ++step) {
        ops::SgdParams h{r.lr, r.momentum, r.dampening, r.wd, r.nesterov, step == 0};
        ops::sgd_step(p, g, b, h);
        ops::sgd_step(gp, gg, gb, h);
      }
      std::string tag = std::string("sgd ") + dtype_name(t) + " momentum " +
                        std::to_string(r.momentum) + (r.nesterov ? " nesterov" : "");
      for (size_t k = 0; k < p.size(); ++k) {
        expect_close(gp[k], p[k], tol_for(t), tag + " param " + std::to_string(k));
        if (r.momentum != 0 && k != 1)
          expect_close(gb[k], b[k], tol_for(t), tag + " buffer " + std::to_string(k));
      }
    }
}

TEST(CudaParity, ReshapeAndAutogradThroughASmallNet) {
  REQUIRE_CUDA();
  Rng rng(17);
  Tensor x = randn({3, 3, 12, 12}, rng), w1 = randn({4, 3, 3, 3}, rng), b1 = randn({4}, rng);
  Tensor w2 = randn({5, 4 * 5 * 5}, rng), b2 = randn({5}, rng);
  Tensor tgt = Tensor::from_labels({0, 4, 2});
  expect_autograd_parity({x, w1, b1, w2, b2}, [&](const std::vector<Tensor>& leaves, Device d) {
    Tensor h = F::conv2d_relu(leaves[0], leaves[1], leaves[2], 1, 0);  // (3, 4, 10, 10)
    h = F::max_pool2d(h, 2, 2);                                        // (3, 4, 5, 5)
    h = F::add(h, F::relu(h));                                         // two paths meet
    h = F::reshape(h, {3, -1});                                        // (3, 100)
    Tensor logits = F::linear(h, leaves[3], leaves[4]);
    Tensor loss = F::add(F::cross_entropy(logits, tgt.to(d), 0.05),
                         F::mean(F::nll_loss(F::log_softmax(logits), tgt.to(d))));
    loss = F::add(loss, F::sum(logits));
    return std::vector<Tensor>{loss, logits};
  });
}

// ---- the golden LeNet run on the GPU ----

namespace {
const std::string kGoldenDir = std::string(HPCNET_SOURCE_DIR) + "/tests/golden/";

std::shared_ptr<nn::Module> lenet_on_gpu(const SafetensorsFile& g) {
  auto model = nn::make_model("lenet");
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : model->named_parameters()) state[name] = g.at("init." + name);
  model->load_state_dict(state);
  for (auto& [name, p] : model->named_parameters()) p.to_(kGpu);
  return model;
}
}  // namespace

TEST(CudaGolden, LenetForwardAndBackwardMatchPyTorch) {
  REQUIRE_CUDA();
  SafetensorsFile g = load_safetensors(kGoldenDir + "lenet_golden.safetensors");
  auto model = lenet_on_gpu(g);
  for (auto& [name, p] : model->named_parameters()) ASSERT_TRUE(p.device().is_cuda()) << name;
  Tensor logits = model->forward(g.at("inputs").to(kGpu));
  ASSERT_TRUE(logits.device().is_cuda());
  expect_near_all(logits, g.at("logits"), 2e-5, 0, "logits");
  Tensor loss = F::cross_entropy(logits, g.at("labels").to(kGpu));
  EXPECT_NEAR(loss.item(), g.at("loss").item(), 2e-5);
  loss.backward();
  for (auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().device().is_cuda()) << name;
    expect_near_all(p.grad(), g.at("grad." + name), 1e-5, 0, "grad." + name);
  }
}

TEST(CudaGolden, LenetTenSgdStepsMatchPyTorch) {
  REQUIRE_CUDA();
  SafetensorsFile g = load_safetensors(kGoldenDir + "lenet_golden.safetensors");
  test_util::check_lenet_sgd_steps(g, [&] { return lenet_on_gpu(g); }, kGpu, 2e-5, 1e-5);
}

// ---- the shared arithmetic's index math, checked on the host (no GPU needed) ----

TEST(CudaMath, PoolWindowsCoveringMatchesBruteForce) {
  for (int64_t n = 1; n <= 9; ++n)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t stride = 1; stride <= 3; ++stride)
        for (int64_t pad = 0; 2 * pad <= k; ++pad) {
          int64_t out = ops::conv_out_size(n, k, stride, pad);
          if (out <= 0) continue;
          for (int64_t i = 0; i < n; ++i) {
            int64_t lo, hi;
            math::pool_windows_covering(i, k, stride, pad, out, lo, hi);
            for (int64_t o = 0; o < out; ++o) {
              bool covers = o * stride - pad <= i && i < o * stride - pad + k;
              EXPECT_EQ(covers, o >= lo && o <= hi)
                  << "n " << n << " k " << k << " stride " << stride << " pad " << pad << " i " << i
                  << " o " << o;
            }
          }
        }
}

// The CUDA pool kernels' per-thread bodies (math::pool_window_max per output,
// math::pool_grad_gather per input) run here on the host over whole planes, against the CPU
// kernels: same maxima, same positions, and bit-identical input gradients.
TEST(CudaMath, PoolGatherReproducesTheCpuScatter) {
  Rng rng(18);
  struct Case {
    Shape x;
    ops::Pool2dParams p;
  };
  for (const Case& c :
       {Case{{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0}}, Case{{1, 2, 7, 7}, {3, 3, 2, 2, 1, 1}},
        Case{{1, 1, 9, 8}, {3, 2, 1, 2, 1, 0}}, Case{{1, 1, 5, 5}, {3, 3, 1, 1, 1, 1}}}) {
    Tensor x = randn(c.x, rng);
    float* px = x.data<float>();
    for (int64_t i = 0; i < x.numel(); i += 3) px[i] = 0.25f;  // ties
    int64_t P = ops::conv_out_size(c.x[2], c.p.kernel_h, c.p.stride_h, c.p.pad_h);
    int64_t Q = ops::conv_out_size(c.x[3], c.p.kernel_w, c.p.stride_w, c.p.pad_w);
    Shape ys = {c.x[0], c.x[1], P, Q};
    Tensor y = Tensor::empty(ys), dx = Tensor::empty(c.x), ws, dy = randn(ys, rng);
    ops::max_pool2d_forward(x, y, &ws, c.p);
    ops::max_pool2d_backward(dy, ws, dx, c.p);
    math::PoolGeom g{c.x[2],       c.x[3],       c.p.kernel_h, c.p.kernel_w,
                     c.p.stride_h, c.p.stride_w, c.p.pad_h,    c.p.pad_w};
    int64_t planes = c.x[0] * c.x[1], HW = c.x[2] * c.x[3];
    for (int64_t pl = 0; pl < planes; ++pl) {
      for (int64_t o = 0; o < P * Q; ++o) {
        float best;
        int64_t at;
        math::pool_window_max(px + pl * HW, g, o / Q, o % Q, best, at);
        ASSERT_EQ(best, y.data<float>()[pl * P * Q + o]);
        ASSERT_EQ(at, ws.data<int32_t>()[pl * P * Q + o]);
      }
      for (int64_t i = 0; i < HW; ++i) {
        float v =
            math::pool_grad_gather(dy.data<float>() + pl * P * Q, ws.data<int32_t>() + pl * P * Q,
                                   g, P, Q, i / c.x[3], i % c.x[3]);
        ASSERT_EQ(v, dx.data<float>()[pl * HW + i]) << "plane " << pl << " input " << i;
      }
    }
  }
}
