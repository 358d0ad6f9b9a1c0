// The records of the detection losses' pieces (src/ops/op_record.h): names; none is exportable
// (they run in training only: the exported YOLO graph decodes with yolo_decode instead).
#include "src/ops/op_record.h"

namespace hpcnet::ops {
namespace {

constexpr const char* kTraining =
    "a piece of the detection loss, run in training only (an exported model ends before its loss)";

}  // namespace
}  // namespace hpcnet::ops

namespace hpcnet::op_record {

const ops::OpRecord bce_with_logits{op_name::bce_with_logits, {.not_exportable = ops::kTraining}};
const ops::OpRecord gather_anchors{op_name::gather_anchors, {.not_exportable = ops::kTraining}};
const ops::OpRecord dfl_expect{op_name::dfl_expect, {.not_exportable = ops::kTraining}};
const ops::OpRecord ciou_loss{op_name::ciou_loss, {.not_exportable = ops::kTraining}};
const ops::OpRecord dfl_loss{op_name::dfl_loss, {.not_exportable = ops::kTraining}};

}  // namespace hpcnet::op_record
