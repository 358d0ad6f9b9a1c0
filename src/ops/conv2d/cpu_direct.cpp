// Direct convolution kernels; see conv2d_direct.h. Layout of the scratch buffers:
//   xpad  (N, C, H + 2p, Wp)   input with p zero rows/cols around it, rows padded to Wp
//   ypad  (N, K, P, Qv)        output rows rounded up to a multiple of 16 lanes
// Forward: y[n,k,oh,ow] = b[k] + sum_{c,r,s} w[k,c,r,s] xpad[n,c,oh+r,ow+s]; blocks of KB output
// channels x 16 columns live in registers while (c, r, s) runs.
// Backward data is the forward on dy padded by R-1-p with the kernel flipped and transposed.
// Backward weights: dw[k,c,r,s] = sum_{n,oh,ow} dy[n,k,oh,ow] xpad[n,c,oh+r,ow+s], with KB x S
// vector accumulators per (k-block, c, r), reduced across lanes at the end.
#include "src/ops/conv2d/cpu_direct.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/ops/backend/cpu/dnnl_util.h"  // kParallelMacs

namespace hpcnet::cpu {
namespace {

constexpr int V = 16;  // lanes per vector
typedef float vf __attribute__((vector_size(V * sizeof(float))));

ConvAlgo g_algo = ConvAlgo::kAuto;

inline vf loadu(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storeu(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
static_assert(V == 16, "splat lists V copies");
inline float hsum(vf v) {
  float s = 0;
  for (int i = 0; i < V; ++i) s += v[i];
  return s;
}

inline int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

// Per-thread scratch that only grows (no allocation in steady state).
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> bufs[4];
  auto& b = bufs[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Copies src (N, C, H, W) into dst (N, C, H + 2 pad, Wp), zero elsewhere.
void pad_input(const float* src, int64_t nc, int64_t h, int64_t w, int64_t pad, int64_t wp,
               float* dst) {
  int64_t hp = h + 2 * pad;
#pragma omp parallel for schedule(static) if (nc * hp * wp > (1 << 17))
  for (int64_t i = 0; i < nc; ++i) {
    float* plane = dst + i * hp * wp;
    std::memset(plane, 0, sizeof(float) * hp * wp);
    for (int64_t r = 0; r < h; ++r)
      std::memcpy(plane + (r + pad) * wp + pad, src + (i * h + r) * w, sizeof(float) * w);
  }
}

struct Dims {
  int64_t n, c, k, hp, wp;  // padded input
  int64_t p, q, qv;         // output, qv = round_up(q, V)
  int64_t r, s;
};

// Forward on padded input; writes y (N, K, P, Q) directly (the last vector of each row is
// stored through a small buffer so columns >= Q are never written).
template <int KB, int S>
void fwd_block(const Dims& d, const float* xp, const float* wt, const float* bias, float* y,
               int64_t n, int64_t k0, bool relu) {
  // wt: weights transposed to (C, R, S, K) so the KB values of one (c, r, s) are adjacent.
  for (int64_t oh = 0; oh < d.p; ++oh) {
    for (int64_t ow = 0; ow < d.q; ow += V) {
      vf acc[KB];
      for (int kk = 0; kk < KB; ++kk) acc[kk] = splat(bias ? bias[k0 + kk] : 0.f);
      for (int64_t c = 0; c < d.c; ++c) {
        const float* xrow = xp + ((n * d.c + c) * d.hp + oh) * d.wp + ow;
        const float* wc = wt + c * d.r * S * d.k + k0;
        for (int64_t r = 0; r < d.r; ++r) {
          const float* xr = xrow + r * d.wp;
          const float* wr = wc + r * S * d.k;
#pragma GCC unroll 8
          for (int s = 0; s < S; ++s) {
            vf xv = loadu(xr + s);
#pragma GCC unroll 8
            for (int kk = 0; kk < KB; ++kk) acc[kk] += xv * splat(wr[s * d.k + kk]);
          }
        }
      }
      int64_t len = std::min<int64_t>(V, d.q - ow);
      for (int kk = 0; kk < KB; ++kk) {
        vf v = acc[kk];
        if (relu) v = v > 0 ? v : 0;
        float* out = y + ((n * d.k + k0 + kk) * d.p + oh) * d.q + ow;
        if (len == V) {
          storeu(out, v);
        } else {
          float tmp[V];
          storeu(tmp, v);
          std::memcpy(out, tmp, sizeof(float) * len);
        }
      }
    }
  }
}

template <int S>
void fwd_dispatch_kb(int kb, const Dims& d, const float* xp, const float* wt, const float* b,
                     float* y, int64_t n, int64_t k0, bool relu) {
  switch (kb) {
    case 8:
      return fwd_block<8, S>(d, xp, wt, b, y, n, k0, relu);
    case 7:
      return fwd_block<7, S>(d, xp, wt, b, y, n, k0, relu);
    case 6:
      return fwd_block<6, S>(d, xp, wt, b, y, n, k0, relu);
    case 5:
      return fwd_block<5, S>(d, xp, wt, b, y, n, k0, relu);
    case 4:
      return fwd_block<4, S>(d, xp, wt, b, y, n, k0, relu);
    case 3:
      return fwd_block<3, S>(d, xp, wt, b, y, n, k0, relu);
    case 2:
      return fwd_block<2, S>(d, xp, wt, b, y, n, k0, relu);
    default:
      return fwd_block<1, S>(d, xp, wt, b, y, n, k0, relu);
  }
}

void fwd_dispatch(int kb, const Dims& d, const float* xp, const float* wt, const float* b, float* y,
                  int64_t n, int64_t k0, bool relu) {
  switch (d.s) {
    case 1:
      return fwd_dispatch_kb<1>(kb, d, xp, wt, b, y, n, k0, relu);
    case 2:
      return fwd_dispatch_kb<2>(kb, d, xp, wt, b, y, n, k0, relu);
    case 3:
      return fwd_dispatch_kb<3>(kb, d, xp, wt, b, y, n, k0, relu);
    case 4:
      return fwd_dispatch_kb<4>(kb, d, xp, wt, b, y, n, k0, relu);
    case 5:
      return fwd_dispatch_kb<5>(kb, d, xp, wt, b, y, n, k0, relu);
    case 6:
      return fwd_dispatch_kb<6>(kb, d, xp, wt, b, y, n, k0, relu);
    default:
      return fwd_dispatch_kb<7>(kb, d, xp, wt, b, y, n, k0, relu);
  }
}

// Splits K into blocks of at most 8 with sizes as even as possible.
int block_size(int64_t k) {
  int64_t blocks = (k + 7) / 8;
  return static_cast<int>((k + blocks - 1) / blocks);
}

// ---- channel-vectorised variants: 16 output channels per vector ----
// For layers whose output rows are short (Q < 16 wastes most of a column vector) and whose
// output channels fill whole vectors (K % 16 == 0), e.g. LeNet's conv2 (K = 16, Q = 10).

// y[n, k0:k0+16, oh, ow0:ow0+QB]; wt is (C, R, S, K).
template <int QB, int S>
void fwd_kvec_block(const Dims& d, const float* xp, const float* wt, const float* bias, float* y,
                    int64_t n, int64_t k0, int64_t oh, int64_t ow0, bool relu) {
  vf acc[QB];
  vf b0 = bias ? loadu(bias + k0) : splat(0.f);
  for (int j = 0; j < QB; ++j) acc[j] = b0;
  for (int64_t c = 0; c < d.c; ++c)
    for (int64_t r = 0; r < d.r; ++r) {
      const float* xr = xp + ((n * d.c + c) * d.hp + oh + r) * d.wp + ow0;
      const float* wr = wt + (c * d.r + r) * S * d.k + k0;
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        vf wv = loadu(wr + s * d.k);
#pragma GCC unroll 16
        for (int j = 0; j < QB; ++j) acc[j] += wv * splat(xr[j + s]);
      }
    }
  for (int j = 0; j < QB; ++j) {
    vf v = acc[j];
    if (relu) v = v > 0 ? v : 0;
    float* out = y + ((n * d.k + k0) * d.p + oh) * d.q + ow0 + j;
    for (int l = 0; l < V; ++l) out[l * d.p * d.q] = v[l];
  }
}

template <int S>
void fwd_kvec_row(const Dims& d, const float* xp, const float* wt, const float* bias, float* y,
                  int64_t n, int64_t k0, int64_t oh, bool relu) {
  int64_t ow = 0;
  for (; ow + 8 <= d.q; ow += 8) fwd_kvec_block<8, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
  switch (d.q - ow) {
    case 7:
      return fwd_kvec_block<7, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
    case 6:
      return fwd_kvec_block<6, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
    case 5:
      return fwd_kvec_block<5, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
    case 4:
      return fwd_kvec_block<4, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
    case 3:
      return fwd_kvec_block<3, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
    case 2:
      return fwd_kvec_block<2, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
    case 1:
      return fwd_kvec_block<1, S>(d, xp, wt, bias, y, n, k0, oh, ow, relu);
    default:
      return;
  }
}

// dw[k0:k0+16, c, :, :] from dyT (N, P, Q, K): R x S vector accumulators.
template <int R, int S>
void bwdw_kvec(const Dims& d, const float* xp, const float* dyt, float* dw, int64_t k0, int64_t c) {
  vf acc[R][S];
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s) acc[r][s] = splat(0.f);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oh = 0; oh < d.p; ++oh) {
      const float* g_row = dyt + ((n * d.p + oh) * d.q) * d.k + k0;
      const float* x0 = xp + ((n * d.c + c) * d.hp + oh) * d.wp;
      for (int64_t ow = 0; ow < d.q; ++ow) {
        vf g = loadu(g_row + ow * d.k);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
          for (int s = 0; s < S; ++s) acc[r][s] += g * splat(x0[r * d.wp + ow + s]);
      }
    }
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s)
      for (int l = 0; l < V; ++l) dw[(((k0 + l) * d.c + c) * R + r) * S + s] = acc[r][s][l];
}

// Whether the channel-vectorised kernels handle this shape.
bool kvec_applies(int64_t k, int64_t q, int64_t r, int64_t s) {
  return k % V == 0 && q < V && r == s && (s == 3 || s == 5);
}

// y = conv(x, w) + b for stride 1, padding pad; x (N,C,H,W), w given as wt (C,R,S,K).
void direct_forward(const float* x, const float* wt, const float* bias, float* y, int64_t N,
                    int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S, int64_t pad,
                    bool relu) {
  Dims d;
  d.n = N;
  d.c = C;
  d.k = K;
  d.r = R;
  d.s = S;
  d.p = H + 2 * pad - R + 1;
  d.q = W + 2 * pad - S + 1;
  d.qv = round_up(d.q, V);
  d.hp = H + 2 * pad;
  d.wp = std::max<int64_t>(W + 2 * pad, d.qv + S - 1);
  float* xp = scratch(0, static_cast<size_t>(N * C * d.hp * d.wp));
  pad_input(x, N * C, H, W, pad, d.wp, xp);
  double work = static_cast<double>(N) * K * d.p * d.q * C * R * S;
  if (kvec_applies(K, d.q, R, S)) {
    int64_t kv = K / V, tasks = N * kv * d.p;
#pragma omp parallel for schedule(static) if (work > kParallelMacs && tasks > 1)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t n = t / (kv * d.p), k0 = (t / d.p) % kv * V, oh = t % d.p;
      if (S == 3)
        fwd_kvec_row<3>(d, xp, wt, bias, y, n, k0, oh, relu);
      else
        fwd_kvec_row<5>(d, xp, wt, bias, y, n, k0, oh, relu);
    }
    return;
  }
  int kb = block_size(K);
  int64_t kblocks = (K + kb - 1) / kb;
  int64_t tasks = N * kblocks;
#pragma omp parallel for schedule(static) if (work > kParallelMacs && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t n = t / kblocks, k0 = (t % kblocks) * kb;
    int this_kb = static_cast<int>(std::min<int64_t>(kb, K - k0));
    fwd_dispatch(this_kb, d, xp, wt, bias, y, n, k0, relu);
  }
}

