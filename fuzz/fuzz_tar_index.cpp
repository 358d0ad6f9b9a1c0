// Fuzzes the tar index (index_tar: ustar, GNU and pax headers of an archive held in memory, as
// TarFile::open reads them from a file). Only InputError is expected; every member found must lie
// inside the input (its bytes are read here, so ASan sees any overrun) and every folder be a
// normalised, sorted and unique path.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpcnet/error.h"
#include "src/data/tar_index.h"

namespace detail = hpcnet::data::detail;

namespace {

bool normalised(const std::string& p) {
  return !p.empty() && p.front() != '/' && p.back() != '/' && p.rfind("./", 0) != 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<detail::TarMember> members;
  std::vector<std::string> dirs;
  try {
    detail::index_tar(data, size, "fuzz.tar", &members, &dirs);
  } catch (const hpcnet::InputError&) {
    return 0;
  }
  uint64_t end = 0;  // members come in archive order, each after the one before
  unsigned sum = 0;
  for (const detail::TarMember& m : members) {
    if (!normalised(m.path) || m.offset % 512 != 0 || m.offset < end || m.offset > size ||
        m.size > size - m.offset)
      std::abort();
    for (uint64_t i = 0; i < m.size; ++i) sum += data[m.offset + i];
    end = m.offset + m.size;
  }
  for (size_t i = 0; i < dirs.size(); ++i)
    if (!normalised(dirs[i]) || (i > 0 && !(dirs[i - 1] < dirs[i]))) std::abort();
  volatile unsigned sink = sum;
  (void)sink;
  return 0;
}
