// torchvision-style image folders (ROOT/<split>/<class>/<images>) from a folder or a .tar (a
// .tar.gz decompressed once to a cached .tar): the files are listed (an archive's member offsets)
// and decoded lazily; the dataset keeps torchvision's order (class, folder path, file name). Directory links
// are followed, but no folder twice within a class (a link to an ancestor would loop).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "src/data/internal.h"
#include "src/data/lazy_dataset.h"
#include "src/data/tar_index.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace detail {
namespace {

bool any_hidden(const std::vector<std::string>& parts) {
  return std::any_of(parts.begin(), parts.end(), is_hidden_name);
}

std::string join(const std::vector<std::string>& parts, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) {
    if (!s.empty()) s += '/';
    s += parts[i];
  }
  return s;
}

const char* kImageKinds = "(.jpg, .jpeg, .png)";

std::string text_of(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

}  // namespace

std::vector<std::string> readable_class_names(const std::vector<std::string>& folders,
                                              const std::string& text) {
  std::map<std::string, std::string> names;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    const size_t sp = line.find_first_of(" \t");
    if (sp == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", sp);
    if (start != std::string::npos) names[line.substr(0, sp)] = line.substr(start);
  }
  std::vector<std::string> out;
  std::map<std::string, int> uses;
  for (const std::string& f : folders) {
    auto it = names.find(f);
    if (it == names.end()) return folders;  // a partial mapping names nothing
    uses[it->second]++;
    out.push_back(it->second);
  }
  // ImageNet names two synsets "crane" and two "maillot": the folder keeps such names apart.
  for (size_t k = 0; k < out.size(); ++k)
    if (uses[out[k]] > 1) out[k] += " (" + folders[k] + ")";
  return out;
}

std::shared_ptr<Dataset> build_image_folder(std::vector<std::string> classes,
                                            const std::vector<std::string>& class_dirs,
                                            std::vector<ImageFile> files,
                                            std::shared_ptr<const FileStore> store,
                                            std::string description) {
  std::vector<int64_t> counts(classes.size(), 0);
  for (const ImageFile& f : files) counts[static_cast<size_t>(f.label)]++;
  for (size_t k = 0; k < classes.size(); ++k)
    HPCNET_REQUIRE(counts[k] > 0, "imagefolder: class folder " + class_dirs[k] + " has no images " +
                                      kImageKinds + "; add images or remove the folder");
  std::stable_sort(files.begin(), files.end(), [](const ImageFile& a, const ImageFile& b) {
    if (a.label != b.label) return a.label < b.label;
    if (a.rel_dir != b.rel_dir) return a.rel_dir < b.rel_dir;
    return a.file < b.file;
  });
  auto ds = std::make_shared<LazyDataset>(std::move(store), std::move(classes), TargetKind::kLabel,
                                          "imagefolder", std::move(description));
  ds->reserve(files.size());
  for (ImageFile& f : files) {
    LazyItem it;
    it.image = std::move(f.ref);
    it.label = f.label;
    it.name = std::move(f.display);
    ds->add(std::move(it));
  }
  return ds;
}

bool image_folder_want(const std::string& split, const std::string& path, bool is_dir,
                       std::set<std::string>* dirs) {
  std::vector<std::string> parts = split_path(path);
  if (parts.empty() || any_hidden(parts)) return false;
  const size_t dir_depth = is_dir ? parts.size() : parts.size() - 1;
  for (size_t d = 1; d <= std::min<size_t>(dir_depth, 3); ++d) dirs->insert(join(parts, 0, d));
  if (is_dir || !is_image_name(parts.back())) return false;
  return (parts.size() >= 3 && parts[0] == split) || (parts.size() >= 4 && parts[1] == split);
}

