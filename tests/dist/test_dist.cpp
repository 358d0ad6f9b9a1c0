// Tests of data-parallel training (src/dist, the DistributedSampler in the DataLoader, the
// gradient-ready hook of the autograd engine): the single-process group; launcher detection;
// sampler shares (disjoint, complete, padded, the same permutation on every rank); the gradient
// reducer's buckets, overlap with backward and averaging (through an in-process fake group); and,
// where mpirun is installed and the build has MPI, the real binary under
// `mpirun --oversubscribe -np 2 / -np 4`: N ranks at batch B end with the same weights as one
// process at batch N x B, resume on the same or another rank count, and a rank that dies or hangs
// ends the job with a non-zero code naming it, quickly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/dist.h"
#include "hpcnet/functional.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "src/core/cuda_device.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// ---- helpers ---------------------------------------------------------------------------------

// n tiny 2x2 images labelled i % 10.
std::shared_ptr<data::InMemoryDataset> ds_tiny(int n) {
  auto d = std::make_shared<data::InMemoryDataset>(data::cifar10_class_names());
  for (int i = 0; i < n; ++i) {
    uint8_t px[12];
    for (int k = 0; k < 12; ++k) px[k] = static_cast<uint8_t>(i);
    d->add(px, 2, 2, i % 10);
  }
  return d;
}

std::vector<int64_t> ds_all_indices(data::DataLoader& loader, int64_t epoch) {
  std::vector<int64_t> out;
  loader.begin_epoch(epoch);
  data::Batch b;
  while (loader.next(b)) out.insert(out.end(), b.indices.begin(), b.indices.end());
  return out;
}

data::DataLoaderOptions ds_opts(int64_t batch, bool shuffle, int rank, int world) {
  data::DataLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.seed = 7;
  o.rank = rank;
  o.world_size = world;
  return o;
}

// A fake group of `world` ranks in one process: every other rank is taken to hold exactly this
// rank's data, so an all-reduce multiplies by world (exact in float for powers of two). Records
// each async launch and whether `watch` had a gradient yet at that moment.
class FakeGroup : public dist::ProcessGroup {
 public:
  explicit FakeGroup(int world) : world_(world) {}
  int rank() const override { return 0; }
  int world_size() const override { return world_; }
  int local_size() const override { return world_; }
  std::string backend() const override { return "fake"; }
  void allreduce_sum(float* d, size_t n) override {
    for (size_t i = 0; i < n; ++i) d[i] *= static_cast<float>(world_);
  }
  void allreduce_sum(double* d, size_t n) override {
    for (size_t i = 0; i < n; ++i) d[i] *= world_;
  }
  std::unique_ptr<dist::Work> allreduce_sum_async(float* d, size_t n) override {
    launches.push_back(n);
    watch_had_grad.push_back(watch.defined() && watch.grad().defined());
    allreduce_sum(d, n);
    struct Done : dist::Work {
      bool test() override { return true; }
      void wait() override {}
    };
    return std::make_unique<Done>();
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code, const std::string& msg) override {
    throw std::runtime_error("abort(" + std::to_string(code) + "): " + msg);
  }
  std::vector<size_t> launches;
  std::vector<bool> watch_had_grad;
  Tensor watch;

 private:
  int world_;
};

// Loss of a LeNet on a fixed random batch of 4.
Tensor ds_lenet_loss(nn::Module& model, Device device = cpu_device()) {
  Rng rng(3, 0);
  std::vector<float> x(4 * 3 * 32 * 32);
  for (float& v : x) v = static_cast<float>(rng.uniform() * 2 - 1);
  Tensor images = Tensor::from_vector(x, {4, 3, 32, 32}).to(device);
  Tensor labels = Tensor::from_labels({1, 5, 9, 0}).to(device);
  return F::cross_entropy(model.forward(images), labels);
}

// Every parameter's gradient after a plain backward of ds_lenet_loss (then zeroed again).
std::vector<std::vector<float>> ds_plain_grads(nn::Module& model, Device device = cpu_device()) {
  ds_lenet_loss(model, device).backward();
  std::vector<std::vector<float>> want;
  for (auto& p : model.parameters()) want.push_back(p.grad().to_vector());
  model.zero_grad();
  return want;
}

}  // namespace

// ---- the single-process group ----------------------------------------------------------------

TEST(DistSingleGroup, IsRankZeroOfOneAndEveryCollectiveIsTheIdentity) {
  auto g = dist::make_single_group();
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->world_size(), 1);
  EXPECT_EQ(g->local_size(), 1);
  EXPECT_EQ(g->backend(), "single");
  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  g->allreduce_sum(f.data(), f.size());
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  std::vector<double> d = {0.1, 0.2};
  g->allreduce_sum(d.data(), d.size());
  EXPECT_EQ(d, (std::vector<double>{0.1, 0.2}));
  auto w = g->allreduce_sum_async(f.data(), f.size());
  EXPECT_TRUE(w->test());
  w->wait();
  Tensor t = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  g->allreduce_avg(t);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  g->allreduce_sum(t);
  g->broadcast(t, 0);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  g->barrier();
  EXPECT_THROW(g->broadcast(t, 1), Error);
}

TEST(DistSingleGroup, WorldIsSingleWithoutALauncher) {
  // ctest does not run under mpirun: the process-wide group is the stub.
  if (dist::launched_by_mpi_launcher()) GTEST_SKIP() << "this test process runs under a launcher";
  EXPECT_EQ(dist::world().backend(), "single");
  EXPECT_EQ(dist::world().world_size(), 1);
  EXPECT_TRUE(dist::world_initialized());
  EXPECT_FALSE(dist::describe_build().empty());
}

