// The YOLOv8 assigner, loss and decoding (see yolo_loss.h). Float32 arithmetic where Ultralytics
// computes in float32, so assignments match bit for bit on ordinary inputs.
#include "src/task/detect/yolo_loss.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "hpcnet/error.h"
#include "hpcnet/functional.h"
#include "hpcnet/profile.h"
#include "src/core/cuda_device.h"
#include "src/ops/box/math.h"
#include "src/ops/trace.h"
#include "src/task/detect/tal_math.h"
#ifdef HPCNET_WITH_CUDA
#include "src/task/detect/tal_cuda.h"
#endif

namespace hpcnet::task::detect {

Anchors make_anchors(int64_t h, int64_t w) {
  HPCNET_REQUIRE(h % 32 == 0 && w % 32 == 0 && h > 0 && w > 0,
                 "yolo: the input size must be a positive multiple of 32, got " +
                     std::to_string(h) + "x" + std::to_string(w));
  Anchors a;
  for (int64_t s : kStrides) {
    const int64_t gh = h / s, gw = w / s;
    for (int64_t y = 0; y < gh; ++y)
      for (int64_t x = 0; x < gw; ++x) {
        a.xy.push_back(static_cast<float>(x) + 0.5f);
        a.xy.push_back(static_cast<float>(y) + 0.5f);
        a.stride.push_back(static_cast<float>(s));
      }
  }
  return a;
}

std::vector<ImageTargets> targets_of(const std::vector<std::vector<data::Box>>& boxes) {
  std::vector<ImageTargets> out(boxes.size());
  for (size_t b = 0; b < boxes.size(); ++b)
    for (const data::Box& x : boxes[b]) {
      // Crowd regions are not objects to learn (Ultralytics drops iscrowd annotations), nor is a
      // box under a pixel wide or high (zero-size COCO boxes; the transforms keep them for the
      // metric).
      if (x.crowd || !(x.x2 - x.x1 >= 1.f && x.y2 - x.y1 >= 1.f)) continue;
      out[b].boxes.push_back({x.x1, x.y1, x.x2, x.y2});
      out[b].labels.push_back(x.cls);
    }
  return out;
}

Assignment tal_assign(const float* pd_scores, const float* pd_bboxes, const float* anc, int64_t B,
                      int64_t A, int64_t nc, const std::vector<ImageTargets>& gts,
                      const LossOptions& o) {
  HPCNET_REQUIRE(static_cast<int64_t>(gts.size()) == B, "tal_assign: targets for " +
                                                             std::to_string(gts.size()) +
                                                             " images, batch of " +
                                                             std::to_string(B));
  Assignment r;
  r.labels.assign(B * A, 0);
  r.gt_idx.assign(B * A, 0);
  r.bboxes.assign(B * A * 4, 0.f);
  r.scores.assign(B * A * nc, 0.f);
  r.fg.assign(B * A, 0);
  size_t n_max = 0;
  for (auto& g : gts) n_max = std::max(n_max, g.boxes.size());
  if (n_max == 0) {  // Ultralytics' early return: label nc everywhere
    std::fill(r.labels.begin(), r.labels.end(), nc);
    return r;
  }
  const float stride_val = static_cast<float>(kStrides[1]);
  const float eps_in = 1e-9f;
  std::vector<int64_t> order;
  for (int64_t b = 0; b < B; ++b) {
    const ImageTargets& g = gts[b];
    const int64_t n = static_cast<int64_t>(g.boxes.size());
    const float* ps = pd_scores + b * A * nc;
    const float* pb = pd_bboxes + b * A * 4;
    // (n, A) overlaps, metrics and the positive mask.
    std::vector<float> overlap(n * A, 0.f), metric(n * A, 0.f);
    std::vector<uint8_t> pos(n * A, 0), cand(n * A, 0);
    for (int64_t j = 0; j < n; ++j) {
      const auto& box = g.boxes[j];
      HPCNET_REQUIRE(g.labels[j] >= 0 && g.labels[j] < nc,
                     "tal_assign: label " + std::to_string(g.labels[j]) + " outside [0, " +
                         std::to_string(nc) + ")");
      // Ultralytics pads with all-zero boxes and masks those whose coordinates sum to 0.
      if (!(box[0] + box[1] + box[2] + box[3] > 0.f)) continue;
      // Candidates: anchor centres strictly inside the box, sides under stride_val enlarged.
      float cx = (box[0] + box[2]) / 2, cy = (box[1] + box[3]) / 2;
      float bw = box[2] - box[0], bh = box[3] - box[1];
      if (bw < stride_val) bw = stride_val;
      if (bh < stride_val) bh = stride_val;
      const float x1 = cx - bw / 2, y1 = cy - bh / 2, x2 = cx + bw / 2, y2 = cy + bh / 2;
      order.clear();
      for (int64_t a = 0; a < A; ++a) {
        const float ax = anc[2 * a], ay = anc[2 * a + 1];
        if (!(ax - x1 > eps_in && ay - y1 > eps_in && x2 - ax > eps_in && y2 - ay > eps_in))
          continue;
        cand[j * A + a] = 1;
        const float ov = std::max(math::ciou(box.data(), pb + 4 * a), 0.f);
        overlap[j * A + a] = ov;
        const float sc = ps[a * nc + g.labels[j]];
        metric[j * A + a] = std::pow(sc, static_cast<float>(o.alpha)) *
                            std::pow(ov, static_cast<float>(o.beta));
        order.push_back(a);
      }
      // The topk candidates by metric (ties: lower anchor first).
      const size_t k = std::min<size_t>(static_cast<size_t>(o.topk), order.size());
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [&](int64_t u, int64_t v) {
                          const float mu = metric[j * A + u], mv = metric[j * A + v];
                          return mu > mv || (mu == mv && u < v);
                        });
      for (size_t i = 0; i < k; ++i) pos[j * A + order[i]] = 1;
    }
    // Anchors claimed by several gts keep the gt of highest overlap (over all gts).
    for (int64_t a = 0; a < A; ++a) {
      int count = 0;
      for (int64_t j = 0; j < n; ++j) count += pos[j * A + a];
      if (count > 1) {
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j)
          if (overlap[j * A + a] > overlap[best * A + a]) best = j;
        for (int64_t j = 0; j < n; ++j) pos[j * A + a] = j == best;
      }
    }
    // Normalised alignment: metric * max overlap / max metric per gt, max over gts per anchor.
    std::vector<float> norm(A, 0.f);
    for (int64_t j = 0; j < n; ++j) {
      float pos_align = 0.f, pos_ov = 0.f;
      for (int64_t a = 0; a < A; ++a)
        if (pos[j * A + a]) {
          pos_align = std::max(pos_align, metric[j * A + a]);
          pos_ov = std::max(pos_ov, overlap[j * A + a]);
        }
      for (int64_t a = 0; a < A; ++a)
        if (pos[j * A + a])
          norm[a] = std::max(norm[a], metric[j * A + a] * pos_ov / (pos_align + 1e-9f));
    }
    for (int64_t a = 0; a < A; ++a) {
      int64_t j = 0;
      bool fg = false;
      for (int64_t k = 0; k < n; ++k)
        if (pos[k * A + a]) {
          j = k;
          fg = true;
          break;
        }
      const int64_t i = b * A + a;
      r.fg[i] = fg;
      r.gt_idx[i] = j;
      r.labels[i] = n > 0 ? g.labels[j] : 0;
      for (int c = 0; c < 4; ++c) r.bboxes[4 * i + c] = n > 0 ? g.boxes[j][c] : 0.f;
      if (fg) r.scores[i * nc + g.labels[j]] = norm[a];
    }
  }
  return r;
}

