// The predict-time forward pass of a detector alone (eval mode, no graph, one image), timed per
// configuration with the configurations interleaved round by round, so that a load that comes and
// goes (a shared machine) falls on each of them alike. Per configuration: the median wall time
// and the median process CPU time per forward, and the largest difference of its outputs from
// the first configuration's (relative to the largest magnitude of that output).
//
//   build/hpcnet_predict_bench --model yolov8n --imgsz 640 --threads 2 --rounds 5 --iters 5 \
//       --configs fp32,bf16,fp32-unfolded
//   build/hpcnet_predict_bench --imgsz 640 --height 480   # predict's input for a 640x480 frame
//
// Configurations: fp32 (the default inference path), bf16 (--precision bf16), fp32-unfolded /
// bf16-unfolded (HPCNET_FUSE=0: BatchNorm and SiLU as ops of their own).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/tensor.h"
#include "src/nn/models/models.h"
#include "src/nn/models/yolo.h"
#include "src/ops/ops.h"

namespace {

using hpcnet::Tensor;

double now(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Config {
  std::string name;
  bool bf16 = false, fold = true;
  bool streams = false;  // "-streams": `threads` forwards at once, one thread each
  std::vector<double> wall, cpu;
  hpcnet::nn::Outputs out;
};

void apply(const Config& c) {
  hpcnet::ops::set_conv_precision(c.bf16 ? hpcnet::ops::Precision::kBFloat16
                                         : hpcnet::ops::Precision::kFloat32);
  hpcnet::nn::set_inference_fusion(c.fold);
}

// Largest |a - b| over the largest |a|, over all outputs.
double max_rel_diff(const hpcnet::nn::Outputs& a, const hpcnet::nn::Outputs& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const Tensor x = a[i].contiguous(), y = b[i].contiguous();
    const float *px = x.data<float>(), *py = y.data<float>();
    double diff = 0, scale = 1e-12;
    for (int64_t j = 0; j < x.numel(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(px[j] - py[j])));
      scale = std::max(scale, static_cast<double>(std::fabs(px[j])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "yolov8n", configs = "fp32,bf16";
  int64_t imgsz = 640, height = 0, classes = 10;  // height 0: imgsz (a square input)
  int threads = 2, rounds = 5, iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model_name = v;
    else if (k == "--imgsz") imgsz = std::stoll(v);
    else if (k == "--height") height = std::stoll(v);
    else if (k == "--classes") classes = std::stoll(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--rounds") rounds = std::stoi(v);
    else if (k == "--iters") iters = std::stoi(v);
    else if (k == "--configs") configs = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  std::vector<Config> cs;
  for (const std::string& n : split(configs)) {
    Config c;
    c.name = n;
    c.bf16 = n.rfind("bf16", 0) == 0;
    c.fold = n.find("unfolded") == std::string::npos;
    c.streams = n.find("-streams") != std::string::npos;
    if (n != "fp32" && n != "bf16" && n != "fp32-unfolded" && n != "bf16-unfolded" &&
        n != "fp32-streams" && n != "bf16-streams") {
      std::fprintf(stderr, "unknown configuration %s\n", n.c_str());
      return 2;
    }
    cs.push_back(c);
  }
  auto model = hpcnet::nn::make_model(model_name, hpcnet::nn::ModelOptions{classes});
  model->eval();
  hpcnet::Rng rng(1);
  if (height <= 0) height = imgsz;
  std::vector<float> pixels(static_cast<size_t>(3 * height * imgsz));
  for (float& p : pixels) p = static_cast<float>(rng.uniform());
  const Tensor x = Tensor::from_vector(pixels, {1, 3, height, imgsz});
  hpcnet::NoGradGuard no_grad;
  for (Config& c : cs) {  // warm-up: primitives created, outputs kept for the comparison
    apply(c);
    c.out = model->forward_all(x);
    model->forward_all(x);
  }
  for (int r = 0; r < rounds; ++r)
    for (Config& c : cs) {
      apply(c);
      if (c.streams) {  // per image: the wall time of threads x iters forwards over their count
        const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&] {
            omp_set_num_threads(1);
            hpcnet::NoGradGuard ng;
            for (int i = 0; i < iters; ++i) model->forward_all(x);
          });
        for (auto& t : ts) t.join();
        const double n = static_cast<double>(threads) * iters;
        for (int i = 0; i < iters; ++i) {
          c.wall.push_back((now(CLOCK_MONOTONIC) - w0) / n);
          c.cpu.push_back((now(CLOCK_PROCESS_CPUTIME_ID) - c0) / n);
        }
        continue;
      }
      for (int i = 0; i < iters; ++i) {
        const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        model->forward_all(x);
        c.wall.push_back(now(CLOCK_MONOTONIC) - w0);
        c.cpu.push_back(now(CLOCK_PROCESS_CPUTIME_ID) - c0);
      }
    }
  {  // what the per-call BatchNorm folding costs, summed over the model's Convs
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      const double c0 = now(CLOCK_PROCESS_CPUTIME_ID);
      for (auto& [name, m] : model->named_modules())
        if (auto* conv = dynamic_cast<hpcnet::nn::YoloConv*>(m)) conv->folded_weights();
      t.push_back(now(CLOCK_PROCESS_CPUTIME_ID) - c0);
    }
    std::printf("folding every Conv's BatchNorm: %.2f ms cpu\n", 1e3 * median(t));
  }
  std::printf("%s, (1, 3, %lld, %lld), %d threads, %d rounds x %d forwards\n", model_name.c_str(),
              static_cast<long long>(height), static_cast<long long>(imgsz), threads, rounds, iters);
  std::printf("%-16s %12s %12s %10s %14s\n", "config", "wall ms", "cpu ms", "FPS", "max rel diff");
  for (const Config& c : cs)
    std::printf("%-16s %12.2f %12.2f %10.2f %14.3g\n", c.name.c_str(), 1e3 * median(c.wall),
                1e3 * median(c.cpu), 1.0 / median(c.wall), max_rel_diff(cs[0].out, c.out));
  return 0;
}
