// The verifier on bf16 mixed-precision steps: a cast between floats is the
// identity over the reals, so plans that cast partial sums (the main gradients
// before their data-parallel reduction) are proved, and nothing else is.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/plan.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/derive.h"
#include "verify/law_reduce.h"
#include "verify/laws.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyBf16Step;
using ::loom::testing::TinyStep;

std::string Reasons(const VerifyReport& r) {
  std::string s;
  for (const Failure& f : r.failures) {
    absl::StrAppend(&s, FailureClassName(f.cls), " ", f.item, ": ", f.message, "\n");
  }
  for (const Undecided& u : r.undecided) absl::StrAppend(&s, "undecided ", u.item, ": ", u.reason, "\n");
  return s;
}

class Bf16VerifyTest : public ::testing::TestWithParam<::loom::testing::Case> {};

// Every plan of the bf16 strategy matrix (llama3 under dp2 tp2 pp2 ZeRO-1 with two
// micro-batches, DeepSeek-V3 under ep2, ...) is proved equivalent to its step.
TEST_P(Bf16VerifyTest, IsProvedEquivalent) {
  const auto& c = GetParam();
  ir::Graph spec = TinyBf16Step(c.model, c.strategy.microbatches, c.layers,
                                c.batch > 0 ? c.batch : 2 * c.strategy.dp);
  transform::Strategy s = c.strategy;
  s.factored = true;
  auto plan = transform::Parallelize(spec, s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  VerifyOptions options;
  options.threads = 1;
  auto r = Verify(spec, *plan, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->failures.empty()) << Reasons(*r).substr(0, 3000);
  EXPECT_EQ(r->verdict, Verdict::kEquivalent) << Reasons(*r).substr(0, 3000);
  EXPECT_EQ(r->laws_proved, static_cast<int64_t>(r->laws.size()));
}

INSTANTIATE_TEST_SUITE_P(Strategies, Bf16VerifyTest,
                         ::testing::ValuesIn(::loom::testing::Bf16Matrix()),
                         [](const auto& info) { return info.param.name; });

// The cast of a partial sum is a law between floats (f32 main gradients of bf16
// ones, reduced afterwards) and refuted into an integer dtype, where truncation
// does not distribute over the sum.
TEST(MixedPrecisionVerifyTest, CastOfPartialSumsIsALawOnlyBetweenFloats) {
  ir::Graph spec = TinyBf16Step("llama3-8b", 2, 1, 4);
  auto plan = transform::Parallelize(spec, Make(2, 1, 1, 2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto d = DeriveLineage(spec, *plan);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->failures.empty());
  const LawUse* cast = nullptr;
  for (const LawUse& law : d->laws) {
    if (law.kind == ir::OpKind::kCast && law.partial_inputs == std::vector<int>{0}) cast = &law;
  }
  ASSERT_NE(cast, nullptr) << "no main-gradient cast runs on partial sums";
  EXPECT_EQ(ProveLaw(*cast, 10000).verdict, smt::Verdict::kValid) << cast->key;
  for (const char* to : {"i32", "bool"}) {
    LawUse truncating = *cast;
    truncating.attrs.Set("dtype", std::string(to));
    truncating.key = LawKey(truncating);
    EXPECT_EQ(ProveLaw(truncating, 10000).verdict, smt::Verdict::kInvalid) << to;
  }
}

// A bf16 plan is no plan of the fp32 step: the check refuses it before any proof.
TEST(MixedPrecisionVerifyTest, Bf16PlanIsNotAPlanOfTheFp32Step) {
  ir::Graph bf16 = TinyBf16Step("llama3-8b", 1, 1, 2);
  ir::Graph fp32 = TinyStep("llama3-8b", 1, 1, 2);
  auto plan = transform::Parallelize(bf16, Make(2, 1, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ir::ValidatePlan(bf16, *plan).ok());
  EXPECT_FALSE(ir::ValidatePlan(fp32, *plan).ok());
}

}  // namespace
}  // namespace loom::verify
