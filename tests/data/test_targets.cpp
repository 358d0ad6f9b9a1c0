// Tests of targets in the data pipeline: every transform moves an image's boxes and mask with its
// pixels (flip, crop with padding, two crops, Resize, Letterbox), the pixels are the same with or
// without a target, InMemoryDataset refuses bad targets, and the DataLoader batches them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/rng.h"
#include "test_util.h"

// Boxes in GoogleTest's messages as {cls, x1, y1, x2, y2} rather than bytes.
namespace hpcnet::data {
inline void PrintTo(const Box& b, std::ostream* os) {
  *os << "{" << b.cls << ", " << b.x1 << ", " << b.y1 << ", " << b.x2 << ", " << b.y2
      << (b.crowd ? ", crowd}" : "}");
}
}  // namespace hpcnet::data

using namespace hpcnet;
using namespace hpcnet::data;
using hpcnet::test_util::input_error;

namespace {

using Bytes = std::vector<uint8_t>;

// An h x w image whose pixel (y, x) is (y + 1, x + 1, 200): through a bare ToTensor the output
// tells which source pixel each output pixel shows, and 0 in channel 0 marks padding (RandomCrop
// pads with 0). Needs h, w < 255.
Bytes tg_coord_image(int h, int w) {
  Bytes p(static_cast<size_t>(h * w * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      p[(y * w + x) * 3 + 0] = static_cast<uint8_t>(y + 1);
      p[(y * w + x) * 3 + 1] = static_cast<uint8_t>(x + 1);
      p[(y * w + x) * 3 + 2] = 200;
    }
  return p;
}

Bytes tg_noise(int n, uint64_t seed) {
  Rng rng(seed, 3);
  Bytes p(static_cast<size_t>(n));
  for (auto& v : p) v = static_cast<uint8_t>(rng.randint(256));
  return p;
}

// A transform's output for one example: pixels, boxes and mask (when ex has one).
struct TgOut {
  int64_t h = 0, w = 0;
  std::vector<float> px;
  std::vector<Box> boxes;
  std::vector<int64_t> mask;
  // The uint8 value behind output pixel (c, y, x) of a bare ToTensor pipeline.
  int value(int c, int64_t y, int64_t x) const {
    return static_cast<int>(std::lround(px[static_cast<size_t>((c * h + y) * w + x)] * 255.f));
  }
  int64_t m(int64_t y, int64_t x) const { return mask[static_cast<size_t>(y * w + x)]; }
};

TgOut tg_apply(const Compose& t, const Example& ex, uint64_t seed) {
  TgOut o;
  const auto s = t.output_shape(ex.height, ex.width);
  o.h = s[1];
  o.w = s[2];
  o.px.assign(static_cast<size_t>(3 * o.h * o.w), std::numeric_limits<float>::quiet_NaN());
  o.boxes = {Box{9, 9, 9, 9, 9}};  // apply() replaces the contents
  if (ex.mask) o.mask.assign(static_cast<size_t>(o.h * o.w), -1);
  t.apply(ex, seed, o.px.data(), &o.boxes, ex.mask ? o.mask.data() : nullptr);
  return o;
}

Example tg_example(const Bytes& px, int h, int w, const std::vector<Box>* boxes = nullptr,
                   const Bytes* mask = nullptr) {
  Example ex{px.data(), h, w, 0};
  if (boxes) {
    ex.boxes = boxes->data();
    ex.num_boxes = static_cast<int64_t>(boxes->size());
  }
  if (mask) ex.mask = mask->data();
  return ex;
}

std::string tg_str(const std::vector<Box>& bs) {
  std::string s;
  for (const Box& b : bs)
    s += "{" + std::to_string(b.cls) + ", " + std::to_string(b.x1) + ", " + std::to_string(b.y1) +
         ", " + std::to_string(b.x2) + ", " + std::to_string(b.y2) + "} ";
  return s;
}

void tg_expect_boxes_near(const std::vector<Box>& got, const std::vector<Box>& want, float tol) {
  ASSERT_EQ(got.size(), want.size()) << "got " << tg_str(got) << "want " << tg_str(want);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].cls, want[k].cls) << k;
    EXPECT_NEAR(got[k].x1, want[k].x1, tol) << k;
    EXPECT_NEAR(got[k].y1, want[k].y1, tol) << k;
    EXPECT_NEAR(got[k].x2, want[k].x2, tol) << k;
    EXPECT_NEAR(got[k].y2, want[k].y2, tol) << k;
  }
}

const Normalize kTgNorm{{0.5f, 0.4f, 0.3f}, {0.25f, 0.5f, 0.2f}};

}  // namespace

// ---- boxes -----------------------------------------------------------------------------------

// A mirrored image's box is the mirrored box: x1' = W - x2, x2' = W - x1, y unchanged; and the
// pixels say the image was mirrored (so the boxes and the pixels agree).
TEST(TargetsBoxes, HorizontalFlipMirrorsTheBox) {
  const int H = 6, W = 10;
  const Bytes px = tg_coord_image(H, W);
  const std::vector<Box> boxes = {{1, 1, 2, 4, 5}, {0, 0, 0, 10, 6}, {2, 7.5f, 0.5f, 10, 3}};
  const Example ex = tg_example(px, H, W, &boxes);
  const TgOut o = tg_apply(Compose({RandomHorizontalFlip{1.0}, ToTensor{}}), ex, 5);
  for (int64_t x = 0; x < W; ++x) ASSERT_EQ(o.value(1, 0, x), W - x) << x;  // column W-1-x, +1
  const std::vector<Box> want = {{1, 6, 2, 9, 5}, {0, 0, 0, 10, 6}, {2, 0, 0.5f, 2.5f, 3}};
  EXPECT_EQ(o.boxes, want) << tg_str(o.boxes);
  // p = 0 never flips: the boxes stay.
  EXPECT_EQ(tg_apply(Compose({RandomHorizontalFlip{0.0}, ToTensor{}}), ex, 5).boxes, boxes);
}

