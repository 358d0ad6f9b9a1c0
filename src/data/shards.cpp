// Reading WebDataset shards: brace patterns, list files and folders of .tar files name the
// shards; each is indexed from its headers and its members grouped by key as webdataset does; the
// result is one LazyDataset over all shards (one FileStore archive per shard, read by offset).
#include "hpcnet/shards.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"
#include "src/data/shards.h"
#include "src/data/tar_index.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace {

constexpr uint64_t kMaxTextMember = 64ull << 20;

bool ends_with_ci(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         detail::to_lower(s.substr(s.size() - suffix.size())) == suffix;
}

bool is_digits(const std::string& s, size_t from = 0) {
  return s.size() > from && std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from), s.end(),
                                        [](char c) { return c >= '0' && c <= '9'; });
}
bool is_integer(const std::string& s) { return is_digits(s, !s.empty() && s[0] == '-' ? 1 : 0); }

// "{N..M[..S]}" or "{a..e[..S]}" as braceexpand; false when body is not a range.
bool expand_range(const std::string& body, const std::string& pattern, size_t limit,
                  std::vector<std::string>* out) {
  std::vector<std::string> parts;
  for (size_t from = 0;;) {
    const size_t dots = body.find("..", from);
    parts.push_back(body.substr(from, dots == std::string::npos ? dots : dots - from));
    if (dots == std::string::npos) break;
    from = dots + 2;
  }
  if (parts.size() < 2 || parts.size() > 3) return false;
  int64_t step = 1;
  if (parts.size() == 3) {
    std::string s = parts[2];
    if (!s.empty() && s[0] == '-') s.erase(0, 1);
    if (!is_digits(s) || s.size() > 9) return false;
    step = std::max<int64_t>(std::stoll(s), 1);  // braceexpand: int(incr) or 1
  }
  const std::string &a = parts[0], &b = parts[1];
  const bool letters = a.size() == 1 && b.size() == 1 &&
                       std::isalpha(static_cast<unsigned char>(a[0])) &&
                       std::isalpha(static_cast<unsigned char>(b[0]));
  if (!letters && !(is_integer(a) && is_integer(b))) return false;
  HPCNET_REQUIRE(letters || (a.size() <= 18 && b.size() <= 18),
                 "webdataset: " + pattern + ": {" + body + "}: numbers of more than 18 digits");
  const int64_t start = letters ? a[0] : std::stoll(a), end = letters ? b[0] : std::stoll(b);
  const uint64_t count = static_cast<uint64_t>(start <= end ? end - start : start - end) /
                             static_cast<uint64_t>(step) +
                         1;
  HPCNET_REQUIRE(count <= limit, "webdataset: " + pattern + ": {" + body + "} names " +
                                     std::to_string(count) + " shards, over " +
                                     std::to_string(limit));
  int width = 0;
  auto padded = [](const std::string& s) {
    return s != "0" && s != "-0" && (s.rfind('0', 0) == 0 || s.rfind("-0", 0) == 0);
  };
  if (!letters && (padded(a) || padded(b))) width = static_cast<int>(std::max(a.size(), b.size()));
  for (uint64_t k = 0; k < count; ++k) {
    const int64_t v = start <= end ? start + static_cast<int64_t>(k) * step
                                   : start - static_cast<int64_t>(k) * step;
    if (letters) {
      out->push_back(std::string(1, static_cast<char>(v)));
    } else {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%0*lld", width, static_cast<long long>(v));
      out->push_back(buf);
    }
  }
  return true;
}

// The alternatives of a group's body: a range, or items split at top-level commas.
std::vector<std::string> group_items(const std::string& body, const std::string& pattern,
                                     size_t limit) {
  HPCNET_REQUIRE(
      !body.empty(),
      "webdataset: " + pattern + ": an empty {}; write a range {000000..000009} or a list {a,b}");
  std::vector<std::string> items;
  if (body.find(',') == std::string::npos && body.find('{') == std::string::npos &&
      expand_range(body, pattern, limit, &items))
    return items;
  int depth = 0;
  size_t from = 0;
  for (size_t k = 0; k < body.size(); ++k) {
    if (body[k] == '{') ++depth;
    if (body[k] == '}') --depth;
    if (body[k] == ',' && depth == 0) {
      items.push_back(body.substr(from, k - from));
      from = k + 1;
    }
  }
  HPCNET_REQUIRE(!items.empty(), "webdataset: " + pattern + ": {" + body +
                                     "} is neither a range N..M nor a list a,b");
  items.push_back(body.substr(from));
  return items;
}

