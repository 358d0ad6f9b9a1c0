// An uncompressed tar read lazily: its headers are indexed once (where each member's bytes lie)
// and members are read by offset with pread, the archive never held in memory. A compressed tar
// (.tar.gz, ...) is decompressed once into a cache file first (decompressed_tar).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hpcnet::data::detail {

struct TarMember {
  std::string path;     // normalised: no leading "./" or "/", no trailing "/"
  uint64_t offset = 0;  // of the member's data in the archive file
  uint64_t size = 0;    // bytes of data (pax "size" when given, else the header's)
};

// Indexes a whole tar archive held in memory (size bytes at data; an archive cut inside a header
// or a member's data is refused as truncated, one cut at a header boundary reads as a shorter one).
// Reads ustar/POSIX headers (name + prefix), GNU ones ('L' long names, 'K' long link names) and pax
// ones ('x' (and Sun's 'X') per-member "path" and "size" records; 'g' global headers are skipped).
// Ensures:
// - *members gets the regular files ('0', '\0', '7') in archive order, with the data's offset and
//   size (offset + size <= size of the archive); a path that appears twice appears twice;
// - *dirs gets the folders, sorted and unique: those with a '5' (or GNU 'D') entry, regular
//   entries whose name ends in '/' (old tars), and every parent folder of a member or folder;
// - links ('1', '2'), devices, FIFOs, volume labels and unknown types are skipped (their data too),
//   as are entries whose path normalises to "" (the "./" of `tar -C dir .`).
// The archive ends at the first all-zero block (normally the first of two) or where the data ends
// exactly at a header boundary. Throws InputError "cannot read archive NAME: ..." naming the
// member or the header's offset for: a header whose checksum is wrong; a size field that is not
// octal or base-256, negative, or runs past the end of the data (its padding included); a partial
// header at the end; a malformed pax record; a pax or GNU header over 1 MiB or more than 32
// extension headers in a row; extension headers with no member after them; and sparse members (GNU
// 'S', pax GNU.sparse.*, SUN.holesdata): "sparse member X; re-create the archive without --sparse".
void index_tar(const uint8_t* data, size_t size, const std::string& name,
               std::vector<TarMember>* members, std::vector<std::string>* dirs);

// An uncompressed tar file on disk, indexed once; members are read by offset. Immutable after
// open(), so one TarFile may be shared by threads (reads use pread on one descriptor, opened with
// O_CLOEXEC). The archive must not change while it is open (a shorter file makes read() fail).
class TarFile {
 public:
  // Opens and indexes path in one pass that reads only the headers (a pread of each 512-byte header
  // and of GNU/pax extension data, seeking over members' data): indexing N members reads about
  // N x 512 bytes whatever the archive's size. Refuses with InputError naming path: what index_tar
  // refuses; a path that cannot be opened or is not a regular file; a compressed file (gzip, bzip2,
  // xz, zstd magic), with a message saying to decompress it (callers pass decompressed_tar()'s).
  static std::shared_ptr<const TarFile> open(const std::string& path);
  // Opens path for reading members by offset without indexing it (members(), dirs() and find()
  // are empty): for an index built elsewhere (another rank's, received as bytes), whose FileRefs
  // hold the offsets. InputError as open() for a path that cannot be opened or is compressed.
  static std::shared_ptr<const TarFile> open_unindexed(const std::string& path);
  ~TarFile();
  TarFile(const TarFile&) = delete;
  TarFile& operator=(const TarFile&) = delete;

  const std::string& path() const { return path_; }
  // Regular files in archive order (see index_tar).
  const std::vector<TarMember>& members() const { return members_; }
  // Folders, sorted and unique (see index_tar).
  const std::vector<std::string>& dirs() const { return dirs_; }
  // The member at member_path (normalised, as TarMember::path), nullptr when absent; of a path
  // stored twice, the later one (the one `tar -x` leaves). O(log N).
  const TarMember* find(const std::string& member_path) const;
  // The member's bytes (m: one of members()), read with pread; thread-safe. Throws InputError
  // "ARCHIVE:MEMBER: ..." when m.size is over kMaxInputFileBytes (internal.h; checked before
  // anything is reserved or read), on an I/O error, or on a short read (the file changed).
  std::vector<uint8_t> read(const TarMember& m) const;
  // The same into out, resized to m.size (reusing its capacity); out's contents are unspecified
  // after a throw.
  void read_into(const TarMember& m, std::vector<uint8_t>& out) const;

 private:
  TarFile(std::string path, int fd);
  std::string path_;
  int fd_ = -1;
  std::vector<TarMember> members_;
  std::vector<std::string> dirs_;
  std::vector<size_t> by_path_;  // indices into members_, sorted by path (stable: archive order)
};

// True when path is a regular file that starts with gzip, bzip2, xz or zstd magic bytes (and its
// first block is not a valid tar header: a tar's first member may be named "BZh..."); false
// otherwise, also when it cannot be read (opening it then reports why).
bool is_compressed_file(const std::string& path);

// The path of an uncompressed tar holding archive's contents. An uncompressed file is returned as
// it is (path unchanged). A compressed one (.tar.gz, .tgz, .tar.bz2, .tar.xz, .tar.zst: known by
// its magic bytes, not its name) is decompressed once, with libarchive, into
// CACHE/tar/STEM-HASH.tar where STEM is the file name less its compression and ".tar" suffixes and
// HASH 16 hex digits of a hash of the archive's canonical path, size and mtime (a changed archive
// gets a new file). CACHE is $HPCNET_CACHE_DIR, else $XDG_CACHE_HOME/hpcnet (when absolute), else
// $HOME/.cache/hpcnet.
// - A cache file that exists is returned without reading the archive.
// - Otherwise the .tar is written to a temporary file in the same folder, synced and renamed
//   (write_file_atomic: a crash leaves no partial .tar, and the next writer removes what a killed
//   one left), under an flock on STEM-HASH.tar.lock (left there) so that processes sharing the
//   cache (the ranks of a job) decompress it once. It prints one line to stderr: "hpcnet:
//   decompressing A (N MB, gzip) once to B; an uncompressed .tar is read in place".
// Throws InputError naming archive when it cannot be read or decompressed, when it does not hold a
// tar, or when the cache cannot be written (naming the folder; HPCNET_CACHE_DIR moves it).
std::string decompressed_tar(const std::string& archive);

}  // namespace hpcnet::data::detail