TEST(DistSingleGroup, LauncherDetectionReadsTheLaunchersVariables) {
  const char* names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",      "PMIX_RANK",
                         "SLURM_NTASKS",         "SLURM_STEP_ID", "HPCNET_DIST"};
  std::map<std::string, std::string> saved;
  for (const char* n : names)
    if (const char* v = std::getenv(n)) saved[n] = v;
  for (const char* n : names) ::unsetenv(n);
  EXPECT_FALSE(dist::launched_by_mpi_launcher());
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_TRUE(dist::launched_by_mpi_launcher());
  ::setenv("HPCNET_DIST", "single", 1);  // the override wins
  EXPECT_FALSE(dist::launched_by_mpi_launcher());
  ::unsetenv("HPCNET_DIST");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::setenv("PMI_SIZE", "2", 1);
  EXPECT_TRUE(dist::launched_by_mpi_launcher());
  ::unsetenv("PMI_SIZE");
  ::setenv("SLURM_NTASKS", "8", 1);  // an allocation, but not an srun step
  EXPECT_FALSE(dist::launched_by_mpi_launcher());
  ::setenv("SLURM_STEP_ID", "0", 1);
  EXPECT_TRUE(dist::launched_by_mpi_launcher());
  for (const char* n : names) ::unsetenv(n);
  for (auto& [n, v] : saved) ::setenv(n.c_str(), v.c_str(), 1);
}

TEST(DistSingleGroup, TensorCollectivesRefuseNonCpuOrNonFloat) {
  auto g = dist::make_single_group();
  Tensor labels = Tensor::from_labels({1, 2});
  EXPECT_THROW(g->allreduce_sum(labels), Error);
  Tensor undefined;
  EXPECT_THROW(g->allreduce_avg(undefined), Error);
}

// ---- DistributedSampler semantics ---------------------------------------------------------------

TEST(DistSampler, SharesAreDisjointCompletePaddedAndFromOnePermutation) {
  for (int n : {10, 12, 3}) {
    for (int world : {2, 4, 5}) {
      for (bool shuffle : {true, false}) {
        auto ds = ds_tiny(n);
        data::DataLoader whole(ds, data::Compose(), ds_opts(3, shuffle, 0, 1));
        const std::vector<int64_t> order = whole.epoch_order(1);
        const int64_t share = (n + world - 1) / world;
        std::vector<int64_t> padded;
        for (int64_t i = 0; i < share * world; ++i) padded.push_back(order[i % n]);
        std::multiset<int64_t> seen;
        int64_t batches = -1;
        for (int r = 0; r < world; ++r) {
          data::DataLoader loader(ds, data::Compose(), ds_opts(3, shuffle, r, world));
          EXPECT_EQ(loader.samples_per_epoch(), share);
          if (batches < 0) batches = loader.num_batches();
          EXPECT_EQ(loader.num_batches(), batches) << "every rank runs as many steps";
          std::vector<int64_t> mine = ds_all_indices(loader, 1);
          ASSERT_EQ(static_cast<int64_t>(mine.size()), share);
          for (int64_t j = 0; j < share; ++j)  // positions rank, rank + W, ...
            EXPECT_EQ(mine[j], padded[r + j * world]) << "n=" << n << " W=" << world;
          seen.insert(mine.begin(), mine.end());
        }
        // Complete: every index at least once; the extra ones are the padding, taken from the
        // start of the permutation.
        std::multiset<int64_t> want(padded.begin(), padded.end());
        EXPECT_EQ(seen, want);
        for (int i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u);
        if (n % world == 0)
          for (int i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u) << "disjoint without padding";
      }
    }
  }
}

TEST(DistSampler, EveryEpochIsReshuffledTheSameWayOnEveryRank) {
  auto ds = ds_tiny(40);
  data::DataLoader r0(ds, data::Compose(), ds_opts(4, true, 0, 2));
  data::DataLoader r0_again(ds, data::Compose(), ds_opts(4, true, 0, 2));
  data::DataLoader r1(ds, data::Compose(), ds_opts(4, true, 1, 2));
  EXPECT_EQ(ds_all_indices(r0, 0), ds_all_indices(r0_again, 0));
  EXPECT_NE(ds_all_indices(r0, 0), ds_all_indices(r0, 1));
  // Epoch 3's union is epoch 3's permutation of the whole dataset.
  std::vector<int64_t> a = ds_all_indices(r0, 3), b = ds_all_indices(r1, 3);
  std::set<int64_t> u(a.begin(), a.end());
  u.insert(b.begin(), b.end());
  EXPECT_EQ(u.size(), 40u);
}

TEST(DistSampler, BatchSizesMatchAcrossRanksWithAndWithoutDropLast) {
  auto ds = ds_tiny(23);  // 3 ranks: shares of 8 (one padded), batches of 3: 3, 3, 2
  for (bool drop_last : {false, true}) {
    for (int r = 0; r < 3; ++r) {
      auto o = ds_opts(3, true, r, 3);
      o.drop_last = drop_last;
      data::DataLoader loader(ds, data::Compose(), o);
      loader.begin_epoch(0);
      std::vector<int64_t> sizes;
      data::Batch b;
      while (loader.next(b)) sizes.push_back(b.size);
      EXPECT_EQ(sizes, drop_last ? std::vector<int64_t>({3, 3}) : std::vector<int64_t>({3, 3, 2}));
    }
  }
}

