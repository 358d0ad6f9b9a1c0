// Fuzzes the archive reader (scan_archive_memory: every format and filter libarchive knows, as
// scan_archive reads a .tar/.tar.gz file), the image-folder member filter (image_folder_want) and
// the loader that builds a dataset from its entries: CIFAR-10 (cifar-10-batches-bin/
// test_batch.bin). Image folders in archives are read through the tar index (fuzz_tar_index). The
// pixel limit is lowered to 2^22 (see fuzz_image.cpp). Only hpcnet's typed errors are expected.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/data.h"
#include "src/data/internal.h"

namespace detail = hpcnet::data::detail;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hpcnet::data::set_max_image_pixels(int64_t{1} << 22);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz.tar.gz";
  std::set<std::string> dirs;
  std::vector<detail::ArchiveEntry> entries;
  try {
    entries = detail::scan_archive_memory(data, size, name, [&](const std::string& p, bool is_dir) {
      const bool image = detail::image_folder_want("train", p, is_dir, &dirs);
      return image || detail::cifar10_archive_member(p, "test", nullptr);
    });
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
    return 0;
  }
  for (const detail::ArchiveEntry& e : entries)
    if (e.path.empty() || e.data.size() > detail::kMaxInputFileBytes) std::abort();
  try {
    auto ds = detail::cifar10_from_archive_entries(name, "test", entries);
    if (ds->size() > 0) (void)ds->get(0);
  } catch (const hpcnet::Error&) {
  }
  return 0;
}
