// Run recipes as JSON files (see config_file.h): JSON text to train's flags. The CLI reads the file
// (refusing FIFOs and files over 1 MiB) and knows train's options; this file only translates.
#include "src/train/config_file.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "hpcnet/error.h"

namespace hpcnet::train {

std::vector<std::string> config_json_to_flags(
    std::string_view text, const std::string& file,
    const std::function<bool(const std::string&)>& is_option) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw InputError(file + ": a config file holds one JSON object");
  std::vector<std::string> flags;
  for (auto& [key, value] : j.items()) {
    if (!key.empty() && key[0] == '#') continue;
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    if (name == "config" || !is_option(name))
      throw InputError(file + ": unknown key '" + key + "' (see hpcnet train --help)");
    if (value.is_object() || value.is_array() || value.is_null())
      throw InputError(file + ": key '" + key + "' must be a string, number or boolean");
    flags.push_back("--" + name + "=" +
                    (value.is_string() ? value.get<std::string>() : value.dump()));
  }
  return flags;
}

}  // namespace hpcnet::train
