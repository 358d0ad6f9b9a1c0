// Fuzzes VideoReader (include/hpcnet/video.h: FFmpeg's demuxers and decoders behind hpcnet's
// reader) on a file of arbitrary bytes: the container and packet path of `hpcnet predict VIDEO`.
// Bytes that begin "MJPG" are read as `--input-format mjpeg`, "RAW!" as raw frames
// (`--input-format rawvideo --video-size 16x12 --pixel-format yuv420p`), the rest probed.
// Only hpcnet's typed errors are expected, and every frame returned has the size it says.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hpcnet/error.h"
#include "hpcnet/video.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/hpcnet_fuzz_video_" + std::to_string(::getpid()) + ".bin";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    hpcnet::data::VideoOptions o;
    const std::string head(reinterpret_cast<const char*>(data), size < 4 ? size : 4);
    if (head == "MJPG") o.format = "mjpeg";
    if (head == "RAW!") {
      o.format = "rawvideo";
      o.video_size = "16x12";
      o.pixel_format = "yuv420p";
    }
    hpcnet::data::VideoReader reader(path, o);
    hpcnet::data::Image frame;
    for (int k = 0; k < 16 && reader.next(frame); ++k)
      if (frame.height <= 0 || frame.width <= 0 ||
          frame.pixels.size() != static_cast<size_t>(frame.height * frame.width * 3))
        std::abort();
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
