// Real bugs reported against Megatron-LM, DeepSpeed, PyTorch and others (each
// mutant names the project and the report it reproduces), and the failure modes of
// parallel training steps: loss and gradient scaling, tied weights, sequence
// and vocabulary parallelism, grad-norm, ZeRO, experts, pipelines and schedules.
// Each is injected into a correct plan and rejected with its class at its place.

#include <algorithm>
#include <functional>
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
using ::loom::testing::WithCp;
using ir::CollectiveKind;
using ir::OpKind;
using ir::Phase;

transform::Strategy Experts(int dp, int ep) {
  transform::Strategy s = Make(dp, 1, 1, 1);
  s.ep = ep;
  return s;
}

// An all-reduce (of the gradient `tensor`, or the first passing `pick`) that each
// member leaves unreduced.
std::optional<Where> Unreduced(const ir::Graph& spec, ir::Plan& p,
                               const std::function<bool(const ir::Collective&)>& pick) {
  for (const ir::Collective& c : p.collectives) {
    if (c.kind != CollectiveKind::kAllReduce || c.devices.size() < 2 || !pick(c)) continue;
    const ir::Collective whole = c;
    SplitIntoMembers(p, whole.id);
    return Where{ItemName(p.collectives[whole.id]), TensorName(spec, p, whole.outputs[0]),
                 {whole.devices[0]}};
  }
  return std::nullopt;
}

// The producer op of the tensor a collective's first output claims.
const ir::Op* ProducerOp(const ir::Graph& spec, const ir::Plan& p, const ir::Collective& c) {
  const ir::OpId op = spec.tensor(p.values[c.outputs[0]].sub.tensor).producer;
  return op == ir::kNoId ? nullptr : &spec.op(op);
}

// Multiplies attribute `name` of every task writing `tensor`.
std::vector<ir::TaskId> ScaleTasks(const ir::Graph& spec, ir::Plan& p, const std::string& tensor,
                                   const std::string& name, double by) {
  std::vector<ir::TaskId> ids = TasksWriting(spec, p, tensor);
  for (ir::TaskId id : ids) p.tasks[id].attrs.Set(name, *p.tasks[id].attrs.GetFloat(name) * by);
  return ids;
}

// The first send_recv in `phase` from `src` to `dst`.
std::optional<ir::CollectiveId> Send(const ir::Plan& p, Phase phase, int64_t src, int64_t dst,
                                     int microbatch = -2) {
  for (const ir::Collective& c : p.collectives) {
    if (c.kind == CollectiveKind::kSendRecv && c.phase == phase &&
        c.devices == std::vector<int64_t>{src, dst} &&
        (microbatch == -2 || c.microbatch == microbatch)) {
      return c.id;
    }
  }
  return std::nullopt;
}

