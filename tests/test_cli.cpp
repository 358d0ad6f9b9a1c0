// Tests of the `hpcnet` command itself (the binary at HPCNET_BINARY, run through the shell with
// stdout and stderr captured to files): train end to end on a tiny CIFAR-10 folder, the progress
// bar on a terminal (a pseudo-terminal) and its absence elsewhere, resume, eval (text, --json,
// --split val), predict by class name, info and --help; and every kind of bad input: exit code 2,
// exactly one line on stderr naming the argument or file, and no run directory written.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <png.h>

#include "hpcnet/io.h"
#include "hpcnet/rng.h"

namespace fs = std::filesystem;
using namespace hpcnet;

#ifndef HPCNET_BINARY
#error "HPCNET_BINARY (the hpcnet executable) must be defined by the build"
#endif

namespace {

// ---- files -------------------------------------------------------------------------------------

std::string cli_read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void cli_write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> cli_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

fs::path cli_mkdtemp(const std::string& tag) {
  std::string tmpl = (fs::temp_directory_path() / ("hpcnet_test_cli_" + tag + "_XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

// CIFAR-10 records with a colour per class (see test_train.cpp) into DIR/cifar-10-batches-bin/.
std::string cli_cifar_records(int n, uint64_t seed) {
  Rng rng(seed, 77);
  std::string out;
  for (int i = 0; i < n; ++i) {
    int label = static_cast<int>(rng.randint(10));
    out.push_back(static_cast<char>(label));
    const int base[3] = {(label * 53) % 256, (255 - label * 29) % 256, (label % 3) * 110};
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p)
        out.push_back(static_cast<char>(
            std::clamp(base[c] + static_cast<int>(rng.randint(49)) - 24, 0, 255)));
  }
  return out;
}

void cli_make_cifar(const fs::path& dir, int n_per_batch = 40) {
  fs::path b = dir / "cifar-10-batches-bin";
  fs::create_directories(b);
  for (int k = 1; k <= 5; ++k)
    cli_write(b / ("data_batch_" + std::to_string(k) + ".bin"), cli_cifar_records(n_per_batch, k));
  cli_write(b / "test_batch.bin", cli_cifar_records(40, 100));
}

// ---- images
// --------------------------------------------------------------------------------------

// A w x h RGB image of one colour with a little noise, HWC.
std::vector<uint8_t> cli_pixels(int w, int h, int r, int g, int b, uint64_t seed) {
  Rng rng(seed, 5);
  std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
  const int base[3] = {r, g, b};
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<uint8_t>(
        std::clamp(base[i % 3] + static_cast<int>(rng.randint(21)) - 10, 0, 255));
  return px;
}

void cli_write_png(const fs::path& path, int w, int h, const std::vector<uint8_t>& px) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr))
    throw std::runtime_error("png write failed: " + std::string(img.message));
}

void cli_write_jpeg(const fs::path& path, int w, int h, const std::vector<uint8_t>& px) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path.string());
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&px[static_cast<size_t>(cinfo.next_scanline) * w * 3]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

// An image folder ROOT/{train,test}/{apple,banana,cherry}/ with PNGs and JPEGs of a colour each.
void cli_make_image_folder(const fs::path& root) {
  const char* names[3] = {"apple", "banana", "cherry"};
  const int colours[3][3] = {{200, 30, 30}, {220, 210, 40}, {90, 10, 60}};
  for (const char* split : {"train", "test"})
    for (int c = 0; c < 3; ++c) {
      fs::path d = root / split / names[c];
      fs::create_directories(d);
      for (int i = 0; i < 4; ++i) {
        auto px = cli_pixels(32, 32, colours[c][0], colours[c][1], colours[c][2], c * 10 + i);
        if (i % 2)
          cli_write_png(d / ("img" + std::to_string(i) + ".png"), 32, 32, px);
        else
          cli_write_jpeg(d / ("img" + std::to_string(i) + ".jpg"), 32, 32, px);
      }
    }
}

// ---- running the binary
// --------------------------------------------------------------------------

std::string cli_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

struct CliResult {
  int rc = -1;
  std::string out, err;
  std::vector<std::string> out_lines() const { return cli_lines(out); }
  std::vector<std::string> err_lines() const { return cli_lines(err); }
};

