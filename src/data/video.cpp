// VideoReader and VideoWriter (include/hpcnet/video.h) over FFmpeg 5.1's libraries: libavformat
// demuxes and muxes, libavcodec decodes and encodes, libswscale converts between the codec's
// pixel format and RGB24.
#include "hpcnet/video.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavdevice/avdevice.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/parseutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "hpcnet/error.h"

namespace hpcnet::data {
namespace {

std::string av_message(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

std::string lower_extension(const std::string& name) {
  std::string ext = std::filesystem::path(name).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;

FramePtr new_frame() {
  FramePtr f(av_frame_alloc());
  HPCNET_CHECK(f != nullptr, "video: out of memory (av_frame_alloc)");
  return f;
}
PacketPtr new_packet() {
  PacketPtr p(av_packet_alloc());
  HPCNET_CHECK(p != nullptr, "video: out of memory (av_packet_alloc)");
  return p;
}

// FFmpeg's own log lines off (HPCNET_FFMPEG_LOG=1 keeps its warnings): hpcnet says what went
// wrong in its one-line errors, and the encoders' statistics are not for users.
void quiet_ffmpeg_log() {
  static const bool once = [] {
    const char* e = std::getenv("HPCNET_FFMPEG_LOG");
    av_log_set_level(e != nullptr && std::string(e) == "1" ? AV_LOG_WARNING : AV_LOG_QUIET);
    return true;
  }();
  (void)once;
}

}  // namespace

bool is_stream_url(const std::string& source) {
  const size_t colon = source.find("://");
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i)
    if (!std::isalnum(static_cast<unsigned char>(source[i])) && source[i] != '+' &&
        source[i] != '-' && source[i] != '.')
      return false;
  return source.compare(0, colon, "file") != 0;
}

bool is_camera(const std::string& source) {
  std::string digits = source;
  if (source.rfind("/dev/video", 0) == 0) digits = source.substr(10);
  return !digits.empty() && digits.size() <= 3 &&
         std::all_of(digits.begin(), digits.end(),
                     [](unsigned char c) { return std::isdigit(c) != 0; });
}

bool is_live_source(const std::string& source) {
  return source == "-" || is_camera(source) || is_stream_url(source);
}

bool is_video_name(const std::string& name) {
  static const char* const kExtensions[] = {".mp4", ".m4v", ".mkv", ".mov", ".avi", ".webm",
                                            ".mpg", ".mpeg", ".ts", ".flv", ".wmv"};
  const std::string ext = lower_extension(name);
  for (const char* e : kExtensions)
    if (ext == e) return true;
  return false;
}

// ---- reading ----

struct VideoReader::Impl {
  std::string path;
  AVFormatContext* format = nullptr;
  AVCodecContext* decoder = nullptr;
  SwsContext* to_rgb = nullptr;
  int stream = -1;
  FramePtr frame = new_frame();
  PacketPtr packet = new_packet();
  bool input_done = false, decoder_done = false;
  int64_t bad_packets = 0, missing_frames = 0, damaged_frames = 0;
  int64_t last_dts = AV_NOPTS_VALUE, last_duration = 0;
  std::string end_reason;
  double timeout_s = 10.0;
  bool follow = false;
  std::string format_name, video_size, pixel_format;
  double framerate = 0;
  // Opening a stream ends by then (FFmpeg's interrupt callback).
  std::chrono::steady_clock::time_point open_deadline = std::chrono::steady_clock::time_point::max();

  ~Impl() {
    sws_freeContext(to_rgb);
    avcodec_free_context(&decoder);
    avformat_close_input(&format);
  }

  InputError fail(const std::string& what) const { return InputError(path + ": " + what); }

