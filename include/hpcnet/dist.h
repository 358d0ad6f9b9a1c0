// Data-parallel training across processes: a ProcessGroup says who this process is (rank) among how
// many (world size) and runs the collectives that keep model replicas in step (all-reduce,
// broadcast, barrier); a GradReducer averages parameter gradients over the group in buckets that
// start all-reducing while backward is still running (PyTorch DistributedDataParallel's scheme).
// Backends: "single" (one process, every collective the identity: the stub a build without MPI
// uses, and any process not started by mpirun/srun), "mpi" (MPI_COMM_WORLD, CPU buffers; CUDA
// tensors go through host copies) and "nccl" (an MPI group's processes, one GPU each: CUDA tensors
// are reduced on the GPUs by NCCL, on a stream of their own; host buffers still go through MPI).
// Invariants: every rank calls the same collectives in the same order with the same counts; a
// collective that waits longer than the group's timeout for its peers ends the whole job (all
// ranks, exit code 1) with a message naming the ranks that did not answer, never a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/error.h"
#include "hpcnet/tensor.h"

namespace hpcnet::dist {

// A failure of the transport or of a peer process (the CLI exits 1).
class DistError : public Error {
 public:
  using Error::Error;
};

// A collective started by an *_async call. Its buffer must stay alive and untouched until the
// collective is done.
class Work {
 public:
  virtual ~Work() = default;
  // Lets the collective progress; true once it is done (then the buffer holds the result).
  virtual bool test() = 0;
  // Blocks until done, under the group's timeout (see ProcessGroup::set_timeout).
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;        // in [0, world_size())
  virtual int world_size() const = 0;  // >= 1
  // Processes of this group on this node (this one included): sizes per-rank thread pools.
  virtual int local_size() const = 0;
  // This process's index among them, in [0, local_size()): picks its GPU (cuda:local_rank).
  virtual int local_rank() const { return 0; }
  virtual std::string backend() const = 0;  // "single", "mpi" or "nccl"

  // In place, element-wise over ranks: data[i] = sum over ranks of data[i]. Every rank passes the
  // same count. The result is bit-identical on every rank.
  virtual void allreduce_sum(float* data, size_t count) = 0;   // (count,)
  virtual void allreduce_sum(double* data, size_t count) = 0;  // (count,)
  // The same, started now and finished by the returned Work.
  virtual std::unique_ptr<Work> allreduce_sum_async(float* data, size_t count) = 0;
  // Copies `bytes` bytes from rank `root` to every other rank (in place).
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every process of the group with exit_code, after printing message (one line) to stderr.
  [[noreturn]] virtual void abort(int exit_code, const std::string& message) = 0;

  // Seconds a collective may wait for its peers before the job is aborted (0 = forever).
  virtual void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

  // Whether collectives on CUDA tensors run on the GPU (NCCL) rather than through host copies.
  virtual bool reduces_on_device() const { return false; }
  // The device forms, for groups that reduce on the device (Error otherwise): data is memory on
  // the group's GPU. Each is queued behind the work already on hpcnet's stream for that GPU and
  // runs on a stream of its own; when the blocking forms return, and when the Work's wait()
  // returns, hpcnet's stream is behind the collective. The host does not wait for the GPU.
  // average: the sum times 1 / world_size() (NCCL's ncclAvg), else the sum.
  virtual std::unique_ptr<Work> allreduce_device_async(float* data, size_t count, bool average);
  virtual void allreduce_device(void* data, size_t count, DType dtype, bool average);  // f32/f64
  virtual void broadcast_device(void* data, size_t bytes, int root);

  // Tensor forms. Require a contiguous tensor (Error otherwise) and work in place. A CUDA tensor
  // goes through the device forms where the group reduces on the device, else through a host
  // copy.
  void allreduce_sum(Tensor& t);        // float32 or float64
  void allreduce_avg(Tensor& t);        // sum, then times 1 / world_size()
  void broadcast(Tensor& t, int root);  // any dtype

 protected:
  double timeout_s_ = 60;
};

// The single-process group: rank 0 of 1, every collective the identity.
std::unique_ptr<ProcessGroup> make_single_group();
// The MPI group over MPI_COMM_WORLD (MPI_Init_thread first when MPI is not yet initialised).
// Throws Error when this build has no MPI.
std::unique_ptr<ProcessGroup> make_mpi_group();

// Whether this build has the MPI backend (HPCNET_MPI at configure time).
bool mpi_built();

// The NCCL group over `host` (an MPI group; it must outlive the result): this process uses GPU
// `device` (cuda:device), rank 0's ncclUniqueId reaches the others through host.broadcast, and
// every rank creates its communicator (ncclCommInitRank, which waits for all of them). Host
// buffers, barriers and abort go through host. A watchdog thread ends the job (ncclCommAbort,
// then exit code 1, naming the collective) when a collective is not done after the timeout or
// NCCL reports an asynchronous error. Throws Error when NCCL cannot be used (nccl_unusable_reason).
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& host, int device);
// "" when make_nccl_group can work here: the build has CUDA and nccl.h, and libnccl.so.2 loads
// (NCCL is opened with dlopen on first use, like cuBLASLt); else why not, in one line.
std::string nccl_unusable_reason();
// "2.28.3" (ncclGetVersion of the loaded library), or "".
std::string nccl_version();

