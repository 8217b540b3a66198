#include "verify/derive.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"

namespace loom::verify {
namespace {

using ::loom::testing::TinyStep;

transform::Strategy Make(int dp, int tp, int pp, int mb, int vpp = 1, bool sp = false,
                         int zero = 0, bool recompute = false, int ep = 1) {
  transform::Strategy s;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.microbatches = mb;
  s.vpp = vpp;
  s.sp = sp;
  s.zero = zero;
  s.recompute = recompute;
  s.ep = ep;
  return s;
}

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

TEST(DeriveTest, SingleDevice) { ExpectClean("gpt2", Make(1, 1, 1, 1)); }
TEST(DeriveTest, DataParallel) { ExpectClean("llama3-8b", Make(2, 1, 1, 2)); }
TEST(DeriveTest, TensorParallel) { ExpectClean("llama3-8b", Make(1, 2, 1, 1)); }
TEST(DeriveTest, Gpt2TensorParallel) { ExpectClean("gpt2", Make(1, 2, 1, 1)); }

}  // namespace
}  // namespace loom::verify
