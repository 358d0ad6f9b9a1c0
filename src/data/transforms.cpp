// Compose of Resize / Letterbox, then ToTensor / Normalize / RandomCrop / RandomHorizontalFlip /
// Cutout. A resize runs first into a per-thread buffer (pixels bilinear, mask nearest, boxes
// scaled); the rest runs fused: the geometric transforms compose into one index map per axis
// (source = offset + sign * output, plus the window of source pixels that are not padding), and
// ToTensor + Normalize into a 256-entry table per channel computed with torch's float32
// arithmetic ((v / 255 - mean) / std). Masks follow the same index map, boxes its continuous form.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
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
  // the visible source window and to the output; *clipped is set when that moved it (by more than
  // float rounding).
  float map_edge(float u, bool* clipped) const {
    const float c = std::clamp(u, static_cast<float>(lo), static_cast<float>(hi));
    const float v = sign > 0 ? c - static_cast<float>(offset) : static_cast<float>(offset + 1) - c;
    const float out = std::clamp(v, 0.f, static_cast<float>(size));
    if (std::abs(c - u) + std::abs(out - v) > 1e-3f) *clipped = true;
    return out;
  }
};

// The resampled example a Resize or Letterbox produces (buffers kept per thread).
struct Resampled {
  std::vector<uint8_t> pixels, mask;
  std::vector<Box> boxes;
};

// The source window a resize reads: rows [y, y + h) and columns [x, x + w) of the image (the
// whole image, or a crop of RandomResizedCrop's).
struct Window {
  int64_t y = 0, x = 0, h = 0, w = 0;
};
Window whole(const Example& ex) { return {0, 0, ex.height, ex.width}; }

// One output coordinate's two source taps and the second's weight (align_corners=False).
struct Tap {
  int64_t i0, i1;
  double f, g;  // g = 1 - f
};
Tap bilinear_tap(int64_t o, int64_t out, int64_t in) {
  const double s = std::max(0.0, (o + 0.5) * static_cast<double>(in) / out - 0.5);
  const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(s), in - 1);
  return {i0, std::min<int64_t>(i0 + 1, in - 1), s - i0, 1 - (s - i0)};
}

// Bilinear, align_corners=False, no antialiasing, from window win of ex into dst (oh, ow, 3) at
// (top, left) of a dst row stride of dst_w pixels. The column taps are computed once per call.
void resize_bilinear_into(const Example& ex, const Window& win, int64_t oh, int64_t ow,
                          uint8_t* dst, int64_t dst_w, int64_t top, int64_t left) {
  const int64_t W = ex.width, n = ow * 3;
  if (oh == win.h && ow == win.w) {  // every tap is (i, weight 1): the same bytes, copied
    for (int64_t y = 0; y < oh; ++y)
      std::memcpy(dst + ((top + y) * dst_w + left) * 3, ex.pixels + ((win.y + y) * W + win.x) * 3,
                  static_cast<size_t>(n));
    return;
  }
  thread_local std::vector<Tap> cols;
  thread_local std::vector<double> rows[2];  // source rows interpolated along x, (ow * 3,)
  cols.resize(static_cast<size_t>(ow));
  for (int64_t x = 0; x < ow; ++x) cols[static_cast<size_t>(x)] = bilinear_tap(x, ow, win.w);
  int64_t held[2] = {-1, -1};  // the source row each of rows[] holds
  // The slot of rows[] holding source row sy interpolated along x, filled now unless it is held
  // (an upscale reads each source row for several output rows); the slot holding `other` (the
  // output row's other source row) is kept.
  auto slot_of = [&](int64_t sy, int64_t other) -> int {
    for (int k = 0; k < 2; ++k)
      if (held[k] == sy) return k;
    const int k = held[0] == other ? 1 : 0;
    rows[k].resize(static_cast<size_t>(n));
    const uint8_t* src = ex.pixels + ((win.y + sy) * W + win.x) * 3;
    double* out = rows[k].data();
    for (int64_t x = 0; x < ow; ++x) {
      const Tap& tx = cols[static_cast<size_t>(x)];
      const uint8_t* a = src + tx.i0 * 3;
      const uint8_t* b = src + tx.i1 * 3;
      for (int c = 0; c < 3; ++c) out[x * 3 + c] = tx.g * a[c] + tx.f * b[c];
    }
    held[k] = sy;
    return k;
  };
  for (int64_t y = 0; y < oh; ++y) {
    const Tap ty = bilinear_tap(y, oh, win.h);
    const double fy = ty.f, gy = ty.g;
    const int k0 = slot_of(ty.i0, ty.i1);
    const double* h0 = rows[k0].data();
    const double* h1 = rows[slot_of(ty.i1, ty.i0)].data();
    uint8_t* __restrict row = dst + ((top + y) * dst_w + left) * 3;
    // std::lround of v (half away from zero) without the libm call or a branch, so the loop
    // vectorises (3.5x faster than a branchy form, the same bytes): v - floor(v) is exact, and v
    // lies in [0, 255] (weights summing to 1 over values in [0, 255]; a few ulps above 255 at
    // worst, which still rounds to 255).
    for (int64_t i = 0; i < n; ++i) {
      const double v = gy * h0[i] + fy * h1[i];
      const int r = static_cast<int>(v);
      row[i] = static_cast<uint8_t>(r + static_cast<int>(v - static_cast<double>(r) >= 0.5));
    }
  }
}

// Nearest (pixel centres) from window win of src (a W-wide map) into dst (oh, ow) at (top, left)
// of a row stride of dst_w.
void resize_nearest_into(const uint8_t* src, int64_t W, const Window& win, int64_t oh, int64_t ow,
                         uint8_t* dst, int64_t dst_w, int64_t top, int64_t left) {
  for (int64_t y = 0; y < oh; ++y) {
    const int64_t sy =
        win.y + std::min<int64_t>(static_cast<int64_t>((y + 0.5) * win.h / oh), win.h - 1);
    for (int64_t x = 0; x < ow; ++x) {
      const int64_t sx =
          win.x + std::min<int64_t>(static_cast<int64_t>((x + 0.5) * win.w / ow), win.w - 1);
      dst[(top + y) * dst_w + left + x] = src[sy * W + sx];
    }
  }
}

