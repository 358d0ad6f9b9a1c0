// PNG encoding into memory (libpng), for the pictures predict writes: RGB images (overlays) and
// palette images whose index is the class (masks that image tools show in colour).
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "hpcnet/data.h"

namespace hpcnet::data {
namespace {

struct PngOut {
  std::vector<uint8_t> bytes;
  char message[256] = {0};
};

void png_write_mem(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<PngOut*>(png_get_io_ptr(png));
  try {  // no C++ exception may cross libpng's C frames
    out->bytes.insert(out->bytes.end(), data, data + n);
  } catch (const std::exception&) {
    png_error(png, "out of memory");
  }
}
void png_flush_mem(png_structp) {}
void png_on_error(png_structp png, png_const_charp msg) {
  auto* out = static_cast<PngOut*>(png_get_error_ptr(png));
  std::snprintf(out->message, sizeof(out->message), "%s", msg);
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

// Returns nullptr or the error. Holds setjmp: no C++ objects with destructors in this frame but
// the caller's.
const char* encode(PngOut* out, const uint8_t* pixels, int64_t height, int64_t width, int channels,
                   const std::vector<std::array<uint8_t, 3>>* palette) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, out, png_on_error, png_on_warning);
  if (!png) return "out of memory";
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    return "out of memory";
  }
  png_color colors[256];
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return out->message;
  }
  png_set_write_fn(png, out, png_write_mem, png_flush_mem);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               palette ? PNG_COLOR_TYPE_PALETTE : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (palette) {
    for (size_t i = 0; i < palette->size(); ++i)
      colors[i] = {(*palette)[i][0], (*palette)[i][1], (*palette)[i][2]};
    png_set_PLTE(png, info, colors, static_cast<int>(palette->size()));
  }
  png_write_info(png, info);
  for (int64_t y = 0; y < height; ++y)
    png_write_row(png, const_cast<png_bytep>(pixels + y * width * channels));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return nullptr;
}

}  // namespace

std::vector<uint8_t> encode_png_rgb(const uint8_t* rgb, int64_t height, int64_t width) {
  HPCNET_REQUIRE(height > 0 && width > 0, "encode_png: empty image");
  PngOut out;
  if (const char* e = encode(&out, rgb, height, width, 3, nullptr))
    throw Error(std::string("encode_png: ") + e);
  return std::move(out.bytes);
}

std::vector<uint8_t> encode_png_index(const uint8_t* index, int64_t height, int64_t width,
                                      const std::vector<std::array<uint8_t, 3>>& palette) {
  HPCNET_REQUIRE(height > 0 && width > 0, "encode_png: empty image");
  HPCNET_REQUIRE(!palette.empty() && palette.size() <= 256, "encode_png: 1 to 256 palette colours");
  for (int64_t i = 0; i < height * width; ++i)
    HPCNET_REQUIRE(index[i] < palette.size(), "encode_png: index " + std::to_string(index[i]) +
                                                  " past the palette (" +
                                                  std::to_string(palette.size()) + " colours)");
  PngOut out;
  if (const char* e = encode(&out, index, height, width, 1, &palette))
    throw Error(std::string("encode_png: ") + e);
  return std::move(out.bytes);
}

std::vector<std::array<uint8_t, 3>> class_palette(int64_t n) {
  // PASCAL VOC's colour map (bits of the index spread over the high bits of R, G and B), so that
  // masks look as VOC users know them; index 255 (ignore) is white.
  std::vector<std::array<uint8_t, 3>> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int r = 0, g = 0, b = 0, c = static_cast<int>(i);
    for (int j = 0; j < 8; ++j, c >>= 3) {
      r |= ((c >> 0) & 1) << (7 - j);
      g |= ((c >> 1) & 1) << (7 - j);
      b |= ((c >> 2) & 1) << (7 - j);
    }
    p[static_cast<size_t>(i)] = {static_cast<uint8_t>(r), static_cast<uint8_t>(g),
                                 static_cast<uint8_t>(b)};
  }
  if (n == 256) p[255] = {255, 255, 255};
  return p;
}

}  // namespace hpcnet::data
