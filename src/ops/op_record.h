// An op's record: what the rest of hpcnet reads about an op, beside its kernels (the op table,
// src/ops/op_table.h, lists the ops; each record is defined in its family's folder,
// src/ops/<family>/record.cpp). Tracing stores the record (trace::add), the ONNX exporter calls
// its mapping, the tests walk op_record::kAll. The op's test cases are its other half, kept out of
// the library: op_cases::NAME() (src/ops/op_cases.h) in src/ops/<family>/test_cases.cpp.
#pragma once

#include <string>

#include "src/ops/op_table.h"

namespace hpcnet::trace {
struct Record;
}  // namespace hpcnet::trace

namespace hpcnet::ops {

class OnnxGraph;

// How the exporter writes a traced op: emit adds its nodes to the graph and returns the name of
// the value holding the op's output; an op without emit is not exportable, for the reason given.
struct OnnxMapping {
  std::string (*emit)(OnnxGraph& g, const trace::Record& r) = nullptr;
  const char* not_exportable = nullptr;  // why, when emit is null
};

struct OpRecord {
  const char* name;  // op_name::NAME: errors, the trace, the exporter
  OnnxMapping onnx;
};

}  // namespace hpcnet::ops

namespace hpcnet::op_record {

#define HPCNET_DECLARE_OP_RECORD(NAME) extern const ::hpcnet::ops::OpRecord NAME;
HPCNET_OP_TABLE(HPCNET_DECLARE_OP_RECORD)
#undef HPCNET_DECLARE_OP_RECORD

// Every op's record, in table order.
inline const ::hpcnet::ops::OpRecord* const kAll[] = {
#define HPCNET_OP_RECORD_PTR(NAME) &NAME,
    HPCNET_OP_TABLE(HPCNET_OP_RECORD_PTR)
#undef HPCNET_OP_RECORD_PTR
};

}  // namespace hpcnet::op_record
