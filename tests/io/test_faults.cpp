// Fault injection (src/io/write_fault.h, HPCNET_TEST_WRITE_FAULT): a writer SIGKILLed at 50 byte
// offsets of a checkpoint write and around its rename, or between the model file and the
// checkpoint, leaves files that --resume continues bit-exactly; a full disk (ENOSPC) is one line
// naming the file, exit 1, no temporary file and the previous file kept; and --resume refuses a
// checkpoint of another model, task or class list, naming both.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/io.h"
#include "src/io/write_fault.h"
#include "src/train/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

// The tutorial recipe on tiny CIFAR-10 (5 x 12 images, batch 4: 15 steps per epoch) with a
// checkpoint every 4 steps. Over 2 epochs the checkpoint is written at steps 4, 8, 12, 15 (the
// epoch's), 16, 20, 24, 28 and 30 (writes 1 to 9), and the model file at steps 15 and 30.
std::vector<std::string> ft_args(const fs::path& data, const fs::path& out, int epochs = 2) {
  return tiny_train_args(data, out, epochs, {.extra = {"--save-every", "4"}});
}

std::vector<std::string> with_args(std::vector<std::string> a,
                                   std::initializer_list<const char*> more) {
  for (const char* m : more) a.push_back(m);
  return a;
}

// `hpcnet ARGS` in cwd with HPCNET_TEST_WRITE_FAULT=fault ("" = unset), as run_hpcnet.
RunResult run_faulted(const std::vector<std::string>& args, const fs::path& cwd,
                      const std::string& fault) {
  return run_shell(hpcnet_command_line(
      args, cwd,
      "-u HPCNET_TEST_WRITE_FAULT " +
          (fault.empty() ? std::string() : "HPCNET_TEST_WRITE_FAULT=" + fault + " ")));
}

// The names in dir holding ".tmp." (temporary files of atomic writes), sorted.
std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos)
      out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool has_end_event(const fs::path& run) {
  for (const std::string& l : split_lines(read_file(run / "metrics.jsonl")))
    if (l.find("\"event\":\"end\"") != std::string::npos) return true;
  return false;
}

ino_t inode(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

// The safetensors header length N (the data starts at 8 + N).
uint64_t header_len(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes.at(i));
  return n;
}

struct CheckpointParts {
  train::ModelMeta meta;
  nn::NamedTensors model, optim, ema;
  train::TrainState state;
};

// The checkpoint at path split into what write_checkpoint takes, tensors in the file's order;
// with `bump`, every float32 value + 1 and 4 more steps (another checkpoint of the same layout).
CheckpointParts checkpoint_parts(const fs::path& path, bool bump) {
  const SafetensorsFile sf = load_safetensors(path.string());
  const train::RunFile rf = train::read_run_file(path.string());
  CheckpointParts p;
  p.meta = rf.meta;
  p.state = *rf.train;
  for (const std::string& n : sf.order) {
    Tensor t = sf.at(n).clone();
    if (bump && t.dtype() == DType::kFloat32)
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] += 1;
    if (n.rfind("model.", 0) == 0)
      p.model.emplace_back(n.substr(6), t);
    else if (n.rfind("optim.", 0) == 0)
      p.optim.emplace_back(n.substr(6), t);
    else
      p.ema.emplace_back(n, t);
  }
  if (bump) {
    p.state.steps += 4;
    p.state.epoch_step += 4;
  }
  return p;
}

void write_parts(const fs::path& path, const CheckpointParts& p) {
  train::write_checkpoint(path.string(), p.meta, p.model, p.optim, p.ema, p.state);
}

// An image folder DIR/train/<class>/<k>.png, 4 images of a colour per class.
void write_image_folder(const fs::path& dir, const std::vector<std::string>& classes) {
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path d = dir / "train" / classes[c];
    fs::create_directories(d);
    for (int k = 0; k < 4; ++k)
      write_png_file(d / (std::to_string(k) + ".png"), 32, 32,
                     noisy_pixels(32, 32, 40 + 70 * static_cast<int>(c), 120, 200 - 60 * k,
                                  static_cast<uint64_t>(k + 1), 9, 20));
  }
}

