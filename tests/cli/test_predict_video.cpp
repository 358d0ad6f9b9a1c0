// `hpcnet predict` on videos (the binary, as tests/cli/test_predict.cpp runs it): a 10-second
// 640x480 MP4 made here with FFmpeg's libraries gives an annotated video of the same frame count
// and rate, and on every frame the detections that predicting that frame, decoded to PNG, gives;
// --vid-stride; --batch; damaged, truncated and foreign videos; a network stream (served here over
// TCP) that plays to its end, is killed halfway, or never answers; a growing file (--follow);
// standard input as a video, MJPEG or raw frames; --save-txt and --save-json; segmentation and
// classification models on video.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hpcnet/autograd.h"
#include "hpcnet/data.h"
#include "hpcnet/nn.h"
#include "hpcnet/train.h"
#include "hpcnet/video.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// Frame k: two coloured rectangles moving over a noisy background.
data::Image scene_frame(int64_t k, int64_t h, int64_t w) {
  data::Image im;
  im.height = h;
  im.width = w;
  im.pixels = noisy_pixels(static_cast<int>(w), static_cast<int>(h), 90, 110, 130,
                           static_cast<uint64_t>(k % 3), 12, 20);
  auto rect = [&](int64_t x0, int64_t y0, int64_t rw, int64_t rh, uint8_t r, uint8_t g, uint8_t b) {
    for (int64_t y = std::max<int64_t>(y0, 0); y < std::min(y0 + rh, h); ++y)
      for (int64_t x = std::max<int64_t>(x0, 0); x < std::min(x0 + rw, w); ++x) {
        uint8_t* p = &im.pixels[static_cast<size_t>((y * w + x) * 3)];
        p[0] = r;
        p[1] = g;
        p[2] = b;
      }
  };
  rect(20 + 9 * k, 100, 120, 90, 230, 40, 40);
  rect(500 - 7 * k, 300, 80, 140, 40, 220, 60);
  return im;
}

struct VideoShared {
  TempDir tmp{"predict_video"};
  fs::path weights = tmp / "yolo.safetensors", video = tmp / "clip.mp4";
  static constexpr int64_t kFrames = 50, kHeight = 480, kWidth = 640;
  static constexpr double kFps = 5.0;  // 10 seconds
  VideoShared() {
    save_fresh_model(weights, "yolov8n", "detect", {"red", "green"}, 128, 5);
    data::VideoWriter writer(video.string(), kHeight, kWidth, kFps);
    for (int64_t k = 0; k < kFrames; ++k) writer.write(scene_frame(k, kHeight, kWidth));
    writer.close();
  }
};
VideoShared& shared() {
  static VideoShared s;
  return s;
}

RunResult predict(std::vector<std::string> args, const fs::path& cwd) {
  // conf 0: a model with fresh weights scores low, and every frame must have boxes to compare.
  args.insert(args.begin(), {"predict", "--weights", shared().weights.string(), "--threads", "2",
                             "--device", "cpu", "--conf", "0", "--max-det", "5", "--json"});
  return run_hpcnet(args, cwd);
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> rows;
  for (const std::string& line : split_lines(out))
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace

TEST(PredictVideo, AnnotatedVideoAndDetectionsEqualThoseOfTheDecodedFrames) {
  const VideoShared& s = shared();
  TempDir tmp("predict_video_run");
  const RunResult r = predict({"--save", tmp.str("out"), s.video.string()}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("Speed: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("50 frames in"), std::string::npos) << r.err;
  const std::vector<nlohmann::json> rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), static_cast<size_t>(s.kFrames)) << r.err;

  // The annotated video: same frame count, rate and size; frames differ from the source (drawn).
  data::VideoReader annotated(tmp.str("out/clip.mp4"));
  EXPECT_EQ(annotated.width(), s.kWidth);
  EXPECT_EQ(annotated.height(), s.kHeight);
  EXPECT_NEAR(annotated.fps(), s.kFps, 1e-6);
  data::Image frame;
  int64_t n = 0;
  while (annotated.next(frame)) ++n;
  EXPECT_EQ(n, s.kFrames);

  // Every source frame decoded by FFmpeg and written as PNG, then predicted as images.
  data::VideoReader source(s.video.string());
  fs::create_directories(tmp / "frames");
  for (int64_t k = 0; source.next(frame); ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "%03lld.png", static_cast<long long>(k));
    const std::vector<uint8_t> png =
        data::encode_png_rgb(frame.pixels.data(), frame.height, frame.width);
    write_file(tmp / "frames" / name, string_of(png));
  }
  const RunResult images = predict({tmp.str("frames")}, tmp.path());
  ASSERT_EQ(images.rc, 0) << images.err;
  const std::vector<nlohmann::json> image_rows = json_lines(images.out);
  ASSERT_EQ(image_rows.size(), rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    EXPECT_EQ(rows[k].at("frame"), static_cast<int64_t>(k));
    const auto &a = rows[k].at("boxes"), &b = image_rows[k].at("boxes");
    ASSERT_EQ(a.size(), b.size()) << "frame " << k;
    ASSERT_GT(a.size(), 0u) << "frame " << k;
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_EQ(a[j].at("class"), b[j].at("class")) << "frame " << k;
      for (int c = 0; c < 4; ++c)
        EXPECT_NEAR(a[j].at("box")[c].get<double>(), b[j].at("box")[c].get<double>(), 1e-3)
            << "frame " << k << " box " << j;
    }
  }
}

