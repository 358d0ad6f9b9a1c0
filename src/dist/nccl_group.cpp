// The NCCL process group: the processes of an MPI group, one GPU each, reducing CUDA tensors on
// the GPUs. NCCL is opened with dlopen() on first use (libnccl.so.2 is over 200 MB; CPU runs and
// single-GPU runs never map it), so a build needs only nccl.h (HPCNET_WITH_NCCL); the library
// comes from LD_LIBRARY_PATH, else the directory it was found in at configure time.
// Streams: every collective is queued on the group's own high-priority stream behind an event
// recorded on hpcnet's stream (so it sees the gradients written there), and hpcnet's stream is
// put behind the collective's end event when the caller waits for it: the host never waits.
// The watchdog thread owns the end events of the collectives in flight: one that is not done
// after the group's timeout, or an asynchronous NCCL error, aborts the communicator
// (ncclCommAbort, so that no kernel spins forever) and ends the process with exit code 1, naming
// the collective; the launcher then ends the other ranks, as for a rank that dies.
// Invariant: all calls but the watchdog's come from the thread that made the group.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hpcnet/dist.h"

#if defined(HPCNET_WITH_CUDA) && defined(HPCNET_WITH_NCCL)
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "src/core/cuda_device.h"
#include "src/core/cuda_util.h"
#endif

namespace hpcnet::dist {

#if !defined(HPCNET_WITH_CUDA) || !defined(HPCNET_WITH_NCCL)

std::string nccl_unusable_reason() {
#ifndef HPCNET_WITH_CUDA
  return "this build has no CUDA backend";
#else
  return "this build has no NCCL (nccl.h was not found at configure time; set NCCL_ROOT)";
#endif
}
std::string nccl_version() { return ""; }
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup&, int) {
  throw Error("NCCL cannot be used: " + nccl_unusable_reason());
}

#else

namespace {

// The NCCL functions hpcnet calls, resolved from the library once.
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetLastError) get_last_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  std::string error;  // why it did not load ("" when it did)
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#ifdef HPCNET_NCCL_LIBRARY_DIR
    if (!lib) lib = dlopen(HPCNET_NCCL_LIBRARY_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#endif
    if (!lib) {
      const char* e = dlerror();
      a.error = std::string("libnccl.so.2 does not load (") + (e ? e : "not found") +
                "): put NCCL's library directory (the CUDA toolkit's lib64, or pip's "
                "nvidia/nccl/lib) on LD_LIBRARY_PATH";
      return a;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)> >(dlsym(lib, name));
      if (!fn && a.error.empty()) a.error = std::string("libnccl.so.2 lacks ") + name;
    };
    sym(a.get_version, "ncclGetVersion");
    sym(a.get_unique_id, "ncclGetUniqueId");
    sym(a.comm_init_rank, "ncclCommInitRank");
    sym(a.comm_destroy, "ncclCommDestroy");
    sym(a.comm_abort, "ncclCommAbort");
    sym(a.comm_get_async_error, "ncclCommGetAsyncError");
    sym(a.get_error_string, "ncclGetErrorString");
    sym(a.get_last_error, "ncclGetLastError");
    sym(a.all_reduce, "ncclAllReduce");
    sym(a.broadcast, "ncclBroadcast");
    return a;
  }();
  return api;
}

[[noreturn]] void throw_nccl_error(ncclResult_t r, ncclComm_t comm, int rank, const char* call,
                                   const char* file, int line) {
  std::string what = nccl().get_error_string(r);
  if (const char* last = nccl().get_last_error(comm); last && *last)
    what += ": " + std::string(last);
  throw DistError("NCCL call failed on rank " + std::to_string(rank) + ": " + what + " (" + call +
                  " at " + file + ":" + std::to_string(line) + ")");
}