class Faults : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_cifar10(dir_ / "data", 12, 8); }
  void TearDown() override { set_write_fault(WriteFault{}); }  // the in-process hook, disarmed
  fs::path data() const { return dir_ / "data"; }
  RunResult run(const std::vector<std::string>& args, const std::string& fault = "") {
    return run_faulted(args, dir_.path(), fault);
  }
  // The uninterrupted 2-epoch run, into DIR/straight.
  fs::path straight() {
    const fs::path s = dir_ / "straight";
    if (!fs::exists(s / "model.safetensors")) {
      RunResult r = run(ft_args(data(), s));
      EXPECT_EQ(r.rc, 0) << r.err;
    }
    return s;
  }
  // A --resume run (--workers is not in the recipe: the run's 0 again, as the checkpoint records
  // it), which must finish with the uninterrupted run's model and checkpoint bytes and
  // leave no temporary file.
  void expect_resumes_bit_exactly(const fs::path& run_dir, const std::string& what) {
    RunResult r = run({"train", "--resume", run_dir.string(), "--workers", "0"});
    ASSERT_EQ(r.rc, 0) << what << ": " << r.err;
    ASSERT_FALSE(r.out_lines().empty()) << what;
    EXPECT_EQ(r.out_lines().back(), "Finished Training") << what;
    EXPECT_EQ(temp_files(run_dir), std::vector<std::string>{}) << what;
    EXPECT_TRUE(read_file(run_dir / "model.safetensors") ==
                read_file(straight() / "model.safetensors"))
        << what << ": the final model differs from the uninterrupted run's";
    EXPECT_TRUE(read_file(run_dir / "checkpoint.safetensors") ==
                read_file(straight() / "checkpoint.safetensors"))
        << what;
  }
  TempDir dir_{"faults"};
};

}  // namespace

// The hook's syntax: ACTION:AT[:NAME[:NTH]]; anything else is refused naming the variable.
TEST(FaultsHook, ParsesItsSyntaxAndRefusesTheRest) {
  WriteFault f = parse_write_fault("kill:123:checkpoint:3");
  EXPECT_EQ(f.action, WriteFault::Action::kKill);
  EXPECT_EQ(f.at, WriteFault::At::kByte);
  EXPECT_EQ(f.byte, 123);
  EXPECT_EQ(f.name, "checkpoint");
  EXPECT_EQ(f.nth, 3);
  f = parse_write_fault("enospc:0");
  EXPECT_EQ(f.action, WriteFault::Action::kEnospc);
  EXPECT_EQ(f.byte, 0);
  EXPECT_EQ(f.name, "");
  EXPECT_EQ(f.nth, 1);
  EXPECT_EQ(parse_write_fault("kill:before-rename").at, WriteFault::At::kBeforeRename);
  EXPECT_EQ(parse_write_fault("kill:after-rename:model").at, WriteFault::At::kAfterRename);
  EXPECT_EQ(parse_write_fault("kill:done::2").at, WriteFault::At::kDone);
  for (const char* bad : {"", "kill", "stop:1", "kill:-1", "kill:x", "enospc:done", "kill:1:a:0",
                          "kill:1:a:2:3", "kill:1:a:b"})
    EXPECT_TRUE(input_error([&] { parse_write_fault(bad); }, "HPCNET_TEST_WRITE_FAULT")) << bad;
}