TEST(DistSampler, WorkersGiveTheSameShare) {
  auto ds = ds_tiny(50);
  auto o = ds_opts(4, true, 1, 3);
  data::DataLoader sync(ds, data::Compose(), o);
  o.num_workers = 2;
  data::DataLoader async(ds, data::Compose(), o);
  EXPECT_EQ(ds_all_indices(sync, 2), ds_all_indices(async, 2));
}

TEST(DistSampler, RejectsARankOutsideTheWorld) {
  auto ds = ds_tiny(4);
  EXPECT_THROW(data::DataLoader(ds, data::Compose(), ds_opts(1, false, 2, 2)), InputError);
  EXPECT_THROW(data::DataLoader(ds, data::Compose(), ds_opts(1, false, -1, 2)), InputError);
  EXPECT_THROW(data::DataLoader(ds, data::Compose(), ds_opts(1, false, 0, 0)), InputError);
}

// ---- the gradient-ready hook -------------------------------------------------------------------

TEST(DistEngineHook, FiresOncePerLeafAfterItsLastAccumulation) {
  Tensor w = Tensor::from_vector({0.5f, -1.0f, 2.0f, 0.25f}, {2, 2});
  w.set_requires_grad(true);
  Tensor b = Tensor::from_vector({0.1f, 0.2f}, {2});
  b.set_requires_grad(true);
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  // w is used twice: its gradient has two contributions; the hook must see their sum.
  Tensor y = F::sum(F::add(F::linear(x, w, b), F::linear(F::relu(x), w, Tensor())));
  std::map<TensorImpl*, int> calls;
  std::map<TensorImpl*, std::vector<float>> seen;
  {
    GradReadyHookScope scope([&](TensorImpl* leaf) {
      calls[leaf]++;
      seen[leaf] = leaf->grad.to_vector();
    });
    y.backward();
  }
  EXPECT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[w.impl()], 1);
  EXPECT_EQ(calls[b.impl()], 1);
  EXPECT_EQ(seen[w.impl()], w.grad().to_vector());
  EXPECT_EQ(seen[b.impl()], b.grad().to_vector());
  // Without a scope nothing is called (and the result is the same).
  std::vector<float> gw = w.grad().to_vector();
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  Tensor y2 = F::sum(F::add(F::linear(x, w, b), F::linear(F::relu(x), w, Tensor())));
  y2.backward();
  EXPECT_EQ(w.grad().to_vector(), gw);
  EXPECT_EQ(calls[w.impl()], 1);
}

// ---- the gradient reducer ----------------------------------------------------------------------

TEST(DistReducer, BucketsFollowReverseParameterOrderUpToTheCap) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  auto params = model->parameters();  // conv1.w 450, conv1.b 6, conv2.w 2400, conv2.b 16,
                                      // fc1.w 48000, fc1.b 120, fc2.w 10080, fc2.b 84,
                                      // fc3.w 840, fc3.b 10
  FakeGroup g(2);
  dist::GradReducer r(g, params, {100 * 1024});
  EXPECT_EQ(r.num_floats(), 62006u);
  ASSERT_EQ(r.num_buckets(), 3u);
  EXPECT_EQ(r.bucket_params(0), (std::vector<size_t>{9, 8, 7, 6, 5}));  // 11134 floats
  EXPECT_EQ(r.bucket_params(1), (std::vector<size_t>{4}));              // fc1.weight alone
  EXPECT_EQ(r.bucket_params(2), (std::vector<size_t>{3, 2, 1, 0}));
  dist::GradReducer one(g, params, {0});
  EXPECT_EQ(one.num_buckets(), 1u);
  EXPECT_EQ(one.bucket_params(0).size(), 10u);
}

TEST(DistReducer, StartsBucketsDuringBackwardAndAveragesExactly) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  auto params = model->parameters();
  const std::vector<std::vector<float>> want = ds_plain_grads(*model);  // the reference
  for (size_t cap : {size_t{100 * 1024}, size_t{0}}) {
    FakeGroup g(4);       // every "rank" has the same gradient: the average is the gradient itself
    g.watch = params[0];  // conv1.weight: the last gradient backward produces
    dist::GradReducer r(g, params, {cap});
    for (int step = 0; step < 2; ++step) {  // the second step reuses the buffers
      g.launches.clear();
      g.watch_had_grad.clear();
      model->zero_grad();
      r.backward(ds_lenet_loss(*model));
      for (size_t k = 0; k < params.size(); ++k)
        EXPECT_EQ(params[k].grad().to_vector(), want[k]) << "parameter " << k << " cap " << cap;
      ASSERT_EQ(g.launches.size(), r.num_buckets());
      if (cap > 0) {
        EXPECT_EQ(g.launches, (std::vector<size_t>{11134, 48000, 2872}));
        // The first two buckets left before backward reached conv1: overlap.
        EXPECT_FALSE(g.watch_had_grad[0]);
        EXPECT_FALSE(g.watch_had_grad[1]);
        EXPECT_TRUE(g.watch_had_grad[2]);
      } else {
        EXPECT_EQ(g.launches, (std::vector<size_t>{62006}));
        EXPECT_TRUE(g.watch_had_grad[0]);
      }
    }
  }
}

TEST(DistReducer, AParameterWithoutGradientContributesZeros) {
  Tensor used = Tensor::from_vector({1, 2}, {2});
  used.set_requires_grad(true);
  Tensor unused = Tensor::from_vector({3, 4, 5}, {3});
  unused.set_requires_grad(true);
  FakeGroup g(2);
  dist::GradReducer r(g, {used, unused}, {4});  // a bucket each
  r.backward(F::sum(used));
  EXPECT_EQ(used.grad().to_vector(), (std::vector<float>{1, 1}));
  ASSERT_TRUE(unused.grad().defined());
  EXPECT_EQ(unused.grad().to_vector(), (std::vector<float>{0, 0, 0}));
}