TEST(PredictVideo, VidStrideKeepsEveryNthFrame) {
  const VideoShared& s = shared();
  TempDir tmp("predict_video_stride");
  const RunResult r =
      predict({"--vid-stride", "4", "--save", tmp.str("out"), s.video.string()}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<nlohmann::json> rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 13u);  // frames 0, 4, ..., 48
  for (size_t k = 0; k < rows.size(); ++k) EXPECT_EQ(rows[k].at("frame"), 4 * k);
  data::VideoReader annotated(tmp.str("out/clip.mp4"));
  EXPECT_NEAR(annotated.fps(), s.kFps / 4, 1e-6);
  data::Image frame;
  int64_t n = 0;
  while (annotated.next(frame)) ++n;
  EXPECT_EQ(n, 13);
}

TEST(PredictVideo, ADamagedVideoAmongGoodInputs) {
  const VideoShared& s = shared();
  TempDir tmp("predict_video_bad");
  fs::create_directories(tmp / "in");
  write_file(tmp / "in" / "bad.mp4", "not a video at all");
  fs::copy_file(s.video, tmp / "in" / "good.mp4");
  const RunResult r = predict({tmp.str("in")}, tmp.path());
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("bad.mp4: cannot open as a video"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 of 2 inputs could not be read"), std::string::npos) << r.err;
  EXPECT_EQ(json_lines(r.out).size(), static_cast<size_t>(s.kFrames));
  const RunResult alone = predict({tmp.str("in/bad.mp4")}, tmp.path());  // one line, exit 2
  EXPECT_EQ(alone.rc, 2);
  EXPECT_EQ(split_lines(alone.err).size(), 1u) << alone.err;
  EXPECT_EQ(run_hpcnet({"predict", "--weights", s.weights.string(), "--vid-stride", "0",
                        s.video.string()},
                       tmp.path())
                .rc,
            2);
}

namespace {

// A TCP server on 127.0.0.1 (an ephemeral port) for one client: it sends `bytes` (all of them,
// or the first `cut` and then closes, as a source that is killed), or with `silent` accepts and
// sends nothing until predict gives up.
class StreamServer {
 public:
  StreamServer(std::string bytes, size_t cut, bool silent)
      : bytes_(std::move(bytes)), cut_(std::min(cut, bytes_.size())), silent_(silent) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 1) != 0)
      throw std::runtime_error("StreamServer: cannot listen");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~StreamServer() {
    done_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    const int client = ::accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    if (silent_) {
      while (!done_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else {
      for (size_t sent = 0; sent < cut_;) {
        const ssize_t n = ::send(client, bytes_.data() + sent, std::min<size_t>(cut_ - sent, 4096),
                                 MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
    }
    ::close(client);
  }
  std::string bytes_;
  size_t cut_;
  bool silent_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// The shared clip as Matroska (readable front to back, as a stream must be).
const std::string& clip_mkv() {
  static const std::string bytes = [] {
    TempDir tmp("clip_mkv");
    data::VideoWriter writer(tmp.str("clip.mkv"), VideoShared::kHeight, VideoShared::kWidth,
                             VideoShared::kFps);
    for (int64_t k = 0; k < VideoShared::kFrames; ++k)
      writer.write(scene_frame(k, VideoShared::kHeight, VideoShared::kWidth));
    writer.close();
    return read_file(tmp / "clip.mkv");
  }();
  return bytes;
}

int64_t number_before(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  if (at == std::string::npos) return -1;
  size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(text[start - 1]))) --start;
  return std::stoll(text.substr(start, at - start));
}

// The lines of text that hold `what`.
size_t count_lines_with(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (const std::string& line : split_lines(text)) n += line.find(what) != std::string::npos;
  return n;
}

// The frames a summary line says were dropped while the model was busy (0 when it says none).
int64_t dropped_frames(const std::string& err) {
  return std::max({number_before(err, " frames dropped"), number_before(err, " frame dropped"),
                   int64_t{0}});
}

}  // namespace

// A live stream: every frame is predicted or counted as dropped (the newest frame wins while the
// model is busy), and the stream's end ends predict with its summary line.
TEST(PredictVideo, ANetworkStreamKeepsUpOrCountsWhatItDropped) {
  shared();
  StreamServer server(clip_mkv(), std::string::npos, false);
  TempDir tmp("predict_stream");
  const RunResult r = predict({"--save", tmp.str("out"), server.url()}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const int64_t predicted = static_cast<int64_t>(json_lines(r.out).size());
  const int64_t dropped = dropped_frames(r.err);
  EXPECT_GT(predicted, 0) << r.err;
  EXPECT_EQ(predicted + dropped, VideoShared::kFrames) << r.err;
  EXPECT_NE(r.err.find("the stream ended"), std::string::npos) << r.err;
  data::VideoReader annotated(tmp.str("out/127.0.0.1_" +
                                      server.url().substr(server.url().rfind(':') + 1) + ".mp4"));
  data::Image frame;
  int64_t n = 0;
  while (annotated.next(frame)) ++n;
  EXPECT_EQ(n, predicted);
}

TEST(PredictVideo, AKilledSourceEndsPredictCleanly) {
  shared();
  StreamServer server(clip_mkv(), clip_mkv().size() / 2, false);
  TempDir tmp("predict_stream_cut");
  const RunResult r = predict({server.url()}, tmp.path());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_GT(json_lines(r.out).size(), 0u) << r.err;
  EXPECT_LT(json_lines(r.out).size(), static_cast<size_t>(VideoShared::kFrames)) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "the stream ended"), 1u) << r.err;  // its summary line
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
}

TEST(PredictVideo, AStreamThatNeverAnswersTimesOut) {
  shared();
  StreamServer server("", 0, true);
  TempDir tmp("predict_stream_silent");
  const RunResult r = predict({"--stream-timeout", "1", server.url()}, tmp.path());
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("no answer within 1 s"), std::string::npos) << r.err;
  EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
  EXPECT_LT(r.seconds, 15.0);
}

