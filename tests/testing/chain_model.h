#ifndef LOOM_TESTS_TESTING_CHAIN_MODEL_H_
#define LOOM_TESTS_TESTING_CHAIN_MODEL_H_

// A block model that is one long dependency chain, for the scheduler's tests of
// models whose search nodes are expensive.

#include "absl/strings/str_cat.h"
#include "schedule/block_model.h"

namespace loom::testing {

// `blocks` unit blocks "b0", "b1", ..., each after the one before, block i on
// device i % devices.
inline schedule::BlockModel ChainModel(int blocks, int devices) {
  schedule::BlockModel m;
  m.name = "chain";
  m.num_devices = devices;
  for (int i = 0; i < blocks; ++i) {
    schedule::Block b;
    b.name = absl::StrCat("b", i);
    b.devices = {i % devices};
    if (i > 0) b.preds.push_back(schedule::Dep{i - 1, 0});
    m.blocks.push_back(b);
  }
  return m;
}

}  // namespace loom::testing

#endif  // LOOM_TESTS_TESTING_CHAIN_MODEL_H_