// Window win of ex resized to (oh, ow) and placed at (top, left) of an (out_h, out_w) canvas
// filled with `fill` (mask: kIgnoreIndex); boxes shifted by the window, scaled by (ow / win.w,
// oh / win.h) and shifted again (the fused pass clips them). Returns the new example.
Example resample(const Example& ex, const Window& win, int64_t oh, int64_t ow, int64_t out_h,
                 int64_t out_w, int64_t top, int64_t left, uint8_t fill, Resampled& buf) {
  buf.pixels.assign(static_cast<size_t>(out_h * out_w * 3), fill);
  resize_bilinear_into(ex, win, oh, ow, buf.pixels.data(), out_w, top, left);
  Example r{buf.pixels.data(), out_h, out_w, ex.label};
  if (ex.mask) {
    buf.mask.assign(static_cast<size_t>(out_h * out_w), static_cast<uint8_t>(kIgnoreIndex));
    resize_nearest_into(ex.mask, ex.width, win, oh, ow, buf.mask.data(), out_w, top, left);
    r.mask = buf.mask.data();
  }
  if (ex.boxes) {
    const float sx = static_cast<float>(ow) / static_cast<float>(win.w);
    const float sy = static_cast<float>(oh) / static_cast<float>(win.h);
    const float wx = static_cast<float>(win.x), wy = static_cast<float>(win.y);
    buf.boxes.resize(static_cast<size_t>(ex.num_boxes));
    for (int64_t k = 0; k < ex.num_boxes; ++k) {
      Box& o = buf.boxes[static_cast<size_t>(k)];
      o = ex.boxes[k];  // class, area and crowd as they are
      o.x1 = (o.x1 - wx) * sx + left, o.y1 = (o.y1 - wy) * sy + top;
      o.x2 = (o.x2 - wx) * sx + left, o.y2 = (o.y2 - wy) * sy + top;
    }
    r.boxes = buf.boxes.data();
    r.num_boxes = ex.num_boxes;
  }
  return r;
}
Example resample(const Example& ex, int64_t oh, int64_t ow, int64_t out_h, int64_t out_w,
                 int64_t top, int64_t left, uint8_t fill, Resampled& buf) {
  return resample(ex, whole(ex), oh, ow, out_h, out_w, top, left, fill, buf);
}

// torchvision's RandomResizedCrop.get_params for an H x W image.
Window random_resized_crop_window(const RandomResizedCrop& t, int64_t H, int64_t W, Rng& rng) {
  const double area = static_cast<double>(H) * static_cast<double>(W);
  const double lr0 = std::log(t.ratio_min), lr1 = std::log(t.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (t.scale_min + (t.scale_max - t.scale_min) * rng.uniform());
    const double ratio = std::exp(lr0 + (lr1 - lr0) * rng.uniform());
    const int64_t w = std::llround(std::sqrt(target * ratio));
    const int64_t h = std::llround(std::sqrt(target / ratio));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      const int64_t y = static_cast<int64_t>(rng.randint(static_cast<uint64_t>(H - h + 1)));
      const int64_t x = static_cast<int64_t>(rng.randint(static_cast<uint64_t>(W - w + 1)));
      return {y, x, h, w};
    }
  }
  const double in_ratio = static_cast<double>(W) / static_cast<double>(H);
  int64_t w = W, h = H;
  if (in_ratio < t.ratio_min) {
    h = std::min<int64_t>(H, std::llround(static_cast<double>(w) / t.ratio_min));
  } else if (in_ratio > t.ratio_max) {
    w = std::min<int64_t>(W, std::llround(static_cast<double>(h) * t.ratio_max));
  }
  return {(H - h) / 2, (W - w) / 2, std::max<int64_t>(h, 1), std::max<int64_t>(w, 1)};
}

// torchvision's Resize(size) with an int: the shorter side to size, the longer int(size l / s).
std::array<int64_t, 2> shorter_side_to(int64_t size, int64_t H, int64_t W) {
  if (H <= W) return {size, static_cast<int64_t>(static_cast<double>(size) * W / H)};
  return {static_cast<int64_t>(static_cast<double>(size) * H / W), size};
}

// ---- Ultralytics' RandomPerspective (affine part) and RandomHSV ----

// M (2x3, source -> output) of RandomPerspective(degrees, translate, scale, shear, perspective=0)
// for an image of w x h pixels warped to size x size: M = T S R C with C moving the centre to the
// origin, R a rotation by a (uniform +-degrees) scaled by s (uniform 1 +- scale), S a shear
// (uniform +-shear degrees on each axis) and T a translation to uniform(0.5 +- translate) x size.
struct Affine {
  double m[6];  // x' = m0 x + m1 y + m2, y' = m3 x + m4 y + m5
  double s;     // the scale drawn
};

Affine draw_affine(const RandomAffine& p, int64_t h, int64_t w, Rng& rng) {
  auto U = [&](double lo, double hi) { return lo + (hi - lo) * rng.uniform(); };
  const double a = U(-p.degrees, p.degrees) * M_PI / 180.0;
  const double s = U(1 - p.scale, 1 + p.scale);
  const double shx = std::tan(U(-p.shear, p.shear) * M_PI / 180.0);
  const double shy = std::tan(U(-p.shear, p.shear) * M_PI / 180.0);
  const double tx = U(0.5 - p.translate, 0.5 + p.translate) * static_cast<double>(p.size);
  const double ty = U(0.5 - p.translate, 0.5 + p.translate) * static_cast<double>(p.size);
  // cv2.getRotationMatrix2D(center=(0, 0), angle, scale): [[c, s'], [-s', c]], c = s cos a, s' =
  // s sin a (a counter-clockwise rotation in image coordinates).
  const double rc = s * std::cos(a), rs = s * std::sin(a);
  const double R[4] = {rc, rs, -rs, rc};
  // S R (2x2), then with C = translate(-w/2, -h/2) and T = translate(tx, ty).
  const double SR[4] = {R[0] + shx * R[2], R[1] + shx * R[3], shy * R[0] + R[2],
                        shy * R[1] + R[3]};
  const double cx = -static_cast<double>(w) / 2, cy = -static_cast<double>(h) / 2;
  Affine A;
  A.m[0] = SR[0];
  A.m[1] = SR[1];
  A.m[2] = SR[0] * cx + SR[1] * cy + tx;
  A.m[3] = SR[2];
  A.m[4] = SR[3];
  A.m[5] = SR[2] * cx + SR[3] * cy + ty;
  A.s = s;
  return A;
}

