// Helpers shared by the test files (header-only): whole-file reads and writes, temporary folders,
// the tiny CIFAR-10 binary datasets the training tests learn from, running the hpcnet binary (or
// any shell command) with its output captured, comparing tensors and safetensors files, the
// message of an expected InputError, and the weight formula of the model golden fixtures.
//
// Everything is in hpcnet::test_util (not hpcnet::testing: test files that say
// `using namespace hpcnet;` would then find two `testing` namespaces, this one and GoogleTest's).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "test_paths.h"

// clang-format off
#include <cstdio>
#include <jpeglib.h>  // after <cstdio>: it needs FILE
#include <png.h>
// clang-format on

#include "hpcnet/data.h"
#include "hpcnet/error.h"
#include "hpcnet/io.h"
#include "hpcnet/nn.h"
#include "hpcnet/rng.h"
#include "hpcnet/tensor.h"
#include "hpcnet/train.h"

namespace hpcnet::test_util {

namespace fs = std::filesystem;

// Item i of a dataset (decoded now when the dataset is lazy) in one of a ring of 8 buffers of the
// calling thread: the last 8 items fetched stay valid, so `a = item(x, i), b = item(y, i)` works.
inline data::Example item(const data::Dataset& ds, int64_t i) {
  thread_local data::ExampleBuffer ring[8];
  thread_local int next = 0;
  data::ExampleBuffer& b = ring[next];
  next = (next + 1) % 8;
  return ds.get(i, b);
}

// Every item of a dataset read and decoded, in order: the errors a lazy dataset gives only when an
// item is read (an undecodable image, a mask of the wrong size) surface here.
inline std::shared_ptr<const data::Dataset> decode_all(std::shared_ptr<const data::Dataset> ds) {
  data::ExampleBuffer b;
  for (int64_t i = 0; i < ds->size(); ++i) ds->get(i, b);
  return ds;
}

// ---- files -------------------------------------------------------------------------------------

// The whole file as bytes ("" when it cannot be opened).
inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The bytes as a std::string (what write_file takes).
inline std::string string_of(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// Replaces the file with exactly these bytes.
inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// How many times part occurs in text (overlapping occurrences count).
inline size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The names in dir, sorted; none when dir does not exist.
inline std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The lines of text, without their '\n' (a final '\n' does not start an empty line).
inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// A new empty folder TMP/hpcnet_test_<tag>_XXXXXX (mkdtemp).
// The tutorial's own lines of a training run's stdout ("[1,  2000] loss: ...", "Finished
// Training"): without hpcnet's per-epoch summaries ("epoch 1/2  train_loss ...") and the
// "resuming RUN from epoch ..." line.
inline std::vector<std::string> tutorial_lines(const std::string& out) {
  std::vector<std::string> keep;
  for (const std::string& l : split_lines(out))
    if (l.rfind("epoch ", 0) != 0 && l.rfind("resuming ", 0) != 0) keep.push_back(l);
  return keep;
}

inline fs::path make_temp_dir(const std::string& tag) {
  std::string tmpl = (fs::temp_directory_path() / ("hpcnet_test_" + tag + "_XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

// A new empty folder (see make_temp_dir), removed with everything in it when this goes.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "tmp") : path_(make_temp_dir(tag)) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string str(const std::string& rel = "") const { return (path_ / rel).string(); }
  fs::path operator/(const fs::path& rel) const { return path_ / rel; }

 private:
  fs::path path_;
};

// ---- a tiny CIFAR-10 in the binary format ------------------------------------------------------

// The Rng stream most tests draw their CIFAR-10 records from (tests/dist/test_dist.cpp uses 91).
inline constexpr uint64_t kCifarStream = 77;

// n CIFAR-10 records (label byte, then the R, G and B planes of 32x32), drawn from
// Rng(seed, stream). Each class has its own colour (so labels are learnable); pixels get +-24 of
// noise, clamped to 0..255.
inline std::string cifar10_records(int n, uint64_t seed, uint64_t stream = kCifarStream) {
  Rng rng(seed, stream);
  std::string out;
  out.reserve(static_cast<size_t>(n) * 3073);
  for (int i = 0; i < n; ++i) {
    int label = static_cast<int>(rng.randint(10));
    out.push_back(static_cast<char>(label));
    const int base[3] = {(label * 53) % 256, (255 - label * 29) % 256, (label % 3) * 110};
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p) {
        int v = base[c] + static_cast<int>(rng.randint(49)) - 24;
        out.push_back(static_cast<char>(std::clamp(v, 0, 255)));
      }
  }
  return out;
}

// DIR/cifar-10-batches-bin/data_batch_K.bin for K = 1..5 (n_per_batch records each, seed K) and
// test_batch.bin (n_test records, seed 100): 5 x n_per_batch training images.
inline void write_tiny_cifar10(const fs::path& dir, int n_per_batch, int n_test,
                               uint64_t stream = kCifarStream) {
  const fs::path b = dir / "cifar-10-batches-bin";
  fs::create_directories(b);
  for (int k = 1; k <= 5; ++k)
    write_file(b / ("data_batch_" + std::to_string(k) + ".bin"),
               cifar10_records(n_per_batch, static_cast<uint64_t>(k), stream));
  write_file(b / "test_batch.bin", cifar10_records(n_test, 100, stream));
}

// ---- running commands --------------------------------------------------------------------------

// s in single quotes for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

struct RunResult {
  int rc = -1;  // exit code; 128 + N when killed by signal N
  double seconds = 0;
  std::string out, err;
  std::vector<std::string> out_lines() const { return split_lines(out); }
  std::vector<std::string> err_lines() const { return split_lines(err); }
};

// Runs a /bin/sh command line with stdin from /dev/null and stdout and stderr captured to files
// (so neither is a terminal) in a folder of this process's, removed at exit.
inline RunResult run_shell(const std::string& cmdline) {
  static const TempDir capture("capture");
  static int counter = 0;
  const fs::path out = capture / ("out" + std::to_string(counter));
  const fs::path err = capture / ("err" + std::to_string(counter++));
  const std::string cmd =
      cmdline + " </dev/null >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string());
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.rc =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.out = read_file(out);
  r.err = read_file(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

// The hpcnet executable, quoted for the shell.
inline std::string hpcnet_command() { return shell_quote(HPCNET_BINARY); }

// The /bin/sh command line `cd CWD && env -u <launcher variables> WRAP hpcnet ARGS`: without the
// launcher variables of the suite's own environment (ctest inside an sbatch or torchrun job would
// otherwise make it a rank of one); wrap: more of env's arguments (-u NAME, NAME=VALUE) and
// commands to run hpcnet under (timeout 60), as shell text.
inline std::string hpcnet_command_line(const std::vector<std::string>& args, const fs::path& cwd,
                                       const std::string& wrap = "") {
  std::string cmd = "cd " + shell_quote(cwd.string()) +
                    " && env -u SLURM_NTASKS -u SLURM_PROCID -u SLURM_LOCALID -u WORLD_SIZE -u "
                    "RANK -u LOCAL_RANK " +
                    wrap + hpcnet_command();
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return cmd;
}

// `hpcnet ARGS` run in cwd (see run_shell and hpcnet_command_line).
inline RunResult run_hpcnet(const std::vector<std::string>& args, const fs::path& cwd) {
  return run_shell(hpcnet_command_line(args, cwd));
}

// The flags of `hpcnet train` beyond the data, the run folder and the epochs, for the tiny CIFAR-10
// of write_tiny_cifar10 at batch 4 on one thread (so runs compare bit for bit); an empty value
// leaves its flag out (the binary's default).
struct TinyTrain {
  std::string model = "lenet", dataset = "cifar10", lr = "0.01", momentum = "0.9", workers = "0",
              seed = "3", log_every = "4";
  std::vector<std::string> extra;  // more flags, after --log-every
};

// `train --model lenet --dataset cifar10 --data DATA --epochs EPOCHS --batch-size 4 --lr 0.01
// --momentum 0.9 --workers 0 --seed 3 --threads 1 --log-every 4 [extra] --out OUT` as o says.
inline std::vector<std::string> tiny_train_args(const fs::path& data, const fs::path& out,
                                                int epochs, const TinyTrain& o = {}) {
  std::vector<std::string> a = {"train"};
  auto flag = [&](const char* name, const std::string& v) {
    if (!v.empty()) a.insert(a.end(), {name, v});
  };
  flag("--model", o.model);
  flag("--dataset", o.dataset);
  flag("--data", data.string());
  flag("--epochs", std::to_string(epochs));
  flag("--batch-size", "4");
  flag("--lr", o.lr);
  flag("--momentum", o.momentum);
  flag("--workers", o.workers);
  flag("--seed", o.seed);
  flag("--threads", "1");
  flag("--log-every", o.log_every);
  a.insert(a.end(), o.extra.begin(), o.extra.end());
  flag("--out", out.string());
  return a;
}

// What every refusal of bad input by the binary looks like: exit 2, one line on stderr that
// mentions each of `parts`, and no "Finished Training".
inline void expect_refused(const RunResult& r, const std::string& what,
                           std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.rc, 2) << what << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_EQ(r.err_lines().size(), 1u) << what << ": stderr is\n" << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << what << ": " << r.err;
  EXPECT_EQ(r.out.find("Finished Training"), std::string::npos) << what;
}

// ---- images ------------------------------------------------------------------------------------

// A w x h RGB image (HWC) of one colour (r, g, b) with +-spread of noise from Rng(seed, stream).
inline std::vector<uint8_t> noisy_pixels(int w, int h, int r, int g, int b, uint64_t seed,
                                         uint64_t stream, int spread) {
  Rng rng(seed, stream);
  std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
  const int base[3] = {r, g, b};
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<uint8_t>(std::clamp(
        base[i % 3] + static_cast<int>(rng.randint(static_cast<uint64_t>(2 * spread + 1))) - spread,
        0, 255));
  return px;
}

// Writes HWC RGB pixels as a PNG file (libpng's simplified API).
inline void write_png_file(const fs::path& path, int w, int h, const std::vector<uint8_t>& px) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr))
    throw std::runtime_error("png write failed: " + std::string(img.message));
}

// How jpeg_bytes encodes: libjpeg's defaults (4:2:0 chroma, baseline) but for these.
struct JpegOptions {
  int quality = 95;
  bool progressive = false;  // jpeg_simple_progression
  bool optimize = false;     // Huffman tables of its own (optimize_coding)
  bool full_chroma = false;  // 4:4:4: every component sampled 1x1
};

// HWC RGB pixels (w x h) as a JPEG file's bytes (libjpeg, in memory).
inline std::string jpeg_bytes(int w, int h, const uint8_t* px, const JpegOptions& o = {}) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, o.quality, TRUE);
  if (o.full_chroma)
    for (int c = 0; c < 3; ++c)
      cinfo.comp_info[c].h_samp_factor = cinfo.comp_info[c].v_samp_factor = 1;
  if (o.optimize) cinfo.optimize_coding = TRUE;
  if (o.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&px[static_cast<size_t>(cinfo.next_scanline) * w * 3]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

// Writes HWC RGB pixels as a JPEG file (quality 95 unless o says otherwise).
inline void write_jpeg_file(const fs::path& path, int w, int h, const std::vector<uint8_t>& px,
                            const JpegOptions& o = {}) {
  write_file(path, jpeg_bytes(w, h, px.data(), o));
}

// ROOT/data.yaml with images/{train,val}/ (64 x 64 JPEGs: noise with one or two coloured
// rectangles) and their labels/; class 0 red, class 1 blue.
inline void write_tiny_detect(const fs::path& root, int n_train, int n_val) {
  fs::create_directories(root);
  write_file(root / "data.yaml",
             "path: .\ntrain: images/train\nval: images/val\nnames:\n  0: "
             "red\n  1: blue\n");
  Rng rng(3, 0);
  for (auto [split, n] : {std::pair<std::string, int>{"train", n_train}, {"val", n_val}}) {
    fs::create_directories(root / "images" / split);
    fs::create_directories(root / "labels" / split);
    for (int i = 0; i < n; ++i) {
      std::vector<uint8_t> px = noisy_pixels(64, 64, 120, 120, 120, 10 + i, split.size(), 30);
      std::string rows;
      for (int k = 0; k < 1 + i % 2; ++k) {
        const int cls = (i + k) % 2;
        const int w = 12 + static_cast<int>(rng.randint(20)),
                  h = 12 + static_cast<int>(rng.randint(20));
        const int x = static_cast<int>(rng.randint(64 - w)),
                  y = static_cast<int>(rng.randint(64 - h));
        for (int yy = y; yy < y + h; ++yy)
          for (int xx = x; xx < x + w; ++xx) {
            uint8_t* p = &px[(yy * 64 + xx) * 3];
            p[0] = cls == 0 ? 230 : 20, p[1] = 20, p[2] = cls == 0 ? 20 : 230;
          }
        char row[96];
        std::snprintf(row, sizeof row, "%d %.6f %.6f %.6f %.6f\n", cls, (x + w / 2.0) / 64,
                      (y + h / 2.0) / 64, w / 64.0, h / 64.0);
        rows += row;
      }
      char name[16];
      std::snprintf(name, sizeof name, "%03d", i);
      write_jpeg_file(root / "images" / split / (std::string(name) + ".jpg"), 64, 64, px);
      write_file(root / "labels" / split / (std::string(name) + ".txt"), rows);
    }
  }
}

// ---- errors ------------------------------------------------------------------------------------

// The message of the InputError that f() throws; otherwise "no exception" or
// "wrong exception type: ...".
template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

// Success when f() throws an InputError whose message contains part; else a failure that shows
// what happened instead (for EXPECT_TRUE).
template <class F>
::testing::AssertionResult input_error(F&& f, const std::string& part) {
  const std::string e = input_error(std::forward<F>(f));
  if (e.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected an InputError containing '" << part << "', got: " << e;
}

// ---- tensors -----------------------------------------------------------------------------------

// A float32 tensor of shape s with values shift + scale * N(0, 1) from Rng(seed, 11).
inline Tensor normal_tensor(const Shape& s, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Rng rng(seed, 11);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = static_cast<float>(shift + scale * rng.normal());
  return Tensor::from_vector(v, s);
}

// Same dtype, shape and bytes.
inline bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

// Each named tensor's values (float64) by its name less the first strip.size() characters; ts: a
// list of (name, Tensor) pairs such as nn::NamedTensors.
template <class Named>
std::map<std::string, std::vector<double>> values_by_name(const Named& ts,
                                                          const std::string& strip = "") {
  std::map<std::string, std::vector<double>> out;
  for (auto& [n, t] : ts) out[n.substr(strip.size())] = t.to_vector_f64();
  return out;
}

// Every value of every parameter of a module (an nn::Module), by name: a deep copy.
template <class Module>
std::map<std::string, std::vector<float>> parameter_values(const Module& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [n, t] : m.named_parameters()) out[n] = t.to_vector();
  return out;
}

// A module's state_dict with every tensor cloned, by name.
template <class Module>
std::map<std::string, Tensor> cloned_state(const Module& m) {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : m.state_dict()) out.emplace(n, t.clone());
  return out;
}

