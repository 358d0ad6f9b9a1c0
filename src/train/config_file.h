// Run recipes as JSON files (`hpcnet train --config configs/NAME.json [flags]`): the file's keys
// become train's flags, which the CLI places before the command line's own, so those win (every
// option of train takes its last value).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcnet::train {

// The flags of a config file's text: one object whose keys are train's long option names
// ("batch_size" or "batch-size"; keys starting with '#' are comments).
// Requires: is_option(name) says whether `--name` is an option of train ("config" is never
// asked: it is refused as a key).
// Ensures: one "--name=VALUE" per key, in the object's key order (sorted), '_' in the name
// replaced by '-'; VALUE is a string's text, or the JSON of a number or boolean.
// Throws InputError beginning "FILE: " for text that is not valid JSON, JSON that is not one
// object, a key that names no option of train, or a value that is an object, array or null.
std::vector<std::string> config_json_to_flags(
    std::string_view text, const std::string& file,
    const std::function<bool(const std::string&)>& is_option);

}  // namespace hpcnet::train