// Backward weights for one block of KB output channels and one input channel c.
template <int KB, int S>
void bwdw_block(const Dims& d, const float* xp, const float* dyp, float* dw, int64_t k0,
                int64_t c) {
  for (int64_t r = 0; r < d.r; ++r) {
    vf acc[KB][S];
    for (int kk = 0; kk < KB; ++kk)
      for (int s = 0; s < S; ++s) acc[kk][s] = splat(0.f);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t oh = 0; oh < d.p; ++oh) {
        const float* xr = xp + ((n * d.c + c) * d.hp + oh + r) * d.wp;
        const float* dr = dyp + ((n * d.k + k0) * d.p + oh) * d.qv;
        for (int64_t ow = 0; ow < d.qv; ow += V) {
          vf g[KB];
#pragma GCC unroll 8
          for (int kk = 0; kk < KB; ++kk) g[kk] = loadu(dr + kk * d.p * d.qv + ow);
#pragma GCC unroll 8
          for (int s = 0; s < S; ++s) {
            vf xv = loadu(xr + ow + s);
#pragma GCC unroll 8
            for (int kk = 0; kk < KB; ++kk) acc[kk][s] += g[kk] * xv;
          }
        }
      }
    for (int kk = 0; kk < KB; ++kk)
      for (int s = 0; s < S; ++s) dw[(((k0 + kk) * d.c + c) * d.r + r) * S + s] = hsum(acc[kk][s]);
  }
}

