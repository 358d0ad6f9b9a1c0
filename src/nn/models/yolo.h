// YOLO detection models as Ultralytics 8.4 builds them (DetectionModel from a model YAML): the
// modules of its vocabulary under Ultralytics' parameter names (yolo.cpp, yolo_attention.cpp),
// a model description ([from, repeats, module, args] rows + scales) and the graph built from it
// with Ultralytics' channel arithmetic and layer indices (yolo_graph.cpp), and the descriptions
// of yolov8.yaml and yolo11.yaml plus a reader for a user's YAML (yolo_describe.cpp).
// Every Conv is conv (no bias) + BatchNorm (eps 1e-3, momentum 0.03) + SiLU.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "hpcnet/nn.h"
#include "src/ops/ops.h"

namespace hpcnet::nn {

// ---- modules ----

// A layer of a YOLO graph: forward, and forward written into a given tensor (predict time: a
// slice of a concatenation's buffer, so the concatenation is never copied).
class YoloLayer : public Module {
 public:
  // forward(x) written into `out` (dense, of the output's shape, in either layout). The default
  // computes forward and copies; layers that can write in place override it.
  virtual void forward_into(const Tensor& x, Tensor& out);
};

// Ultralytics' Conv(c1, c2, k, s, p, g, d, act): conv (k x k, stride s, padding p (-1: autopad,
// d (k - 1) / 2), groups g, dilation d, no bias), bn (eps 1e-3, momentum 0.03), SiLU unless act
// is false. DWConv is g = gcd(c1, c2) (hpcnet's convolutions serve groups 1 and depthwise, g =
// c1 = c2). In eval mode without a graph on the CPU the BatchNorm is folded into the convolution's
// weights and a bias (Ultralytics' fuse()), recomputed at each call (a few microseconds per layer),
// so changed weights never leave a stale copy.
class YoloConv : public YoloLayer {
 public:
  YoloConv(int64_t c1, int64_t c2, int64_t k = 1, int64_t s = 1, bool act = true, int64_t g = 1,
           int64_t p = -1, int64_t d = 1);
  Tensor forward(const Tensor& x) override;
  // Whether forward runs folded (inference: eval mode, no graph, CPU float32 weights, not
  // tracing for export, fusion on): BatchNorm folded into the convolution, SiLU fused (groups 1)
  // or after it (depthwise).
  bool folds() const;
  // Folded with groups 1: the convolution writes `out` directly; otherwise forward and a copy.
  void forward_into(const Tensor& x, Tensor& out) override;
  // The folded (weight, bias) of conv and bn (float32, CPU).
  std::pair<Tensor, Tensor> folded_weights() const;
  // int8 post-training quantisation (`hpcnet quantize`): the largest |x| of this Conv's input
  // over the calibration images (0: not calibrated). Recorded while calibrating
  // (set_int8_calibration) by the Convs that can run in int8 (groups 1, 16 or more input
  // channels; the RGB stem stays as it is); used under ops::int8_inference().
  float int8_input_max = 0;
  bool int8_capable() const;
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  bool act;
  int64_t groups;