// Runs `hpcnet ARGS` in cwd with stdin from /dev/null and stdout/stderr to files (not a terminal).
CliResult cli_run(const std::vector<std::string>& args, const fs::path& cwd) {
  struct Scratch {  // where captured output goes, removed at exit
    fs::path dir = cli_mkdtemp("io");
    ~Scratch() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  static int counter = 0;
  static const Scratch scratch;
  const fs::path& io = scratch.dir;
  const fs::path out = io / ("out" + std::to_string(counter));
  const fs::path err = io / ("err" + std::to_string(counter++));
  std::string cmd = "cd " + cli_quote(cwd.string()) + " && " + cli_quote(HPCNET_BINARY);
  for (const auto& a : args) cmd += " " + cli_quote(a);
  cmd += " </dev/null >" + cli_quote(out.string()) + " 2>" + cli_quote(err.string());
  int status = std::system(cmd.c_str());
  CliResult r;
  r.rc =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.out = cli_read(out);
  r.err = cli_read(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

// Runs `hpcnet ARGS` on a pseudo-terminal; returns everything it wrote and sets *rc.
std::string cli_run_pty(const std::vector<std::string>& args, const fs::path& cwd, int* rc) {
  std::vector<std::string> argv_s = {HPCNET_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  int master = -1;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) throw std::runtime_error("forkpty failed");
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) _exit(126);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{master, POLLIN, 0};
    int ready = ::poll(&p, 1, 120000);
    if (ready <= 0) {  // stuck: give up rather than hang the suite
      ::kill(pid, SIGKILL);
      break;
    }
    ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// The tutorial command on the tiny data (threads fixed so runs compare bit for bit).
std::vector<std::string> cli_train_args(const fs::path& data, const fs::path& out, int epochs) {
  return {"train",
          "--model",
          "lenet",
          "--dataset",
          "cifar10",
          "--data",
          data.string(),
          "--epochs",
          std::to_string(epochs),
          "--batch-size",
          "4",
          "--lr",
          "0.001",
          "--momentum",
          "0.9",
          "--workers",
          "2",
          "--seed",
          "0",
          "--out",
          out.string(),
          "--log-every",
          "25",
          "--threads",
          "1"};
}

// What every refusal looks like: exit 2, one line on stderr that mentions each of `parts`.
void cli_expect_refused(const CliResult& r, const std::string& what,
                        std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.rc, 2) << what << "\nstdout: " << r.out << "\nstderr: " << r.err;
  auto lines = r.err_lines();
  EXPECT_EQ(lines.size(), 1u) << what << ": stderr is\n" << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << what << ": " << r.err;
  EXPECT_EQ(r.out.find("Finished Training"), std::string::npos) << what;
}

// Data and runs shared by the tests of one process, made on first use.
struct CliShared {
  fs::path dir;
  CliShared() : dir(cli_mkdtemp("shared")) { cli_make_cifar(dir / "cifar"); }
  ~CliShared() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path cifar() const { return dir / "cifar"; }
  // `train` of the tutorial recipe for 2 epochs into DIR/run (once).
  const CliResult& run() {
    if (run_.rc < 0) run_ = cli_run(cli_train_args(cifar(), dir / "run", 2), dir);
    return run_;
  }
  fs::path run_dir() {
    run();
    return dir / "run";
  }
  // One epoch with --val-split 40 into DIR/valrun.
  fs::path val_run() {
    if (val_.rc < 0) {
      auto args = cli_train_args(cifar(), dir / "valrun", 1);
      *(std::find(args.begin(), args.end(), "--lr") + 1) = "0.01";
      args.insert(args.end(), {"--val-split", "40"});
      val_ = cli_run(args, dir);
    }
    EXPECT_EQ(val_.rc, 0) << val_.err;
    return dir / "valrun";
  }
  // An image-folder run (classes apple, banana, cherry) into DIR/fruit.
  fs::path fruit_run() {
    if (fruit_.rc < 0) {
      cli_make_image_folder(dir / "fruit_data");
      fruit_ =
          cli_run({"train", "--dataset", "imagefolder", "--data", (dir / "fruit_data").string(),
                   "--out", (dir / "fruit").string(), "--epochs", "3", "--lr", "0.01", "--threads",
                   "1", "--workers", "0", "--log-every", "1000"},
                  dir);
    }
    EXPECT_EQ(fruit_.rc, 0) << fruit_.err;
    return dir / "fruit";
  }

 private:
  CliResult run_, val_, fruit_;
};

CliShared& cli_shared() {
  static CliShared s;
  return s;
}

// A fresh folder per test.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cli_mkdtemp("t"); }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  CliResult run(const std::vector<std::string>& args) const { return cli_run(args, dir_); }
  // A copy of the shared CIFAR folder to break.
  fs::path cifar_copy() const {
    fs::copy(cli_shared().cifar(), dir_ / "cifar", fs::copy_options::recursive);
    return dir_ / "cifar";
  }
  fs::path run_copy() const {
    fs::copy(cli_shared().run_dir(), dir_ / "run", fs::copy_options::recursive);
    return dir_ / "run";
  }
  fs::path dir_;
};

}  // namespace

