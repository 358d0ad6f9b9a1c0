// Tests of the Cutout transform inside Compose: one clipped square of zeros, reproducible from the
// seed, and the order of transforms it must keep (named by Compose's str()).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

// ---- Cutout ------------------------------------------------------------------------------------

namespace {

struct Hole {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator<(const Hole& o) const {
    return std::tie(top, left, height, width) < std::tie(o.top, o.left, o.height, o.width);
  }
};

// The zero rectangle of a (3, H, W) sample that is `one` elsewhere; ADD_FAILUREs when the zeros
// are not one rectangle shared by all channels.
Hole rs_find_hole(const std::vector<float>& out, int64_t h, int64_t w, float one,
                  const std::string& what) {
  int64_t top = h, left = w, bottom = -1, right = -1, zeros = 0;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const float v0 = out[static_cast<size_t>(y * w + x)];
      for (int c = 1; c < 3; ++c)
        if (out[static_cast<size_t>((c * h + y) * w + x)] != v0) {
          ADD_FAILURE() << what << ": channels differ at (" << y << ", " << x << ")";
          return {};
        }
      if (v0 == 0.f) {
        ++zeros;
        top = std::min(top, y);
        bottom = std::max(bottom, y);
        left = std::min(left, x);
        right = std::max(right, x);
      } else if (v0 != one) {
        ADD_FAILURE() << what << ": value " << v0 << " at (" << y << ", " << x << ")";
        return {};
      }
    }
  if (zeros == 0) return {};
  Hole hole{top, left, bottom - top + 1, right - left + 1};
  EXPECT_EQ(zeros, hole.height * hole.width) << what << ": the zeros are not a rectangle";
  return hole;
}

std::vector<uint8_t> rs_white(int64_t h, int64_t w) {
  return std::vector<uint8_t>(static_cast<size_t>(h * w * 3), 255);
}

}  // namespace

TEST(ResnetCutout, ZeroesOneClippedSquareAndIsReproducible) {
  const std::vector<uint8_t> px = rs_white(32, 32);
  data::Example ex{px.data(), 32, 32, 0};
  data::Compose tf({data::ToTensor{}, data::Cutout{16}});
  EXPECT_EQ(tf.output_shape(32, 32), (std::array<int64_t, 3>{3, 32, 32}));
  std::vector<float> out(3 * 32 * 32), again(3 * 32 * 32);
  std::set<Hole> holes;
  int inside = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::string what = "seed " + std::to_string(seed);
    std::fill(out.begin(), out.end(), NAN);
    tf.apply(ex, seed, out.data());
    Hole hole = rs_find_hole(out, 32, 32, 1.f, what);
    // Centred at (cy, cx) in [0, 32): rows [cy - 8, cy + 8) clipped, so 8..16 rows and columns.
    EXPECT_GE(hole.height, 8) << what;
    EXPECT_LE(hole.height, 16) << what;
    EXPECT_GE(hole.width, 8) << what;
    EXPECT_LE(hole.width, 16) << what;
    const bool touches = hole.top == 0 || hole.left == 0 || hole.top + hole.height == 32 ||
                         hole.left + hole.width == 32;
    if (!touches) {
      EXPECT_EQ(hole.height * hole.width, 256) << what << ": a hole inside the image is 16x16";
      ++inside;
    } else {
      EXPECT_LE(hole.height * hole.width, 256) << what;
    }
    if (hole.height < 16) EXPECT_TRUE(hole.top == 0 || hole.top + hole.height == 32) << what;
    if (hole.width < 16) EXPECT_TRUE(hole.left == 0 || hole.left + hole.width == 32) << what;
    holes.insert(hole);
    // The same seed gives the same hole.
    std::fill(again.begin(), again.end(), NAN);
    tf.apply(ex, seed, again.data());
    EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * sizeof(float)), 0) << what;
  }
  EXPECT_GT(inside, 0) << "no hole fully inside the image in 20 seeds";
  EXPECT_GT(holes.size(), 10u) << "holes barely depend on the seed";

  // The zeros are in the output's units, after Normalize: (1 - 0.5) / 0.5 = 1 elsewhere.
  data::Compose norm({data::ToTensor{}, data::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}},
                      data::Cutout{16}});
  norm.apply(ex, 3, out.data());
  Hole h = rs_find_hole(out, 32, 32, 1.f, "normalized");
  EXPECT_GE(h.height * h.width, 64);
}

TEST(ResnetCutout, OrderIsCheckedAndStrNamesIt) {
  std::string msg = input_error([] { data::Compose({data::Cutout{16}, data::ToTensor{}}); });
  EXPECT_NE(msg.find("Cutout"), std::string::npos) << msg;
  msg = input_error([] {
    data::Compose({data::ToTensor{}, data::Cutout{8}, data::RandomCrop{32, 4}});
  });
  EXPECT_NE(msg.find("Cutout"), std::string::npos) << msg;
  EXPECT_THROW(data::Compose({data::RandomCrop{32, 4}, data::Cutout{8}, data::ToTensor{}}),
               InputError);
  data::Compose ok({data::RandomCrop{32, 4}, data::RandomHorizontalFlip{}, data::ToTensor{},
                    data::Normalize{{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}, data::Cutout{16}});
  EXPECT_NE(ok.str().find("Cutout(16)"), std::string::npos) << ok.str();
  EXPECT_NE(data::Compose({data::ToTensor{}, data::Cutout{8}}).str().find("Cutout(8)"),
            std::string::npos);
}