#define HPCNET_NCCL_CALL(comm, ...)                                                \
  do {                                                                             \
    ncclResult_t hpcnet_r_ = (__VA_ARGS__);                                        \
    if (hpcnet_r_ != ncclSuccess)                                                  \
      throw_nccl_error(hpcnet_r_, comm, rank(), #__VA_ARGS__, __FILE__, __LINE__); \
  } while (0)

using Clock = std::chrono::steady_clock;

// The end of one collective: an event on the group's stream, shared by its Work and the watchdog.
struct Pending {
  cudaEvent_t done = nullptr;
  long long seq = 0;
  const char* what = "";
  Clock::time_point start;
  double timeout_s = 0;  // the group's timeout when it was queued (0 = forever)
  ~Pending() {
    if (done) cudaEventDestroy(done);
  }
};

// cudaEventQuery, clearing the thread's last error when it answers "not ready" (as PyTorch does:
// a later launch check must not mistake it for a failure).
cudaError_t query(cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q == cudaErrorNotReady) (void)cudaGetLastError();
  return q;
}

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<Pending> p, cudaStream_t compute)
      : p_(std::move(p)), compute_(compute) {}
  bool test() override { return query(p_->done) == cudaSuccess; }
  // Orders hpcnet's stream after the collective; the watchdog covers the wait itself.
  void wait() override { HPCNET_CUDA(cudaStreamWaitEvent(compute_, p_->done, 0)); }

 private:
  std::shared_ptr<Pending> p_;
  cudaStream_t compute_;
};

