// The rows of a YOLO label file (parse_yolo_label, fuzzed in fuzz/fuzz_yolo_labels.cpp) and their
// boxes in pixels.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <string_view>
#include <tuple>

#include "src/data/detection/internal.h"
#include "src/data/internal.h"

namespace hpcnet::data::detail {
namespace {

using detection::shown;

// A coordinate this far outside 0..1 is a rounding excursion (1.0000001) and clamped; further is
// an error.
constexpr double kCoordTolerance = 1e-5;

// A finite decimal number (an optional leading '+', as Python's float()); false otherwise.
bool parse_number(std::string_view t, double* out) {
  if (!t.empty() && t[0] == '+') t.remove_prefix(1);
  if (t.empty() || t[0] == '+') return false;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *out);
  return ec == std::errc() && end == t.data() + t.size() && std::isfinite(*out);
}

// The white-space separated columns of a line into columns (cleared first).
void split_columns(std::string_view line, std::vector<std::string_view>& columns) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  columns.clear();
  for (size_t i = 0; i < line.size();) {
    while (i < line.size() && space(line[i])) ++i;
    const size_t begin = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > begin) columns.push_back(line.substr(begin, i - begin));
  }
}

// A checked row's box (values: class, then coordinates in 0..1) in normalised corners: a
// polygon's bounding box, or `cx cy w h` as corners.
void set_corners(const std::vector<double>& v, bool polygon, YoloRow* r) {
  if (polygon) {
    r->x1 = r->y1 = 1;
    r->x2 = r->y2 = 0;
    for (size_t k = 1; k + 1 < v.size(); k += 2) {
      r->x1 = std::min(r->x1, v[k]);
      r->x2 = std::max(r->x2, v[k]);
      r->y1 = std::min(r->y1, v[k + 1]);
      r->y2 = std::max(r->y2, v[k + 1]);
    }
  } else {
    r->x1 = std::clamp(v[1] - v[3] / 2, 0.0, 1.0);
    r->x2 = std::clamp(v[1] + v[3] / 2, 0.0, 1.0);
    r->y1 = std::clamp(v[2] - v[4] / 2, 0.0, 1.0);
    r->y2 = std::clamp(v[2] + v[4] / 2, 0.0, 1.0);
  }
}

}  // namespace

std::vector<YoloRow> parse_yolo_label(const std::string& text, const std::string& file,
                                      int64_t num_classes, int64_t* duplicates,
                                      int64_t* first_duplicate_line) {
  HPCNET_CHECK(num_classes >= 1, "parse_yolo_label: num_classes must be >= 1");
  std::vector<YoloRow> rows;
  std::set<std::tuple<int64_t, double, double, double, double>> seen;
  std::vector<std::string_view> tok;
  std::vector<double> v;
  int64_t line_no = 0;
  // A UTF-8 byte order mark (files from Windows tools) is not part of the first row.
  const size_t start = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (size_t pos = start; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    split_columns(line, tok);
    if (tok.empty()) continue;
    auto fail = [&](const std::string& what) {
      return InputError("detect: " + file + ":" + std::to_string(line_no) + ": " + what);
    };
    const size_t n = tok.size();
    const bool polygon = n >= 7 && n % 2 == 1;
    if (n != 5 && !polygon)
      throw fail(std::to_string(n) + (n == 1 ? " column" : " columns") +
                 "; expected 5 (class cx cy w h, normalised to 0..1) or a polygon of 3 or more "
                 "points (class x1 y1 x2 y2 x3 y3 ...)");
    v.resize(n);
    for (size_t k = 0; k < n; ++k)
      if (!parse_number(tok[k], &v[k]))
        throw fail("column " + std::to_string(k + 1) + " '" + shown(tok[k]) + "' is not a number");
    if (v[0] != std::floor(v[0]) || v[0] < 0 || v[0] >= static_cast<double>(num_classes))
      throw fail("class " + shown(tok[0]) +
                 (v[0] != std::floor(v[0]) ? " is not an integer"
                                           : " is outside 0.." + std::to_string(num_classes - 1)) +
                 " (" + std::to_string(num_classes) + " class names); fix the row or the names");
    static const char* kBoxCols[] = {"class", "cx", "cy", "w", "h"};
    for (size_t k = 1; k < n; ++k) {
      if (v[k] < -kCoordTolerance || v[k] > 1 + kCoordTolerance) {
        const std::string col =
            polygon ? std::string(k % 2 ? "x" : "y") + std::to_string((k + 1) / 2) : kBoxCols[k];
        throw fail(col + " = " + shown(tok[k]) +
                   " is outside 0..1 (coordinates are normalised by the image's width and "
                   "height)");
      }
      v[k] = std::clamp(v[k], 0.0, 1.0);
    }
    YoloRow r;
    r.cls = static_cast<int64_t>(v[0]);
    r.polygon = polygon;
    r.line = line_no;
    set_corners(v, polygon, &r);
    if (!seen.emplace(r.cls, r.x1, r.y1, r.x2, r.y2).second) {
      if (duplicates) {
        if (*duplicates == 0 && first_duplicate_line) *first_duplicate_line = line_no;
        ++*duplicates;
      }
      continue;
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Box> yolo_rows_to_boxes(const std::vector<YoloRow>& rows, int64_t height,
                                    int64_t width) {
  std::vector<Box> boxes;
  boxes.reserve(rows.size());
  const double w = static_cast<double>(width), h = static_cast<double>(height);
  for (const YoloRow& r : rows)
    boxes.push_back({r.cls, static_cast<float>(r.x1 * w), static_cast<float>(r.y1 * h),
                     static_cast<float>(r.x2 * w), static_cast<float>(r.y2 * h)});
  return boxes;
}

}  // namespace hpcnet::data::detail