// A child process writing a checkpoint is SIGKILLed after exactly N bytes, for 47 values of N
// over the whole file (the length prefix, the header and its metadata, the start of the data,
// tensor boundaries, spread over the data, the last bytes), and just before and after the rename:
// the previous checkpoint stays byte-identical and loadable, the dead writer's NAME.tmp.PID holds
// exactly the first N bytes, a kill after the rename leaves the new checkpoint whole, and the
// next run in the folder removes every stale temporary file and resumes bit-exactly.
TEST_F(Faults, KillAtFiftyOffsetsOfACheckpointWriteKeepsThePreviousOne) {
  const fs::path cut = dir_ / "cut";
  RunResult r = run(with_args(ft_args(data(), cut), {"--fail-at-step", "0:11:kill"}));
  ASSERT_EQ(r.rc, 128 + SIGKILL) << r.err;
  const fs::path ckpt = cut / "checkpoint.safetensors";
  const std::string previous = read_file(ckpt);
  ASSERT_EQ(train::read_run_file(ckpt.string()).train->steps, 8);

  // The next checkpoint (other values, the same layout), written once here to know its bytes.
  const CheckpointParts next = checkpoint_parts(ckpt, true);
  write_parts(dir_ / "next.safetensors", next);
  const std::string expected = read_file(dir_ / "next.safetensors");
  const int64_t total = static_cast<int64_t>(expected.size());
  const int64_t data0 = 8 + static_cast<int64_t>(header_len(expected));
  ASSERT_GT(total, data0);
  ASSERT_NE(expected, previous);

  std::set<int64_t> at = {0,         1,     4,         7,         8,         9,
                          data0 - 1, data0, data0 + 1, total - 2, total - 1, total};
  for (const char* key : {"__metadata__", "hpcnet.config", "hpcnet.rng_state", "hpcnet.steps"}) {
    const size_t p = expected.find(key);
    ASSERT_NE(p, std::string::npos) << key;
    at.insert(static_cast<int64_t>(p));
  }
  const nlohmann::json header = nlohmann::json::parse(expected.substr(8, data0 - 8));
  std::vector<int64_t> begins;
  for (const auto& [name, v] : header.items())
    if (name != "__metadata__") begins.push_back(v.at("data_offsets").at(0).get<int64_t>());
  std::sort(begins.begin(), begins.end());
  ASSERT_GE(begins.size(), 4u);
  for (size_t i : {size_t{1}, begins.size() / 2, begins.size() - 1})
    for (int64_t d : {-1, 0, 1}) at.insert(data0 + begins[i] + d);
  // The rest evenly over the data (3 bytes past each step, off the tensor boundaries).
  const int64_t spread = 47 - static_cast<int64_t>(at.size());
  for (int64_t k = 1; k <= spread; ++k) at.insert(data0 + (total - data0) * k / (spread + 1) + 3);
  ASSERT_EQ(at.size(), 47u);
  {
    std::string list;
    for (int64_t n : at) list += (list.empty() ? "" : " ") + std::to_string(n);
    RecordProperty("offsets", list + " of " + std::to_string(total) + " bytes");
  }

  // Runs the write in a child killed by fault; returns the child's pid.
  auto killed_write = [&](const fs::path& target, WriteFault fault) {
    fault.action = WriteFault::Action::kKill;
    fault.name = "checkpoint.safetensors";
    const pid_t pid = ::fork();
    if (pid == 0) {
      set_write_fault(fault);
      try {
        write_parts(target, next);
      } catch (...) {
      }
      ::_exit(0);  // not killed: the parent reports it
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the writer was not killed (status " << status << ")";
    return pid;
  };

  for (int64_t n : at) {
    SCOPED_TRACE("killed after byte " + std::to_string(n) + " of " + std::to_string(total));
    WriteFault f;
    f.byte = n;
    const pid_t pid = killed_write(ckpt, f);
    const fs::path tmp = cut / ("checkpoint.safetensors.tmp." + std::to_string(pid));
    ASSERT_TRUE(fs::exists(tmp));
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(tmp)), n);
    EXPECT_TRUE(read_file(tmp) == expected.substr(0, static_cast<size_t>(n)));
    EXPECT_TRUE(read_file(ckpt) == previous);
    EXPECT_EQ(train::read_run_file(ckpt.string()).train->steps, 8);
  }
  {
    SCOPED_TRACE("killed before the rename");
    WriteFault f;
    f.at = WriteFault::At::kBeforeRename;
    const pid_t pid = killed_write(ckpt, f);
    EXPECT_TRUE(read_file(cut / ("checkpoint.safetensors.tmp." + std::to_string(pid))) == expected);
    EXPECT_TRUE(read_file(ckpt) == previous);
  }
  // After the rename (before and after the folder's fsync): the new checkpoint, whole. In a copy
  // of the run, so that the run above still holds the step-8 checkpoint.
  for (WriteFault::At stage : {WriteFault::At::kAfterRename, WriteFault::At::kDone}) {
    SCOPED_TRACE(stage == WriteFault::At::kDone ? "killed when done" : "killed after the rename");
    const fs::path other = dir_ / "renamed";
    fs::create_directories(other);
    fs::copy_file(ckpt, other / "checkpoint.safetensors", fs::copy_options::overwrite_existing);
    WriteFault f;
    f.at = stage;
    killed_write(other / "checkpoint.safetensors", f);
    EXPECT_TRUE(read_file(other / "checkpoint.safetensors") == expected);
    EXPECT_EQ(train::read_run_file((other / "checkpoint.safetensors").string()).train->steps, 12);
    EXPECT_EQ(temp_files(other), std::vector<std::string>{});
  }
  EXPECT_EQ(temp_files(cut).size(), 48u);  // one per killed writer, none of them alive
  expect_resumes_bit_exactly(cut, "resumed after 48 killed writes");
}