// A rope task run on the two halves of its sequence, each as if it were the
// whole sequence, and the halves concatenated. The second half keeps the task's
// id (its rotation is wrong: positions 4..7 rotated as 0..3); the first half,
// whose positions happen to agree, is a new task.
std::optional<Where> RopeOnSequenceHalves(const ir::Graph& spec, ir::Plan& p) {
  std::vector<ir::TaskId> ropes = TasksOfKind(p, OpKind::kRope);
  if (ropes.empty()) return std::nullopt;
  const ir::Task rope = p.tasks[ropes[0]];
  const int seq = 1;
  const ir::PlanValue in = p.values[rope.inputs[0]];
  const ir::PlanValue out = p.values[rope.outputs[0]];
  const int64_t half = in.sub.box[seq].size() / 2;
  // The second half first, so that it is derived (and reported) first.
  std::vector<ir::ValueId> halves(2);
  for (int k : {1, 0}) {
    const ir::Interval part{in.sub.box[seq].begin + k * half, in.sub.box[seq].begin + (k + 1) * half};
    ir::PlanValue piece = in;
    piece.sub.box[seq] = part;
    ir::Task slice;
    slice.kind = OpKind::kSlice;
    slice.device = rope.device;
    slice.info = rope.info;
    slice.attrs.Set("dim", int64_t{seq});
    slice.attrs.Set("begin", k * half);
    slice.attrs.Set("end", (k + 1) * half);
    slice.inputs = {rope.inputs[0]};
    slice.outputs = {AddValue(p, piece)};
    const ir::ValueId sliced = slice.outputs[0];
    AddTask(p, std::move(slice));
    ir::PlanValue rotated = out;
    rotated.sub.box[seq] = part;
    const ir::ValueId result = AddValue(p, rotated);
    if (k == 1) {
      p.tasks[rope.id].inputs = {sliced};
      p.tasks[rope.id].outputs = {result};
    } else {
      ir::Task second = rope;
      second.inputs = {sliced};
      second.outputs = {result};
      AddTask(p, std::move(second));
    }
    halves[k] = result;
  }
  ir::Task concat;
  concat.kind = OpKind::kConcat;
  concat.device = rope.device;
  concat.info = rope.info;
  concat.attrs.Set("dim", int64_t{seq});
  concat.inputs = halves;
  concat.outputs = {rope.outputs[0]};
  AddTask(p, std::move(concat));
  return Where{ItemName(p.tasks[rope.id]), TensorName(spec, p, rope.outputs[0]), {rope.device},
               absl::StrCat("attribute 'offset' is 0 where the spec's piece has ", half)};
}

// The first forward all-gather with its first two members in each other's places:
// every member's result holds their pieces swapped.
std::optional<Where> FirstGatherInTheWrongOrder(const ir::Graph& spec, ir::Plan& p) {
  auto c = FirstCollective(p, CollectiveKind::kAllGather, Phase::kForward);
  if (!c) return std::nullopt;
  SwapMembers(p, *c, 0, 1);
  const ir::Collective& x = p.collectives[*c];
  return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), x.devices, "gathered order"};
}

// On some device, an all-reduce deferred past a later all-reduce of the same
// group (nothing in between reads its outputs there): that device issues the two
// in the other order than its peers, and they wait for each other.
std::optional<Where> DeferAllReduce(ir::Plan& p) {
  auto reads = [&](const ir::PlanStep& s, const std::vector<ir::ValueId>& values) {
    const auto& in = s.is_collective ? p.collectives[s.id].inputs : p.tasks[s.id].inputs;
    return std::any_of(values.begin(), values.end(), [&](ir::ValueId v) {
      return std::find(in.begin(), in.end(), v) != in.end();
    });
  };
  for (int64_t d = 0; d < p.mesh.num_devices(); ++d) {
    std::vector<ir::PlanStep>& order = p.order[d];
    for (size_t i = 0; i < order.size(); ++i) {
      if (!order[i].is_collective) continue;
      const ir::Collective& c = p.collectives[order[i].id];
      if (c.kind != CollectiveKind::kAllReduce || c.devices.size() < 2) continue;
      for (size_t j = i + 1; j < order.size() && !reads(order[j], c.outputs); ++j) {
        if (!order[j].is_collective || p.collectives[order[j].id].devices != c.devices) continue;
        const ir::PlanStep deferred = order[i];
        order.erase(order.begin() + i);
        order.insert(order.begin() + j, deferred);
        return Where{"deadlock", "", c.devices, "waits at all_reduce"};
      }
    }
  }
  return std::nullopt;
}

