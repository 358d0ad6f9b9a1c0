// Helpers shared by the YOLO modules and graph (src/nn/models/yolo*.cpp): the predict-time
// in-place concatenation (buffers whose channel slices the layers write directly).
#pragma once

#include <cstdint>
#include <vector>

#include "src/nn/models/yolo.h"

namespace hpcnet::nn::yolo_detail {

// Ultralytics' make_divisible(x, 8): the next multiple of 8 at or above x.
int64_t make_divisible(double x);
// Whether the predict path writes concatenations in place: one image, `conv` folded, not turned
// off by set_concat_in_place.
bool in_place(const Tensor& x, const YoloConv& conv);
// A buffer (1, sum of pieces, h, w) whose pieces are written in place: in `layout` when every
// piece is whole 16-channel blocks, else row-major (a partial block is not a run of memory).
Tensor concat_buffer(Layout layout, const std::vector<int64_t>& pieces, int64_t h, int64_t w,
                     const Tensor& like);
// Channels [start, start + length) of a buffer of one image: a view (narrow of one run).
Tensor channel_slice(const Tensor& buf, int64_t start, int64_t length);
// y copied into out (out's layout; out may be a slice of a buffer).
void copy_into(const Tensor& y, Tensor& out);

}  // namespace hpcnet::nn::yolo_detail
