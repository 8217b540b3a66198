#ifndef LOOM_VERIFY_STAGE_H_
#define LOOM_VERIFY_STAGE_H_

// One layer stage of a plan's derivation (verify/stages.h cuts them,
// verify/stage_encoding.h gives each its signature and renaming).

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/plan.h"

namespace loom::verify {

struct Stage {
  int layer = -1;
  int index = -1;  // among every layer's stage, cut or not, in order of first item
  // Derivation items, ascending: tasks are 0..T-1, collectives T..T+C-1, phantoms
  // of a slice after them, in the order verify/derive.cc walks them.
  std::vector<int64_t> items;
  std::vector<ir::ValueId> boundary_outputs;
  // The renaming: values and logical ops in order of first appearance. Alike
  // stages' lists pair up position by position.
  std::vector<ir::ValueId> values;
  std::vector<ir::OpId> ops;
  std::vector<ir::TensorId> tensors;
};

}  // namespace loom::verify

#endif  // LOOM_VERIFY_STAGE_H_
