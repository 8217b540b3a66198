#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddMatMulSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {}

}  // namespace loom::ir::testing