// The real run SIGKILLed inside its third checkpoint write (step 12) by HPCNET_TEST_WRITE_FAULT:
// at 6 byte offsets (the first, mid-header, the data's start, mid-data, the last byte, all
// written) and before the rename, the step-8 checkpoint survives and --resume ends with the
// uninterrupted run's bytes; killed after the rename, it resumes from step 12.
TEST_F(Faults, RunKilledInsideACheckpointWriteResumesBitExactly) {
  const fs::path renamed = dir_ / "renamed";
  RunResult r = run(ft_args(data(), renamed), "kill:after-rename:checkpoint.safetensors:3");
  ASSERT_EQ(r.rc, 128 + SIGKILL) << r.err;
  const std::string third = read_file(renamed / "checkpoint.safetensors");
  EXPECT_EQ(train::read_run_file((renamed / "checkpoint.safetensors").string()).train->steps, 12);
  expect_resumes_bit_exactly(renamed, "killed after the rename");

  const int64_t total = static_cast<int64_t>(third.size());
  const int64_t data0 = 8 + static_cast<int64_t>(header_len(third));
  const std::vector<std::string> at = {"0",
                                       std::to_string(data0 / 2),
                                       std::to_string(data0),
                                       std::to_string((data0 + total) / 2),
                                       std::to_string(total - 1),
                                       std::to_string(total),
                                       "before-rename"};
  for (const std::string& a : at) {
    SCOPED_TRACE("killed at " + a);
    const fs::path cut = dir_ / ("cut_" + a);
    r = run(ft_args(data(), cut), "kill:" + a + ":checkpoint.safetensors:3");
    ASSERT_EQ(r.rc, 128 + SIGKILL) << r.err;
    EXPECT_EQ(r.out.find("Finished Training"), std::string::npos);
    const train::RunFile f = train::read_run_file((cut / "checkpoint.safetensors").string());
    EXPECT_EQ(f.train->steps, 8);
    const std::vector<std::string> tmp = temp_files(cut);
    ASSERT_EQ(tmp.size(), 1u);
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(cut / tmp[0])),
              a == "before-rename" ? total : std::stoll(a));
    r = run({"train", "--resume", cut.string(), "--workers", "0"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out_lines().at(0), "resuming " + cut.string() + " from epoch 1 step 9 (of 2)");
    EXPECT_EQ(temp_files(cut), std::vector<std::string>{});
    EXPECT_TRUE(read_file(cut / "model.safetensors") ==
                read_file(straight() / "model.safetensors"));
    EXPECT_TRUE(read_file(cut / "checkpoint.safetensors") ==
                read_file(straight() / "checkpoint.safetensors"));
  }
}