// Which transport the gradients of CUDA tensors take with several ranks, for --dist-backend
// (auto, nccl or mpi): "nccl" or "mpi" (host-staged). usable_here: "" when this rank could use
// NCCL, else why not (nccl_unusable_on_this_rank); ranks_able: how many of the world's ranks
// could (the caller sums over the group, so that every rank decides the same). auto takes NCCL
// when all can; nccl throws InputError otherwise, naming why; mpi is always "mpi".
std::string choose_cuda_backend(const std::string& requested, int world_size, int ranks_able,
                                const std::string& usable_here);
// This rank's part of that: "" or why it cannot use NCCL: it runs on the CPU, its GPU is used by
// ranks_on_its_gpu > 1 ranks (NCCL needs a GPU of its own for each), or the library does not load.
std::string nccl_unusable_on_this_rank(bool on_cuda, int ranks_on_its_gpu);
// Every rank's value, in rank order (an all-gather: one all-reduce of 2 x world_size doubles).
std::vector<uint64_t> allgather_u64(ProcessGroup& group, uint64_t value);
// Whether this process was started by an MPI launcher: OMPI_COMM_WORLD_SIZE (Open MPI's mpirun),
// PMI_SIZE or PMIX_RANK (srun --mpi=pmi2/pmix, MPICH/Intel MPI), or SLURM_NTASKS inside an srun
// job step (SLURM_STEP_ID). HPCNET_DIST=single or HPCNET_DIST=mpi overrides the guess.
bool launched_by_mpi_launcher();

// The process-wide group, created on first use: MPI when built with it and launched by a launcher,
// else the single-process group. Throws InputError when a launcher's variables (mpirun's,
// torchrun's WORLD_SIZE, Slurm's SLURM_NTASKS with SLURM_PROCID) say more than one process but
// the group has one, naming how to launch instead; HPCNET_DIST=single skips that check.
ProcessGroup& world();
// Whether world() has been created.
bool world_initialized();
// Leaves MPI cleanly (MPI_Finalize) when world() started it; a no-op otherwise. Call once, at the
// end of a successful run, on every rank.
void finalize();
// One line for `hpcnet info`: the backends this build has and, where known, the MPI library.
std::string describe_build();

// ---------------------------------------------------------------------------------------------
// Gradient averaging
// ---------------------------------------------------------------------------------------------

struct ReducerOptions {
  // Buckets hold about this many bytes of gradients (a parameter larger than that gets a bucket of
  // its own). 0: one bucket holding every gradient, all-reduced once after backward (no overlap).
  size_t bucket_cap_bytes = 100 * 1024;
  // Run the buckets in a group of one too (tests of the bucket paths; a group of one otherwise
  // just runs backward).
  bool reduce_single = false;
};

// Averages parameter gradients over a group, like DistributedDataParallel's reducer. Parameters
// are put in buckets in reverse registration order (the order backward produces their gradients).
// During backward a gradient-ready hook copies each finished gradient into its bucket's flat
// buffer; a bucket whose gradients are all in starts its all-reduce at once (buckets start in
// bucket order on every rank, as MPI requires). After backward the rest start, all are waited for,
// and each gradient becomes bucket / world_size. A parameter that got no gradient on a rank
// contributes zeros (and ends with the average of the others).
// CUDA parameters: where the group reduces on the device (NCCL) the buckets are device buffers,
// filled by device copies and all-reduced on the group's stream while backward goes on; else
// host buffers (the host-staged path: each gradient is copied to the host when it is ready).
// Requires float32 parameters that require grad, all on one device. No allocation per step after
// the first on the CPU.
class GradReducer {
 public:
  GradReducer(ProcessGroup& group, std::vector<Tensor> params, ReducerOptions options = {});
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // loss.backward(), then every parameter's .grad is the average over ranks. In a group of one,
  // just loss.backward().
  void backward(const Tensor& loss);
  // After backward(), for parameters whose gradients were accumulated by hand: all-reduces them
  // all at once (what backward() does without overlap).
  void allreduce_grads();

  size_t num_buckets() const { return buckets_.size(); }
  size_t num_floats() const { return total_floats_; }
  // Parameter indices (positions in the constructor's list) of bucket b, in bucket order.
  const std::vector<size_t>& bucket_params(size_t b) const { return buckets_[b].params; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // parameter indices
    std::vector<size_t> offsets;  // where each one's gradient starts in buffer
    std::vector<float> buffer;    // (sum of the parameters' numel,), host
    Tensor device_buffer;         // the same on the parameters' GPU (device buckets only)
    size_t ready = 0;             // gradients copied in this step
    std::unique_ptr<Work> work;   // in flight
    bool launched = false;
  };
  void on_grad_ready(TensorImpl* leaf);
  void launch_in_order();
  void finish();
  void copy_into_bucket(Bucket& bk, size_t slot, const Tensor& g);
  void set_grads_from(Bucket& bk, float scale);

  ProcessGroup& group_;
  std::vector<Tensor> params_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot in bucket)
  std::vector<bool> copied_;                      // param -> gradient in its bucket this step
  bool on_device_ = false;                        // device buckets (NCCL)
  size_t next_launch_ = 0;
  size_t total_floats_ = 0;
};

// A 64-bit fingerprint of tensors' bytes (FNV-1a over their contents), for checking that ranks
// hold identical parameters.
uint64_t fingerprint(const std::vector<Tensor>& tensors);
// Throws DistError on every rank when the tensors differ between ranks (one broadcast and one
// all-reduce of a fingerprint; no tensor data moves). `what` names them in the message.
void check_same_on_all_ranks(ProcessGroup& group, const std::vector<Tensor>& tensors,
                             const std::string& what);

}  // namespace hpcnet::dist