  // The demuxer options of the source (and its input format, for a camera or a named format).
  AVDictionary* source_options(std::string* url, const AVInputFormat** input_format) {
    // A file reads only files: a playlist or reference file inside it cannot make FFmpeg open
    // network addresses or devices. (URLs are opened with FFmpeg's network protocols.)
    // Every check that can throw comes before the first av_dict_set (nothing to free then).
    if (is_camera(path)) avdevice_register_all();  // V4L2's input formats, named or not
    if (!format_name.empty()) {
      *input_format = av_find_input_format(format_name.c_str());
      if (*input_format == nullptr)
        throw fail("FFmpeg has no input format '" + format_name +
                   "' (mjpeg, rawvideo, ...; `ffmpeg -demuxers` lists them)");
    }
    AVDictionary* options = nullptr;
    *url = path;
    if (path == "-") {  // standard input: a container FFmpeg probes, MJPEG or raw frames
      *url = "pipe:0";
      av_dict_set(&options, "protocol_whitelist", "pipe", 0);
    } else if (is_camera(path)) {
      *url = path.rfind("/dev/", 0) == 0 ? path : "/dev/video" + path;
      std::error_code ec;
      if (!std::filesystem::exists(*url, ec))
        throw fail("no camera at " + *url + " (V4L2; `ls /dev/video*` lists the cameras)");
      if (*input_format == nullptr) *input_format = av_find_input_format("video4linux2");
      if (*input_format == nullptr) throw fail("this FFmpeg has no V4L2 input (libavdevice)");
    } else if (!is_stream_url(path)) {
      av_dict_set(&options, "protocol_whitelist", "file", 0);
      if (follow) {  // wait at the end for more, read front to back as a stream
        av_dict_set(&options, "follow", "1", 0);
        av_dict_set(&options, "seekable", "0", 0);
      }
    }
    if (!video_size.empty()) av_dict_set(&options, "video_size", video_size.c_str(), 0);
    if (!pixel_format.empty()) av_dict_set(&options, "pixel_format", pixel_format.c_str(), 0);
    if (framerate > 0) av_dict_set(&options, "framerate", std::to_string(framerate).c_str(), 0);
    if (is_stream_url(path) || follow) {  // a source that never answers: a timeout, not a hang
      const std::string us = std::to_string(static_cast<int64_t>(timeout_s * 1e6));
      av_dict_set(&options, "rw_timeout", us.c_str(), 0);
      if (!follow) av_dict_set(&options, "timeout", us.c_str(), 0);
      format = avformat_alloc_context();
      HPCNET_CHECK(format != nullptr, "video: out of memory (avformat_alloc_context)");
      open_deadline = std::chrono::steady_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6));
      format->interrupt_callback = {&Impl::interrupted, this};
    }
    return options;
  }

  // Raw frames need their size, and their pixel format must be one FFmpeg knows.
  void check_raw_options() const {
    if (format_name == "rawvideo" && video_size.empty())
      throw fail("raw frames need their size (--video-size WxH, as ffmpeg's -video_size)");
    int w = 0, h = 0;
    if (!video_size.empty() && av_parse_video_size(&w, &h, video_size.c_str()) < 0)
      throw fail("--video-size " + video_size + ": not a frame size (WxH, e.g. 640x480)");
    if (format_name == "rawvideo" && av_get_pix_fmt(pixel_format.c_str()) == AV_PIX_FMT_NONE)
      throw fail("--pixel-format " + pixel_format +
                 ": FFmpeg knows no such pixel format (rgb24, bgr24, yuv420p, gray, ...; "
                 "`ffmpeg -pix_fmts` lists them)");
  }

