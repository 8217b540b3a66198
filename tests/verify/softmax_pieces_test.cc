// Attention over a sequence split in two, as context parallelism computes it: the
// device holding the second block of queries attends to each block of keys on its
// own (the block before it in full, its own block under the causal mask, each piece
// placed by its q_offset and k_offset) and merges the two partial softmaxes by their
// log-sum-exp (attention_merge). The derivation takes each piece for a chunk of the
// reduction over the keys (the diagonal piece's chunk reaching over the keys no query
// of the block sees) and the merge for their union; the law that the chunks merge
// into the whole is proved with the online-softmax identity. Merging by anything
// else, pairing a value with another piece's log-sum-exp, a wrong offset or a
// missing piece is refuted.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "tests/verify/hand_plan_testutil.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ir::Box;
using ir::OpKind;
using ir::ValueId;
using testing::Failures;
using testing::HandPlan;
using testing::VerifyHandPlan;

// Tensors: q 0, k 1, v 2, o 3, lse 4. Op: attention 0.
constexpr char kSpec[] = R"(
graph "attend" {
  %q = input f64[1,4,2,2]
  %k = input f64[1,4,1,2]
  %v = input f64[1,4,1,3]
  %o, %lse = attention(%q, %k, %v) {causal=1, scale=0.5} : f64[1,4,2,3], f64[1,4,2] @forward
  output %o
  output %lse
}
)";

struct Options {
  int64_t diagonal_q_offset = 2;  // the second device's own block: queries 2..3
  // Torch's ring attention calls each chunk without offsets: the block before its
  // own as full attention (causal 0), its own block as causal from position 0.
  bool as_torch_calls = false;
  int64_t before_causal = 1;  // with as_torch_calls: the earlier block's causal flag
  bool merge = true;              // merge the two pieces (else claim the diagonal one whole)
  OpKind merge_kind = OpKind::kAttentionMerge;
  bool swap_lse = false;          // pair each value with the other piece's log-sum-exp
};

// The plan refuted, its failures naming `words`.
void ExpectRefuted(const char* spec, const ir::Plan& plan, const std::string& words) {
  const VerifyReport r = VerifyHandPlan(spec, plan);
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  EXPECT_NE(Failures(r).find(words), std::string::npos) << Failures(r);
}

Box Rows(int64_t begin, int64_t end, int64_t last) {
  Box b{{0, 1}, {begin, end}, {0, 2}};
  if (last > 0) b.push_back({0, last});
  return b;
}

