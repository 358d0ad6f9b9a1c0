// Fuzzes the run-file reader (src/train/checkpoint.cpp): read_run_file's metadata parsing (model,
// task, classes, imgsz, training state, RNG state, loss sums, best metric) and the header peek of
// check_resume_folder. Both read files, so each input is written to one file in a private folder
// under /dev/shm (or $TMPDIR), removed at exit. Only hpcnet's typed errors are expected.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "hpcnet/data.h"
#include "src/train/checkpoint.h"

namespace {

std::string g_dir;  // the private folder; the input is g_dir/model.safetensors

void remove_dir() {
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : (tmp ? tmp : "/tmp");
  std::string templ = base + "/hpcnet-fuzz-run-file.XXXXXX";
  if (!mkdtemp(templ.data())) {
    std::perror("fuzz_run_file: mkdtemp");
    std::abort();
  }
  g_dir = templ;
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = g_dir + "/model.safetensors";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  try {
    const hpcnet::train::RunFile r = hpcnet::train::read_run_file(path);
    if (r.train && (r.train->epoch_step < 0 || r.train->epoch_step > r.train->steps)) std::abort();
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  // A checkpoint of another run resumed into this folder: the file here is only peeked at.
  hpcnet::train::RunFile mine;
  mine.path = g_dir + "/checkpoint.safetensors";
  mine.meta.model = "lenet";
  mine.meta.classes = hpcnet::data::cifar10_class_names();
  try {
    hpcnet::train::check_resume_folder(mine, g_dir);
  } catch (const hpcnet::Error&) {
  }
  return 0;
}