// ex warped by A into a size x size canvas: pixels bilinear with a constant border `fill` (as
// cv2.warpAffine(INTER_LINEAR, BORDER_CONSTANT) samples output pixel (x, y) at M^-1 (x, y)), masks
// nearest with kIgnoreIndex outside; boxes: the four corners mapped, their bounding box clipped to
// the canvas, kept when Ultralytics' box_candidates keeps them (width and height > 2 pixels, area
// > 10% of the box scaled by s, aspect ratio < 100).
Example warp_affine(const Example& ex, const Affine& A, int64_t size, uint8_t fill,
                    Resampled& buf) {
  const double det = A.m[0] * A.m[4] - A.m[1] * A.m[3];
  HPCNET_CHECK(std::abs(det) > 1e-12, "RandomAffine: a singular transform");
  // Inverse: output -> source.
  const double i0 = A.m[4] / det, i1 = -A.m[1] / det, i3 = -A.m[3] / det, i4 = A.m[0] / det;
  const double i2 = -(i0 * A.m[2] + i1 * A.m[5]), i5 = -(i3 * A.m[2] + i4 * A.m[5]);
  const int64_t H = ex.height, W = ex.width;
  buf.pixels.assign(static_cast<size_t>(size * size * 3), fill);
  for (int64_t y = 0; y < size; ++y) {
    uint8_t* row = buf.pixels.data() + y * size * 3;
    for (int64_t x = 0; x < size; ++x) {
      const double sx = i0 * x + i1 * y + i2, sy = i3 * x + i4 * y + i5;
      const double fx0 = std::floor(sx), fy0 = std::floor(sy);
      if (fx0 < -1 || fy0 < -1 || fx0 >= W || fy0 >= H) continue;  // all four outside
      const int64_t x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
      const double fx = sx - fx0, fy = sy - fy0;
      for (int c = 0; c < 3; ++c) {
        auto px = [&](int64_t yy, int64_t xx) -> double {
          return (yy < 0 || yy >= H || xx < 0 || xx >= W) ? fill : ex.pixels[(yy * W + xx) * 3 + c];
        };
        const double v = (1 - fy) * ((1 - fx) * px(y0, x0) + fx * px(y0, x0 + 1)) +
                         fy * ((1 - fx) * px(y0 + 1, x0) + fx * px(y0 + 1, x0 + 1));
        row[x * 3 + c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
  Example r{buf.pixels.data(), size, size, ex.label};
  if (ex.mask) {
    buf.mask.assign(static_cast<size_t>(size * size), static_cast<uint8_t>(kIgnoreIndex));
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x) {
        const int64_t sx = std::llround(i0 * x + i1 * y + i2);
        const int64_t sy = std::llround(i3 * x + i4 * y + i5);
        if (sx >= 0 && sx < W && sy >= 0 && sy < H) buf.mask[y * size + x] = ex.mask[sy * W + sx];
      }
    r.mask = buf.mask.data();
  }
  if (ex.boxes) {
    std::vector<Box> kept;
    kept.reserve(static_cast<size_t>(ex.num_boxes));
    const double lim = static_cast<double>(size);
    for (int64_t k = 0; k < ex.num_boxes; ++k) {
      const Box& b = ex.boxes[k];
      double lo_x = 1e300, lo_y = 1e300, hi_x = -1e300, hi_y = -1e300;
      for (int c = 0; c < 4; ++c) {
        const double px = (c & 1) ? b.x2 : b.x1, py = (c & 2) ? b.y2 : b.y1;
        const double ox = A.m[0] * px + A.m[1] * py + A.m[2];
        const double oy = A.m[3] * px + A.m[4] * py + A.m[5];
        lo_x = std::min(lo_x, ox), hi_x = std::max(hi_x, ox);
        lo_y = std::min(lo_y, oy), hi_y = std::max(hi_y, oy);
      }
      lo_x = std::clamp(lo_x, 0.0, lim), hi_x = std::clamp(hi_x, 0.0, lim);
      lo_y = std::clamp(lo_y, 0.0, lim), hi_y = std::clamp(hi_y, 0.0, lim);
      const double w1 = (b.x2 - b.x1) * A.s, h1 = (b.y2 - b.y1) * A.s;
      const double w2 = hi_x - lo_x, h2 = hi_y - lo_y;
      const double ar = std::max(w2 / (h2 + 1e-16), h2 / (w2 + 1e-16));
      if (w2 > 2 && h2 > 2 && w2 * h2 / (w1 * h1 + 1e-16) > 0.1 && ar < 100)
        kept.push_back({b.cls, static_cast<float>(lo_x), static_cast<float>(lo_y),
                        static_cast<float>(hi_x), static_cast<float>(hi_y), -1.f, b.crowd});
    }
    buf.boxes = std::move(kept);
    r.boxes = buf.boxes.data();
    r.num_boxes = static_cast<int64_t>(buf.boxes.size());
  }
  return r;
}

// OpenCV's 8-bit RGB <-> HSV (H in [0, 180), S and V in [0, 255]) in float, rounded.
void rgb_to_hsv8(const uint8_t* p, uint8_t* hsv) {
  const int r = p[0], g = p[1], b = p[2];
  const int v = std::max({r, g, b}), mn = std::min({r, g, b}), d = v - mn;
  double h = 0;
  if (d > 0) {
    if (v == r)
      h = 60.0 * (g - b) / d;
    else if (v == g)
      h = 120.0 + 60.0 * (b - r) / d;
    else
      h = 240.0 + 60.0 * (r - g) / d;
    if (h < 0) h += 360;
  }
  int hh = static_cast<int>(std::lround(h / 2));
  if (hh >= 180) hh -= 180;
  hsv[0] = static_cast<uint8_t>(hh);
  hsv[1] = static_cast<uint8_t>(v == 0 ? 0 : std::lround(255.0 * d / v));
  hsv[2] = static_cast<uint8_t>(v);
}

void hsv8_to_rgb(const uint8_t* hsv, uint8_t* p) {
  const double h = hsv[0] * 2.0 / 60.0, s = hsv[1] / 255.0, v = hsv[2] / 255.0;
  const int sector = static_cast<int>(std::floor(h)) % 6;
  const double f = h - std::floor(h);
  const double a = v * (1 - s), bq = v * (1 - s * f), c = v * (1 - s * (1 - f));
  double rgb[3];
  switch (sector) {
    case 0: rgb[0] = v, rgb[1] = c, rgb[2] = a; break;
    case 1: rgb[0] = bq, rgb[1] = v, rgb[2] = a; break;
    case 2: rgb[0] = a, rgb[1] = v, rgb[2] = c; break;
    case 3: rgb[0] = a, rgb[1] = bq, rgb[2] = v; break;
    case 4: rgb[0] = c, rgb[1] = a, rgb[2] = v; break;
    default: rgb[0] = v, rgb[1] = a, rgb[2] = bq; break;
  }
  for (int k = 0; k < 3; ++k)
    p[k] = static_cast<uint8_t>(std::lround(std::clamp(rgb[k] * 255.0, 0.0, 255.0)));
}

// Ultralytics' RandomHSV on the (h, w, 3) pixels in place: gains r = uniform(-1, 1) x (hgain,
// sgain, vgain); hue -> (x + 180 r0) mod 180, saturation -> clip(x (1 + r1)), value -> clip(x
// (1 + r2)), through 256-entry tables (saturation 0 stays 0).
void random_hsv(uint8_t* px, int64_t n, const RandomHSV& t, Rng& rng) {
  double r[3];
  const double gain[3] = {t.h, t.s, t.v};
  for (int k = 0; k < 3; ++k) r[k] = (2 * rng.uniform() - 1) * gain[k];
  uint8_t lut[3][256];
  for (int x = 0; x < 256; ++x) {
    double hue = std::fmod(x + r[0] * 180, 180.0);
    if (hue < 0) hue += 180;
    lut[0][x] = static_cast<uint8_t>(hue);  // numpy's astype(uint8) truncates
    lut[1][x] = static_cast<uint8_t>(std::clamp(x * (r[1] + 1), 0.0, 255.0));
    lut[2][x] = static_cast<uint8_t>(std::clamp(x * (r[2] + 1), 0.0, 255.0));
  }
  lut[1][0] = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t hsv[3];
    rgb_to_hsv8(px + 3 * i, hsv);
    for (int k = 0; k < 3; ++k) hsv[k] = lut[k][hsv[k]];
    hsv8_to_rgb(hsv, px + 3 * i);
  }
}

}  // namespace

namespace detail {
void resize_bilinear(const Example& ex, int64_t height, int64_t width, uint8_t* dst) {
  resize_bilinear_into(ex, whole(ex), height, width, dst, width, 0, 0);
}
}  // namespace detail

std::vector<uint8_t> resize_nearest(const uint8_t* src, int64_t height, int64_t width,
                                    int64_t out_height, int64_t out_width) {
  HPCNET_REQUIRE(height > 0 && width > 0 && out_height > 0 && out_width > 0,
                 "resize_nearest: sizes must be positive");
  std::vector<uint8_t> out(static_cast<size_t>(out_height * out_width));
  resize_nearest_into(src, width, Window{0, 0, height, width}, out_height, out_width, out.data(), out_width, 0, 0);
  return out;
}

LetterboxGeometry letterbox_geometry(int64_t height, int64_t width, int64_t size,
                                     int64_t stride) {
  HPCNET_REQUIRE(height > 0 && width > 0 && size > 0 && stride >= 0,
                 "letterbox: sizes must be positive");
  LetterboxGeometry g;
  g.scale = std::min(static_cast<double>(size) / height, static_cast<double>(size) / width);
  // Python's round() (half to even), as Ultralytics computes the new shape and the padding.
  g.new_height = static_cast<int64_t>(std::nearbyint(height * g.scale));
  g.new_width = static_cast<int64_t>(std::nearbyint(width * g.scale));
  // The padding of each axis: up to the square, or (auto) to the next multiple of stride.
  const int64_t pad_h = stride > 0 ? (size - g.new_height) % stride : size - g.new_height;
  const int64_t pad_w = stride > 0 ? (size - g.new_width) % stride : size - g.new_width;
  g.top = static_cast<int64_t>(std::nearbyint(pad_h / 2.0 - 0.1));
  g.left = static_cast<int64_t>(std::nearbyint(pad_w / 2.0 - 0.1));
  g.out_height = g.new_height + pad_h;
  g.out_width = g.new_width + pad_w;
  return g;
}

namespace {

// Where a transform stands in a Compose's pipeline, and what came before it.
struct Place {
  const std::vector<Transform>& transforms;
  size_t index = 0;
  int to_tensor = 0, normalize = 0, cutout = 0;  // seen so far
  bool first() const { return index == 0; }
};

// Each transform's arguments and place in the pipeline, checked (InputError saying what is wrong).
void check_transform(const Resize& r, Place& at) {
  HPCNET_REQUIRE(at.first(), "transforms: Resize must come first");
  HPCNET_REQUIRE(r.height > 0 && r.width > 0, "transforms: Resize needs a positive size, got " +
                                                  std::to_string(r.height) + "x" +
                                                  std::to_string(r.width));
}
void check_transform(const ResizeShorter& r, Place& at) {
  HPCNET_REQUIRE(at.first(), "transforms: Resize(size) must come first");
  HPCNET_REQUIRE(r.size > 0, "transforms: Resize needs a positive size");
}
void check_transform(const RandomResizedCrop& r, Place& at) {
  HPCNET_REQUIRE(at.first(), "transforms: RandomResizedCrop must come first");
  HPCNET_REQUIRE(r.size > 0 && r.scale_min > 0 && r.scale_min <= r.scale_max &&
                     r.scale_max <= 1 && r.ratio_min > 0 && r.ratio_min <= r.ratio_max,
                 "transforms: RandomResizedCrop needs size > 0, 0 < scale_min <= "
                 "scale_max <= 1 and 0 < ratio_min <= ratio_max");
}
void check_transform(const CenterCrop& c, Place& at) {
  HPCNET_REQUIRE(at.normalize == 0 && at.cutout == 0,
                 "transforms: CenterCrop must come before Normalize and Cutout");
  HPCNET_REQUIRE(c.size > 0, "transforms: CenterCrop needs size > 0");
}
void check_transform(const Letterbox& l, Place& at) {
  HPCNET_REQUIRE(at.first(), "transforms: Letterbox must come first");
  HPCNET_REQUIRE(l.size > 0, "transforms: Letterbox needs a positive size");
  HPCNET_REQUIRE(l.stride >= 0, "transforms: Letterbox needs a stride of 0 (square) or more");
}
void check_transform(const Mosaic& m, Place& at) {
  HPCNET_REQUIRE(at.first(), "transforms: Mosaic must come first");
  HPCNET_REQUIRE(m.size > 0 && m.p >= 0 && m.p <= 1,
                 "transforms: Mosaic needs size > 0 and p in [0, 1]");
  const auto* next =
      at.transforms.size() > 1 ? std::get_if<RandomAffine>(&at.transforms[1]) : nullptr;
  HPCNET_REQUIRE(next && next->size == m.size,
                 "transforms: Mosaic must be followed by a RandomAffine of its size");
}
void check_transform(const RandomAffine& r, Place& at) {
  const bool after_mosaic =
      at.index == 1 && std::holds_alternative<Mosaic>(at.transforms.front());
  HPCNET_REQUIRE(at.first() || after_mosaic,
                 "transforms: RandomAffine must come first (or after Mosaic)");
  HPCNET_REQUIRE(r.size > 0 && r.scale >= 0 && r.scale < 1 && r.translate >= 0 &&
                     r.translate <= 0.5 && r.degrees >= 0 && r.shear >= 0 && r.shear < 90,
                 "transforms: RandomAffine needs size > 0, scale in [0, 1), translate "
                 "in [0, 0.5], degrees >= 0 and shear in [0, 90)");
}
void check_transform(const RandomHSV& h, Place& at) {
  HPCNET_REQUIRE(!at.first() && at.to_tensor == 0,
                 "transforms: RandomHSV comes after the first transform and before "
                 "ToTensor");
  HPCNET_REQUIRE(h.h >= 0 && h.h <= 1 && h.s >= 0 && h.s <= 1 && h.v >= 0 && h.v <= 1,
                 "transforms: RandomHSV gains must be in [0, 1]");
}
void check_transform(const RandomScale& r, Place& at) {
  HPCNET_REQUIRE(at.first(), "transforms: RandomScale must come first");
  HPCNET_REQUIRE(r.size > 0 && r.scale_min > 0 && r.scale_max >= r.scale_min && r.scale_max <= 8,
                 "transforms: RandomScale needs size > 0 and 0 < scale_min <= "
                 "scale_max <= 8, got " +
                     std::to_string(r.size) + ", " + fmt_float(static_cast<float>(r.scale_min)) +
                     ", " + fmt_float(static_cast<float>(r.scale_max)));
}
void check_transform(const ToTensor&, Place& at) {
  HPCNET_REQUIRE(at.to_tensor == 0, "transforms: ToTensor appears twice");
  at.to_tensor++;
}
void check_transform(const Normalize& n, Place& at) {
  HPCNET_REQUIRE(at.to_tensor == 1, "transforms: Normalize must come after ToTensor");
  HPCNET_REQUIRE(at.normalize == 0, "transforms: Normalize appears twice");
  for (float s : n.std)
    HPCNET_REQUIRE(s > 0.f, "transforms: Normalize std must be > 0, got " + fmt_float(s));
  at.normalize++;
}
void check_transform(const Cutout& c, Place& at) {
  HPCNET_REQUIRE(at.to_tensor == 1, "transforms: Cutout must come after ToTensor");
  HPCNET_REQUIRE(c.size > 0, "transforms: Cutout needs size > 0");
  at.cutout++;
}
void check_transform(const RandomCrop& c, Place& at) {
  HPCNET_REQUIRE(at.cutout == 0, "transforms: RandomCrop must come before Cutout");
  HPCNET_REQUIRE(at.normalize == 0, "transforms: RandomCrop must come before Normalize");
  HPCNET_REQUIRE(c.size > 0 && c.padding >= 0,
                 "transforms: RandomCrop needs size > 0 and padding >= 0, got " +
                     std::to_string(c.size) + ", " + std::to_string(c.padding));
}
void check_transform(const RandomHorizontalFlip& f, Place& at) {
  HPCNET_REQUIRE(at.normalize == 0, "transforms: RandomHorizontalFlip must come before Normalize");
  HPCNET_REQUIRE(f.p >= 0.0 && f.p <= 1.0, "transforms: RandomHorizontalFlip p must be in [0, 1]");
}

}  // namespace

Compose::Compose() : Compose(std::vector<Transform>{ToTensor{}}) {}

Compose::Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {
  Place at{transforms_};
  for (at.index = 0; at.index < transforms_.size(); ++at.index)
    std::visit([&](const auto& t) { check_transform(t, at); }, transforms_[at.index]);
  HPCNET_REQUIRE(at.to_tensor == 1,
                 "transforms: the pipeline needs a ToTensor (batches hold float tensors)");
  const Normalize* norm = nullptr;
  for (const Transform& t : transforms_)
    if (const auto* n = std::get_if<Normalize>(&t)) norm = n;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v) / 255.0f;
      if (norm) x = (x - norm->mean[c]) / norm->std[c];
      lut_[c][v] = x;
    }
  }
}

