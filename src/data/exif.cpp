// EXIF orientation: the one tag hpcnet reads from an image's EXIF block (a JPEG's APP1 "Exif"
// marker, a PNG's eXIf chunk), and the flip or turn that makes the decoded pixels upright, as
// Pillow's ImageOps.exif_transpose, OpenCV's imread and Ultralytics show the picture. The bytes
// are untrusted: every offset is checked against the block's size before it is read (the
// libFuzzer target fuzz/fuzz_exif.cpp drives exif_orientation).
#include <cstring>

#include "src/data/internal.h"

namespace hpcnet::data::detail {
namespace {

// A TIFF integer at p (2, 4 or 8 bytes) in the block's byte order.
uint32_t get16(const uint8_t* p, bool big) {
  return big ? (uint32_t{p[0]} << 8) | p[1] : (uint32_t{p[1]} << 8) | p[0];
}
uint32_t get32(const uint8_t* p, bool big) {
  return big ? (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]
             : (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}
uint64_t get64(const uint8_t* p, bool big) {
  return big ? (uint64_t{get32(p, big)} << 32) | get32(p + 4, big)
             : (uint64_t{get32(p + 4, big)} << 32) | get32(p, big);
}

// Output row y of an oriented image reads the stored image (h x w, c bytes per pixel) from byte
// *start, stepping *step bytes per output pixel. Orientations as EXIF numbers them; the source
// pixel of output (y, x) in the comments.
void row_walk(int orientation, int64_t y, int64_t h, int64_t w, int64_t c, int64_t* start,
              int64_t* step) {
  const int64_t row = w * c;
  int64_t sy = 0, sx = 0;  // the source of output (y, 0)
  switch (orientation) {
    case 2:  // mirror left-right: (y, w-1-x)
      sy = y, sx = w - 1, *step = -c;
      break;
    case 3:  // turn 180: (h-1-y, w-1-x)
      sy = h - 1 - y, sx = w - 1, *step = -c;
      break;
    case 4:  // mirror top-bottom: (h-1-y, x)
      sy = h - 1 - y, sx = 0, *step = c;
      break;
    case 5:  // transpose: (x, y)
      sy = 0, sx = y, *step = row;
      break;
    case 6:  // turn 90 clockwise: (h-1-x, y)
      sy = h - 1, sx = y, *step = -row;
      break;
    case 7:  // transverse: (h-1-x, w-1-y)
      sy = h - 1, sx = w - 1 - y, *step = -row;
      break;
    default:  // 8, turn 90 anticlockwise: (x, w-1-y)
      sy = 0, sx = w - 1 - y, *step = row;
      break;
  }
  *start = sy * row + sx * c;
}

template <int Channels>
void orient_rows(int orientation, const uint8_t* in, int64_t h, int64_t w, uint8_t* out,
                 int64_t out_h, int64_t out_w) {
  for (int64_t y = 0; y < out_h; ++y) {
    int64_t start = 0, step = 0;
    row_walk(orientation, y, h, w, Channels, &start, &step);
    uint8_t* dst = out + y * out_w * Channels;
    for (int64_t x = 0; x < out_w; ++x) std::memcpy(dst + x * Channels, in + (start + x * step), Channels);
  }
}

// Bytes per value of a TIFF type Pillow reads (BYTE ASCII SHORT LONG RATIONAL SBYTE UNDEFINED
// SSHORT SLONG SRATIONAL FLOAT DOUBLE IFD, LONG8), 0 for others.
uint64_t type_size(uint32_t type) {
  static const uint8_t kSize[17] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8, 4, 0, 0, 8};
  return type < 17 ? kSize[type] : 0;
}

// The orientation an Orientation entry's first value gives, as exif_transpose takes it: a number
// equal to 1..8 (an integer, a float or a ratio such as 12/2), else 1. Pillow reads BYTE,
// UNDEFINED and ASCII values as bytes or text, which are no orientation.
int orientation_value(uint32_t type, const uint8_t* v, bool big) {
  double x = 0;
  switch (type) {
    case 3:  // SHORT
      x = get16(v, big);
      break;
    case 8:  // SSHORT
      x = static_cast<int16_t>(get16(v, big));
      break;
    case 4:   // LONG
    case 13:  // IFD
      x = get32(v, big);
      break;
    case 9:  // SLONG
      x = static_cast<int32_t>(get32(v, big));
      break;
    case 6:  // SBYTE
      x = static_cast<int8_t>(v[0]);
      break;
    case 16:  // LONG8
      x = static_cast<double>(get64(v, big));
      break;
    case 5:     // RATIONAL: numerator / denominator
    case 10: {  // SRATIONAL
      const uint32_t n = get32(v, big), d = get32(v + 4, big);
      if (d == 0) return 1;
      x = type == 5 ? static_cast<double>(n) / d
                    : static_cast<double>(static_cast<int32_t>(n)) / static_cast<int32_t>(d);
      break;
    }
    case 11: {  // FLOAT
      const uint32_t bits = get32(v, big);
      float f;
      std::memcpy(&f, &bits, 4);
      x = f;
      break;
    }
    case 12: {  // DOUBLE
      const uint64_t bits = get64(v, big);
      std::memcpy(&x, &bits, 8);
      break;
    }
    default:  // BYTE, ASCII, UNDEFINED
      return 1;
  }
  for (int o = 1; o <= 8; ++o)
    if (x == o) return o;
  return 1;  // NaN, fractions and other numbers too
}

}  // namespace

int exif_orientation(const uint8_t* data, size_t size) {
  // Pillow (Image.Exif.load) drops one or two "Exif\0\0" prefixes; a JPEG's APP1 has one.
  static const uint8_t kExif[6] = {'E', 'x', 'i', 'f', 0, 0};
  for (int k = 0; k < 2 && size >= 6 && std::memcmp(data, kExif, 6) == 0; ++k) {
    data += 6;
    size -= 6;
  }
  // The TIFF header: byte order, 42 (Pillow also takes it in the other byte order), IFD0's
  // offset. BigTIFF (43) has no place in EXIF.
  if (size < 8) return 1;
  bool big = false;
  if (data[0] == 'M' && data[1] == 'M')
    big = true;
  else if (!(data[0] == 'I' && data[1] == 'I'))
    return 1;
  if (!((data[2] == 0 && data[3] == 42) || (data[2] == 42 && data[3] == 0))) return 1;
  const uint64_t ifd = get32(data + 4, big);
  if (ifd > size || size - ifd < 2) return 1;
  const uint64_t entries = get16(data + ifd, big);
  // Entries of 12 bytes: tag, type, count, value (inline when it fits in 4 bytes, else its
  // offset). As Pillow's ImageFileDirectory_v2.load reads them: a list cut short ends the scan;
  // an entry of an unknown type, or of no value, is skipped; a value past the end of the block
  // ends the scan (one whose size, added to those before it, is over the block's is skipped);
  // the first Orientation entry with a value decides, by its first value.
  uint64_t out_of_line = 0;  // bytes of the values read from offsets so far
  for (uint64_t k = 0; k < entries; ++k) {
    const uint64_t at = ifd + 2 + 12 * k;  // < 2^32 + 2^20: no overflow
    if (at > size || size - at < 12) return 1;
    const uint8_t* e = data + at;
    const uint32_t type = get16(e + 2, big);
    const uint64_t unit = type_size(type);
    if (unit == 0) continue;                          // a type Pillow does not know
    const uint64_t bytes = unit * get32(e + 4, big);  // < 2^35
    if (bytes == 0) continue;
    const uint8_t* value = e + 8;
    if (bytes > 4) {
      out_of_line += bytes;
      if (out_of_line > size) continue;
      const uint64_t offset = get32(e + 8, big);
      if (offset > size || size - offset < bytes) return 1;
      value = data + offset;
    }
    if (get16(e, big) == 0x0112) return orientation_value(type, value, big);
  }
  return 1;
}

void orient_pixels(int orientation, std::vector<uint8_t>& pixels, int64_t* height, int64_t* width,
                   int channels, std::vector<uint8_t>& scratch) {
  if (orientation < 2 || orientation > 8) return;
  const int64_t h = *height, w = *width;
  HPCNET_CHECK(
      (channels == 1 || channels == 3) && pixels.size() == static_cast<size_t>(h * w * channels),
      "orient_pixels: the buffer does not hold a height x width x channels image");
  const bool swap = orientation >= 5;
  const int64_t out_h = swap ? w : h, out_w = swap ? h : w;
  scratch.resize(pixels.size());
  if (channels == 3)
    orient_rows<3>(orientation, pixels.data(), h, w, scratch.data(), out_h, out_w);
  else
    orient_rows<1>(orientation, pixels.data(), h, w, scratch.data(), out_h, out_w);
  pixels.swap(scratch);  // both keep their capacity: no allocation for the next image
  *height = out_h;
  *width = out_w;
}

}  // namespace hpcnet::data::detail