  void open() {
    check_raw_options();
    std::string url;
    const AVInputFormat* input_format = nullptr;
    AVDictionary* options = source_options(&url, &input_format);
    int err = avformat_open_input(&format, url.c_str(), input_format, &options);
    // Options the demuxer did not take: the raw-frame ones given to a format that has none.
    const bool unused_size = av_dict_get(options, "video_size", nullptr, 0) != nullptr;
    av_dict_free(&options);
    if (err < 0) throw fail("cannot open as a video (" + open_error(err) + ")");
    // From here on silences are rw_timeout's: an interrupt would end the input for good (a slow
    // writer of a followed file can make reading the streams' first frames outlast the timeout).
    open_deadline = std::chrono::steady_clock::time_point::max();
    if (unused_size)
      throw fail("--video-size is for raw frames (--input-format rawvideo); this input says its "
                 "own size");
    err = avformat_find_stream_info(format, nullptr);
    if (err < 0) throw fail("cannot read the video's streams (" + open_error(err) + ")");
    const AVCodec* codec = nullptr;
    stream = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (stream < 0 || codec == nullptr)
      throw fail(stream == AVERROR_DECODER_NOT_FOUND
                     ? "no decoder for its video stream in this FFmpeg"
                     : "not a video (no video stream)");
    decoder = avcodec_alloc_context3(codec);
    HPCNET_CHECK(decoder != nullptr, "video: out of memory (avcodec_alloc_context3)");
    err = avcodec_parameters_to_context(decoder, format->streams[stream]->codecpar);
    if (err < 0) throw fail("bad video stream parameters (" + av_message(err) + ")");
    decoder->thread_count = 1;  // one decoding thread: it runs beside the model's threads
    err = avcodec_open2(decoder, codec, nullptr);
    if (err < 0) throw fail("cannot open the " + std::string(codec->name) + " decoder (" +
                            av_message(err) + ")");
    if (decoder->width <= 0 || decoder->height <= 0) throw fail("the video stream has no size");
  }

  // Why opening failed: FFmpeg's message, or for a stream silent past the timeout, that.
  std::string open_error(int err) const {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
    // (A followed file's silence past rw_timeout reads as EIO.)
    if (std::chrono::steady_clock::now() > open_deadline || err == AVERROR(ETIMEDOUT) ||
        (follow && err == AVERROR(EIO)))
      return std::string("no answer within ") + seconds + " s; --stream-timeout sets the wait";
    return av_message(err);
  }

  // FFmpeg's interrupt callback: non-zero ends a blocking open of a stream past its deadline.
  static int interrupted(void* self) {
    return std::chrono::steady_clock::now() > static_cast<Impl*>(self)->open_deadline ? 1 : 0;
  }

  // Packets a demuxer skipped without a word (Matroska and MPEG-TS resynchronise past damaged
  // bytes): a jump of the video packets' decoding timestamps past the previous packet's duration
  // counts the frames that fit in the gap.
  void count_gap() {
    if (packet->dts == AV_NOPTS_VALUE) return;
    if (last_dts != AV_NOPTS_VALUE && last_duration > 0 && packet->dts > last_dts + last_duration)
      missing_frames += (packet->dts - last_dts + last_duration / 2) / last_duration - 1;
    last_dts = packet->dts;
    last_duration = packet->duration;
  }

  // Feeds the decoder the next packet of the stream; false once the input is exhausted.
  bool feed() {
    while (true) {
      const int err = av_read_frame(format, packet.get());
      if (err == AVERROR_EOF) break;
      if (err == AVERROR_INVALIDDATA) {  // a damaged container: skip what cannot be read, count it
        ++bad_packets;
        if (bad_packets > 1000) break;  // not a stream of packets any more
        continue;
      }
      if (err < 0) {  // the input itself failed: a stream gone, a read error
        end_reason = av_message(err);
        break;
      }
      if (packet->stream_index != stream) {
        av_packet_unref(packet.get());
        continue;
      }
      count_gap();
      const int sent = avcodec_send_packet(decoder, packet.get());
      av_packet_unref(packet.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) ++bad_packets;
      return true;
    }
    if (follow) {  // a followed file ends when its writer has stopped for timeout_s
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
      end_reason = std::string("no new data within ") + seconds + " s";
    }
    avcodec_send_packet(decoder, nullptr);  // drain
    input_done = true;
    return false;
  }