// RandomCrop with padding shifts every box by the crop's offset (read back from the pixels),
// clips it to the window and drops what is left under 1 px wide or high.
TEST(TargetsBoxes, RandomCropShiftsClipsAndDropsBoxes) {
  const int H = 8, W = 10, S = 6, P = 3;
  const Bytes px = tg_coord_image(H, W);
  const std::vector<Box> boxes = {
      {0, 1, 1, 9, 7},               // large: always partly in the window
      {1, 0, 0, 2, 2},               // a corner: cut to under a pixel by many windows
      {2, 3.5f, 2.25f, 5.75f, 4.5f}  // fractional corners
  };
  const Example ex = tg_example(px, H, W, &boxes);
  const Compose crop({RandomCrop{S, P}, ToTensor{}});
  int kept_corner = 0, dropped_corner = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const TgOut o = tg_apply(crop, ex, seed);
    // The window's offset: output (y, x) shows source (y + dy, x + dx) wherever it is not padding.
    int64_t dy = 1000, dx = 1000;
    for (int64_t y = 0; y < S && dy == 1000; ++y)
      for (int64_t x = 0; x < S; ++x)
        if (o.value(0, y, x) != 0) {
          dy = o.value(0, y, x) - 1 - y;
          dx = o.value(1, y, x) - 1 - x;
          break;
        }
    ASSERT_NE(dy, 1000) << "a 6x6 window of a 14x16 padded 8x10 image always shows the image";
    for (int64_t y = 0; y < S; ++y)
      for (int64_t x = 0; x < S; ++x) {
        const bool inside = y + dy >= 0 && y + dy < H && x + dx >= 0 && x + dx < W;
        ASSERT_EQ(o.value(0, y, x), inside ? y + dy + 1 : 0) << seed;
        ASSERT_EQ(o.value(1, y, x), inside ? x + dx + 1 : 0) << seed;
      }
    std::vector<Box> want;
    for (const Box& b : boxes) {
      auto cx = [&](float v) { return std::clamp(v - static_cast<float>(dx), 0.f, float(S)); };
      auto cy = [&](float v) { return std::clamp(v - static_cast<float>(dy), 0.f, float(S)); };
      Box m{b.cls, cx(b.x1), cy(b.y1), cx(b.x2), cy(b.y2)};
      const bool keep = m.x2 - m.x1 >= 1 && m.y2 - m.y1 >= 1;
      if (b.cls == 1) (keep ? kept_corner : dropped_corner)++;
      if (keep) want.push_back(m);
    }
    ASSERT_EQ(o.boxes, want) << "seed " << seed << " offset (" << dy << ", " << dx << "): got "
                             << tg_str(o.boxes) << "want " << tg_str(want);
  }
  // Both outcomes were exercised.
  EXPECT_GT(kept_corner, 0);
  EXPECT_GT(dropped_corner, 0);
}

// A crop, then a second crop with padding: the box is clipped to the part of the output that
// shows the image, not to the whole output (the padding of the second crop covers image pixels
// the first one cut away).
TEST(TargetsBoxes, TwoCropsClipToTheVisibleImage) {
  const int H = 8, W = 8;
  const Bytes px = tg_coord_image(H, W);
  const std::vector<Box> boxes = {{0, 0, 0, 8, 8}, {1, 0, 0, 1, 1}};
  const Example ex = tg_example(px, H, W, &boxes);
  // RandomCrop(8, padding=2) of a 4x4 image has one window: the image lies at [2, 6) x [2, 6).
  const Compose twice({RandomCrop{4, 0}, RandomCrop{8, 2}, ToTensor{}});
  for (uint64_t seed = 0; seed < 64; ++seed) {
    const TgOut o = tg_apply(twice, ex, seed);
    // The first window's top-left corner, source (t1, l1), is output pixel (2, 2).
    const int t1 = o.value(0, 2, 2) - 1, l1 = o.value(1, 2, 2) - 1;
    ASSERT_EQ(o.value(0, 1, 2), 0);  // padding above
    std::vector<Box> want = {{0, 2, 2, 6, 6}};
    if (t1 == 0 && l1 == 0) want.push_back({1, 2, 2, 3, 3});  // the corner pixel is in the window
    ASSERT_EQ(o.boxes, want) << "seed " << seed << " (" << t1 << ", " << l1 << ") "
                             << tg_str(o.boxes);
  }
}

