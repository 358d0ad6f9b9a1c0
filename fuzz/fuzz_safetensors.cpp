// Fuzzes the safetensors reader: parse_safetensors, load_safetensors's every check on bytes held
// in memory. Only hpcnet's typed errors are expected; any other exception, a sanitizer report or a
// tensor whose bytes disagree with its shape is a finding.
#include <cstdint>
#include <cstdlib>

#include "hpcnet/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hpcnet::SafetensorsFile f = hpcnet::parse_safetensors(data, size, "fuzz.safetensors");
    if (f.order.size() != f.tensors.size()) std::abort();
    for (const auto& [name, t] : f.tensors)
      if (t.nbytes() > size || !f.contains(name)) std::abort();
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
