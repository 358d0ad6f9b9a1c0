// Fuzzes the CIFAR-10 binary reader (cifar10_from_buffers, what load_cifar10_binary runs on a
// folder's or an archive's batches). Input: byte 0 = L, the length of a batches.meta.txt (0: none),
// then its L bytes, then the bytes of data_batch_1.bin. Only hpcnet's typed errors are expected.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "src/data/internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t meta_len = data[0];
  if (size < 1 + meta_len) return 0;
  const std::vector<uint8_t> meta(data + 1, data + 1 + meta_len);
  const std::vector<uint8_t> batch(data + 1 + meta_len, data + size);
  try {
    auto ds = hpcnet::data::detail::cifar10_from_buffers(
        {{"cifar-10-batches-bin/data_batch_1.bin", &batch}}, meta_len ? &meta : nullptr,
        "cifar-10-batches-bin/batches.meta.txt", "cifar10 fuzz");
    if (ds->size() * 3073 != static_cast<int64_t>(batch.size())) std::abort();
    if (ds->size() > 0) (void)ds->get(ds->size() - 1);
  } catch (const hpcnet::Error&) {  // InputError (bad input) derives from it
  }
  return 0;
}
