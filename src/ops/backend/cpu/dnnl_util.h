// oneDNN plumbing for the CPU backend: one engine and stream per thread, a primitive cache keyed
// by the op's shape, and HPCNET_DNNL(...) which turns a dnnl::error into an hpcnet::Error naming
// the call and file:line. Primitives are created once per shape and reused every step.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hpcnet/error.h"
#include "hpcnet/tensor.h"

namespace hpcnet::cpu {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();

[[noreturn]] void throw_dnnl_error(const dnnl::error& e, const char* call, const char* file,
                                   int line);

#define HPCNET_DNNL(...)                                                    \
  do {                                                                      \
    try {                                                                   \
      __VA_ARGS__;                                                          \
    } catch (const dnnl::error& e) {                                        \
      ::hpcnet::cpu::throw_dnnl_error(e, #__VA_ARGS__, __FILE__, __LINE__); \
    }                                                                       \
  } while (0)

// A primitive-cache key: the op kind and up to 15 integers (shapes, strides, flags).
struct DnnlKey {
  std::array<int64_t, 20> v{};
  bool operator==(const DnnlKey& o) const { return v == o.v; }
};
struct DnnlKeyHash {
  size_t operator()(const DnnlKey& k) const {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
};
template <class... Ints>
DnnlKey make_key(Ints... ints) {
  static_assert(sizeof...(Ints) <= 20, "DnnlKey holds 20 integers");
  DnnlKey k;
  size_t i = 0;
  ((k.v[i++] = static_cast<int64_t>(ints)), ...);
  return k;
}

// A plain (row-major) f32 memory descriptor for dims.
inline dnnl::memory::desc plain_md(const dnnl::memory::dims& dims) {
  using tag = dnnl::memory::format_tag;
  tag t = dims.size() == 1   ? tag::a
          : dims.size() == 2 ? tag::ab
          : dims.size() == 3 ? tag::abc
                             : tag::abcd;
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, t);
}

// Runs the enclosed oneDNN calls on one thread when the work is small: an OpenMP fork/join costs
// microseconds, and far more when another busy thread (a data worker, another process) holds a
// core the team is waiting on.
class SmallWorkSerial {
 public:
  explicit SmallWorkSerial(double macs);
  ~SmallWorkSerial();
  SmallWorkSerial(const SmallWorkSerial&) = delete;
  SmallWorkSerial& operator=(const SmallWorkSerial&) = delete;

 private:
  int saved_ = 0;
};
// Multiply-adds below which a kernel runs on one thread (about 0.1 ms of one core's work).
constexpr double kParallelMacs = 4e6;

// A created primitive with its argument memories, made once; per call only the data handles
// change, and run() goes through the C API with a prebuilt argument array (no allocation).
struct DnnlOp {
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> args;
  std::vector<dnnl_exec_arg_t> c_args;

  // Adds an argument slot of descriptor md (no data yet).
  void add_arg(int arg, const dnnl::memory::desc& md) {
    auto it = args.emplace(arg, dnnl::memory(md, dnnl_engine(), nullptr)).first;
    c_args.push_back({arg, it->second.get()});
  }
  // Adds an argument whose tensor has descriptor `user` (plain f32) while the primitive works on
  // `inner` (a blocked layout and/or bf16): run() takes a buffer of `inner` from the caching allocator and a reorder that
  // converts the tensor into it before run() (input) or out of it after run() (output). The same
  // as add_arg when the two descriptors are equal.
  // `attr`, when given: the reorder's (output scales that quantise, for int8), which then runs
  // even between equal descriptors.
  void add_staged_arg(int arg, const dnnl::memory::desc& user, const dnnl::memory::desc& inner,
                      bool input, const dnnl::primitive_attr* attr = nullptr);
  void bind(int arg, const Tensor& t) { args.at(arg).set_data_handle(t.raw_data()); }
  void bind_ptr(int arg, void* p) { args.at(arg).set_data_handle(p); }
  void run();

 private:
  struct Stage {
    dnnl::memory user, inner;
    dnnl::primitive reorder;
    size_t bytes = 0;  // inner's size
  };
  std::vector<Stage> stage_in_, stage_out_;
};

DnnlOp* dnnl_cache_find(const DnnlKey& key);
size_t dnnl_cache_size();  // primitives created so far on this thread
DnnlOp& dnnl_cache_insert(const DnnlKey& key, std::unique_ptr<DnnlOp> op);

// Per-thread cache of primitives, each built once by make(DnnlOp&) on first use of its key.
template <class F>
DnnlOp& dnnl_cached(const DnnlKey& key, F&& make) {
  if (DnnlOp* op = dnnl_cache_find(key)) return *op;
  auto op = std::make_unique<DnnlOp>();
  HPCNET_DNNL(make(*op));
  return dnnl_cache_insert(key, std::move(op));
}

}  // namespace hpcnet::cpu
