// Fuzzes the image decoders as hpcnet calls them: data::decode_image (a fresh decoder: JPEG by
// libjpeg-turbo, PNG by libpng, told apart by their first bytes) and the per-thread ImageDecoder
// that the dataset loaders reuse from image to image, which must give the same result after any
// earlier input (its JPEG decompressor outlives failed decodes). The pixel limit is lowered to 2^22
// so that headers claiming large images cost milliseconds, not seconds; the limit's code path is
// the same. Only hpcnet's typed errors are expected.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hpcnet/data.h"
#include "src/data/internal.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hpcnet::data::set_max_image_pixels(int64_t{1} << 22);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hpcnet::data::detail::ImageDecoder reused;
  hpcnet::data::Image a;
  const std::string err = reused.decode(data, size, a);
  if (err.empty() && a.pixels.size() != static_cast<size_t>(a.height * a.width * 3)) std::abort();
  try {
    const hpcnet::data::Image b = hpcnet::data::decode_image(data, size, "fuzz.img");
    if (b.pixels.size() != static_cast<size_t>(b.height * b.width * 3)) std::abort();
    // The reused decoder agrees with a fresh one.
    if (!err.empty() || a.height != b.height || a.width != b.width || a.pixels != b.pixels) {
      std::fprintf(stderr, "reused decoder: %s (%lldx%lld); fresh decoder: %lldx%lld\n",
                   err.empty() ? "decoded" : err.c_str(), static_cast<long long>(a.width),
                   static_cast<long long>(a.height), static_cast<long long>(b.width),
                   static_cast<long long>(b.height));
      std::abort();
    }
  } catch (const hpcnet::Error& e) {  // InputError (bad input) derives from it
    if (err.empty()) {                // the fresh decoder refused what the reused one decoded
      std::fprintf(stderr, "reused decoder: decoded; fresh decoder: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