std::vector<std::string> expand(const std::string& s, const std::string& pattern, size_t limit) {
  const size_t open = s.find('{'), stray = s.find('}');
  if (open == std::string::npos) {
    HPCNET_REQUIRE(stray == std::string::npos,
                   "webdataset: " + pattern + ": a '}' without its '{'");
    return {s};
  }
  HPCNET_REQUIRE(stray == std::string::npos || stray > open,
                 "webdataset: " + pattern + ": a '}' without its '{'");
  size_t close = std::string::npos;
  for (size_t k = open, depth = 0; k < s.size(); ++k) {
    if (s[k] == '{') ++depth;
    if (s[k] == '}' && --depth == 0) {
      close = k;
      break;
    }
  }
  HPCNET_REQUIRE(close != std::string::npos, "webdataset: " + pattern + ": a '{' without its '}'");
  const std::string prefix = s.substr(0, open);
  const std::vector<std::string> tails = expand(s.substr(close + 1), pattern, limit);
  std::vector<std::string> out;
  for (const std::string& item : group_items(s.substr(open + 1, close - open - 1), pattern, limit))
    for (const std::string& head : expand(item, pattern, limit))
      for (const std::string& tail : tails) {
        HPCNET_REQUIRE(out.size() < limit, "webdataset: " + pattern + " names over " +
                                               std::to_string(limit) + " shards");
        out.push_back(prefix + head + tail);
      }
  return out;
}

bool is_regular(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_folder(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The non-empty, non-comment lines of a list file (at most 64 MiB).
std::vector<std::string> list_lines(const std::string& path) {
  const std::vector<uint8_t> bytes = detail::read_whole_file(path, "webdataset", 64ull << 20);
  std::vector<std::string> lines;
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  for (std::string l; std::getline(in, l);) {
    const size_t a = l.find_first_not_of(" \t\r"), b = l.find_last_not_of(" \t\r");
    if (a == std::string::npos || l[a] == '#') continue;
    lines.push_back(l.substr(a, b - a + 1));
  }
  return lines;
}

bool is_list_name(const std::string& p) {
  return ends_with_ci(p, ".txt") || ends_with_ci(p, ".shards");
}

// The folders classes.txt is looked for in, in order: a list file's, the first shard's.
std::vector<std::string> classes_folders(const std::string& path,
                                         const std::vector<std::string>& shards) {
  std::vector<std::string> dirs;
  if (path.find('{') == std::string::npos && is_regular(path) && !ends_with_ci(path, ".tar"))
    dirs.push_back(fs::path(path).parent_path().string());
  dirs.push_back(fs::path(shards.front()).parent_path().string());
  return dirs;
}

std::vector<std::string> read_classes(const std::vector<std::string>& folders, std::string* file) {
  for (const std::string& folder : folders) {
    *file = (fs::path(folder.empty() ? "." : folder) / "classes.txt").string();
    if (is_regular(*file)) break;
  }
  if (!is_regular(*file)) return {};
  const std::vector<uint8_t> bytes = detail::read_whole_file(*file, "webdataset", 64ull << 20);
  std::vector<std::string> names;
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    names.push_back(l);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  HPCNET_REQUIRE(!names.empty(), "webdataset: " + *file + " names no class; write one a line");
  return names;
}

}  // namespace

std::vector<std::string> expand_braces(const std::string& pattern, size_t max_names) {
  return expand(pattern, pattern, max_names);
}

bool is_webdataset_path(const std::string& path) {
  if (path.find('{') != std::string::npos) return ends_with_ci(path, ".tar");
  if (is_regular(path)) {
    if (!is_list_name(path)) return false;
    try {
      const std::vector<std::string> lines = list_lines(path);
      return !lines.empty() && std::all_of(lines.begin(), lines.end(), [](const std::string& l) {
        return ends_with_ci(l, ".tar");
      });
    } catch (const InputError&) {
      return false;
    }
  }
  if (!is_folder(path)) return false;
  std::error_code ec;
  int tars = 0;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || name == "classes.txt") continue;
    if (!ends_with_ci(name, ".tar") || !e.is_regular_file(ec)) return false;
    ++tars;
  }
  return !ec && tars > 0;
}

