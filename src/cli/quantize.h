// `hpcnet quantize`: int8 post-training quantisation of a YOLO model. Calibration images of a
// detection dataset run through the model in float32 while every int8-capable Conv records the
// largest |x| of its input; the model file is written again with those ranges (hpcnet.int8), and
// `predict` / `eval --precision int8` run those convolutions in int8.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace hpcnet::cli {

struct QuantizeArgs {
  std::string weights, data, out, split = "val";
  int64_t images = 256, batch_size = 8, imgsz = 0;
  int threads = 0, workers = 2;
};

CLI::App* add_quantize_command(CLI::App& app, QuantizeArgs& a);
int cmd_quantize(const QuantizeArgs& a);

}  // namespace hpcnet::cli
