// Mutated plans, one per bug class of the lineage derivation: missing pieces and
// reductions, doubled pieces, wrong offsets and groups, stale gradients, and
// lineage claims edited so that they agree with a wrong data flow (a claim never
// makes a wrong plan pass). Each is rejected with its class at the mutated place.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

// The value the collective producing `v` reads on v's device.
std::optional<ir::ValueId> CollectiveInputFor(const ir::Plan& p, ir::ValueId v) {
  for (const ir::Collective& c : p.collectives) {
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      if (c.outputs[i] == v && i < c.inputs.size()) return c.inputs[i];
    }
  }
  return std::nullopt;
}

// The first local slice (one the transform inserted) that cuts at a non-zero offset.
std::optional<ir::TaskId> OffsetSlice(const ir::Plan& p) {
  for (const ir::Task& t : p.tasks) {
    if (t.kind == OpKind::kSlice && t.op == ir::kNoId && *t.attrs.GetInt("begin") != 0) {
      return t.id;
    }
  }
  return std::nullopt;
}

// Data-parallel all-reduce pairs {0,2} and {1,3} of one gradient on a dp2 x tp2
// mesh, regrouped into {0,1} and {2,3}: each new group mixes tensor-parallel peers.
std::optional<Where> RegroupDataParallel(const ir::Graph& spec, ir::Plan& p,
                                         const std::string& grad) {
  std::vector<ir::CollectiveId> found = CollectivesOf(spec, p, CollectiveKind::kAllReduce, grad);
  if (found.size() != 2) return std::nullopt;
  TradeMembers(p, found[0], 1, found[1], 0);
  const ir::Collective& c = p.collectives[found[0]];
  return Where{ItemName(c), grad, c.devices};
}