template <int S>
void bwdw_dispatch_kb(int kb, const Dims& d, const float* xp, const float* dyp, float* dw,
                      int64_t k0, int64_t c) {
  switch (kb) {
    case 4:
      return bwdw_block<4, S>(d, xp, dyp, dw, k0, c);
    case 3:
      return bwdw_block<3, S>(d, xp, dyp, dw, k0, c);
    case 2:
      return bwdw_block<2, S>(d, xp, dyp, dw, k0, c);
    default:
      return bwdw_block<1, S>(d, xp, dyp, dw, k0, c);
  }
}

void bwdw_dispatch(int kb, const Dims& d, const float* xp, const float* dyp, float* dw, int64_t k0,
                   int64_t c) {
  switch (d.s) {
    case 1:
      return bwdw_dispatch_kb<1>(kb, d, xp, dyp, dw, k0, c);
    case 2:
      return bwdw_dispatch_kb<2>(kb, d, xp, dyp, dw, k0, c);
    case 3:
      return bwdw_dispatch_kb<3>(kb, d, xp, dyp, dw, k0, c);
    case 4:
      return bwdw_dispatch_kb<4>(kb, d, xp, dyp, dw, k0, c);
    case 5:
      return bwdw_dispatch_kb<5>(kb, d, xp, dyp, dw, k0, c);
    case 6:
      return bwdw_dispatch_kb<6>(kb, d, xp, dyp, dw, k0, c);
    default:
      return bwdw_dispatch_kb<7>(kb, d, xp, dyp, dw, k0, c);
  }
}

}  // namespace