std::shared_ptr<Dataset> image_folder_from_tar(const std::string& archive,
                                               const std::string& split,
                                               std::shared_ptr<const TarFile> tar) {
  std::set<std::string> dirs;
  std::vector<const TarMember*> members;
  for (const std::string& d : tar->dirs()) image_folder_want(split, d, true, &dirs);
  for (const TarMember& m : tar->members())
    if (image_folder_want(split, m.path, false, &dirs)) members.push_back(&m);
  // Where <split>/ is: at the top, or below exactly one top-level folder.
  std::string prefix;
  if (!dirs.count(split)) {
    std::vector<std::string> tops;
    for (const std::string& d : dirs) {
      std::vector<std::string> parts = split_path(d);
      if (parts.size() == 2 && parts[1] == split) tops.push_back(parts[0]);
    }
    if (tops.empty()) {
      std::string seen;
      for (const std::string& d : dirs)
        if (split_path(d).size() <= 2) seen += (seen.empty() ? "" : ", ") + d + "/";
      throw InputError("imagefolder: archive " + archive + " has no " + split +
                       "/<class>/ images (folders found: " + (seen.empty() ? "none" : seen) +
                       "); use a split it holds, or hold out a validation split from train");
    }
    HPCNET_REQUIRE(tops.size() == 1, "imagefolder: archive " + archive + " holds " + split +
                                         "/ under several top-level folders (" + tops[0] + ", " +
                                         tops[1] + "); keep one");
    prefix = tops[0] + "/";
  }
  const std::string split_dir = prefix + split;
  const size_t depth = split_path(split_dir).size();
  std::vector<std::string> classes;
  for (const std::string& d : dirs) {
    std::vector<std::string> parts = split_path(d);
    if (parts.size() == depth + 1 && d.compare(0, split_dir.size() + 1, split_dir + "/") == 0)
      classes.push_back(parts.back());
  }
  std::sort(classes.begin(), classes.end());
  HPCNET_REQUIRE(!classes.empty(), "imagefolder: " + archive + ":" + split_dir +
                                       "/ holds no class folders; expected " + split_dir +
                                       "/<class>/<images>");
  std::vector<std::string> class_dirs;
  for (const std::string& c : classes) class_dirs.push_back(archive + ":" + split_dir + "/" + c);

  std::vector<ImageFile> files;
  files.reserve(members.size());
  for (const TarMember* m : members) {
    if (m->path.compare(0, split_dir.size() + 1, split_dir + "/") != 0) continue;
    std::vector<std::string> parts = split_path(m->path);
    if (parts.size() < depth + 2) continue;
    auto it = std::lower_bound(classes.begin(), classes.end(), parts[depth]);
    if (it == classes.end() || *it != parts[depth]) continue;
    ImageFile f;
    f.label = it - classes.begin();
    f.rel_dir = join(parts, depth + 1, parts.size() - 1);
    f.file = parts.back();
    f.display = m->path.substr(prefix.size());
    f.ref = member_ref(*m);
    files.push_back(std::move(f));
  }
  for (const char* names_file : {"LOC_synset_mapping.txt", "classes.txt"})
    if (const TarMember* m = tar->find(prefix + names_file)) {
      classes = readable_class_names(classes, text_of(tar->read(*m)));
      break;
    }
  return build_image_folder(std::move(classes), class_dirs, std::move(files),
                            std::make_shared<FileStore>(std::move(tar), archive),
                            "imagefolder " + split + " from " + archive);
}

}  // namespace detail

namespace {

using detail::FileTree;
using detail::ImageFile;

// The class folders of split_dir (not hidden), sorted.
std::vector<std::string> class_folders(const fs::path& split_dir) {
  std::error_code ec;
  std::vector<std::string> classes;
  for (const fs::directory_entry& e : fs::directory_iterator(split_dir, ec)) {
    std::string name = e.path().filename().string();
    if (!detail::is_hidden_name(name) && e.is_directory(ec)) classes.push_back(name);
  }
  HPCNET_REQUIRE(!ec, "imagefolder: cannot list " + split_dir.string() + ": " + ec.message());
  std::sort(classes.begin(), classes.end());
  HPCNET_REQUIRE(!classes.empty(), "imagefolder: " + split_dir.string() +
                                       " holds no class folders; expected " + split_dir.string() +
                                       "/<class>/<images>");
  return classes;
}

// A folder's identity (device, inode), whatever path or link leads to it.
using FolderId = std::pair<dev_t, ino_t>;
bool folder_id(const fs::path& p, FolderId* id) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return false;
  *id = {st.st_dev, st.st_ino};
  return true;
}

// Image entries of one class that are links leading nowhere.
struct BrokenLinks {
  int64_t count = 0;
  std::string first;  // by name: "PATH -> TARGET"
};

