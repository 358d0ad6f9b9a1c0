// Box drawing (src/data/draw.cpp): label tabs never cover each other where there is room, stay
// inside the image, and lines scale with the image as Ultralytics' annotator.
#include <gtest/gtest.h>

#include <vector>

#include "hpcnet/data.h"

using namespace hpcnet;

namespace {

bool intersect(const data::PixelRect& p, const data::PixelRect& q) {
  return p.x < q.x + q.width && q.x < p.x + p.width && p.y < q.y + q.height &&
         q.y < p.y + p.height;
}

void expect_inside(const data::PixelRect& r, int64_t h, int64_t w) {
  EXPECT_GE(r.x, 0);
  EXPECT_GE(r.y, 0);
  EXPECT_LE(r.x + r.width, w);
  EXPECT_LE(r.y + r.height, h);
}

}  // namespace

TEST(Draw, LineWidthAsUltralytics) {
  EXPECT_EQ(data::box_line_width(480, 640), 2);    // round(1.68) = 2
  EXPECT_EQ(data::box_line_width(720, 1280), 3);   // round(3.0)
  EXPECT_EQ(data::box_line_width(1080, 1920), 4);  // round(4.5) = 4, half to even
  EXPECT_EQ(data::box_line_width(2160, 3840), 9);  // round(8.97)
  EXPECT_EQ(data::box_line_width(128, 128), 1);    // small pictures: thin lines
}

TEST(Draw, LabelsOfOverlappingBoxesDoNotCoverEachOther) {
  const int64_t h = 480, w = 640;
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3), 0);
  // Four boxes on the same spot (a crowd of detections of one object), and two side by side.
  std::vector<data::LabeledBox> boxes;
  for (int k = 0; k < 4; ++k)
    boxes.push_back({200.f, 150.f, 400.f, 350.f, {200, 30, 30}, "person 0.9" + std::to_string(k)});
  boxes.push_back({10.f, 100.f, 100.f, 200.f, {30, 200, 30}, "car 0.50"});
  boxes.push_back({60.f, 100.f, 150.f, 200.f, {30, 30, 200}, "truck 0.40"});
  const std::vector<data::PixelRect> tabs = data::draw_boxes(px.data(), h, w, boxes);
  ASSERT_EQ(tabs.size(), boxes.size());
  for (size_t i = 0; i < tabs.size(); ++i) {
    expect_inside(tabs[i], h, w);
    for (size_t j = i + 1; j < tabs.size(); ++j)
      EXPECT_FALSE(intersect(tabs[i], tabs[j])) << "tabs " << i << " and " << j;
  }
  // The most confident box keeps the usual place, above the box; its tab is in its colour.
  EXPECT_EQ(tabs[0].y + tabs[0].height, 150);
  const uint8_t* p = &px[static_cast<size_t>((tabs[0].y * w + tabs[0].x) * 3)];
  EXPECT_EQ(p[0], 200);
  EXPECT_EQ(p[1], 30);
}

TEST(Draw, TabsStayInsideTheImageAtItsEdges) {
  const int64_t h = 240, w = 320;
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3), 0);
  const std::vector<data::LabeledBox> boxes = {
      {0.f, 0.f, 50.f, 40.f, {255, 255, 0}, "top left corner"},
      {280.f, 200.f, 320.f, 240.f, {0, 255, 255}, "bottom right"},
      {-30.f, -30.f, 400.f, 300.f, {255, 0, 255}, "bigger than the image"}};
  const std::vector<data::PixelRect> tabs = data::draw_boxes(px.data(), h, w, boxes);
  for (const auto& t : tabs) expect_inside(t, h, w);
  EXPECT_EQ(tabs[0].y, 0);  // no room above: inside the top
  // A light colour gets black text: some pixel of the first tab is black.
  bool black = false;
  for (int64_t y = tabs[0].y; y < tabs[0].y + tabs[0].height; ++y)
    for (int64_t x = tabs[0].x; x < tabs[0].x + tabs[0].width; ++x) {
      const uint8_t* q = &px[static_cast<size_t>((y * w + x) * 3)];
      black = black || (q[0] == 0 && q[1] == 0 && q[2] == 0);
    }
  EXPECT_TRUE(black);
}

TEST(Draw, ABoxWithoutALabelHasNoTab) {
  std::vector<uint8_t> px(64 * 64 * 3, 0);
  const auto tabs = data::draw_boxes(px.data(), 64, 64, {{4.f, 4.f, 40.f, 40.f, {9, 9, 9}, ""}});
  ASSERT_EQ(tabs.size(), 1u);
  EXPECT_EQ(tabs[0].width, 0);
  EXPECT_EQ(px[(4 * 64 + 4) * 3], 9);  // the outline is drawn
}

// The legend (segmentation overlays, classification's top 5): a darkened panel at the top left,
// a square of each entry's colour and its text; entries past the image's height left out.
TEST(Draw, LegendOfClassColours) {
  const int64_t h = 480, w = 640;  // line width 2: a 4-pixel margin, 18-pixel lines, 14 squares
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3), 150);
  const std::vector<data::LegendEntry> entries = {{"car", {200, 0, 0}}, {"road", {0, 0, 200}}};
  const data::PixelRect panel = data::draw_legend(px.data(), h, w, entries);
  EXPECT_EQ(panel.x, 0);
  EXPECT_EQ(panel.y, 0);
  EXPECT_EQ(panel.height, 4 + 2 * 18 + 4);
  EXPECT_EQ(panel.width, 4 + 14 + 4 + data::text_width("road", 2) + 4);
  auto at = [&](int64_t x, int64_t y) { return &px[static_cast<size_t>((y * w + x) * 3)]; };
  EXPECT_EQ(at(10, 10)[0], 200);  // the first square
  EXPECT_EQ(at(10, 10)[2], 0);
  EXPECT_EQ(at(10, 28)[2], 200);  // the second
  EXPECT_EQ(at(2, 2)[1], 50);     // the panel: darkened to a third
  EXPECT_EQ(at(panel.width + 1, 2)[1], 150);  // beside it: untouched
  int64_t white = 0;
  for (int64_t y = 4; y < 22; ++y)
    for (int64_t x = 22; x < panel.width; ++x) white += at(x, y)[0] == 255;
  EXPECT_GT(white, 20);  // the text
  // Without squares the text starts at the margin; a short image keeps the lines that fit.
  std::vector<uint8_t> small(static_cast<size_t>(18 * 200 * 3), 0);
  const data::PixelRect text_only = data::draw_legend(
      small.data(), 18, 200, {{"cat 0.91", {}, false}, {"dog 0.05", {}, false}});
  EXPECT_EQ(text_only.height, 2 + 9 + 2);  // one line of 9 (line width 1 below 256 pixels)
  EXPECT_EQ(text_only.width, 2 + data::text_width("cat 0.91", 1) + 2);
}