std::array<int64_t, 3> Compose::output_shape(int64_t height, int64_t width) const {
  for (const Transform& t : transforms_) {
    if (const auto* r = std::get_if<Resize>(&t)) {
      height = r->height;
      width = r->width;
    } else if (const auto* rsh = std::get_if<ResizeShorter>(&t)) {
      const std::array<int64_t, 2> hw = shorter_side_to(rsh->size, height, width);
      height = hw[0];
      width = hw[1];
    } else if (const auto* rrc = std::get_if<RandomResizedCrop>(&t)) {
      height = width = rrc->size;
    } else if (const auto* cc = std::get_if<CenterCrop>(&t)) {
      height = width = cc->size;
    } else if (const auto* l = std::get_if<Letterbox>(&t)) {
      const LetterboxGeometry g = letterbox_geometry(height, width, l->size, l->stride);
      height = g.out_height;
      width = g.out_width;
    } else if (const auto* rs = std::get_if<RandomScale>(&t)) {
      height = width = rs->size;
    } else if (const auto* ra = std::get_if<RandomAffine>(&t)) {
      height = width = ra->size;
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

std::array<int64_t, 2> Compose::leading_resize() const {
  if (!transforms_.empty())
    if (const auto* r = std::get_if<Resize>(&transforms_.front())) return {r->height, r->width};
  return {0, 0};
}

Normalize Compose::normalization() const {
  for (const Transform& t : transforms_)
    if (const auto* n = std::get_if<Normalize>(&t)) return *n;
  return Normalize{};
}

bool Compose::needs_dataset() const {
  return !transforms_.empty() && std::holds_alternative<Mosaic>(transforms_.front());
}

void Compose::apply(const Example& ex, uint64_t sample_seed, float* out,
                    std::vector<Box>* boxes_out, int64_t* mask_out) const {
  HPCNET_REQUIRE(!needs_dataset(), "transforms: Mosaic needs the dataset (apply(dataset, ...))");
  apply_impl(ex, sample_seed, out, boxes_out, mask_out, false);
}

void Compose::apply(const Dataset& ds, int64_t index, const Example& first, uint64_t sample_seed,
                    float* out, std::vector<Box>* boxes_out, int64_t* mask_out) const {
  const auto* mosaic = transforms_.empty() ? nullptr : std::get_if<Mosaic>(&transforms_.front());
  if (!mosaic) return apply_impl(first, sample_seed, out, boxes_out, mask_out, false);
  Rng rng(sample_seed, 3);  // its own stream: the later transforms' draws are unchanged
  if (rng.uniform() >= mosaic->p) return apply_impl(first, sample_seed, out, boxes_out, mask_out, false);
  HPCNET_REQUIRE(!first.mask, "transforms: Mosaic takes no masks");
  const int64_t s = mosaic->size, canvas_side = 2 * s;  // s: Ultralytics' name (imgsz)
  thread_local Resampled canvas, piece;
  canvas.pixels.assign(static_cast<size_t>(canvas_side * canvas_side * 3), 114);
  canvas.boxes.clear();
  // yc first, then xc, each int(uniform(s / 2, 3 s / 2)).
  const int64_t yc = static_cast<int64_t>(s / 2.0 + s * rng.uniform());
  const int64_t xc = static_cast<int64_t>(s / 2.0 + s * rng.uniform());
  for (int k = 0; k < 4; ++k) {
    const int64_t idx = k == 0 ? index
                               : static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ds.size())));
    thread_local ExampleBuffer other;  // each piece is copied into the canvas before the next
    Example e = k == 0 ? first : ds.get(idx, other);
    const int64_t long_side = std::max(e.height, e.width);
    if (long_side != s) {  // long side to s, as RandomAffine's load
      const double r = static_cast<double>(s) / static_cast<double>(long_side);
      const int64_t h = std::min<int64_t>(static_cast<int64_t>(std::ceil(e.height * r)), s);
      const int64_t w = std::min<int64_t>(static_cast<int64_t>(std::ceil(e.width * r)), s);
      e = resample(e, h, w, h, w, 0, 0, 0, piece);
    }
    const int64_t h = e.height, w = e.width;
    int64_t x1a, y1a, x2a, y2a, x1b, y1b, x2b, y2b;  // canvas and piece windows
    if (k == 0) {
      x1a = std::max<int64_t>(xc - w, 0), y1a = std::max<int64_t>(yc - h, 0), x2a = xc, y2a = yc;
      x1b = w - (x2a - x1a), y1b = h - (y2a - y1a), x2b = w, y2b = h;
    } else if (k == 1) {
      x1a = xc, y1a = std::max<int64_t>(yc - h, 0), x2a = std::min(xc + w, canvas_side), y2a = yc;
      x1b = 0, y1b = h - (y2a - y1a), x2b = std::min(w, x2a - x1a), y2b = h;
    } else if (k == 2) {
      x1a = std::max<int64_t>(xc - w, 0), y1a = yc, x2a = xc, y2a = std::min(canvas_side, yc + h);
      x1b = w - (x2a - x1a), y1b = 0, x2b = w, y2b = std::min(y2a - y1a, h);
    } else {
      x1a = xc, y1a = yc, x2a = std::min(xc + w, canvas_side), y2a = std::min(canvas_side, yc + h);
      x1b = 0, y1b = 0, x2b = std::min(w, x2a - x1a), y2b = std::min(y2a - y1a, h);
    }
    for (int64_t y = 0; y < y2a - y1a; ++y)
      std::copy(e.pixels + ((y1b + y) * w + x1b) * 3, e.pixels + ((y1b + y) * w + x2b) * 3,
                canvas.pixels.data() + ((y1a + y) * canvas_side + x1a) * 3);
    const float padw = static_cast<float>(x1a - x1b), padh = static_cast<float>(y1a - y1b);
    const float lim = static_cast<float>(canvas_side);
    for (int64_t j = 0; j < e.num_boxes; ++j) {
      Box o = e.boxes[j];  // class and crowd as they are; the area is dropped
      o.x1 = std::clamp(o.x1 + padw, 0.f, lim), o.y1 = std::clamp(o.y1 + padh, 0.f, lim);
      o.x2 = std::clamp(o.x2 + padw, 0.f, lim), o.y2 = std::clamp(o.y2 + padh, 0.f, lim);
      o.area = -1;
      if ((o.x2 - o.x1) * (o.y2 - o.y1) > 0) canvas.boxes.push_back(o);
    }
  }
  Example c{canvas.pixels.data(), canvas_side, canvas_side, first.label};
  c.boxes = canvas.boxes.data();
  c.num_boxes = static_cast<int64_t>(canvas.boxes.size());
  apply_impl(c, sample_seed, out, boxes_out, mask_out, true);
}