// Boxes the metric needs ride through every transform: a crowd region keeps its flag (and its
// COCO area where boxes keep theirs), and a box of zero or sub-pixel size in the image itself is
// kept; only a crop that cuts a box to under a pixel drops it. Mosaic and RandomAffine keep the
// flag too (their box_candidates rule drops small boxes, as Ultralytics').
TEST(TargetsBoxes, CrowdFlagAndTinyBoxesRideThroughUnlessCut) {
  const int H = 20, W = 30;
  const Bytes px = tg_coord_image(H, W);
  const std::vector<Box> boxes = {{0, 2, 2, 28, 18, 300.f, true},       // crowd
                                  {1, 10, 5, 10, 15, 0.f},              // zero width
                                  {1, 12.25f, 6, 12.75f, 6.5f, 0.25f},  // half a pixel
                                  {2, 4, 4, 12, 12}};
  const Example ex = tg_example(px, H, W, &boxes);
  for (const Compose& t : {Compose({Letterbox{64}, ToTensor{}}),
                           Compose({Resize{10, 15}, RandomHorizontalFlip{0.5}, ToTensor{}}),
                           Compose({RandomHorizontalFlip{0.5}, ToTensor{}})})
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const TgOut o = tg_apply(t, ex, seed);
      ASSERT_EQ(o.boxes.size(), boxes.size()) << t.str() << ": " << tg_str(o.boxes);
      for (size_t k = 0; k < boxes.size(); ++k) {
        EXPECT_EQ(o.boxes[k].cls, boxes[k].cls) << t.str();
        EXPECT_EQ(o.boxes[k].crowd, boxes[k].crowd) << t.str();
        EXPECT_EQ(o.boxes[k].area, boxes[k].area) << t.str();
      }
      EXPECT_EQ(o.boxes[1].x1, o.boxes[1].x2) << t.str();  // still of zero width
      EXPECT_GT(o.boxes[1].y2 - o.boxes[1].y1, 0.f) << t.str();
    }
  // A crop: a box is kept when the window shows all of it, or at least a pixel each way of it.
  const int S = 10;
  int kept_zero = 0, cut_zero = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const TgOut o = tg_apply(Compose({RandomCrop{S, 0}, ToTensor{}}), ex, seed);
    const int64_t dy = o.value(0, 0, 0) - 1, dx = o.value(1, 0, 0) - 1;  // the window's offset
    std::vector<Box> want;
    for (const Box& b : boxes) {
      auto cx = [&](float v) { return std::clamp(v - static_cast<float>(dx), 0.f, float(S)); };
      auto cy = [&](float v) { return std::clamp(v - static_cast<float>(dy), 0.f, float(S)); };
      Box m = b;
      m.x1 = cx(b.x1), m.y1 = cy(b.y1), m.x2 = cx(b.x2), m.y2 = cy(b.y2);
      const bool whole =
          m.x1 == b.x1 - dx && m.y1 == b.y1 - dy && m.x2 == b.x2 - dx && m.y2 == b.y2 - dy;
      const bool keep = whole || (m.x2 - m.x1 >= 1 && m.y2 - m.y1 >= 1);
      if (&b == &boxes[1]) (keep ? kept_zero : cut_zero)++;
      if (keep) want.push_back(m);
    }
    ASSERT_EQ(o.boxes, want) << "seed " << seed << " offset (" << dy << ", " << dx << "): got "
                             << tg_str(o.boxes) << "want " << tg_str(want);
  }
  EXPECT_GT(kept_zero, 0);
  EXPECT_GT(cut_zero, 0);

  // Mosaic then RandomAffine (through the DataLoader, which hands Mosaic the dataset): every box
  // of class 0 that comes out is a crowd region, every other box is not.
  auto ds = std::make_shared<InMemoryDataset>(std::vector<std::string>{"a", "b", "c"}, "boxes",
                                              TargetKind::kBoxes);
  for (int i = 0; i < 4; ++i) ds->add_boxes(px.data(), H, W, boxes);
  DataLoaderOptions lo;
  lo.batch_size = 4;
  DataLoader loader(ds, Compose({Mosaic{32, 1.0}, RandomAffine{32, 0, 0, 0.2, 0}, ToTensor{}}), lo);
  int crowd_seen = 0, others_seen = 0;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    loader.begin_epoch(epoch);
    Batch b;
    while (loader.next(b))
      for (const auto& list : b.boxes)
        for (const Box& x : list) {
          EXPECT_EQ(x.crowd, x.cls == 0) << tg_str(list);
          (x.crowd ? crowd_seen : others_seen)++;
        }
  }
  EXPECT_GT(crowd_seen, 0);
  EXPECT_GT(others_seen, 0);
}

// Resize scales boxes by (new / old) per axis; a Resize to the image's own size is a no-op for
// pixels (bit for bit), boxes and mask.
TEST(TargetsBoxes, ResizeScalesBoxesAndTheSameSizeIsANoOp) {
  const Bytes px = tg_noise(4 * 8 * 3, 1);
  const std::vector<Box> boxes = {{3, 2, 1, 6, 3}};
  const Example ex = tg_example(px, 4, 8, &boxes);
  // 4x8 -> 8x4: x halves, y doubles.
  const TgOut r = tg_apply(Compose({Resize{8, 4}, ToTensor{}}), ex, 0);
  EXPECT_EQ(r.boxes, (std::vector<Box>{{3, 1, 2, 3, 6}})) << tg_str(r.boxes);

  const int H = 6, W = 5;
  const Bytes px2 = tg_noise(H * W * 3, 2);
  const Bytes mask = tg_noise(H * W, 3);  // any values: apply() does not validate
  const std::vector<Box> b2 = {{0, 0.5f, 1, 4, 5.5f}, {1, 1, 1, 5, 6}};
  const Example ex2 = tg_example(px2, H, W, &b2, &mask);
  const Compose same({Resize{H, W}, RandomHorizontalFlip{0.5}, ToTensor{}, kTgNorm});
  const Compose none({RandomHorizontalFlip{0.5}, ToTensor{}, kTgNorm});
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const TgOut a = tg_apply(same, ex2, seed), b = tg_apply(none, ex2, seed);
    ASSERT_EQ(a.px.size(), b.px.size());
    EXPECT_EQ(std::memcmp(a.px.data(), b.px.data(), a.px.size() * sizeof(float)), 0) << seed;
    EXPECT_EQ(a.boxes, b.boxes) << seed;
    EXPECT_EQ(a.mask, b.mask) << seed;
  }
}

// ---- masks -----------------------------------------------------------------------------------

// Masks are resized nearest (NEAREST_EXACT: source floor((y + 0.5) * H / h)): doubling and
// halving a mask of 2x2 blocks keeps its class set, and each value is the source pixel at the
// nearest centre (checked against indices worked out by hand for 4x6 -> 3x5).
TEST(TargetsMasks, ResizeIsNearestAndKeepsTheClassSet) {
  const int H = 4, W = 6;
  const int blocks[2][3] = {{0, 1, 2}, {255, 1, 0}};
  Bytes mask(H * W);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) mask[y * W + x] = static_cast<uint8_t>(blocks[y / 2][x / 2]);
  const Bytes px = tg_noise(H * W * 3, 4);
  const Example ex = tg_example(px, H, W, nullptr, &mask);
  const std::set<int64_t> classes = {0, 1, 2, 255};

  const TgOut up = tg_apply(Compose({Resize{8, 12}, ToTensor{}}), ex, 0);
  std::set<int64_t> seen;
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 12; ++x) {
      ASSERT_EQ(up.m(y, x), blocks[y / 4][x / 4]) << y << "," << x;
      seen.insert(up.m(y, x));
    }
  EXPECT_EQ(seen, classes);

  const TgOut down = tg_apply(Compose({Resize{2, 3}, ToTensor{}}), ex, 0);
  seen.clear();
  for (int64_t y = 0; y < 2; ++y)
    for (int64_t x = 0; x < 3; ++x) {
      ASSERT_EQ(down.m(y, x), blocks[y][x]) << y << "," << x;
      seen.insert(down.m(y, x));
    }
  EXPECT_EQ(seen, classes);

  // 4x6 -> 3x5. Rows: (0.5, 1.5, 2.5) * 4/3 = 0.67, 2.0, 3.33 -> 0, 2, 3. Columns:
  // (0.5 .. 4.5) * 6/5 = 0.6, 1.8, 3.0, 4.2, 5.4 -> 0, 1, 3, 4, 5.
  const Bytes any = tg_noise(H * W, 5);
  const Example ex2 = tg_example(px, H, W, nullptr, &any);
  const TgOut odd = tg_apply(Compose({Resize{3, 5}, ToTensor{}}), ex2, 0);
  const int rows[3] = {0, 2, 3}, cols[5] = {0, 1, 3, 4, 5};
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x) ASSERT_EQ(odd.m(y, x), any[rows[y] * W + cols[x]]) << y << "," << x;
}