std::vector<Mutant> Corpus() {
  std::vector<Mutant> m;
  // A forward tensor-parallel all-reduce turned into a broadcast of rank 0's
  // partial sum.
  m.push_back({"missing_forward_allreduce", "llama3-8b", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = FirstCollective(p, CollectiveKind::kAllReduce, Phase::kForward);
                 if (!c) return std::nullopt;
                 ir::Collective& x = p.collectives[*c];
                 x.kind = CollectiveKind::kBroadcast;
                 x.inputs.resize(1);
                 return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), {x.devices[0]}};
               },
               FailureClass::kMissingReduction});
  // The data-parallel gradient all-reduce dropped the same way.
  m.push_back({"missing_dp_gradient_allreduce", "gpt2", Make(2, 1, 1, 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = FirstCollective(p, CollectiveKind::kAllReduce, Phase::kOptimizer);
                 if (!c) return std::nullopt;
                 ir::Collective& x = p.collectives[*c];
                 x.kind = CollectiveKind::kBroadcast;
                 x.inputs.resize(1);
                 return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), {x.devices[0]}};
               },
               FailureClass::kMissingReduction});
  // One member of an all-reduce contributes zeros (its buffer was cleared): the
  // sum lacks that member's piece.
  m.push_back({"allreduce_member_contributes_zeros", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = FirstCollective(p, CollectiveKind::kAllReduce, Phase::kForward);
                 if (!c) return std::nullopt;
                 const ir::Collective& x = p.collectives[*c];
                 const ir::ValueId zeros = AddZeros(p, x.inputs[1], x.devices[1]);
                 p.collectives[*c].inputs[1] = zeros;
                 return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), {x.devices[0]}};
               },
               FailureClass::kMissingPiece});
  // A ZeRO-3 parameter all-gather where one rank sends zeros for its shard.
  m.push_back({"zero3_allgather_member_sends_zeros", "gpt2", Make(2, 1, 1, 1, 1, false, 3), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = FirstCollective(p, CollectiveKind::kAllGather, Phase::kForward);
                 if (!c) return std::nullopt;
                 const ir::Collective& x = p.collectives[*c];
                 const ir::ValueId zeros = AddZeros(p, x.inputs[1], x.devices[1]);
                 p.collectives[*c].inputs[1] = zeros;
                 return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), x.devices,
                              "member 1"};
               },
               FailureClass::kMissingPiece});
  // An updated parameter missing from the plan's outputs.
  m.push_back({"missing_output_piece", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 if (p.outputs.empty()) return std::nullopt;
                 const ir::TensorId t = p.values[p.outputs.back()].sub.tensor;
                 std::erase_if(p.outputs, [&](ir::ValueId v) { return p.values[v].sub.tensor == t; });
                 const std::string name = spec.tensor(t).name;
                 return Where{absl::StrCat("output '", name, "'"), name, {}};
               },
               FailureClass::kMissingPiece});
  // A data-parallel gradient all-reduce regrouped over tensor-parallel peers that
  // hold replicas of the same rows: each chunk is counted twice.
  m.push_back({"dp_allreduce_over_tp_replicas", "llama3-8b", Make(2, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 // The first layer's attention norm weight: replicated over tp.
                 return RegroupDataParallel(spec, p, "d.h.embed.1");
               },
               FailureClass::kDoubledPiece});
  // The same regrouping for a tensor-parallel sharded weight: the group sums two
  // different shards.
  m.push_back({"dp_allreduce_wrong_group", "llama3-8b", Make(2, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 return RegroupDataParallel(spec, p, "d.layers.0.attn.wq");
               },
               FailureClass::kWrongGroup});
  // A slice cutting the wrong rows of a replicated value (sequence parallelism).
  m.push_back({"slice_wrong_offset", "llama3-8b", Make(1, 2, 1, 1, 1, true), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto id = OffsetSlice(p);
                 if (!id) return std::nullopt;
                 ir::Task& t = p.tasks[*id];
                 const int64_t b = *t.attrs.GetInt("begin"), e = *t.attrs.GetInt("end");
                 t.attrs.Set("begin", int64_t{0});
                 t.attrs.Set("end", e - b);
                 return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                              "holds region"};
               },
               FailureClass::kWrongShard});
  // The loader puts the wrong bias shard on rank 1: its column-parallel linear
  // adds bias rows 0..15 to output columns 16..31.
  m.push_back({"tp_bias_shard_wrong_offset", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (const ir::Task& t : p.tasks) {
                   if (t.kind != OpKind::kLinear || t.device != 1 || t.inputs.size() != 3) continue;
                   ir::Box& box = p.values[t.inputs[2]].sub.box;
                   if (box[0].begin == 0) continue;
                   box[0] = {0, box[0].size()};
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {1}, "operand 2"};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongShard});
  // Gradient clipping, and through it the optimizer, reads a gradient before its
  // data-parallel all-reduce (a stale, unsynchronised gradient).
  m.push_back({"optimizer_reads_unsynchronised_gradient", "gpt2", Make(2, 1, 1, 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksWriting(spec, p, "grad_clipped.ln_f.gamma")) {
                   ir::Task& clip = p.tasks[id];
                   auto local = CollectiveInputFor(p, clip.inputs[0]);
                   if (!local) continue;
                   clip.inputs[0] = *local;
                   return Where{ItemName(clip), TensorName(spec, p, clip.outputs[0]),
                                {clip.device}, "partial sum"};
                 }
                 return std::nullopt;
               },
               FailureClass::kMissingReduction});
  // ZeRO-2 gradient reduce-scatter with its ranks swapped: each rank receives the
  // other's shard of the summed gradient under its own shard's claim.
  m.push_back({"zero2_reduce_scatter_shards_swapped", "gpt2", Make(2, 1, 1, 2, 1, false, 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = FirstCollective(p, CollectiveKind::kReduceScatter);
                 if (!c) return std::nullopt;
                 SwapMembers(p, *c, 0, 1);
                 const ir::Collective& x = p.collectives[*c];
                 return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), {x.devices[0]},
                              "holds region"};
               },
               FailureClass::kWrongGroup});
  // A zero share written as ones: the sum it meets counts an extra term.
  m.push_back({"zero_share_not_zero", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::Task& t : p.tasks) {
                   if (t.kind != OpKind::kFill || t.op != ir::kNoId) continue;
                   t.attrs.Set("value", 1.0);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device}};
                 }
                 return std::nullopt;
               },
               FailureClass::kComputationDiffers});
  // Operands of a non-commutative op (sub, swiglu) swapped on one device.
  m.push_back({"swapped_operands", "llama3-8b", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::Task& t : p.tasks) {
                   if (t.op == ir::kNoId || t.inputs.size() < 2) continue;
                   const ir::Op& o = spec.op(t.op);
                   if (o.inputs[0] == o.inputs[1]) continue;
                   if (t.kind != OpKind::kSub && t.kind != OpKind::kSwiGlu) continue;
                   std::swap(t.inputs[0], t.inputs[1]);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device}};
                 }
                 return std::nullopt;
               },
               FailureClass::kSwappedOperands});

  // ---- Lineage claims edited to agree with a wrong data flow.
  // An all-reduce made an identity, and its outputs' claims rewritten as the
  // partial shares they now hold: no claim is contradicted where the sum went
  // missing, and the norm reading the value still rejects it.
  m.push_back({"claim_share_hides_missing_reduction", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = FirstCollective(p, CollectiveKind::kAllReduce, Phase::kForward);
                 if (!c) return std::nullopt;
                 const ir::Collective whole = p.collectives[*c];
                 SplitIntoMembers(p, *c);
                 for (size_t i = 0; i < whole.outputs.size(); ++i) {
                   p.values[whole.outputs[i]].sub.part = p.values[whole.inputs[i]].sub.part;
                 }
                 for (ir::TaskId r : TaskReaders(p, whole.outputs[0])) {
                   const ir::Task& t = p.tasks[r];
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "needs it complete"};
                 }
                 return std::nullopt;
               },
               FailureClass::kMissingReduction});
  // A column-parallel output claiming the other rank's columns.
  m.push_back({"claim_shifted_region", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (const ir::Task& t : p.tasks) {
                   if (t.kind != OpKind::kLinear || t.device != 1) continue;
                   ir::Box& box = p.values[t.outputs[0]].sub.box;
                   const int last = static_cast<int>(box.size()) - 1;
                   if (box[last].begin == 0) continue;
                   box[last] = {0, box[last].size()};
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {1},
                                "holds region"};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongShard});
  // A slice's output claiming a piece of another tensor of the same shape.
  m.push_back({"claim_other_tensor", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto id = OffsetSlice(p);
                 if (!id) return std::nullopt;
                 const ir::Task& t = p.tasks[*id];
                 ir::SubTensor& claim = p.values[t.outputs[0]].sub;
                 for (const ir::Tensor& other : spec.tensors()) {
                   if (other.id == claim.tensor ||
                       !other.shape.SameDims(spec.tensor(claim.tensor).shape)) {
                     continue;
                   }
                   const std::string before = spec.tensor(claim.tensor).name;
                   claim.tensor = other.id;
                   return Where{ItemName(t), other.name, {t.device}, before};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongClaim});
  // A computed value claiming to hold zeros.
  m.push_back({"claim_zeros_on_computed_value", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (const ir::Task& t : p.tasks) {
                   if (t.kind != OpKind::kLinear) continue;
                   p.values[t.outputs[0]].sub.part = ir::ValuePart::Empty();
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "claims zeros"};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongClaim});
  // A loaded weight shard claiming to be half of a sum: the loader puts whole
  // values (or zeros), never shares.
  m.push_back({"claim_share_on_loaded_weight", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (const ir::Task& t : p.tasks) {
                   if (t.kind != OpKind::kLinear || t.device != 1) continue;
                   const ir::ValueId w = t.inputs[1];
                   p.values[w].sub.part = ir::ValuePart::Full().Share(1, 2);
                   return Where{absl::StrCat("value ", w, " (plan input)"),
                                TensorName(spec, p, w), {1}, "share"};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongClaim});
  return m;
}

class BugCorpusTest : public ::testing::TestWithParam<Mutant> {};

// Each injected bug is rejected with its class at the mutated place.
TEST_P(BugCorpusTest, IsRejectedAtItsPlace) { ExpectRejected(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Corpus, BugCorpusTest, ::testing::ValuesIn(Corpus()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::verify::corpus
