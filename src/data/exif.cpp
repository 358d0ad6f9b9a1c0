// EXIF orientation: the one tag hpcnet reads from an image's EXIF block (a JPEG's APP1 "Exif"
// marker, a PNG's eXIf chunk), and the flip or turn that makes the decoded pixels upright, as
// Pillow's ImageOps.exif_transpose, OpenCV's imread and Ultralytics show the picture. The bytes
// are untrusted: every offset is checked against the block's size before it is read (the
// libFuzzer target fuzz/fuzz_exif.cpp drives exif_orientation).
#include <cstring>

#include "src/data/internal.h"

namespace hpcnet::data::detail {
namespace {

// A TIFF integer at p (2 or 4 bytes) in the block's byte order.
uint32_t get16(const uint8_t* p, bool big) {
  return big ? (uint32_t{p[0]} << 8) | p[1] : (uint32_t{p[1]} << 8) | p[0];
}
uint32_t get32(const uint8_t* p, bool big) {
  return big ? (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]
             : (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
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

template <int C>
void orient_rows(int orientation, const uint8_t* in, int64_t h, int64_t w, uint8_t* out,
                 int64_t out_h, int64_t out_w) {
  for (int64_t y = 0; y < out_h; ++y) {
    int64_t start = 0, step = 0;
    row_walk(orientation, y, h, w, C, &start, &step);
    uint8_t* dst = out + y * out_w * C;
    for (int64_t x = 0; x < out_w; ++x) std::memcpy(dst + x * C, in + (start + x * step), C);
  }
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
  // Entries of 12 bytes: tag, type, count, value (or its offset). A list cut short by the end of
  // the block keeps the entries read before it, as Pillow does.
  for (uint64_t k = 0; k < entries; ++k) {
    const uint64_t at = ifd + 2 + 12 * k;  // < 2^32 + 2^20: no overflow
    if (at > size || size - at < 12) break;
    const uint8_t* e = data + at;
    if (get16(e, big) != 0x0112) continue;  // Orientation
    const uint32_t type = get16(e + 2, big);
    // Types Pillow does not know are skipped (a later entry may still give the tag).
    if (type == 0 || (type > 13 && type != 16)) continue;
    if (get32(e + 4, big) != 1) return 1;  // a count other than 1: no single value
    int64_t v = 0;
    if (type == 3)
      v = get16(e + 8, big);  // SHORT
    else if (type == 8)
      v = static_cast<int16_t>(get16(e + 8, big));  // SSHORT
    else if (type == 4 || type == 13)
      v = get32(e + 8, big);  // LONG, IFD
    else if (type == 9)
      v = static_cast<int32_t>(get32(e + 8, big));  // SLONG
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
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