namespace {

// decode_predictions' column of anchor a: boxes_b (64, A) and scores_b (nc, A) of one image into
// out[k * stride], k = 0 .. 3 + nc (centre x, y, width, height in pixels, then the sigmoid scores).
void decode_anchor(const float* boxes_b, const float* scores_b, int64_t A, int64_t nc,
                   const Anchors& anchors, int64_t a, float* out, int64_t stride) {
  float d[4];
  for (int k = 0; k < 4; ++k) d[k] = tal::side_expectation(boxes_b, A, a, k);
  const float ax = anchors.xy[2 * a], ay = anchors.xy[2 * a + 1], s = anchors.stride[a];
  const float x1 = ax - d[0], y1 = ay - d[1], x2 = ax + d[2], y2 = ay + d[3];
  out[0 * stride] = (x1 + x2) / 2 * s;
  out[1 * stride] = (y1 + y2) / 2 * s;
  out[2 * stride] = (x2 - x1) * s;
  out[3 * stride] = (y2 - y1) * s;
  for (int64_t c = 0; c < nc; ++c) out[(4 + c) * stride] = math::sigmoid(scores_b[c * A + a]);
}

Tensor cpu_f32(const Tensor& t) {
  Tensor c = t.detach().to(cpu_device());
  return c.dtype() == DType::kFloat32 ? c.contiguous() : c.to(DType::kFloat32).contiguous();
}

}  // namespace

