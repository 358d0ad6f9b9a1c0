// The backward engine: collects the nodes reachable from the root, runs them from the newest to the
// oldest, sums gradients flowing into each node and accumulates leaf gradients in place.
#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "hpcnet/autograd.h"
#include "src/ops/dispatch.h"

namespace hpcnet {
namespace {
thread_local bool g_grad_mode = true;
thread_local GradReadyHook g_grad_ready_hook;  // empty unless a GradReadyHookScope is alive
std::atomic<uint64_t> g_next_seq{0};
}  // namespace

Node::Node() : seq(g_next_seq.fetch_add(1, std::memory_order_relaxed)) {}

bool grad_mode_enabled() { return g_grad_mode; }
NoGradGuard::NoGradGuard() : prev_(g_grad_mode) { g_grad_mode = false; }
NoGradGuard::~NoGradGuard() { g_grad_mode = prev_; }

GradReadyHookScope::GradReadyHookScope(GradReadyHook hook) : prev_(std::move(g_grad_ready_hook)) {
  g_grad_ready_hook = std::move(hook);
}
GradReadyHookScope::~GradReadyHookScope() { g_grad_ready_hook = std::move(prev_); }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t && t->requires_grad()) return true;
  return false;
}

void record(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
            Tensor& out) {
  node->edges.clear();
  node->edges.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    Node::Edge e;
    if (t && t->requires_grad()) {
      if (t->grad_fn())
        e.fn = t->grad_fn();
      else
        e.leaf = t->impl_ptr();
    }
    node->edges.push_back(std::move(e));
  }
  out.impl()->requires_grad = true;
  out.set_grad_fn(node);
}

namespace {

// Whether g's buffer belongs to g alone (no other tensor or view refers to it), so the engine may
// keep it as a gradient instead of copying.
bool exclusively_owned(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 && g.is_dense() &&
         g.impl()->offset == 0 && !g.requires_grad();
}

// grad += g. On first use grad takes g's buffer when nothing else refers to it (a fresh gradient
// from a kernel), else a copy: g may alias other gradients.
void accumulate(Tensor& grad, Tensor&& g) {
  if (!grad.defined()) {
    if (exclusively_owned(g)) {
      grad = std::move(g);
    } else if (g.layout() == Layout::kBlocked16) {  // keep the layout its producer chose
      grad = Tensor::empty_layout(g.shape(), g.dtype(), g.device(), g.layout());
      grad.copy_(g);
    } else {
      grad = g.contiguous().clone();
    }
  } else {
    ops::add_inplace(grad, g);
  }
}

}  // namespace

void zero_grads(const std::vector<Tensor>& tensors, bool set_to_none) {
  for (const Tensor& t : tensors) {
    Tensor& g = t.impl()->grad;
    if (!g.defined()) continue;
    if (set_to_none)
      g = Tensor();
    else
      g.fill_(0.0);
  }
}

void run_backward(const Tensor& root, const Tensor& grad_in) {
  HPCNET_CHECK(root.defined(), "backward() of an undefined tensor");
  HPCNET_CHECK(root.requires_grad(),
               "backward(): the tensor does not require grad and has no grad_fn");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    HPCNET_CHECK(root.numel() == 1, "backward() without a gradient needs a one-element tensor, got " +
                                        shape_str(root.shape()));
    grad = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
  }
  HPCNET_CHECK(grad.shape() == root.shape(), "backward(): gradient shape " +
                                                 shape_str(grad.shape()) + " != tensor shape " +
                                                 shape_str(root.shape()));
  NoGradGuard no_grad;
  const GradReadyHook* hook = g_grad_ready_hook ? &g_grad_ready_hook : nullptr;
  if (!root.grad_fn()) {  // a leaf
    accumulate(root.impl()->grad, grad.clone());
    if (hook) (*hook)(root.impl());
    return;
  }
  // Collect reachable nodes.
  std::vector<Node*> nodes;
  std::vector<std::shared_ptr<Node>> keep{root.grad_fn()};  // alive until the end
  std::unordered_map<Node*, Tensor> pending;
  std::vector<Node*> stack{root.grad_fn().get()};
  pending.reserve(64);
  pending[root.grad_fn().get()] = Tensor();
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    for (auto& e : n->edges) {
      if (e.fn && pending.emplace(e.fn.get(), Tensor()).second) {
        stack.push_back(e.fn.get());
        keep.push_back(e.fn);
      }
    }
  }
  std::sort(nodes.begin(), nodes.end(), [](Node* a, Node* b) { return a->seq > b->seq; });
  // With a gradient-ready hook: edges into each leaf not yet processed; the hook fires when the
  // count reaches zero (whether or not the last edge carried a gradient).
  std::unordered_map<TensorImpl*, int> leaf_edges_left;
  auto leaf_edge_done = [&](TensorImpl* leaf) {
    if (--leaf_edges_left[leaf] == 0 && leaf->grad.defined()) (*hook)(leaf);
  };
  if (hook)
    for (Node* n : nodes)
      for (auto& e : n->edges)
        if (e.leaf) ++leaf_edges_left[e.leaf.get()];
  pending[root.grad_fn().get()] = grad;
  for (Node* n : nodes) {
    Tensor g = std::move(pending[n]);
    if (!g.defined()) {  // no gradient reached it
      if (hook)
        for (auto& e : n->edges)
          if (e.leaf) leaf_edge_done(e.leaf.get());
      continue;
    }
    std::vector<Tensor> grads = n->backward(g);
    HPCNET_CHECK(grads.size() == n->edges.size(),
                 std::string(n->name()) + ": backward returned the wrong number of gradients");
    for (size_t i = 0; i < grads.size(); ++i) {
      auto& e = n->edges[i];
      if (hook && e.leaf && !grads[i].defined()) leaf_edge_done(e.leaf.get());
      if (!e.active() || !grads[i].defined()) continue;
      if (e.fn) {
        Tensor& p = pending[e.fn.get()];
        if (!p.defined()) {
          p = grads[i];
        } else {
          // Sum into a fresh buffer (p or grads[i] may alias saved tensors), in p's layout.
          Tensor a = p.is_dense() ? p : p.contiguous();
          Tensor b = ops::as_layout(grads[i], a);
          Tensor sum = Tensor::empty_layout(a.shape(), a.dtype(), a.device(), a.layout());
          ops::add(a, b, sum);
          p = sum;
        }
      } else {
        accumulate(e.leaf->grad, std::move(grads[i]));
        if (hook) leaf_edge_done(e.leaf.get());
      }
    }
  }
  // Free the graph (as PyTorch does without retain_graph).
  for (Node* n : nodes) {
    n->release();
  }
  for (Node* n : nodes) n->edges.clear();
}

// Declared in tensor.h (core), defined here: the core layer does not reach up to the engine.
void Tensor::backward(const Tensor& grad) const { run_backward(*this, grad); }

}  // namespace hpcnet
