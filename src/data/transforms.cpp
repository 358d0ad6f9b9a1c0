// Compose of Resize / Letterbox, then ToTensor / Normalize / RandomCrop / RandomHorizontalFlip /
// Cutout. A resize runs first into a per-thread buffer (pixels bilinear, mask nearest, boxes
// scaled); the rest runs fused: the geometric transforms compose into one index map per axis
// (source = offset + sign * output, plus the window of source pixels that are not padding), and
// ToTensor + Normalize into a 256-entry table per channel computed with torch's float32
// arithmetic ((v / 255 - mean) / std). Masks follow the same index map, boxes its continuous form.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "hpcnet/data.h"
#include "hpcnet/rng.h"

namespace hpcnet::data {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}

// One axis of the fused index map.
struct Axis {
  int64_t size;        // current extent
  int64_t offset = 0;  // source index of current index 0
  int64_t sign = 1;    // +1 or -1
  int64_t lo, hi;      // source indices in [lo, hi) are image, others padding
  void crop(int64_t start, int64_t new_size) {
    // Indices [0, size) of the current image map to this source interval.
    int64_t a = sign > 0 ? offset : offset - (size - 1);
    int64_t b = sign > 0 ? offset + size : offset + 1;
    lo = std::max(lo, a);
    hi = std::min(hi, b);
    offset += sign * start;
    size = new_size;
  }
  void flip() {
    offset += sign * (size - 1);
    sign = -sign;
  }
  // A box edge at source coordinate u (pixel s covers [s, s+1)) in output coordinates, clipped to
  // the visible source window and to the output.
  float map_edge(float u) const {
    u = std::clamp(u, static_cast<float>(lo), static_cast<float>(hi));
    const float v = sign > 0 ? u - static_cast<float>(offset) : static_cast<float>(offset + 1) - u;
    return std::clamp(v, 0.f, static_cast<float>(size));
  }
};

// The resampled example a Resize or Letterbox produces (buffers kept per thread).
struct Resampled {
  std::vector<uint8_t> pixels, mask;
  std::vector<Box> boxes;
};