 private:
  // The folded convolution's parameters, with the int8 scale when it runs in int8.
  ops::Conv2dParams folded_params(const Tensor& x);
};
// Whether YoloConv folds in inference (default on; HPCNET_FUSE=0 starts it off): for benchmarks
// and tests.
void set_inference_fusion(bool on);
// Whether YOLO models at predict time (one image, folded) write the pieces of every C2f's and
// every graph concatenation side by side into its buffer instead of concatenating copies
// (default on): for benchmarks and tests.
void set_concat_in_place(bool on);
// While on, every int8-capable YoloConv records the largest |x| of its input (int8_input_max) in
// its folded forward: `hpcnet quantize` runs the calibration images with it on.
void set_int8_calibration(bool on);
// The calibration of a model's YoloConvs by module name (those with int8_input_max > 0), and
// back; set_int8_ranges refuses names that are not int8-capable YoloConvs of the model.
std::map<std::string, double> int8_ranges(Module& model);
void set_int8_ranges(Module& model, const std::map<std::string, double>& ranges);

// Children "0", "1", ... run in a row (torch.nn.Sequential of YOLO layers).
class YoloSequential : public YoloLayer {
 public:
  void add(std::shared_ptr<YoloLayer> m);
  Tensor forward(const Tensor& x) override;
  void forward_into(const Tensor& x, Tensor& out) override;  // the last writes out
  std::vector<std::shared_ptr<YoloLayer>> items;
};

// Bottleneck(c1, c2, shortcut, g, k = (k1, k2), e): cv1 k1 x k1 to c_ = int(c2 e), cv2 k2 x k2
// (groups g) to c2; plus x where shortcut and c1 == c2. C2f's use e = 1, C3k2's e = 0.5.
class YoloBottleneck : public YoloLayer {
 public:
  YoloBottleneck(int64_t c1, int64_t c2, bool shortcut, int64_t g = 1, int64_t k1 = 3,
                 int64_t k2 = 3, double e = 0.5);
  Tensor forward(const Tensor& x) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  std::shared_ptr<YoloConv> cv1, cv2;
  bool add;
};

// C2f(c1, c2, n, shortcut, g, e): cv1 1x1 to 2c (c = int(c2 e)), chunked in two; n blocks m.0..,
// each on the last piece; cv2 1x1 over the concatenation of all (2 + n) c channels. The blocks
// are Bottleneck(c, c, shortcut, g, (3, 3), e = 1) (C2f) or C3k2's (make_c3k2).
class C2f : public YoloLayer {
 public:
  C2f(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g = 1, double e = 0.5);
  Tensor forward(const Tensor& x) override;
  // Predict time (one image, folded): the concatenation's buffer with every piece written in
  // place, and forward written into `out`.
  void forward_into(const Tensor& x, Tensor& out) override;
  Tensor concat_in_place(const Tensor& x);
  std::shared_ptr<YoloConv> cv1, cv2;
  std::vector<std::shared_ptr<YoloLayer>> m;
  int64_t c;

