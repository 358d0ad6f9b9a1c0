// Fuzzes the WebDataset reader's parsing: byte 0 picks what the rest is. 0: a brace pattern
// (expand_braces); 1: a member list, one path a line (split_member_key, group_shard_members);
// otherwise a tar (index_tar, then grouping, and every .cls member parsed). Only InputError is
// expected; every sample must name members of the list with its own key, and an image.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpcnet/error.h"
#include "hpcnet/shards.h"
#include "src/data/shards.h"
#include "src/data/tar_index.h"

namespace detail = hpcnet::data::detail;

namespace {

void check_samples(const std::vector<detail::TarMember>& members,
                   const std::vector<detail::ShardSample>& samples) {
  for (const detail::ShardSample& s : samples) {
    for (int64_t m : {s.image, s.cls, s.txt, s.mask, s.json}) {
      if (m < -1 || m >= static_cast<int64_t>(members.size())) std::abort();
      std::string key, ext;
      if (m >= 0 && (!detail::split_member_key(members[static_cast<size_t>(m)].path, &key, &ext) ||
                     key != s.key))
        std::abort();
    }
    if (s.image < 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] == 0) {
      const std::vector<std::string> names = hpcnet::data::expand_braces(rest, 10'000);
      if (names.empty() || names.size() > 10'000) std::abort();
    } else if (data[0] == 1) {
      std::vector<detail::TarMember> members;
      for (size_t from = 0; from <= rest.size();) {
        const size_t nl = std::min(rest.find('\n', from), rest.size());
        members.push_back({rest.substr(from, nl - from), 0, 0});
        from = nl + 1;
      }
      check_samples(members, detail::group_shard_members(members, "fuzz.tar"));
    } else {
      std::vector<detail::TarMember> members;
      std::vector<std::string> dirs;
      detail::index_tar(data + 1, size - 1, "fuzz.tar", &members, &dirs);
      const auto samples = detail::group_shard_members(members, "fuzz.tar");
      check_samples(members, samples);
      for (const detail::ShardSample& s : samples)
        if (s.cls >= 0) {
          const detail::TarMember& m = members[static_cast<size_t>(s.cls)];
          const std::string text(reinterpret_cast<const char*>(data) + 1 + m.offset, m.size);
          if (detail::parse_shard_cls(text, "fuzz.tar", s.key) < 0) std::abort();
        }
    }
  } catch (const hpcnet::InputError&) {
  }
  return 0;
}