// The model files first, the checkpoint last. Killed after the last epoch's model file but before
// its checkpoint (and before or after epoch 1's model file): the run has not finished, and
// --resume redoes the rest of the epoch, writes the model file again and only then says
// "Finished Training". Killed after the last checkpoint: --resume trains nothing and finishes.
// Every way ends with the uninterrupted run's model.safetensors.
TEST_F(Faults, KilledAroundTheModelFileResumesAndFinishesOnlyThen) {
  struct Case {
    const char* fault;
    int64_t ckpt_steps;  // what the checkpoint holds after the kill
    bool model_final;    // model.safetensors already the final one
  };
  int i = 0;
  for (const Case& c : {Case{"kill:done:model.safetensors:2", 28, true},
                        Case{"kill:before-rename:model.safetensors:2", 28, false},
                        Case{"kill:after-rename:model.safetensors:1", 12, false},
                        Case{"kill:done:checkpoint.safetensors:9", 30, true}}) {
    SCOPED_TRACE(c.fault);
    const fs::path cut = dir_ / ("cut" + std::to_string(++i));
    RunResult r = run(ft_args(data(), cut), c.fault);
    ASSERT_EQ(r.rc, 128 + SIGKILL) << r.err;
    EXPECT_EQ(r.out.find("Finished Training"), std::string::npos);
    EXPECT_FALSE(has_end_event(cut));
    const train::RunFile f = train::read_run_file((cut / "checkpoint.safetensors").string());
    EXPECT_EQ(f.train->steps, c.ckpt_steps);
    EXPECT_EQ(read_file(cut / "model.safetensors") == read_file(straight() / "model.safetensors"),
              c.model_final);
    const ino_t before = inode(cut / "model.safetensors");
    // A second name keeps the old inode allocated, so that a file written later cannot reuse
    // its number (resuming after epoch 1's model file writes it twice; the file system may hand
    // the freed number to the second write).
    const fs::path held = dir_ / ("held" + std::to_string(i));
    fs::create_hard_link(cut / "model.safetensors", held);
    const bool finished = c.ckpt_steps == 30;
    r = run({"train", "--resume", cut.string(), "--workers", "0"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out_lines().back(), "Finished Training");
    EXPECT_EQ(r.out.find("resuming") == std::string::npos, finished) << r.out;
    // The model file was written again (a new file renamed over it), unless nothing was left.
    EXPECT_EQ(inode(cut / "model.safetensors") == before, finished);
    fs::remove(held);
    EXPECT_TRUE(has_end_event(cut));
    EXPECT_EQ(temp_files(cut), std::vector<std::string>{});
    EXPECT_TRUE(read_file(cut / "model.safetensors") ==
                read_file(straight() / "model.safetensors"));
    EXPECT_TRUE(read_file(cut / "checkpoint.safetensors") ==
                read_file(straight() / "checkpoint.safetensors"));
  }
}

// A disk with room for N bytes, in-process: write_file_atomic throws Error (not InputError: exit
// 1, a failure while running) naming the file and "No space left on device", removes its
// temporary file and keeps the previous file; with room for the whole file it succeeds. The
// hook's NTH picks the second checkpoint write.
TEST_F(Faults, FullDiskInProcessKeepsThePreviousFileAndNoTemp) {
  const fs::path p = dir_ / "f.bin";
  write_file_atomic(p.string(), std::string_view("old contents"));
  std::string payload(3 << 20, 'x');  // past the 1 MiB buffer: buffered and direct writes
  for (size_t i = 0; i < payload.size(); i += 4099) payload[i] = static_cast<char>(i);
  const int64_t size = static_cast<int64_t>(payload.size());
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4096}, int64_t{1} << 20, (int64_t{1} << 20) + 1,
                    size - 1}) {
    SCOPED_TRACE(n);
    WriteFault f;
    f.action = WriteFault::Action::kEnospc;
    f.byte = n;
    set_write_fault(f);
    std::string msg = "no exception";
    try {
      write_file_atomic(p.string(), [&](std::ostream& os) {
        os.write(payload.data(), 1000);  // buffered, then one large direct write
        os.write(payload.data() + 1000, size - 1000);
      });
    } catch (const InputError& e) {
      msg = std::string("InputError: ") + e.what();
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg, p.string() +
                       ": write failed: No space left on device (free some space; any "
                       "previous version is kept)");
    EXPECT_EQ(read_file(p), "old contents");
    EXPECT_EQ(temp_files(dir_.path()), std::vector<std::string>{});
  }
  WriteFault f;
  f.action = WriteFault::Action::kEnospc;
  f.byte = size;  // exactly enough room
  set_write_fault(f);
  write_file_atomic(p.string(), payload);
  EXPECT_TRUE(read_file(p) == payload);

  // A checkpoint: the first write passes, the second fails.
  RunResult r = run(ft_args(data(), dir_ / "run", 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path ckpt = dir_ / "run" / "checkpoint.safetensors";
  const CheckpointParts parts = checkpoint_parts(ckpt, false);
  const CheckpointParts bumped = checkpoint_parts(ckpt, true);
  f.byte = 5000;
  f.name = "checkpoint";
  f.nth = 2;
  set_write_fault(f);
  write_parts(ckpt, parts);
  const std::string first = read_file(ckpt);
  try {
    write_parts(ckpt, bumped);
    ADD_FAILURE() << "the second checkpoint write did not fail";
  } catch (const InputError& e) {
    ADD_FAILURE() << "InputError: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(ckpt.string() + ": write failed: No space", 0), 0u)
        << e.what();
  }
  EXPECT_TRUE(read_file(ckpt) == first);
  EXPECT_EQ(temp_files(dir_ / "run"), std::vector<std::string>{});
  write_parts(ckpt, bumped);  // the fault fired once: the third write passes
  EXPECT_EQ(train::read_run_file(ckpt.string()).train->steps, 19);
}

// The binary on a full disk: a resumed run whose checkpoint write, or model file write, fails
// with ENOSPC exits 1 with one line naming the file and "No space left on device", leaves no
// temporary file and keeps the previous file byte-identical; once there is room, --resume ends
// with the uninterrupted run's bytes.
TEST_F(Faults, FullDiskExitsOneNamingTheFileAndKeepsThePreviousFile) {
  const fs::path cut = dir_ / "cut";
  RunResult r = run(ft_args(data(), cut), "kill:done:checkpoint.safetensors:4");  // epoch 1 done
  ASSERT_EQ(r.rc, 128 + SIGKILL) << r.err;
  const std::string ckpt1 = read_file(cut / "checkpoint.safetensors");
  const std::string model1 = read_file(cut / "model.safetensors");
  EXPECT_EQ(train::read_run_file((cut / "checkpoint.safetensors").string()).train->epochs_done, 1);

  auto expect_disk_full = [&](const RunResult& res, const std::string& file) {
    EXPECT_EQ(res.rc, 1) << res.err;
    ASSERT_EQ(res.err_lines().size(), 1u) << res.err;
    EXPECT_EQ(res.err_lines()[0], "hpcnet: failed: " + (cut / file).string() +
                                      ": write failed: No space left on device (free some "
                                      "space; any previous version is kept)");
    EXPECT_EQ(res.out.find("Finished Training"), std::string::npos);
    EXPECT_EQ(temp_files(cut), std::vector<std::string>{});
  };
  // The first checkpoint write of the resumed run (step 16), cut at 100000 bytes.
  r = run({"train", "--resume", cut.string()}, "enospc:100000:checkpoint.safetensors:1");
  expect_disk_full(r, "checkpoint.safetensors");
  EXPECT_TRUE(read_file(cut / "checkpoint.safetensors") == ckpt1);
  EXPECT_TRUE(read_file(cut / "model.safetensors") == model1);
  // The model file at the end of epoch 2 (its checkpoints at steps 16-28 pass).
  r = run({"train", "--resume", cut.string()}, "enospc:5000:model.safetensors:1");
  expect_disk_full(r, "model.safetensors");
  EXPECT_TRUE(read_file(cut / "model.safetensors") == model1);
  EXPECT_EQ(train::read_run_file((cut / "checkpoint.safetensors").string()).train->steps, 28);
  expect_resumes_bit_exactly(cut, "resumed with room on the disk");
}

// --resume of a checkpoint of another run: copied into the folder of a resnet20 run, of a run of
// 3 classes, or of a segmentation run; resumed with another --model; or with --data of other
// classes. Each is exit 2 with one line naming both, and the run's files are left as they were.
TEST_F(Faults, ResumeRefusesACheckpointOfAnotherModelClassesOrTask) {
  const fs::path lenet = dir_ / "lenet";
  RunResult r = run(ft_args(data(), lenet, 1));
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path lenet_ckpt = lenet / "checkpoint.safetensors";

  // Copied into the folder of a run of another model, class list or task.
  auto expect_copy_refused = [&](const fs::path& other, const std::string& what,
                                 std::initializer_list<std::string> parts) {
    fs::copy_file(lenet_ckpt, other / "checkpoint.safetensors",
                  fs::copy_options::overwrite_existing);
    const std::string model = read_file(other / "model.safetensors");
    const std::string metrics = read_file(other / "metrics.jsonl");
    RunResult res = run({"train", "--resume", other.string()});
    expect_refused(res, what, parts);
    EXPECT_NE(res.err.find((other / "checkpoint.safetensors").string() + " holds a lenet run"),
              std::string::npos)
        << res.err;
    EXPECT_NE(res.err.find((other / "model.safetensors").string() + " is of a"), std::string::npos)
        << res.err;
    EXPECT_EQ(read_file(other / "model.safetensors"), model) << what;
    EXPECT_EQ(read_file(other / "metrics.jsonl"), metrics) << what;
  };
  const fs::path resnet = dir_ / "resnet";
  std::vector<std::string> a = ft_args(data(), resnet, 1);
  a[2] = "resnet20";
  a.insert(a.end(), {"--steps", "2"});
  r = run(a);
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_copy_refused(resnet, "another model",
                      {"a lenet run (classify, 10 classes)",
                       "a resnet20 run (classify, 10 classes)", "copied from another run"});

  write_image_folder(dir_ / "three", {"cat", "dog", "fox"});
  const fs::path three = dir_ / "run3";
  r = run({"train", "--model", "lenet", "--dataset", "imagefolder", "--data",
           (dir_ / "three").string(), "--epochs", "1", "--batch-size", "4", "--threads", "1",
           "--workers", "0", "--out", three.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string three_ckpt = read_file(three / "checkpoint.safetensors");
  expect_copy_refused(three, "another class count",
                      {"a lenet run (classify, 10 classes)", "a lenet run (classify, 3 classes)"});
  write_file(three / "checkpoint.safetensors", three_ckpt);

  const fs::path seg = dir_ / "seg";
  fs::create_directories(seg);
  train::ModelMeta sm;
  sm.model = "unet_resnet18";
  sm.task = "segment";
  sm.classes = {"background", "road", "car"};
  train::write_model_file((seg / "model.safetensors").string(), sm,
                          {{"head.weight", Tensor::zeros({3, 32, 1, 1})}});
  write_file(seg / "metrics.jsonl", "");
  expect_copy_refused(
      seg, "another task",
      {"a lenet run (classify, 10 classes)", "a unet_resnet18 run (segment, 3 classes)"});

  // Another --model on the command line: the flag, the value given and the checkpoint's.
  r = run({"train", "--resume", lenet.string(), "--model", "resnet20"});
  expect_refused(r, "--model",
                 {"--model differs from the recipe in", "(given resnet20, the run's lenet)"});

  // --data of another class count, or of as many classes with other names.
  write_image_folder(dir_ / "two", {"cat", "dog"});
  r = run({"train", "--resume", three.string(), "--data", (dir_ / "two").string()});
  expect_refused(r, "--data of 2 classes",
                 {"holds a lenet run (classify, 3 classes)", "--data " + (dir_ / "two").string(),
                  "(classify, 2 classes)"});
  write_image_folder(dir_ / "owl", {"cat", "dog", "owl"});
  r = run({"train", "--resume", three.string(), "--data", (dir_ / "owl").string()});
  expect_refused(r, "--data of other classes",
                 {"(classify, classes cat, dog, fox)", "(classify, classes cat, dog, owl)"});
  EXPECT_TRUE(read_file(three / "checkpoint.safetensors") == three_ckpt);
  // The run's own data still resumes (a finished run: nothing to train).
  r = run({"train", "--resume", three.string()});
  EXPECT_EQ(r.rc, 0) << r.err;
}