TEST(DistReducer, InAGroupOfOneItIsPlainBackward) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  auto single = dist::make_single_group();
  dist::GradReducer r(*single, model->parameters());
  r.backward(ds_lenet_loss(*model));
  auto p = model->parameters();
  std::vector<float> g0 = p[0].grad().to_vector();
  model->zero_grad();
  ds_lenet_loss(*model).backward();
  EXPECT_EQ(p[0].grad().to_vector(), g0);
}

// reduce_single runs the bucket path in a group of one: copies into the buckets, the identity
// all-reduce and the copies out give plain backward's gradients bit for bit, unused parameters
// zeros, on the second step too.
TEST(DistReducer, ReduceSingleRunsTheBucketsInAGroupOfOne) {
  manual_seed(0);
  auto model = nn::make_model("lenet");
  auto params = model->parameters();
  const std::vector<std::vector<float>> want = ds_plain_grads(*model);
  auto single = dist::make_single_group();
  dist::GradReducer r(*single, params, {4096, true});
  EXPECT_GT(r.num_buckets(), 1u);
  for (int step = 0; step < 2; ++step) {
    model->zero_grad();
    r.backward(ds_lenet_loss(*model));
    for (size_t k = 0; k < params.size(); ++k)
      EXPECT_EQ(params[k].grad().to_vector(), want[k]) << "parameter " << k << " step " << step;
  }
}

// allgather_u64 carries 64-bit values through double sums exactly (the 2-rank case runs in every
// CUDA training under mpirun; here a group of one).
TEST(DistBackend, AllgatherCarriesEvery64BitValueExactly) {
  auto single = dist::make_single_group();
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, uint64_t{0x8000000000000001ULL}})
    EXPECT_EQ(dist::allgather_u64(*single, v), std::vector<uint64_t>{v});
}

// --dist-backend: which transport CUDA gradients take, decided the same on every rank.
TEST(DistBackend, AutoTakesNcclOnlyWhereEveryRankCan) {
  EXPECT_EQ(dist::choose_cuda_backend("auto", 4, 4, ""), "nccl");
  EXPECT_EQ(dist::choose_cuda_backend("auto", 4, 3, ""), "mpi");  // another rank cannot
  EXPECT_EQ(dist::choose_cuda_backend("auto", 2, 0, "2 ranks share one GPU"), "mpi");
  EXPECT_EQ(dist::choose_cuda_backend("mpi", 4, 4, ""), "mpi");
  EXPECT_EQ(dist::choose_cuda_backend("nccl", 2, 2, ""), "nccl");
  try {
    dist::choose_cuda_backend("nccl", 2, 0, "2 ranks share one GPU, and ...");
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--dist-backend nccl: 2 ranks share one GPU"), std::string::npos) << m;
    EXPECT_NE(m.find("use --dist-backend mpi"), std::string::npos) << m;
  }
  try {
    dist::choose_cuda_backend("nccl", 8, 6, "");  // this rank could, two others cannot
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("2 of 8 ranks cannot use NCCL"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dist::choose_cuda_backend("gloo", 2, 2, ""), Error);
}

TEST(DistBackend, ARankWithoutAGpuOfItsOwnCannotUseNccl) {
  EXPECT_EQ(dist::nccl_unusable_on_this_rank(false, 1), "a rank runs on the CPU");
  EXPECT_EQ(dist::nccl_unusable_on_this_rank(true, 2),
            "2 ranks share one GPU, and NCCL needs a GPU of its own for each rank");
  const std::string lib = dist::nccl_unusable_reason();
  EXPECT_EQ(dist::nccl_unusable_on_this_rank(true, 1), lib);
  if (!lib.empty()) {  // no NCCL here
    EXPECT_EQ(dist::nccl_version(), "");
    if (dist::mpi_built())
      EXPECT_NE(dist::describe_build().find("host copies"), std::string::npos);
    return;
  }
  // The library loads (it needs no GPU to load and say its version).
  const std::string v = dist::nccl_version();
  EXPECT_EQ(v.rfind("2.", 0), 0u) << v;
  if (dist::mpi_built())
    EXPECT_NE(dist::describe_build().find("NCCL " + v), std::string::npos)
        << dist::describe_build();
}

// The NCCL group of one rank on the GPU (the device machine has one GPU, and NCCL refuses two
// ranks on one): its collectives are the identity on device memory, queued on its own stream
// and ordered before hpcnet's later work; the reducer's device buckets give plain backward's
// gradients.
TEST(DistNccl, CudaOneRankGroup) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  if (!dist::nccl_unusable_reason().empty()) GTEST_SKIP() << dist::nccl_unusable_reason();
  auto single = dist::make_single_group();
  auto g = dist::make_nccl_group(*single, 0);
  EXPECT_EQ(g->backend(), "nccl");
  EXPECT_TRUE(g->reduces_on_device());
  EXPECT_EQ(g->world_size(), 1);
  const Device gpu = cuda_device(0);
  Tensor f = Tensor::from_vector({1.5f, -2, 3}, {3}).to(gpu);
  g->allreduce_sum(f);
  EXPECT_EQ(f.to_vector(), (std::vector<float>{1.5f, -2, 3}));
  g->allreduce_avg(f);
  EXPECT_EQ(f.to_vector(), (std::vector<float>{1.5f, -2, 3}));
  Tensor d = Tensor::from_vector_f64({0.1, 1e300}, {2}).to(gpu);
  g->allreduce_sum(d);
  EXPECT_EQ(d.to(cpu_device()).data<double>()[1], 1e300);
  Tensor l = Tensor::from_labels({7, 8, 9}).to(gpu);
  g->broadcast(l, 0);
  EXPECT_EQ(l.to(cpu_device()).data<int64_t>()[2], 9);
  double host = 2.5;
  g->allreduce_sum(&host, 1);  // host memory: through the host group
  EXPECT_EQ(host, 2.5);

  manual_seed(0);
  auto model = nn::make_model("lenet");
  model->to_(gpu);
  auto params = model->parameters();
  const std::vector<std::vector<float>> want = ds_plain_grads(*model, gpu);
  dist::GradReducer r(*g, params, {4096, true});
  for (int step = 0; step < 2; ++step) {
    model->zero_grad();
    r.backward(ds_lenet_loss(*model, gpu));
    for (size_t k = 0; k < params.size(); ++k) {
      ASSERT_TRUE(params[k].grad().device() == gpu);
      EXPECT_EQ(params[k].grad().to_vector(), want[k]) << "parameter " << k << " step " << step;
    }
  }
}

