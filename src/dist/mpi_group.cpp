// The MPI process group: MPI_COMM_WORLD (duplicated), CPU buffers, every collective started
// non-blocking and completed by a polling loop that doubles as the watchdog. While it waits, a rank
// answers "which collective are you in?" questions from its peers on a second communicator; when a
// collective has waited longer than the timeout, the rank asks every peer, waits a few seconds for
// answers, prints which ranks did not answer (dead or hung) and calls MPI_Abort, which ends every
// process of the job. A dead process is normally caught sooner by mpirun itself, which aborts the
// job when a rank exits without MPI_Finalize; the watchdog covers hangs and launchers that do not.
// All MPI calls come from the thread that called make_mpi_group (MPI_THREAD_FUNNELED).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpcnet/dist.h"
#include "src/dist/internal.h"

#ifdef HPCNET_WITH_MPI
#include "src/dist/mpi_check.h"
#endif

namespace hpcnet::dist {

#ifndef HPCNET_WITH_MPI

bool mpi_built() { return false; }
std::unique_ptr<ProcessGroup> make_mpi_group() {
  throw Error(
      "this build of hpcnet has no MPI (configure with -DHPCNET_MPI=ON and an MPI library "
      "installed, e.g. Debian's libopenmpi-dev)");
}
std::string detail::mpi_library_version() { return ""; }

#else  // HPCNET_WITH_MPI

bool mpi_built() { return true; }

namespace {

int g_rank = -1;  // for error messages before and after the group exists

constexpr int kTagPing = 1;  // payload: the asker's collective number
constexpr int kTagPong = 2;  // payload: the answerer's collective number

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

class MpiGroup;

class MpiWork : public Work {
 public:
  MpiWork(MpiGroup* group, MPI_Request req, const char* what, long long seq)
      : group_(group), req_(req), what_(what), seq_(seq) {}
  bool test() override;
  void wait() override;