// The images below class_dir (label k), links to folders followed but no folder twice, into
// *files; image entries that are links leading nowhere are counted into *broken.
void list_class_images(const fs::path& root, const fs::path& split_dir, const fs::path& class_dir,
                       int64_t label, std::vector<ImageFile>* files, BrokenLinks* broken) {
  // The class folder's ancestors and the folders of this class already listed: a link to one of
  // them (an ancestor would loop until the path is too long, or take in the other classes) is
  // not followed, so no image is listed twice.
  std::set<FolderId> visited;
  for (const fs::path& start : {class_dir, split_dir}) {
    std::error_code cec;
    for (fs::path p = fs::canonical(start, cec); !cec && !p.empty(); p = p.parent_path()) {
      if (FolderId id; folder_id(p, &id)) visited.insert(id);
      if (p == p.parent_path()) break;
    }
  }
  std::error_code ec;
  fs::recursive_directory_iterator it(class_dir, fs::directory_options::follow_directory_symlink,
                                      ec);
  HPCNET_REQUIRE(!ec, "imagefolder: cannot list " + class_dir.string() + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    HPCNET_REQUIRE(!ec, "imagefolder: cannot list " + class_dir.string() + ": " + ec.message());
    const std::string name = it->path().filename().string();
    if (detail::is_hidden_name(name)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (std::error_code dec; it->is_directory(dec)) {
      FolderId id;
      if (folder_id(it->path(), &id) && !visited.insert(id).second) it.disable_recursion_pending();
      continue;
    }
    if (!detail::is_image_name(name)) continue;
    if (std::error_code fec; !it->is_regular_file(fec)) {
      // A link leading nowhere: left out, counted and said once (a FIFO or device with an
      // image's name is left out as before).
      if (std::string target; detail::is_broken_link(it->path().string(), &target)) {
        std::string link = it->path().lexically_relative(root).generic_string() + " -> " + target;
        if (broken->count++ == 0 || link < broken->first) broken->first = std::move(link);
      }
      continue;
    }
    ImageFile f;
    f.label = label;
    f.rel_dir = it->path().parent_path().lexically_relative(class_dir).generic_string();
    if (f.rel_dir == ".") f.rel_dir.clear();
    f.file = name;
    f.display = it->path().lexically_relative(root).generic_string();
    f.ref.path = (root / f.display).string();
    files->push_back(std::move(f));
  }
}

// Links leading nowhere are left out and said once on stderr; a class of nothing else is refused.
void report_broken_links(const std::vector<BrokenLinks>& broken,
                         const std::vector<std::string>& class_dirs,
                         const std::vector<ImageFile>& files, const std::string& split) {
  int64_t total = 0;
  for (const BrokenLinks& b : broken) total += b.count;
  if (total == 0) return;
  std::vector<int64_t> kept(class_dirs.size(), 0);
  for (const ImageFile& f : files) kept[static_cast<size_t>(f.label)]++;
  for (size_t k = 0; k < class_dirs.size(); ++k)
    HPCNET_REQUIRE(kept[k] > 0 || broken[k].count == 0,
                   "imagefolder: class folder " + class_dirs[k] + " holds no images, only " +
                       std::to_string(broken[k].count) + " links that lead nowhere (first: " +
                       broken[k].first + "); fix or remove the links");
  std::fprintf(stderr,
               "imagefolder: %lld of %lld images of %s are links that lead nowhere and are "
               "left out (first: %s); fix or remove the links\n",
               static_cast<long long>(total),
               static_cast<long long>(total + static_cast<int64_t>(files.size())), split.c_str(),
               std::find_if(broken.begin(), broken.end(), [](const BrokenLinks& b) {
                 return !b.first.empty();
               })->first.c_str());
}

std::shared_ptr<Dataset> image_folder_from_folder(const std::string& path,
                                                  const std::string& split) {
  std::error_code ec;
  const fs::path root(path);
  HPCNET_REQUIRE(fs::is_directory(root, ec), "imagefolder: " + path + " does not exist");
  const fs::path split_dir = root / split;
  HPCNET_REQUIRE(fs::is_directory(split_dir, ec), "imagefolder: " + path + " has no " + split +
                                                      "/ folder; expected " + split_dir.string() +
                                                      "/<class>/<images>");
  std::vector<std::string> classes = class_folders(split_dir);
  std::vector<std::string> class_dirs;
  std::vector<ImageFile> files;
  std::vector<BrokenLinks> broken(classes.size());
  for (size_t k = 0; k < classes.size(); ++k) {
    const fs::path class_dir = split_dir / classes[k];
    class_dirs.push_back(class_dir.string());
    list_class_images(root, split_dir, class_dir, static_cast<int64_t>(k), &files, &broken[k]);
  }
  report_broken_links(broken, class_dirs, files, split);
  const FileTree tree = FileTree::folder("imagefolder");
  for (const char* names_file : {"LOC_synset_mapping.txt", "classes.txt"})
    if (std::error_code nec; fs::is_regular_file(root / names_file, nec)) {
      classes = detail::readable_class_names(classes, tree.text((root / names_file).string()));
      break;
    }
  return detail::build_image_folder(std::move(classes), class_dirs, std::move(files), tree.store(),
                                    "imagefolder " + split + " from " + path);
}

}  // namespace

std::shared_ptr<Dataset> load_image_folder(const std::string& path, const std::string& split) {
  detail::check_split(split, "imagefolder");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return image_folder_from_folder(path, split);
  HPCNET_REQUIRE(detail::is_archive_name(path),
                 "imagefolder: " + path +
                     " is a file but not a .tar/.tar.gz/.tgz archive; pass a folder holding " +
                     split + "/<class>/ images or such an archive");
  return detail::image_folder_from_tar(path, split,
                                       detail::TarFile::open(detail::decompressed_tar(path)));
}

}  // namespace hpcnet::data