void set_conv_algo(ConvAlgo a) { g_algo = a; }
ConvAlgo conv_algo() { return g_algo; }

bool conv2d_direct_applies(const Shape& x, const Shape& w, const Conv2dParams& p) {
  if (p.stride_h != 1 || p.stride_w != 1 || p.pad_h != p.pad_w || p.dil_h != 1 || p.dil_w != 1)
    return false;
  int64_t c = w[1], k = w[0], r = w[2], s = w[3];
  if (r != s || r < 1 || r > 7 || p.pad_h >= r) return false;
  // oneDNN's blocked kernels win once channels fill its 16-wide blocks.
  return c <= 16 && k <= 32 && !(c % 16 == 0 && k % 16 == 0);
}

void conv2d_direct_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                           const Conv2dParams& p, bool relu) {
  int64_t K = w.size(0), C = w.size(1), R = w.size(2), S = w.size(3);
  // Weights to (C, R, S, K).
  float* wt = scratch(1, static_cast<size_t>(K * C * R * S));
  const float* pw = w.data<float>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < C * R * S; ++i) wt[i * K + k] = pw[k * C * R * S + i];
  direct_forward(x.data<float>(), wt, b.defined() ? b.data<float>() : nullptr, y.data<float>(),
                 x.size(0), C, x.size(2), x.size(3), K, R, S, p.pad_h, relu);
}

