// Fuzzes the JSON run-recipe reader (train::config_json_to_flags, what `hpcnet train --config FILE`
// runs on the file's text), with train's options as the recipe table declares them. Only hpcnet's
// typed errors are expected, and every flag it yields names a known option.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "hpcnet/train.h"
#include "src/train/config_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::set<std::string> options = [] {
    std::set<std::string> s{"no-progress", "progress"};  // train's flags outside the table
    for (const hpcnet::train::RecipeField& f : hpcnet::train::recipe_fields())
      s.insert(f.flag().substr(2));
    return s;
  }();
  try {
    const auto flags = hpcnet::train::config_json_to_flags(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json",
        [&](const std::string& name) { return options.count(name) != 0; });
    for (const std::string& f : flags) {
      const size_t eq = f.find('=');
      if (f.rfind("--", 0) != 0 || eq == std::string::npos || !options.count(f.substr(2, eq - 2)))
        std::abort();
    }
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