std::array<double, 3> LossResult::items() const {
  const std::vector<double> v = parts.to_vector_f64();
  return {v[0], v[1], v[2]};
}

namespace {

// The anchors of an input of h x w pixels, checked against the head's outputs.
Anchors head_anchors(const Tensor& boxes, const Tensor& scores, int64_t h, int64_t w) {
  HPCNET_REQUIRE(boxes.dim() == 3 && scores.dim() == 3 && boxes.size(1) == 4 * kRegMax &&
                     boxes.size(0) == scores.size(0) && boxes.size(2) == scores.size(2),
                 "yolo loss: expected boxes (B, 64, A) and scores (B, nc, A), got " +
                     shape_str(boxes.shape()) + " and " + shape_str(scores.shape()));
  Anchors anchors = make_anchors(h, w);
  const int64_t A = boxes.size(2);
  HPCNET_REQUIRE(A == anchors.size(), "yolo loss: " + std::to_string(A) +
                                          " anchors in the outputs, " +
                                          std::to_string(anchors.size()) + " for " +
                                          std::to_string(h) + "x" + std::to_string(w));
  return anchors;
}

// The three 0-d parts as one (3,) tensor on their device (queued copies, nothing read).
Tensor stack_parts(const Tensor& box, const Tensor& cls, const Tensor& dfl) {
  const Device dev = box.device();
  Tensor out = Tensor::empty({3}, DType::kFloat32, dev);
  const Tensor* p[3] = {&box, &cls, &dfl};
  for (int k = 0; k < 3; ++k) {
    Tensor v = p[k]->detach().to(DType::kFloat32);
    cuda_copy_bytes(out.data<float>() + k, dev, v.raw_data(), dev, sizeof(float));
  }
  return out;
}

// Times B (Ultralytics); on world ranks times world^2 B: the mean over ranks of world^2 B (parts
// of rank r) is world B (parts of the global batch), one process's loss.
Tensor total_of(const Tensor& box, const Tensor& cls, const Tensor& dfl, int64_t B,
                const LossOptions& o) {
  const double world = o.rank_sum ? static_cast<double>(o.world) : 1.0;
  return F::mul_scalar(F::add(F::add(box, cls), dfl), static_cast<double>(B) * world * world);
}

bool staged_on(Device dev) {
  static const bool host = [] {
    const char* v = std::getenv("HPCNET_DETECT_LOSS");
    return v && std::string(v) == "host";
  }();
  return dev.is_cuda() && !host;
}

}  // namespace

