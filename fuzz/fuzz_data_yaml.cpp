// Fuzzes the dataset YAML reader (data_yaml_class_names: the `names` of an Ultralytics data.yaml
// beside a segmentation dataset, by yaml-cpp). Only hpcnet's typed errors are expected.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/data/internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto names = hpcnet::data::detail::data_yaml_class_names(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz/data.yaml");
    if (names.size() < 2 || names[0] != "background") std::abort();
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