// An (n, 3, 32, 32) batch of values in [-1, 1) from Rng(seed, 3), like the tutorial's normalised
// images.
inline Tensor uniform_images(int64_t n, uint64_t seed) {
  Rng rng(seed, 3);
  std::vector<float> v(static_cast<size_t>(n * 3 * 32 * 32));
  for (float& x : v) x = rng.uniform(-1.f, 1.f);
  return Tensor::from_vector(v, {n, 3, 32, 32});
}

// max |t| over the elements (0 for an empty tensor).
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector_f64()) m = std::max(m, std::abs(v));
  return m;
}

// Two safetensors files hold the same names in the same order, and identical tensors.
inline void expect_same_tensors(const fs::path& a, const fs::path& b) {
  SafetensorsFile fa = load_safetensors(a.string());
  SafetensorsFile fb = load_safetensors(b.string());
  ASSERT_EQ(fa.order, fb.order);
  for (const auto& n : fa.order) {
    const Tensor& ta = fa.at(n);
    const Tensor& tb = fb.at(n);
    ASSERT_EQ(ta.shape(), tb.shape()) << n;
    ASSERT_EQ(ta.dtype(), tb.dtype()) << n;
    EXPECT_EQ(std::memcmp(ta.raw_data(), tb.raw_data(), ta.nbytes()), 0) << n << " differs";
  }
}