// ---- help, info
// ----------------------------------------------------------------------------------

TEST_F(CliTest, HelpVersionAndInfo) {
  CliResult r = run({"--help"});
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const char* sub : {"train", "eval", "predict", "info"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
  r = run({"train", "--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* opt : {"--batch-size", "--lr", "--momentum", "--workers", "--seed", "--resume",
                          "--device", "--threads", "--log-every"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  r = run({"--version"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("hpcnet"), std::string::npos);
  r = run({"info"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("oneDNN"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lenet"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
  r = run({});
  cli_expect_refused(r, "no subcommand", {"subcommand"});
}

// ---- train
// -----------------------------------------------------------------------------------------

TEST_F(CliTest, TrainPrintsTheTutorialLinesAndWritesTheRun) {
  const CliResult& r = cli_shared().run();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // 200 images in batches of 4 = 50 steps per epoch; --log-every 25.
  EXPECT_EQ(r.out_lines().size(), 5u) << r.out;
  const std::regex line(R"(\[[12], +(25|50)\] loss: \d\.\d{3})");
  auto lines = r.out_lines();
  for (size_t i = 0; i + 1 < lines.size(); ++i)
    EXPECT_TRUE(std::regex_match(lines[i], line)) << lines[i];
  EXPECT_EQ(lines[0].substr(0, 11), "[1,    25] ");
  EXPECT_EQ(lines[3].substr(0, 11), "[2,    50] ");
  EXPECT_EQ(lines.back(), "Finished Training");
  // Not a terminal: no progress bar, no escape codes.
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);

  fs::path d = cli_shared().run_dir();
  for (const char* f : {"model.safetensors", "checkpoint.safetensors", "metrics.jsonl"})
    EXPECT_TRUE(fs::is_regular_file(d / f)) << f;
  SafetensorsFile m = load_safetensors((d / "model.safetensors").string());
  EXPECT_EQ(m.order.front(), "conv1.weight");
  EXPECT_EQ(m.order.back(), "fc3.bias");
  EXPECT_EQ(m.order.size(), 10u);
  EXPECT_NE(m.metadata.at("hpcnet.classes").find("airplane"), std::string::npos);
  std::map<std::string, int> events;
  for (const auto& l : cli_lines(cli_read(d / "metrics.jsonl"))) {
    auto j = nlohmann::json::parse(l);
    ASSERT_TRUE(j.is_object()) << l;
    events[j.at("event")]++;
  }
  EXPECT_EQ(events["start"], 1);
  EXPECT_EQ(events["log"], 4);  // 2 loss lines per epoch
  EXPECT_EQ(events["epoch"], 2);
}

TEST_F(CliTest, ProgressBarOnATerminalOnly) {
  fs::path data = cli_shared().cifar();
  int rc = -1;
  auto args = cli_train_args(data, dir_ / "tty", 1);
  std::string tty = cli_run_pty(args, dir_, &rc);
  EXPECT_EQ(rc, 0) << tty;
  EXPECT_NE(tty.find("epoch 1/1 ["), std::string::npos) << tty;
  EXPECT_NE(tty.find("\x1b[K"), std::string::npos);
  EXPECT_NE(tty.find("[1,    25] loss: "), std::string::npos) << tty;
  EXPECT_NE(tty.find("Finished Training"), std::string::npos);
  // --no-progress turns it off even there.
  args = cli_train_args(data, dir_ / "tty2", 1);
  args.push_back("--no-progress");
  tty = cli_run_pty(args, dir_, &rc);
  EXPECT_EQ(rc, 0) << tty;
  EXPECT_EQ(tty.find("epoch 1/1 ["), std::string::npos) << tty;
  EXPECT_EQ(tty.find('\x1b'), std::string::npos);
  EXPECT_NE(tty.find("Finished Training"), std::string::npos);
}

// 1 epoch, then --resume to 2: the same bytes as the uninterrupted 2-epoch run. The recipe
// (including --threads) comes from the checkpoint.
TEST_F(CliTest, ResumeEqualsAnUninterruptedRun) {
  fs::path straight = cli_shared().run_dir();
  CliResult r = run(cli_train_args(cli_shared().cifar(), dir_ / "part", 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"train", "--resume", (dir_ / "part").string(), "--epochs", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0], cli_shared().run().out_lines()[2]);  // "[2,    25] loss: ..." as before
  EXPECT_EQ(cli_read(dir_ / "part" / "model.safetensors"),
            cli_read(straight / "model.safetensors"));
  EXPECT_EQ(cli_read(dir_ / "part" / "checkpoint.safetensors"),
            cli_read(straight / "checkpoint.safetensors"));
  // Changing the recipe on resume is refused.
  r = run({"train", "--resume", (dir_ / "part").string(), "--epochs", "3", "--lr", "0.5"});
  cli_expect_refused(r, "recipe change", {"--lr", "checkpoint.safetensors"});
}

// ---- eval
// ------------------------------------------------------------------------------------------

TEST_F(CliTest, EvalPrintsPerClassAccuracyThenTheTotal) {
  fs::path w = cli_shared().run_dir() / "model.safetensors";
  CliResult r = run({"eval", "--model", "lenet", "--weights", w.string(), "--dataset", "cifar10",
                     "--data", cli_shared().cifar().string(), "--split", "test"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 12u) << r.out;
  EXPECT_TRUE(std::regex_match(
      lines[0], std::regex(R"(Accuracy of the network on the 40 test images: \d+ %)")))
      << lines[0];
  for (size_t i = 1; i <= 10; ++i)
    EXPECT_TRUE(
        std::regex_match(lines[i], std::regex(R"(Accuracy for class: [a-z]+ +is +\d+\.\d %)")))
        << lines[i];
  EXPECT_NE(lines[1].find("airplane"), std::string::npos);
  EXPECT_NE(lines[10].find("truck"), std::string::npos);
  EXPECT_TRUE(std::regex_match(lines.back(), std::regex(R"(accuracy: \d+\.\d\d%)")))
      << lines.back();

  // --json: one object with the same accuracy.
  CliResult j = run({"eval", "--weights", w.string(), "--data", cli_shared().cifar().string(),
                     "--json", "--threads", "1", "--device", "cpu"});
  ASSERT_EQ(j.rc, 0) << j.err;
  ASSERT_EQ(j.out_lines().size(), 1u) << j.out;
  auto obj = nlohmann::json::parse(j.out);
  ASSERT_TRUE(obj.at("accuracy").is_number());
  EXPECT_EQ(obj.at("images"), 40);
  EXPECT_EQ(obj.at("per_class").size(), 10u);
  char want[64];
  std::snprintf(want, sizeof want, "accuracy: %.2f%%", obj.at("accuracy").get<double>());
  EXPECT_EQ(lines.back(), want);

  // A checkpoint holds the same weights after the last epoch.
  CliResult c =
      run({"eval", "--weights", (cli_shared().run_dir() / "checkpoint.safetensors").string(),
           "--data", cli_shared().cifar().string(), "--json"});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(nlohmann::json::parse(c.out).at("accuracy"), obj.at("accuracy"));
}

TEST_F(CliTest, EvalValSplitUsesTheRecordedHoldOut) {
  fs::path vr = cli_shared().val_run();
  CliResult r = run({"eval", "--weights", (vr / "model.safetensors").string(), "--data",
                     cli_shared().cifar().string(), "--split", "val", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto obj = nlohmann::json::parse(r.out);
  EXPECT_EQ(obj.at("images"), 40);
  EXPECT_EQ(obj.at("split"), "val");
  // The same number the training run logged for its val split.
  double logged = -1;
  for (const auto& l : cli_lines(cli_read(vr / "metrics.jsonl"))) {
    auto j = nlohmann::json::parse(l);
    if (j.at("event") == "epoch") logged = j.at("val_accuracy");
  }
  EXPECT_DOUBLE_EQ(obj.at("accuracy").get<double>(), logged);
  // Text mode too.
  r = run({"eval", "--weights", (vr / "model.safetensors").string(), "--data",
           cli_shared().cifar().string(), "--split", "val"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("on the 40 val images"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_match(r.out_lines().back(), std::regex(R"(accuracy: \d+\.\d\d%)")));
  // Weights trained without a split need --val-split.
  r = run({"eval", "--weights", (cli_shared().run_dir() / "model.safetensors").string(), "--data",
           cli_shared().cifar().string(), "--split", "val"});
  cli_expect_refused(r, "no val split", {"--val-split"});
  r = run({"eval", "--weights", (cli_shared().run_dir() / "model.safetensors").string(), "--data",
           cli_shared().cifar().string(), "--split", "val", "--val-split", "20", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("images"), 20);
}

// ---- predict
// -----------------------------------------------------------------------------------------

TEST_F(CliTest, PredictNamesTheClassesFromTheWeightsFile) {
  fs::path w = cli_shared().fruit_run() / "model.safetensors";
  cli_write_png(dir_ / "red.png", 32, 32, cli_pixels(32, 32, 200, 30, 30, 99));
  cli_write_jpeg(dir_ / "yellow.jpg", 48, 40, cli_pixels(48, 40, 220, 210, 40, 98));  // resized
  CliResult r = run({"predict", "--weights", w.string(), "red.png", "yellow.jpg"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0].rfind("red.png:", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("yellow.jpg:", 0), 0u) << lines[1];
  const std::regex entry(R"(([a-z]+) (\d\.\d{3}))");
  for (const auto& l : lines) {
    std::vector<std::string> names;
    double prev = 2, sum = 0;
    for (auto it = std::sregex_iterator(l.begin(), l.end(), entry); it != std::sregex_iterator();
         ++it) {
      names.push_back((*it)[1]);
      double p = std::stod((*it)[2]);
      EXPECT_LE(p, prev + 1e-9) << l;  // best first
      prev = p;
      sum += p;
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"apple", "banana", "cherry"})) << l;
    EXPECT_NEAR(sum, 1.0, 0.003) << l;
  }
  // --json --top 1: one object per image.
  r = run({"predict", "--weights", w.string(), "--top", "1", "--json", "--device", "cpu", "red.png",
           "yellow.jpg"});
  ASSERT_EQ(r.rc, 0) << r.err;
  lines = r.out_lines();
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& l : lines) {
    auto j = nlohmann::json::parse(l);
    ASSERT_EQ(j.at("top").size(), 1u);
    std::string cls = j.at("top")[0].at("class");
    EXPECT_TRUE(cls == "apple" || cls == "banana" || cls == "cherry") << cls;
    double p = j.at("top")[0].at("probability");
    EXPECT_GE(p, 1.0 / 3 - 1e-6);
    EXPECT_LE(p, 1.0);
  }
  EXPECT_EQ(nlohmann::json::parse(lines[0]).at("image"), "red.png");
}

TEST_F(CliTest, PredictRefusesBadImages) {
  fs::path w = cli_shared().run_dir() / "model.safetensors";
  cli_write(dir_ / "notes.png", "this is not a picture");
  CliResult r = run({"predict", "--weights", w.string(), "notes.png"});
  cli_expect_refused(r, "undecodable", {"notes.png"});
  r = run({"predict", "--weights", w.string(), "missing.jpg"});
  cli_expect_refused(r, "missing", {"missing.jpg"});
  // A PNG cut short.
  cli_write_png(dir_ / "ok.png", 32, 32, cli_pixels(32, 32, 1, 2, 3, 4));
  std::string png = cli_read(dir_ / "ok.png");
  cli_write(dir_ / "cut.png", png.substr(0, png.size() / 2));
  r = run({"predict", "--weights", w.string(), "cut.png"});
  cli_expect_refused(r, "truncated png", {"cut.png"});
  r = run({"predict", "--weights", w.string(), "--top", "0", "ok.png"});
  cli_expect_refused(r, "top 0", {"--top"});
  r = run({"predict", "--weights", w.string()});
  cli_expect_refused(r, "no images", {"images"});
  r = run({"predict", "--weights", (dir_ / "none.safetensors").string(), "ok.png"});
  cli_expect_refused(r, "no weights", {"none.safetensors"});
}

// ---- bad arguments
// ---------------------------------------------------------------------------------

TEST_F(CliTest, BadTrainArgumentsExitTwoWithOneLine) {
  const fs::path data = cli_shared().cifar();
  struct Case {
    std::vector<std::string> extra;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--batch-size", "0"}, "--batch-size"},
      {{"--batch-size", "four"}, "--batch-size"},
      {{"--lr", "-0.001"}, "--lr"},
      {{"--momentum", "-0.9"}, "--momentum"},
      {{"--epochs", "0"}, "--epochs"},
      {{"--model", "resnet999"}, "resnet999"},
      {{"--dataset", "mnist"}, "mnist"},
      {{"--workers", "-1"}, "--workers"},
      {{"--threads", "-1"}, "--threads"},
      {{"--log-every", "0"}, "--log-every"},
      {{"--device", "cuda"}, "CUDA"},
      {{"--device", "tpu"}, "tpu"},
      {{"--frobnicate"}, "--frobnicate"},
      {{"--val-split", "200"}, "--val-split"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"train", "--data", data.string(), "--out",
                                     (dir_ / "run").string()};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    CliResult r = run(args);
    cli_expect_refused(r, c.extra[0], {c.expect});
    EXPECT_FALSE(fs::exists(dir_ / "run")) << c.extra[0];
  }
  CliResult r = run({"train", "--data", data.string()});
  cli_expect_refused(r, "no --out", {"--out"});
  cli_write(dir_ / "afile", "x");
  r = run({"train", "--data", data.string(), "--out", (dir_ / "afile").string()});
  cli_expect_refused(r, "out is a file", {"afile"});
}

TEST_F(CliTest, BadEvalArgumentsExitTwoWithOneLine) {
  const std::string w = (cli_shared().run_dir() / "model.safetensors").string();
  const std::string data = cli_shared().cifar().string();
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"eval", "--weights", w, "--data", data, "--split", "train"}, "--split"},
      {{"eval", "--weights", w, "--data", data, "--batch-size", "0"}, "--batch-size"},
      {{"eval", "--weights", w, "--data", data, "--device", "cuda"}, "CUDA"},
      {{"eval", "--weights", w, "--data", data, "--model", "resnet999"}, "resnet999"},
      {{"eval", "--weights", w, "--data", data, "--dataset", "mnist"}, "mnist"},
      {{"eval", "--data", data}, "--weights"},
      {{"eval", "--weights", w}, "--data"},
      {{"eval", "--weights", w, "--data", (dir_ / "nowhere").string()}, "nowhere"},
      {{"predict", "--weights", w, "--device", "cuda", "x.png"}, "CUDA"},
  };
  for (const auto& c : cases) cli_expect_refused(run(c.args), c.args.back(), {c.expect});
}

// ---- bad data
// -------------------------------------------------------------------------------------

TEST_F(CliTest, BadDatasetsExitTwoNamingTheFileAndWriteNothing) {
  fs::path data = cifar_copy();
  fs::path b = data / "cifar-10-batches-bin";
  const fs::path out = dir_ / "run";
  auto train = [&](const fs::path& d) { return run(cli_train_args(d, out, 1)); };
  auto check = [&](const std::string& what, std::initializer_list<std::string> parts) {
    cli_expect_refused(train(data), what, parts);
    EXPECT_FALSE(fs::exists(out)) << what << ": a run directory was created";
  };
  // Size not a multiple of 3073 bytes.
  std::string good = cli_read(b / "data_batch_3.bin");
  cli_write(b / "data_batch_3.bin", good.substr(0, 3073 * 10 + 1000));
  check("truncated", {"data_batch_3.bin", "3073"});
  // A label byte of 10.
  std::string bad = good;
  bad[3073 * 4] = static_cast<char>(10);
  cli_write(b / "data_batch_3.bin", bad);
  check("label", {"data_batch_3.bin", "label"});
  cli_write(b / "data_batch_3.bin", good);
  // Missing and empty batch files.
  fs::remove(b / "data_batch_4.bin");
  check("missing batch", {"data_batch_4.bin"});
  cli_write(b / "data_batch_4.bin", "");
  check("empty batch", {"data_batch_4.bin"});
  // No data at all.
  cli_expect_refused(train(dir_ / "nothing"), "no data", {"nothing"});
  EXPECT_FALSE(fs::exists(out));

  // eval reads test_batch.bin.
  cli_write(b / "test_batch.bin", cli_read(b / "data_batch_1.bin").substr(0, 5000));
  CliResult r = run({"eval", "--weights", (cli_shared().run_dir() / "model.safetensors").string(),
                     "--data", data.string()});
  cli_expect_refused(r, "truncated test batch", {"test_batch.bin"});
}

TEST_F(CliTest, BadImageFoldersExitTwoNamingTheFileAndWriteNothing) {
  fs::path root = dir_ / "fruit";
  cli_make_image_folder(root);
  const fs::path out = dir_ / "run";
  auto train = [&] {
    return run({"train", "--dataset", "imagefolder", "--data", root.string(), "--out", out.string(),
                "--epochs", "1", "--threads", "1"});
  };
  // An undecodable image.
  cli_write(root / "train" / "banana" / "img1.png", "PK\x03\x04 not a png");
  cli_expect_refused(train(), "undecodable", {"img1.png"});
  EXPECT_FALSE(fs::exists(out));
  fs::remove(root / "train" / "banana" / "img1.png");
  // An empty class folder.
  fs::create_directories(root / "train" / "durian");
  cli_expect_refused(train(), "empty class", {"durian"});
  EXPECT_FALSE(fs::exists(out));
  fs::remove(root / "train" / "durian");
  // Now it trains.
  CliResult r = train();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
}

// ---- bad checkpoints
// ---------------------------------------------------------------------------------

TEST_F(CliTest, BadCheckpointsOnResumeExitTwoAndLeaveTheRunAlone) {
  fs::path rd = run_copy();
  const fs::path ck = rd / "checkpoint.safetensors";
  const std::string good = cli_read(ck);
  const std::string model = cli_read(rd / "model.safetensors");
  const std::string metrics = cli_read(rd / "metrics.jsonl");
  auto resume = [&] { return run({"train", "--resume", rd.string(), "--epochs", "3"}); };
  auto check = [&](const std::string& what, std::initializer_list<std::string> parts) {
    cli_expect_refused(resume(), what, parts);
    EXPECT_EQ(cli_read(rd / "model.safetensors"), model) << what;
    EXPECT_EQ(cli_read(rd / "metrics.jsonl"), metrics) << what;
  };
  SafetensorsFile f = load_safetensors(ck.string());
  auto rewrite = [&](const std::map<std::string, Tensor>& replace,
                     const std::map<std::string, std::string>& meta_changes) {
    std::vector<std::pair<std::string, Tensor>> ts;
    for (const auto& n : f.order) {
      auto it = replace.find(n);
      ts.emplace_back(n, it == replace.end() ? f.at(n) : it->second);
    }
    auto meta = f.metadata;
    for (const auto& [k, v] : meta_changes) meta[k] = v;
    save_safetensors(ck.string(), ts, meta);
  };

  cli_write(ck, good.substr(0, good.size() - 1000));
  check("truncated", {"checkpoint.safetensors", "truncated"});
  cli_write(ck, good.substr(0, 6));
  check("stub", {"checkpoint.safetensors"});
  cli_write(ck, model);
  check("weights only", {"checkpoint.safetensors"});
  // Mismatched shapes: a 3-class head.
  rewrite({{"model.fc3.weight", Tensor::zeros({3, 84})},
           {"model.fc3.bias", Tensor::zeros({3})},
           {"optim.momentum_buffer.fc3.weight", Tensor::zeros({3, 84})},
           {"optim.momentum_buffer.fc3.bias", Tensor::zeros({3})}},
          {});
  check("shapes", {"checkpoint.safetensors", "fc3.weight", "(3, 84)"});
  // Another model.
  auto cfg = nlohmann::json::parse(f.metadata.at("hpcnet.config"));
  cfg["model"] = "resnet99";  // a model this build does not have
  rewrite({}, {{"hpcnet.model", "resnet99"}, {"hpcnet.config", cfg.dump()}});
  check("unknown model", {"checkpoint.safetensors", "resnet99"});
  cfg["model"] = "resnet20";  // a known model whose tensors do not fit
  rewrite({}, {{"hpcnet.model", "resnet20"}, {"hpcnet.config", cfg.dump()}});
  check("other model", {"checkpoint.safetensors", "conv1.weight"});
  rewrite({}, {{"hpcnet.config", "{not json"}});
  check("bad config", {"checkpoint.safetensors", "config"});
  cfg = nlohmann::json::parse(f.metadata.at("hpcnet.config"));
  cfg["batch_size"] = "four";
  rewrite({}, {{"hpcnet.config", cfg.dump()}});
  check("config type", {"checkpoint.safetensors", "batch_size"});
  rewrite({}, {{"hpcnet.rng_state", "[1,2]"}});
  check("rng", {"checkpoint.safetensors", "rng"});
  fs::remove(ck);
  check("no checkpoint", {"--resume", "checkpoint.safetensors"});

  // Restored, it resumes (and only then touches the run).
  cli_write(ck, good);
  CliResult r = resume();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(cli_read(rd / "model.safetensors"), model);
}

TEST_F(CliTest, WeightsOfAnotherShapeAreRefusedByEvalAndPredict) {
  fs::path fruit = cli_shared().fruit_run() / "model.safetensors";  // 3 classes
  CliResult r = run({"eval", "--weights", fruit.string(), "--data", cli_shared().cifar().string()});
  cli_expect_refused(r, "3-class weights on CIFAR-10", {"model.safetensors", "3"});
  // A weights file with a wrong tensor shape.
  SafetensorsFile f = load_safetensors((cli_shared().run_dir() / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : f.order)
    ts.emplace_back(n, n == "fc1.weight" ? Tensor::zeros({120, 401}) : f.at(n));
  save_safetensors((dir_ / "odd.safetensors").string(), ts, f.metadata);
  cli_write_png(dir_ / "a.png", 32, 32, cli_pixels(32, 32, 9, 9, 9, 1));
  r = run({"predict", "--weights", "odd.safetensors", "a.png"});
  cli_expect_refused(r, "odd shape", {"odd.safetensors", "fc1.weight"});
  r = run({"eval", "--weights", "odd.safetensors", "--data", cli_shared().cifar().string()});
  cli_expect_refused(r, "odd shape eval", {"odd.safetensors", "fc1.weight"});
  // Truncated weights.
  std::string bytes = cli_read(cli_shared().run_dir() / "model.safetensors");
  cli_write(dir_ / "cut.safetensors", bytes.substr(0, bytes.size() / 3));
  r = run({"predict", "--weights", "cut.safetensors", "a.png"});
  cli_expect_refused(r, "truncated weights", {"cut.safetensors"});
}

// ---- --config run recipes
// ------------------------------------------------------------------------

TEST_F(CliTest, ConfigFileSetsTheRecipeAndFlagsOverrideIt) {
  cli_write(dir_ / "recipe.json",
            R"({"#": "a comment", "batch_size": 8, "log_every": 5, "epochs": 1, "seed": 3})");
  CliResult r = run({"train", "--config", "recipe.json", "--data", cli_shared().cifar().string(),
                     "--out", "run", "--threads", "1", "--log-every", "10"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // 200 images / batch 8 = 25 steps in the one epoch; the flag's --log-every 10 wins over 5.
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].substr(0, 11), "[1,    10] ");
  EXPECT_EQ(lines[1].substr(0, 11), "[1,    20] ");
  auto start = nlohmann::json::parse(cli_lines(cli_read(dir_ / "run" / "metrics.jsonl"))[0]);
  EXPECT_EQ(start["config"]["batch_size"], 8);
  EXPECT_EQ(start["config"]["seed"], 3);
  EXPECT_EQ(start["config"]["log_every"], 10);
}

TEST_F(CliTest, BadConfigFilesExitTwoWithOneLine) {
  cli_write(dir_ / "unknown.json", R"({"batch_sise": 8})");
  cli_write(dir_ / "broken.json", R"({"batch_size": 8)");
  cli_write(dir_ / "nested.json", R"({"lr": {"value": 1}})");
  for (const char* f : {"unknown.json", "broken.json", "nested.json", "missing.json"}) {
    CliResult r = run({"train", "--config", f, "--data", cli_shared().cifar().string(), "--out",
                       "run"});
    EXPECT_EQ(r.rc, 2) << f;
    ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_NE(r.err.find(f), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "run")) << f;
  }
}

TEST_F(CliTest, ShippedConfigsParse) {
  for (const auto& e : fs::directory_iterator(fs::path(HPCNET_SOURCE_DIR) / "configs")) {
    // --val-split 0: the recipes hold out 5,000 images, more than the tiny test data has.
    CliResult r = run({"train", "--config", e.path().string(), "--data",
                       cli_shared().cifar().string(), "--out", "run", "--steps", "1",
                       "--threads", "1", "--val-split", "0"});
    EXPECT_EQ(r.rc, 0) << e.path() << ": " << r.err;
    std::error_code ec;
    fs::remove_all(dir_ / "run", ec);
  }
}
