// Drawing on RGB images for pictures people look at: box outlines with filled label tabs placed so
// that they do not cover each other, text in a built-in 5x7 pixel font (upper-case letters, digits
// and a few signs; lower case is drawn as upper case, anything else as a blank), line width and
// text size scaling with the image as Ultralytics' annotator.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "hpcnet/data.h"

namespace hpcnet::data {
namespace {

// One glyph: 7 rows, the 5 low bits of each a row of pixels (bit 4 the leftmost).
struct Glyph {
  char c;
  uint8_t rows[7];
};

constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}},
    {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}},
    {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}},
    {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}},
    {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'/', {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {'\'', {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00}},
};

const uint8_t* glyph(char c) {
  const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont)
    if (g.c == u) return g.rows;
  return nullptr;  // a blank
}

void put(uint8_t* px, int64_t h, int64_t w, int64_t y, int64_t x, const std::array<uint8_t, 3>& c) {
  if (y < 0 || y >= h || x < 0 || x >= w) return;
  uint8_t* p = px + (y * w + x) * 3;
  p[0] = c[0], p[1] = c[1], p[2] = c[2];
}

}  // namespace

int64_t text_width(const std::string& text, int64_t scale) {
  return static_cast<int64_t>(text.size()) * 6 * scale;
}

void draw_text(uint8_t* px, int64_t h, int64_t w, int64_t x, int64_t y, const std::string& text,
               const std::array<uint8_t, 3>& color, int64_t scale) {
  for (size_t k = 0; k < text.size(); ++k) {
    const uint8_t* rows = glyph(text[k]);
    if (!rows) continue;
    const int64_t x0 = x + static_cast<int64_t>(k) * 6 * scale;
    for (int r = 0; r < 7; ++r)
      for (int b = 0; b < 5; ++b)
        if (rows[r] & (0x10 >> b))
          for (int64_t sy = 0; sy < scale; ++sy)
            for (int64_t sx = 0; sx < scale; ++sx)
              put(px, h, w, y + r * scale + sy, x0 + b * scale + sx, color);
  }
}

int64_t box_line_width(int64_t h, int64_t w) {
  if (std::max(h, w) < 256) return 1;
  // Python's round: half to even (std::nearbyint in the default rounding mode).
  const double lw = std::nearbyint(static_cast<double>(h + w) / 2.0 * 0.003);
  return std::max<int64_t>(static_cast<int64_t>(lw), 2);
}

namespace {

int64_t overlap_area(const PixelRect& p, const PixelRect& q) {
  const int64_t dx = std::min(p.x + p.width, q.x + q.width) - std::max(p.x, q.x);
  const int64_t dy = std::min(p.y + p.height, q.y + q.height) - std::max(p.y, q.y);
  return dx > 0 && dy > 0 ? dx * dy : 0;
}

void outline(uint8_t* px, int64_t h, int64_t w, const LabeledBox& box, int64_t thick,
             int64_t corners[4]) {
  const int64_t a = std::clamp<int64_t>(std::lround(box.x1), 0, w - 1);
  const int64_t b = std::clamp<int64_t>(std::lround(box.y1), 0, h - 1);
  const int64_t c = std::clamp<int64_t>(std::lround(box.x2) - 1, 0, w - 1);
  const int64_t d = std::clamp<int64_t>(std::lround(box.y2) - 1, 0, h - 1);
  for (int64_t t = 0; t < thick; ++t) {
    for (int64_t x = a; x <= c; ++x) {
      put(px, h, w, b + t, x, box.color);
      put(px, h, w, d - t, x, box.color);
    }
    for (int64_t y = b; y <= d; ++y) {
      put(px, h, w, y, a + t, box.color);
      put(px, h, w, y, c - t, box.color);
    }
  }
  corners[0] = a, corners[1] = b, corners[2] = c, corners[3] = d;
}

// Where a tab of tw x th goes for a box with corners a, b, c, d: the first candidate place inside
// the image that overlaps no placed tab, else the one overlapping least.
PixelRect place_tab(const int64_t k[4], int64_t tw, int64_t th, int64_t h, int64_t w,
                    const std::vector<PixelRect>& placed) {
  const int64_t x = std::min<int64_t>(k[0], std::max<int64_t>(0, w - tw));
  const int64_t candidates[4] = {k[1] - th, k[1], k[3] + 1, k[3] + 1 - th};
  PixelRect best{x, std::clamp<int64_t>(k[1], 0, std::max<int64_t>(0, h - th)), tw, th};
  int64_t best_overlap = -1;
  for (int64_t y : candidates) {
    if (y < 0 || y + th > h) continue;
    const PixelRect r{x, y, tw, th};
    int64_t overlap = 0;
    for (const PixelRect& p : placed) overlap += overlap_area(r, p);
    if (best_overlap < 0 || overlap < best_overlap) {
      best = r;
      best_overlap = overlap;
    }
    if (overlap == 0) break;
  }
  return best;
}

}  // namespace

