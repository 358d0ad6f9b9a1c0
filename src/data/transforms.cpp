// Compose of ToTensor / Normalize / RandomCrop / RandomHorizontalFlip, run fused: the geometric
// transforms compose into one index map per axis (source = offset + sign * output, plus the
// window of source pixels that are not padding), and ToTensor + Normalize into a 256-entry table
// per channel computed with torch's float32 arithmetic ((v / 255 - mean) / std).
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
};

}  // namespace

Compose::Compose() : Compose(std::vector<Transform>{ToTensor{}}) {}

Compose::Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {
  int to_tensor = 0, normalize = 0, cutout = 0;
  Normalize norm;
  for (const Transform& t : transforms_) {
    std::visit(Overloaded{
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
    if (const auto* c = std::get_if<RandomCrop>(&t)) {
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

void Compose::apply(const Example& ex, uint64_t sample_seed, float* out) const {
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
    if (const auto* c = std::get_if<RandomCrop>(&t)) {
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
}

std::string Compose::str() const {
  std::string s = "Compose(";
  bool first = true;
  for (const Transform& t : transforms_) {
    if (!first) s += ", ";
    first = false;
    std::visit(Overloaded{
                   [&](const ToTensor&) { s += "ToTensor()"; },
                   [&](const Normalize& n) {
                     s += "Normalize(mean=(" + fmt_float(n.mean[0]) + ", " + fmt_float(n.mean[1]) +
                          ", " + fmt_float(n.mean[2]) + "), std=(" + fmt_float(n.std[0]) + ", " +
                          fmt_float(n.std[1]) + ", " + fmt_float(n.std[2]) + "))";
                   },
                   [&](const RandomCrop& c) {
                     s += "RandomCrop(" + std::to_string(c.size) +
                          ", padding=" + std::to_string(c.padding) + ")";
                   },
                   [&](const Cutout& c) { s += "Cutout(" + std::to_string(c.size) + ")"; },
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
