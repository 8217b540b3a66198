#ifndef LOOM_IR_OPS_RESHAPE_H_
#define LOOM_IR_OPS_RESHAPE_H_

// A reshape's dim groups, read from its partition signature (SignatureReshape in
// ir/ops/shape.cc): what stays true of a reshape at other sizes, which shape
// reduction (verify/law_reduce.h) and the schema's resize rule both need.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/op_schema.h"
#include "ir/shape.h"

namespace loom::ir {

// One dim group of a reshape: the label shared by the leading dim of each side,
// and the group's other dims.
struct ReshapeGroup {
  std::string label;
  int in_lead = 0;
  int out_lead = 0;
  std::vector<int> in_rest;
  std::vector<int> out_rest;
};

// The groups of a reshape signature, in dim order. Dims before the first group
// (size-1 dims) belong to none.
std::vector<ReshapeGroup> ReshapeGroups(const DimSignature& sig);

// A reshape's `shape` for new input dims: output labels listed in `sizes` at
// those sizes (others keep theirs from `old_out`), the leading dim of each group
// solved from the group's product of new input dims. Errors when a group's
// elements do not fill its rows.
absl::StatusOr<std::vector<int64_t>> ReshapeShape(const DimSignature& sig, const Shape& old_out,
                                                  const Shape& new_in,
                                                  const std::map<std::string, int64_t>& sizes);

}  // namespace loom::ir

#endif  // LOOM_IR_OPS_RESHAPE_H_
