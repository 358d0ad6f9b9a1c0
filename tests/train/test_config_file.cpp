// train::config_json_to_flags (src/train/config_file.h): a --config file's JSON as train's flags,
// the logic `hpcnet train --config` runs (tests/cli/test_cli.cpp runs the command itself).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "src/train/config_file.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

bool is_option(const std::string& name) {
  static const std::set<std::string> options = {"model", "batch-size", "lr", "nesterov", "out"};
  return options.count(name) != 0;
}

std::vector<std::string> flags(const std::string& text) {
  return train::config_json_to_flags(text, "recipe.json", is_option);
}

}  // namespace

TEST(ConfigFile, KeysBecomeFlagsInKeyOrder) {
  const std::vector<std::string> expect = {"--batch-size=8", "--lr=0.001", "--model=lenet",
                                           "--nesterov=true"};
  EXPECT_EQ(flags(R"({"model": "lenet", "batch_size": 8, "lr": 0.001, "nesterov": true,
                      "#": "a comment", "# another": [1, 2]})"),
            expect);
  EXPECT_EQ(flags(R"({"batch-size": 8})"), std::vector<std::string>{"--batch-size=8"});
  EXPECT_EQ(flags("{}"), std::vector<std::string>{});
  EXPECT_EQ(flags(R"({"out": "runs/a b=c"})"), std::vector<std::string>{"--out=runs/a b=c"});
}

TEST(ConfigFile, BadFilesAreOneInputErrorNamingTheFile) {
  for (const auto& row : std::vector<std::pair<std::string, std::string>>{
           {"", "recipe.json: not valid JSON"},
           {"{\"model\": ", "recipe.json: not valid JSON"},
           {"[1, 2]", "recipe.json: a config file holds one JSON object"},
           {"\"lenet\"", "recipe.json: a config file holds one JSON object"},
           {R"({"modell": "lenet"})", "recipe.json: unknown key 'modell'"},
           {R"({"config": "other.json"})", "recipe.json: unknown key 'config'"},
           {R"({"lr": [0.1]})", "recipe.json: key 'lr' must be a string, number or boolean"},
           {R"({"lr": {"x": 1}})", "recipe.json: key 'lr' must be a string, number or boolean"},
           {R"({"lr": null})", "recipe.json: key 'lr' must be a string, number or boolean"},
       }) {
    const std::string& text = row.first;  // (clang 14 cannot capture a structured binding)
    EXPECT_TRUE(input_error([&] { flags(text); }, row.second)) << text;
  }
}