// RandomCrop's padding is 255 (ignore) in the mask, and elsewhere the mask shows the same source
// pixel as the image (read back from the coordinate-coded pixels).
TEST(TargetsMasks, CropPaddingIsIgnoreAndTheMaskFollowsThePixels) {
  const int H = 4, W = 5;
  const Bytes px = tg_coord_image(H, W);
  Bytes mask(H * W);
  for (int i = 0; i < H * W; ++i) mask[i] = static_cast<uint8_t>(i % 3);
  const Example ex = tg_example(px, H, W, nullptr, &mask);
  const Compose crop({RandomCrop{6, 2}, RandomHorizontalFlip{0.5}, ToTensor{}});
  int64_t ignored = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const TgOut o = tg_apply(crop, ex, seed);
    for (int64_t y = 0; y < 6; ++y)
      for (int64_t x = 0; x < 6; ++x) {
        const int sy = o.value(0, y, x) - 1, sx = o.value(1, y, x) - 1;
        if (sy < 0) {
          ASSERT_EQ(o.m(y, x), kIgnoreIndex) << seed << ": padding at " << y << "," << x;
          ++ignored;
        } else {
          ASSERT_EQ(o.m(y, x), mask[sy * W + sx]) << seed << " at " << y << "," << x;
        }
      }
  }
  EXPECT_GT(ignored, 0);
}

// ---- Letterbox -------------------------------------------------------------------------------

// letterbox_geometry follows Ultralytics' LetterBox(auto=False, center=True): r = min(size / h,
// size / w), new shape (round(h r), round(w r)) with Python's round (half to even), then
// top = round(dh / 2 - 0.1), left = round(dw / 2 - 0.1). Each case is worked out by hand.
TEST(TargetsLetterbox, GeometryMatchesUltralytics) {
  struct Case {
    int64_t h, w, size;
    double r;
    int64_t nh, nw, top, left;
  };
  const Case cases[] = {
      // r = min(64/100, 64/200) = 0.32; 100 r = 32, 200 r = 64; dh = 32: top = round(15.9) = 16;
      // dw = 0: left = round(-0.1) = 0.
      {100, 200, 64, 0.32, 32, 64, 16, 0},
      {200, 100, 64, 0.32, 64, 32, 0, 16},  // the same, transposed
      // r = min(64/33, 1) = 1; dh = 31: top = round(15.5 - 0.1) = 15 (and 16 below).
      {33, 64, 64, 1.0, 33, 64, 15, 0},
      // r = 0.5: 5 r = 2.5 rounds to 2 (half to even, not 3); dh = 2: top = round(0.9) = 1.
      {5, 8, 4, 0.5, 2, 4, 1, 0},
      // r = 0.5: 7 r = 3.5 rounds to 4 (even); no padding.
      {7, 8, 4, 0.5, 4, 4, 0, 0},
      // r = 64/7 = 9.1429 (upscaling): 3 r = 27.43 -> 27; dh = 37: top = round(18.4) = 18.
      {3, 7, 64, 64.0 / 7, 27, 64, 18, 0},
  };
  for (const Case& c : cases) {
    const LetterboxGeometry g = letterbox_geometry(c.h, c.w, c.size);
    const std::string what =
        std::to_string(c.h) + "x" + std::to_string(c.w) + " -> " + std::to_string(c.size);
    EXPECT_DOUBLE_EQ(g.scale, c.r) << what;
    EXPECT_EQ(g.new_height, c.nh) << what;
    EXPECT_EQ(g.new_width, c.nw) << what;
    EXPECT_EQ(g.top, c.top) << what;
    EXPECT_EQ(g.left, c.left) << what;
  }
  EXPECT_NE(input_error([] { letterbox_geometry(0, 5, 64); }), "no exception");
}

// Predict's letterbox, Ultralytics' LetterBox(auto=True, stride=32): the same scale and new
// shape, the padding of each axis (size - new) % stride, halved as above. Worked out by hand.
TEST(TargetsLetterbox, AutoPadsToAMultipleOfTheStrideAsUltralytics) {
  struct Case {
    int64_t h, w, size, stride;
    int64_t nh, nw, top, left, oh, ow;
  };
  const Case cases[] = {
      // A 640x480 frame at 640: r = 1, no padding at all (the square would add 160 rows).
      {480, 640, 640, 32, 480, 640, 0, 0, 480, 640},
      // r = min(640/333, 640/500) = 1.28: 333 r = 426.24 -> 426; dh = 214 % 32 = 22: top =
      // round(11 - 0.1) = 11, canvas 448 high.
      {333, 500, 640, 32, 426, 640, 11, 0, 448, 640},
      // Transposed, and at a stride of 64: dw = 214 % 64 = 22 again.
      {500, 333, 640, 64, 640, 426, 0, 11, 640, 448},
      // r = 0.5 (stride 4): 5 r = 2.5 -> 2; dh = 2 % 4 = 2: top = round(0.9) = 1; 4 high.
      {5, 8, 4, 4, 2, 4, 1, 0, 4, 4},
      // 33x64 at 64, stride 32: dh = 31 % 32 = 31: top 15, canvas 64 (the square's).
      {33, 64, 64, 32, 33, 64, 15, 0, 64, 64},
  };
  for (const Case& c : cases) {
    const LetterboxGeometry g = letterbox_geometry(c.h, c.w, c.size, c.stride);
    const std::string what = std::to_string(c.h) + "x" + std::to_string(c.w) + " -> " +
                             std::to_string(c.size) + " / " + std::to_string(c.stride);
    EXPECT_EQ(g.new_height, c.nh) << what;
    EXPECT_EQ(g.new_width, c.nw) << what;
    EXPECT_EQ(g.top, c.top) << what;
    EXPECT_EQ(g.left, c.left) << what;
    EXPECT_EQ(g.out_height, c.oh) << what;
    EXPECT_EQ(g.out_width, c.ow) << what;
    const Compose lb({Letterbox{c.size, 114, c.stride}, ToTensor{}});
    EXPECT_EQ(lb.output_shape(c.h, c.w), (std::array<int64_t, 3>{3, c.oh, c.ow})) << what;
  }
  // The square's canvas is size x size.
  const LetterboxGeometry sq = letterbox_geometry(480, 640, 640);
  EXPECT_EQ(sq.out_height, 640);
  EXPECT_EQ(sq.top, 80);
  // Pixels: a 10x20 image at 20, stride 8: scale 1, dh = 10 % 8 = 2, canvas 12x20 with the image
  // itself (copied byte for byte) in rows [1, 11) and 114 above and below.
  const Bytes px = tg_noise(10 * 20 * 3, 3);
  const TgOut o = tg_apply(Compose({Letterbox{20, 114, 8}, ToTensor{}}), tg_example(px, 10, 20), 0);
  ASSERT_EQ(o.px.size(), 3u * 12 * 20);
  for (int c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 12; ++y)
      for (int64_t x = 0; x < 20; ++x) {
        const float v = o.px[static_cast<size_t>((c * 12 + y) * 20 + x)];
        const uint8_t want =
            y < 1 || y >= 11 ? 114 : px[static_cast<size_t>(((y - 1) * 20 + x) * 3 + c)];
        ASSERT_EQ(v, static_cast<float>(want) / 255.0f) << c << "," << y << "," << x;
      }
  EXPECT_NE(input_error([] { Compose({Letterbox{64, 114, -1}, ToTensor{}}); }), "no exception");
}