TEST(DistReducer, ReplicaCheckPassesForIdenticalTensors) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3});
  Tensor b = Tensor::from_vector({1, 2, 4}, {3});
  EXPECT_NE(dist::fingerprint({a}), dist::fingerprint({b}));
  EXPECT_EQ(dist::fingerprint({a}), dist::fingerprint({a.clone()}));
  auto single = dist::make_single_group();
  EXPECT_NO_THROW(dist::check_same_on_all_ranks(*single, {a}, "a"));
}

// ---- the real binary under mpirun
// ----------------------------------------------------------------

namespace {

class DistMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::mpi_built()) GTEST_SKIP() << "this build has no MPI (HPCNET_MPI=OFF)";
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
    write_tiny_cifar10(dir_ / "data", 40, 20, 91);  // 200 training images
  }
  // `hpcnet train` on the tiny data, directly (ranks = 0) or under mpirun -np ranks.
  RunResult train(int ranks, const std::string& args) {
    std::string cmd;
    if (ranks > 0)
      cmd = "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp -np " +
            std::to_string(ranks) + " ";
    cmd += hpcnet_command() + " train --data " + shell_quote((dir_ / "data").string()) +
           " --workers 0 --threads 1 --device cpu --no-progress --log-every 5 " + args;
    return run_shell(cmd);
  }
  TempDir tmp_{"dist"};
  fs::path dir_ = tmp_.path();
};

// Largest absolute difference between the tensors of two safetensors files (same names).
double ds_max_abs_diff(const fs::path& a, const fs::path& b) {
  SafetensorsFile fa = load_safetensors(a.string()), fb = load_safetensors(b.string());
  EXPECT_EQ(fa.order, fb.order);
  double m = 0;
  for (const auto& n : fa.order) {
    std::vector<float> va = fa.at(n).to_vector(), vb = fb.at(n).to_vector();
    EXPECT_EQ(va.size(), vb.size()) << n;
    for (size_t i = 0; i < std::min(va.size(), vb.size()); ++i)
      m = std::max(m, static_cast<double>(std::fabs(va[i] - vb[i])));
  }
  return m;
}

std::vector<double> ds_logged_losses(const fs::path& metrics) {
  std::vector<double> out;
  std::istringstream in(read_file(metrics));
  for (std::string l; std::getline(in, l);) {
    auto j = nlohmann::json::parse(l);
    if (j.at("event") == "log") out.push_back(j.at("loss").get<double>());
  }
  return out;
}

}  // namespace

// N ranks at batch B take the same steps as one process at batch N x B: each global batch is the
// same set of images (DistributedSampler shares of one permutation), the mean gradient is the same
// up to float summation order. 30 steps cross the epoch boundary (25 steps per epoch).
// Tolerance: 1e-5 absolute on every weight (observed: about 1e-8).
TEST_F(DistMpiTest, NRanksAtBatchBMatchOneProcessAtBatchNB) {
  const std::string common = " --epochs 2 --steps 30 --lr 0.01 --momentum 0.9";
  RunResult one =
      train(0, "--out " + shell_quote((dir_ / "r1").string()) + " --batch-size 8" + common);
  ASSERT_EQ(one.rc, 0) << one.err;
  for (int ranks : {2, 4}) {
    const fs::path out = dir_ / ("r" + std::to_string(ranks) + "x");
    RunResult r = train(ranks, "--out " + shell_quote(out.string()) + " --batch-size " +
                                   std::to_string(8 / ranks) + common);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(count_of(r.out, "Finished Training"), 1u) << "only rank 0 prints:\n" << r.out;
    EXPECT_LT(ds_max_abs_diff(dir_ / "r1" / "model.safetensors", out / "model.safetensors"), 1e-5)
        << ranks << " ranks";
    // The printed loss is the mean over every rank's batches: the single process's loss.
    std::vector<double> l1 = ds_logged_losses(dir_ / "r1" / "metrics.jsonl");
    std::vector<double> ln = ds_logged_losses(out / "metrics.jsonl");
    ASSERT_EQ(l1.size(), ln.size());
    for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], ln[i], 1e-5) << "log line " << i;
    // The start record says how the run was split.
    std::string first = read_file(out / "metrics.jsonl");
    auto start = nlohmann::json::parse(first.substr(0, first.find('\n')));
    EXPECT_EQ(start.at("world_size"), ranks);
    EXPECT_EQ(start.at("global_batch_size"), 8);
    EXPECT_EQ(start.at("allreduce_floats_per_step"), 62006);
  }
}