class NcclGroup : public ProcessGroup {
 public:
  NcclGroup(ProcessGroup& host, int device) : host_(host), device_(device) {
    timeout_s_ = host.timeout();
    cuda::set_device(device_);
    int least = 0, greatest = 0;
    HPCNET_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    HPCNET_CUDA(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    HPCNET_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    ncclUniqueId id{};
    if (host_.rank() == 0) HPCNET_NCCL_CALL(nullptr, nccl().get_unique_id(&id));
    host_.broadcast(&id, sizeof id, 0);
    // Blocks until every rank has joined (NCCL's own bootstrap; no hpcnet timeout here).
    HPCNET_NCCL_CALL(nullptr, nccl().comm_init_rank(&comm_, host_.world_size(), id, host_.rank()));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclGroup() override {
    // Leaving normally: the collectives in flight finish first, the watchdog still guarding them
    // (a dead peer then ends the process after the timeout, never a hang). Leaving on an
    // exception (a peer may be gone): abort rather than wait.
    const bool unwinding = std::uncaught_exceptions() > 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      if (unwinding || pending_.empty()) {
        stop_ = true;
        break;
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    cv_.notify_all();
    watchdog_.join();
    if (unwinding)
      nccl().comm_abort(comm_);
    else
      nccl().comm_destroy(comm_);
    pending_.clear();
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  int local_size() const override { return host_.local_size(); }
  int local_rank() const override { return host_.local_rank(); }
  std::string backend() const override { return "nccl"; }
  void set_timeout(double seconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    timeout_s_ = seconds;
    host_.set_timeout(seconds);
  }

  // Host memory: through the host group.
  void allreduce_sum(float* data, size_t count) override { host_.allreduce_sum(data, count); }
  void allreduce_sum(double* data, size_t count) override { host_.allreduce_sum(data, count); }
  std::unique_ptr<Work> allreduce_sum_async(float* data, size_t count) override {
    return host_.allreduce_sum_async(data, count);
  }
  void broadcast(void* data, size_t bytes, int root) override {
    host_.broadcast(data, bytes, root);
  }
  void barrier() override { host_.barrier(); }
  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    std::lock_guard<std::mutex> lock(mu_);  // the watchdog is not inside an NCCL call now
    stop_ = true;
    nccl().comm_abort(comm_);
    host_.abort(exit_code, message);
    std::_Exit(exit_code);  // (host_.abort does not return)
  }

  // Device memory: NCCL on the group's stream.
  bool reduces_on_device() const override { return true; }
  std::unique_ptr<Work> allreduce_device_async(float* data, size_t count, bool average) override {
    const ncclRedOp_t op = average ? ncclAvg : ncclSum;
    auto p = start("all-reduce", [&] {
      HPCNET_NCCL_CALL(comm_,
                       nccl().all_reduce(data, data, count, ncclFloat32, op, comm_, stream_));
    });
    return std::make_unique<NcclWork>(std::move(p), compute());
  }
  void allreduce_device(void* data, size_t count, DType dtype, bool average) override {
    HPCNET_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
                 std::string("NCCL all-reduce of ") + dtype_name(dtype));
    const ncclDataType_t t = dtype == DType::kFloat32 ? ncclFloat32 : ncclFloat64;
    auto p = start("all-reduce", [&] {
      HPCNET_NCCL_CALL(comm_, nccl().all_reduce(data, data, count, t, average ? ncclAvg : ncclSum,
                                                comm_, stream_));
    });
    NcclWork(std::move(p), compute()).wait();
  }
  void broadcast_device(void* data, size_t bytes, int root) override {
    HPCNET_CHECK(root >= 0 && root < world_size(), "broadcast from rank " + std::to_string(root) +
                                                       " in a group of " +
                                                       std::to_string(world_size()));
    auto p = start("broadcast", [&] {
      HPCNET_NCCL_CALL(comm_, nccl().broadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
    });
    NcclWork(std::move(p), compute()).wait();
  }

 private:
  cudaStream_t compute() const { return cuda::stream(device_); }

  // Queues launch() on the group's stream behind the work on hpcnet's, and hands the collective's
  // end to the watchdog.
  template <class Launch>
  std::shared_ptr<Pending> start(const char* what, Launch&& launch) {
    cuda::set_device(device_);
    HPCNET_CUDA(cudaEventRecord(ready_, compute()));
    HPCNET_CUDA(cudaStreamWaitEvent(stream_, ready_, 0));
    launch();
    auto p = std::make_shared<Pending>();
    HPCNET_CUDA(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));
    HPCNET_CUDA(cudaEventRecord(p->done, stream_));
    p->seq = ++seq_;
    p->what = what;
    p->start = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      p->timeout_s = timeout_s_;
      pending_.push_back(p);
    }
    cv_.notify_all();
    return p;
  }

  // Pops the collectives that are done; fails the process on a timeout or an error. The front
  // entry is queried outside the lock (start() never waits behind a driver call).
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(pending_.empty() ? 200 : 10));
      while (!stop_ && !pending_.empty()) {
        std::shared_ptr<Pending> p = pending_.front();
        lock.unlock();
        const cudaError_t q = query(p->done);
        ncclResult_t async = ncclSuccess;
        if (q != cudaSuccess) nccl().comm_get_async_error(comm_, &async);
        lock.lock();
        if (q == cudaSuccess) {
          pending_.pop_front();
          continue;
        }
        const double waited = std::chrono::duration<double>(Clock::now() - p->start).count();
        const bool nccl_error = async != ncclSuccess && async != ncclInProgress;
        if (q != cudaErrorNotReady || nccl_error || (p->timeout_s > 0 && waited > p->timeout_s)) {
          const std::string why =
              q != cudaErrorNotReady ? std::string(cudaGetErrorString(q))
              : nccl_error
                  ? std::string("NCCL: ") + nccl().get_error_string(async)
                  : "not done after " + std::to_string(static_cast<int>(waited)) +
                        " s (--dist-timeout " + std::to_string(static_cast<int>(p->timeout_s)) +
                        "): a peer is dead, hung or out of step";
          fail(*p, why);
        }
        break;
      }
    }
  }

  [[noreturn]] void fail(const Pending& p, const std::string& why) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "hpcnet: rank %d of %d: NCCL %s #%lld on cuda:%d: %s; aborting the NCCL "
                 "communicator and the job\n",
                 rank(), world_size(), p.what, p.seq, device_, why.c_str());
    std::fflush(stderr);
    nccl().comm_abort(comm_);
    std::_Exit(1);
  }

  ProcessGroup& host_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  long long seq_ = 0;
  std::mutex mu_;  // pending_, stop_, timeout_s_ (shared with the watchdog)
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending> > pending_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::string nccl_unusable_reason() { return nccl().error; }

std::string nccl_version() {
  if (!nccl().error.empty()) return "";
  int v = 0;
  if (nccl().get_version(&v) != ncclSuccess) return "";
  // 2.9 and later: major * 10000 + minor * 100 + patch; before: major * 1000 + minor * 100 + patch.
  if (v < 10000)
    return std::to_string(v / 1000) + "." + std::to_string(v / 100 % 10) + "." +
           std::to_string(v % 100);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& host, int device) {
  const std::string why = nccl_unusable_reason();
  if (!why.empty()) throw Error("NCCL cannot be used: " + why);
  HPCNET_CHECK(device >= 0 && device < cuda_device_count(),
               "NCCL group on cuda:" + std::to_string(device) + ", but " +
                   std::to_string(cuda_device_count()) + " GPUs are visible");
  return std::make_unique<NcclGroup>(host, device);
}

#endif

}  // namespace hpcnet::dist
