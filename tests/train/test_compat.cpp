// Backward compatibility of checkpoints (tests/fixtures/compat_v1, made by its make_fixture.sh
// with the hpcnet of the commit that expected.json names): a checkpoint written by that build,
// lenet after epoch 1 of 2, resumed by this one to the end of epoch 2, gives the weights that
// build's own resume and its uninterrupted 2-epoch run gave, bit for bit (each tensor's dtype,
// shape and FNV-1a 64 hash of its bytes); and its model tensors load into lenet.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/train.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

const fs::path kFixture = fs::path(HPCNET_SOURCE_DIR) / "tests" / "fixtures" / "compat_v1";

nlohmann::json expected() { return nlohmann::json::parse(read_file(kFixture / "expected.json")); }

// FNV-1a 64 of the tensor's bytes (little-endian, as in the file), as 16 hex digits.
std::string fnv1a64(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// The dtype as safetensors spells it.
std::string safetensors_dtype(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat16:
      return "F16";
    case DType::kInt64:
      return "I64";
    case DType::kInt32:
      return "I32";
    case DType::kUInt8:
      return "U8";
  }
  return "?";
}

// Whether this CPU gives the fixture's numbers: oneDNN, capped at AVX2 (expected.json's env),
// sums in the same order on every x86-64 CPU with AVX2 and FMA (in an optimised build).
bool same_numerics_as_the_fixture() {
#if defined(HPCNET_SANITIZED)
  return false;  // -O1 (scripts/sanitize.sh) contracts and vectorises sums differently
#elif defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace

TEST(CompatV1, OldCheckpointResumesToTheRecordedWeights) {
  static_assert(std::endian::native == std::endian::little,
                "the hashes are of little-endian bytes");
  const nlohmann::json want = expected();
  TempDir tmp("compat");
  write_tiny_cifar10(tmp / "data", 20, 10);  // as fixtures/compat_v1/gen_data.cpp does
  fs::create_directories(tmp / "run");
  fs::copy_file(kFixture / "checkpoint.safetensors", tmp / "run" / "checkpoint.safetensors");

  // The checkpoint's data path (relative, "data") is passed again, as the path of this machine.
  std::string cmd = "cd " + shell_quote(tmp.str()) + " &&";
  for (const auto& [k, v] : want.at("env").items())
    cmd += " " + k + "=" + shell_quote(v.get<std::string>());  // ONEDNN_MAX_CPU_ISA=AVX2
  cmd += " " + hpcnet_command();
  for (const std::string& a :
       std::vector<std::string>{"train", "--resume", tmp.str("run"), "--data", tmp.str("data"),
                                "--threads", "1", "--workers", "0", "--device", "cpu"})
    cmd += " " + shell_quote(a);
  RunResult r = run_shell(cmd);
  ASSERT_EQ(r.rc, 0) << "stdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
  // It continues with epoch 2 (the loss lines count epochs from 1).
  EXPECT_NE(r.out.find("[2,"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[1,"), std::string::npos) << r.out;

  SafetensorsFile got = load_safetensors(tmp.str("run/model.safetensors"));
  std::vector<std::string> names;
  for (const auto& e : want.at("model")) names.push_back(e.at("name").get<std::string>());
  ASSERT_EQ(got.order, names);
  if (!same_numerics_as_the_fixture())
    GTEST_SKIP() << "resumed; the weights are not compared: this CPU lacks AVX2 or FMA, so its "
                    "sums differ from the fixture's in the last bits";
  for (const auto& e : want.at("model")) {
    const std::string name = e.at("name").get<std::string>();
    const Tensor& t = got.at(name);
    EXPECT_EQ(safetensors_dtype(t.dtype()), e.at("dtype").get<std::string>()) << name;
    EXPECT_EQ(t.shape(), e.at("shape").get<Shape>()) << name;
    EXPECT_EQ(fnv1a64(t), e.at("fnv1a64").get<std::string>())
        << name << " differs from the weights of commit " << want.at("commit").get<std::string>();
  }
}

TEST(CompatV1, OldCheckpointLoadsIntoLenet) {
  const std::string ck = (kFixture / "checkpoint.safetensors").string();
  SafetensorsFile f = load_safetensors(ck);
  train::LoadedModel m = train::load_model(ck, "lenet");
  EXPECT_EQ(m.name, "lenet");
  EXPECT_EQ(m.classes.size(), 10u);
  // Every tensor of a fresh lenet is in the checkpoint, as model.<name>, with its momentum buffer
  // as optim.momentum_buffer.<name>; load_model took the model ones, unchanged.
  auto fresh = nn::make_model("lenet")->state_dict();
  auto loaded = m.module->state_dict();
  ASSERT_EQ(loaded.size(), fresh.size());
  size_t model_tensors = 0;
  for (const auto& n : f.order) model_tensors += n.rfind("model.", 0) == 0;
  EXPECT_EQ(model_tensors, fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    const auto& [name, t] = loaded[i];
    ASSERT_EQ(name, fresh[i].first);
    EXPECT_EQ(t.shape(), fresh[i].second.shape()) << name;
    EXPECT_TRUE(same_bytes(t, f.at("model." + name))) << name;
    EXPECT_FALSE(same_bytes(t, fresh[i].second)) << name << " kept its initial values";
    EXPECT_EQ(f.at("optim.momentum_buffer." + name).shape(), t.shape()) << name;
  }
}