// Bilinear, align_corners=False, no antialiasing, into dst (oh, ow, 3) at (top, left) of a dst
// row stride of dst_w pixels.
void resize_bilinear_into(const Example& ex, int64_t oh, int64_t ow, uint8_t* dst, int64_t dst_w,
                          int64_t top, int64_t left) {
  const int64_t H = ex.height, W = ex.width;
  for (int64_t y = 0; y < oh; ++y) {
    const double sy = std::max(0.0, (y + 0.5) * static_cast<double>(H) / oh - 0.5);
    const int64_t y0 = std::min<int64_t>(static_cast<int64_t>(sy), H - 1);
    const int64_t y1 = std::min<int64_t>(y0 + 1, H - 1);
    const double fy = sy - y0;
    uint8_t* row = dst + ((top + y) * dst_w + left) * 3;
    for (int64_t x = 0; x < ow; ++x) {
      const double sx = std::max(0.0, (x + 0.5) * static_cast<double>(W) / ow - 0.5);
      const int64_t x0 = std::min<int64_t>(static_cast<int64_t>(sx), W - 1);
      const int64_t x1 = std::min<int64_t>(x0 + 1, W - 1);
      const double fx = sx - x0;
      for (int c = 0; c < 3; ++c) {
        auto px = [&](int64_t yy, int64_t xx) { return ex.pixels[(yy * W + xx) * 3 + c]; };
        const double v = (1 - fy) * ((1 - fx) * px(y0, x0) + fx * px(y0, x1)) +
                         fy * ((1 - fx) * px(y1, x0) + fx * px(y1, x1));
        row[x * 3 + c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
}

// Nearest (pixel centres) into dst (oh, ow) at (top, left) of a row stride of dst_w.
void resize_nearest_into(const uint8_t* src, int64_t H, int64_t W, int64_t oh, int64_t ow,
                         uint8_t* dst, int64_t dst_w, int64_t top, int64_t left) {
  for (int64_t y = 0; y < oh; ++y) {
    const int64_t sy = std::min<int64_t>(static_cast<int64_t>((y + 0.5) * H / oh), H - 1);
    for (int64_t x = 0; x < ow; ++x) {
      const int64_t sx = std::min<int64_t>(static_cast<int64_t>((x + 0.5) * W / ow), W - 1);
      dst[(top + y) * dst_w + left + x] = src[sy * W + sx];
    }
  }
}

// ex resized to (oh, ow) and placed at (top, left) of an (out_h, out_w) canvas filled with `fill`
// (mask: kIgnoreIndex); boxes scaled by (ow / W, oh / H) and shifted. Returns the new example.
Example resample(const Example& ex, int64_t oh, int64_t ow, int64_t out_h, int64_t out_w,
                 int64_t top, int64_t left, uint8_t fill, Resampled& buf) {
  buf.pixels.assign(static_cast<size_t>(out_h * out_w * 3), fill);
  resize_bilinear_into(ex, oh, ow, buf.pixels.data(), out_w, top, left);
  Example r{buf.pixels.data(), out_h, out_w, ex.label};
  if (ex.mask) {
    buf.mask.assign(static_cast<size_t>(out_h * out_w), static_cast<uint8_t>(kIgnoreIndex));
    resize_nearest_into(ex.mask, ex.height, ex.width, oh, ow, buf.mask.data(), out_w, top, left);
    r.mask = buf.mask.data();
  }
  if (ex.boxes) {
    const float sx = static_cast<float>(ow) / static_cast<float>(ex.width);
    const float sy = static_cast<float>(oh) / static_cast<float>(ex.height);
    buf.boxes.resize(static_cast<size_t>(ex.num_boxes));
    for (int64_t k = 0; k < ex.num_boxes; ++k) {
      const Box& b = ex.boxes[k];
      buf.boxes[static_cast<size_t>(k)] = {b.cls, b.x1 * sx + left, b.y1 * sy + top,
                                           b.x2 * sx + left, b.y2 * sy + top};
    }
    r.boxes = buf.boxes.data();
    r.num_boxes = ex.num_boxes;
  }
  return r;
}

}  // namespace

std::vector<uint8_t> resize_nearest(const uint8_t* src, int64_t height, int64_t width,
                                    int64_t out_height, int64_t out_width) {
  HPCNET_REQUIRE(height > 0 && width > 0 && out_height > 0 && out_width > 0,
                 "resize_nearest: sizes must be positive");
  std::vector<uint8_t> out(static_cast<size_t>(out_height * out_width));
  resize_nearest_into(src, height, width, out_height, out_width, out.data(), out_width, 0, 0);
  return out;
}

LetterboxGeometry letterbox_geometry(int64_t height, int64_t width, int64_t size) {
  HPCNET_REQUIRE(height > 0 && width > 0 && size > 0, "letterbox: sizes must be positive");
  LetterboxGeometry g;
  g.scale = std::min(static_cast<double>(size) / height, static_cast<double>(size) / width);
  // Python's round() (half to even), as Ultralytics computes the new shape and the padding.
  g.new_height = static_cast<int64_t>(std::nearbyint(height * g.scale));
  g.new_width = static_cast<int64_t>(std::nearbyint(width * g.scale));
  g.top = static_cast<int64_t>(std::nearbyint((size - g.new_height) / 2.0 - 0.1));
  g.left = static_cast<int64_t>(std::nearbyint((size - g.new_width) / 2.0 - 0.1));
  return g;
}

Compose::Compose() : Compose(std::vector<Transform>{ToTensor{}}) {}

Compose::Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {
  int to_tensor = 0, normalize = 0, cutout = 0;
  Normalize norm;
  bool first = true;
  for (const Transform& t : transforms_) {
    const bool is_first = first;
    first = false;
    std::visit(
        Overloaded{
            [&](const Resize& r) {
              HPCNET_REQUIRE(is_first, "transforms: Resize must come first");
              HPCNET_REQUIRE(r.height > 0 && r.width > 0,
                             "transforms: Resize needs a positive size, got " +
                                 std::to_string(r.height) + "x" + std::to_string(r.width));
            },
            [&](const Letterbox& l) {
              HPCNET_REQUIRE(is_first, "transforms: Letterbox must come first");
              HPCNET_REQUIRE(l.size > 0, "transforms: Letterbox needs a positive size");
            },
            [&](const RandomScale& r) {
              HPCNET_REQUIRE(is_first, "transforms: RandomScale must come first");
              HPCNET_REQUIRE(
                  r.size > 0 && r.scale_min > 0 && r.scale_max >= r.scale_min && r.scale_max <= 8,
                  "transforms: RandomScale needs size > 0 and 0 < scale_min <= "
                  "scale_max <= 8, got " +
                      std::to_string(r.size) + ", " + fmt_float(static_cast<float>(r.scale_min)) +
                      ", " + fmt_float(static_cast<float>(r.scale_max)));
            },
            [&](const ToTensor&) {
              HPCNET_REQUIRE(to_tensor == 0, "transforms: ToTensor appears twice");
              to_tensor++;
            },
            [&](const Normalize& n) {
              HPCNET_REQUIRE(to_tensor == 1,
                             "transforms: Normalize must come after "
                             "ToTensor");
              HPCNET_REQUIRE(normalize == 0, "transforms: Normalize appears twice");
              for (float s : n.std)
                HPCNET_REQUIRE(s > 0.f,
                               "transforms: Normalize std must be > 0, got " + fmt_float(s));
              norm = n;
              normalize++;
            },
            [&](const Cutout& c) {
              HPCNET_REQUIRE(to_tensor == 1, "transforms: Cutout must come after ToTensor");
              HPCNET_REQUIRE(c.size > 0, "transforms: Cutout needs size > 0");
              cutout++;
            },
            [&](const RandomCrop& c) {
              HPCNET_REQUIRE(cutout == 0, "transforms: RandomCrop must come before Cutout");
              HPCNET_REQUIRE(normalize == 0,
                             "transforms: RandomCrop must come before "
                             "Normalize");
              HPCNET_REQUIRE(c.size > 0 && c.padding >= 0,
                             "transforms: RandomCrop needs size > 0 and padding >= 0, got " +
                                 std::to_string(c.size) + ", " + std::to_string(c.padding));
            },
            [&](const RandomHorizontalFlip& f) {
              HPCNET_REQUIRE(normalize == 0,
                             "transforms: RandomHorizontalFlip must come "
                             "before Normalize");
              HPCNET_REQUIRE(f.p >= 0.0 && f.p <= 1.0,
                             "transforms: RandomHorizontalFlip p must be in [0, 1]");
            },
        },
        t);
  }
  HPCNET_REQUIRE(to_tensor == 1,
                 "transforms: the pipeline needs a ToTensor (batches hold float tensors)");
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v) / 255.0f;
      if (normalize) x = (x - norm.mean[c]) / norm.std[c];
      lut_[c][v] = x;
    }
  }
}