namespace {

// Ultralytics' load_image (long side to size, the other rounded up), then RandomAffine's warp; a
// Mosaic canvas (2 size) is warped as it is. The warp's draws have their own stream.
Example load_and_warp(const RandomAffine& ra, const Example& ex_in, uint64_t sample_seed,
                      bool from_mosaic, Resampled& buf) {
  Example src = ex_in;
  const int64_t long_side = std::max(ex_in.height, ex_in.width);
  if (long_side != ra.size && !from_mosaic) {
    const double r = static_cast<double>(ra.size) / static_cast<double>(long_side);
    const int64_t h = std::min<int64_t>(
        static_cast<int64_t>(std::ceil(static_cast<double>(ex_in.height) * r)), ra.size);
    const int64_t w = std::min<int64_t>(
        static_cast<int64_t>(std::ceil(static_cast<double>(ex_in.width) * r)), ra.size);
    src = resample(ex_in, h, w, h, w, 0, 0, 0, buf);
  }
  Rng affine_rng(sample_seed, 1);
  const Affine affine = draw_affine(ra, src.height, src.width, affine_rng);
  thread_local Resampled warped;
  return warp_affine(src, affine, ra.size, ra.fill, warped);
}

// The pipeline's leading geometry (Resize, Resize(size), RandomResizedCrop, Letterbox,
// RandomScale, or RandomAffine first or after Mosaic) applied to ex_in; ex_in itself when there is
// none or it changes nothing. Random draws use their own stream (seed, 1), so the draws of the
// transforms after it are unchanged.
Example resample_leading(const std::vector<Transform>& transforms, const Example& ex_in,
                         uint64_t sample_seed, bool from_mosaic) {
  thread_local Resampled buf;
  const Transform& front = transforms.front();
  const Transform& head = std::holds_alternative<Mosaic>(front) ? transforms[1] : front;
  if (const auto* r = std::get_if<Resize>(&front)) {
    if (r->height != ex_in.height || r->width != ex_in.width)
      return resample(ex_in, r->height, r->width, r->height, r->width, 0, 0, 0, buf);
  } else if (const auto* rsh = std::get_if<ResizeShorter>(&front)) {
    const std::array<int64_t, 2> hw = shorter_side_to(rsh->size, ex_in.height, ex_in.width);
    if (hw[0] != ex_in.height || hw[1] != ex_in.width)
      return resample(ex_in, hw[0], hw[1], hw[0], hw[1], 0, 0, 0, buf);
  } else if (const auto* rrc = std::get_if<RandomResizedCrop>(&front)) {
    Rng crop_rng(sample_seed, 1);
    const Window w = random_resized_crop_window(*rrc, ex_in.height, ex_in.width, crop_rng);
    return resample(ex_in, w, rrc->size, rrc->size, rrc->size, rrc->size, 0, 0, 0, buf);
  } else if (const auto* l = std::get_if<Letterbox>(&front)) {
    const LetterboxGeometry g = letterbox_geometry(ex_in.height, ex_in.width, l->size, l->stride);
    return resample(ex_in, g.new_height, g.new_width, g.out_height, g.out_width, g.top, g.left,
                    l->fill, buf);
  } else if (const auto* rs = std::get_if<RandomScale>(&front)) {
    Rng scale_rng(sample_seed, 1);
    const double f = rs->scale_min + (rs->scale_max - rs->scale_min) * scale_rng.uniform();
    const int64_t side = std::max<int64_t>(1, std::llround(static_cast<double>(rs->size) * f));
    if (side != ex_in.height || side != ex_in.width)
      return resample(ex_in, side, side, side, side, 0, 0, 0, buf);
  } else if (const auto* ra = std::get_if<RandomAffine>(&head)) {
    return load_and_warp(*ra, ex_in, sample_seed, from_mosaic, buf);
  }
  return ex_in;
}

// RandomHSV on ex's pixels, made this thread's copy first when they are still ex_in's (the
// dataset's). Its draws have their own stream (seed, 2).
void apply_random_hsv(const std::vector<Transform>& transforms, const Example& ex_in,
                      uint64_t sample_seed, Example& ex) {
  for (const Transform& t : transforms)
    if (const auto* hsv = std::get_if<RandomHSV>(&t)) {
      thread_local std::vector<uint8_t> own;
      if (ex.pixels == ex_in.pixels) {
        own.assign(ex.pixels, ex.pixels + ex.nbytes());
        ex.pixels = own.data();
      }
      Rng hsv_rng(sample_seed, 2);
      random_hsv(const_cast<uint8_t*>(ex.pixels), ex.height * ex.width, *hsv, hsv_rng);
    }
}

// Cutout's holes in the output (at most 4), rows [y0, y1) and columns [x0, x1).
struct Holes {
  struct Hole {
    int64_t y0, y1, x0, x1;
  };
  std::array<Hole, 4> at{};
  size_t count = 0;
};

// The pipeline's crops (RandomScale's window, RandomCrop, CenterCrop), flips and Cutouts, in its
// order, as the index map of each axis (output index -> source pixel) and the holes; draws from
// rng (seed, 0).
void draw_index_maps(const std::vector<Transform>& transforms, Rng& rng, Axis& ay, Axis& ax,
                     Holes& holes) {
  for (const Transform& t : transforms) {
    if (const auto* k = std::get_if<Cutout>(&t)) {  // sizes are final here (crops come first)
      const int64_t cy = static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ay.size)));
      const int64_t cx = static_cast<int64_t>(rng.randint(static_cast<uint64_t>(ax.size)));
      HPCNET_REQUIRE(holes.count < holes.at.size(), "transforms: at most 4 Cutout");
      holes.at[holes.count++] = {std::max<int64_t>(cy - k->size / 2, 0),
                                 std::min<int64_t>(cy - k->size / 2 + k->size, ay.size),
                                 std::max<int64_t>(cx - k->size / 2, 0),
                                 std::min<int64_t>(cx - k->size / 2 + k->size, ax.size)};
    }
    if (const auto* rs = std::get_if<RandomScale>(&t)) {
      // The window: padded equally to at least size on each axis, then cut at random.
      const int64_t pad_y = std::max<int64_t>(0, (rs->size - ay.size + 1) / 2);
      const int64_t pad_x = std::max<int64_t>(0, (rs->size - ax.size + 1) / 2);
      const int64_t top = static_cast<int64_t>(
          rng.randint(static_cast<uint64_t>(ay.size + 2 * pad_y - rs->size + 1)));
      const int64_t left = static_cast<int64_t>(
          rng.randint(static_cast<uint64_t>(ax.size + 2 * pad_x - rs->size + 1)));
      ay.crop(top - pad_y, rs->size);
      ax.crop(left - pad_x, rs->size);
    } else if (const auto* c = std::get_if<RandomCrop>(&t)) {
      const int64_t padded_h = ay.size + 2 * c->padding, padded_w = ax.size + 2 * c->padding;
      HPCNET_REQUIRE(c->size <= padded_h && c->size <= padded_w,
                     "transforms: RandomCrop(" + std::to_string(c->size) +
                         ", padding=" + std::to_string(c->padding) + ") does not fit a " +
                         std::to_string(ay.size) + "x" + std::to_string(ax.size) + " image");
      const int64_t top =
          static_cast<int64_t>(rng.randint(static_cast<uint64_t>(padded_h - c->size + 1)));
      const int64_t left =
          static_cast<int64_t>(rng.randint(static_cast<uint64_t>(padded_w - c->size + 1)));
      ay.crop(top - c->padding, c->size);
      ax.crop(left - c->padding, c->size);
    } else if (const auto* cc = std::get_if<CenterCrop>(&t)) {
      // Python's round() (half to even), as torchvision's center_crop.
      const int64_t top = static_cast<int64_t>(std::nearbyint((ay.size - cc->size) / 2.0));
      const int64_t left = static_cast<int64_t>(std::nearbyint((ax.size - cc->size) / 2.0));
      ay.crop(top, cc->size);
      ax.crop(left, cc->size);
    } else if (const auto* f = std::get_if<RandomHorizontalFlip>(&t)) {
      if (rng.uniform() < f->p) ax.flip();
    }
  }
}

