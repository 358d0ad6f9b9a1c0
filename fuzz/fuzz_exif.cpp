// Fuzzes the EXIF orientation reader (detail::exif_orientation: a TIFF header and IFD0 from a
// JPEG's APP1 or a PNG's eXIf chunk, untrusted offsets and counts) and the turn it selects
// (detail::orient_pixels): the orientation must be 1..8, and turning a small image by it and back
// by its inverse must give the image again. JPEGs and PNGs that carry EXIF blocks are seeds of
// the image target too (fuzz_make_corpus), which drives the same reader through the decoders.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "src/data/internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpcnet::data::detail;
  const int o = exif_orientation(data, size);
  if (o < 1 || o > 8) std::abort();
  // A small image whose shape and channels come from the input's first bytes.
  const int64_t h = size > 0 ? 1 + data[0] % 7 : 3, w = size > 1 ? 1 + data[1] % 5 : 2;
  const int channels = size > 2 && data[2] % 2 ? 3 : 1;
  std::vector<uint8_t> px(static_cast<size_t>(h * w * channels)), scratch;
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::vector<uint8_t> original = px;
  int64_t hh = h, ww = w;
  orient_pixels(o, px, &hh, &ww, channels, scratch);
  if ((o >= 5 ? hh != w || ww != h : hh != h || ww != w) || px.size() != original.size())
    std::abort();
  const int inverse = o == 6 ? 8 : o == 8 ? 6 : o;  // the others undo themselves
  orient_pixels(inverse, px, &hh, &ww, channels, scratch);
  if (hh != h || ww != w || px != original) std::abort();
  return 0;
}
