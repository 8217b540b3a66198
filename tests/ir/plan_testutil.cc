#include "tests/ir/plan_testutil.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/autodiff.h"
#include "ir/text_format.h"

namespace loom::ir::testing {
namespace {

void Die(const std::string& message) {
  std::cerr << "plan_testutil: " << message << "\n";
  std::abort();
}

PlanValue Value(ValueId id, int64_t device, TensorId tensor, Box box, ValuePart part, int mb,
                int dp_dim = -1, bool dp_share = false) {
  PlanValue v;
  v.id = id;
  v.device = device;
  v.sub.tensor = tensor;
  v.sub.box = std::move(box);
  v.sub.part = std::move(part);
  v.dtype = DType::kF32;
  v.microbatch = mb;
  v.dp_dim = dp_dim;
  v.dp_share = dp_share;
  return v;
}

Task MakeTask(TaskId id, OpId op, OpKind kind, int64_t device, OpInfo info,
              std::vector<ValueId> inputs, std::vector<ValueId> outputs) {
  Task t;
  t.id = id;
  t.op = op;
  t.kind = kind;
  t.device = device;
  t.info = info;
  t.inputs = std::move(inputs);
  t.outputs = std::move(outputs);
  return t;
}

Collective MakeCollective(CollectiveId id, CollectiveKind kind, std::vector<int64_t> devices,
                          std::vector<ValueId> inputs, std::vector<ValueId> outputs, int mb,
                          Phase phase, bool spans_dp = false) {
  Collective c;
  c.id = id;
  c.kind = kind;
  c.devices = std::move(devices);
  c.inputs = std::move(inputs);
  c.outputs = std::move(outputs);
  c.microbatch = mb;
  c.phase = phase;
  c.spans_dp = spans_dp;
  return c;
}

// Names used by the plans.
struct Names {
  std::vector<TensorId> tokens, h, grad_embed_mb;  // per micro-batch
  TensorId embed, grad_embed;
  std::vector<OpId> embedding;  // per micro-batch
  OpId accumulate;
};

Names Look(const Graph& spec) {
  Names n;
  for (int m = 0; m < 2; ++m) {
    n.tokens.push_back(TensorNamed(spec, absl::StrCat("tokens.mb", m)));
    n.h.push_back(TensorNamed(spec, absl::StrCat("h.mb", m)));
    n.embedding.push_back(ProducerOf(spec, absl::StrCat("h.mb", m)));
  }
  n.embed = TensorNamed(spec, "embed");
  n.grad_embed = TensorNamed(spec, "grad.embed");
  n.accumulate = ProducerOf(spec, "grad.embed");
  const Op& acc = spec.op(n.accumulate);
  if (acc.kind != OpKind::kAccumulate || acc.inputs.size() != 2) Die("grad.embed: no accumulate");
  n.grad_embed_mb = acc.inputs;
  return n;
}

Box Rows(int64_t begin, int64_t end, std::vector<int64_t> rest) {
  Box box{{begin, end}};
  for (int64_t d : rest) box.push_back({0, d});
  return box;
}

}  // namespace

Graph PlanTestStep(int microbatches) {
  Graph g("plan-tiny");
  const Shape ids({kPlanBatch, kPlanSeq});
  TensorId tokens = *g.AddInput("tokens", ids, DType::kI64, TensorRole::kInput);
  TensorId targets = *g.AddInput("targets", ids, DType::kI64, TensorRole::kInput);
  TensorId embed = *g.AddInput("embed", Shape({kPlanVocab, kPlanHidden}), DType::kF32,
                               TensorRole::kParameter);
  TensorId head = *g.AddInput("head", Shape({kPlanVocab, kPlanHidden}), DType::kF32,
                              TensorRole::kParameter);
  TensorId h = (*g.AddOp(OpKind::kEmbedding, {tokens, embed}, {}, OpInfo{Phase::kForward, 0, -1},
                         {{"h"}}))[0];
  TensorId logits =
      (*g.AddOp(OpKind::kLinear, {h, head}, {}, OpInfo{Phase::kForward, 0, -1}, {{"logits"}}))[0];
  TensorId loss = (*g.AddOp(OpKind::kCrossEntropy, {logits, targets}, {}, OpInfo{},
                            {{"loss", TensorRole::kLoss}}))[0];
  g.AddOutput(loss);
  TrainingOptions options;
  options.microbatches = microbatches;
  auto step = BuildTrainingStep(g, options);
  if (!step.ok()) Die(std::string(step.status().message()));
  return *std::move(step);
}

TensorId TensorNamed(const Graph& g, const std::string& name) {
  auto id = g.FindTensor(name);
  if (!id.has_value()) Die(absl::StrCat("no tensor '", name, "' in\n", PrintGraph(g)));
  return *id;
}

OpId ProducerOf(const Graph& g, const std::string& name) {
  OpId op = g.tensor(TensorNamed(g, name)).producer;
  if (op == kNoId) Die(absl::StrCat("tensor '", name, "' has no producer"));
  return op;
}

Plan FactoredTestPlan(const Graph& spec) {
  const Names n = Look(spec);
  const int64_t half = kPlanBatch / 2;
  const std::vector<int64_t> emb = {kPlanVocab, kPlanHidden};
  Plan p;
  p.model = "plan-tiny";
  p.mesh = Mesh({{"dp", 2}, {"tp", 2}});
  p.factoring = Factoring{/*dp=*/2, /*dp_device_stride=*/2, /*microbatches=*/2};
  p.values = {
      Value(0, 0, n.tokens[0], Rows(0, half, {kPlanSeq}), ValuePart::Full(), 0, /*dp_dim=*/0),
      Value(1, 0, n.embed, FullBox(Shape(emb)), ValuePart::Full(), -1),
      Value(2, 0, n.h[0], Rows(0, half, {kPlanSeq, kPlanHidden}), ValuePart::Full(), 0, 0),
      Value(3, 0, n.grad_embed_mb[0], FullBox(Shape(emb)), ValuePart::Full(), 0, -1,
            /*dp_share=*/true),
      Value(4, 0, n.grad_embed, FullBox(Shape(emb)), ValuePart::Full(), -1, -1, true),
      Value(5, 0, n.grad_embed, FullBox(Shape(emb)), ValuePart::Full(), -1),
      Value(6, 1, n.h[0], Rows(0, half, {kPlanSeq, kPlanHidden}), ValuePart::Full(), 0, 0),
  };
  p.values[0].dtype = DType::kI64;
  p.tasks = {
      MakeTask(0, n.embedding[0], OpKind::kEmbedding, 0, OpInfo{Phase::kForward, 0, 0}, {0, 1},
               {2}),
      MakeTask(1, n.accumulate, OpKind::kAccumulate, 0, spec.op(n.accumulate).info, {3}, {4}),
  };
  p.tasks[0].stage = 0;
  p.collectives = {
      MakeCollective(0, CollectiveKind::kSendRecv, {0, 1}, {2}, {6}, 0, Phase::kForward),
      MakeCollective(1, CollectiveKind::kAllReduce, {0}, {4}, {5}, -1, Phase::kBackward,
                     /*spans_dp=*/true),
  };
  p.collectives[0].layer = 0;
  p.outputs = {5};
  return p;
}

Plan ExplicitTestPlan(const Graph& spec) {
  const Names n = Look(spec);
  const std::vector<int64_t> emb = {kPlanVocab, kPlanHidden};
  const std::vector<int64_t> h = {kPlanSeq, kPlanHidden};
  const ValuePart full = ValuePart::Full();
  const ValuePart first_half = full.Share(0, 2), second_half = full.Share(1, 2);
  Plan p;
  p.model = "plan-tiny";
  p.mesh = Mesh({{"dp", 2}, {"tp", 2}});
  p.values = {
      // Replica 0, devices 0 and 1, rows 0..1 of each micro-batch.
      Value(0, 0, n.tokens[0], Rows(0, 2, {kPlanSeq}), full, 0),
      Value(1, 0, n.tokens[1], Rows(0, 2, {kPlanSeq}), full, 1),
      Value(2, 0, n.embed, FullBox(Shape(emb)), full, -1),
      Value(3, 0, n.h[0], Rows(0, 2, h), full, 0),
      Value(4, 0, n.h[1], Rows(0, 2, h), full, 1),
      Value(5, 0, n.grad_embed_mb[0], FullBox(Shape(emb)), first_half, 0),
      Value(6, 0, n.grad_embed_mb[1], FullBox(Shape(emb)), first_half, 1),
      Value(7, 0, n.grad_embed, FullBox(Shape(emb)), first_half, -1),
      Value(8, 0, n.grad_embed, FullBox(Shape(emb)), full, -1),
      Value(9, 1, n.h[0], Rows(0, 2, h), full, 0),
      Value(10, 1, n.h[1], Rows(0, 2, h), full, 1),
      // Replica 1, devices 2 and 3, rows 2..3.
      Value(11, 2, n.tokens[0], Rows(2, 4, {kPlanSeq}), full, 0),
      Value(12, 2, n.tokens[1], Rows(2, 4, {kPlanSeq}), full, 1),
      Value(13, 2, n.embed, FullBox(Shape(emb)), full, -1),
      Value(14, 2, n.h[0], Rows(2, 4, h), full, 0),
      Value(15, 2, n.h[1], Rows(2, 4, h), full, 1),
      Value(16, 2, n.grad_embed_mb[0], FullBox(Shape(emb)), second_half, 0),
      Value(17, 2, n.grad_embed_mb[1], FullBox(Shape(emb)), second_half, 1),
      Value(18, 2, n.grad_embed, FullBox(Shape(emb)), second_half, -1),
      Value(19, 2, n.grad_embed, FullBox(Shape(emb)), full, -1),
      Value(20, 3, n.h[0], Rows(2, 4, h), full, 0),
      Value(21, 3, n.h[1], Rows(2, 4, h), full, 1),
  };
  for (ValueId id : {0, 1, 11, 12}) p.values[id].dtype = DType::kI64;
  const OpInfo acc = spec.op(n.accumulate).info;
  p.tasks = {
      MakeTask(0, n.embedding[0], OpKind::kEmbedding, 0, OpInfo{Phase::kForward, 0, 0}, {0, 2},
               {3}),
      MakeTask(1, n.embedding[1], OpKind::kEmbedding, 0, OpInfo{Phase::kForward, 0, 1}, {1, 2},
               {4}),
      MakeTask(2, n.accumulate, OpKind::kAccumulate, 0, acc, {5, 6}, {7}),
      MakeTask(3, n.embedding[0], OpKind::kEmbedding, 2, OpInfo{Phase::kForward, 0, 0}, {11, 13},
               {14}),
      MakeTask(4, n.embedding[1], OpKind::kEmbedding, 2, OpInfo{Phase::kForward, 0, 1}, {12, 13},
               {15}),
      MakeTask(5, n.accumulate, OpKind::kAccumulate, 2, acc, {16, 17}, {18}),
  };
  for (TaskId id : {0, 1, 3, 4}) p.tasks[id].stage = 0;
  p.collectives = {
      MakeCollective(0, CollectiveKind::kSendRecv, {0, 1}, {3}, {9}, 0, Phase::kForward),
      MakeCollective(1, CollectiveKind::kSendRecv, {0, 1}, {4}, {10}, 1, Phase::kForward),
      MakeCollective(2, CollectiveKind::kAllReduce, {0, 2}, {7, 18}, {8, 19}, -1,
                     Phase::kBackward),
      MakeCollective(3, CollectiveKind::kSendRecv, {2, 3}, {14}, {20}, 0, Phase::kForward),
      MakeCollective(4, CollectiveKind::kSendRecv, {2, 3}, {15}, {21}, 1, Phase::kForward),
  };
  for (CollectiveId id : {0, 1, 3, 4}) p.collectives[id].layer = 0;
  p.outputs = {8, 19};
  return p;
}

}  // namespace loom::ir::testing