// ex's pixels through the index maps and each channel's table (ToTensor, Normalize) into out
// (3, ay.size, ax.size); padding gets the table's value of 0, Cutout's holes 0.
void write_pixels(const Example& ex, const Axis& ay, const Axis& ax,
                  const std::array<std::array<float, 256>, 3>& lut, const Holes& holes,
                  float* out) {
  const int64_t height = ay.size, width = ax.size;
  // Output columns whose source is image (not padding) form one interval [x0, x1).
  int64_t x0 = width, x1 = 0;
  for (int64_t x = 0; x < width; ++x) {
    const int64_t s = ax.offset + ax.sign * x;
    if (s >= ax.lo && s < ax.hi) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x + 1);
    }
  }
  const int64_t stride = ex.width * 3;
  for (int c = 0; c < 3; ++c) {
    const float* table = lut[c].data();
    const float pad = table[0];
    float* plane = out + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      float* row_out = plane + y * width;
      const int64_t sy = ay.offset + ay.sign * y;
      if (sy < ay.lo || sy >= ay.hi || x0 >= x1) {
        for (int64_t x = 0; x < width; ++x) row_out[x] = pad;
        continue;
      }
      const uint8_t* row_in = ex.pixels + sy * stride + c;
      for (int64_t x = 0; x < x0; ++x) row_out[x] = pad;
      if (ax.sign > 0) {
        const uint8_t* p = row_in + (ax.offset + x0) * 3;
        for (int64_t x = x0; x < x1; ++x, p += 3) row_out[x] = table[*p];
      } else {
        const uint8_t* p = row_in + (ax.offset - x0) * 3;
        for (int64_t x = x0; x < x1; ++x, p -= 3) row_out[x] = table[*p];
      }
      for (int64_t x = x1; x < width; ++x) row_out[x] = pad;
    }
    for (size_t h = 0; h < holes.count; ++h)
      for (int64_t y = holes.at[h].y0; y < holes.at[h].y1; ++y)
        for (int64_t x = holes.at[h].x0; x < holes.at[h].x1; ++x) plane[y * width + x] = 0.f;
  }
}