  void convert(Image& out) {
    const int w = frame->width, h = frame->height;
    to_rgb = sws_getCachedContext(to_rgb, w, h, static_cast<AVPixelFormat>(frame->format), w, h,
                                  AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
    HPCNET_CHECK(to_rgb != nullptr, "video: no conversion from the frame's pixel format to RGB");
    out.height = h;
    out.width = w;
    out.pixels.resize(static_cast<size_t>(h) * static_cast<size_t>(w) * 3);
    uint8_t* dst[4] = {out.pixels.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {3 * w, 0, 0, 0};
    sws_scale(to_rgb, frame->data, frame->linesize, 0, h, dst, dst_stride);
  }
};

VideoReader::VideoReader(const std::string& path, const VideoOptions& options)
    : impl_(std::make_unique<Impl>()) {
  quiet_ffmpeg_log();
  HPCNET_REQUIRE(options.timeout_s > 0, "video: the stream timeout must be positive");
  impl_->path = path;
  impl_->timeout_s = options.timeout_s;
  impl_->follow = options.follow;
  impl_->format_name = options.format;
  impl_->video_size = options.video_size;
  impl_->pixel_format = options.format == "rawvideo" ? options.pixel_format : "";
  impl_->framerate = options.framerate;
  impl_->open();
}

VideoReader::~VideoReader() = default;

bool VideoReader::next(Image& out) {
  Impl& d = *impl_;
  while (!d.decoder_done) {
    const int err = avcodec_receive_frame(d.decoder, d.frame.get());
    if (err == 0) {
      // Decoded, but over damaged data (error concealment): predicted, and counted.
      if (d.frame->decode_error_flags != 0 || (d.frame->flags & AV_FRAME_FLAG_CORRUPT) != 0)
        ++d.damaged_frames;
      d.convert(out);
      av_frame_unref(d.frame.get());
      return true;
    }
    if (err == AVERROR_EOF) {
      d.decoder_done = true;
      break;
    }
    if (err != AVERROR(EAGAIN)) {  // a frame that would not decode: counted, skipped
      ++d.bad_packets;
      continue;
    }
    if (!d.input_done) d.feed();
  }
  return false;
}

int64_t VideoReader::height() const { return impl_->decoder->height; }
int64_t VideoReader::width() const { return impl_->decoder->width; }

double VideoReader::fps() const {
  const AVStream* s = impl_->format->streams[impl_->stream];
  AVRational r = s->avg_frame_rate;
  if (r.num <= 0 || r.den <= 0) r = s->r_frame_rate;
  if (r.num <= 0 || r.den <= 0) return 25.0;
  return av_q2d(r);
}

int64_t VideoReader::frame_count() const {
  return std::max<int64_t>(impl_->format->streams[impl_->stream]->nb_frames, 0);
}

int64_t VideoReader::bad_packets() const { return impl_->bad_packets; }
int64_t VideoReader::missing_frames() const { return impl_->missing_frames; }
int64_t VideoReader::damaged_frames() const { return impl_->damaged_frames; }
std::string VideoReader::codec() const { return impl_->decoder->codec->name; }
const std::string& VideoReader::end_reason() const { return impl_->end_reason; }

// ---- writing ----

struct VideoWriter::Impl {
  std::string path;
  AVFormatContext* format = nullptr;
  AVCodecContext* encoder = nullptr;
  AVStream* stream = nullptr;
  SwsContext* from_rgb = nullptr;
  FramePtr frame = new_frame();
  PacketPtr packet = new_packet();
  int64_t height = 0, width = 0, written = 0;
  bool header = false, closed = false;

  ~Impl() {
    sws_freeContext(from_rgb);
    avcodec_free_context(&encoder);
    if (format != nullptr) {
      if (format->pb != nullptr) avio_closep(&format->pb);
      avformat_free_context(format);
    }
  }

  InputError fail(const std::string& what) const { return InputError(path + ": " + what); }

  bool to_stdout() const { return path == "-"; }

  const AVCodec* pick_encoder() const {
    if (to_stdout()) {
      const AVCodec* c = avcodec_find_encoder(AV_CODEC_ID_MJPEG);
      if (c == nullptr) throw fail("this FFmpeg has no MJPEG encoder");
      return c;
    }
    const std::string ext = lower_extension(path);
    const bool h264_container = ext == ".mp4" || ext == ".mkv" || ext == ".mov" || ext == ".m4v";
    if (!h264_container && ext != ".avi")
      throw fail("cannot write video of type '" + ext + "' (write .mp4, .mkv, .mov, .m4v or .avi)");
    const AVCodec* c = h264_container ? avcodec_find_encoder_by_name("libx264") : nullptr;
    if (c == nullptr) c = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    if (c == nullptr) throw fail("this FFmpeg has neither the libx264 nor the MPEG-4 encoder");
    return c;
  }

  void open(double fps) {
    const AVCodec* codec = pick_encoder();
    int err = to_stdout()
                  ? avformat_alloc_output_context2(&format, nullptr, "mjpeg", "pipe:1")
                  : avformat_alloc_output_context2(&format, nullptr, nullptr, path.c_str());
    if (err < 0 || format == nullptr)
      throw fail("no container for this file name (" + av_message(err) + ")");
    stream = avformat_new_stream(format, nullptr);
    encoder = avcodec_alloc_context3(codec);
    HPCNET_CHECK(stream != nullptr && encoder != nullptr, "video: out of memory (encoder)");
    const AVRational rate = av_d2q(fps > 0 ? fps : 25.0, 100000);
    encoder->width = static_cast<int>(width);
    encoder->height = static_cast<int>(height);
    encoder->pix_fmt = to_stdout() ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_YUV420P;  // MJPEG: full range
    encoder->time_base = av_inv_q(rate);
    encoder->framerate = rate;
    encoder->gop_size = 12;
    encoder->thread_count = 1;  // one encoding thread, beside the model's threads
    if (codec->id == AV_CODEC_ID_MPEG4) encoder->bit_rate = 4'000'000;
    if (codec->id == AV_CODEC_ID_MJPEG) {  // fixed quality, as ffmpeg -q:v 3
      encoder->flags |= AV_CODEC_FLAG_QSCALE;
      encoder->global_quality = FF_QP2LAMBDA * 3;
    }
    if (format->oformat->flags & AVFMT_GLOBALHEADER) encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary* options = nullptr;
    if (std::strcmp(codec->name, "libx264") == 0) {
      // ultrafast: on 2 cores beside the model, the whole yolov8n 640 px pipeline ran at 16.0 FPS,
      // 13.4 with veryfast (files ~1.5x larger); HPCNET_X264_PRESET picks another.
      const char* preset = std::getenv("HPCNET_X264_PRESET");
      av_dict_set(&options, "preset", preset != nullptr ? preset : "ultrafast", 0);
      av_dict_set(&options, "crf", "23", 0);
    }
    err = avcodec_open2(encoder, codec, &options);
    av_dict_free(&options);
    if (err < 0) throw fail("cannot open the " + std::string(codec->name) + " encoder (" +
                            av_message(err) + ")");
    err = avcodec_parameters_from_context(stream->codecpar, encoder);
    if (err < 0) throw fail("bad encoder parameters (" + av_message(err) + ")");
    stream->time_base = encoder->time_base;
    stream->avg_frame_rate = rate;
    if (!(format->oformat->flags & AVFMT_NOFILE)) {
      err = avio_open(&format->pb, to_stdout() ? "pipe:1" : path.c_str(), AVIO_FLAG_WRITE);
      if (err < 0) throw fail("cannot create the file (" + av_message(err) + ")");
    }
    err = avformat_write_header(format, nullptr);
    if (err < 0) throw fail("cannot write the video header (" + av_message(err) + ")");
    header = true;
    frame->format = encoder->pix_fmt;
    frame->width = encoder->width;
    frame->height = encoder->height;
    err = av_frame_get_buffer(frame.get(), 0);
    HPCNET_CHECK(err >= 0, "video: cannot allocate a frame (" + av_message(err) + ")");
  }

  // Sends a frame (or the end, for nullptr) and writes every packet the encoder has ready.
  void encode(AVFrame* f) {
    int err = avcodec_send_frame(encoder, f);
    if (err < 0) throw fail("encoding failed (" + av_message(err) + ")");
    while ((err = avcodec_receive_packet(encoder, packet.get())) == 0) {
      av_packet_rescale_ts(packet.get(), encoder->time_base, stream->time_base);
      packet->stream_index = stream->index;
      err = av_interleaved_write_frame(format, packet.get());
      if (err < 0) throw fail("cannot write the video (" + av_message(err) + ")");
    }
    if (err != AVERROR(EAGAIN) && err != AVERROR_EOF)
      throw fail("encoding failed (" + av_message(err) + ")");
  }
};

VideoWriter::VideoWriter(const std::string& path, int64_t height, int64_t width, double fps)
    : impl_(std::make_unique<Impl>()) {
  HPCNET_REQUIRE(height >= 2 && width >= 2, path + ": a video frame needs at least 2x2 pixels");
  quiet_ffmpeg_log();
  impl_->path = path;
  impl_->height = height & ~int64_t{1};  // yuv420p: even sizes
  impl_->width = width & ~int64_t{1};
  impl_->open(fps);
}

VideoWriter::~VideoWriter() {
  if (impl_ && impl_->header && !impl_->closed) {
    try {
      close();
    } catch (...) {  // a destructor does not throw; close() is where errors are seen
    }
  }
}

void VideoWriter::write(const Image& im) {
  Impl& d = *impl_;
  HPCNET_REQUIRE(!d.closed, d.path + ": the video is already closed");
  HPCNET_REQUIRE(im.height >= d.height && im.width >= d.width &&
                     im.pixels.size() == static_cast<size_t>(im.height * im.width * 3),
                 d.path + ": a frame of " + std::to_string(im.width) + "x" +
                     std::to_string(im.height) + " for a video of " + std::to_string(d.width) +
                     "x" + std::to_string(d.height));
  const int w = static_cast<int>(d.width), h = static_cast<int>(d.height);
  d.from_rgb = sws_getCachedContext(d.from_rgb, w, h, AV_PIX_FMT_RGB24, w, h, d.encoder->pix_fmt,
                                    SWS_BILINEAR, nullptr, nullptr, nullptr);
  HPCNET_CHECK(d.from_rgb != nullptr, "video: no conversion from RGB to yuv420p");
  const int err = av_frame_make_writable(d.frame.get());
  HPCNET_CHECK(err >= 0, "video: cannot write the frame (" + av_message(err) + ")");
  const uint8_t* src[4] = {im.pixels.data(), nullptr, nullptr, nullptr};
  const int src_stride[4] = {static_cast<int>(3 * im.width), 0, 0, 0};  // a cut odd column stays
  sws_scale(d.from_rgb, src, src_stride, 0, h, d.frame->data, d.frame->linesize);
  d.frame->pts = d.written++;
  d.encode(d.frame.get());
}

void VideoWriter::close() {
  Impl& d = *impl_;
  if (d.closed) return;
  d.closed = true;
  d.encode(nullptr);
  const int err = av_write_trailer(d.format);
  if (err < 0) throw d.fail("cannot finish the video (" + av_message(err) + ")");
  if (d.format->pb != nullptr) avio_closep(&d.format->pb);
}

std::string VideoWriter::codec() const { return impl_->encoder->codec->name; }
int64_t VideoWriter::frames() const { return impl_->written; }

}  // namespace hpcnet::data
