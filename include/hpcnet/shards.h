// WebDataset shards: plain tars whose members are grouped into samples by key (KEY.jpg +
// KEY.cls, KEY.txt or KEY.mask.png), read as a lazy dataset (each shard's headers indexed once,
// members read by offset), and written from any dataset hpcnet reads (`hpcnet shard`).
// Invariant: a dataset written by write_shards reads back as the same images (the source's
// encoded bytes), labels, boxes and masks, in the same order (unless shuffled).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpcnet/data.h"

namespace hpcnet::data {

// Brace expansion as Python's braceexpand (which webdataset uses for shard URLs), left to right,
// several braces multiplied out: "a-{000..002}.tar" -> a-000.tar, a-001.tar, a-002.tar (ranges
// `{N..M}` or `{N..M..STEP}`, counting down when N > M, zero-padded to the longer of N and M when
// either has a leading zero; `{a..e}` letters); "{x,y}" alternatives (nested braces allowed).
// Requires: every '{' closed, no stray '}', no empty group or range end, a group with a range or
// at least one comma ("{a}" is refused, not kept literally), at most max_names names in all.
// InputError "PATTERN: ..." saying what is wrong otherwise. A pattern without braces is itself.
std::vector<std::string> expand_braces(const std::string& pattern, size_t max_names = 1'000'000);

// Whether `path` names WebDataset shards by its form alone (what --dataset auto-detects):
//   - a pattern with a '{' whose expansion ends in .tar ("shards/train-{000000..000146}.tar");
//   - a file ending .txt (or .shards) whose non-empty lines all end in .tar (a shard list);
//   - a folder holding one or more .tar files and, besides them, nothing but classes.txt and
//     hidden names.
// Reads at most the list file, or the folder's entries; false for anything else or a path that
// does not exist.
bool is_webdataset_path(const std::string& path);

// The shard files `path` names, in reading order: a brace pattern expanded (see expand_braces;
// a single .tar file too); a list file's lines (blank ones and '#' comments skipped), relative to
// the list's folder unless absolute; a folder's *.tar files, sorted by name. InputError naming
// the path when it names none, or a shard that does not exist.
std::vector<std::string> webdataset_shards(const std::string& path);

// WebDataset shards (as webdataset_shards names them) as a lazy dataset, each shard indexed from
// its headers and its members grouped as webdataset's group_by_keys: a sample is an image (jpg,
// jpeg, png) with a cls, txt (YOLO rows) or mask.png/seg.png target. The samples, the dataset's
// kind, its class names and what is refused (InputError naming the shard and the key):
// docs/data.md, "WebDataset shards".
std::shared_ptr<Dataset> load_webdataset(const std::string& path);

// Writing shards (`hpcnet shard`).
struct ShardOptions {
  std::string out;                      // the folder (created when missing)
  std::string prefix = "train";         // shards are OUT/PREFIX-000000.tar, ...
  uint64_t shard_size = 1'000'000'000;  // bytes: a shard is closed before it would exceed this
  bool shuffle = false;                 // samples in a random order of seed
  uint64_t seed = 0;
};
struct ShardReport {
  std::vector<std::string> shards;  // the files written, in order
  int64_t samples = 0;
  uint64_t bytes = 0;         // of all shards
  std::string pattern;        // OUT/PREFIX-{000000..00000N}.tar (N = 0 too), for --data
  std::string classes_file;   // OUT/classes.txt
  int64_t reencoded = 0;      // samples whose image was encoded as PNG (no source file)
  int64_t dropped_crowd = 0;  // COCO crowd boxes not written (YOLO rows have no crowd)
};
// Writes every item of `dataset` as a sample of pax (restricted) tars made with libarchive: key
// the sample's number, nine digits ("000000123"), in writing order; KEY.jpg or KEY.png holding
// the source's encoded bytes as they are (a lazy dataset's files; other datasets' decoded pixels
// as PNG), KEY.cls (the label as text), KEY.txt (YOLO rows `class cx cy w h`, normalised, the
// shortest text that reads back as the same double; COCO boxes normalised by the JSON's image
// size, crowd boxes dropped), KEY.mask.png (the source mask's bytes) and KEY.json
// ({"source": where the image came from}). classes.txt (one name a line) is written beside the
// shards. A shard is closed when the next sample would take it past shard_size (a sample larger
// than that gets a shard of its own); each is written to a temporary file and renamed, with
// mtime 0 and mode 0644 in its headers, so the same data gives the same bytes. on_shard is called
// with one line per shard written. InputError naming the file for an unreadable source, an
// unwritable folder, or shard_size under 10 KB; existing OUT/PREFIX-*.tar files are refused
// (remove them first) so that old shards are never mixed with new ones.
ShardReport write_shards(const Dataset& dataset, const ShardOptions& options,
                         const std::function<void(const std::string&)>& on_shard = {});

// "1GB", "500MB", "64KiB", "1e9", "1048576": bytes (K/M/G/T decimal, KiB/MiB/GiB/TiB binary, the
// B optional, any case). InputError naming `flag` for anything else or a value under 1.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

// What `hpcnet shard` reads without --dataset: webdataset for is_webdataset_path; segmentation
// for a folder holding masks/ or SegmentationClass/ (itself or below VOCdevkit/VOC2012/, ...);
// detect when detection_has_split(path, split); imagefolder for a folder holding SPLIT/; else
// cifar10 (CIFAR-10's binary batches, or an image folder in a .tar). Archives of detection or
// segmentation data need --dataset.
std::string guess_dataset_name(const std::string& path, const std::string& split);

}  // namespace hpcnet::data