LossResult v8_detection_loss(const Tensor& boxes, const Tensor& scores, int64_t h, int64_t w,
                             const std::vector<ImageTargets>& gts, const LossOptions& o) {
  if (staged_on(scores.device())) return v8_detection_loss_staged(boxes, scores, h, w, gts, o);
  const Anchors anchors = head_anchors(boxes, scores, h, w);
  const int64_t B = boxes.size(0), A = boxes.size(2), nc = scores.size(1);
  // Detached CPU views for the assignment: decoded boxes in pixels, sigmoid scores (B, A, nc).
  std::optional<profile::Scope> host(std::in_place, "yolo_loss_assign (host)", 0.0, true);
  Tensor bc = cpu_f32(boxes), sc = cpu_f32(scores);
  const float* pb = bc.data<float>();
  const float* ps = sc.data<float>();
  std::vector<float> pd_boxes(B * A * 4), pd_scores(B * A * nc), anc_px(A * 2);
  for (int64_t a = 0; a < A; ++a) {
    anc_px[2 * a] = anchors.xy[2 * a] * anchors.stride[a];
    anc_px[2 * a + 1] = anchors.xy[2 * a + 1] * anchors.stride[a];
  }
  for (int64_t b = 0; b < B; ++b) {
    const float* bb = pb + b * 4 * kRegMax * A;
    for (int64_t a = 0; a < A; ++a) {
      tal::decode_box(bb, A, a, anchors.xy[2 * a], anchors.xy[2 * a + 1], anchors.stride[a],
                      &pd_boxes[(b * A + a) * 4]);
      for (int64_t c = 0; c < nc; ++c)
        pd_scores[(b * A + a) * nc + c] = math::sigmoid(ps[(b * nc + c) * A + a]);
    }
  }
  LossResult res;
  res.assignment = tal_assign(pd_scores.data(), pd_boxes.data(), anc_px.data(), B, A, nc, gts, o);
  const Assignment& as = res.assignment;
  double score_sum = 0;
  for (float v : as.scores) score_sum += v;
  if (o.rank_sum) o.rank_sum(&score_sum, 1);  // the global batch's
  const double S = std::max(score_sum, 1.0);  // target_scores.sum().clamp(min=1)

  host.reset();
  const Device dev = scores.device();
  const DType dt = scores.dtype();
  auto to_dev = [&](const std::vector<double>& v, const Shape& s) {
    return Tensor::from_vector_f64(v, s).to(dt).to(dev);
  };
  // Class loss: BCE against the target scores laid out as the logits (B, nc, A).
  std::vector<double> tgt(B * nc * A);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a)
      for (int64_t c = 0; c < nc; ++c)
        tgt[(b * nc + c) * A + a] = as.scores[(b * A + a) * nc + c];
  Tensor cls = F::mul_scalar(F::bce_with_logits(scores, to_dev(tgt, scores.shape())), o.cls / S);

  // Box and DFL losses over the foreground anchors, in grid units.
  std::vector<int64_t> idx;
  std::vector<double> sign, offs, tbox, weight, tltrb, w4;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a) {
      const int64_t i = b * A + a;
      if (!as.fg[i]) continue;
      idx.push_back(i);
      double wsum = 0;
      for (int64_t c = 0; c < nc; ++c) wsum += as.scores[i * nc + c];
      weight.push_back(wsum);
      const float s = anchors.stride[a], ax = anchors.xy[2 * a], ay = anchors.xy[2 * a + 1];
      float t[4];
      for (int c = 0; c < 4; ++c) t[c] = as.bboxes[4 * i + c] / s;
      for (int c = 0; c < 4; ++c) tbox.push_back(t[c]);
      const double d[4] = {ax - t[0], ay - t[1], t[2] - ax, t[3] - ay};
      for (int c = 0; c < 4; ++c) {
        tltrb.push_back(std::clamp(d[c], 0.0, static_cast<double>(kRegMax - 1) - 0.01));
        w4.push_back(wsum / 4);
      }
      for (double v : {-1.0, -1.0, 1.0, 1.0}) sign.push_back(v);
      for (double v : {static_cast<double>(ax), static_cast<double>(ay), static_cast<double>(ax),
                       static_cast<double>(ay)})
        offs.push_back(v);
    }
  const int64_t M = static_cast<int64_t>(idx.size());
  Tensor dist = F::reshape(F::gather_anchors(boxes, Tensor::from_labels(idx).to(dev)),
                           {M * 4, kRegMax});  // (M * 4, 16)
  Tensor ltrb = F::reshape(F::dfl_expect(dist), {M, 4});
  Tensor pred = F::add(F::mul(ltrb, to_dev(sign, {M, 4})), to_dev(offs, {M, 4}));
  Tensor box = F::mul_scalar(F::ciou_loss(pred, to_dev(tbox, {M, 4}), to_dev(weight, {M})),
                             o.box / S);
  Tensor dfl = F::mul_scalar(F::dfl_loss(dist, to_dev(tltrb, {M * 4}), to_dev(w4, {M * 4})),
                             o.dfl / S);
  res.parts = stack_parts(box, cls, dfl);
  res.total = total_of(box, cls, dfl, B, o);
  return res;
}

