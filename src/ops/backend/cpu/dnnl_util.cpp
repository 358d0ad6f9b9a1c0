// oneDNN engine/stream singletons and error conversion.
#include "src/ops/backend/cpu/dnnl_util.h"

#include "src/core/allocator.h"

#include <omp.h>

#include <string>

namespace hpcnet::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream s(dnnl_engine());
  return s;
}

namespace {
using DnnlCache = std::unordered_map<DnnlKey, std::unique_ptr<DnnlOp>, DnnlKeyHash>;
DnnlCache& dnnl_cache() {
  thread_local DnnlCache cache;
  return cache;
}
}  // namespace

DnnlOp* dnnl_cache_find(const DnnlKey& key) {
  auto& c = dnnl_cache();
  auto it = c.find(key);
  return it == c.end() ? nullptr : it->second.get();
}

size_t dnnl_cache_size() { return dnnl_cache().size(); }

DnnlOp& dnnl_cache_insert(const DnnlKey& key, std::unique_ptr<DnnlOp> op) {
  return *dnnl_cache().emplace(key, std::move(op)).first->second;
}

SmallWorkSerial::SmallWorkSerial(double macs) {
  if (macs < kParallelMacs) {
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
}

SmallWorkSerial::~SmallWorkSerial() {
  if (saved_ > 0) omp_set_num_threads(saved_);
}

void DnnlOp::add_staged_arg(int arg, const dnnl::memory::desc& user,
                            const dnnl::memory::desc& inner, bool input,
                            const dnnl::primitive_attr* attr) {
  if (user == inner && attr == nullptr) return add_arg(arg, user);
  Stage st;
  st.user = dnnl::memory(user, dnnl_engine(), nullptr);
  // No buffer of its own: run() takes one from the caching allocator for the call, so that the
  // many cached primitives share a few buffers instead of each holding activation-sized ones.
  st.inner = dnnl::memory(inner, dnnl_engine(), nullptr);
  st.bytes = inner.get_size();
  const dnnl::primitive_attr none;
  const dnnl::primitive_attr& a = attr ? *attr : none;
  st.reorder = input ? dnnl::reorder(st.user, st.inner, a) : dnnl::reorder(st.inner, st.user, a);
  args.emplace(arg, st.user);
  c_args.push_back({arg, st.inner.get()});
  (input ? stage_in_ : stage_out_).push_back(std::move(st));
}

namespace {
void run_reorder(const dnnl::primitive& r, const dnnl::memory& from, const dnnl::memory& to) {
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}};
  dnnl_status_t st = dnnl_primitive_execute(r.get(), dnnl_stream().get(), 2, a);
  if (st != dnnl_success)
    throw Error("oneDNN reorder failed with status " + std::to_string(static_cast<int>(st)));
}
}  // namespace

void DnnlOp::run() {
  // The staged buffers for this call, back to the cache on every way out.
  struct Buffers {
    std::vector<std::pair<void*, size_t>> held;
    ~Buffers() {
      for (auto& [p, n] : held) cpu_cached_free(p, n);
    }
  } buffers;
  for (std::vector<Stage>* list : {&stage_in_, &stage_out_})
    for (Stage& s : *list) {
      void* p = cpu_cached_alloc(s.bytes);
      buffers.held.emplace_back(p, s.bytes);
      s.inner.set_data_handle(p);
    }
  for (auto& s : stage_in_) run_reorder(s.reorder, s.user, s.inner);
  dnnl_status_t st = dnnl_primitive_execute(prim.get(), dnnl_stream().get(),
                                            static_cast<int>(c_args.size()), c_args.data());
  if (st != dnnl_success)
    throw Error("oneDNN primitive execution failed with status " +
                std::to_string(static_cast<int>(st)));
  for (auto& s : stage_out_) run_reorder(s.reorder, s.inner, s.user);
}

void throw_dnnl_error(const dnnl::error& e, const char* call, const char* file, int line) {
  throw Error(std::string("oneDNN call failed: ") + e.what() + " (status " +
              std::to_string(static_cast<int>(e.status)) + ") in `" + call + "` at " + file + ":" +
              std::to_string(line));
}

}  // namespace hpcnet::cpu