// ---- golden fixtures of whole models -----------------------------------------------------------

// The value of a model's tensor from its state-dict name, as weight_values() in
// tests/golden/make_golden_unet.py and make_golden_deeplab.py fill it (those fixtures hold no
// weights): with k = sum((j + 1) * byte_j of name) mod 9973 and v_i = sin(0.7 i + 1.3 k + 0.5) in
// float64, conv weights (4-d) v * sqrt(3 / fan_in) with fan_in = size(1) * size(2) * size(3),
// other weights 1 + 0.2 v, running_mean 0.1 v, running_var 1 + 0.5 |v|, num_batches_tracked 0,
// anything else (biases) 0.1 v; rounded to float32. t: a contiguous CPU tensor, written in place.
inline void fill_from_formula(const std::string& name, Tensor t) {
  int64_t key = 0;
  for (size_t j = 0; j < name.size(); ++j)
    key += static_cast<int64_t>(j + 1) * static_cast<unsigned char>(name[j]);
  key %= 9973;
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("num_batches_tracked")) {
    t.data<int64_t>()[0] = 0;
    return;
  }
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = std::sin(0.7 * static_cast<double>(i) + 1.3 * static_cast<double>(key) + 0.5);
    double out;
    if (ends("running_mean"))
      out = 0.1 * v;
    else if (ends("running_var"))
      out = 1 + 0.5 * std::abs(v);
    else if (ends("weight") && t.dim() == 4)
      out = v * std::sqrt(3.0 / static_cast<double>(t.size(1) * t.size(2) * t.size(3)));
    else if (ends("weight"))
      out = 1 + 0.2 * v;
    else
      out = 0.1 * v;
    p[i] = static_cast<float>(out);
  }
}