// Letterbox of a 100x200 image to 64: the scaled image fills rows [16, 48) and is exactly
// Resize(32, 64) of the image; the padding is 114 (114/255 through ToTensor, (114/255 - mean) /
// std through Normalize); boxes are scaled by 0.32 and moved down 16 rows; the mask's padding is
// 255.
TEST(TargetsLetterbox, PixelsBoxesAndMask) {
  const int H = 100, W = 200;
  const Bytes px = tg_noise(H * W * 3, 6);
  const Bytes mask(H * W, 1);
  const std::vector<Box> boxes = {{1, 50, 25, 150, 75, 321.5f}, {0, 0, 0, 200, 100}};
  const Example ex = tg_example(px, H, W, &boxes, &mask);
  const Compose lb({Letterbox{64}, ToTensor{}});
  EXPECT_EQ(lb.output_shape(H, W), (std::array<int64_t, 3>{3, 64, 64}));
  const TgOut o = tg_apply(lb, ex, 0);
  const TgOut resized = tg_apply(Compose({Resize{32, 64}, ToTensor{}}), ex, 0);
  const float pad = static_cast<float>(114) / 255.0f;
  for (int c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 64; ++y)
      for (int64_t x = 0; x < 64; ++x) {
        const float v = o.px[static_cast<size_t>((c * 64 + y) * 64 + x)];
        if (y < 16 || y >= 48)
          ASSERT_EQ(v, pad) << c << "," << y << "," << x;
        else
          ASSERT_EQ(v, resized.px[static_cast<size_t>((c * 32 + y - 16) * 64 + x)])
              << c << "," << y << "," << x;
      }
  for (int64_t y = 0; y < 64; ++y)
    for (int64_t x = 0; x < 64; ++x)
      ASSERT_EQ(o.m(y, x), y < 16 || y >= 48 ? kIgnoreIndex : 1) << y << "," << x;
  // x * 0.32, y * 0.32 + 16.
  tg_expect_boxes_near(o.boxes, {{1, 16, 24, 48, 40}, {0, 0, 16, 64, 48}}, 1e-4f);
  // A COCO area stays in the original image's pixels (the metric maps boxes back there).
  ASSERT_EQ(o.boxes.size(), 2u);
  EXPECT_EQ(o.boxes[0].area, 321.5f);
  EXPECT_EQ(o.boxes[1].area, -1.f);

  // With Normalize the padding is the normalised 114, as Ultralytics pads before normalising.
  const TgOut n = tg_apply(Compose({Letterbox{64}, ToTensor{}, kTgNorm}), ex, 0);
  for (int c = 0; c < 3; ++c)
    EXPECT_EQ(n.px[static_cast<size_t>(c * 64 * 64)], (pad - kTgNorm.mean[c]) / kTgNorm.std[c]);
}

// A Resize or Letterbox followed by crops and flips moves the target as the same crops and flips
// do on the already resized example (pixels, boxes and mask): the resize's target feeds the rest.
TEST(TargetsLetterbox, ResizeThenAugmentEqualsAugmentingTheResizedExample) {
  const int H = 9, W = 14;
  const Bytes px = tg_noise(H * W * 3, 12);
  Bytes mask = tg_noise(H * W, 13);
  for (auto& v : mask) v %= 3;
  const std::vector<Box> boxes = {{0, 1, 1, 13, 8}, {1, 2.5f, 3, 6, 9}, {2, 10, 0, 14, 2}};
  const Example ex = tg_example(px, H, W, &boxes, &mask);
  const std::vector<Transform> rest = {RandomCrop{12, 3}, RandomHorizontalFlip{0.5}, ToTensor{}};
  for (const Transform& first : {Transform{Resize{12, 16}}, Transform{Letterbox{12}}}) {
    std::vector<Transform> all = {first};
    all.insert(all.end(), rest.begin(), rest.end());
    const Compose whole(all);
    // The resized example, its pixels read back from a bare ToTensor (exact for uint8 values).
    const TgOut r = tg_apply(Compose({first, ToTensor{}}), ex, 0);
    Bytes rpx(static_cast<size_t>(r.h * r.w * 3)), rmask(static_cast<size_t>(r.h * r.w));
    for (int64_t y = 0; y < r.h; ++y)
      for (int64_t x = 0; x < r.w; ++x) {
        for (int c = 0; c < 3; ++c)
          rpx[static_cast<size_t>((y * r.w + x) * 3 + c)] = static_cast<uint8_t>(r.value(c, y, x));
        rmask[static_cast<size_t>(y * r.w + x)] = static_cast<uint8_t>(r.m(y, x));
      }
    const Example rex =
        tg_example(rpx, static_cast<int>(r.h), static_cast<int>(r.w), &r.boxes, &rmask);
    for (uint64_t seed = 0; seed < 24; ++seed) {
      const TgOut a = tg_apply(whole, ex, seed), b = tg_apply(Compose(rest), rex, seed);
      ASSERT_EQ(a.px, b.px) << whole.str() << " seed " << seed;
      ASSERT_EQ(a.mask, b.mask) << whole.str() << " seed " << seed;
      ASSERT_EQ(a.boxes, b.boxes) << whole.str() << " seed " << seed << ": " << tg_str(a.boxes)
                                  << "vs " << tg_str(b.boxes);
    }
  }
}