// Detection: yolov8n (57 BatchNorm layers) on 2 ranks at batch 2 with --sync-bn takes the steps of
// one process at batch 4: SyncBatchNorm gives every rank the global batch's statistics, and the
// v8 loss is normalised by the global batch's target-score sum. Without augmentation (letterbox
// only), across an epoch boundary with a validation between; the model file (EMA weights and
// BatchNorm buffers) agrees within 1e-5 (observed 8e-7; one process on 1 and on 2 threads differs
// by 4e-7), the logged losses within 1e-5 relative. lr 0.001: at 0.01 this untrained model turns
// float-order noise into real differences within a few steps (the assigner's top-k picks flip;
// one process on 1 and 2 threads then differs by 6e-6 after 4 steps). Without --sync-bn the
// ranks normalise with their own batches and the files differ by far more (0.1 observed).
// --nbs 8 at a global batch of 4: gradients are summed over 1, 1, 2 and 2 batches (the warm-up's
// ramp), one accumulation across the epoch boundary; each rank's all-reduce averages the sum.
TEST_F(DistMpiTest, DetectWithSyncBnOnTwoRanksMatchesOneProcessAtTheGlobalBatch) {
  write_tiny_detect(dir_ / "det", 16, 4);
  auto run = [&](int ranks, const std::string& out, int batch, const std::string& extra) {
    std::string cmd;
    if (ranks > 0)
      cmd = "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp -np " +
            std::to_string(ranks) + " ";
    cmd += hpcnet_command() + " train --model yolov8n --data " +
           shell_quote((dir_ / "det" / "data.yaml").string()) +
           " --imgsz 64 --epochs 2 --steps 6 --augment=false --optimizer sgd --lr 0.001 --nbs 8"
           " --workers 0 --threads 1 --device cpu --no-progress --log-every 2 --batch-size " +
           std::to_string(batch) + " --out " + shell_quote((dir_ / out).string()) + extra;
    return run_shell(cmd);
  };
  RunResult one = run(0, "d1", 4, "");
  ASSERT_EQ(one.rc, 0) << one.err;
  RunResult two = run(2, "d2", 2, " --sync-bn");
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_EQ(count_of(two.out, "Finished Training"), 1u) << two.out;
  // One walk per job: rank 0 read both splits' indexes (data.yaml, labels) and sent them.
  EXPECT_EQ(count_of(two.out, "train index: read by rank 0, sent to 1 other rank"), 1u) << two.out;
  EXPECT_EQ(count_of(two.out, "val index: read by rank 0, sent to 1 other rank"), 1u) << two.out;
  EXPECT_LT(ds_max_abs_diff(dir_ / "d1" / "model.safetensors", dir_ / "d2" / "model.safetensors"),
            1e-5);
  std::vector<double> l1 = ds_logged_losses(dir_ / "d1" / "metrics.jsonl");
  std::vector<double> l2 = ds_logged_losses(dir_ / "d2" / "metrics.jsonl");
  ASSERT_EQ(l1.size(), 3u);
  ASSERT_EQ(l1.size(), l2.size());
  for (size_t i = 0; i < l1.size(); ++i)
    EXPECT_NEAR(l1[i], l2[i], 1e-5 * std::abs(l1[i])) << "log line " << i;
  RunResult own = run(2, "d2own", 2, "");
  ASSERT_EQ(own.rc, 0) << own.err;
  EXPECT_GT(
      ds_max_abs_diff(dir_ / "d1" / "model.safetensors", dir_ / "d2own" / "model.safetensors"),
      1e-4);
}

// An image folder of photographs on 2 ranks: rank 0 walks the folder and sends the index (the
// other rank lists nothing), each rank decodes only its half of the images (the epoch record says
// how many each read), and 2 ranks at batch 4 end where one process at batch 8 does.
TEST_F(DistMpiTest, RankZeroWalksAnImageFolderAndEachRankDecodesItsShare) {
  for (int k = 0; k < 16; ++k) {
    const fs::path f =
        dir_ / "photos" / "train" / (k % 2 ? "cat" : "dog") / ("img" + std::to_string(k) + ".jpg");
    fs::create_directories(f.parent_path());
    write_jpeg_file(f, 40 + k, 36, noisy_pixels(40 + k, 36, k % 2 ? 200 : 50, 120, 90, k, 0, 40));
  }
  auto run = [&](int ranks, const std::string& out, int batch) {
    std::string cmd;
    if (ranks > 0)
      cmd = "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp -np " +
            std::to_string(ranks) + " ";
    cmd += hpcnet_command() + " train --model lenet --dataset imagefolder --data " +
           shell_quote((dir_ / "photos").string()) +
           " --imgsz 32 --augment cifar --epochs 1 --cache none --lr 0.01 --momentum 0.9"
           " --workers 0 --threads 1 --device cpu --no-progress --batch-size " +
           std::to_string(batch) + " --out " + shell_quote((dir_ / out).string());
    return run_shell(cmd);
  };
  RunResult one = run(0, "f1", 8);
  ASSERT_EQ(one.rc, 0) << one.err;
  EXPECT_EQ(count_of(one.out, "index: read by rank 0"), 0u) << one.out;
  RunResult two = run(2, "f2", 4);
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_EQ(count_of(two.out, "train index: read by rank 0, sent to 1 other rank"), 1u) << two.out;
  EXPECT_LT(ds_max_abs_diff(dir_ / "f1" / "model.safetensors", dir_ / "f2" / "model.safetensors"),
            1e-5);
  std::istringstream metrics(read_file(dir_ / "f2" / "metrics.jsonl"));
  bool seen = false;
  for (std::string l; std::getline(metrics, l);) {
    const auto j = nlohmann::json::parse(l);
    if (j.at("event") != "epoch") continue;
    seen = true;
    EXPECT_EQ(j.at("images_read_per_rank"), nlohmann::json::array({8.0, 8.0}));
  }
  EXPECT_TRUE(seen);
}