// Device 0 holds queries 0..1 and attends to keys 0..1 (all it sees); device 1 holds
// queries 2..3 and attends to keys 0..1 and 2..3.
ir::Plan SplitSequence(const Options& opt) {
  HandPlan b(ir::Mesh({ir::MeshAxis{"cp", 2}}));
  auto attrs = [](int64_t q_offset, int64_t k_offset) {
    ir::AttrMap a{{"causal", int64_t{1}}, {"scale", 0.5}};
    if (q_offset != 0) a.Set("q_offset", q_offset);
    if (k_offset != 0) a.Set("k_offset", k_offset);
    return a;
  };
  auto kv = [&](int64_t device, int64_t begin, int64_t end) {
    const Box keys{{0, 1}, {begin, end}, {0, 1}, {0, 2}};
    const Box values{{0, 1}, {begin, end}, {0, 1}, {0, 3}};
    return std::vector<ValueId>{b.Value(device, 1, keys, "full"),
                                b.Value(device, 2, values, "full")};
  };
  // Device 0: its block of queries against the keys it sees, complete.
  {
    const ValueId q = b.Value(0, 0, Rows(0, 2, 2), "full");
    const std::vector<ValueId> k = kv(0, 0, 2);
    const ValueId o = b.Value(0, 3, Rows(0, 2, 3), "full");
    const ValueId l = b.Value(0, 4, Rows(0, 2, 0), "full");
    b.Task(0, 0, OpKind::kAttention, {q, k[0], k[1]}, {o, l}, attrs(0, 0));
    b.plan.outputs.push_back(o);
    b.plan.outputs.push_back(l);
  }
  // Device 1: a partial softmax per block of keys, merged.
  const ValueId q = b.Value(1, 0, Rows(2, 4, 2), "full");
  const std::vector<ValueId> before = kv(1, 0, 2), own = kv(1, 2, 4);
  auto partial = [&](int64_t tensor, int64_t last, const char* part) {
    const ValueId id = b.Value(1, tensor, Rows(2, 4, last), opt.merge ? part : "full");
    if (opt.merge) b.plan.values[id].sub.combine = ir::ReduceOp::kLogSumExp;
    return id;
  };
  const ValueId o1 = partial(3, 3, "[0,1/2)"), l1 = partial(4, 0, "[0,1/2)");
  ir::AttrMap before_attrs = attrs(2, 0);
  ir::AttrMap own_attrs = attrs(opt.diagonal_q_offset, 2);
  if (opt.as_torch_calls) {
    before_attrs = ir::AttrMap{{"causal", opt.before_causal}, {"scale", 0.5}};
    own_attrs = attrs(0, 0);
  }
  b.Task(1, 0, OpKind::kAttention, {q, before[0], before[1]}, {o1, l1}, before_attrs);
  const ValueId o2 = partial(3, 3, "[1/2,1)"), l2 = partial(4, 0, "[1/2,1)");
  b.Task(1, 0, OpKind::kAttention, {q, own[0], own[1]}, {o2, l2}, own_attrs);
  if (!opt.merge) {
    b.plan.outputs.push_back(o2);
    b.plan.outputs.push_back(l2);
    return std::move(b.plan);
  }
  const ValueId o = b.Value(1, 3, Rows(2, 4, 3), "full");
  const ValueId l = b.Value(1, 4, Rows(2, 4, 0), "full");
  if (opt.merge_kind == OpKind::kAttentionMerge) {
    b.Task(1, ir::kNoId, OpKind::kAttentionMerge,
           {o1, opt.swap_lse ? l2 : l1, o2, opt.swap_lse ? l1 : l2}, {o, l});
  } else {
    b.Task(1, ir::kNoId, opt.merge_kind, {o1, o2}, {o});
    b.Task(1, ir::kNoId, opt.merge_kind, {l1, l2}, {l});
  }
  b.plan.outputs.push_back(o);
  b.plan.outputs.push_back(l);
  return std::move(b.plan);
}

TEST(SoftmaxPiecesTest, KeyBlocksMergedByTheirLogSumExpAreTheAttention) {
  const VerifyReport r = VerifyHandPlan(kSpec, SplitSequence({}));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

// The chunks as torch's ring attention calls them, without offsets: the block before
// the device's own, which its queries see whole, as full attention; its own block as
// causal from position 0, the same mask as at offsets 2 and 2.
TEST(SoftmaxPiecesTest, ChunkCallsWithoutOffsetsComputeTheSamePieces) {
  Options opt;
  opt.as_torch_calls = true;
  opt.before_causal = 0;
  const VerifyReport r = VerifyHandPlan(kSpec, SplitSequence(opt));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

// The earlier block called causal from position 0 too: its queries would see only
// part of the keys they see.
TEST(SoftmaxPiecesTest, AnEarlierBlockMaskedAsTheDiagonalIsRefuted) {
  Options opt;
  opt.as_torch_calls = true;
  opt.before_causal = 1;
  ExpectRefuted(kSpec, SplitSequence(opt),
                "attribute 'q_offset' is 0 where the spec's piece has 2");
}

TEST(SoftmaxPiecesTest, PartialSoftmaxesSummedAreRefuted) {
  Options opt;
  opt.merge_kind = OpKind::kAccumulate;
  ExpectRefuted(kSpec, SplitSequence(opt), "combines a partial softmax by sum");
}

TEST(SoftmaxPiecesTest, AValueMergedWithAnotherPiecesLogSumExpIsRefuted) {
  Options opt;
  opt.swap_lse = true;
  ExpectRefuted(kSpec, SplitSequence(opt), "with the log-sum-exp of another piece");
}

// The diagonal block placed at position 0: its queries see the wrong keys (the
// RoPE-offset class of bug for attention's mask).
TEST(SoftmaxPiecesTest, ABlockAtTheWrongOffsetIsRefuted) {
  Options opt;
  opt.diagonal_q_offset = 0;
  ExpectRefuted(kSpec, SplitSequence(opt),
                "wrong_shard: attribute 'q_offset' is 0 where the spec's piece has 2");
}

// The device keeps only its own block of keys: the keys before it are missing.
TEST(SoftmaxPiecesTest, TheDiagonalBlockAloneIsRefuted) {
  Options opt;
  opt.merge = false;
  const VerifyReport r = VerifyHandPlan(kSpec, SplitSequence(opt));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent) << Failures(r);
}

// ---- the backward, over the same blocks

// Tensors: q 0, k 1, v 2, dout 3, o 4, lse 5, dq 6, dk 7, dv 8. Ops: attention 0,
// attention_grad 1.
constexpr char kGradSpec[] = R"(
graph "attend_grad" {
  %q = input f64[1,4,2,2]
  %k = input f64[1,4,1,2]
  %v = input f64[1,4,1,3]
  %dout = input f64[1,4,2,3]
  %o, %lse = attention(%q, %k, %v) {causal=1, scale=0.5} : f64[1,4,2,3], f64[1,4,2] @forward
  %dq, %dk, %dv = attention_grad(%q, %k, %v, %o, %lse, %dout) {causal=1, scale=0.5} : f64[1,4,2,2], f64[1,4,1,2], f64[1,4,1,3] @backward
  output %dq
  output %dk
  output %dv
}
)";