// ---- pixels do not depend on the target -------------------------------------------------------

// apply() with boxes and a mask writes the same pixels as apply() without them, bit for bit, for
// pipelines with every kind of transform.
TEST(TargetsPixels, SameWithOrWithoutATarget) {
  const int H = 9, W = 7;
  const Bytes px = tg_noise(H * W * 3, 7);
  const Bytes mask = tg_noise(H * W, 8);
  const std::vector<Box> boxes = {{0, 1, 1, 6, 8}, {1, 2.5f, 0, 7, 3}};
  const Example plain = tg_example(px, H, W);
  const Example target = tg_example(px, H, W, &boxes, &mask);
  const std::vector<Compose> pipes = {
      Compose({Resize{12, 10}, RandomCrop{10, 2}, RandomHorizontalFlip{0.5}, ToTensor{}, kTgNorm,
               Cutout{4}}),
      Compose({Letterbox{16}, RandomHorizontalFlip{0.5}, ToTensor{}}),
      Compose({RandomCrop{5, 1}, RandomHorizontalFlip{0.5}, ToTensor{}, kTgNorm}),
      Compose({ToTensor{}, RandomCrop{8, 3}, RandomHorizontalFlip{0.5}}),
  };
  for (size_t p = 0; p < pipes.size(); ++p)
    for (uint64_t seed = 0; seed < 16; ++seed) {
      const auto s = pipes[p].output_shape(H, W);
      std::vector<float> a(static_cast<size_t>(s[0] * s[1] * s[2])), b(a.size()), c(a.size());
      std::vector<int64_t> m(static_cast<size_t>(s[1] * s[2]));
      std::vector<Box> bo;
      pipes[p].apply(plain, seed, a.data());
      pipes[p].apply(target, seed, b.data(), &bo, m.data());
      pipes[p].apply(target, seed, c.data());  // a target present but not asked for
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << pipes[p].str() << " seed " << seed;
      ASSERT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0)
          << pipes[p].str() << " seed " << seed;
    }
}

// ---- InMemoryDataset -------------------------------------------------------------------------

// Targets out of range are refused with an InputError naming the image; nothing is added.
TEST(TargetsDataset, RefusesBadTargetsNamingTheImage) {
  const Bytes px = tg_noise(4 * 5 * 3, 9);
  InMemoryDataset boxes({"a", "b", "c"}, "boxes", TargetKind::kBoxes);
  auto add_box = [&](Box b) {
    return input_error([&] { boxes.add_boxes(px.data(), 4, 5, {b}, "img7.png"); });
  };
  std::string e = add_box({3, 0, 0, 1, 1});  // class 3 of 3
  EXPECT_NE(e.find("img7.png"), std::string::npos) << e;
  EXPECT_NE(e.find("class 3"), std::string::npos) << e;
  EXPECT_NE(add_box({-1, 0, 0, 1, 1}).find("img7.png"), std::string::npos);
  for (Box b : {Box{0, 0, 0, 5.5f, 4}, Box{0, -0.5f, 0, 1, 1}, Box{0, 0, 0, 1, 4.01f},
                Box{0, 3, 0, 2, 1}, Box{0, 0, 3, 1, 2}}) {
    e = add_box(b);
    EXPECT_NE(e.find("img7.png"), std::string::npos) << tg_str({b}) << e;
    EXPECT_NE(e.find("not inside"), std::string::npos) << tg_str({b}) << e;
  }
  EXPECT_EQ(boxes.size(), 0);
  // The edges of the image are inside it; an image may have no box.
  boxes.add_boxes(px.data(), 4, 5, {{2, 0, 0, 5, 4}}, "ok.png");
  boxes.add_boxes(px.data(), 4, 5, {}, "empty.png");
  ASSERT_EQ(boxes.size(), 2);
  EXPECT_EQ(boxes.get(0).num_boxes, 1);
  EXPECT_EQ(boxes.get(0).boxes[0], (Box{2, 0, 0, 5, 4}));
  EXPECT_EQ(boxes.get(1).num_boxes, 0);
  EXPECT_EQ(boxes.target_kind(), TargetKind::kBoxes);

  InMemoryDataset masks({"a", "b", "c"}, "masks", TargetKind::kMask);
  Bytes m(20, 2);
  m[7] = 255;  // ignore is allowed
  masks.add_mask(px.data(), 4, 5, m.data(), "m0.png");
  for (uint8_t bad : {uint8_t{3}, uint8_t{254}}) {
    Bytes mb = m;
    mb[6] = bad;  // pixel (1, 1)
    e = input_error([&] { masks.add_mask(px.data(), 4, 5, mb.data(), "m1.png"); });
    EXPECT_NE(e.find("m1.png"), std::string::npos) << e;
    EXPECT_NE(e.find("class " + std::to_string(bad)), std::string::npos) << e;
    EXPECT_NE(e.find("(1, 1)"), std::string::npos) << e;
    // The range as the user reads it: the last class's number, not an expression.
    EXPECT_NE(e.find("outside 0..2 and not 255 (ignore)"), std::string::npos) << e;
  }
  EXPECT_TRUE(input_error(
      [&] {
        InMemoryDataset({"a", "b"}).add(px.data(), 4, 5, 2, "l.png");
      },
      "label 2 of image l.png is outside 0..1"));
  ASSERT_EQ(masks.size(), 1);
  // The dataset keeps its own copy of the mask.
  m[0] = 0;
  EXPECT_EQ(masks.get(0).mask[0], 2);
  EXPECT_EQ(masks.get(0).mask[7], 255);
}

