// `hpcnet predict`: images (JPEG, PNG) and videos (whatever FFmpeg decodes), files or folders.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "hpcnet/task.h"
#include "hpcnet/train.h"

namespace hpcnet::cli {

struct PredictArgs {
  std::string weights, model, device = "auto", save, precision = "fp32";
  std::vector<std::string> images;  // files or folders: images and videos
  int top = 3, threads = 0;
  int64_t imgsz = 0, max_image_pixels = data::kDefaultMaxImagePixels, vid_stride = 1,
          batch = 1;
  // Video files on the CPU: forward passes in flight at once, each on its share of the threads
  // (0: 2 with 2 threads or more, else 1). Live sources and other devices run one.
  int streams = 0;
  double stream_timeout = 10.0;  // seconds a network stream (or a followed file) may stay silent
  bool json = false, exist_ok = false, speed = false, stream_out = false;
  // Sources (data::VideoOptions): --follow reads files as they grow; --input-format names the
  // demuxer (ffmpeg's -f: mjpeg, rawvideo, ...), with raw frames' --video-size, --pixel-format
  // (empty: rgb24) and --framerate (0: FFmpeg's default, 25).
  bool follow = false;
  std::string input_format, video_size, pixel_format;
  double framerate = 0;
  // Outputs beside --save's pictures and videos: --save-txt writes YOLO label rows (DIR/labels/
  // NAME.txt for an image, NAME_FRAME.txt for a video frame), with the score with --save-conf;
  // --save-json FILE writes every image's and frame's JSON line to FILE.
  bool save_txt = false, save_conf = false;
  std::string save_json;
  task::PredictOptions options;
};

// The task of a loaded model, at the size it was trained at.
std::unique_ptr<task::Task> task_of(const train::LoadedModel& m);

// Predicts every image and video of every path, in order. An image or video that cannot be read is
// reported on its own line and the others are still predicted; the exit code is then 2.
int cmd_predict(const PredictArgs& a);

}  // namespace hpcnet::cli
