#include "verify/derive.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

std::string Summary(const Derivation& d) {
  std::string s;
  for (const Failure& f : d.failures) {
    absl::StrAppend(&s, FailureClassName(f.cls), " at ", f.item, " '", f.tensor, "' ", f.box,
                    ": ", f.message, "\n");
  }
  for (const Undecided& u : d.undecided) absl::StrAppend(&s, "undecided ", u.item, ": ", u.reason, "\n");
  return s;
}

void ExpectClean(const std::string& model, const transform::Strategy& s, int layers = 0,
                 int64_t batch = 0) {
  ir::Graph spec = TinyStep(model, s.microbatches, layers, batch);
  auto plan = transform::Parallelize(spec, s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto d = DeriveLineage(spec, *plan);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->failures.empty() && d->undecided.empty())
      << model << " " << s.ToString() << "\n" << Summary(*d).substr(0, 4000);
  EXPECT_GT(d->laws.size(), 0u);
}

class DeriveMatrixTest : public ::testing::TestWithParam<::loom::testing::Case> {};

// Every plan of the transform's strategy matrix derives without a failure.
TEST_P(DeriveMatrixTest, NoFalseAlarms) {
  const auto& c = GetParam();
  ExpectClean(c.model, c.strategy, c.layers, c.batch > 0 ? c.batch : 2 * c.strategy.dp);
}

INSTANTIATE_TEST_SUITE_P(Strategies, DeriveMatrixTest,
                         ::testing::ValuesIn(::loom::testing::Matrix()),
                         [](const auto& info) { return info.param.name; });

TEST(DeriveTest, SingleDevice) { ExpectClean("gpt2", Make(1, 1, 1, 1)); }
TEST(DeriveTest, DataParallel) { ExpectClean("llama3-8b", Make(2, 1, 1, 2)); }
TEST(DeriveTest, TensorParallel) { ExpectClean("llama3-8b", Make(1, 2, 1, 1)); }
TEST(DeriveTest, Gpt2TensorParallel) { ExpectClean("gpt2", Make(1, 2, 1, 1)); }

}  // namespace
}  // namespace loom::verify