std::vector<std::string> webdataset_shards(const std::string& path) {
  std::vector<std::string> shards;
  if (path.find('{') != std::string::npos) {
    shards = expand_braces(path);
  } else if (is_folder(path)) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (!name.empty() && name[0] != '.' && ends_with_ci(name, ".tar") && e.is_regular_file(ec))
        shards.push_back(e.path().string());
    }
    std::sort(shards.begin(), shards.end());
    HPCNET_REQUIRE(!shards.empty(), "webdataset: folder " + path + " holds no .tar shards");
  } else if (is_regular(path) && !ends_with_ci(path, ".tar")) {
    const fs::path dir = fs::path(path).parent_path();
    for (const std::string& l : list_lines(path))
      shards.push_back(fs::path(l).is_absolute() ? l : (dir / l).string());
    HPCNET_REQUIRE(!shards.empty(),
                   "webdataset: list file " + path + " names no shard; write one .tar path a line");
  } else {
    shards.push_back(path);
  }
  for (const std::string& s : shards)
    HPCNET_REQUIRE(is_regular(s), "webdataset: shard " + s + " does not exist" +
                                      (s == path ? "" : " (named by " + path + ")") +
                                      "; check --data");
  return shards;
}

// ---- grouping members into samples ---------------------------------------------------------

namespace detail {

bool split_member_key(const std::string& path, std::string* key, std::string* ext) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.find('.', base);
  if (dot == std::string::npos) return false;
  if (dot == base) {  // ".x": the regex takes "folder/" as the key when the folder has no dot
    if (slash == std::string::npos) return false;
    const size_t prev = slash == 0 ? std::string::npos : path.rfind('/', slash - 1);
    const size_t from = prev == std::string::npos ? 0 : prev + 1;
    if (path.find('.', from) < slash) return false;
  }
  *key = path.substr(0, dot);
  *ext = path.substr(dot + 1);
  return true;
}

bool is_shard_metadata(const std::string& path) {
  auto framed = [](const std::string& s, size_t min) {
    return s.size() >= min && s.compare(0, 2, "__") == 0 && s.compare(s.size() - 2, 2, "__") == 0;
  };
  const size_t slash = path.find('/');
  if (slash == std::string::npos) return framed(path, 2);
  return framed(path.substr(0, slash), 4);
}

namespace {

bool is_image_ext(const std::string& e) { return e == "jpg" || e == "jpeg" || e == "png"; }
bool is_other_image_ext(const std::string& e) {
  static const char* kOther[] = {"webp", "gif", "bmp", "tif",  "tiff", "ppm",
                                 "pgm",  "pnm", "jp2", "avif", "heic"};
  return std::any_of(std::begin(kOther), std::end(kOther), [&](const char* o) { return e == o; });
}

}  // namespace

std::vector<ShardSample> group_shard_members(const std::vector<TarMember>& members,
                                             const std::string& shard) {
  std::vector<ShardSample> samples;
  std::vector<std::string> exts;  // of the current sample
  std::string unsupported;        // an image member of a format not read
  auto fail = [&](const std::string& key, const std::string& what) {
    return InputError("webdataset: " + shard + ": key " + key + ": " + what);
  };
  auto finish = [&]() {
    if (samples.empty() || samples.back().image >= 0) return;
    const std::string& key = samples.back().key;
    if (!unsupported.empty())
      throw fail(key, key + "." + unsupported + ": " + unsupported +
                          " images are not supported; convert them to JPEG or PNG");
    std::string have;
    for (const std::string& e : exts) have += (have.empty() ? "" : ", ") + key + "." + e;
    throw fail(key, "no image (.jpg, .jpeg or .png) among " + have +
                        "; the shard is incomplete or not an image dataset");
  };
  std::string key, ext;
  for (size_t i = 0; i < members.size(); ++i) {
    const std::string& path = members[i].path;
    if (is_shard_metadata(path) || !split_member_key(path, &key, &ext)) continue;
    ext = to_lower(ext);
    if (samples.empty() || samples.back().key != key) {
      finish();
      samples.push_back(ShardSample{key});
      exts.clear();
      unsupported.clear();
    }
    ShardSample& s = samples.back();
    if (std::find(exts.begin(), exts.end(), ext) != exts.end())
      throw fail(key, "two members " + key + "." + ext +
                          " (webdataset refuses duplicate names too); re-create the shard");
    exts.push_back(ext);
    const auto at = static_cast<int64_t>(i);
    if (is_image_ext(ext)) {
      if (s.image >= 0)
        throw fail(key, "two images (" + members[static_cast<size_t>(s.image)].path + " and " +
                            path + "); keep one");
      s.image = at;
    } else if (ext == "cls") {
      s.cls = at;
    } else if (ext == "txt") {
      s.txt = at;
    } else if (ext == "mask.png" || ext == "seg.png") {
      if (s.mask >= 0)
        throw fail(key, "two masks (" + members[static_cast<size_t>(s.mask)].path + " and " + path +
                            "); keep one");
      s.mask = at;
    } else if (ext == "json") {
      s.json = at;
    } else if (is_other_image_ext(ext)) {
      unsupported = ext;
    }
  }
  finish();
  return samples;
}

