// The fourteen bugs TrainVerify injected into Llama-3 plans (its artifact's bug
// table): communication (1-5), rank assignment (6), computation (7-11), scaling
// (12-13) and scheduling (14), each injected into a Loom plan and rejected with
// its class at the mutated place.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/plan.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/verify/bug_corpus_testutil.h"

namespace loom::verify::corpus {
namespace {

using ::loom::testing::Make;
using ir::CollectiveKind;
using ir::OpKind;
using ir::Phase;

// The first collective of `kind` in `phase` with more than one member.
std::optional<ir::CollectiveId> First(const ir::Plan& p, CollectiveKind kind, Phase phase) {
  for (const ir::Collective& c : p.collectives) {
    if (c.kind == kind && c.phase == phase && c.devices.size() > 1) return c.id;
  }
  return std::nullopt;
}

// Multiplies float attribute `name` of task t.
void ScaleAttr(ir::Task& t, const std::string& name, double by) {
  t.attrs.Set(name, *t.attrs.GetFloat(name) * by);
}

// A collective that stops reducing: each member keeps its own partial sum.
std::optional<Where> AllReduceIdentity(const ir::Graph& spec, ir::Plan& p, Phase phase) {
  auto c = First(p, CollectiveKind::kAllReduce, phase);
  if (!c) return std::nullopt;
  const ir::Collective before = p.collectives[*c];
  SplitIntoMembers(p, *c);
  return Where{ItemName(p.collectives[*c]), TensorName(spec, p, before.outputs[0]),
               {before.devices[0]}};
}

std::vector<Mutant> Corpus() {
  std::vector<Mutant> m;
  // 1, communication: a forward all-reduce replaced by an identity
  // (IdentityAllreducePrim); the data flow is kept, each rank holds its partial.
  m.push_back({"tv01_comm_forward_allreduce_identity", "llama3-8b", Make(2, 2, 2, 2), 2, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 return AllReduceIdentity(spec, p, Phase::kForward);
               },
               FailureClass::kMissingReduction});
  // 2, communication: the adapter deleted; its readers take the unreduced input.
  m.push_back({"tv02_comm_allreduce_deleted", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = First(p, CollectiveKind::kAllReduce, Phase::kForward);
                 if (!c) return std::nullopt;
                 const ir::ValueId in = p.collectives[*c].inputs[0];
                 Bypass(p, *c);
                 std::vector<ir::TaskId> readers = TaskReaders(p, in);
                 // The first reader that is not linear in it (a norm).
                 for (ir::TaskId r : readers) {
                   const ir::Task& t = p.tasks[r];
                   if (t.kind == OpKind::kAdd) continue;
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "needs it complete"};
                 }
                 return std::nullopt;
               },
               FailureClass::kMissingReduction});
  // 3, communication: an all-reduce replaced by an all-gather. Loom keeps shapes
  // consistent, so each rank contributes its row slice of its partial sum and the
  // gathered value is a patchwork of partial sums.
  m.push_back({"tv03_comm_allreduce_as_allgather", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = First(p, CollectiveKind::kAllReduce, Phase::kForward);
                 if (!c) return std::nullopt;
                 ir::Collective& ar = p.collectives[*c];
                 const int n = static_cast<int>(ar.devices.size());
                 const int dim = 1;  // the sequence
                 std::vector<ir::ValueId> pieces;
                 for (int i = 0; i < n; ++i) {
                   ir::PlanValue v = p.values[ar.inputs[i]];
                   const int64_t len = v.sub.box[dim].size() / n;
                   v.sub.box[dim] = {i * len, (i + 1) * len};
                   const ir::ValueId piece = AddValue(p, v);
                   ir::Task slice;
                   slice.kind = OpKind::kSlice;
                   slice.device = v.device;
                   slice.info.microbatch = v.microbatch;
                   slice.attrs.Set("dim", int64_t{dim});
                   slice.attrs.Set("begin", i * len);
                   slice.attrs.Set("end", (i + 1) * len);
                   slice.inputs = {p.collectives[*c].inputs[i]};
                   slice.outputs = {piece};
                   AddTask(p, std::move(slice));
                   pieces.push_back(piece);
                 }
                 ir::Collective& gather = p.collectives[*c];
                 gather.kind = CollectiveKind::kAllGather;
                 gather.dim = dim;
                 gather.inputs = pieces;
                 return Where{ItemName(gather), TensorName(spec, p, gather.outputs[0]),
                              {gather.devices[0]}};
               },
               FailureClass::kMissingReduction});
  // 4, communication: an all-gather replaced by an all-reduce: the sequence
  // shards are summed element-wise (Loom keeps the gather after it, so shapes
  // stay consistent).
  m.push_back({"tv04_comm_allgather_as_allreduce", "llama3-8b", Make(1, 2, 1, 1, 1, true), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = First(p, CollectiveKind::kAllGather, Phase::kForward);
                 if (!c) return std::nullopt;
                 ir::Collective sum;
                 sum.kind = CollectiveKind::kAllReduce;
                 sum.devices = p.collectives[*c].devices;
                 sum.microbatch = p.collectives[*c].microbatch;
                 sum.phase = Phase::kForward;
                 for (ir::ValueId in : p.collectives[*c].inputs) {
                   sum.inputs.push_back(in);
                   sum.outputs.push_back(AddValue(p, p.values[in]));
                 }
                 p.collectives[*c].inputs = sum.outputs;
                 const ir::CollectiveId id = AddCollective(p, std::move(sum));
                 return Where{ItemName(p.collectives[id]), TensorName(spec, p, p.collectives[id].inputs[0]),
                              p.collectives[id].devices, "combines region"};
               },
               FailureClass::kWrongGroup});
  // 5, communication: a backward all-reduce that misses its reduction
  // (AllReduceIdentityPrim), amid backward sums and gradient accumulation.
  m.push_back({"tv05_comm_backward_allreduce_identity", "llama3-8b", Make(2, 2, 2, 2), 2, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 return AllReduceIdentity(spec, p, Phase::kBackward);
               },
               FailureClass::kMissingReduction});
  // 6, rank assignment: a pipeline transfer with the wrong source: stage 2
  // receives stage 0's activation instead of stage 1's.
  m.push_back({"tv06_rank_send_wrong_source_stage", "llama3-8b", Make(1, 1, 4, 1), 4, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 std::optional<ir::CollectiveId> a, b;
                 for (const ir::Collective& c : p.collectives) {
                   if (c.kind != CollectiveKind::kSendRecv || c.phase != Phase::kForward) continue;
                   if (c.devices == std::vector<int64_t>{0, 1} && !a) a = c.id;
                   if (c.devices == std::vector<int64_t>{1, 2} && !b) b = c.id;
                 }
                 if (!a || !b) return std::nullopt;
                 ir::Collective& send = p.collectives[*b];
                 send.devices = {0, 2};
                 send.inputs = p.collectives[*a].inputs;
                 return Where{ItemName(send), TensorName(spec, p, send.outputs[0]), {2}};
               },
               FailureClass::kWrongGroup});
  // 7, computation: one rank's norm epsilon changed.
  m.push_back({"tv07_comp_epsilon_one_rank", "llama3-8b", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kRmsNorm)) {
                   ir::Task& t = p.tasks[id];
                   if (t.device != 1) continue;
                   ScaleAttr(t, "eps", 100);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {1}, "'eps'"};
                 }
                 return std::nullopt;
               },
               FailureClass::kComputationDiffers});
  // 8, computation: one rank's pow exponent changed (pow(x, 2) -> pow(x, 1) there;
  // here the loss backward's reciprocal pow(x, -1) -> pow(x, -2)).
  m.push_back({"tv08_comp_pow_exponent_one_rank", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kPow)) {
                   ir::Task& t = p.tasks[id];
                   ScaleAttr(t, "exponent", 2);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "'exponent'"};
                 }
                 return std::nullopt;
               },
               FailureClass::kComputationDiffers});
  // 9, computation: the epsilon changed on every rank: each rank is reported.
  m.push_back({"tv09_comp_epsilon_all_ranks", "llama3-8b", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 std::vector<ir::TaskId> norms = TasksOfKind(p, OpKind::kRmsNorm);
                 if (norms.empty()) return std::nullopt;
                 const ir::OpId op = p.tasks[norms[0]].op;
                 for (ir::TaskId id : norms) {
                   if (p.tasks[id].op == op) ScaleAttr(p.tasks[id], "eps", 100);
                 }
                 const ir::Task& t = p.tasks[norms[0]];
                 Where w{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device}, "'eps'"};
                 w.every_device = {0, 1};
                 return w;
               },
               FailureClass::kComputationDiffers});
  // 10, computation: a backward sum of gradients (multiref) on one rank reads its
  // first gradient input twice.
  m.push_back({"tv10_comp_gradient_sum_reads_input_twice", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kAccumulate)) {
                   ir::Task& t = p.tasks[id];
                   if (spec.op(t.op).info.phase != Phase::kBackward) continue;
                   t.inputs.push_back(t.inputs[0]);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "twice"};
                 }
                 return std::nullopt;
               },
               FailureClass::kDoubledPiece});
  // 11, computation: a backward node's input list reversed (TrainVerify reversed
  // apply_rotary_emb's backward; Loom's rope backward has one input, so the
  // attention backward's is reversed: its operands of one shape, q, k, v, out and
  // dout, the log-sum-exp between them staying in place).
  m.push_back({"tv11_comp_backward_inputs_reversed", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kAttentionGrad)) {
                   ir::Task& t = p.tasks[id];
                   std::swap(t.inputs[0], t.inputs[5]);
                   std::swap(t.inputs[1], t.inputs[3]);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "operand 0"};
                 }
                 return std::nullopt;
               },
               FailureClass::kSwappedOperands});
  // 12, scaling: one rank's scaling constant changed (TrainVerify: the attention's
  // division; Loom's attention scales inside the op, so the loss's mean).
  m.push_back({"tv12_scale_constant_one_rank", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kScale)) {
                   ir::Task& t = p.tasks[id];
                   if (t.device != 1) continue;
                   ScaleAttr(t, "factor", 2);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {1},
                                "scaled by 2"};
                 }
                 return std::nullopt;
               },
               FailureClass::kScaled});
  // 13, scaling: the same constant changed on every rank.
  m.push_back({"tv13_scale_constant_all_ranks", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 std::vector<ir::TaskId> scales = TasksOfKind(p, OpKind::kScale);
                 if (scales.empty()) return std::nullopt;
                 const ir::OpId op = p.tasks[scales[0]].op;
                 for (ir::TaskId id : scales) {
                   if (p.tasks[id].op == op) ScaleAttr(p.tasks[id], "factor", 2);
                 }
                 const ir::Task& t = p.tasks[scales[0]];
                 Where w{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device}, "scaled by 2"};
                 w.every_device = {0, 1};
                 return w;
               },
               FailureClass::kScaled});
  // 14, scheduling: a data-parallel gradient reducer launched before the last
  // micro-batch's contribution to its gradient is computed.
  m.push_back({"tv14_sched_reducer_before_last_microbatch", "llama3-8b", Make(2, 1, 2, 2), 2, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (const ir::Collective& c : p.collectives) {
                   if (c.kind != CollectiveKind::kAllReduce || c.microbatch != -1) continue;
                   const int64_t d = c.devices[0];
                   // The accumulation over micro-batches producing its input on d.
                   std::optional<ir::TaskId> acc;
                   for (const ir::Task& t : p.tasks) {
                     if (t.kind == OpKind::kAccumulate && t.outputs[0] == c.inputs[0]) acc = t.id;
                   }
                   if (!acc) continue;
                   // The producer of the last micro-batch's contribution.
                   const ir::ValueId last = p.tasks[*acc].inputs.back();
                   std::vector<ir::PlanStep>& order = p.order[d];
                   const ir::PlanStep step{/*is_collective=*/true, c.id};
                   order.erase(std::find(order.begin(), order.end(), step));
                   auto at = std::find_if(order.begin(), order.end(), [&](const ir::PlanStep& s) {
                     return !s.is_collective && std::find(p.tasks[s.id].outputs.begin(),
                                                          p.tasks[s.id].outputs.end(),
                                                          last) != p.tasks[s.id].outputs.end();
                   });
                   order.insert(at, step);
                   return Where{"dependency", "", {d}, "all_reduce"};
                 }
                 return std::nullopt;
               },
               FailureClass::kScheduleOrder, /*scheduled=*/true});
  return m;
}

class TrainVerifyBugTest : public ::testing::TestWithParam<Mutant> {};

// Each injected bug is rejected with its class at the mutated place.
TEST_P(TrainVerifyBugTest, IsRejectedAtItsPlace) { ExpectRejected(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Corpus, TrainVerifyBugTest, ::testing::ValuesIn(Corpus()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::verify::corpus
