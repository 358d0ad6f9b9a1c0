// Fuzzes the class-mask decoder (ImageDecoder::decode_mask: 8-bit or 1/2/4-bit gray or palette
// PNGs, values = classes) and the dataset's check of the decoded values (add_mask of a 21-class
// dataset: values < 21 or 255). The pixel limit is lowered to 2^22 (see fuzz_image.cpp). Only
// hpcnet's typed errors are expected.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "src/data/internal.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hpcnet::data::set_max_image_pixels(int64_t{1} << 22);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hpcnet::data::detail::ImageDecoder dec;
  std::vector<uint8_t> mask;
  int64_t h = -1, w = -1;
  const std::string err = dec.decode_mask(data, size, mask, &h, &w);
  if (!err.empty()) return 0;
  if (h < 0 || w < 0 || mask.size() != static_cast<size_t>(h * w)) std::abort();
  try {
    hpcnet::data::InMemoryDataset ds(std::vector<std::string>(21, "class"), "fuzz",
                                     hpcnet::data::TargetKind::kMask);
    const std::vector<uint8_t> image(static_cast<size_t>(h * w * 3), 0);
    ds.add_mask(image.data(), h, w, mask.data(), "fuzz.png");
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
