// cuda_available() and friends, device description, synchronisation and cross-device copies.
// Compiled in every build; without HPCNET_WITH_CUDA the answers say so and memory calls throw.
#include "src/core/cuda_device.h"

#include <cstdio>
#include <cstring>
#include <mutex>

#ifdef HPCNET_WITH_CUDA
#include "src/core/cuda_util.h"
#endif

namespace hpcnet {

#ifndef HPCNET_WITH_CUDA

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string(what) +
              ": this build has no CUDA backend (configure with -DHPCNET_CUDA=ON where the CUDA "
              "toolkit is installed), use the CPU device");
}
}  // namespace

bool cuda_built() { return false; }
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() {
  return "this build has no CUDA backend (configure with -DHPCNET_CUDA=ON)";
}
std::string cuda_describe() { return cuda_unavailable_reason(); }
std::string cuda_device_uuid(int) { no_cuda("cuda_device_uuid"); }
void cuda_synchronize(Device) { no_cuda("cuda_synchronize"); }
void* cuda_cached_alloc(size_t, int) { no_cuda("CUDA memory"); }
void cuda_cached_free(void*, size_t, int) {}
AllocatorStats cuda_allocator_stats(int) { return {}; }
void cuda_allocator_release_cached() {}
void cuda_copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t n) {
  if (!dd.is_cpu() || !sd.is_cpu()) no_cuda("copy to or from CUDA");
  if (n) std::memmove(dst, src, n);  // CPU to CPU, as the CUDA build's
}
void cuda_fill_bytes(void*, Device, const void*, size_t, int64_t) { no_cuda("fill on CUDA"); }
void cuda_increment_int64(void*, Device) { no_cuda("a counter on CUDA"); }
PinnedUploader::PinnedUploader(int) { next_ = 0; }
PinnedUploader::~PinnedUploader() = default;
Tensor PinnedUploader::upload(const Tensor&, Device) { no_cuda("upload to CUDA"); }
void PinnedUploader::upload_into(const Tensor&, Tensor&) { no_cuda("upload to CUDA"); }
CudaGraph::~CudaGraph() = default;
bool CudaGraph::capture(Device, const std::function<void()>&) { no_cuda("CUDA graphs"); }
void CudaGraph::replay() { no_cuda("CUDA graphs"); }
void CudaGraph::reset() {
  graph_ = exec_ = nullptr;
  pool_ = -1;
}
std::unique_ptr<profile::DeviceTimer> make_cuda_event_timer(Device) {
  no_cuda("CUDA event timing");
}
int cuda_graph_pool_begin(int) { no_cuda("CUDA graphs"); }
void cuda_graph_pool_end(int) {}
void cuda_graph_pool_release(int, int) {}

#else  // HPCNET_WITH_CUDA

namespace {

std::string version_str(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky, but leave nothing behind
      r.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (" +
                 cudaGetErrorName(e) + ")";
      if (e == cudaErrorInsufficientDriver)
        r.reason +=
            "; no NVIDIA driver was found, or it is older than CUDA " + version_str(CUDART_VERSION);
      else if (e == cudaErrorNoDevice)
        r.reason += "; no GPU is visible (check CUDA_VISIBLE_DEVICES)";
      return r;
    }
    if (n <= 0) {
      r.reason = "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
      return r;
    }
    r.count = n > cuda::kMaxDevices ? cuda::kMaxDevices : n;
    return r;
  }();
  return p;
}

void check_device(Device d) {
  if (!d.is_cuda()) return;
  if (!cuda_available())
    throw Error("cuda:" + std::to_string(d.index) + " is not usable: " + cuda_unavailable_reason());
  if (d.index < 0 || d.index >= cuda_device_count())
    throw Error("cuda:" + std::to_string(d.index) + " does not exist (" +
                std::to_string(cuda_device_count()) + " visible)");
}

}  // namespace

bool cuda_built() { return true; }
bool cuda_available() { return probe().count > 0; }
int cuda_device_count() { return probe().count; }
std::string cuda_unavailable_reason() { return probe().reason; }

std::string cuda_device_uuid(int index) {
  check_device(cuda_device(index));
  cudaDeviceProp p{};
  HPCNET_CUDA(cudaGetDeviceProperties(&p, index));
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : p.uuid.bytes) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