// One all-reduce after backward (--bucket-kb 0) and bucketed all-reduces during backward give
// bit-identical weights: the same sums, only started at different times.
TEST_F(DistMpiTest, BucketedAndSingleAllReduceAgreeExactly) {
  const std::string common = " --epochs 1 --steps 10 --batch-size 4";
  RunResult a = train(2, "--out " + shell_quote((dir_ / "a").string()) + common);
  RunResult b = train(2, "--out " + shell_quote((dir_ / "b").string()) + " --bucket-kb 0" + common);
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(ds_max_abs_diff(dir_ / "a" / "model.safetensors", dir_ / "b" / "model.safetensors"),
            0.0);
}

// Checkpoints do not depend on the rank count: a 2-rank run resumed on 2 ranks is bit-identical to
// an uninterrupted one; resumed on 4 ranks or on 1 process, it finishes.
TEST_F(DistMpiTest, ResumeOnTheSameOrAnotherNumberOfRanks) {
  const std::string common = " --batch-size 4";
  const fs::path full = dir_ / "full", part = dir_ / "part";
  RunResult r = train(2, "--out " + shell_quote(full.string()) + " --epochs 2" + common);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = train(2, "--out " + shell_quote(part.string()) + " --epochs 1" + common);
  ASSERT_EQ(r.rc, 0) << r.err;
  fs::copy(part, dir_ / "part4", fs::copy_options::recursive);
  r = train(2, "--resume " + shell_quote(part.string()) + " --epochs 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_file(full / "model.safetensors"), read_file(part / "model.safetensors"));
  r = train(4, "--resume " + shell_quote((dir_ / "part4").string()) + " --epochs 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("resuming a run of 2 ranks on 4"), std::string::npos) << r.err;
  r = train(0, "--resume " + shell_quote((dir_ / "part4").string()) + " --epochs 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto ck = load_safetensors((dir_ / "part4" / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.metadata.at("hpcnet.epochs_done"), "3");
  EXPECT_EQ(ck.metadata.at("hpcnet.world_size"), "1");
}

// A rank killed mid-epoch (SIGKILL, as kill -9) ends the whole job: mpirun sees the rank die
// without MPI_Finalize, names it and stops the others; the exit code is non-zero, within 60 s.
TEST_F(DistMpiTest, KillingOneOfFourRanksEndsTheJobNamingIt) {
  RunResult r = train(4, "--out " + shell_quote((dir_ / "k").string()) +
                             " --epochs 2 --batch-size 2 --fail-at-step 2:7:kill");
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.err.find("rank 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Finished Training"), std::string::npos);
  // Resuming is possible from the last checkpoint; here none was written yet (mid-epoch 1).
  EXPECT_FALSE(fs::exists(dir_ / "k" / "checkpoint.safetensors"));
}

// A non-finite loss on one rank only: every rank stops at that same step (the others would
// otherwise wait in the gradient all-reduce until the watchdog), all naming that rank; the
// checkpoint of epoch 1 is the one left, and resuming from it finishes the run.
TEST_F(DistMpiTest, ANanOnOneRankStopsEveryRankAtThatStepNamingIt) {
  const fs::path out = dir_ / "nan";
  // 200 images, 2 ranks x batch 4: 25 steps per epoch; step 30 is epoch 2's 5th.
  RunResult r =
      train(2, "--out " + shell_quote(out.string()) +
                   " --epochs 2 --batch-size 4 --dist-timeout 20 --fail-at-step 1:30:nan");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_LT(r.seconds, 25);  // --dist-timeout + 5 s
  EXPECT_NE(r.err.find("loss became nan on rank 1 at epoch 2 step 5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checkpoint.safetensors holds it"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Finished Training"), std::string::npos);
  auto ck = load_safetensors((out / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.metadata.at("hpcnet.epochs_done"), "1");
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  r = train(2, "--resume " + shell_quote(out.string()) + " --epochs 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos);
  // --nan-policy skip: rank 1's loss is NaN for the last 6 steps (45-50); both ranks drop those
  // batches together (the replicas stay identical: the end-of-epoch fingerprint check passes)
  // and the run finishes.
  const fs::path skip = dir_ / "nan_skip";
  r = train(2, "--out " + shell_quote(skip.string()) +
                   " --epochs 2 --batch-size 4 --dist-timeout 20 --fail-at-step 1:45:nan"
                   " --nan-policy skip");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("loss became nan on rank 1 at epoch 2 step 25: batch skipped "
                       "(--nan-policy skip; 6 so far)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos);
}

// Rank 0 SIGKILLed inside its checkpoint write (epoch 2's, 4 KiB in: HPCNET_TEST_WRITE_FAULT):
// the job ends naming rank 0, epoch 1's checkpoint is intact, the dead writer's temporary file is
// removed by the resume, and the resumed run ends bit-exactly as an uninterrupted one.
TEST_F(DistMpiTest, RankZeroKilledDuringACheckpointWriteLosesNothing) {
  const fs::path full = dir_ / "full", cut = dir_ / "cut";
  RunResult r = train(2, "--out " + shell_quote(full.string()) + " --epochs 3 --batch-size 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_shell(
      "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp -np 2 -x "
      "HPCNET_TEST_WRITE_FAULT=kill:4096:checkpoint:2 " +
      hpcnet_command() + " train --data " + shell_quote((dir_ / "data").string()) +
      " --workers 0 --threads 1 --device cpu --no-progress --log-every 5 --out " +
      shell_quote(cut.string()) + " --epochs 3 --batch-size 4 --dist-timeout 20");
  EXPECT_NE(r.rc, 0);
  EXPECT_LT(r.seconds, 25);
  EXPECT_NE(r.err.find("rank 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Finished Training"), std::string::npos);
  auto ck = load_safetensors((cut / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.metadata.at("hpcnet.epochs_done"), "1");
  int temps = 0;
  for (const auto& e : fs::directory_iterator(cut))
    temps += e.path().filename().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(temps, 1);  // the killed writer's, 4 KiB long
  r = train(2, "--resume " + shell_quote(cut.string()) + " --epochs 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const auto& e : fs::directory_iterator(cut))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  EXPECT_EQ(read_file(full / "model.safetensors"), read_file(cut / "model.safetensors"));
}

// A rank that hangs (alive, never reaching the next collective) is found by the others'
// watchdog: past --dist-timeout they ask every rank which collective it waits in, name the one
// that does not answer, and abort the job.
TEST_F(DistMpiTest, AHungRankIsNamedByTheWatchdogAndTheJobEnds) {
  RunResult r = train(4, "--out " + shell_quote((dir_ / "h").string()) +
                             " --epochs 2 --batch-size 2 --dist-timeout 2 --fail-at-step 1:5:hang");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("rank 1 did not answer"), std::string::npos) << r.err;
}

// Deferred loss reads (what CUDA ranks do, HPCNET_DEFER_LOSS=1 on the CPU) on 2 ranks: the
// losses compared across ranks when they are read give the same run as reading each at once
// (loss lines, weights bit for bit), and a diverging run stops every rank naming the same step.
TEST_F(DistMpiTest, DeferredLossReadsOnTwoRanksGiveTheSameRunAndTheSameNanStep) {
  auto run2 = [&](const std::string& defer, const std::string& out, const std::string& extra) {
    return run_shell("HPCNET_DEFER_LOSS=" + defer +
                     " mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp "
                     "-x HPCNET_DEFER_LOSS -np 2 " +
                     hpcnet_command() + " train --data " + shell_quote((dir_ / "data").string()) +
                     " --workers 0 --threads 1 --device cpu --no-progress --log-every 5 --out " +
                     shell_quote((dir_ / out).string()) + " --batch-size 4 " + extra);
  };
  const std::string common = "--epochs 1 --steps 12 --save-every 7 --lr 0.01 --momentum 0.9";
  RunResult now = run2("0", "now", common), later = run2("1", "later", common);
  ASSERT_EQ(now.rc, 0) << now.err;
  ASSERT_EQ(later.rc, 0) << later.err;
  EXPECT_EQ(ds_logged_losses(dir_ / "later" / "metrics.jsonl"),
            ds_logged_losses(dir_ / "now" / "metrics.jsonl"));
  EXPECT_EQ(ds_logged_losses(dir_ / "now" / "metrics.jsonl").size(), 2u);
  auto deferred = [&](const std::string& out) {
    std::istringstream in(read_file(dir_ / out / "metrics.jsonl"));
    std::string first;
    std::getline(in, first);
    return nlohmann::json::parse(first).at("deferred_loss_reads").get<bool>();
  };
  EXPECT_FALSE(deferred("now"));
  EXPECT_TRUE(deferred("later"));
  EXPECT_EQ(read_file(dir_ / "later" / "model.safetensors"),
            read_file(dir_ / "now" / "model.safetensors"));
  const std::string diverge = "--epochs 1 --steps 12 --lr 1e12";
  RunResult a = run2("0", "nan-now", diverge), b = run2("1", "nan-later", diverge);
  EXPECT_EQ(a.rc, 1) << a.err;
  EXPECT_EQ(b.rc, 1) << b.err;
  auto stop_line = [](const std::string& err) {
    const size_t p = err.find("loss became");
    return p == std::string::npos ? err : err.substr(p, err.find(';', p) - p);
  };
  EXPECT_NE(stop_line(a.err).find(" step "), std::string::npos) << a.err;
  EXPECT_EQ(stop_line(b.err), stop_line(a.err)) << b.err;
}

// --dist-backend nccl needs CUDA tensors: refused on every rank with --device cpu.
TEST_F(DistMpiTest, DistBackendNcclWithTheCpuIsRefusedOnEveryRank) {
  RunResult r = train(2, "--out " + shell_quote((dir_ / "n").string()) +
                             " --epochs 1 --steps 2 --dist-backend nccl");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--dist-backend nccl needs --device cuda"), std::string::npos) << r.err;
}

// An input error on every rank exits 2 (the CLI's code for bad input), never a hang.
TEST_F(DistMpiTest, BadInputOnEveryRankExitsTwo) {
  RunResult r = run_shell("mpirun --allow-run-as-root --oversubscribe -np 2 " + hpcnet_command() +
                          " train --data " + shell_quote((dir_ / "missing").string()) + " --out " +
                          shell_quote((dir_ / "x").string()));
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("hpcnet: error:"), std::string::npos) << r.err;
}
