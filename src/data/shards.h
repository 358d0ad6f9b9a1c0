// The parts of the WebDataset reader that need no file (include/hpcnet/shards.h has the rest):
// splitting a member path into key and extension as webdataset does, grouping a shard's member
// list into samples, and parsing a .cls member. Exposed for the tests and the fuzz target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/data/tar_index.h"

namespace hpcnet::data::detail {

// webdataset's base_plus_ext (re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", path)): true with *key
// and *ext (not lower-cased here) when path has a dot in its file name; the key is the path up to
// that first dot ("d/a.b.c": "d/a" and "b.c"). A file name starting with a dot takes the folder
// as the key when the folder's own name has no dot ("d/.x": "d/" and "x"), as the regex does.
bool split_member_key(const std::string& path, std::string* key, std::string* ext);

// webdataset's metadata names, skipped: "__*__" at the top, or a path starting "__X__/".
bool is_shard_metadata(const std::string& path);

// One sample of a shard: its key and which members (indices into the member list; -1: none)
// hold its parts.
struct ShardSample {
  std::string key;
  int64_t image = -1;  // jpg, jpeg or png
  int64_t cls = -1;
  int64_t txt = -1;
  int64_t mask = -1;  // mask.png or seg.png
  int64_t json = -1;
};
// Groups members (in archive order) as webdataset's group_by_keys: consecutive members with one
// key (split_member_key, extension lower-cased) are a sample, names without a key and metadata are
// skipped. InputError "webdataset: SHARD: key K: ..." for a key with two members of one extension
// (as webdataset's "duplicate file name"), two images, an image of a format hpcnet does not read
// (webp, gif, ...: "convert to JPEG or PNG"), or no image.
std::vector<ShardSample> group_shard_members(const std::vector<TarMember>& members,
                                             const std::string& shard);

// The class of a .cls member's text: optional white space, decimal digits (at most 9), optional
// white space. InputError "webdataset: SHARD: key K: KEY.cls ..." otherwise.
int64_t parse_shard_cls(const std::string& text, const std::string& shard, const std::string& key);

}  // namespace hpcnet::data::detail