std::array<int64_t, 3> Compose::output_shape(int64_t height, int64_t width) const {
  for (const Transform& t : transforms_) {
    if (const auto* r = std::get_if<Resize>(&t)) {
      height = r->height;
      width = r->width;
    } else if (const auto* l = std::get_if<Letterbox>(&t)) {
      height = width = l->size;
    } else if (const auto* rs = std::get_if<RandomScale>(&t)) {
      height = width = rs->size;
    } else if (const auto* c = std::get_if<RandomCrop>(&t)) {
      HPCNET_REQUIRE(c->size <= height + 2 * c->padding && c->size <= width + 2 * c->padding,
                     "transforms: RandomCrop(" + std::to_string(c->size) +
                         ", padding=" + std::to_string(c->padding) + ") does not fit a " +
                         std::to_string(height) + "x" + std::to_string(width) +
                         " image; use a smaller size or more padding");
      height = width = c->size;
    }
  }
  return {3, height, width};
}

void Compose::apply(const Example& ex_in, uint64_t sample_seed, float* out,
                    std::vector<Box>* boxes_out, int64_t* mask_out) const {
  Example ex = ex_in;
  if (!transforms_.empty()) {
    thread_local Resampled buf;
    if (const auto* r = std::get_if<Resize>(&transforms_.front())) {
      if (r->height != ex.height || r->width != ex.width)
        ex = resample(ex_in, r->height, r->width, r->height, r->width, 0, 0, 0, buf);
    } else if (const auto* l = std::get_if<Letterbox>(&transforms_.front())) {
      const LetterboxGeometry g = letterbox_geometry(ex.height, ex.width, l->size);
      ex =
          resample(ex_in, g.new_height, g.new_width, l->size, l->size, g.top, g.left, l->fill, buf);
    } else if (const auto* rs = std::get_if<RandomScale>(&transforms_.front())) {
      // The scale has its own stream, so the draws of the transforms after it are unchanged.
      Rng scale_rng(sample_seed, 1);
      const double f = rs->scale_min + (rs->scale_max - rs->scale_min) * scale_rng.uniform();
      const int64_t side = std::max<int64_t>(1, std::llround(static_cast<double>(rs->size) * f));
      if (side != ex.height || side != ex.width)
        ex = resample(ex_in, side, side, side, side, 0, 0, 0, buf);
    }
  }
  Rng rng(sample_seed, 0);
  Axis ay{ex.height, 0, 1, 0, ex.height};
  Axis ax{ex.width, 0, 1, 0, ex.width};
  struct Hole {
    int64_t y0, y1, x0, x1;
  };
  std::array<Hole, 4> holes{};
  size_t n_holes = 0;
  for (const Transform& t : transforms_) {
    if (const auto* k = std::get_if<Cutout>(&t)) {  // sizes are final here (crops come first)
      const int64_t cy = static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ay.size)));
      const int64_t cx = static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ax.size)));
      HPCNET_REQUIRE(n_holes < holes.size(), "transforms: at most 4 Cutout");
      holes[n_holes++] = {std::max<int64_t>(cy - k->size / 2, 0),
                          std::min<int64_t>(cy - k->size / 2 + k->size, ay.size),
                          std::max<int64_t>(cx - k->size / 2, 0),
                          std::min<int64_t>(cx - k->size / 2 + k->size, ax.size)};
    }
    if (const auto* rs = std::get_if<RandomScale>(&t)) {
      // The window: padded equally to at least size on each axis, then cut at random.
      const int64_t py = std::max<int64_t>(0, (rs->size - ay.size + 1) / 2);
      const int64_t px = std::max<int64_t>(0, (rs->size - ax.size + 1) / 2);
      const int64_t top =
          static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ay.size + 2 * py - rs->size + 1)));
      const int64_t left =
          static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ax.size + 2 * px - rs->size + 1)));
      ay.crop(top - py, rs->size);
      ax.crop(left - px, rs->size);
    } else if (const auto* c = std::get_if<RandomCrop>(&t)) {
      const int64_t ph = ay.size + 2 * c->padding, pw = ax.size + 2 * c->padding;
      HPCNET_REQUIRE(c->size <= ph && c->size <= pw,
                     "transforms: RandomCrop(" + std::to_string(c->size) +
                         ", padding=" + std::to_string(c->padding) + ") does not fit a " +
                         std::to_string(ay.size) + "x" + std::to_string(ax.size) + " image");
      const int64_t top =
          static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ph - c->size + 1)));
      const int64_t left =
          static_cast<int64_t>(rng.randint(static_cast<uint64_t>(pw - c->size + 1)));
      ay.crop(top - c->padding, c->size);
      ax.crop(left - c->padding, c->size);
    } else if (const auto* f = std::get_if<RandomHorizontalFlip>(&t)) {
      if (rng.uniform() < f->p) ax.flip();
    }
  }
  const int64_t H = ay.size, W = ax.size;
  // Output columns whose source is image (not padding) form one interval [x0, x1).
  int64_t x0 = W, x1 = 0;
  for (int64_t x = 0; x < W; ++x) {
    const int64_t s = ax.offset + ax.sign * x;
    if (s >= ax.lo && s < ax.hi) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x + 1);
    }
  }
  const int64_t stride = ex.width * 3;
  for (int c = 0; c < 3; ++c) {
    const float* lut = lut_[c].data();
    const float pad = lut[0];
    float* plane = out + c * H * W;
    for (int64_t y = 0; y < H; ++y) {
      float* row_out = plane + y * W;
      const int64_t sy = ay.offset + ay.sign * y;
      if (sy < ay.lo || sy >= ay.hi || x0 >= x1) {
        for (int64_t x = 0; x < W; ++x) row_out[x] = pad;
        continue;
      }
      const uint8_t* row_in = ex.pixels + sy * stride + c;
      for (int64_t x = 0; x < x0; ++x) row_out[x] = pad;
      if (ax.sign > 0) {
        const uint8_t* p = row_in + (ax.offset + x0) * 3;
        for (int64_t x = x0; x < x1; ++x, p += 3) row_out[x] = lut[*p];
      } else {
        const uint8_t* p = row_in + (ax.offset - x0) * 3;
        for (int64_t x = x0; x < x1; ++x, p -= 3) row_out[x] = lut[*p];
      }
      for (int64_t x = x1; x < W; ++x) row_out[x] = pad;
    }
    for (size_t h = 0; h < n_holes; ++h)
      for (int64_t y = holes[h].y0; y < holes[h].y1; ++y)
        for (int64_t x = holes[h].x0; x < holes[h].x1; ++x) plane[y * W + x] = 0.f;
  }
  if (mask_out && ex.mask) {  // the pixels' index map, nearest by construction
    for (int64_t y = 0; y < H; ++y) {
      const int64_t sy = ay.offset + ay.sign * y;
      const bool row_in = sy >= ay.lo && sy < ay.hi;
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sx = ax.offset + ax.sign * x;
        mask_out[y * W + x] = row_in && sx >= ax.lo && sx < ax.hi
                                  ? static_cast<int64_t>(ex.mask[sy * ex.width + sx])
                                  : kIgnoreIndex;
      }
    }
  }
  if (boxes_out) {
    boxes_out->clear();
    for (int64_t k = 0; k < ex.num_boxes; ++k) {
      const Box& b = ex.boxes[k];
      float xa = ax.map_edge(b.x1), xb = ax.map_edge(b.x2);
      float ya = ay.map_edge(b.y1), yb = ay.map_edge(b.y2);
      Box o{b.cls, std::min(xa, xb), std::min(ya, yb), std::max(xa, xb), std::max(ya, yb)};
      if (o.x2 - o.x1 >= 1.f && o.y2 - o.y1 >= 1.f) boxes_out->push_back(o);
    }
  }
}