 private:
  MpiGroup* group_;
  MPI_Request req_;
  const char* what_;
  long long seq_;
  bool done_ = false;
};

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup() {
    int initialized = 0;
    HPCNET_MPI(MPI_Initialized(&initialized));
    if (!initialized) {
      // Open MPI's non-blocking all-reduce (libnbc) picks binomial or recursive-doubling trees by
      // default, 1.5-2.5x slower than its blocking one from 256 KB up on this machine; the
      // reduce-scatter + allgather algorithm (Rabenseifner, "3") matches the blocking one. A
      // value the user set (environment or mpirun --mca) wins.
      ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
      int provided = 0;
      HPCNET_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      owns_init_ = true;
      if (provided < MPI_THREAD_FUNNELED)
        std::fprintf(stderr,
                     "hpcnet: warning: the MPI library gives thread level %d, less than "
                     "MPI_THREAD_FUNNELED; data-loading threads may disturb it\n",
                     provided);
    }
    HPCNET_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    HPCNET_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    HPCNET_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &diag_));
    HPCNET_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    HPCNET_MPI(MPI_Comm_set_errhandler(diag_, MPI_ERRORS_RETURN));
    HPCNET_MPI(MPI_Comm_rank(comm_, &rank_));
    HPCNET_MPI(MPI_Comm_size(comm_, &size_));
    g_rank = rank_;
    MPI_Comm local;
    HPCNET_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
    HPCNET_MPI(MPI_Comm_size(local, &local_size_));
    HPCNET_MPI(MPI_Comm_rank(local, &local_rank_));
    HPCNET_MPI(MPI_Comm_free(&local));
  }

  ~MpiGroup() override {
    // No throwing here: errors on the way out are reported and ignored.
    MPI_Comm_free(&diag_);
    MPI_Comm_free(&comm_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_init_ && !finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

  void allreduce_sum(float* data, size_t count) override {
    allreduce_blocking(data, count, MPI_FLOAT, sizeof(float));
  }
  void allreduce_sum(double* data, size_t count) override {
    allreduce_blocking(data, count, MPI_DOUBLE, sizeof(double));
  }
  std::unique_ptr<Work> allreduce_sum_async(float* data, size_t count) override {
    HPCNET_CHECK(count <= static_cast<size_t>(INT_MAX),
                 "async all-reduce of more than 2^31 floats");
    MPI_Request req;
    HPCNET_MPI(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                              comm_, &req));
    return std::make_unique<MpiWork>(this, req, "all-reduce", ++seq_);
  }
  void broadcast(void* data, size_t bytes, int root) override {
    HPCNET_CHECK(root >= 0 && root < size_, "broadcast from rank " + std::to_string(root) +
                                                " in a group of " + std::to_string(size_));
    auto* p = static_cast<char*>(data);
    do {  // one call per 1 GiB (MPI counts are int); at least one call, even for 0 bytes
      const size_t n = std::min<size_t>(bytes, size_t{1} << 30);
      MPI_Request req;
      HPCNET_MPI(MPI_Ibcast(p, static_cast<int>(n), MPI_BYTE, root, comm_, &req));
      wait(req, "broadcast", ++seq_);
      p += n;
      bytes -= n;
    } while (bytes > 0);
  }
  void barrier() override {
    MPI_Request req;
    HPCNET_MPI(MPI_Ibarrier(comm_, &req));
    wait(req, "barrier", ++seq_);
  }
  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    std::fflush(stdout);
    if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort should not return
  }

  // Completes req, answering peers' questions meanwhile; past the timeout, finds and names the
  // missing ranks and aborts the job.
  void wait(MPI_Request& req, const char* what, long long seq) {
    const Clock::time_point start = Clock::now();
    for (uint64_t iter = 0;; ++iter) {
      int done = 0;
      HPCNET_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (iter < 64) continue;  // spin briefly: most collectives end within microseconds
      if ((iter & 15) == 0) {
        serve_peers(seq, nullptr);
        const double waited = seconds_since(start);
        if (timeout_s_ > 0 && waited > timeout_s_) {
          if (diagnose_and_abort(req, what, seq, waited)) return;  // it finished meanwhile
        }
        if (waited > 0.002) {  // a long wait (a slow peer): stop burning a core
          ::usleep(50);
          continue;
        }
      }
      sched_yield();
    }
  }

  bool test(MPI_Request& req) {
    int done = 0;
    HPCNET_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

 private:
  void allreduce_blocking(void* data, size_t count, MPI_Datatype type, size_t elem) {
    auto* p = static_cast<char*>(data);
    while (count > 0) {
      const size_t n = std::min<size_t>(count, size_t{1} << 30);
      MPI_Request req;
      HPCNET_MPI(MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(n), type, MPI_SUM, comm_, &req));
      wait(req, "all-reduce", ++seq_);
      p += n * elem;
      count -= n;
    }
  }

  // Answers pings (with the collective this rank waits in); records pongs in answers, or drops
  // late ones when answers is null.
  void serve_peers(long long seq, std::vector<long long>* answers) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, diag_, &flag, &st) != MPI_SUCCESS || !flag)
        return;
      long long value = -1;
      if (MPI_Recv(&value, 1, MPI_LONG_LONG, st.MPI_SOURCE, st.MPI_TAG, diag_, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS)
        return;
      if (st.MPI_TAG == kTagPing) {
        MPI_Send(&seq, 1, MPI_LONG_LONG, st.MPI_SOURCE, kTagPong, diag_);  // eager: 8 bytes
      } else if (answers) {
        (*answers)[static_cast<size_t>(st.MPI_SOURCE)] = value;
      }
    }
  }

  // Asks every peer which collective it waits in, for up to a few seconds; returns true if req
  // completes meanwhile, else prints the finding and aborts the job.
  bool diagnose_and_abort(MPI_Request& req, const char* what, long long seq, double waited) {
    std::vector<long long> answers(static_cast<size_t>(size_), -1);
    answers[static_cast<size_t>(rank_)] = seq;
    // The question's buffer outlives this call: a send to a dead peer may never complete.
    ping_seq_ = seq;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request p;
      if (MPI_Isend(&ping_seq_, 1, MPI_LONG_LONG, r, kTagPing, diag_, &p) == MPI_SUCCESS)
        MPI_Request_free(&p);  // completes on its own; nothing waits for it
    }
    const double window = std::clamp(timeout_s_ / 4, 1.0, 5.0);
    const Clock::time_point asked = Clock::now();
    while (seconds_since(asked) < window) {
      int done = 0;
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) return true;
      serve_peers(seq, &answers);
      if (std::count(answers.begin(), answers.end(), -1) == 0) break;
      ::usleep(1000);
    }
    std::vector<int> silent, same, other;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      long long a = answers[static_cast<size_t>(r)];
      (a < 0 ? silent : a == seq ? same : other).push_back(r);
    }
    char head[256];
    std::snprintf(head, sizeof head,
                  "hpcnet: rank %d of %d: %s #%lld has waited %.0f s for its peers "
                  "(--dist-timeout %g); ",
                  rank_, size_, what, seq, waited, timeout_s_);
    std::string msg = head;
    if (!silent.empty())
      msg += std::string(silent.size() == 1 ? "rank " : "ranks ") + rank_list(silent) +
             " did not answer within " + std::to_string(static_cast<int>(window)) +
             " s (dead, hung, or stuck outside a collective); ";
    if (!same.empty())
      msg += std::string(same.size() == 1 ? "rank " : "ranks ") + rank_list(same) +
             (same.size() == 1 ? " is" : " are") + " waiting in the same collective; ";
    for (int r : other)
      msg += "rank " + std::to_string(r) + " is in collective #" +
             std::to_string(answers[static_cast<size_t>(r)]) + " (out of step); ";
    if (silent.empty() && other.empty()) msg += "every rank answered, so the transport is stuck; ";
    msg += "aborting the job";
    abort(1, msg);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;  // collectives
  MPI_Comm diag_ = MPI_COMM_NULL;  // watchdog questions and answers
  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
  bool owns_init_ = false;
  long long seq_ = 0;       // collectives started so far, the same on every rank
  long long ping_seq_ = 0;  // payload of the watchdog's questions (kept for sends in flight)
};

bool MpiWork::test() {
  if (!done_) done_ = group_->test(req_);
  return done_;
}

void MpiWork::wait() {
  if (!done_) group_->wait(req_, what_, seq_);
  done_ = true;
}

}  // namespace

std::unique_ptr<ProcessGroup> make_mpi_group() { return std::make_unique<MpiGroup>(); }

std::string detail::mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown version";
  std::string s(buf, static_cast<size_t>(len));
  s = s.substr(0, s.find_first_of(",\n"));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

void detail::throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  std::string what = MPI_Error_string(code, text, &len) == MPI_SUCCESS
                         ? std::string(text, static_cast<size_t>(len))
                         : "error code " + std::to_string(code);
  throw DistError("MPI call failed on rank " + std::to_string(g_rank) + ": " + what + " (" + call +
                  " at " + file + ":" + std::to_string(line) + ")");
}

#endif  // HPCNET_WITH_MPI

}  // namespace hpcnet::dist