std::string cuda_describe() {
  if (!cuda_available()) return cuda_unavailable_reason();
  std::string out;
  for (int i = 0; i < cuda_device_count(); ++i) {
    cudaDeviceProp p{};
    HPCNET_CUDA(cudaGetDeviceProperties(&p, i));
    char gib[32];
    std::snprintf(gib, sizeof(gib), "%.1f",
                  static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    out += "cuda:" + std::to_string(i) + " " + p.name + ", sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", " + std::to_string(p.multiProcessorCount) + " SMs, " + gib +
           " GiB\n";
  }
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  size_t dnn = cudnnGetVersion();
  out += "driver " + version_str(drv) + ", runtime " + version_str(rt) + ", cuDNN " +
         std::to_string(dnn / 10000) + "." + std::to_string((dnn % 10000) / 100) + "." +
         std::to_string(dnn % 100) + ", cuBLASLt " + std::to_string(cublasLtGetVersion());
  return out;
}

void cuda_synchronize(Device d) {
  if (!d.is_cuda()) return;
  check_device(d);
  cuda::set_device(d.index);
  HPCNET_CUDA(cudaStreamSynchronize(cuda::stream(d.index)));
  cuda::raise_deferred_errors(d.index);
}

void cuda_copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t n) {
  check_device(dd);
  check_device(sd);
  if (n == 0) return;
  if (dd.is_cpu() && sd.is_cpu()) {
    std::memmove(dst, src, n);
    return;
  }
  // The stream of the device involved (the destination's for device-to-device copies).
  int index = dd.is_cuda() ? dd.index : sd.index;
  cuda::set_device(index);
  cudaStream_t s = cuda::stream(index);
  if (dd.is_cuda() && sd.is_cuda() && dd.index != sd.index) {
    // Peer copy: wait for the source's queued writes first.
    HPCNET_CUDA(cudaStreamSynchronize(cuda::stream(sd.index)));
    HPCNET_CUDA(cudaMemcpyPeerAsync(dst, dd.index, src, sd.index, n, s));
    return;
  }
  HPCNET_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
  if (dd.is_cpu()) {
    HPCNET_CUDA(cudaStreamSynchronize(s));
    cuda::raise_deferred_errors(index);
  }
}

PinnedUploader::PinnedUploader(int slots) : slots_(static_cast<size_t>(slots < 1 ? 1 : slots)) {}

PinnedUploader::~PinnedUploader() {
  // No throwing here: a failure on the way out is ignored.
  for (Slot& s : slots_) {
    if (s.event) {
      cudaEventSynchronize(static_cast<cudaEvent_t>(s.event));
      cudaEventDestroy(static_cast<cudaEvent_t>(s.event));
    }
    if (s.host) cudaFreeHost(s.host);
  }
}

Tensor PinnedUploader::upload(const Tensor& t, Device device) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  upload_into(t, out);
  return out;
}

void PinnedUploader::upload_into(const Tensor& t0, Tensor& out) {
  const Device device = out.device();
  HPCNET_CHECK(t0.device().is_cpu() && device.is_cuda() && out.is_contiguous() &&
                   out.shape() == t0.shape() && out.dtype() == t0.dtype(),
               "PinnedUploader: copies a CPU tensor into a contiguous CUDA tensor of its shape "
               "and dtype");
  check_device(device);
  const Tensor t = t0.is_contiguous() ? t0 : t0.contiguous();
  const size_t n = t.nbytes();
  if (n == 0) return;
  Slot& s = slots_[next_++ % slots_.size()];
  cuda::set_device(device.index);
  if (s.event) HPCNET_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(s.event)));
  if (s.bytes < n) {
    if (s.host) HPCNET_CUDA(cudaFreeHost(s.host));
    s.host = nullptr;
    s.bytes = 0;
    HPCNET_CUDA(cudaMallocHost(&s.host, n));
    s.bytes = n;
  }
  if (s.event && s.device != device.index) {  // an event records on its own device's streams
    HPCNET_CUDA(cudaEventDestroy(static_cast<cudaEvent_t>(s.event)));
    s.event = nullptr;
  }
  if (!s.event) {
    cudaEvent_t e;
    HPCNET_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    s.event = e;
    s.device = device.index;
  }
  std::memcpy(s.host, t.raw_data(), n);
  cudaStream_t st = cuda::stream(device.index);
  HPCNET_CUDA(cudaMemcpyAsync(out.raw_data(), s.host, n, cudaMemcpyHostToDevice, st));
  HPCNET_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(s.event), st));
}