std::vector<Mutant> Corpus() {
  std::vector<Mutant> m;
  // ---- Missing reductions.
  // Megatron-LM, final layernorm under tensor and sequence parallelism (and the
  // shared out_norm of its GatedDeltaNet): the norm weight's gradient is a
  // per-rank partial sum that is never all-reduced over tensor parallelism.
  m.push_back({"sp_norm_weight_grad_not_allreduced", "llama3-8b", Make(1, 2, 1, 1, 1, true), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 return Unreduced(spec, p, [&](const ir::Collective& c) {
                   const ir::Op* op = ProducerOp(spec, p, c);
                   return op != nullptr && op->kind == OpKind::kRmsNormGrad && op->info.layer < 0;
                 });
               },
               FailureClass::kMissingReduction});
  // Hugging Face transformers, expert parallelism: the router's per-rank
  // gradient partials are never summed.
  m.push_back({"moe_router_grad_not_summed", "deepseek-v3-671b", Experts(4, 4), 0, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 return Unreduced(spec, p, [&](const ir::Collective& c) {
                   return TensorName(spec, p, c.outputs[0]).find(".moe.router") !=
                          std::string::npos;
                 });
               },
               FailureClass::kMissingReduction});
  // Vocabulary-parallel cross-entropy without the all-reduce of the row maximum.
  m.push_back({"vocab_parallel_ce_missing_max", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 return Unreduced(spec, p, [](const ir::Collective& c) {
                   return c.reduce == ir::ReduceOp::kMax;
                 });
               },
               FailureClass::kMissingReduction});
  // ... and without the all-reduce of the sum of exponentials.
  m.push_back({"vocab_parallel_ce_missing_sum", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) {
                 return Unreduced(spec, p, [&](const ir::Collective& c) {
                   return TensorName(spec, p, c.outputs[0]) == "loss.sum_exp";
                 });
               },
               FailureClass::kMissingReduction});
  // Piper and Cornstarch, tied embeddings on two pipeline stages: their
  // gradient contributions are not synchronised before the update, so the last
  // stage updates with the head's contribution only.
  m.push_back({"tied_embedding_grad_not_synchronised", "gpt2", Make(1, 1, 2, 2), 2, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kAdd)) {
                   ir::Task& t = p.tasks[id];
                   const ir::Op& o = spec.op(t.op);
                   if (spec.tensor(o.inputs[0]).name != "d.wte") continue;
                   t.inputs[1] = AddZeros(p, t.inputs[1], t.device);
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device}};
                 }
                 return std::nullopt;
               },
               FailureClass::kMissingPiece});
  // NeMo Automodel (stage re-initialisation) and Megatron-FSDP (a no-op
  // no_sync): gradient buffers cleared between micro-batches, so only the last
  // micro-batch reaches the update.
  m.push_back({"grad_accumulation_only_last_microbatch", "gpt2", Make(2, 1, 1, 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kAccumulate)) {
                   ir::Task& t = p.tasks[id];
                   if (spec.op(t.op).info.microbatch != -1 || t.inputs.size() != 2 ||
                       TensorName(spec, p, t.outputs[0]).rfind("grad.", 0) != 0) {
                     continue;
                   }
                   t.inputs.erase(t.inputs.begin());
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "also adds"};
                 }
                 return std::nullopt;
               },
               FailureClass::kMissingPiece});

  // ---- Context parallelism: the sequence in two chunks over cp ranks 0 and 1.
  // Megatron-LM with per-token loss (the TrainVerify paper's case study): the loss
  // multiplied by the context-parallel degree on every rank, as if each rank's
  // loss were averaged over the cp group afterwards; loss and gradients are twice
  // the step's.
  m.push_back({"cp_loss_overscaled_by_cp", "llama3-8b", WithCp(Make(1, 1, 1, 1), 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 ScaleTasks(spec, p, "loss", "factor", 2);
                 std::vector<ir::TaskId> f = ScaleTasks(spec, p, "d.loss.total_nll", "factor", 2);
                 if (f.empty()) return std::nullopt;
                 // Reported first where the backward starts from the scaled seed.
                 const ir::Task& t = p.tasks[f[0]];
                 Where w{ItemName(t), "d.loss.total_nll", {t.device}, "scaled by 2"};
                 w.every_device = {0, 1};
                 return w;
               },
               FailureClass::kScaled});
  // RoPE not offset under context parallelism: the sequence is in four load-balanced
  // chunks of two tokens, rank 0 holding chunks 0 and 3; its second chunk's queries
  // rotated as positions 0..1 instead of 6..7.
  m.push_back({"cp_rope_positions_not_offset", "llama3-8b", WithCp(Make(1, 1, 1, 1), 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kRope)) {
                   ir::Task& t = p.tasks[id];
                   if (t.device != 0 || !t.attrs.Has("offset")) continue;
                   t.attrs.Erase("offset");
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {0},
                                "attribute 'offset' is 0 where the spec's piece has 6"};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongShard});
  // TP x CP halving the loss (the class of torchtitan #3280): on a tp2 x cp2 mesh the
  // chunks' shares of the loss averaged over the cp group where they must be summed:
  // the loss is half the step's.
  m.push_back({"cp_tp_loss_averaged_over_cp", "llama3-8b", WithCp(Make(1, 2, 1, 1), 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 std::optional<Where> w;
                 for (ir::Collective& c : p.collectives) {
                   if (c.kind != CollectiveKind::kAllReduce || c.phase != Phase::kForward ||
                       TensorName(spec, p, c.outputs[0]) != "loss") {
                     continue;
                   }
                   c.reduce = ir::ReduceOp::kAvg;
                   if (!w) w = Where{ItemName(c), "loss", c.devices, "scaled by 1/2"};
                 }
                 return w;
               },
               FailureClass::kScaled});
  // A wrong permutation of the chunks: the keys gathered over the cp group in the
  // other rank order, so every query attends to the keys of the wrong positions.
  m.push_back({"cp_keys_gathered_in_the_wrong_order", "llama3-8b", WithCp(Make(1, 1, 1, 1), 2),
               1, 0,
               FirstGatherInTheWrongOrder,
               FailureClass::kWrongGroup});
  // A wrong load-balancing permutation: rank r holds chunks r and 2cp - 1 - r, so the
  // second half of the keys comes from the ranks in reverse order; gathered in rank
  // order instead (the permutation of the contiguous layout), chunks 2 and 3 trade
  // places.
  m.push_back({"cp_balanced_second_half_in_rank_order", "llama3-8b",
               WithCp(Make(1, 1, 1, 1), 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (const ir::Collective& c : p.collectives) {
                   if (c.kind != CollectiveKind::kAllGather || c.phase != Phase::kForward ||
                       c.devices.size() != 2 || c.devices[0] < c.devices[1]) {
                     continue;
                   }
                   const ir::CollectiveId id = c.id;
                   SwapMembers(p, id, 0, 1);
                   const ir::Collective& x = p.collectives[id];
                   return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), x.devices,
                                "gathered order"};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongGroup});
  // The key gradient not reduced over the cp group: each rank keeps its own chunk of
  // the part its own queries give (the reduce-scatter into chunks replaced by a local
  // slice), as if the keys it gathered were its own.
  m.push_back({"cp_key_gradient_not_reduced", "llama3-8b", WithCp(Make(1, 1, 1, 1), 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kAttentionGrad)) {
                   const ir::TensorId dk = p.values[p.tasks[id].outputs[1]].sub.tensor;
                   for (const ir::Collective& c : p.collectives) {
                     if (c.kind != CollectiveKind::kReduceScatter ||
                         p.values[c.outputs[0]].sub.tensor != dk) {
                       continue;
                     }
                     const ir::Collective x = c;
                     std::optional<Where> w;
                     for (size_t i = 0; i < x.devices.size(); ++i) {
                       const ir::PlanValue in = p.values[x.inputs[i]];
                       ir::PlanValue kept = p.values[x.outputs[i]];
                       const int64_t size = kept.sub.box[x.dim].size();
                       ir::Task slice;
                       slice.kind = OpKind::kSlice;
                       slice.device = x.devices[i];
                       slice.info = ir::OpInfo{x.phase, x.layer, x.microbatch};
                       slice.attrs.Set("dim", int64_t{x.dim});
                       const int64_t at = kept.sub.box[x.dim].begin - in.sub.box[x.dim].begin;
                       slice.attrs.Set("begin", at);
                       slice.attrs.Set("end", at + size);
                       slice.inputs = {in.id};
                       slice.outputs = {AddValue(p, kept)};
                       Rewire(p, x.outputs[i], slice.outputs[0]);
                       const ir::TaskId t = AddTask(p, std::move(slice));
                       if (!w) {
                         w = Where{ItemName(p.tasks[t]), TensorName(spec, p, x.outputs[i]),
                                   {x.devices[i]}, ""};
                       }
                     }
                     Bypass(p, x.id);
                     return w;
                   }
                 }
                 return std::nullopt;
               },
               FailureClass::kMissingReduction});

  // ---- Scaling.
  // Megatron-LM context parallelism with per-token loss (TrainVerify's case
  // study): the loss multiplied by the parallel degree to undo an averaging that
  // no longer happens: loss and gradients over-scaled by the data-parallel degree.
  m.push_back({"loss_overscaled_by_dp", "gpt2", Make(2, 1, 1, 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 std::vector<ir::TaskId> f = ScaleTasks(spec, p, "loss.mb0", "factor", 2);
                 ScaleTasks(spec, p, "loss.mb1", "factor", 2);
                 ScaleTasks(spec, p, "d.loss.total_nll.mb0", "factor", 2);
                 ScaleTasks(spec, p, "d.loss.total_nll.mb1", "factor", 2);
                 if (f.empty()) return std::nullopt;
                 const ir::Task& t = p.tasks[f[0]];
                 Where w{ItemName(t), "loss.mb0", {t.device}, "scaled by 2"};
                 w.every_device = {0, 1};
                 return w;
               },
               FailureClass::kScaled});
  // DeepSpeed, pipeline parallelism with gradient accumulation: the micro-batch
  // gradients are summed instead of averaged.
  m.push_back({"pp_grad_accumulation_sums_microbatches", "gpt2", Make(1, 1, 2, 2), 2, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 std::vector<ir::TaskId> ids = ScaleTasks(spec, p, "d.loss.mb0", "factor", 2);
                 ScaleTasks(spec, p, "d.loss.mb1", "factor", 2);
                 if (ids.empty()) return std::nullopt;
                 const ir::Task& t = p.tasks[ids[0]];
                 return Where{ItemName(t), "d.loss.mb0", {t.device}, "scaled by 2"};
               },
               FailureClass::kScaled});
  // AReaL on Megatron's schedule: the loss divided by the number of
  // micro-batches on top of the caller's normalisation: the update is M times
  // too small.
  m.push_back({"loss_divided_by_microbatches_twice", "gpt2", Make(2, 1, 1, 2), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 std::vector<ir::TaskId> ids;
                 for (const char* t : {"loss.mb0.scaled", "loss.mb1.scaled", "d.loss.mb0",
                                       "d.loss.mb1"}) {
                   for (ir::TaskId id : ScaleTasks(spec, p, t, "factor", 0.5)) ids.push_back(id);
                 }
                 if (ids.empty()) return std::nullopt;
                 std::sort(ids.begin(), ids.end());
                 const ir::Task& t = p.tasks[ids[0]];
                 return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                              "scaled by 1/2"};
               },
               FailureClass::kScaled});
  // DeepSpeed MoE, torchtitan-style expert parallelism, Megatron-FSDP with
  // experts: expert gradients reduced once more over the group holding copies of
  // the expert (its data-parallel replicas), 2x with two of them (dp 4, ep 2).
  m.push_back({"ep_expert_grad_reduced_twice", "deepseek-v3-671b", Experts(4, 2), 0, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (const ir::Collective& c : p.collectives) {
                   if (c.kind != CollectiveKind::kAllReduce || c.devices.size() != 2 ||
                       TensorName(spec, p, c.outputs[0]).find(".moe.experts.w_") ==
                           std::string::npos) {
                     continue;
                   }
                   const ir::CollectiveId again = Repeat(p, c.id);
                   const ir::Collective& x = p.collectives[again];
                   return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), x.devices,
                                "scaled by 2"};
                 }
                 return std::nullopt;
               },
               FailureClass::kScaled});

  // ---- Double counting.
  // TransformerEngine (ROCm) and NeMo RL: a weight replicated over tensor
  // parallelism counted by every rank in the global grad norm.
  m.push_back({"grad_norm_counts_tp_replicas", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 // On rank 1, the zero standing for a replicated weight's square sum
                 // replaced by the rank's own square sum.
                 for (ir::TaskId id : TasksWriting(spec, p, "grad_sq.total")) {
                   ir::Task& acc = p.tasks[id];
                   if (acc.device != 1) continue;
                   for (ir::ValueId& in : acc.inputs) {
                     if (!p.values[in].sub.part.IsEmpty()) continue;
                     const std::string term = TensorName(spec, p, in);
                     for (ir::TaskId own : TasksWriting(spec, p, term)) {
                       if (p.tasks[own].device != 1) continue;
                       in = p.tasks[own].outputs[0];
                       auto c = CollectivesOf(spec, p, CollectiveKind::kAllReduce, "grad_sq.total");
                       if (c.empty()) return std::nullopt;
                       return Where{ItemName(p.collectives[c[0]]), "grad_sq.total", {0}, term};
                     }
                   }
                 }
                 return std::nullopt;
               },
               FailureClass::kDoubledPiece});
  // Megatron-LM with pipeline parallelism: the tied embedding's square sum
  // enters the grad norm twice (once per pipeline stage holding it).
  m.push_back({"grad_norm_counts_tied_embedding_twice", "gpt2", Make(1, 1, 2, 2), 2, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksWriting(spec, p, "grad_sq.total")) {
                   ir::Task& acc = p.tasks[id];
                   for (ir::ValueId in : acc.inputs) {
                     if (TensorName(spec, p, in) != "grad_sq.wte") continue;
                     acc.inputs.push_back(in);
                     return Where{ItemName(acc), "grad_sq.total", {acc.device}, "'grad_sq.wte' twice"};
                   }
                 }
                 return std::nullopt;
               },
               FailureClass::kDoubledPiece});
  // PyTorch zero-bubble input/weight split: the gradient of a weight used at two
  // sites (the tied embedding) double-counts one site's contribution.
  m.push_back({"tied_weight_grad_counts_one_site_twice", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kAdd)) {
                   ir::Task& t = p.tasks[id];
                   if (spec.tensor(spec.op(t.op).inputs[0]).name != "d.wte") continue;
                   t.inputs[1] = t.inputs[0];
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {t.device},
                                "'d.wte' twice"};
                 }
                 return std::nullopt;
               },
               FailureClass::kDoubledPiece});

  // ---- Local used as global, wrong shards.
  // Megatron-LM vocabulary-parallel cross-entropy, the local vocabulary used as
  // the global one: rank 1's pick indexes the targets as if its piece started
  // at 0.
  m.push_back({"vocab_parallel_pick_local_offset", "gpt2", Make(1, 2, 1, 1), 1, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 for (ir::TaskId id : TasksOfKind(p, OpKind::kPick)) {
                   ir::Task& t = p.tasks[id];
                   if (t.device != 1) continue;
                   t.attrs.Set("vocab_begin", int64_t{0});
                   return Where{ItemName(t), TensorName(spec, p, t.outputs[0]), {1}, "offset"};
                 }
                 return std::nullopt;
               },
               FailureClass::kWrongShard});
  // RoPE on a sequence shard without its offset: the rotation by position runs on
  // each half of the sequence as if it started at position 0.
  m.push_back({"rope_on_sequence_shard_without_offset", "llama3-8b", Make(1, 2, 1, 1), 1, 0,
               RopeOnSequenceHalves, FailureClass::kWrongShard});

  // ---- Wrong groups and peers.
  // ZeRO-3 parameter all-gather with its ranks in the wrong order.
  m.push_back({"zero3_allgather_rank_order", "gpt2", Make(2, 1, 1, 1, 1, false, 3), 1, 0,
               FirstGatherInTheWrongOrder,
               FailureClass::kWrongGroup});
  // An expert all-to-all over a mis-assigned group (TrainVerify's Megatron
  // expert-parallel group case): two members trade places.
  m.push_back({"moe_alltoall_wrong_group", "deepseek-v3-671b", Experts(4, 4), 0, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto c = FirstCollective(p, CollectiveKind::kAllToAll, Phase::kForward);
                 if (!c) return std::nullopt;
                 SwapMembers(p, *c, 1, 2);
                 const ir::Collective& x = p.collectives[*c];
                 return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), x.devices,
                              "the gathered order needs"};
               },
               FailureClass::kWrongGroup});
  // A pipeline gradient sent to the wrong stage: stage 0 receives stage 2's
  // gradient instead of stage 1's.
  m.push_back({"pp_send_to_wrong_stage", "llama3-8b", Make(1, 1, 4, 1), 4, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto from2 = Send(p, Phase::kBackward, 2, 1);
                 auto from1 = Send(p, Phase::kBackward, 1, 0);
                 if (!from2 || !from1) return std::nullopt;
                 ir::Collective& send = p.collectives[*from1];
                 send.devices = {2, 0};
                 send.inputs = p.collectives[*from2].inputs;
                 return Where{ItemName(send), TensorName(spec, p, send.outputs[0]), {0}};
               },
               FailureClass::kWrongGroup});
  // Criss-crossed pipeline transfers (PiPPy's interleaved 1F1B): the sends of
  // two micro-batches exchange their buffers.
  m.push_back({"pp_sends_microbatches_crossed", "gpt2", Make(1, 1, 2, 2), 2, 0,
               [](const ir::Graph& spec, ir::Plan& p) -> std::optional<Where> {
                 auto a = Send(p, Phase::kForward, 0, 1, 0);
                 auto b = Send(p, Phase::kForward, 0, 1, 1);
                 if (!a || !b) return std::nullopt;
                 std::swap(p.collectives[*a].inputs, p.collectives[*b].inputs);
                 const ir::Collective& x = p.collectives[*a];
                 return Where{ItemName(x), TensorName(spec, p, x.outputs[0]), {1}};
               },
               FailureClass::kWrongGroup});

  // ---- Schedules (CheckScheduleSafety).
  // Two devices issuing the collectives of one group in different orders: one
  // rank launches its data-parallel gradient all-reduces in another order.
  m.push_back({"collectives_issued_in_different_orders", "llama3-8b", Make(2, 1, 2, 2), 2, 0,
               [](const ir::Graph&, ir::Plan& p) { return DeferAllReduce(p); },
               FailureClass::kDeadlock, /*scheduled=*/true});
  // PyTorch pipelining with deferred receives: a stage defers a send past a
  // later one; its peer waits to receive the first (send and receive orders
  // disagree).
  m.push_back({"pp_deferred_send_deadlock", "gpt2", Make(1, 1, 2, 4), 2, 2,
               [](const ir::Graph&, ir::Plan& p) -> std::optional<Where> {
                 auto first = Send(p, Phase::kForward, 0, 1, 0);
                 auto second = Send(p, Phase::kForward, 0, 1, 1);
                 if (!first || !second) return std::nullopt;
                 std::vector<ir::PlanStep>& order = p.order[0];
                 const ir::PlanStep a{/*is_collective=*/true, *first};
                 const ir::PlanStep b{/*is_collective=*/true, *second};
                 order.erase(std::find(order.begin(), order.end(), a));
                 order.insert(std::find(order.begin(), order.end(), b) + 1, a);
                 return Where{"deadlock", "", {0, 1}, "waits at send_recv"};
               },
               FailureClass::kDeadlock, /*scheduled=*/true});
  return m;
}

class RealBugTest : public ::testing::TestWithParam<Mutant> {};

// Each reproduced bug is rejected with its class at the mutated place.
TEST_P(RealBugTest, IsRejectedAtItsPlace) { ExpectRejected(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Corpus, RealBugTest, ::testing::ValuesIn(Corpus()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::verify::corpus
