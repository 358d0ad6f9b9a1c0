// oneDNN engine/stream singletons and error conversion.
#include "src/ops/cpu/dnnl_util.h"

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

void DnnlOp::run() {
  dnnl_status_t st = dnnl_primitive_execute(prim.get(), dnnl_stream().get(),
                                            static_cast<int>(c_args.size()), c_args.data());
  if (st != dnnl_success)
    throw Error("oneDNN primitive execution failed with status " +
                std::to_string(static_cast<int>(st)));
}

void throw_dnnl_error(const dnnl::error& e, const char* call, const char* file, int line) {
  throw Error(std::string("oneDNN call failed: ") + e.what() + " (status " +
              std::to_string(static_cast<int>(e.status)) + ") in `" + call + "` at " + file + ":" +
              std::to_string(line));
}

}  // namespace hpcnet::cpu
