// Video in and out through FFmpeg's libraries (libavformat, libavcodec, libswscale; Debian's
// packages, installed by scripts/setup.sh): a reader that decodes any container and codec FFmpeg
// knows into RGB frames, and a writer that encodes RGB frames into a video file. `hpcnet predict`
// reads videos with the first and writes the annotated video with the second.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hpcnet/data.h"

namespace hpcnet::data {

// Whether a file name is a video hpcnet predicts on, by its extension (case-insensitive): .mp4,
// .m4v, .mkv, .mov, .avi, .webm, .mpg, .mpeg, .ts, .flv, .wmv. (Streams and cameras come as URLs
// and device paths, not names.)
bool is_video_name(const std::string& name);

// Whether a predict input is a network stream rather than a file: a URL with a scheme other than
// file: (rtsp://, rtmp://, http://, https://, tcp://, udp://, srt://, ...).
bool is_stream_url(const std::string& source);

// A V4L2 camera: "/dev/videoN", or "N" alone as Ultralytics' source=0.
bool is_camera(const std::string& source);
// A source read as it comes, where the newest frame wins while the model is busy: a network
// stream, a camera, or "-" (standard input: a video, MJPEG or raw frames piped in). (A followed
// file, VideoOptions::follow, is live too; that is the caller's to say.)
bool is_live_source(const std::string& source);

struct VideoOptions {
  // Network streams and followed files: how long opening, or waiting for the next packet, may
  // take before the stream counts as gone (seconds; FFmpeg's rw_timeout / timeout, and an
  // interrupt while opening).
  double timeout_s = 10.0;
  // A file that grows (a video being recorded): at its end, wait for more (FFmpeg's file
  // protocol option follow=1) until nothing new comes for timeout_s; then it ends as a stream
  // does, end_reason() saying so. The file is read front to back (seekable=0), as a stream.
  bool follow = false;
  // The input's format, as ffmpeg's `-f` before `-i`: a libavformat demuxer name ("mjpeg" for
  // JPEG frames one after another, "rawvideo" for raw frames); empty: probed from the bytes.
  std::string format;
  // Raw frames (format "rawvideo"): their size "WxH" (or an FFmpeg abbreviation such as "vga"),
  // required; their pixel format (FFmpeg's name: rgb24, bgr24, yuv420p, gray, ...). Both as
  // ffmpeg's -video_size and -pixel_format.
  std::string video_size, pixel_format = "rgb24";
  // Frames per second of an input that does not say (raw frames, MJPEG; ffmpeg's -framerate):
  // 0 leaves FFmpeg's default, 25.
  double framerate = 0;
};

// Decodes the best video stream of a file (or anything libavformat opens: a network stream, a
// camera, "-" for standard input, a file still being written with VideoOptions::follow) frame by
// frame.
// Packets the decoder rejects (a corrupt or truncated file) are skipped and counted; the frames
// around them are still returned. InputError (one line, naming the file) when the file cannot be
// opened or holds no decodable video stream.
class VideoReader {
 public:
  explicit VideoReader(const std::string& path, const VideoOptions& options = {});
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  // The next frame as (height, width, 3) RGB; false after the last one.
  bool next(Image& frame);
  int64_t height() const;
  int64_t width() const;
  double fps() const;            // the stream's average frame rate (25 when it does not say)
  int64_t frame_count() const;   // as the container says; 0 when it does not
  int64_t bad_packets() const;   // packets skipped because the decoder rejected them
  // Frames the demuxer skipped over damaged bytes without a word, from the jumps of the packets'
  // timestamps (Matroska and MPEG-TS resynchronise so).
  int64_t missing_frames() const;
  // Frames the decoder returned over damaged data (its error concealment); they are returned.
  int64_t damaged_frames() const;
  std::string codec() const;     // the decoder's name, e.g. "h264"
  // Why the input ended before its end of file, once next() has returned false: empty at a
  // normal end, else FFmpeg's reason ("Connection reset by peer", "Connection timed out"); for a
  // followed file "no new data within S s".
  const std::string& end_reason() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Encodes RGB frames into a video file: H.264 (libx264, yuv420p, preset ultrafast or
// $HPCNET_X264_PRESET, CRF 23) in the
// container the file's extension names (.mp4, .mkv, .mov, .m4v), MPEG-4 part 2 in .avi; any other
// extension is an InputError naming the ones served; the path "-" writes MJPEG (one JPEG per
// frame, quality 3) to standard output, for `ffplay -f mjpeg -`. Odd sizes are cut to even. close()
// flushes the encoder and writes the trailer; the destructor closes a writer not yet closed.
class VideoWriter {
 public:
  VideoWriter(const std::string& path, int64_t height, int64_t width, double fps);
  ~VideoWriter();
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  void write(const Image& frame);  // of the size given at construction
  void close();
  std::string codec() const;  // the encoder's name, e.g. "libx264"
  int64_t frames() const;     // frames written so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpcnet::data
