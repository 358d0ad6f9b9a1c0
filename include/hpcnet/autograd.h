// Reverse-mode autograd. Each differentiable op that sees an input requiring grad records a Node
// on its output: the Node keeps what backward needs and edges to its inputs. backward() walks the
// graph from the root in decreasing sequence number (a valid reverse topological order, as ops are
// recorded in execution order), accumulating into leaf .grad tensors, then frees the graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/tensor.h"

namespace hpcnet {

struct Node {
  // For each input of the forward op: the node that produced it, or the leaf it came from, or
  // nothing when that input needs no gradient.
  struct Edge {
    std::shared_ptr<Node> fn;
    std::shared_ptr<TensorImpl> leaf;
    bool active() const { return fn || leaf; }
  };

  Node();
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // Given d(loss)/d(output), returns d(loss)/d(input_i) for every edge (undefined where the edge is
  // inactive). Returned tensors may alias grad_out; the engine never writes into them.
  virtual std::vector<Tensor> backward(const Tensor& grad_out) = 0;
  // Drops saved tensors after backward, so the graph's memory is released early.
  virtual void release() {}

  std::vector<Edge> edges;
  uint64_t seq;
};

// Whether ops record graphs (thread-local, on by default).
bool grad_mode_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when an op over these inputs must record a node.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
// Connects node to its inputs and makes it out's grad_fn (marks out as requiring grad).
void record(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
            Tensor& out);

void run_backward(const Tensor& root, const Tensor& grad);

// A gradient-ready hook (thread-local, at most one per thread): while set, run_backward calls it
// once for each leaf whose .grad it accumulated into, right after the last accumulation into that
// leaf in the pass (the gradient is final for this backward). dist::GradReducer uses it to start
// all-reduces while backward continues. When no hook is set the engine does no extra work.
using GradReadyHook = std::function<void(TensorImpl* leaf)>;
class GradReadyHookScope {
 public:
  explicit GradReadyHookScope(GradReadyHook hook);
  ~GradReadyHookScope();
  GradReadyHookScope(const GradReadyHookScope&) = delete;
  GradReadyHookScope& operator=(const GradReadyHookScope&) = delete;

 private:
  GradReadyHook prev_;
};

// Drops each tensor's gradient (set_to_none) or fills it with zeros; used by Module and optimizers.
void zero_grads(const std::vector<Tensor>& tensors, bool set_to_none);

}  // namespace hpcnet