CudaGraph::~CudaGraph() {
  try {
    reset();
  } catch (...) {  // nothing thrown out of a destructor
  }
}

void CudaGraph::reset() {
  if (exec_ || graph_) cuda_synchronize(device_);  // a replay in flight still uses the pool
  if (exec_) HPCNET_CUDA(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  if (graph_) HPCNET_CUDA(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
  exec_ = graph_ = nullptr;
  if (pool_ >= 0) cuda_graph_pool_release(device_.index, pool_);
  pool_ = -1;
}

bool CudaGraph::capture(Device device, const std::function<void()>& fn) {
  HPCNET_CHECK(device.is_cuda(), "CudaGraph: a CUDA device is needed");
  check_device(device);
  reset();
  device_ = device;
  why_.clear();
  cuda_synchronize(device);  // nothing of earlier steps in flight while the pool changes hands
  cuda::set_device(device.index);
  cudaStream_t st = cuda::stream(device.index);
  HPCNET_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
  pool_ = cuda_graph_pool_begin(device.index);
  std::string failure;
  try {
    fn();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "an exception that is not a std::exception";
  }
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(st, &g);
  cuda_graph_pool_end(device.index);
  if (failure.empty() && end != cudaSuccess)
    failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  (void)cudaGetLastError();  // a failed capture leaves its error behind
  if (failure.empty()) {
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
    if (inst == cudaSuccess) {
      graph_ = g;
      exec_ = exec;
      return true;
    }
    failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
    (void)cudaGetLastError();
  }
  if (g) cudaGraphDestroy(g);
  cuda_graph_pool_release(device.index, pool_);
  pool_ = -1;
  why_ = failure;
  return false;
}

void CudaGraph::replay() {
  HPCNET_CHECK(exec_ != nullptr, "CudaGraph: replay() before a successful capture()");
  cuda::set_device(device_.index);
  HPCNET_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cuda::stream(device_.index)));
}

namespace {

class CudaEventTimer : public profile::DeviceTimer {
 public:
  explicit CudaEventTimer(Device device) : device_(device) {}
  ~CudaEventTimer() override {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
    for (Call& c : calls_) {
      cudaEventDestroy(c.begin);
      cudaEventDestroy(c.end);
    }
  }
  int64_t start() override {
    Call c;
    c.begin = take();
    c.end = take();
    HPCNET_CUDA(cudaEventRecord(c.begin, cuda::stream(device_.index)));
    calls_.push_back(c);
    return static_cast<int64_t>(calls_.size()) - 1;
  }
  void stop(int64_t token, const char* name, double flops) override {
    Call& c = calls_.at(static_cast<size_t>(token));
    HPCNET_CUDA(cudaEventRecord(c.end, cuda::stream(device_.index)));
    c.name = name;
    c.flops = flops;
  }
  void flush() override {
    cuda_synchronize(device_);
    for (Call& c : calls_) {
      float ms = 0;
      if (c.name) {  // (a call still open has no end: left out)
        HPCNET_CUDA(cudaEventElapsedTime(&ms, c.begin, c.end));
        profile::add(c.name, ms / 1000.0, c.flops);
      }
      free_.push_back(c.begin);
      free_.push_back(c.end);
    }
    calls_.clear();
  }

 private:
  struct Call {
    cudaEvent_t begin = nullptr, end = nullptr;
    const char* name = nullptr;
    double flops = 0;
  };
  cudaEvent_t take() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cuda::set_device(device_.index);
    cudaEvent_t e = nullptr;
    HPCNET_CUDA(cudaEventCreate(&e));  // with timing
    return e;
  }
  Device device_;
  std::vector<Call> calls_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace

std::unique_ptr<profile::DeviceTimer> make_cuda_event_timer(Device device) {
  HPCNET_CHECK(device.is_cuda(), "make_cuda_event_timer: a CUDA device is needed");
  check_device(device);
  return std::make_unique<CudaEventTimer>(device);
}

#endif  // HPCNET_WITH_CUDA

}  // namespace hpcnet
