// VideoReader and VideoWriter (include/hpcnet/video.h, FFmpeg's libraries): frames written are
// read back with their size, count and frame rate; damaged and foreign files; names.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "hpcnet/error.h"
#include "hpcnet/video.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// Frame k of a moving pattern: a bright square on a gradient, different in every frame.
data::Image pattern_frame(int64_t k, int64_t h, int64_t w) {
  data::Image im;
  im.height = h;
  im.width = w;
  im.pixels.resize(static_cast<size_t>(h * w * 3));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const bool square = std::abs(x - (8 + 4 * k) % w) < 8 && std::abs(y - h / 2) < 8;
      uint8_t* p = &im.pixels[static_cast<size_t>((y * w + x) * 3)];
      p[0] = square ? 250 : static_cast<uint8_t>(x * 200 / w);
      p[1] = square ? 250 : static_cast<uint8_t>(y * 200 / h);
      p[2] = static_cast<uint8_t>(square ? 40 : 100);
    }
  return im;
}

void write_pattern_video(const fs::path& file, int64_t n, int64_t h, int64_t w, double fps) {
  data::VideoWriter writer(file.string(), h, w, fps);
  for (int64_t k = 0; k < n; ++k) writer.write(pattern_frame(k, h, w));
  writer.close();
  EXPECT_EQ(writer.frames(), n);
}

double mean_abs_diff(const data::Image& a, const data::Image& b) {
  double s = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(a.pixels[i] - b.pixels[i]);
  return s / static_cast<double>(a.pixels.size());
}

}  // namespace

TEST(Video, WrittenFramesReadBack) {
  TempDir tmp("video");
  for (const char* name : {"a.mp4", "b.mkv", "c.avi", "d.mov"}) {
    const fs::path file = tmp / name;
    write_pattern_video(file, 20, 48, 64, 10.0);
    data::VideoReader reader(file.string());
    EXPECT_EQ(reader.height(), 48) << name;
    EXPECT_EQ(reader.width(), 64) << name;
    EXPECT_NEAR(reader.fps(), 10.0, 1e-6) << name;
    data::Image frame;
    int64_t n = 0;
    while (reader.next(frame)) {
      ASSERT_EQ(frame.height, 48);
      ASSERT_EQ(frame.width, 64);
      // Lossy (H.264 / MPEG-4, yuv420p), but each frame is its own, not another's.
      EXPECT_LT(mean_abs_diff(frame, pattern_frame(n, 48, 64)), 6.0) << name << " frame " << n;
      if (n > 0) EXPECT_GT(mean_abs_diff(frame, pattern_frame(n - 1, 48, 64)), 1.0) << name;
      ++n;
    }
    EXPECT_EQ(n, 20) << name;
    EXPECT_EQ(reader.bad_packets(), 0) << name;
    EXPECT_EQ(reader.missing_frames(), 0) << name;
    EXPECT_EQ(reader.damaged_frames(), 0) << name;
  }
}

TEST(Video, OddSizesAreCutToEven) {
  TempDir tmp("video_odd");
  const fs::path file = tmp / "odd.mp4";
  data::VideoWriter writer(file.string(), 33, 45, 25.0);
  writer.write(pattern_frame(0, 33, 45));
  writer.close();
  data::VideoReader reader(file.string());
  EXPECT_EQ(reader.height(), 32);
  EXPECT_EQ(reader.width(), 44);
}

TEST(Video, ATruncatedVideoGivesTheFramesBeforeTheCut) {
  TempDir tmp("video_cut");
  const fs::path file = tmp / "cut.mkv";  // Matroska: readable without its end
  write_pattern_video(file, 40, 48, 64, 10.0);
  const std::string bytes = read_file(file);
  write_file(file, bytes.substr(0, bytes.size() * 6 / 10));
  data::VideoReader reader(file.string());
  data::Image frame;
  int64_t n = 0;
  while (reader.next(frame)) ++n;
  EXPECT_GT(n, 5);
  EXPECT_LT(n, 40);
}

TEST(Video, ForeignAndMissingFilesAreOneLineErrors) {
  TempDir tmp("video_bad");
  write_file(tmp / "notes.mp4", "this is not a video, only text with a video's name\n");
  for (const std::string& f : {tmp.str("notes.mp4"), tmp.str("missing.mp4")}) {
    try {
      data::VideoReader reader(f);
      ADD_FAILURE() << f << " was opened";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(f), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  try {
    data::VideoWriter writer(tmp.str("out.gif"), 32, 32, 10.0);
    ADD_FAILURE() << "a .gif writer was made";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(".mp4"), std::string::npos) << e.what();
  }
}

TEST(Video, NamesByExtension) {
  for (const char* v : {"a.mp4", "B.MKV", "c.avi", "d.mov", "e.webm", "dir/f.m4v"})
    EXPECT_TRUE(data::is_video_name(v)) << v;
  for (const char* v : {"a.jpg", "b.png", "mp4", "c.mp4.txt", "d"})
    EXPECT_FALSE(data::is_video_name(v)) << v;
}

// Raw frames (ffmpeg's -f rawvideo -video_size WxH -pixel_format F -framerate R) read back exactly,
// whatever their pixel format; their size is required.
TEST(Video, RawFramesReadBackExactly) {
  TempDir tmp("video_raw");
  std::string rgb, gray;
  for (int64_t k = 0; k < 5; ++k) {
    const data::Image im = pattern_frame(k, 48, 64);
    rgb.append(im.pixels.begin(), im.pixels.end());
    for (size_t p = 0; p < im.pixels.size(); p += 3) gray += static_cast<char>(im.pixels[p]);
  }
  write_file(tmp / "frames.rgb", rgb);
  write_file(tmp / "frames.gray", gray);
  data::VideoOptions o;
  o.format = "rawvideo";
  o.video_size = "64x48";
  o.framerate = 12;
  data::VideoReader reader(tmp.str("frames.rgb"), o);
  EXPECT_EQ(reader.codec(), "rawvideo");
  EXPECT_NEAR(reader.fps(), 12.0, 1e-6);
  data::Image frame;
  int64_t n = 0;
  while (reader.next(frame)) {
    const data::Image want = pattern_frame(n++, 48, 64);
    EXPECT_EQ(frame.pixels, want.pixels) << "frame " << n - 1;
  }
  EXPECT_EQ(n, 5);
  o.pixel_format = "gray";
  data::VideoReader grays(tmp.str("frames.gray"), o);
  for (n = 0; grays.next(frame); ++n) {
    const data::Image want = pattern_frame(n, 48, 64);
    for (size_t p = 0; p < frame.pixels.size(); ++p)
      ASSERT_EQ(frame.pixels[p], want.pixels[p - p % 3]) << "frame " << n << " byte " << p;
  }
  EXPECT_EQ(n, 5);
  o.video_size.clear();
  EXPECT_THROW(data::VideoReader(tmp.str("frames.rgb"), o), InputError);
}