// --stream-out: the annotated frames as MJPEG on standard output, one JPEG per frame.
TEST(PredictVideo, StreamOutWritesMjpegFrames) {
  const VideoShared& s = shared();
  TempDir tmp("predict_stream_out");
  const RunResult r = predict({"--stream-out", "--vid-stride", "5", s.video.string()}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  write_file(tmp / "out.mjpeg", r.out);
  data::VideoReader frames(tmp.str("out.mjpeg"));
  EXPECT_EQ(frames.codec(), "mjpeg");
  data::Image frame;
  int64_t n = 0;
  while (frames.next(frame)) {
    EXPECT_EQ(frame.width, s.kWidth);
    EXPECT_EQ(frame.height, s.kHeight);
    ++n;
  }
  EXPECT_EQ(n, 10);
  // An image among the inputs is refused in one line: there is no video to stream.
  write_file(tmp / "a.png", string_of(data::encode_png_rgb(frame.pixels.data(), 480, 640)));
  const RunResult image = predict({"--stream-out", tmp.str("a.png")}, tmp.path());
  EXPECT_EQ(image.rc, 2);
  EXPECT_NE(image.err.find("--stream-out writes the frames of videos"), std::string::npos)
      << image.err;
}

// Segmentation (U-Net, DeepLab) and classification models on a video: one line per frame and an
// annotated video (class overlays with their legend; the top 5 classes as text).
TEST(PredictVideo, SegmentAndClassifyModelsOnAVideo) {
  const VideoShared& s = shared();
  TempDir tmp("predict_video_tasks");
  struct Case {
    const char* model;
    const char* task;
    int64_t imgsz;
  };
  for (const Case& c : {Case{"unet_resnet18", "segment", 64},
                        Case{"deeplabv3_resnet50", "segment", 64}, Case{"lenet", "classify", 32}}) {
    const std::string weights = tmp.str(std::string(c.model) + ".safetensors");
    save_fresh_model(weights, c.model, c.task, {"background", "red", "green"}, c.imgsz, 3);
    const std::string out = tmp.str(std::string("out_") + c.model);
    const RunResult r = run_hpcnet({"predict", "--weights", weights, "--threads", "2", "--json",
                                    "--vid-stride", "10", "--save", out, s.video.string()},
                                   tmp.path());
    ASSERT_EQ(r.rc, 0) << c.model << ": " << r.err;
    EXPECT_EQ(json_lines(r.out).size(), 5u) << c.model;
    data::VideoReader annotated(out + "/clip.mp4");
    data::VideoReader source(s.video.string());
    data::Image drawn, original, first;
    int64_t n = 0;
    double diff = 0;
    while (annotated.next(drawn)) {
      ASSERT_TRUE(source.next(original));
      for (int k = 1; k < 10; ++k) source.next(original);  // frames 0, 10, 20, ...
      if (n == 0) {
        first = drawn;
        for (size_t i = 0; i < drawn.pixels.size(); ++i)
          diff += std::abs(drawn.pixels[i] - original.pixels[i]);
      }
      ++n;
    }
    EXPECT_EQ(n, 5) << c.model;
    // Something was drawn on the first frame (an overlay, or the text band), beyond the codec's
    // loss (a few levels per pixel).
    EXPECT_GT(diff / static_cast<double>(drawn.pixels.size()), 3.0) << c.model;
    // The legend at the top left (line width 2 at 640x480: a 4-pixel margin, 18-pixel lines):
    // white text, which the source (at most ~150 per channel there) does not have; for the
    // segmentation model a 14-pixel square of a class colour first on its line.
    auto px = [&](int64_t x, int64_t y, int ch) {
      return static_cast<int>(first.pixels[static_cast<size_t>((y * s.kWidth + x) * 3 + ch)]);
    };
    int64_t white = 0;
    for (int64_t y = 4; y < 4 + 18; ++y)
      for (int64_t x = 4; x < 160; ++x) white += px(x, y, 0) > 190 && px(x, y, 1) > 190;
    EXPECT_GT(white, 20) << c.model;
    if (std::string(c.task) == "segment") {
      const auto palette = data::class_palette(3);
      int best = 1 << 30;
      for (int k = 1; k < 3; ++k) {
        int d = 0;
        for (int ch = 0; ch < 3; ++ch) d = std::max(d, std::abs(px(11, 11, ch) - palette[k][ch]));
        best = std::min(best, d);
      }
      EXPECT_LT(best, 40) << "the legend's first square";
    }
  }
}

// Standard input: a video piped in ("-") is predicted as a live source.
TEST(PredictVideo, StandardInputAndCameras) {
  const VideoShared& s = shared();
  TempDir tmp("predict_stdin");
  const std::string mkv = tmp.str("clip.mkv");
  write_file(mkv, clip_mkv());
  const RunResult r = run_shell(
      "{ cat " + shell_quote(mkv) + " | ( " +
      hpcnet_command_line({"predict", "--weights", s.weights.string(), "--threads", "2", "--conf",
                           "0", "--json", "--save", tmp.str("out"), "-"},
                          tmp.path()) +
      " ); }");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_GT(json_lines(r.out).size(), 0u) << r.err;
  EXPECT_TRUE(fs::exists(tmp / "out" / "stdin.mp4")) << r.err;
  // A camera that does not exist: one line naming it, exit 2.
  const RunResult cam = predict({"/dev/video97"}, tmp.path());
  EXPECT_EQ(cam.rc, 2);
  EXPECT_NE(cam.err.find("no camera at /dev/video97"), std::string::npos) << cam.err;
  EXPECT_EQ(split_lines(cam.err).size(), 1u) << cam.err;
  EXPECT_TRUE(data::is_camera("0"));
  EXPECT_TRUE(data::is_camera("/dev/video2"));
  EXPECT_FALSE(data::is_camera("/dev/videos"));
  EXPECT_FALSE(data::is_camera("video.mp4"));
}

// --batch: several frames per forward pass, the same detections as one at a time.
TEST(PredictVideo, BatchedFramesGiveTheSameDetections) {
  const VideoShared& s = shared();
  TempDir tmp("predict_video_batch");
  const RunResult one = predict({"--vid-stride", "3", s.video.string()}, tmp.path());
  const RunResult four =
      predict({"--vid-stride", "3", "--batch", "4", "--save", tmp.str("out"), s.video.string()},
              tmp.path());
  ASSERT_EQ(one.rc, 0) << one.err;
  ASSERT_EQ(four.rc, 0) << four.err;
  // 640x480 frames at --imgsz 128: Ultralytics' predict letterbox, padded to a multiple of 32 only.
  EXPECT_NE(four.err.find("at shape (4, 3, 96, 128)"), std::string::npos) << four.err;
  const auto a = json_lines(one.out), b = json_lines(four.out);
  ASSERT_EQ(a.size(), 17u);  // frames 0, 3, ..., 48: the last batch holds one
  ASSERT_EQ(b.size(), a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].at("frame"), b[k].at("frame"));
    const auto &x = a[k].at("boxes"), &y = b[k].at("boxes");
    ASSERT_EQ(x.size(), y.size()) << "frame " << k;
    for (size_t j = 0; j < x.size(); ++j)
      for (int c = 0; c < 4; ++c)
        EXPECT_NEAR(x[j].at("box")[c].get<double>(), y[j].at("box")[c].get<double>(), 1e-3);
  }
  data::VideoReader annotated(tmp.str("out/clip.mp4"));
  data::Image frame;
  int64_t n = 0;
  while (annotated.next(frame)) ++n;
  EXPECT_EQ(n, 17);
}