// max |a - b| / max |b| (max |a - b| when b is all zeros); differing shapes fail the test.
inline double rel_err(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto x = a.to_vector_f64(), y = b.to_vector_f64();
  double d = 0, m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    d = std::max(d, std::abs(x[i] - y[i]));
    m = std::max(m, std::abs(y[i]));
  }
  return m > 0 ? d / m : d;
}

// A model file of a fresh `model` (its weights drawn after manual_seed(seed)) with the metadata
// predict and eval read: task, class names, input size.
inline void save_fresh_model(const fs::path& file, const std::string& model, const std::string& task,
                             const std::vector<std::string>& classes, int64_t imgsz,
                             uint64_t seed) {
  manual_seed(seed);
  auto module = nn::make_model(model, nn::ModelOptions{static_cast<int64_t>(classes.size())});
  train::ModelMeta meta;
  meta.model = model;
  meta.task = task;
  meta.classes = classes;
  meta.imgsz = imgsz;
  train::save_model(file.string(), *module, meta);
}

// The Euclidean norm of a tensor's values, in double.
inline double l2_norm(const Tensor& t) {
  double s = 0;
  for (double v : t.to_vector_f64()) s += v * v;
  return std::sqrt(s);
}

// The median of a list (the upper one of an even count; 0 for none).
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace hpcnet::test_util