 protected:
  // cv1 and cv2 only; the owner adds the blocks.
  C2f(int64_t c1, int64_t c2, int64_t n, double e);
  void add_block(std::shared_ptr<YoloLayer> b);
};

// C3k2(c1, c2, n, c3k, e, attn, g, shortcut): C2f whose blocks are C3k(c, c, 2, shortcut, g)
// with c3k, Bottleneck(c, c, shortcut, g) (e = 0.5, 3x3 both) without, and with attn the pair
// Bottleneck + PSABlock(c, 0.5, max(c / 64, 1)).
class C3k2 : public C2f {
 public:
  C3k2(int64_t c1, int64_t c2, int64_t n, bool c3k = false, double e = 0.5, bool attn = false,
       int64_t g = 1, bool shortcut = true);
};

// C3(c1, c2, n, shortcut, g, e): cv1 and cv2 1x1 to c_ = int(c2 e), m = n Bottleneck(c_, c_,
// shortcut, g, (k1, k2), e = 1) on cv1's output, cv3 1x1 over cat(m(cv1 x), cv2 x). C3 is
// k = (1, 3); C3k(c1, c2, n, shortcut, g, e, k) is (k, k).
class C3 : public YoloLayer {
 public:
  C3(int64_t c1, int64_t c2, int64_t n, bool shortcut = true, int64_t g = 1, double e = 0.5,
     int64_t k1 = 1, int64_t k2 = 3);
  Tensor forward(const Tensor& x) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  Tensor pieces(const Tensor& x);  // what cv3 reads
  std::shared_ptr<YoloConv> cv1, cv2, cv3;
  std::shared_ptr<YoloSequential> m;
};

// SPPF(c1, c2, k, n, shortcut): cv1 1x1 to c1 / 2 (with SiLU where cv1_act: the YAML rows of
// v8/11, [c2, k]; a row that gives n has none, as YOLO26's), n max pools k x k stride 1 in a row,
// cv2 1x1 over the n + 1 maps concatenated, plus x where shortcut and c1 == c2.
class Sppf : public YoloLayer {
 public:
  Sppf(int64_t c1, int64_t c2, int64_t k = 5, int64_t n = 3, bool shortcut = false,
       bool cv1_act = true);
  Tensor forward(const Tensor& x) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  Tensor pyramid(const Tensor& x);  // cv1's output and its n pools, concatenated
  std::shared_ptr<YoloConv> cv1, cv2;
  std::shared_ptr<MaxPool2d> pool;
  int64_t n;
  bool add;
};

// Attention(dim, num_heads, attn_ratio): qkv = Conv 1x1 (no act) to dim + 2 nh kd (head_dim =
// dim / nh, kd = int(head_dim attn_ratio)), per head q, k (kd rows) and v (head_dim rows) over
// the N = H W positions; attn = softmax((q kd^-1/2)^T k) over keys; x = v attn^T + pe(v), pe a
// depthwise 3x3 Conv (no act) on v as (B, dim, H, W); proj = Conv 1x1 (no act).
class YoloAttention : public YoloLayer {
 public:
  YoloAttention(int64_t dim, int64_t num_heads = 8, double attn_ratio = 0.5);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<YoloConv> qkv, proj, pe;
  int64_t num_heads, head_dim, key_dim;
  double scale;
};

// PSABlock(c, attn_ratio, num_heads, shortcut): x + attn(x), then x + ffn(x), ffn = Conv 1x1 to
// 2c, Conv 1x1 back to c (no act); without the shortcut, no additions.
class PsaBlock : public YoloLayer {
 public:
  PsaBlock(int64_t c, double attn_ratio = 0.5, int64_t num_heads = 4, bool shortcut = true);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<YoloAttention> attn;
  std::shared_ptr<YoloSequential> ffn;
  bool add;
};

// C2PSA(c1, c2 = c1, n, e): cv1 1x1 to 2c (c = int(c1 e)), split in a, b; b through n
// PSABlock(c, 0.5, max(c / 64, 1)) (m); cv2 1x1 over cat(a, m(b)) back to c1.
class C2Psa : public YoloLayer {
 public:
  C2Psa(int64_t c1, int64_t c2, int64_t n = 1, double e = 0.5);
  Tensor forward(const Tensor& x) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  Tensor pieces(const Tensor& x);  // what cv2 reads
  std::shared_ptr<YoloConv> cv1, cv2;
  std::shared_ptr<YoloSequential> m;
  int64_t c;
};

// Detect(nc, ch) at strides 8, 16, 32 with reg_max 16: per level i, cv2.i = Conv 3x3, Conv 3x3,
// conv 1x1 -> 4 x 16 box-distribution logits; cv3.i = Conv 3x3, Conv 3x3, conv 1x1 -> nc class
// logits (legacy, v8) or (DWConv 3x3, Conv 1x1), (DWConv 3x3, Conv 1x1), conv 1x1 (yolo11);
// dfl.conv holds the fixed integral 0..15 (not trained). Biases as Ultralytics' bias_init.
// forward_levels(P3, P4, P5) -> {boxes (B, 64, A), scores (B, nc, A)}, levels concatenated along
// A (channel = side * 16 + bin, sides l, t, r, b).
class YoloDetect : public Module {
 public:
  static constexpr int64_t kRegMax = 16;
  static constexpr int64_t kStrides[3] = {8, 16, 32};
  YoloDetect(int64_t nc, const std::vector<int64_t>& ch, bool legacy = true);
  Outputs forward_levels(const Outputs& feats);
  Tensor forward(const Tensor& x) override;  // an InputError: the head takes three maps
  struct Branch {
    std::vector<std::shared_ptr<YoloConv>> box, cls;  // in order
    std::shared_ptr<Conv2d> box_out, cls_out;
  };
  std::vector<Branch> branches;
  std::shared_ptr<Conv2d> dfl_conv;
  int64_t nc;
  bool legacy;
};

// ---- descriptions ----

// One value of a row's args: an integer, a real, a bool, None, or a name (nc, "nearest").
struct YoloArg {
  enum class Kind { kInt, kReal, kBool, kNone, kName };
  Kind kind = Kind::kNone;
  double value = 0;
  std::string name;
  YoloArg(int v) : kind(Kind::kInt), value(v) {}  // NOLINT: rows are written as literals
  YoloArg(int64_t v) : kind(Kind::kInt), value(static_cast<double>(v)) {}  // NOLINT
  YoloArg(double v) : kind(Kind::kReal), value(v) {}                       // NOLINT
  YoloArg(bool v) : kind(Kind::kBool), value(v ? 1 : 0) {}                 // NOLINT
  YoloArg(const char* s) : kind(Kind::kName), name(s) {}                   // NOLINT
  YoloArg(std::string s) : kind(Kind::kName), name(std::move(s)) {}        // NOLINT
  YoloArg(std::nullptr_t) {}                                               // NOLINT: None
  std::string str() const;                                                 // as the YAML writes it
};

// [from, repeats, module, args]: from -1 (the previous layer), an absolute index, or a list.
struct YoloRow {
  std::vector<int64_t> from;
  int64_t repeats = 1;
  std::string module;
  std::vector<YoloArg> args;
  int64_t line = 0;         // in its YAML file (0: a built-in description)
  std::string str() const;  // "[-1, 2, C3k2, [256, False, 0.25]]"
};

struct YoloScale {
  std::string name;  // n, s, m, l, x
  double depth = 1, width = 1;
  int64_t max_channels = 1024;
};

// A model YAML: nc, scales, the scale to build, backbone + head rows (layer i is row i of the
// backbone followed by the head), reg_max (16 only) and end2end (not supported).
struct YoloDescription {
  std::string source;  // where it came from, for errors: "yolo11.yaml (built in)" or a path
  int64_t nc = 80;
  std::vector<YoloScale> scales;
  std::string scale;  // "" = the first scale (as Ultralytics, which warns)
  std::vector<YoloRow> backbone, head;
  int64_t reg_max = 16;
  bool end2end = false;
};

// hpcnet's own descriptions of Ultralytics' cfg/models/v8/yolov8.yaml and cfg/models/11/yolo11.yaml
// (scale left empty: set it before building).
YoloDescription yolov8_description();
YoloDescription yolo11_description();
// A model YAML in Ultralytics' format (nc, scales, optional scale, backbone, head; reg_max and
// end2end optional). The scale is the letter in the file name as Ultralytics reads it
// (yolo11n.yaml -> n, regex yolo(e-)?v?\d+([nslmx])), else the `scale` key, else the first.
// InputError naming the file (and the row, for a bad row).
YoloDescription read_yolo_yaml(const std::string& path);
// The same from YAML text; `file_name` gives the scale letter and names the source in errors.
YoloDescription parse_yolo_yaml(const std::string& text, const std::string& file_name);
// Whether a model name is a path to a model YAML (ends in .yaml or .yml).
bool is_yolo_yaml_path(const std::string& name);

// ---- the graph ----

// DetectionModel(description, nc): layers model.0 .. model.<last> as parse_model builds them
// (channels make_divisible(min(c, max_channels) * width, 8), repeats max(round(n * depth), 1)
// for n > 1, C3k2's c3k forced at scales m, l, x, Detect legacy unless a C3k2 comes before it),
// so state_dict names and shapes are Ultralytics'. The Detect row must read 3 maps at strides 8,
// 16, 32. forward_all(x (B, 3, H, W), H and W multiples of 32) returns the head's {boxes (B, 64,
// A), scores (B, nc, A)}; forward returns scores alone. InputError naming the row for an unknown
// module, a bad from index or bad args.
class YoloModel : public Module {
 public:
  enum class Kind { kModule, kUpsample, kConcat, kDetect };
  struct Layer {
    Kind kind = Kind::kModule;
    std::vector<int64_t> from;  // absolute indices (-1 resolved); the input image is -1 for layer 0
    std::shared_ptr<YoloLayer> module;  // kModule
    int64_t scale = 2;                  // kUpsample
    int64_t channels = 0, stride = 1;   // of the output (stride relative to the input)
    int concat = -1;  // predict time: the index of the concatenation layer it writes into
  };
  YoloModel(const YoloDescription& d, int64_t num_classes);
  Outputs forward_all(const Tensor& x) override;
  Tensor forward(const Tensor& x) override;
  std::vector<Layer> layers;
  std::shared_ptr<YoloDetect> detect;

 private:
  void plan_in_place();
  Outputs run(const Tensor& x, bool in_place);
  Tensor layer_output(size_t i, const std::vector<Tensor>& ys, const Tensor& x);
  std::vector<size_t> last_use_;  // the last layer that reads each layer's output
  YoloConv* probe_ = nullptr;     // the first Conv: whether the model runs folded
};

}  // namespace hpcnet::nn