namespace {

// The staged path's buffers on one device, and the View over them. The inputs from the host
// (anchors, strides, boxes, labels) travel as one float buffer, through pinned memory to a GPU
// (a copy from pageable memory may wait for the device).
struct Staged {
  Tensor inputs;
  Tensor pd, overlap, metric, pos, pos_align, pos_ov;
  Tensor fg, gt_idx, labels, bboxes;
  Tensor tgt_cls, tbox, weight, tltrb, w4, sign, offs, index;
  tal::View v;
};

Staged make_staged(const Tensor& boxes, const Tensor& scores, const Anchors& anchors,
                   const std::vector<ImageTargets>& gts, const LossOptions& o) {
  const int64_t B = boxes.size(0), A = boxes.size(2), nc = scores.size(1);
  HPCNET_REQUIRE(static_cast<int64_t>(gts.size()) == B,
                 "yolo loss: targets for " + std::to_string(gts.size()) + " images, batch of " +
                     std::to_string(B));
  int64_t n_max = 0;
  for (const ImageTargets& g : gts) n_max = std::max<int64_t>(n_max, g.boxes.size());
  const int64_t N = std::max<int64_t>(n_max, 1);
  // [anchors (A, 2) | strides (A) | boxes (B, N, 4) | labels (B, N)]
  const int64_t at_stride = 2 * A, at_gt = 3 * A, at_label = at_gt + B * N * 4;
  // Sized up to a power of two: a pinned slot that must grow waits for the device.
  const int64_t used = at_label + B * N;
  Tensor host = Tensor::empty({std::max<int64_t>(4096, static_cast<int64_t>(std::bit_ceil(
                                                           static_cast<uint64_t>(used))))});
  float* in = host.data<float>();
  std::fill(in + used, in + host.numel(), 0.f);
  std::copy(anchors.xy.begin(), anchors.xy.end(), in);
  std::copy(anchors.stride.begin(), anchors.stride.end(), in + at_stride);
  std::fill(in + at_gt, in + at_label, 0.f);
  std::fill(in + at_label, in + at_label + B * N, -1.f);
  for (int64_t b = 0; b < B; ++b)
    for (size_t j = 0; j < gts[b].boxes.size(); ++j) {
      const int64_t c = gts[b].labels[j];
      HPCNET_REQUIRE(c >= 0 && c < nc, "tal_assign: label " + std::to_string(c) +
                                           " outside [0, " + std::to_string(nc) + ")");
      const int64_t row = b * N + static_cast<int64_t>(j);
      in[at_label + row] = static_cast<float>(c);
      for (int k = 0; k < 4; ++k) in[at_gt + row * 4 + k] = gts[b].boxes[j][k];
    }
  const Device dev = scores.device();
  Staged s;
  if (dev.is_cpu()) {
    s.inputs = host;
  } else {
    thread_local PinnedUploader uploader;  // the training thread's ring of pinned buffers
    s.inputs = uploader.upload(host, dev);
  }
  const float* inputs = s.inputs.data<float>();
  auto f32 = [&](const Shape& sh) { return Tensor::empty(sh, DType::kFloat32, dev); };
  s.pd = f32({B, A, 4});
  s.overlap = f32({B, N, A});
  s.metric = f32({B, N, A});
  s.pos = Tensor::empty({B, N, A}, DType::kUInt8, dev);
  s.pos_align = f32({B, N});
  s.pos_ov = f32({B, N});
  s.fg = Tensor::empty({B, A}, DType::kUInt8, dev);
  s.gt_idx = Tensor::empty({B, A}, DType::kInt32, dev);
  s.labels = Tensor::empty({B, A}, DType::kInt32, dev);
  s.bboxes = f32({B, A, 4});
  s.tgt_cls = f32({B, nc, A});
  s.tbox = f32({B * A, 4});
  s.weight = f32({B * A});
  s.tltrb = f32({B * A * 4});
  s.w4 = f32({B * A * 4});
  s.sign = f32({B * A, 4});
  s.offs = f32({B * A, 4});
  s.index = Tensor::empty({B * A}, DType::kInt64, dev);
  tal::View& v = s.v;
  v.B = B, v.A = A, v.nc = nc, v.N = N, v.topk = o.topk;
  v.alpha = static_cast<float>(o.alpha), v.beta = static_cast<float>(o.beta);
  v.no_object_label = n_max == 0 ? static_cast<int32_t>(nc) : 0;
  v.boxes = boxes.data<float>(), v.scores = scores.data<float>();
  v.anc = inputs, v.stride = inputs + at_stride;
  v.gt = inputs + at_gt, v.label = inputs + at_label;
  v.pd = s.pd.data<float>(), v.overlap = s.overlap.data<float>();
  v.metric = s.metric.data<float>(), v.pos = s.pos.data<uint8_t>();
  v.pos_align = s.pos_align.data<float>(), v.pos_ov = s.pos_ov.data<float>();
  v.fg = s.fg.data<uint8_t>(), v.gt_idx = s.gt_idx.data<int32_t>();
  v.labels = s.labels.data<int32_t>(), v.bboxes = s.bboxes.data<float>();
  v.tgt_cls = s.tgt_cls.data<float>(), v.tbox = s.tbox.data<float>();
  v.weight = s.weight.data<float>(), v.tltrb = s.tltrb.data<float>();
  v.w4 = s.w4.data<float>(), v.sign = s.sign.data<float>(), v.offs = s.offs.data<float>();
  v.index = s.index.data<int64_t>();
  return s;
}

// tal_math.h's stages in host loops, in the order the kernels run them; the target-score sum.
double assign_on_host(const tal::View& v) {
  for (int64_t i = 0; i < v.B * v.A; ++i) tal::decode(v, i / v.A, i % v.A);
  for (int64_t i = 0; i < v.B * v.N * v.A; ++i)
    tal::metric(v, i / (v.N * v.A), (i / v.A) % v.N, i % v.A);
  for (int64_t i = 0; i < v.B * v.N; ++i) tal::topk(v, i / v.N, i % v.N);
  for (int64_t i = 0; i < v.B * v.A; ++i) tal::resolve(v, i / v.A, i % v.A);
  for (int64_t i = 0; i < v.B * v.N; ++i) tal::stats(v, i / v.N, i % v.N);
  double sum = 0;
  for (int64_t i = 0; i < v.B * v.A; ++i) sum += tal::target(v, i / v.A, i % v.A);
  return sum;
}

Assignment copy_assignment(const Staged& s) {
  Assignment r;
  const Tensor fg = s.fg.to(cpu_device()), gi = s.gt_idx.to(cpu_device());
  const Tensor lb = s.labels.to(cpu_device()), bb = s.bboxes.to(cpu_device());
  const Tensor tc = s.tgt_cls.to(cpu_device());
  const int64_t B = s.v.B, A = s.v.A, nc = s.v.nc;
  r.fg.assign(fg.data<uint8_t>(), fg.data<uint8_t>() + B * A);
  r.gt_idx.assign(gi.data<int32_t>(), gi.data<int32_t>() + B * A);
  r.labels.assign(lb.data<int32_t>(), lb.data<int32_t>() + B * A);
  r.bboxes = bb.to_vector();
  r.scores.assign(B * A * nc, 0.f);  // (B, A, nc) from the logits' layout (B, nc, A)
  const float* t = tc.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t a = 0; a < A; ++a) r.scores[(b * A + a) * nc + c] = t[(b * nc + c) * A + a];
  return r;
}

}  // namespace

