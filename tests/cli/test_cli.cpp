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

#include "hpcnet/io.h"
#include "hpcnet/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// ---- images
// --------------------------------------------------------------------------------------

// A w x h RGB image of one colour with a little noise, HWC.
std::vector<uint8_t> cli_pixels(int w, int h, int r, int g, int b, uint64_t seed) {
  return noisy_pixels(w, h, r, g, b, seed, 5, 10);
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
          write_png_file(d / ("img" + std::to_string(i) + ".png"), 32, 32, px);
        else
          write_jpeg_file(d / ("img" + std::to_string(i) + ".jpg"), 32, 32, px);
      }
    }
}

// ---- running the binary
// --------------------------------------------------------------------------

// Runs `hpcnet ARGS` on a pseudo-terminal; returns everything it wrote and sets *rc.
// With columns > 0 the terminal is that wide; env holds extra NAME=VALUE variables for the child.
std::string cli_run_pty(const std::vector<std::string>& args, const fs::path& cwd, int* rc,
                        unsigned short columns = 0, const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv_s = {HPCNET_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  int master = -1;
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = columns;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, columns > 0 ? &ws : nullptr);
  if (pid < 0) throw std::runtime_error("forkpty failed");
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) _exit(126);
    for (const std::string& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
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
  return tiny_train_args(data, out, epochs,
                         {.lr = "0.001", .workers = "2", .seed = "0", .log_every = "25"});
}

// Data and runs shared by the tests of one process, made on first use.
struct CliShared {
  TempDir tmp{"cli_shared"};
  fs::path dir = tmp.path();
  CliShared() { write_tiny_cifar10(dir / "cifar", 40, 40); }
  fs::path cifar() const { return dir / "cifar"; }
  // `train` of the tutorial recipe for 2 epochs into DIR/run (once).
  const RunResult& run() {
    if (run_.rc < 0) run_ = run_hpcnet(cli_train_args(cifar(), dir / "run", 2), dir);
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
      val_ = run_hpcnet(args, dir);
    }
    EXPECT_EQ(val_.rc, 0) << val_.err;
    return dir / "valrun";
  }
  // An image-folder run (classes apple, banana, cherry) into DIR/fruit.
  fs::path fruit_run() {
    if (fruit_.rc < 0) {
      cli_make_image_folder(dir / "fruit_data");
      fruit_ =
          run_hpcnet({"train", "--dataset", "imagefolder", "--data", (dir / "fruit_data").string(),
                      "--out", (dir / "fruit").string(), "--epochs", "3", "--lr", "0.01",
                      "--threads", "1", "--workers", "0", "--log-every", "1000"},
                     dir);
    }
    EXPECT_EQ(fruit_.rc, 0) << fruit_.err;
    return dir / "fruit";
  }

 private:
  RunResult run_, val_, fruit_;
};

CliShared& cli_shared() {
  static CliShared s;
  return s;
}

// A fresh folder per test.
class CliTest : public ::testing::Test {
 protected:
  RunResult run(const std::vector<std::string>& args) const { return run_hpcnet(args, dir_); }
  // A copy of the shared CIFAR folder to break.
  fs::path cifar_copy() const {
    fs::copy(cli_shared().cifar(), dir_ / "cifar", fs::copy_options::recursive);
    return dir_ / "cifar";
  }
  fs::path run_copy() const {
    fs::copy(cli_shared().run_dir(), dir_ / "run", fs::copy_options::recursive);
    return dir_ / "run";
  }
  TempDir tmp_{"cli_t"};
  fs::path dir_ = tmp_.path();
};

}  // namespace

// ---- help, info
// ----------------------------------------------------------------------------------

TEST_F(CliTest, HelpVersionAndInfo) {
  RunResult r = run({"--help"});
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
  expect_refused(r, "no command", {"a command is required; commands: train, eval, predict"});
}