// ex's mask through the index maps into mask_out (ay.size, ax.size): nearest by construction,
// kIgnoreIndex in the padding.
void write_mask(const Example& ex, const Axis& ay, const Axis& ax, int64_t* mask_out) {
  const int64_t width = ax.size;
  for (int64_t y = 0; y < ay.size; ++y) {
    const int64_t sy = ay.offset + ay.sign * y;
    const bool row_in = sy >= ay.lo && sy < ay.hi;
    for (int64_t x = 0; x < width; ++x) {
      const int64_t sx = ax.offset + ax.sign * x;
      mask_out[y * width + x] = row_in && sx >= ax.lo && sx < ax.hi
                                    ? static_cast<int64_t>(ex.mask[sy * ex.width + sx])
                                    : kIgnoreIndex;
    }
  }
}

// ex's boxes through the index maps into *boxes_out (class, area and crowd as they are).
void map_boxes(const Example& ex, const Axis& ay, const Axis& ax, std::vector<Box>* boxes_out) {
  boxes_out->clear();
  for (int64_t k = 0; k < ex.num_boxes; ++k) {
    Box o = ex.boxes[k];
    bool clipped = false;
    const float xa = ax.map_edge(o.x1, &clipped), xb = ax.map_edge(o.x2, &clipped);
    const float ya = ay.map_edge(o.y1, &clipped), yb = ay.map_edge(o.y2, &clipped);
    o.x1 = std::min(xa, xb), o.y1 = std::min(ya, yb);
    o.x2 = std::max(xa, xb), o.y2 = std::max(ya, yb);
    // Cut to under a pixel: gone from the picture. A box that small (or of zero size) in the
    // image itself is kept, for the metric; training leaves it out (detect::targets_of).
    if (!clipped || (o.x2 - o.x1 >= 1.f && o.y2 - o.y1 >= 1.f)) boxes_out->push_back(o);
  }
}

}  // namespace

