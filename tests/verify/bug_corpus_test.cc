// Mutated plans: each injects one real bug class into a correct plan and must be
// reported as not equivalent with the right classification and place.

#include <algorithm>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/derive.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

struct Mutant {
  std::string name;
  std::string model;
  transform::Strategy strategy;
  // Edits the plan; returns false when the plan has no place for this bug.
  std::function<bool(const ir::Graph&, ir::Plan&)> mutate;
  FailureClass expect;
};

ir::Collective* FindCollective(ir::Plan& plan, ir::CollectiveKind kind, ir::Phase phase) {
  for (ir::Collective& c : plan.collectives) {
    if (c.kind == kind && c.phase == phase) return &c;
  }
  return nullptr;
}

ir::Task* FindTask(const ir::Graph& spec, ir::Plan& plan, ir::OpKind kind,
                   const std::string& tensor_prefix = "") {
  for (ir::Task& t : plan.tasks) {
    if (t.kind != kind || t.op == ir::kNoId) continue;
    const std::string& out = spec.tensor(spec.op(t.op).outputs[0]).name;
    if (out.rfind(tensor_prefix, 0) == 0) return &t;
  }
  return nullptr;
}

std::vector<Mutant> Corpus() {
  std::vector<Mutant> m;
  // A forward tensor-parallel all-reduce that no longer sums (TrainVerify bug 1).
  m.push_back({"missing_forward_allreduce", "llama3-8b", Make(1, 2, 1, 1),
               [](const ir::Graph&, ir::Plan& p) {
                 ir::Collective* c = FindCollective(p, ir::CollectiveKind::kAllReduce,
                                                    ir::Phase::kForward);
                 if (c == nullptr) return false;
                 c->kind = ir::CollectiveKind::kBroadcast;
                 c->inputs.resize(1);
                 return true;
               },
               FailureClass::kMissingReduction});
  // The data-parallel gradient all-reduce dropped the same way.
  m.push_back({"missing_dp_gradient_allreduce", "gpt2", Make(2, 1, 1, 2),
               [](const ir::Graph&, ir::Plan& p) {
                 for (ir::Collective& c : p.collectives) {
                   if (c.kind == ir::CollectiveKind::kAllReduce && c.phase != ir::Phase::kForward) {
                     c.kind = ir::CollectiveKind::kBroadcast;
                     c.inputs.resize(1);
                     return true;
                   }
                 }
                 return false;
               },
               FailureClass::kMissingReduction});
  // Operands of a non-commutative op (sub, swiglu) swapped on one device.
  m.push_back({"swapped_operands", "llama3-8b", Make(1, 2, 1, 1),
               [](const ir::Graph& spec, ir::Plan& p) {
                 for (ir::Task& t : p.tasks) {
                   if (t.op == ir::kNoId || t.inputs.size() < 2) continue;
                   const ir::Op& o = spec.op(t.op);
                   if (o.inputs[0] == o.inputs[1]) continue;
                   if (t.kind != ir::OpKind::kSub && t.kind != ir::OpKind::kSwiGlu) continue;
                   std::swap(t.inputs[0], t.inputs[1]);
                   return true;
                 }
                 return false;
               },
               FailureClass::kSwappedOperands});
  // A scaling constant changed on one rank (TrainVerify bugs 12/13).
  m.push_back({"scale_constant_changed", "gpt2", Make(1, 2, 1, 1),
               [](const ir::Graph&, ir::Plan& p) {
                 for (ir::Task& t : p.tasks) {
                   if (t.kind == ir::OpKind::kScale && t.attrs.Has("factor")) {
                     t.attrs.Set("factor", *t.attrs.GetFloat("factor") * 2);
                     return true;
                   }
                 }
                 return false;
               },
               FailureClass::kScaled});
  // A slice cutting the wrong rows of a replicated value.
  m.push_back({"slice_wrong_offset", "llama3-8b", Make(1, 2, 1, 1, 1, true),
               [](const ir::Graph&, ir::Plan& p) {
                 for (ir::Task& t : p.tasks) {
                   if (t.kind == ir::OpKind::kSlice && t.op == ir::kNoId) {
                     const int64_t b = *t.attrs.GetInt("begin"), e = *t.attrs.GetInt("end");
                     if (b == 0) continue;
                     t.attrs.Set("begin", int64_t{0});
                     t.attrs.Set("end", e - b);
                     return true;
                   }
                 }
                 return false;
               },
               FailureClass::kWrongShard});
  // ZeRO-3 all-gather with its group in the wrong rank order.
  m.push_back({"zero_allgather_rank_order", "gpt2", Make(2, 1, 1, 1, 1, false, 3),
               [](const ir::Graph&, ir::Plan& p) {
                 ir::Collective* c = FindCollective(p, ir::CollectiveKind::kAllGather,
                                                    ir::Phase::kForward);
                 if (c == nullptr) {
                   for (ir::Collective& x : p.collectives) {
                     if (x.kind == ir::CollectiveKind::kAllGather) c = &x;
                   }
                 }
                 if (c == nullptr || c->devices.size() < 2) return false;
                 std::swap(c->devices[0], c->devices[1]);
                 std::swap(c->inputs[0], c->inputs[1]);
                 std::swap(c->outputs[0], c->outputs[1]);
                 return true;
               },
               FailureClass::kWrongGroup});
  // An updated parameter missing from the plan's outputs.
  m.push_back({"missing_output_piece", "gpt2", Make(1, 2, 1, 1),
               [](const ir::Graph&, ir::Plan& p) {
                 if (p.outputs.empty()) return false;
                 const ir::TensorId t = p.values[p.outputs.back()].sub.tensor;
                 std::erase_if(p.outputs, [&](ir::ValueId v) { return p.values[v].sub.tensor == t; });
                 return true;
               },
               FailureClass::kMissingPiece});
  return m;
}

class BugCorpusTest : public ::testing::TestWithParam<Mutant> {};

TEST_P(BugCorpusTest, IsRejectedWithItsClass) {
  const Mutant& m = GetParam();
  ir::Graph spec = TinyStep(m.model, m.strategy.microbatches, 0, 2 * m.strategy.dp);
  auto plan = transform::Parallelize(spec, m.strategy);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(m.mutate(spec, *plan)) << "no place for the mutation";
  ASSERT_TRUE(ir::ValidatePlan(spec, *plan).ok()) << ir::ValidatePlan(spec, *plan);
  auto d = DeriveLineage(spec, *plan);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_FALSE(d->failures.empty());
  const Failure& first = d->failures.front();
  EXPECT_EQ(FailureClassName(first.cls), FailureClassName(m.expect))
      << first.item << ": " << first.message;
  EXPECT_FALSE(first.item.empty());
  EXPECT_FALSE(first.message.empty());
}

INSTANTIATE_TEST_SUITE_P(Corpus, BugCorpusTest, ::testing::ValuesIn(Corpus()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::verify