std::string Compose::str() const {
  std::string s = "Compose(";
  bool first = true;
  for (const Transform& t : transforms_) {
    if (!first) s += ", ";
    first = false;
    std::visit(
        Overloaded{
            [&](const ToTensor&) { s += "ToTensor()"; },
            [&](const Normalize& n) {
              s += "Normalize(mean=(" + fmt_float(n.mean[0]) + ", " + fmt_float(n.mean[1]) + ", " +
                   fmt_float(n.mean[2]) + "), std=(" + fmt_float(n.std[0]) + ", " +
                   fmt_float(n.std[1]) + ", " + fmt_float(n.std[2]) + "))";
            },
            [&](const RandomCrop& c) {
              s += "RandomCrop(" + std::to_string(c.size) +
                   ", padding=" + std::to_string(c.padding) + ")";
            },
            [&](const Cutout& c) { s += "Cutout(" + std::to_string(c.size) + ")"; },
            [&](const Resize& r) {
              s += "Resize((" + std::to_string(r.height) + ", " + std::to_string(r.width) + "))";
            },
            [&](const Letterbox& l) {
              s += "Letterbox(" + std::to_string(l.size) + ", fill=" + std::to_string(l.fill) + ")";
            },
            [&](const RandomScale& r) {
              s += "RandomScale(" + std::to_string(r.size) + ", scale=(" +
                   fmt_float(static_cast<float>(r.scale_min)) + ", " +
                   fmt_float(static_cast<float>(r.scale_max)) + "))";
            },
            [&](const RandomHorizontalFlip& f) {
              char buf[32];
              std::snprintf(buf, sizeof(buf), "%g", f.p);
              s += std::string("RandomHorizontalFlip(p=") + buf + ")";
            },
        },
        t);
  }
  return s + ")";
}

}  // namespace hpcnet::data
