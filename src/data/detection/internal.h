// Shared by the files of src/data/detection (not part of the public API): finding a split's
// YAML or COCO JSON in a folder or archive (locate.cpp), loading its images and labels
// (load.cpp), and small text helpers for one-line messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "hpcnet/data.h"
#include "src/data/file_tree.h"

namespace hpcnet::data::detail::detection {

// A piece of outside text for a one-line message: at most 40 characters, control bytes as '?'.
inline std::string shown(std::string_view t) {
  std::string s;
  for (size_t i = 0; i < t.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    s.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
  }
  if (t.size() > 40) s += "...";
  return s;
}

inline bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline std::string base_name(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The folder of a path ("" for a bare name).
inline std::string parent_of(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// ---- Finding the YAML or JSON of a split (locate.cpp) ----------------------------------------

struct SplitWord {
  size_t pos = std::string::npos, len = 0;  // the word (train, val or test) in the name
  std::string token;                        // the word and the digits after it: "val2017"
};

// The last train/val/test of a file name that stands on its own (no letter either side):
// instances_val2017.json -> val (token val2017); trainval.json -> none.
SplitWord split_word(const std::string& name);

struct Located {
  bool coco = false;
  std::string file;   // the YAML or the JSON (tree path); "" when nothing was found
  bool found = true;  // the JSON of the split exists
  bool named = true;  // its name holds a split word (else it serves any split asked for)
};

struct Source {
  FileTree tree;
  Located where;
};

// The dataset at path (a YAML, a COCO JSON, a folder or an archive holding one) for split.
Source locate(const std::string& path, const std::string& split);

// ---- Loading the images and their labels (load.cpp) ------------------------------------------

DetectionData load_yolo(Source& s, const std::string& split, DetectionReport report);
DetectionData load_coco(Source& s, const std::string& split, const DetectionOptions& options,
                        DetectionReport report);

}  // namespace hpcnet::data::detail::detection