void conv2d_direct_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx,
                                 const Conv2dParams& p) {
  int64_t K = w.size(0), C = w.size(1), R = w.size(2), S = w.size(3);
  // Flipped, transposed kernel w'[c, k, r', s'] = w[k, c, R-1-r', S-1-s'], stored as the
  // forward's (K' = C outputs) transposed layout (K, R, S, C).
  float* wt = scratch(1, static_cast<size_t>(K * C * R * S));
  const float* pw = w.data<float>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          wt[((k * R + (R - 1 - r)) * S + (S - 1 - s)) * C + c] = pw[((k * C + c) * R + r) * S + s];
  direct_forward(dy.data<float>(), wt, nullptr, dx.data<float>(), dy.size(0), K, dy.size(2),
                 dy.size(3), C, R, S, R - 1 - p.pad_h, false);
}

void conv2d_direct_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                                    const Conv2dParams& p) {
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  int64_t K = dw.size(0), R = dw.size(2), S = dw.size(3);
  int64_t pad = p.pad_h;
  Dims d;
  d.n = N;
  d.c = C;
  d.k = K;
  d.r = R;
  d.s = S;
  d.p = dy.size(2);
  d.q = dy.size(3);
  d.qv = round_up(d.q, V);
  d.hp = H + 2 * pad;
  d.wp = std::max<int64_t>(W + 2 * pad, d.qv + S - 1);
  float* xp = scratch(0, static_cast<size_t>(N * C * d.hp * d.wp));
  pad_input(x.data<float>(), N * C, H, W, pad, d.wp, xp);
  double work = static_cast<double>(N) * K * d.p * d.q * C * R * S;
  const float* pdy = dy.data<float>();
  float* pdw = dw.data<float>();
  if (kvec_applies(K, d.q, R, S)) {
    // dy transposed to (N, P, Q, K).
    float* dyt = scratch(2, static_cast<size_t>(N * K * d.p * d.q));
    int64_t pq = d.p * d.q;
#pragma omp parallel for schedule(static) if (N * K * pq > (1 << 17))
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = 0; i < pq; ++i) dyt[(n * pq + i) * K + k] = pdy[(n * K + k) * pq + i];
    int64_t kv = K / V, tasks = kv * C;
#pragma omp parallel for schedule(static) if (work > kParallelMacs && tasks > 1)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t k0 = (t / C) * V, c = t % C;
      if (S == 3)
        bwdw_kvec<3, 3>(d, xp, dyt, pdw, k0, c);
      else
        bwdw_kvec<5, 5>(d, xp, dyt, pdw, k0, c);
    }
  } else {
    // dy rows padded with zeros to qv columns.
    float* dyp = scratch(2, static_cast<size_t>(N * K * d.p * d.qv));
#pragma omp parallel for schedule(static) if (N * K * d.p * d.qv > (1 << 17))
    for (int64_t i = 0; i < N * K * d.p; ++i) {
      std::memcpy(dyp + i * d.qv, pdy + i * d.q, sizeof(float) * d.q);
      std::memset(dyp + i * d.qv + d.q, 0, sizeof(float) * (d.qv - d.q));
    }
    int kb = static_cast<int>(std::min<int64_t>(4, K));
    // Balance the blocks: ceil(K / 4) blocks of near-equal size.
    int64_t kblocks = (K + kb - 1) / kb;
    kb = static_cast<int>((K + kblocks - 1) / kblocks);
    kblocks = (K + kb - 1) / kb;
    int64_t tasks = kblocks * C;
#pragma omp parallel for schedule(static) if (work > kParallelMacs && tasks > 1)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t k0 = (t / C) * kb, c = t % C;
      int this_kb = static_cast<int>(std::min<int64_t>(kb, K - k0));
      bwdw_dispatch(this_kb, d, xp, dyp, pdw, k0, c);
    }
  }
  if (db.defined()) {
    float* pdb = db.data<float>();
    int64_t pq = d.p * d.q;
    for (int64_t k = 0; k < K; ++k) {
      vf acc = splat(0.f);
      float tail = 0;
      for (int64_t n = 0; n < N; ++n) {
        const float* row = pdy + (n * K + k) * pq;
        int64_t i = 0;
        for (; i + V <= pq; i += V) acc += loadu(row + i);
        for (; i < pq; ++i) tail += row[i];
      }
      pdb[k] = hsum(acc) + tail;
    }
  }
}

}  // namespace hpcnet::cpu