// Adding an example of another kind of target is refused, and the message names the image (as
// every other refusal of add_boxes / add_mask does) and both kinds.
TEST(TargetsDataset, KindMismatchNamesTheImage) {
  const Bytes px = tg_noise(4 * 5 * 3, 10);
  const Bytes m(20, 0);
  InMemoryDataset labels({"a", "b"});
  InMemoryDataset boxes({"a", "b"}, "boxes", TargetKind::kBoxes);
  InMemoryDataset masks({"a", "b"}, "masks", TargetKind::kMask);
  const std::string cases[][2] = {
      {input_error([&] { labels.add_boxes(px.data(), 4, 5, {}, "cat1.png"); }), "cat1.png"},
      {input_error([&] { labels.add_mask(px.data(), 4, 5, m.data(), "cat2.png"); }), "cat2.png"},
      {input_error([&] { boxes.add(px.data(), 4, 5, 0, "cat3.png"); }), "cat3.png"},
      {input_error([&] { masks.add_boxes(px.data(), 4, 5, {}, "cat4.png"); }), "cat4.png"},
  };
  for (const auto& c : cases) {
    EXPECT_NE(c[0], "no exception") << c[1];
    EXPECT_NE(c[0].find("targets"), std::string::npos) << c[0];
    EXPECT_NE(c[0].find(c[1]), std::string::npos)
        << "the message should name " << c[1] << ": " << c[0];
  }
  EXPECT_EQ(labels.size() + boxes.size() + masks.size(), 0);
}

// ---- DataLoader ------------------------------------------------------------------------------

namespace {

// n images of 6x8 (coordinate-coded), image i with i % 3 boxes.
std::shared_ptr<InMemoryDataset> tg_box_dataset(int n) {
  auto ds = std::make_shared<InMemoryDataset>(std::vector<std::string>{"a", "b", "c"}, "boxes",
                                              TargetKind::kBoxes);
  const Bytes px = tg_coord_image(6, 8);
  for (int i = 0; i < n; ++i) {
    std::vector<Box> bs;
    for (int k = 0; k < i % 3; ++k)
      bs.push_back({k, static_cast<float>(k), 0.5f * static_cast<float>(i % 4),
                    static_cast<float>(k + 3 + i % 2), 6});
    ds->add_boxes(px.data(), 6, 8, bs, "b" + std::to_string(i));
  }
  return ds;
}

// n images of 5x5 with masks of 0, 1, 2 and 255.
std::shared_ptr<InMemoryDataset> tg_mask_dataset(int n) {
  auto ds = std::make_shared<InMemoryDataset>(std::vector<std::string>{"a", "b", "c"}, "masks",
                                              TargetKind::kMask);
  for (int i = 0; i < n; ++i) {
    const Bytes px = tg_noise(5 * 5 * 3, 100 + static_cast<uint64_t>(i));
    Bytes m = tg_noise(25, 200 + static_cast<uint64_t>(i));
    for (auto& v : m) v = v % 4 == 3 ? 255 : v % 4;
    ds->add_mask(px.data(), 5, 5, m.data(), "m" + std::to_string(i));
  }
  return ds;
}

struct TgEpoch {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int64_t>> indices, masks;
  std::vector<std::vector<std::vector<Box>>> boxes;
};

TgEpoch tg_epoch(std::shared_ptr<const Dataset> ds, const Compose& t, DataLoaderOptions o,
                 int64_t epoch) {
  DataLoader loader(std::move(ds), t, o);
  loader.begin_epoch(epoch);
  TgEpoch e;
  Batch b;
  while (loader.next(b)) {
    e.images.push_back(b.images.to_vector());
    e.indices.push_back(b.indices);
    e.boxes.push_back(b.boxes);
    if (b.masks.defined()) {
      const int64_t* m = b.masks.data<int64_t>();
      e.masks.emplace_back(m, m + b.masks.numel());
    }
  }
  return e;
}

}  // namespace

// A kBoxes dataset: Batch.boxes holds each image's boxes as the transform left them (here mirrored
// by a flip that always happens); no masks.
TEST(TargetsLoader, BoxesPerImage) {
  auto ds = tg_box_dataset(5);
  DataLoaderOptions o;
  o.batch_size = 2;
  DataLoader loader(ds, Compose({RandomHorizontalFlip{1.0}, ToTensor{}}), o);
  Batch b;
  int64_t seen = 0;
  while (loader.next(b)) {
    EXPECT_FALSE(b.masks.defined());
    ASSERT_EQ(b.boxes.size(), static_cast<size_t>(b.size));
    for (int64_t i = 0; i < b.size; ++i) {
      const Example ex = ds->get(b.indices[static_cast<size_t>(i)]);
      std::vector<Box> want;
      for (int64_t k = 0; k < ex.num_boxes; ++k) {
        const Box& s = ex.boxes[k];
        want.push_back({s.cls, 8 - s.x2, s.y1, 8 - s.x1, s.y2});
      }
      EXPECT_EQ(b.boxes[static_cast<size_t>(i)], want) << "image " << b.indices[i];
    }
    seen += b.size;
  }
  EXPECT_EQ(seen, 5);
}

// A kMask dataset: Batch.masks is (B, H, W) int64, each the mask Compose::apply gives that sample
// with the loader's documented seed mix_seed(seed, epoch, index); no boxes.
TEST(TargetsLoader, MasksPerImage) {
  auto ds = tg_mask_dataset(5);
  const Compose t({RandomCrop{4, 1}, RandomHorizontalFlip{0.5}, ToTensor{}});
  DataLoaderOptions o;
  o.batch_size = 2;
  o.shuffle = true;
  o.seed = 3;
  DataLoader loader(ds, t, o);
  loader.begin_epoch(1);
  Batch b;
  int64_t seen = 0;
  std::set<int64_t> values;
  while (loader.next(b)) {
    EXPECT_TRUE(b.boxes.empty());
    ASSERT_TRUE(b.masks.defined());
    EXPECT_EQ(b.masks.dtype(), DType::kInt64);
    EXPECT_EQ(b.masks.shape(), (Shape{b.size, 4, 4}));
    const int64_t* m = b.masks.data<int64_t>();
    for (int64_t i = 0; i < b.size; ++i) {
      const int64_t idx = b.indices[static_cast<size_t>(i)];
      const TgOut want = tg_apply(t, ds->get(idx), mix_seed(3, 1, static_cast<uint64_t>(idx)));
      EXPECT_EQ(std::vector<int64_t>(m + i * 16, m + (i + 1) * 16), want.mask) << idx;
      values.insert(m + i * 16, m + (i + 1) * 16);
    }
    seen += b.size;
  }
  EXPECT_EQ(seen, 5);
  EXPECT_TRUE(values.count(kIgnoreIndex));  // padding or unlabelled pixels came through
  // A Subset keeps its base's kind of target.
  auto sub = std::make_shared<Subset>(ds, std::vector<int64_t>{4, 0});
  DataLoader sl(sub, t, o);
  ASSERT_TRUE(sl.next(b));
  EXPECT_TRUE(b.masks.defined());
}

