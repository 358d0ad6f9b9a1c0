// A YOLO model built from its description as Ultralytics' parse_model builds it (8.4): layer i is
// row i of backbone + head, its channels make_divisible(min(c2, max_channels) * width, 8) for the
// modules Ultralytics scales (Conv, DWConv, C2f, C3, C3k2, SPPF, C2PSA), its repeats
// max(round(n * depth), 1) for n > 1 (Python's round: half to even), passed to the module for
// C2f, C3, C3k2 and C2PSA and otherwise a Sequential of n copies (model.<i>.<j>). Upsample,
// Concat and C3k / PSABlock / Attention rows take their channels from their input, as there.
// Every layer's output channels and stride (relative to the image) are known when it is built,
// so bad rows fail at once, naming the row. At predict time (one image, folded) each Concat's
// buffer is allocated before its pieces are made and each piece's layer writes its slice.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "hpcnet/autograd.h"
#include "src/nn/models/models.h"
#include "src/nn/models/yolo_internal.h"
#include "src/ops/dispatch.h"
#include "src/ops/ops.h"

namespace hpcnet::nn {
namespace {

using Kind = YoloModel::Kind;

// What building a row needs: the scale, the classes, and every earlier layer's channels/strides.
struct BuildContext {
  double depth = 1, width = 1;
  double max_channels = std::numeric_limits<double>::infinity();
  std::string scale;
  int64_t nc = 80;
  bool legacy = true;  // Detect's head: false once a C3k2 row came
  const YoloRow* row = nullptr;
  int64_t index = 0;    // the layer being built
  int64_t c1 = 3;       // its input's channels (the first input's, for several)
  int64_t repeats = 1;  // n after the depth gain
  std::vector<YoloModel::Layer>* layers = nullptr;
};

[[noreturn]] void bad_args(const std::string& why) { throw InputError(why); }

// Row argument j as an integer / real / bool (`def` where the row stops before it). The name
// "nc" is the model's class count, as Ultralytics' locals.
double number(const BuildContext& b, size_t j, double def) {
  const auto& args = b.row->args;
  if (j >= args.size()) return def;
  const YoloArg& a = args[j];
  if (a.kind == YoloArg::Kind::kName && a.name == "nc") return static_cast<double>(b.nc);
  if (a.kind == YoloArg::Kind::kInt || a.kind == YoloArg::Kind::kReal) return a.value;
  bad_args("argument " + std::to_string(j + 1) + " (" + a.str() + ") must be a number");
}
int64_t integer(const BuildContext& b, size_t j, int64_t def) {
  const double v = number(b, j, static_cast<double>(def));
  if (v != std::floor(v)) bad_args("argument " + std::to_string(j + 1) + " must be an integer");
  return static_cast<int64_t>(v);
}
bool boolean(const BuildContext& b, size_t j, bool def) {
  const auto& args = b.row->args;
  if (j >= args.size()) return def;
  if (args[j].kind != YoloArg::Kind::kBool)
    bad_args("argument " + std::to_string(j + 1) + " (" + args[j].str() +
             ") must be True or False");
  return args[j].value != 0;
}
void at_most(const BuildContext& b, size_t n) {
  if (b.row->args.size() > n)
    bad_args(b.row->module + " takes at most " + std::to_string(n) + " arguments, got " +
             std::to_string(b.row->args.size()));
}

// args[0] scaled by the width: make_divisible(min(c2, max_channels) * width, 8).
int64_t scaled_c2(const BuildContext& b) {
  if (b.row->args.empty()) bad_args(b.row->module + " needs its output channels as argument 1");
  const double c2 = number(b, 0, 0);
  if (c2 < 1) bad_args("output channels must be positive");
  return yolo_detail::make_divisible(std::min(c2, b.max_channels) * b.width);
}

struct Built {
  std::shared_ptr<YoloLayer> module;
  int64_t c2 = 0, stride = 1;   // output channels; the stride this layer adds
  bool repeats_inside = false;  // the module took the repeats itself
};

using Builder = std::function<Built(const BuildContext&)>;

// The module vocabulary (Ultralytics' names) and how each row's args map to the module.
const std::map<std::string, Builder>& builders() {
  static const std::map<std::string, Builder> table = {
      {"Conv",
       [](const BuildContext& b) {  // [c2, k, s, p, g, d, act]
         at_most(b, 7);
         const int64_t c2 = scaled_c2(b), k = integer(b, 1, 1), s = integer(b, 2, 1);
         const bool auto_pad =
             b.row->args.size() <= 3 || b.row->args[3].kind == YoloArg::Kind::kNone;
         const int64_t p = auto_pad ? -1 : integer(b, 3, 0);
         return Built{std::make_shared<YoloConv>(b.c1, c2, k, s, boolean(b, 6, true),
                                                 integer(b, 4, 1), p, integer(b, 5, 1)),
                      c2, s};
       }},
      {"DWConv",
       [](const BuildContext& b) {  // [c2, k, s, d, act], groups gcd(c1, c2)
         at_most(b, 5);
         const int64_t c2 = scaled_c2(b), s = integer(b, 2, 1);
         return Built{std::make_shared<YoloConv>(b.c1, c2, integer(b, 1, 1), s, boolean(b, 4, true),
                                                 std::gcd(b.c1, c2), -1, integer(b, 3, 1)),
                      c2, s};
       }},
      {"C2f",
       [](const BuildContext& b) {  // [c2, shortcut, g, e]
         at_most(b, 4);
         const int64_t c2 = scaled_c2(b);
         return Built{std::make_shared<C2f>(b.c1, c2, b.repeats, boolean(b, 1, false),
                                            integer(b, 2, 1), number(b, 3, 0.5)),
                      c2, 1, true};
       }},
      {"C3",
       [](const BuildContext& b) {  // [c2, shortcut, g, e]
         at_most(b, 4);
         const int64_t c2 = scaled_c2(b);
         return Built{std::make_shared<C3>(b.c1, c2, b.repeats, boolean(b, 1, true),
                                           integer(b, 2, 1), number(b, 3, 0.5)),
                      c2, 1, true};
       }},
      {"C3k2",
       [](const BuildContext& b) {  // [c2, c3k, e, attn, g, shortcut]; c3k forced at m, l, x
         at_most(b, 6);
         const int64_t c2 = scaled_c2(b);
         const bool c3k =
             (b.scale == "m" || b.scale == "l" || b.scale == "x") || boolean(b, 1, false);
         return Built{
             std::make_shared<C3k2>(b.c1, c2, b.repeats, c3k, number(b, 2, 0.5),
                                    boolean(b, 3, false), integer(b, 4, 1), boolean(b, 5, true)),
             c2, 1, true};
       }},
      {"SPPF",
       [](const BuildContext& b) {  // [c2, k, n, shortcut]; cv1 with SiLU for [c2, k] rows
         at_most(b, 4);
         const int64_t c2 = scaled_c2(b);
         return Built{std::make_shared<Sppf>(b.c1, c2, integer(b, 1, 5), integer(b, 2, 3),
                                             boolean(b, 3, false), b.row->args.size() <= 2),
                      c2, 1};
       }},
      {"C2PSA",
       [](const BuildContext& b) {  // [c2, e]
         at_most(b, 2);
         const int64_t c2 = scaled_c2(b);
         if (c2 != b.c1)
           bad_args("C2PSA keeps its channels: " + std::to_string(c2) + " (scaled) != input " +
                    std::to_string(b.c1));
         return Built{std::make_shared<C2Psa>(b.c1, c2, b.repeats, number(b, 1, 0.5)), c2, 1, true};
       }},
      // Not scaled by parse_model: their channel args are the input's, written out.
      {"C3k",
       [](const BuildContext& b) {  // [c1, c2, n, shortcut, g, e, k]
         at_most(b, 7);
         if (integer(b, 0, 0) != b.c1 || integer(b, 1, 0) != b.c1)
           bad_args("C3k's c1 and c2 (arguments 1, 2) must equal the input's " +
                    std::to_string(b.c1) + " channels (Ultralytics does not scale them)");
         const int64_t k = integer(b, 6, 3);
         return Built{std::make_shared<C3>(b.c1, b.c1, integer(b, 2, 1), boolean(b, 3, true),
                                           integer(b, 4, 1), number(b, 5, 0.5), k, k),
                      b.c1, 1};
       }},
      {"PSABlock",
       [](const BuildContext& b) {  // [c, attn_ratio, num_heads, shortcut]
         at_most(b, 4);
         if (integer(b, 0, 0) != b.c1)
           bad_args("PSABlock's c (argument 1) must equal the input's " + std::to_string(b.c1) +
                    " channels (Ultralytics does not scale it)");
         return Built{std::make_shared<PsaBlock>(b.c1, number(b, 1, 0.5), integer(b, 2, 4),
                                                 boolean(b, 3, true)),
                      b.c1, 1};
       }},
      {"Attention",
       [](const BuildContext& b) {  // [dim, num_heads, attn_ratio]
         at_most(b, 3);
         if (integer(b, 0, 0) != b.c1)
           bad_args("Attention's dim (argument 1) must equal the input's " + std::to_string(b.c1) +
                    " channels (Ultralytics does not scale it)");
         return Built{std::make_shared<YoloAttention>(b.c1, integer(b, 1, 8), number(b, 2, 0.5)),
                      b.c1, 1};
       }},
  };
  return table;
}

const char* const kGraphModules[] = {"nn.Upsample", "Upsample", "Concat", "Detect"};

std::string vocabulary() {
  std::string s;
  for (auto& [name, f] : builders()) s += (s.empty() ? "" : ", ") + name;
  for (const char* m : kGraphModules) s += std::string(", ") + m;
  return s;
}

// The absolute input indices of layer i (from -1: the previous layer; layer 0 reads the image).
std::vector<int64_t> resolve_from(const YoloRow& row, int64_t i) {
  if (row.from.empty()) bad_args("'from' is empty");
  std::vector<int64_t> out;
  for (int64_t f : row.from) {
    const int64_t a = f < 0 ? i + f : f;
    if (i == 0 && f == -1) {
      out.push_back(-1);
      continue;
    }
    if (a < 0 || a >= i)
      bad_args("from index " + std::to_string(f) + " is not an earlier layer (layer " +
               std::to_string(i) + " reads layers 0.." + std::to_string(i - 1) + ")");
    out.push_back(a);
  }
  return out;
}

// Upsample / Concat / Detect: the graph's own rows. Fills channels, stride and scale of `l`.
void graph_row(BuildContext& b, YoloModel::Layer& l, std::shared_ptr<YoloDetect>& detect) {
  const auto& layers = *b.layers;
  const YoloRow& row = *b.row;
  auto ch = [&](int64_t j) { return j < 0 ? int64_t{3} : layers[static_cast<size_t>(j)].channels; };
  auto st = [&](int64_t j) { return j < 0 ? int64_t{1} : layers[static_cast<size_t>(j)].stride; };
  if (row.module == "nn.Upsample" || row.module == "Upsample") {  // [size, scale_factor, mode]
    at_most(b, 3);
    if (!row.args.empty() && row.args[0].kind != YoloArg::Kind::kNone)
      bad_args("Upsample: only scale_factor is supported (size must be None)");
    if (row.args.size() > 2 && row.args[2].name != "nearest")
      bad_args("Upsample: only mode \"nearest\" is supported, got " + row.args[2].str());
    l.kind = Kind::kUpsample;
    l.scale = integer(b, 1, 1);
    if (l.scale < 1 || st(l.from[0]) % l.scale != 0)
      bad_args("Upsample: scale_factor must be a positive integer dividing the input's stride " +
               std::to_string(st(l.from[0])));
    l.channels = ch(l.from[0]);
    l.stride = st(l.from[0]) / l.scale;
  } else if (row.module == "Concat") {  // [dimension]
    at_most(b, 1);
    if (integer(b, 0, 1) != 1) bad_args("Concat: only dimension 1 (channels) is supported");
    l.kind = Kind::kConcat;
    l.stride = st(l.from[0]);
    for (int64_t j : l.from) {
      if (st(j) != l.stride)
        bad_args("Concat: its inputs have different strides (" + std::to_string(l.stride) +
                 " and " + std::to_string(st(j)) + ")");
      l.channels += ch(j);
    }
  } else {  // Detect: [nc]
    at_most(b, 1);
    if (integer(b, 0, b.nc) != b.nc)
      bad_args("Detect: " + std::to_string(integer(b, 0, b.nc)) + " classes, but the model has " +
               std::to_string(b.nc) + " (write nc)");
    if (l.from.size() != 3 || st(l.from[0]) != 8 || st(l.from[1]) != 16 || st(l.from[2]) != 32)
      bad_args("Detect must read 3 maps at strides 8, 16, 32 (the loss's levels)");
    if (detect) bad_args("only one Detect row is supported");
    l.kind = Kind::kDetect;
    std::vector<int64_t> chs;
    for (int64_t j : l.from) chs.push_back(ch(j));
    detect = std::make_shared<YoloDetect>(b.nc, chs, b.legacy);
    l.channels = 0;
    l.stride = 32;
  }
}

}  // namespace

YoloModel::YoloModel(const YoloDescription& d, int64_t num_classes) {
  BuildContext b;
  b.nc = num_classes;
  if (!d.scales.empty()) {
    auto it = std::find_if(d.scales.begin(), d.scales.end(),
                           [&](const YoloScale& s) { return s.name == d.scale; });
    if (d.scale.empty()) it = d.scales.begin();
    HPCNET_REQUIRE(it != d.scales.end(),
                   d.source + ": scale '" + d.scale + "' is not among its scales");
    b.scale = it->name;
    b.depth = it->depth;
    b.width = it->width;
    b.max_channels = static_cast<double>(it->max_channels);
  }
  HPCNET_REQUIRE(d.reg_max == 16, d.source + ": reg_max must be 16 (hpcnet's DFL)");
  HPCNET_REQUIRE(!d.end2end, d.source + ": end2end (NMS-free) heads are not supported");
  std::vector<const YoloRow*> rows;
  for (auto& r : d.backbone) rows.push_back(&r);
  for (auto& r : d.head) rows.push_back(&r);
  HPCNET_REQUIRE(!rows.empty(), d.source + ": no backbone or head rows");
  b.layers = &layers;
  auto model = register_module("model", std::make_shared<ModuleDict>());
  for (size_t i = 0; i < rows.size(); ++i) {
    const YoloRow& row = *rows[i];
    b.row = &row;
    b.index = static_cast<int64_t>(i);
    const bool in_backbone = i < d.backbone.size();
    try {
      Layer l;
      l.from = resolve_from(row, b.index);
      b.c1 = l.from[0] < 0 ? 3 : layers[static_cast<size_t>(l.from[0])].channels;
      if (row.repeats < 1) bad_args("repeats must be at least 1");
      b.repeats = row.repeats > 1
                      ? std::max<int64_t>(static_cast<int64_t>(std::nearbyint(
                                              static_cast<double>(row.repeats) * b.depth)),
                                          1)
                      : row.repeats;
      if (row.module == "C3k2") b.legacy = false;
      auto it = builders().find(row.module);
      if (it == builders().end()) {
        if (std::find(std::begin(kGraphModules), std::end(kGraphModules), row.module) ==
            std::end(kGraphModules))
          bad_args("unknown module '" + row.module + "' (known: " + vocabulary() + ")");
        if (b.repeats != 1) bad_args(row.module + " rows take repeats 1");
        graph_row(b, l, detect);
        if (l.kind == Kind::kDetect) model->add(std::to_string(i), detect);
      } else {
        if (l.from.size() != 1) bad_args(row.module + " reads one layer");
        const int64_t in_stride = l.from[0] < 0 ? 1 : layers[static_cast<size_t>(l.from[0])].stride;
        Built built = it->second(b);
        l.channels = built.c2;
        l.stride = in_stride * built.stride;
        if (!built.repeats_inside && b.repeats > 1) {
          if (built.c2 != b.c1)
            bad_args("repeats > 1 of " + row.module + " need equal input and output channels");
          auto seq = std::make_shared<YoloSequential>();
          seq->add(built.module);
          for (int64_t r = 1; r < b.repeats; ++r) {
            seq->add(it->second(b).module);
            l.stride *= built.stride;
          }
          built.module = seq;
        }
        l.module = model->add(std::to_string(i), built.module);
      }
      layers.push_back(std::move(l));
    } catch (const InputError& e) {
      throw InputError(d.source + ": " + (in_backbone ? "backbone" : "head") + " row " +
                       std::to_string(in_backbone ? i : i - d.backbone.size()) + " (layer " +
                       std::to_string(i) +
                       (row.line > 0 ? ", line " + std::to_string(row.line) : "") + ") " +
                       row.str() + ": " + e.what());
    }
  }
  HPCNET_REQUIRE(detect && layers.back().kind == Kind::kDetect,
                 d.source + ": the last row must be the Detect head");
  plan_in_place();
}

void YoloModel::plan_in_place() {
  // Which layers read each output last (to drop it then), and which concatenations are written
  // in place at predict time: those whose every input is a distinct layer (not the image, not a
  // Concat or Detect) that feeds no earlier in-place concatenation.
  last_use_.assign(layers.size(), 0);
  for (size_t i = 0; i < layers.size(); ++i)
    for (int64_t j : layers[i].from)
      if (j >= 0) last_use_[static_cast<size_t>(j)] = i;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& c = layers[i];
    if (c.kind != Kind::kConcat) continue;
    bool ok = true;
    for (size_t a = 0; a < c.from.size() && ok; ++a) {
      const int64_t j = c.from[a];
      ok = j >= 0 && std::count(c.from.begin(), c.from.end(), j) == 1 &&
           layers[static_cast<size_t>(j)].concat < 0 &&
           (layers[static_cast<size_t>(j)].kind == Kind::kModule ||
            layers[static_cast<size_t>(j)].kind == Kind::kUpsample);
    }
    if (!ok) continue;
    for (int64_t j : c.from) layers[static_cast<size_t>(j)].concat = static_cast<int>(i);
  }
  for (auto& [name, m] : named_modules())
    if (auto* conv = dynamic_cast<YoloConv*>(m)) {
      probe_ = conv;
      break;
    }
}