LossResult v8_detection_loss_staged(const Tensor& boxes_in, const Tensor& scores_in, int64_t h,
                                    int64_t w, const std::vector<ImageTargets>& gts,
                                    const LossOptions& o, bool keep_assignment) {
  const Anchors anchors = head_anchors(boxes_in, scores_in, h, w);
  HPCNET_REQUIRE(boxes_in.device() == scores_in.device() &&
                     boxes_in.dtype() == DType::kFloat32 && scores_in.dtype() == DType::kFloat32,
                 "yolo loss: boxes and scores must be float32 on one device");
  const int64_t B = boxes_in.size(0), A = boxes_in.size(2);
  const Tensor boxes = boxes_in.contiguous(), scores = scores_in.contiguous();
  Staged st;
  double S = -1;  // the target-score sum on the host, when it is there
  Tensor inverse = Tensor::empty({}, DType::kFloat32, scores.device());
  {
    NoGradGuard no_grad;
    st = make_staged(boxes.detach(), scores.detach(), anchors, gts, o);
    if (scores.device().is_cpu()) {
      S = assign_on_host(st.v);
    } else {
#ifdef HPCNET_WITH_CUDA
      const int index = scores.device().index;
      Tensor sum = Tensor::empty({1}, DType::kFloat64, scores.device());
      tal::assign_cuda(st.v, index, sum.data<double>());
      if (o.rank_sum && o.device_rank_sum)
        o.device_rank_sum(sum);  // over the ranks on the GPUs (NCCL): nothing read back
      else if (o.rank_sum)
        S = sum.to_vector_f64()[0];  // the ranks' sum is a host value (one wait)
      if (S < 0) tal::inverse_cuda(sum.data<double>(), inverse.data<float>(), index);
#else
      throw Error("yolo loss: no staged assigner for " + scores.device().str());
#endif
    }
    if (S >= 0 && o.rank_sum) o.rank_sum(&S, 1);  // the global batch's
    if (S >= 0) S = std::max(S, 1.0);             // target_scores.sum().clamp(min=1)
  }
  // Every anchor: the background's weights are 0, so it adds nothing (nor any gradient).
  Tensor cls = F::bce_with_logits(scores, st.tgt_cls);
  Tensor dist = F::reshape(F::gather_anchors(boxes, st.index), {B * A * 4, kRegMax});
  Tensor ltrb = F::reshape(F::dfl_expect(dist), {B * A, 4});
  Tensor pred = F::add(F::mul(ltrb, st.sign), st.offs);
  Tensor box = F::ciou_loss(pred, st.tbox, st.weight);
  Tensor dfl = F::dfl_loss(dist, st.tltrb, st.w4);
  auto scaled = [&](const Tensor& x, double gain) {
    return S >= 0 ? F::mul_scalar(x, gain / S) : F::mul(F::mul_scalar(x, gain), inverse);
  };
  box = scaled(box, o.box);
  cls = scaled(cls, o.cls);
  dfl = scaled(dfl, o.dfl);
  LossResult res;
  res.parts = stack_parts(box, cls, dfl);
  res.total = total_of(box, cls, dfl, B, o);
  if (keep_assignment) res.assignment = copy_assignment(st);
  return res;
}