struct GradOptions {
  bool reduce_first_keys = true;  // all-reduce the first block's dk and dv over both devices
  int64_t diagonal_k_offset = 2;
};

// Device d holds queries [2d, 2d + 2) with the forward's o and lse for them (computed
// whole on each device, from keys gathered), and the backward as context parallelism
// runs it given the whole attention's log-sum-exp: device 0 its block against keys
// 0..1; device 1 against keys 0..1 and 2..3, its dq summed locally. The first keys'
// dk and dv then hold each device's queries' part, reduced over both.
ir::Plan BackwardBlocks(const GradOptions& opt) {
  HandPlan b(ir::Mesh({ir::MeshAxis{"cp", 2}}));
  auto attrs = [](int64_t q_offset, int64_t k_offset) {
    ir::AttrMap a{{"causal", int64_t{1}}, {"scale", 0.5}};
    if (q_offset != 0) a.Set("q_offset", q_offset);
    if (k_offset != 0) a.Set("k_offset", k_offset);
    return a;
  };
  auto keys = [](int64_t begin, int64_t end, int64_t last) {
    return Box{{0, 1}, {begin, end}, {0, 1}, {0, last}};
  };
  std::vector<ValueId> dk_first(2), dv_first(2);
  for (int64_t d = 0; d < 2; ++d) {
    const ValueId q = b.Value(d, 0, Rows(2 * d, 2 * d + 2, 2), "full");
    const ValueId k = b.Value(d, 1, keys(0, 4, 2), "full");
    const ValueId v = b.Value(d, 2, keys(0, 4, 3), "full");
    const ValueId dout = b.Value(d, 3, Rows(2 * d, 2 * d + 2, 3), "full");
    const ValueId o = b.Value(d, 4, Rows(2 * d, 2 * d + 2, 3), "full");
    const ValueId l = b.Value(d, 5, Rows(2 * d, 2 * d + 2, 0), "full");
    b.Task(d, 0, OpKind::kAttention, {q, k, v}, {o, l}, attrs(2 * d, 0));
    // Keys 0..1 (all this device's queries see of them).
    const ValueId k0 = b.Value(d, 1, keys(0, 2, 2), "full");
    const ValueId v0 = b.Value(d, 2, keys(0, 2, 3), "full");
    b.Task(d, ir::kNoId, OpKind::kSlice, {k}, {k0},
           ir::AttrMap{{"dim", int64_t{1}}, {"begin", int64_t{0}}, {"end", int64_t{2}}});
    b.Task(d, ir::kNoId, OpKind::kSlice, {v}, {v0},
           ir::AttrMap{{"dim", int64_t{1}}, {"begin", int64_t{0}}, {"end", int64_t{2}}});
    const char* query_part = d == 0 ? "[0,1/2)" : "[1/2,1)";
    const ValueId dq = b.Value(d, 6, Rows(2 * d, 2 * d + 2, 2), d == 0 ? "full" : "[0,1/2)");
    dk_first[d] = b.Value(d, 7, keys(0, 2, 2), query_part);
    dv_first[d] = b.Value(d, 8, keys(0, 2, 3), query_part);
    b.Task(d, 1, OpKind::kAttentionGrad, {q, k0, v0, o, l, dout}, {dq, dk_first[d], dv_first[d]},
           attrs(2 * d, 0));
    if (d == 0) {
      b.plan.outputs.push_back(dq);
      continue;
    }
    // Device 1's own block of keys: its dk and dv complete (queries 0..1 see none).
    const ValueId k1 = b.Value(d, 1, keys(2, 4, 2), "full");
    const ValueId v1 = b.Value(d, 2, keys(2, 4, 3), "full");
    b.Task(d, ir::kNoId, OpKind::kSlice, {k}, {k1},
           ir::AttrMap{{"dim", int64_t{1}}, {"begin", int64_t{2}}, {"end", int64_t{4}}});
    b.Task(d, ir::kNoId, OpKind::kSlice, {v}, {v1},
           ir::AttrMap{{"dim", int64_t{1}}, {"begin", int64_t{2}}, {"end", int64_t{4}}});
    const ValueId dq1 = b.Value(d, 6, Rows(2, 4, 2), "[1/2,1)");
    const ValueId dk1 = b.Value(d, 7, keys(2, 4, 2), "full");
    const ValueId dv1 = b.Value(d, 8, keys(2, 4, 3), "full");
    b.Task(d, 1, OpKind::kAttentionGrad, {q, k1, v1, o, l, dout}, {dq1, dk1, dv1},
           attrs(2, opt.diagonal_k_offset));
    const ValueId dq_all = b.Value(d, 6, Rows(2, 4, 2), "full");
    b.Task(d, ir::kNoId, OpKind::kAccumulate, {dq, dq1}, {dq_all});
    b.plan.outputs.push_back(dq_all);
    b.plan.outputs.push_back(dk1);
    b.plan.outputs.push_back(dv1);
  }
  for (const std::vector<ValueId>* partial : {&dk_first, &dv_first}) {
    if (!opt.reduce_first_keys) {
      for (ValueId v : *partial) {
        b.plan.values[v].sub.part = ir::ValuePart::Full();
        b.plan.outputs.push_back(v);
      }
      continue;
    }
    ir::Collective reduce;
    reduce.id = static_cast<ir::CollectiveId>(b.plan.collectives.size());
    reduce.devices = {0, 1};
    reduce.inputs = *partial;
    reduce.phase = ir::Phase::kBackward;
    for (int64_t d = 0; d < 2; ++d) {
      const ir::PlanValue& like = b.plan.values[(*partial)[d]];
      reduce.outputs.push_back(b.Value(d, like.sub.tensor, like.sub.box, "full"));
      b.plan.outputs.push_back(reduce.outputs.back());
    }
    b.plan.collectives.push_back(reduce);
  }
  return std::move(b.plan);
}

TEST(SoftmaxPiecesTest, TheBackwardOverBlocksGivenTheWholeLogSumExpIsProved) {
  const VerifyReport r = VerifyHandPlan(kGradSpec, BackwardBlocks({}));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

// Each device keeps its own queries' part of the first keys' gradient: the key
// gradient not reduced around the cp group.
TEST(SoftmaxPiecesTest, AKeyGradientNotReducedOverTheGroupIsRefuted) {
  GradOptions opt;
  opt.reduce_first_keys = false;
  ExpectRefuted(kGradSpec, BackwardBlocks(opt), "missing_reduction");
}

TEST(SoftmaxPiecesTest, ABackwardBlockAtTheWrongKeyOffsetIsRefuted) {
  GradOptions opt;
  opt.diagonal_k_offset = 0;
  ExpectRefuted(kGradSpec, BackwardBlocks(opt),
                "attribute 'k_offset' is 0 where the spec's piece has 2");
}

}  // namespace
}  // namespace loom::verify
