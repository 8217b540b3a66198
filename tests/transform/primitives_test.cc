#include <string>

#include "exec/plan_interpreter.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/op_schema.h"
#include "transform/partition.h"

namespace loom::transform {
namespace {

// x [4, 6] -> linear(w1 [8, 6]) -> gelu -> linear(w2 [6, 8]) -> mean-free loss via
// cross_entropy against integer targets.
ir::Graph MlpStep() {
  ir::Graph g("mlp");
  auto tokens = *g.AddInput("tokens", ir::Shape({4, 3}), ir::DType::kI64, ir::TensorRole::kInput);
  auto targets = *g.AddInput("targets", ir::Shape({4, 3}), ir::DType::kI64, ir::TensorRole::kInput);
  auto table = *g.AddInput("embed", ir::Shape({6, 4}), ir::DType::kF64, ir::TensorRole::kParameter);
  auto w1 = *g.AddInput("w1", ir::Shape({8, 4}), ir::DType::kF64, ir::TensorRole::kParameter);
  auto w2 = *g.AddInput("w2", ir::Shape({6, 8}), ir::DType::kF64, ir::TensorRole::kParameter);
  ir::OpInfo l0{ir::Phase::kForward, 0, -1};
  auto h = (*g.AddOp(ir::OpKind::kEmbedding, {tokens, table}, {}, l0, {{"h"}}))[0];
  auto a = (*g.AddOp(ir::OpKind::kLinear, {h, w1}, {}, l0, {{"a"}}))[0];
  auto b = (*g.AddOp(ir::OpKind::kGelu, {a}, {}, l0, {{"b"}}))[0];
  auto c = (*g.AddOp(ir::OpKind::kLinear, {b, w2}, {}, l0, {{"logits"}}))[0];
  auto loss = (*g.AddOp(ir::OpKind::kCrossEntropy, {c, targets}, {}, ir::OpInfo{},
                        {{"loss", ir::TensorRole::kLoss}}))[0];
  g.AddOutput(loss);
  return *ir::BuildTrainingStep(g, ir::TrainingOptions{});
}

ir::OpId ProducerOf(const ir::Graph& g, const std::string& name) {
  return g.tensor(*g.FindTensor(name)).producer;
}

// A Megatron MLP written with the primitives: column split of the first linear,
// row split of the second, gelu following; the plan matches the reference.
TEST(PrimitivesTest, HandWrittenMegatronMlpIsExact) {
  ir::Graph spec = MlpStep();
  PartitionSpec p = UnsplitPartition(spec, /*dp=*/1, /*pp=*/1, /*tp=*/2);
  ASSERT_TRUE(Split(spec, p, ProducerOf(spec, "a"), "o", "tp").ok());
  ASSERT_TRUE(Split(spec, p, ProducerOf(spec, "b"), "d2", "tp").ok());
  ASSERT_TRUE(Split(spec, p, ProducerOf(spec, "logits"), "i", "tp").ok());
  auto plan = Materialize(spec, p);
  ASSERT_TRUE(plan.ok()) << plan.status();
  bool reduced = false;
  for (const ir::Collective& c : plan->collectives) {
    reduced |= c.kind == ir::CollectiveKind::kAllReduce;
  }
  EXPECT_TRUE(reduced);  // the row-parallel output is summed
  auto report = exec::CheckPlanNumerics(spec, *plan, /*seed=*/1);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

// Splits that cannot hold are refused with the op and the reason.
TEST(PrimitivesTest, SplitRejectsFixedUnknownAndIndivisible) {
  ir::Graph spec = MlpStep();
  PartitionSpec p = UnsplitPartition(spec, 1, 1, 3);
  // The vocabulary of the loss is fixed: softmax needs every logit of a position.
  const ir::Op& loss = spec.op(ProducerOf(spec, "loss"));
  std::vector<ir::TensorType> types;
  for (ir::TensorId t : loss.inputs) types.push_back(spec.tensor(t).type());
  auto sig = ir::GetOpSchema(loss.kind).signature(types, loss.attrs);
  ASSERT_TRUE(sig.ok());
  auto fixed = Split(spec, p, loss.id, sig->inputs[0].back(), "tp");
  EXPECT_NE(fixed.message().find("may not be split"), std::string::npos) << fixed;
  auto unknown = Split(spec, p, ProducerOf(spec, "a"), "zz", "tp");
  EXPECT_NE(unknown.message().find("no dim label 'zz'"), std::string::npos) << unknown;
  auto indivisible = Split(spec, p, ProducerOf(spec, "a"), "o", "tp");
  EXPECT_NE(indivisible.message().find("does not divide"), std::string::npos) << indivisible;
  EXPECT_FALSE(Split(spec, p, ProducerOf(spec, "a"), "o", "xp").ok());
}

// Two pipeline stages by hand, the loss replicated on both: still exact.
TEST(PrimitivesTest, StagesAndReplicationAreExact) {
  ir::Graph spec = MlpStep();
  PartitionSpec p = UnsplitPartition(spec, 1, 2, 1);
  std::vector<ir::OpId> second;
  for (const ir::Op& op : spec.ops()) {
    if (op.id >= ProducerOf(spec, "b")) second.push_back(op.id);
  }
  ASSERT_TRUE(Stage(p, second, 1).ok());
  ASSERT_TRUE(Replicate(p, ProducerOf(spec, "loss"), {0, 1}).ok());
  EXPECT_FALSE(Stage(p, second, 2).ok());
  EXPECT_FALSE(Recompute(spec, p, {ProducerOf(spec, "loss")}).ok());
  auto plan = Materialize(spec, p);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto report = exec::CheckPlanNumerics(spec, *plan, /*seed=*/2);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

}  // namespace
}  // namespace loom::transform