Tensor decode_predictions(const Tensor& boxes, const Tensor& scores, int64_t h, int64_t w) {
  const Anchors anchors = make_anchors(h, w);
  const int64_t B = boxes.size(0), A = boxes.size(2), nc = scores.size(1);
  HPCNET_REQUIRE(A == anchors.size() && boxes.size(1) == 4 * kRegMax,
                 "yolo decode: outputs " + shape_str(boxes.shape()) + " do not fit a " +
                     std::to_string(h) + "x" + std::to_string(w) + " input");
  Tensor bc = cpu_f32(boxes), sc = cpu_f32(scores);
  Tensor out = Tensor::empty({B, 4 + nc, A});
  const float* pb = bc.data<float>();
  const float* ps = sc.data<float>();
  float* po = out.data<float>();
  for (int64_t b = 0; b < B; ++b) {
    const float* bb = pb + b * 4 * kRegMax * A;
    float* ob = po + b * (4 + nc) * A;
    for (int64_t a = 0; a < A; ++a) decode_anchor(bb, ps + b * nc * A, A, nc, anchors, a, ob + a, A);
  }
  if (trace::g_recorder != nullptr) {  // `hpcnet export`: the decoding becomes ONNX nodes
    Tensor centres = Tensor::empty({1, 2, A}), strides = Tensor::empty({1, 1, A});
    float *pc = centres.data<float>(), *pstride = strides.data<float>();
    for (int64_t a = 0; a < A; ++a) {
      pc[a] = anchors.xy[2 * a];
      pc[A + a] = anchors.xy[2 * a + 1];
      pstride[a] = anchors.stride[a];
    }
    trace::add_function("yolo_decode", {boxes, scores, centres, strides}, out, {{"reg_max", kRegMax}});
  }
  return out;
}