// A mistyped command or flag: one line naming the commands, or the closest flag of the command
// (by edit distance), exit 2.
TEST_F(CliTest, UnknownCommandsAndMistypedFlagsAreNamed) {
  RunResult r = run({"trian", "--epochs", "1"});
  expect_refused(
      r, "unknown command",
      {"unknown command 'trian'; commands: train, eval, predict", "did you mean train?"});
  r = run({"frobnicate"});
  expect_refused(r, "unknown command", {"unknown command 'frobnicate'"});
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
  r = run({"train", "--epoch", "3"});
  expect_refused(r, "a flag mistyped", {"--epoch: did you mean --epochs?"});
  r = run({"eval", "--weights", "w", "--data", "d", "--splt=val"});
  expect_refused(r, "a flag mistyped", {"--splt: did you mean --split?"});
  r = run({"train", "--completely-unknown", "1"});
  expect_refused(r, "an unknown flag", {"--completely-unknown"});
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
}

// ---- train
// -----------------------------------------------------------------------------------------

TEST_F(CliTest, TrainPrintsTheTutorialLinesAndWritesTheRun) {
  const RunResult& r = cli_shared().run();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // 200 images in batches of 4 = 50 steps per epoch; --log-every 25; and a summary per epoch.
  EXPECT_EQ(tutorial_lines(r.out).size(), 5u) << r.out;
  EXPECT_EQ(r.out_lines().size(), 7u) << r.out;
  const std::regex line(R"(\[[12], +(25|50)\] loss: \d\.\d{3})");
  auto lines = tutorial_lines(r.out);
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
  for (const auto& l : split_lines(read_file(d / "metrics.jsonl"))) {
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

// Each redraw of the bar (the text between carriage returns, less the erase-to-end code) fits in
// the terminal's width minus one column, so it never wraps: at 50 columns and at 200.
TEST_F(CliTest, ProgressBarFitsTheTerminalWidth) {
  fs::path data = cli_shared().cifar();
  for (unsigned short cols : {50, 200}) {
    int rc = -1;
    const std::string run_name = "cols" + std::to_string(cols);
    std::string tty = cli_run_pty(cli_train_args(data, dir_ / run_name, 1), dir_, &rc, cols);
    ASSERT_EQ(rc, 0) << tty;
    int redraws = 0;
    size_t widest = 0;
    for (size_t at = tty.find('\r'); at != std::string::npos; at = tty.find('\r', at + 1)) {
      const size_t end = tty.find_first_of("\r\n", at + 1);
      std::string seg = tty.substr(at + 1, end == std::string::npos ? end : end - at - 1);
      const size_t k = seg.find("\x1b[K");
      if (k != std::string::npos) seg.erase(k, 3);
      if (seg.rfind("epoch 1/1", 0) != 0) continue;
      // The epoch's summary line ("epoch 1/1  train_loss ...  data wait 19%") replaces the bar
      // and stays: it may wrap like any log line.
      if (seg.find("train_loss") != std::string::npos) continue;
      ++redraws;
      widest = std::max(widest, seg.size());
      EXPECT_LE(seg.size(), cols - 1u) << cols << " columns: '" << seg << "'";
    }
    EXPECT_GT(redraws, 0) << tty;
    if (cols == 200) EXPECT_GT(widest, 60u);  // a wide terminal gets the rate and counts too
  }
}

// Under a launcher (torchrun's RANK and WORLD_SIZE here; mpirun and srun alike) a terminal may
// not be the user's: no bar unless --progress asks for one.
TEST_F(CliTest, NoProgressBarUnderALauncherUnlessAsked) {
  fs::path data = cli_shared().cifar();
  int rc = -1;
  const std::vector<std::string> env = {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0"};
  std::string tty = cli_run_pty(cli_train_args(data, dir_ / "launched", 1), dir_, &rc, 0, env);
  EXPECT_EQ(rc, 0) << tty;
  EXPECT_EQ(tty.find('\x1b'), std::string::npos) << tty;
  EXPECT_NE(tty.find("Finished Training"), std::string::npos) << tty;
  auto args = cli_train_args(data, dir_ / "launched2", 1);
  args.push_back("--progress");
  tty = cli_run_pty(args, dir_, &rc, 0, env);
  EXPECT_EQ(rc, 0) << tty;
  EXPECT_NE(tty.find("epoch 1/1 ["), std::string::npos) << tty;
}

// 1 epoch, then --resume to 2: the same bytes as the uninterrupted 2-epoch run. The recipe
// (including --threads) comes from the checkpoint.
TEST_F(CliTest, ResumeEqualsAnUninterruptedRun) {
  fs::path straight = cli_shared().run_dir();
  RunResult r = run(cli_train_args(cli_shared().cifar(), dir_ / "part", 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"train", "--resume", (dir_ / "part").string(), "--epochs", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = tutorial_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(r.out_lines()[0], "resuming " + (dir_ / "part").string() + " from epoch 2 (of 2)");
  EXPECT_EQ(lines[0],
            tutorial_lines(cli_shared().run().out)[2]);  // "[2,    25] loss: ..." as before
  EXPECT_EQ(read_file(dir_ / "part" / "model.safetensors"),
            read_file(straight / "model.safetensors"));
  EXPECT_EQ(read_file(dir_ / "part" / "checkpoint.safetensors"),
            read_file(straight / "checkpoint.safetensors"));
  // Changing the recipe on resume is refused.
  r = run({"train", "--resume", (dir_ / "part").string(), "--epochs", "3", "--lr", "0.5"});
  expect_refused(r, "recipe change", {"--lr", "checkpoint.safetensors"});
}

// ---- eval
// ------------------------------------------------------------------------------------------

TEST_F(CliTest, EvalPrintsPerClassAccuracyThenTheTotal) {
  fs::path w = cli_shared().run_dir() / "model.safetensors";
  RunResult r = run({"eval", "--model", "lenet", "--weights", w.string(), "--dataset", "cifar10",
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
  RunResult j = run({"eval", "--weights", w.string(), "--data", cli_shared().cifar().string(),
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
  RunResult c =
      run({"eval", "--weights", (cli_shared().run_dir() / "checkpoint.safetensors").string(),
           "--data", cli_shared().cifar().string(), "--json"});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(nlohmann::json::parse(c.out).at("accuracy"), obj.at("accuracy"));
}

// eval compares the model's class names with the dataset's: the same count under other names or
// in another order is refused naming both lists (rows would be printed under the wrong names); a
// model file without names, or a dataset of placeholder names (class_0, ...), is taken as it is.
TEST_F(CliTest, EvalRefusesADatasetWhoseClassNamesAreNotTheModels) {
  const fs::path fruit = cli_shared().fruit_run() / "model.safetensors";
  fs::copy(cli_shared().dir / "fruit_data", dir_ / "renamed", fs::copy_options::recursive);
  fs::rename(dir_ / "renamed" / "test" / "banana", dir_ / "renamed" / "test" / "blueberry");
  RunResult r = run({"eval", "--weights", fruit.string(), "--dataset", "imagefolder", "--data",
                     (dir_ / "renamed").string()});
  expect_refused(r, "renamed class",
                 {fruit.string(), "the model's classes are apple, banana, cherry",
                  "names apple, blueberry, cherry",
                  "class 1 is 'banana' in the model, 'blueberry' in the data"});
  EXPECT_EQ(r.out, "");
  // The tutorial's CIFAR-10 model on ten folders of other names; then on placeholder names.
  for (int k = 0; k < 10; ++k) {
    for (const char* root : {"other", "placeholders"}) {
      const fs::path d = dir_ / root / "test" /
                         (std::string(root) == "other" ? "thing" + std::to_string(k)
                                                       : "class_" + std::to_string(k));
      fs::create_directories(d);
      write_png_file(d / "a.png", 32, 32, cli_pixels(32, 32, 20 * k, 100, 50, k));
    }
  }
  const fs::path w = cli_shared().run_dir() / "model.safetensors";
  r = run({"eval", "--weights", w.string(), "--data", (dir_ / "other").string()});
  expect_refused(r, "other names", {"airplane, automobile", "names thing0, thing1"});
  r = run({"eval", "--weights", w.string(), "--data", (dir_ / "placeholders").string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Accuracy for class: class_9"), std::string::npos) << r.out;
  // The same weights without hpcnet.classes (as a PyTorch-saved file): taken as they are.
  SafetensorsFile f = load_safetensors(w.string());
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : f.order) ts.emplace_back(n, f.at(n));
  auto meta = f.metadata;
  ASSERT_EQ(meta.erase("hpcnet.classes"), 1u);
  save_safetensors((dir_ / "nameless.safetensors").string(), ts, meta);
  r = run({"eval", "--weights", (dir_ / "nameless.safetensors").string(), "--data",
           (dir_ / "other").string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Accuracy for class: thing9"), std::string::npos) << r.out;
}

TEST_F(CliTest, EvalValSplitUsesTheRecordedHoldOut) {
  fs::path vr = cli_shared().val_run();
  RunResult r = run({"eval", "--weights", (vr / "model.safetensors").string(), "--data",
                     cli_shared().cifar().string(), "--split", "val", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto obj = nlohmann::json::parse(r.out);
  EXPECT_EQ(obj.at("images"), 40);
  EXPECT_EQ(obj.at("split"), "val");
  // The same number the training run logged for its val split.
  double logged = -1;
  for (const auto& l : split_lines(read_file(vr / "metrics.jsonl"))) {
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
  expect_refused(r, "no val split", {"--val-split"});
  r = run({"eval", "--weights", (cli_shared().run_dir() / "model.safetensors").string(), "--data",
           cli_shared().cifar().string(), "--split", "val", "--val-split", "20", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("images"), 20);
}

// ---- predict
// -----------------------------------------------------------------------------------------

TEST_F(CliTest, PredictNamesTheClassesFromTheWeightsFile) {
  fs::path w = cli_shared().fruit_run() / "model.safetensors";
  write_png_file(dir_ / "red.png", 32, 32, cli_pixels(32, 32, 200, 30, 30, 99));
  write_jpeg_file(dir_ / "yellow.jpg", 48, 40, cli_pixels(48, 40, 220, 210, 40, 98));  // resized
  RunResult r = run({"predict", "--weights", w.string(), "red.png", "yellow.jpg"});
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
  write_file(dir_ / "notes.png", "this is not a picture");
  RunResult r = run({"predict", "--weights", w.string(), "notes.png"});
  expect_refused(r, "undecodable", {"notes.png"});
  r = run({"predict", "--weights", w.string(), "missing.jpg"});
  expect_refused(r, "missing", {"missing.jpg"});
  // A PNG cut short.
  write_png_file(dir_ / "ok.png", 32, 32, cli_pixels(32, 32, 1, 2, 3, 4));
  std::string png = read_file(dir_ / "ok.png");
  write_file(dir_ / "cut.png", png.substr(0, png.size() / 2));
  r = run({"predict", "--weights", w.string(), "cut.png"});
  expect_refused(r, "truncated png", {"cut.png"});
  r = run({"predict", "--weights", w.string(), "--top", "0", "ok.png"});
  expect_refused(r, "top 0", {"--top"});
  r = run({"predict", "--weights", w.string()});
  expect_refused(r, "no images", {"images"});
  r = run({"predict", "--weights", (dir_ / "none.safetensors").string(), "ok.png"});
  expect_refused(r, "no weights", {"none.safetensors"});
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
      {{"--device", "cuda:99"}, "cuda:99"},
      {{"--device", "tpu"}, "tpu"},
      {{"--frobnicate"}, "--frobnicate"},
      {{"--val-split", "200"}, "--val-split"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"train", "--data", data.string(), "--out",
                                     (dir_ / "run").string()};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    RunResult r = run(args);
    expect_refused(r, c.extra[0], {c.expect});
    EXPECT_FALSE(fs::exists(dir_ / "run")) << c.extra[0];
  }
  RunResult r = run({"train", "--data", data.string()});
  expect_refused(r, "no --out", {"--out"});
  write_file(dir_ / "afile", "x");
  r = run({"train", "--data", data.string(), "--out", (dir_ / "afile").string()});
  expect_refused(r, "out is a file", {"afile"});
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
      {{"eval", "--weights", w, "--data", data, "--device", "cuda:99"}, "cuda:99"},
      {{"eval", "--weights", w, "--data", data, "--model", "resnet999"}, "resnet999"},
      {{"eval", "--weights", w, "--data", data, "--dataset", "mnist"}, "mnist"},
      {{"eval", "--data", data}, "--weights"},
      {{"eval", "--weights", w}, "--data"},
      {{"eval", "--weights", w, "--data", (dir_ / "nowhere").string()}, "nowhere"},
      {{"predict", "--weights", w, "--device", "cuda:99", "x.png"}, "cuda:99"},
  };
  for (const auto& c : cases) expect_refused(run(c.args), c.args.back(), {c.expect});
}

// ---- bad data
// -------------------------------------------------------------------------------------

TEST_F(CliTest, BadDatasetsExitTwoNamingTheFileAndWriteNothing) {
  fs::path data = cifar_copy();
  fs::path b = data / "cifar-10-batches-bin";
  const fs::path out = dir_ / "run";
  auto train = [&](const fs::path& d) { return run(cli_train_args(d, out, 1)); };
  auto check = [&](const std::string& what, std::initializer_list<std::string> parts) {
    expect_refused(train(data), what, parts);
    EXPECT_FALSE(fs::exists(out)) << what << ": a run directory was created";
  };
  // Size not a multiple of 3073 bytes.
  std::string good = read_file(b / "data_batch_3.bin");
  write_file(b / "data_batch_3.bin", good.substr(0, 3073 * 10 + 1000));
  check("truncated", {"data_batch_3.bin", "3073"});
  // A label byte of 10.
  std::string bad = good;
  bad[3073 * 4] = static_cast<char>(10);
  write_file(b / "data_batch_3.bin", bad);
  check("label", {"data_batch_3.bin", "label"});
  write_file(b / "data_batch_3.bin", good);
  // Missing and empty batch files.
  fs::remove(b / "data_batch_4.bin");
  check("missing batch", {"data_batch_4.bin"});
  write_file(b / "data_batch_4.bin", "");
  check("empty batch", {"data_batch_4.bin"});
  // No data at all.
  expect_refused(train(dir_ / "nothing"), "no data", {"nothing"});
  EXPECT_FALSE(fs::exists(out));

  // eval reads test_batch.bin.
  write_file(b / "test_batch.bin", read_file(b / "data_batch_1.bin").substr(0, 5000));
  RunResult r = run({"eval", "--weights", (cli_shared().run_dir() / "model.safetensors").string(),
                     "--data", data.string()});
  expect_refused(r, "truncated test batch", {"test_batch.bin"});
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
  write_file(root / "train" / "banana" / "img1.png", "PK\x03\x04 not a png");
  expect_refused(train(), "undecodable", {"img1.png"});
  EXPECT_FALSE(fs::exists(out));
  fs::remove(root / "train" / "banana" / "img1.png");
  // An empty class folder.
  fs::create_directories(root / "train" / "durian");
  expect_refused(train(), "empty class", {"durian"});
  EXPECT_FALSE(fs::exists(out));
  fs::remove(root / "train" / "durian");
  // Now it trains.
  RunResult r = train();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
}

// ---- bad checkpoints
// ---------------------------------------------------------------------------------

TEST_F(CliTest, BadCheckpointsOnResumeExitTwoAndLeaveTheRunAlone) {
  fs::path rd = run_copy();
  const fs::path ck = rd / "checkpoint.safetensors";
  const std::string good = read_file(ck);
  const std::string model = read_file(rd / "model.safetensors");
  const std::string metrics = read_file(rd / "metrics.jsonl");
  auto resume = [&] { return run({"train", "--resume", rd.string(), "--epochs", "3"}); };
  auto check = [&](const std::string& what, std::initializer_list<std::string> parts) {
    expect_refused(resume(), what, parts);
    EXPECT_EQ(read_file(rd / "model.safetensors"), model) << what;
    EXPECT_EQ(read_file(rd / "metrics.jsonl"), metrics) << what;
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

  write_file(ck, good.substr(0, good.size() - 1000));
  check("truncated", {"checkpoint.safetensors", "truncated"});
  write_file(ck, good.substr(0, 6));
  check("stub", {"checkpoint.safetensors"});
  write_file(ck, model);
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
  write_file(ck, good);
  RunResult r = resume();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(read_file(rd / "model.safetensors"), model);
}

TEST_F(CliTest, WeightsOfAnotherShapeAreRefusedByEvalAndPredict) {
  fs::path fruit = cli_shared().fruit_run() / "model.safetensors";  // 3 classes
  RunResult r = run({"eval", "--weights", fruit.string(), "--data", cli_shared().cifar().string()});
  expect_refused(r, "3-class weights on CIFAR-10", {"model.safetensors", "3"});
  // A weights file with a wrong tensor shape.
  SafetensorsFile f = load_safetensors((cli_shared().run_dir() / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : f.order)
    ts.emplace_back(n, n == "fc1.weight" ? Tensor::zeros({120, 401}) : f.at(n));
  save_safetensors((dir_ / "odd.safetensors").string(), ts, f.metadata);
  write_png_file(dir_ / "a.png", 32, 32, cli_pixels(32, 32, 9, 9, 9, 1));
  r = run({"predict", "--weights", "odd.safetensors", "a.png"});
  expect_refused(r, "odd shape", {"odd.safetensors", "fc1.weight"});
  r = run({"eval", "--weights", "odd.safetensors", "--data", cli_shared().cifar().string()});
  expect_refused(r, "odd shape eval", {"odd.safetensors", "fc1.weight"});
  // Truncated weights.
  std::string bytes = read_file(cli_shared().run_dir() / "model.safetensors");
  write_file(dir_ / "cut.safetensors", bytes.substr(0, bytes.size() / 3));
  r = run({"predict", "--weights", "cut.safetensors", "a.png"});
  expect_refused(r, "truncated weights", {"cut.safetensors"});
}

// ---- --config run recipes
// ------------------------------------------------------------------------

TEST_F(CliTest, ConfigFileSetsTheRecipeAndFlagsOverrideIt) {
  write_file(dir_ / "recipe.json",
             R"({"#": "a comment", "batch_size": 8, "log_every": 5, "epochs": 1, "seed": 3})");
  RunResult r = run({"train", "--config", "recipe.json", "--data", cli_shared().cifar().string(),
                     "--out", "run", "--threads", "1", "--log-every", "10"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // 200 images / batch 8 = 25 steps in the one epoch; the flag's --log-every 10 wins over 5.
  auto lines = tutorial_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].substr(0, 11), "[1,    10] ");
  EXPECT_EQ(lines[1].substr(0, 11), "[1,    20] ");
  auto start = nlohmann::json::parse(split_lines(read_file(dir_ / "run" / "metrics.jsonl"))[0]);
  EXPECT_EQ(start["config"]["batch_size"], 8);
  EXPECT_EQ(start["config"]["seed"], 3);
  EXPECT_EQ(start["config"]["log_every"], 10);
}

TEST_F(CliTest, BadConfigFilesExitTwoWithOneLine) {
  write_file(dir_ / "unknown.json", R"({"batch_sise": 8})");
  write_file(dir_ / "broken.json", R"({"batch_size": 8)");
  write_file(dir_ / "nested.json", R"({"lr": {"value": 1}})");
  for (const char* f : {"unknown.json", "broken.json", "nested.json", "missing.json"}) {
    RunResult r =
        run({"train", "--config", f, "--data", cli_shared().cifar().string(), "--out", "run"});
    EXPECT_EQ(r.rc, 2) << f;
    ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_NE(r.err.find(f), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "run")) << f;
  }
}

TEST_F(CliTest, ShippedConfigsParse) {
  for (const auto& e : fs::directory_iterator(fs::path(HPCNET_SOURCE_DIR) / "configs")) {
    // Recipes for other datasets (segmentation) are run by their task's tests (test_segment).
    const nlohmann::json recipe = nlohmann::json::parse(read_file(e.path()));
    if (recipe.value("dataset", "cifar10") != "cifar10" &&
        recipe.value("dataset", "cifar10") != "imagefolder")
      continue;
    // --val-split 0: the recipes hold out 5,000 images, more than the tiny test data has.
    std::vector<std::string> args = {"train", "--config", e.path().string(), "--out", "run",
                                     "--steps", "1", "--threads", "1", "--val-split", "0",
                                     "--data"};
    if (recipe.value("dataset", "cifar10") == "imagefolder") {
      // An ImageNet-style recipe (resnet50 at 224 px, batch 32): its own small image folder, and
      // one small batch, so the step stays short under the sanitizers.
      cli_make_image_folder(dir_ / "folder");
      args.insert(args.end(), {(dir_ / "folder").string(), "--batch-size", "2", "--imgsz", "64",
                               "--workers", "0"});
    } else {
      args.push_back(cli_shared().cifar().string());
    }
    RunResult r = run(args);
    EXPECT_EQ(r.rc, 0) << e.path() << ": " << r.err;
    std::error_code ec;
    fs::remove_all(dir_ / "run", ec);
  }
}