// --streams 2: two forward passes at once (one thread each) on alternate frames (or batches);
// the lines come out in the frames' order with the detections of one stream of 2 threads.
TEST(PredictVideo, StreamsKeepTheFramesInOrderWithTheSameDetections) {
  const VideoShared& s = shared();
  TempDir tmp("predict_video_streams");
  const RunResult one = predict({"--streams", "1", s.video.string()}, tmp.path());
  const RunResult two =
      predict({"--streams", "2", "--save", tmp.str("out"), s.video.string()}, tmp.path());
  const RunResult batched =
      predict({"--streams", "2", "--batch", "3", "--vid-stride", "2", s.video.string()},
              tmp.path());
  ASSERT_EQ(one.rc, 0) << one.err;
  ASSERT_EQ(two.rc, 0) << two.err;
  ASSERT_EQ(batched.rc, 0) << batched.err;
  EXPECT_EQ(one.err.find("streams at once"), std::string::npos) << one.err;
  EXPECT_NE(two.err.find(", 2 streams at once"), std::string::npos) << two.err;
  const auto a = json_lines(one.out), b = json_lines(two.out), c = json_lines(batched.out);
  ASSERT_EQ(a.size(), 50u);
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(c.size(), 25u);  // frames 0, 2, ..., 48 in batches of 3: the last holds one
  auto same = [](const nlohmann::json& x, const nlohmann::json& y) {
    ASSERT_EQ(x.at("frame"), y.at("frame"));
    const auto &bx = x.at("boxes"), &by = y.at("boxes");
    ASSERT_EQ(bx.size(), by.size()) << "frame " << x.at("frame");
    for (size_t j = 0; j < bx.size(); ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_NEAR(bx[j].at("box")[k].get<double>(), by[j].at("box")[k].get<double>(), 1e-3);
  };
  for (size_t k = 0; k < a.size(); ++k) same(a[k], b[k]);
  for (size_t k = 0; k < c.size(); ++k) same(a[2 * k], c[k]);
  data::VideoReader annotated(tmp.str("out/clip.mp4"));
  data::Image frame;
  int64_t n = 0;
  while (annotated.next(frame)) ++n;
  EXPECT_EQ(n, 50);
  const RunResult bad = predict({"--streams", "-1", s.video.string()}, tmp.path());
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--streams must be at least 1 (0: automatic)"), std::string::npos)
      << bad.err;
}

namespace {

// Writes `bytes` to `file` as a recorder would, in 40 chunks over about 2 s: the first at once (so
// the file exists when predict opens it), then one every 50 ms, stopping after `stop` bytes (all
// of them, or a writer killed halfway).
class GrowingFile {
 public:
  GrowingFile(const fs::path& file, std::string bytes, size_t stop)
      : file_(file), bytes_(std::move(bytes)), stop_(std::min(stop, bytes_.size())),
        chunk_(std::max<size_t>(bytes_.size() / 40, 4096)) {
    std::FILE* f = std::fopen(file_.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("GrowingFile: cannot create " + file_.string());
    written_ = std::min(chunk_, stop_);
    std::fwrite(bytes_.data(), 1, written_, f);
    std::fclose(f);
    thread_ = std::thread([this] { grow(); });
  }
  ~GrowingFile() { thread_.join(); }

 private:
  void grow() {
    while (written_ < stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::FILE* f = std::fopen(file_.c_str(), "ab");
      const size_t n = std::min(chunk_, stop_ - written_);
      std::fwrite(bytes_.data() + written_, 1, n, f);
      std::fclose(f);
      written_ += n;
    }
  }
  fs::path file_;
  std::string bytes_;
  size_t stop_, chunk_, written_ = 0;
  std::thread thread_;
};

}  // namespace

// A video being recorded (--follow): read as it grows, every frame predicted or counted as
// dropped, and the end comes when the writer has stopped for --stream-timeout; a writer killed
// halfway ends predict cleanly with the frames so far and its one summary line.
TEST(PredictVideo, AGrowingFileIsFollowedUntilItsWriterStops) {
  shared();
  TempDir tmp("predict_follow");
  {
    GrowingFile growing(tmp / "rec.mkv", clip_mkv(), std::string::npos);
    const RunResult r = predict(
        {"--follow", "--stream-timeout", "1", "--save", tmp.str("out"), tmp.str("rec.mkv")},
        tmp.path());
    ASSERT_EQ(r.rc, 0) << r.err;
    const int64_t predicted = static_cast<int64_t>(json_lines(r.out).size());
    const int64_t dropped = dropped_frames(r.err);
    EXPECT_GT(predicted, 0) << r.err;
    EXPECT_EQ(predicted + dropped, VideoShared::kFrames) << r.err;
    EXPECT_EQ(count_lines_with(r.err, "the file stopped growing (no new data within 1 s)"), 1u)
        << r.err;
    data::VideoReader annotated(tmp.str("out/rec.mkv"));
    data::Image frame;
    int64_t n = 0;
    while (annotated.next(frame)) ++n;
    EXPECT_EQ(n, predicted);
  }
  {
    GrowingFile killed(tmp / "cut.mkv", clip_mkv(), clip_mkv().size() / 2);
    const RunResult r =
        predict({"--follow", "--stream-timeout", "1", tmp.str("cut.mkv")}, tmp.path());
    EXPECT_EQ(r.rc, 0) << r.err;
    const size_t predicted = json_lines(r.out).size();
    EXPECT_GT(predicted, 0u) << r.err;
    EXPECT_LT(predicted, static_cast<size_t>(VideoShared::kFrames)) << r.err;
    EXPECT_EQ(count_lines_with(r.err, "stopped growing"), 1u) << r.err;
    EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
  }
}

// Standard input as MJPEG frames: predict's own --stream-out piped into a second predict.
TEST(PredictVideo, StandardInputAsMjpegFrames) {
  const VideoShared& s = shared();
  TempDir tmp("predict_stdin_mjpeg");
  for (const bool named : {true, false}) {  // --input-format mjpeg, or probed from the bytes
    const std::string out = tmp.str(named ? "named" : "probed");
    std::vector<std::string> second = {"predict", "--weights", s.weights.string(), "--threads",
                                       "1", "--conf", "0", "--json", "--save", out};
    if (named) second.insert(second.end(), {"--input-format", "mjpeg"});
    second.push_back("-");
    const RunResult r = run_shell(
        "{ " +
        hpcnet_command_line({"predict", "--weights", s.weights.string(), "--threads", "1",
                             "--stream-out", "--vid-stride", "5", s.video.string()},
                            tmp.path()) +
        " | ( " + hpcnet_command_line(second, tmp.path()) + " ); }");
    ASSERT_EQ(r.rc, 0) << r.err;
    const int64_t predicted = static_cast<int64_t>(json_lines(r.out).size());
    const int64_t dropped = dropped_frames(r.err);
    EXPECT_GT(predicted, 0) << r.err;
    EXPECT_EQ(predicted + dropped, 10) << r.err;
    EXPECT_NE(r.err.find("-: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("(mjpeg 640x480"), std::string::npos) << r.err;
    EXPECT_TRUE(fs::exists(fs::path(out) / "stdin.mp4")) << r.err;
  }
}

// Standard input as raw frames (bgr24, as OpenCV's): the detections of each frame equal those of
// the same frame as a PNG, and the annotated video has the rate --framerate gives.
TEST(PredictVideo, StandardInputAsRawFrames) {
  const VideoShared& s = shared();
  TempDir tmp("predict_stdin_raw");
  const int64_t h = 120, w = 160, n = 12;
  std::string raw;
  fs::create_directories(tmp / "frames");
  for (int64_t k = 0; k < n; ++k) {
    const data::Image im = scene_frame(k, h, w);
    for (size_t p = 0; p < im.pixels.size(); p += 3)
      raw += {static_cast<char>(im.pixels[p + 2]), static_cast<char>(im.pixels[p + 1]),
              static_cast<char>(im.pixels[p])};
    char name[32];
    std::snprintf(name, sizeof name, "%03lld.png", static_cast<long long>(k));
    write_file(tmp / "frames" / name, string_of(data::encode_png_rgb(im.pixels.data(), h, w)));
  }
  write_file(tmp / "frames.bgr", raw);
  const std::vector<std::string> raw_flags = {"--input-format", "rawvideo", "--video-size",
                                              "160x120", "--pixel-format", "bgr24"};
  std::vector<std::string> args = {"predict", "--weights", s.weights.string(), "--threads", "2",
                                   "--conf", "0", "--max-det", "5", "--json", "--framerate", "10",
                                   "--save", tmp.str("out")};
  args.insert(args.end(), raw_flags.begin(), raw_flags.end());
  args.push_back("-");
  const RunResult r = run_shell("{ cat " + shell_quote(tmp.str("frames.bgr")) + " | ( " +
                                hpcnet_command_line(args, tmp.path()) + " ); }");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<nlohmann::json> rows = json_lines(r.out);
  const int64_t dropped = dropped_frames(r.err);
  EXPECT_EQ(static_cast<int64_t>(rows.size()) + dropped, n) << r.err;
  const RunResult images = predict({tmp.str("frames")}, tmp.path());
  ASSERT_EQ(images.rc, 0) << images.err;
  const std::vector<nlohmann::json> image_rows = json_lines(images.out);
  ASSERT_EQ(image_rows.size(), static_cast<size_t>(n));
  for (const nlohmann::json& row : rows) {
    const int64_t k = row.at("frame");
    const auto &a = row.at("boxes"), &b = image_rows[static_cast<size_t>(k)].at("boxes");
    ASSERT_EQ(a.size(), b.size()) << "frame " << k;
    for (size_t j = 0; j < a.size(); ++j)
      for (int c = 0; c < 4; ++c)
        EXPECT_NEAR(a[j].at("box")[c].get<double>(), b[j].at("box")[c].get<double>(), 1e-3)
            << "frame " << k;
  }
  data::VideoReader annotated(tmp.str("out/stdin.mp4"));
  EXPECT_NEAR(annotated.fps(), 10.0, 1e-6);
  EXPECT_EQ(annotated.width(), w);
  // Raw frames from a file too (not only a pipe), and the usage errors: one line each, exit 2.
  std::vector<std::string> from_file = raw_flags;
  from_file.push_back(tmp.str("frames.bgr"));
  EXPECT_EQ(json_lines(predict(from_file, tmp.path()).out).size(), static_cast<size_t>(n));
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--input-format", "rawvideo", tmp.str("frames.bgr")}, "need their size (--video-size"},
      {{"--video-size", "160x120", s.video.string()}, "give --input-format rawvideo"},
      {{"--input-format", "rawvideo", "--video-size", "160x120", "--pixel-format", "rgb99",
        tmp.str("frames.bgr")},
       "knows no such pixel format"},
      {{"--input-format", "nosuchformat", tmp.str("frames.bgr")}, "no input format 'nosuchformat'"},
  };
  for (const auto& [flags, message] : bad) {
    const RunResult e = predict(flags, tmp.path());
    EXPECT_EQ(e.rc, 2) << message << ": " << e.err;
    EXPECT_NE(e.err.find(message), std::string::npos) << e.err;
    EXPECT_EQ(split_lines(e.err).size(), 1u) << e.err;
  }
}

// --save-txt: Ultralytics' labels/NAME_FRAME.txt per video frame (frames from 1) and
// labels/NAME.txt per image, rows "class cx cy w h" normalised (+ score with --save-conf), equal
// to the JSON lines' boxes; --save-json FILE holds the JSON lines, also with --stream-out.
TEST(PredictVideo, SaveTxtAndSaveJson) {
  const VideoShared& s = shared();
  TempDir tmp("predict_save_txt");
  data::VideoReader source(s.video.string());
  data::Image first;
  ASSERT_TRUE(source.next(first));
  write_file(tmp / "still.png", string_of(data::encode_png_rgb(first.pixels.data(), 480, 640)));
  for (const bool conf : {false, true}) {
    const std::string out = tmp.str(conf ? "with_conf" : "no_conf");
    std::vector<std::string> args = {"--vid-stride", "10", "--save-txt", "--save", out,
                                     s.video.string(), tmp.str("still.png")};
    if (conf) args.insert(args.begin(), "--save-conf");
    const RunResult r = predict(args, tmp.path());
    ASSERT_EQ(r.rc, 0) << r.err;
    const std::vector<nlohmann::json> rows = json_lines(r.out);
    ASSERT_EQ(rows.size(), 6u);  // frames 0, 10, ..., 40, then the image
    for (const nlohmann::json& row : rows) {
      const std::string name =
          row.contains("frame") ? "clip_" + std::to_string(row.at("frame").get<int64_t>() + 1)
                                : "still";
      const fs::path file = fs::path(out) / "labels" / (name + ".txt");
      ASSERT_TRUE(fs::exists(file)) << file;
      const std::vector<std::string> lines = split_lines(read_file(file));
      const auto& boxes = row.at("boxes");
      ASSERT_EQ(lines.size(), boxes.size()) << file;
      for (size_t j = 0; j < lines.size(); ++j) {
        std::istringstream in(lines[j]);
        std::vector<double> v;
        for (double x; in >> x;) v.push_back(x);
        ASSERT_EQ(v.size(), conf ? 6u : 5u) << lines[j];
        const auto& b = boxes[j].at("box");
        const double x1 = b[0], y1 = b[1], x2 = b[2], y2 = b[3];
        EXPECT_EQ(v[0], boxes[j].at("class").get<double>());
        EXPECT_NEAR(v[1], (x1 + x2) / 2 / 640, 1e-5);
        EXPECT_NEAR(v[2], (y1 + y2) / 2 / 480, 1e-5);
        EXPECT_NEAR(v[3], (x2 - x1) / 640, 1e-5);
        EXPECT_NEAR(v[4], (y2 - y1) / 480, 1e-5);
        if (conf) EXPECT_NEAR(v[5], boxes[j].at("score").get<double>(), 1e-5);
      }
    }
  }
  // --save-json with --stream-out: stdout carries the frames, the file the JSON lines.
  const RunResult streamed = predict(
      {"--stream-out", "--vid-stride", "10", "--save-json", tmp.str("lines.jsonl"),
       s.video.string()},
      tmp.path());
  ASSERT_EQ(streamed.rc, 0) << streamed.err;
  const std::vector<nlohmann::json> saved = json_lines(read_file(tmp / "lines.jsonl"));
  ASSERT_EQ(saved.size(), 5u);
  EXPECT_EQ(saved[4].at("frame"), 40);
  EXPECT_GT(saved[0].at("boxes").size(), 0u);
  // --save-txt without a folder, or for a model whose results are not boxes: one line, exit 2.
  const RunResult no_folder = predict({"--save-txt", s.video.string()}, tmp.path());
  EXPECT_EQ(no_folder.rc, 2);
  EXPECT_NE(no_folder.err.find("give --save DIR"), std::string::npos) << no_folder.err;
  save_fresh_model(tmp / "seg.safetensors", "unet_resnet18", "segment", {"a", "b"}, 64, 3);
  const RunResult seg = run_hpcnet({"predict", "--weights", tmp.str("seg.safetensors"),
                                    "--save-txt", "--save", tmp.str("seg"), s.video.string()},
                                   tmp.path());
  EXPECT_EQ(seg.rc, 2);
  EXPECT_NE(seg.err.find("--save-txt writes YOLO label rows"), std::string::npos) << seg.err;
  EXPECT_EQ(split_lines(seg.err).size(), 1u) << seg.err;
}

// Damaged videos: a Matroska file with three runs of garbage inside (the demuxer resynchronises,
// the decoder conceals) and one cut short are predicted around the damage, which the summary line
// counts; every frame of the file is predicted or counted as lost.
TEST(PredictVideo, CorruptAndTruncatedVideosArePredictedAroundTheDamage) {
  shared();
  TempDir tmp("predict_video_corrupt");
  std::string bytes = clip_mkv();
  uint64_t state = 12345;
  for (const double at : {0.3, 0.5, 0.7})
    for (size_t k = 0; k < 3000; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      bytes[static_cast<size_t>(at * static_cast<double>(bytes.size())) + k] =
          static_cast<char>(state >> 56);
    }
  write_file(tmp / "garbled.mkv", bytes);
  write_file(tmp / "cut.mkv", clip_mkv().substr(0, clip_mkv().size() * 6 / 10));
  const RunResult r = predict({"--save", tmp.str("out"), tmp.str("garbled.mkv")}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const int64_t predicted = static_cast<int64_t>(json_lines(r.out).size());
  const int64_t lost = std::max({number_before(r.err, " frames lost"),
                                 number_before(r.err, " frame lost"), int64_t{0}});
  EXPECT_GT(predicted, VideoShared::kFrames / 2) << r.err;
  EXPECT_EQ(predicted + lost, VideoShared::kFrames) << r.err;
  EXPECT_TRUE(r.err.find("damaged data") != std::string::npos ||
              r.err.find("damaged packet") != std::string::npos)
      << r.err;
  data::VideoReader annotated(tmp.str("out/garbled.mkv"));
  data::Image frame;
  int64_t n = 0;
  while (annotated.next(frame)) ++n;
  EXPECT_EQ(n, predicted);
  const RunResult cut = predict({tmp.str("cut.mkv")}, tmp.path());
  ASSERT_EQ(cut.rc, 0) << cut.err;
  EXPECT_GT(json_lines(cut.out).size(), 5u) << cut.err;
  EXPECT_LT(json_lines(cut.out).size(), static_cast<size_t>(VideoShared::kFrames)) << cut.err;
  EXPECT_EQ(cut.err.find("error"), std::string::npos) << cut.err;
}