Candidates decode_candidates(const Tensor& boxes, const Tensor& scores, int64_t h, int64_t w,
                             int64_t b, float conf) {
  const Anchors anchors = make_anchors(h, w);
  const int64_t A = boxes.size(2), nc = scores.size(1);
  HPCNET_REQUIRE(A == anchors.size() && boxes.size(1) == 4 * kRegMax && b < boxes.size(0),
                 "yolo decode: outputs " + shape_str(boxes.shape()) + " do not fit a " +
                     std::to_string(h) + "x" + std::to_string(w) + " input");
  Candidates out;
  if (!(conf < 1.f)) return out;  // no sigmoid score exceeds 1
  const Tensor bc = cpu_f32(boxes), sc = cpu_f32(scores);
  const float* bb = bc.data<float>() + b * 4 * kRegMax * A;
  const float* sb = sc.data<float>() + b * nc * A;
  // Each anchor's best logit, class rows read in order (scores are (nc, A) per image).
  std::vector<float> best(static_cast<size_t>(A), -std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < nc; ++c) {
    const float* row = sb + c * A;
    for (int64_t a = 0; a < A; ++a) best[static_cast<size_t>(a)] = std::max(best[a], row[a]);
  }
  const float lo = conf > 0.f ? std::log(conf / (1.f - conf)) - 1e-3f
                              : -std::numeric_limits<float>::infinity();
  for (int64_t a = 0; a < A; ++a)
    if (!(best[static_cast<size_t>(a)] < lo)) out.anchor.push_back(a);  // NaN logits kept
  const int64_t M = static_cast<int64_t>(out.anchor.size());
  out.pred.resize(static_cast<size_t>((4 + nc) * M));
  float* po = out.pred.data();
  for (int64_t m = 0; m < M; ++m)  // column anchor[m] -> m
    decode_anchor(bb, sb, A, nc, anchors, out.anchor[static_cast<size_t>(m)], po + m, M);
  return out;
}

}  // namespace hpcnet::task::detect