void Compose::apply_impl(const Example& ex_in, uint64_t sample_seed, float* out,
                         std::vector<Box>* boxes_out, int64_t* mask_out, bool from_mosaic) const {
  Example ex = ex_in;
  if (!transforms_.empty()) {
    ex = resample_leading(transforms_, ex_in, sample_seed, from_mosaic);
    apply_random_hsv(transforms_, ex_in, sample_seed, ex);
  }
  Rng rng(sample_seed, 0);
  Axis ay{ex.height, 0, 1, 0, ex.height};
  Axis ax{ex.width, 0, 1, 0, ex.width};
  Holes holes;
  draw_index_maps(transforms_, rng, ay, ax, holes);
  write_pixels(ex, ay, ax, lut_, holes, out);
  if (mask_out && ex.mask) write_mask(ex, ay, ax, mask_out);
  if (boxes_out) map_boxes(ex, ay, ax, boxes_out);
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
              s += "Letterbox(" + std::to_string(l.size) + ", fill=" + std::to_string(l.fill) +
                   (l.stride > 0 ? ", auto, stride=" + std::to_string(l.stride) : "") + ")";
            },
            [&](const ResizeShorter& r) { s += "Resize(" + std::to_string(r.size) + ")"; },
            [&](const RandomResizedCrop& r) {
              char b[128];
              std::snprintf(b, sizeof b, "RandomResizedCrop(%lld, scale=(%g, %g), ratio=(%g, %g))",
                            static_cast<long long>(r.size), r.scale_min, r.scale_max, r.ratio_min,
                            r.ratio_max);
              s += b;
            },
            [&](const CenterCrop& c) { s += "CenterCrop(" + std::to_string(c.size) + ")"; },
            [&](const Mosaic& m) {
              char b[64];
              std::snprintf(b, sizeof b, "Mosaic(%lld, p=%g)", static_cast<long long>(m.size), m.p);
              s += b;
            },
            [&](const RandomAffine& r) {
              char b[128];
              std::snprintf(b, sizeof b,
                            "RandomAffine(%lld, degrees=%g, translate=%g, scale=%g, shear=%g)",
                            static_cast<long long>(r.size), r.degrees, r.translate, r.scale,
                            r.shear);
              s += b;
            },
            [&](const RandomHSV& h) {
              char b[96];
              std::snprintf(b, sizeof b, "RandomHSV(h=%g, s=%g, v=%g)", h.h, h.s, h.v);
              s += b;
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
