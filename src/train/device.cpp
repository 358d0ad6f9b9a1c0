// Run-wide settings the CLI and the loop share: --precision for the kernels and --device.
#include "hpcnet/train.h"
#include "src/core/cuda_device.h"
#include "src/ops/ops.h"

namespace hpcnet::train {

void apply_precision(const std::string& precision, Device device) {
  HPCNET_REQUIRE(precision == "fp32" || precision == "bf16",
                 "--precision must be fp32 or bf16 (got '" + precision + "')");
  HPCNET_REQUIRE(precision != "bf16" || !device.is_cpu() || ops::cpu_supports_bf16(),
                 "--precision bf16: this CPU has no AVX-512, which oneDNN's bfloat16 "
                 "convolutions need; use --precision fp32");
  ops::set_conv_precision(precision == "bf16" ? ops::Precision::kBFloat16
                                              : ops::Precision::kFloat32);
}

void apply_cuda_math(bool tf32, bool deterministic) {
  ops::set_cuda_tf32(tf32);
  ops::set_cuda_deterministic(deterministic);
}

void check_inference_precision(const std::string& precision) {
  HPCNET_REQUIRE(precision == "fp32" || precision == "bf16" || precision == "int8",
                 "--precision must be fp32, bf16 or int8 (got '" + precision + "')");
}

void apply_inference_precision(const std::string& precision, const LoadedModel& m,
                               const std::string& path) {
  ops::set_int8_inference(false);
  if (precision != "int8") return apply_precision(precision);
  HPCNET_REQUIRE(m.int8_calibrated,
                 "--precision int8: " + path +
                     " holds no int8 calibration; make one with `hpcnet quantize --weights " +
                     path + " --data DATA --out MODEL-int8.safetensors`");
  HPCNET_REQUIRE(ops::cpu_supports_bf16(),
                 "--precision int8: this CPU has no AVX-512, which oneDNN's int8 convolutions "
                 "need here; use --precision fp32");
  apply_precision("bf16");  // the convolutions without a calibration
  ops::set_int8_inference(true);
}

void apply_conv_algorithm(const std::string& algorithm) {
  HPCNET_REQUIRE(algorithm == "auto" || algorithm == "direct" || algorithm == "winograd",
                 "--conv-algorithm must be auto, direct or winograd (got '" + algorithm + "')");
  ops::set_conv_algorithm(algorithm == "direct"     ? ops::ConvAlgorithm::kDirect
                          : algorithm == "winograd" ? ops::ConvAlgorithm::kWinograd
                                                    : ops::ConvAlgorithm::kAuto);
}

Device resolve_device(const std::string& name) {
  if (name == "cpu") return cpu_device();
  const bool want_cuda = name == "cuda" || name.rfind("cuda:", 0) == 0;
  if (name == "auto") return cuda_available() ? cuda_device(0) : cpu_device();
  if (!want_cuda) throw InputError("unknown device '" + name + "' (use auto, cpu or cuda)");
  if (!cuda_built())
    throw InputError("--device " + name +
                     ": this build has no CUDA backend (reconfigure with -DHPCNET_CUDA=ON); use "
                     "--device cpu");
  if (!cuda_available())
    throw InputError("--device " + name + ": no usable GPU (" + cuda_unavailable_reason() +
                     "); use --device cpu");
  int index = 0;
  if (name.size() > 5) {
    try {
      index = std::stoi(name.substr(5));
    } catch (const std::exception&) {
      throw InputError("--device " + name + ": expected cuda:N");
    }
  }
  HPCNET_REQUIRE(index >= 0 && index < cuda_device_count(),
                 "--device " + name + ": this machine has " + std::to_string(cuda_device_count()) +
                     " GPU(s)");
  return cuda_device(index);
}

}  // namespace hpcnet::train