std::vector<PixelRect> draw_boxes(uint8_t* px, int64_t h, int64_t w,
                                  const std::vector<LabeledBox>& boxes) {
  const int64_t lw = box_line_width(h, w);
  std::vector<std::array<int64_t, 4>> corners(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) outline(px, h, w, boxes[i], lw, corners[i].data());
  std::vector<PixelRect> tabs(boxes.size()), placed;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const LabeledBox& box = boxes[i];
    if (box.label.empty()) continue;
    const int64_t th = 9 * lw, tw = text_width(box.label, lw) + 2 * lw;
    const PixelRect tab = place_tab(corners[i].data(), tw, th, h, w, placed);
    for (int64_t y = tab.y; y < tab.y + tab.height; ++y)
      for (int64_t x = tab.x; x < tab.x + tab.width; ++x) put(px, h, w, y, x, box.color);
    // White or black text, whichever stands out on the colour.
    const double lum = 0.299 * box.color[0] + 0.587 * box.color[1] + 0.114 * box.color[2];
    const std::array<uint8_t, 3> ink =
        lum > 140 ? std::array<uint8_t, 3>{0, 0, 0} : std::array<uint8_t, 3>{255, 255, 255};
    draw_text(px, h, w, tab.x + lw, tab.y + lw, box.label, ink, lw);
    tabs[i] = tab;
    placed.push_back(tab);
  }
  return tabs;
}

PixelRect draw_legend(uint8_t* px, int64_t h, int64_t w, const std::vector<LegendEntry>& entries) {
  const int64_t lw = box_line_width(h, w), pad = 2 * lw, line = 9 * lw, square = 7 * lw;
  const bool swatches = std::any_of(entries.begin(), entries.end(),
                                    [](const LegendEntry& e) { return e.swatch; });
  const int64_t text_x = pad + (swatches ? square + 2 * lw : 0);
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(entries.size()),
                                      std::max<int64_t>(0, (h - 2 * pad) / line));
  if (n == 0) return {};
  int64_t text_w = 0;
  for (int64_t k = 0; k < n; ++k)
    text_w = std::max(text_w, text_width(entries[static_cast<size_t>(k)].text, lw));
  const PixelRect panel{0, 0, std::min(w, text_x + text_w + pad), std::min(h, 2 * pad + n * line)};
  for (int64_t y = 0; y < panel.height; ++y)
    for (int64_t x = 0; x < panel.width; ++x)
      for (int c = 0; c < 3; ++c) {
        uint8_t& v = px[(y * w + x) * 3 + c];
        v = static_cast<uint8_t>(v / 3);
      }
  for (int64_t k = 0; k < n; ++k) {
    const LegendEntry& e = entries[static_cast<size_t>(k)];
    const int64_t y = pad + k * line;
    if (e.swatch)
      for (int64_t sy = 0; sy < square; ++sy)
        for (int64_t sx = 0; sx < square; ++sx) put(px, h, w, y + sy, pad + sx, e.color);
    draw_text(px, h, w, text_x, y, e.text, {255, 255, 255}, lw);
  }
  return panel;
}

}  // namespace hpcnet::data