Outputs YoloModel::forward_all(const Tensor& x) {
  HPCNET_REQUIRE(
      x.dim() == 4 && x.size(1) == 3 && x.size(2) % 32 == 0 && x.size(3) % 32 == 0,
      "yolo takes (N, 3, H, W) images with H and W multiples of 32, got " + shape_str(x.shape()));
  return run(x, probe_ && yolo_detail::in_place(x, *probe_));
}

Tensor YoloModel::forward(const Tensor& x) { return forward_all(x)[1]; }

Tensor YoloModel::layer_output(size_t i, const std::vector<Tensor>& ys, const Tensor& x) {
  const Layer& l = layers[i];
  auto in = [&](size_t a) -> const Tensor& {
    return l.from[a] < 0 ? x : ys[static_cast<size_t>(l.from[a])];
  };
  switch (l.kind) {
    case Kind::kUpsample:
      return F::upsample_nearest2d(in(0), l.scale);
    case Kind::kConcat: {
      std::vector<Tensor> parts;
      for (size_t a = 0; a < l.from.size(); ++a) parts.push_back(in(a));
      return F::cat(parts, 1);
    }
    default:
      return l.module->forward(in(0));
  }
}

Outputs YoloModel::run(const Tensor& x, bool in_place) {
  // ys[i]: layer i's output while a later layer reads it. At predict time (in_place) a piece of
  // an in-place concatenation is written by its layer into its slice of the buffer, allocated
  // when the first piece is made (in the layout of that layer's input); the Concat is the buffer.
  std::vector<Tensor> ys(layers.size()), buffers(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    const Tensor& in0 = l.from[0] < 0 ? x : ys[static_cast<size_t>(l.from[0])];
    if (l.kind == Kind::kDetect) {
      Outputs feats;
      for (int64_t j : l.from) feats.push_back(ys[static_cast<size_t>(j)]);
      return detect->forward_levels(feats);
    }
    if (in_place && l.concat >= 0) {
      const auto c = static_cast<size_t>(l.concat);
      const Layer& cat = layers[c];
      if (!buffers[c].defined()) {
        std::vector<int64_t> pieces;
        for (int64_t j : cat.from) pieces.push_back(layers[static_cast<size_t>(j)].channels);
        buffers[c] = yolo_detail::concat_buffer(in0.layout(), pieces, x.size(2) / cat.stride,
                                                x.size(3) / cat.stride, x);
      }
      int64_t start = 0;
      for (int64_t j = 0; cat.from[static_cast<size_t>(j)] != static_cast<int64_t>(i); ++j)
        start += layers[static_cast<size_t>(cat.from[static_cast<size_t>(j)])].channels;
      Tensor piece = yolo_detail::channel_slice(buffers[c], start, l.channels);
      if (l.kind == Kind::kUpsample)
        ops::upsample_nearest2d_forward(ops::as_layout(in0, piece), piece, l.scale);
      else
        l.module->forward_into(in0, piece);
      ys[i] = piece;
    } else if (in_place && l.kind == Kind::kConcat && buffers[i].defined()) {
      ys[i] = buffers[i];
    } else {
      ys[i] = layer_output(i, ys, x);
    }
    for (int64_t j : l.from)  // drop what no later layer reads
      if (j >= 0 && last_use_[static_cast<size_t>(j)] == i) ys[static_cast<size_t>(j)] = Tensor();
  }
  throw Error("yolo: the graph has no Detect layer");
}

}  // namespace hpcnet::nn