int64_t parse_shard_cls(const std::string& text, const std::string& shard, const std::string& key) {
  const size_t a = text.find_first_not_of(" \t\r\n"), b = text.find_last_not_of(" \t\r\n");
  const std::string digits = a == std::string::npos ? "" : text.substr(a, b - a + 1);
  if (!is_digits(digits) || digits.size() > 9) {
    std::string shown = digits.substr(0, 20);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) c = '?';
    throw InputError("webdataset: " + shard + ": key " + key + ": " + key + ".cls holds '" + shown +
                     (digits.size() > 20 ? "...'" : "'") +
                     ", not a class number (0, 1, ...); fix the shard");
  }
  return std::stoll(digits);
}

}  // namespace detail

// ---- the dataset ----------------------------------------------------------------------------

namespace {

struct Pending {
  uint32_t archive = 0;
  detail::ShardSample sample;
};

std::string member_text(const detail::TarFile& tar, const detail::TarMember& m,
                        const std::string& shard, const std::string& key) {
  HPCNET_REQUIRE(m.size <= kMaxTextMember, "webdataset: " + shard + ": key " + key + ": " + m.path +
                                               " holds " + std::to_string(m.size) +
                                               " bytes, too many for a target; fix the shard");
  std::vector<uint8_t> bytes;
  tar.read_into(m, bytes);
  return std::string(bytes.begin(), bytes.end());
}

// The shards indexed from their headers (each an archive of store) and their members grouped
// into samples, in shard order.
struct IndexedShards {
  std::shared_ptr<detail::FileStore> store = std::make_shared<detail::FileStore>();
  std::vector<std::shared_ptr<const detail::TarFile>> tars;
  std::vector<Pending> samples;
  bool any_mask = false, any_txt = false, all_cls = true;
  // Mask if any sample has a mask, else label if every sample has a cls, else boxes if any has a
  // txt, else label.
  TargetKind kind() const {
    return any_mask              ? TargetKind::kMask
           : any_txt && !all_cls ? TargetKind::kBoxes
                                 : TargetKind::kLabel;
  }
};

IndexedShards index_shards(const std::vector<std::string>& shards) {
  IndexedShards index;
  for (const std::string& shard : shards) {
    std::shared_ptr<const detail::TarFile> tar;
    try {
      tar = detail::TarFile::open(shard);
    } catch (const InputError& e) {
      throw InputError(std::string("webdataset: ") + e.what());
    }
    const uint32_t archive = index.store->add_archive(tar, shard);
    index.tars.push_back(tar);
    for (detail::ShardSample& s : detail::group_shard_members(tar->members(), shard)) {
      index.any_mask = index.any_mask || s.mask >= 0;
      index.any_txt = index.any_txt || s.txt >= 0;
      index.all_cls = index.all_cls && s.cls >= 0;
      index.samples.push_back(Pending{archive, std::move(s)});
    }
  }
  return index;
}

// Each sample's target, read now (the index holds them, as the folder loaders' do; images stay
// unread): labels (kLabel) or label rows (kBoxes), and the largest class used.
struct Targets {
  std::vector<int64_t> labels;
  std::vector<std::vector<detail::YoloRow>> rows;
  int64_t largest = -1;
};

// num_classes: the class count label rows are checked against.
Targets read_targets(const IndexedShards& index, const std::vector<std::string>& shards,
                     TargetKind kind, int64_t num_classes) {
  Targets out;
  out.labels.assign(index.samples.size(), 0);
  out.rows.resize(kind == TargetKind::kBoxes ? index.samples.size() : 0);
  for (size_t i = 0; i < index.samples.size(); ++i) {
    const Pending& p = index.samples[i];
    const detail::TarFile& tar = *index.tars[p.archive];
    const std::string& shard = shards[p.archive];
    const std::string& key = p.sample.key;
    auto member = [&](int64_t k) -> const detail::TarMember& {
      return tar.members()[static_cast<size_t>(k)];
    };
    auto missing = [&](const std::string& what) {
      return InputError("webdataset: " + shard + ": key " + key + ": no " + key + "." + what +
                        ", which every sample of a " + target_kind_name(kind) +
                        " dataset needs; fix the shard");
    };
    if (kind == TargetKind::kLabel) {
      if (p.sample.cls < 0) throw missing("cls");
      out.labels[i] =
          detail::parse_shard_cls(member_text(tar, member(p.sample.cls), shard, key), shard, key);
      out.largest = std::max(out.largest, out.labels[i]);
    } else if (kind == TargetKind::kMask) {
      if (p.sample.mask < 0) throw missing("mask.png");
    } else if (p.sample.txt >= 0) {
      const detail::TarMember& m = member(p.sample.txt);
      out.rows[i] = detail::parse_yolo_label(member_text(tar, m, shard, key), shard + ":" + m.path,
                                             num_classes);
      for (const detail::YoloRow& r : out.rows[i]) out.largest = std::max(out.largest, r.cls);
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<Dataset> load_webdataset(const std::string& path) {
  const std::vector<std::string> shards = webdataset_shards(path);
  std::string classes_file;
  std::vector<std::string> classes = read_classes(classes_folders(path, shards), &classes_file);
  const IndexedShards index = index_shards(shards);
  HPCNET_REQUIRE(!index.samples.empty(), "webdataset: " + path + ": no samples in " +
                                             std::to_string(shards.size()) + " shard(s)");
  const TargetKind kind = index.kind();
  HPCNET_REQUIRE(kind != TargetKind::kMask || !classes.empty(),
                 "webdataset: " + path + ": masks need class names; write " + classes_file +
                     " (line k names mask value k)");
  const int64_t num_classes =
      classes.empty() ? detail::kMaxClasses : static_cast<int64_t>(classes.size());
  const Targets targets = read_targets(index, shards, kind, num_classes);
  std::string note;
  if (classes.empty()) {
    for (int64_t k = 0; k <= targets.largest; ++k) classes.push_back("class_" + std::to_string(k));
    if (classes.empty()) classes.push_back("class_0");
    note = ", classes class_0..class_" + std::to_string(classes.size() - 1) + " (no " +
           classes_file + ")";
  }
  const std::string description = "webdataset " + path + " (" + std::to_string(shards.size()) +
                                  (shards.size() == 1 ? " shard" : " shards") + note + ")";
  auto ds = std::make_shared<detail::LazyDataset>(index.store, std::move(classes), kind,
                                                  "webdataset", description);
  ds->reserve(index.samples.size());
  for (size_t i = 0; i < index.samples.size(); ++i) {
    const Pending& p = index.samples[i];
    const auto& members = index.tars[p.archive]->members();
    detail::LazyItem it;
    it.image = detail::member_ref(members[static_cast<size_t>(p.sample.image)], p.archive);
    if (p.sample.mask >= 0)
      it.mask = detail::member_ref(members[static_cast<size_t>(p.sample.mask)], p.archive);
    it.label = targets.labels[i];
    it.name = fs::path(shards[p.archive]).filename().string() + ":" + p.sample.key;
    if (kind == TargetKind::kBoxes)
      ds->add_rows(std::move(it), targets.rows[i]);
    else
      ds->add(std::move(it));
  }
  return ds;
}

}  // namespace hpcnet::data