// A kLabel dataset leaves the masks undefined and the boxes empty, even in a Batch that held a
// mask and boxes before.
TEST(TargetsLoader, LabelsHaveNoBoxesOrMasks) {
  auto ds = std::make_shared<InMemoryDataset>(std::vector<std::string>{"a", "b"});
  const Bytes px = tg_noise(4 * 4 * 3, 11);
  for (int i = 0; i < 3; ++i) ds->add(px.data(), 4, 4, i % 2);
  DataLoaderOptions o;
  o.batch_size = 3;
  Batch b;
  DataLoader masks(tg_mask_dataset(3), Compose(), o);
  ASSERT_TRUE(masks.next(b));
  ASSERT_TRUE(b.masks.defined());
  DataLoader boxes(tg_box_dataset(3), Compose(), o);
  ASSERT_TRUE(boxes.next(b));
  ASSERT_EQ(b.boxes.size(), 3u);
  ASSERT_FALSE(b.masks.defined());
  masks.begin_epoch(1);
  ASSERT_TRUE(masks.next(b));  // the Batch holds a mask again
  DataLoader loader(ds, Compose(), o);
  ASSERT_TRUE(loader.next(b));
  EXPECT_FALSE(b.masks.defined());
  EXPECT_TRUE(b.boxes.empty());
  const int64_t* l = b.labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(l, l + 3), (std::vector<int64_t>{0, 1, 0}));
}

// Batches with targets are the same for any num_workers (random crops and flips included).
TEST(TargetsLoader, SameForAnyNumberOfWorkers) {
  DataLoaderOptions o;
  o.batch_size = 3;
  o.shuffle = true;
  o.seed = 17;
  const Compose tb({RandomCrop{6, 2}, RandomHorizontalFlip{0.5}, ToTensor{}});
  const Compose tm({RandomCrop{4, 1}, RandomHorizontalFlip{0.5}, ToTensor{}, kTgNorm});
  auto boxes = tg_box_dataset(11);
  auto masks = tg_mask_dataset(7);
  for (int64_t epoch : {0, 2}) {
    DataLoaderOptions w = o;
    w.num_workers = 2;
    const TgEpoch b0 = tg_epoch(boxes, tb, o, epoch), b2 = tg_epoch(boxes, tb, w, epoch);
    EXPECT_EQ(b0.indices, b2.indices);
    EXPECT_EQ(b0.images, b2.images);
    EXPECT_EQ(b0.boxes, b2.boxes);
    EXPECT_EQ(b0.boxes.size(), 4u);
    const TgEpoch m0 = tg_epoch(masks, tm, o, epoch), m2 = tg_epoch(masks, tm, w, epoch);
    EXPECT_EQ(m0.indices, m2.indices);
    EXPECT_EQ(m0.images, m2.images);
    EXPECT_EQ(m0.masks, m2.masks);
    EXPECT_EQ(m0.masks.size(), 3u);
  }
}

// ---- RandomScale -----------------------------------------------------------------------------

// RandomScale resizes to a random square and cuts (or pads to) size x size: the output is always
// size x size, the padding is 0 in the image and ignore in the mask, the mask follows the pixels
// (a two-colour image whose halves are two classes: a pixel of one colour has that colour's
// class), both small and large scales occur, and a seed gives the same output with or without a
// mask.
TEST(TargetsMasks, RandomScalePadsOrCropsAndTheMaskFollows) {
  const int H = 16, W = 16, S = 16;
  Bytes px(H * W * 3), mask(H * W);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const bool left = x < W / 2;
      for (int c = 0; c < 3; ++c) px[(y * W + x) * 3 + c] = left ? 50 : 150;
      mask[y * W + x] = left ? 1 : 2;
    }
  const Example ex = tg_example(px, H, W, nullptr, &mask);
  const Example bare = tg_example(px, H, W);
  const Compose t({RandomScale{S, 0.5, 2.0}, RandomHorizontalFlip{0.5}, ToTensor{}});
  EXPECT_EQ(t.output_shape(H, W), (std::array<int64_t, 3>{3, S, S}));
  EXPECT_NE(t.str().find("RandomScale(16, scale=(0.5, 2))"), std::string::npos) << t.str();
  int padded_runs = 0, full_runs = 0;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const TgOut o = tg_apply(t, ex, seed);
    ASSERT_EQ(o.h, S);
    ASSERT_EQ(o.w, S);
    int64_t pads = 0;
    for (int64_t y = 0; y < S; ++y)
      for (int64_t x = 0; x < S; ++x) {
        const int v = o.value(0, y, x);
        if (v == 0) {
          ASSERT_EQ(o.m(y, x), kIgnoreIndex) << seed << " at " << y << "," << x;
          ++pads;
        } else if (v == 50) {
          ASSERT_EQ(o.m(y, x), 1) << seed << " at " << y << "," << x;
        } else if (v == 150) {
          ASSERT_EQ(o.m(y, x), 2) << seed << " at " << y << "," << x;
        } else {
          ASSERT_TRUE(o.m(y, x) == 1 || o.m(y, x) == 2) << seed;  // a blended edge pixel
        }
      }
    (pads > 0 ? padded_runs : full_runs)++;
    const TgOut again = tg_apply(t, bare, seed);
    ASSERT_EQ(again.px, o.px) << seed;
  }
  EXPECT_GT(padded_runs, 0);
  EXPECT_GT(full_runs, 0);
  EXPECT_THROW(Compose({ToTensor{}, RandomScale{S, 0.5, 2.0}}), InputError);  // must come first
  EXPECT_THROW(Compose({RandomScale{S, 2.0, 0.5}, ToTensor{}}), InputError);
  EXPECT_THROW(Compose({RandomScale{0, 0.5, 2.0}, ToTensor{}}), InputError);
}
