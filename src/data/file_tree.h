// Where a dataset's files are, one way for folders and archives (every loader uses these):
//   FileRef    one file: a filesystem path, or a member of an uncompressed tar (offset, size).
//   FileStore  reads FileRefs: from the filesystem, or by offset from one or more indexed tars;
//              a lazy dataset keeps one and reads its items from it on any thread.
//   FileTree   the files of one folder or one archive, listed, tested and read by path (a
//              filesystem path, or a member path with "" as the archive's top), each with its
//              FileRef in the tree's store(). Messages name files as the user knows them
//              ("folder/file", "ARCHIVE:member") and open with the loader's name ("detect: ...").
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace hpcnet::data::detail {

class TarFile;
struct TarMember;

struct FileRef {
  std::string path;      // the file's path, or the member's path inside the archive
  uint64_t offset = 0;   // archive: the member's data offset in the archive file
  uint64_t size = 0;     // archive: the member's size
  uint32_t archive = 0;  // archive: which of the store's archives
  bool empty() const { return path.empty(); }
};

// The FileRef of an indexed tar's member, in the store's archive number `archive`.
FileRef member_ref(const TarMember& m, uint32_t archive = 0);

class FileStore {
 public:
  FileStore() = default;  // the filesystem
  // Members of tar; messages name them "archive:member" (archive: the file the user gave, which
  // may be the .tar.gz that tar was decompressed from).
  FileStore(std::shared_ptr<const TarFile> tar, std::string archive) {
    add_archive(std::move(tar), std::move(archive));
  }
  // Adds an archive; FileRef::archive of its members is the returned number (0, 1, ...).
  uint32_t add_archive(std::shared_ptr<const TarFile> tar, std::string name);
  // The file's bytes into out (its capacity reused). Thread-safe. InputError "<what>: cannot read
  // FILE: reason" (FILE as display() writes it).
  void read(const FileRef& f, std::vector<uint8_t>& out, const std::string& what) const;
  // The store as bytes (its archives' paths and names), and a store from such bytes (archives
  // opened for reading by offset, not indexed again); part of LazyDataset::to_bytes, and defined
  // beside it in lazy_dataset.cpp, where the index's byte format is.
  void to_bytes(std::string& out) const;
  static std::shared_ptr<const FileStore> from_bytes(const uint8_t*& p, const uint8_t* end);
  // "path" or "ARCHIVE:member", for messages.
  std::string display(const FileRef& f) const;
  // The archives' identity for cache keys: their paths, sizes and modification times ("" for
  // folders).
  std::string identity() const;

 private:
  std::vector<std::shared_ptr<const TarFile>> tars_;
  std::vector<std::string> names_;
};

// Whether a path component is hidden (starts with '.').
bool is_hidden_name(const std::string& name);

class FileTree {
 public:
  // what: the loader's name, the first word of its messages ("detect", "segmentation").
  static FileTree folder(std::string what);
  // A .tar/.tar.gz (a compressed one decompressed once, see decompressed_tar), indexed: the
  // archive's members and folders are known without reading any member.
  static FileTree open_archive(const std::string& archive, std::string what);

  bool is_archive() const { return !archive_.empty(); }
  const std::string& archive() const { return archive_; }
  // The indexed tar (an archive only).
  const TarFile& tar() const { return *tar_; }

  // base/rel, lexically normalised ("" is the archive's top; ".." may leave it: callers check
  // inside()). An absolute rel replaces base in a folder.
  std::string join(const std::string& base, const std::string& rel) const;
  // p lexically normalised, with '/' separators, no trailing '/', "" for ".".
  static std::string normal(const std::filesystem::path& p);
  // Whether p stays inside an archive (always true in a folder).
  bool inside(const std::string& p) const;

  bool is_file(const std::string& p) const;
  bool is_dir(const std::string& p) const;
  // Regular files directly in dir, sorted.
  std::vector<std::string> list_files(const std::string& dir) const;
  // JPEG/PNG files below dir at any depth (hidden names skipped, folder links not followed),
  // sorted by path. Entries with an image's name that are links leading nowhere go to *broken
  // as "PATH -> TARGET", sorted (a folder only; an archive's links are not its files).
  std::vector<std::string> list_images(const std::string& dir,
                                       std::vector<std::string>* broken) const;
  // Top-level folders of an archive (not hidden).
  std::vector<std::string> top_dirs() const;

  // The bytes of a file (thread-safe). InputError naming it when it cannot be read.
  std::vector<uint8_t> read(const std::string& p) const;
  std::string text(const std::string& p) const;
  // Where a file's bytes are, for a lazy dataset reading them from store().
  FileRef ref(const std::string& p) const;
  // The store that reads the tree's FileRefs (one per tree, shared).
  std::shared_ptr<const FileStore> store() const { return store_; }

  // A file in messages: "path" ("." for the top) or "ARCHIVE:member".
  std::string display(const std::string& p) const;
  // A folder in messages, with its trailing separator.
  std::string display_dir(const std::string& d) const;

 private:
  const TarMember& member(const std::string& p) const;

  std::string what_;
  std::string archive_;
  std::shared_ptr<const TarFile> tar_;
  std::set<std::string> files_, dirs_;  // an archive's
  std::shared_ptr<const FileStore> store_;
};

}  // namespace hpcnet::data::detail
