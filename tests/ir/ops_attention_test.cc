#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using ::loom::ir::testing::ApplyGradRule;
using ::loom::ir::testing::Dot;
using ::loom::ir::testing::ExpectNear;
using ::loom::ir::testing::F64;
using ::loom::ir::testing::InferError;
using ::loom::ir::testing::RandomTensor;
using ::loom::ir::testing::Run1;
using ::loom::ir::testing::RunOp;
using ::loom::ir::testing::Signature;

// Offset of [b, pos, head, x] in a row-major [B, L, H, D] tensor.
int64_t Index(const HostTensor& t, int64_t b, int64_t pos, int64_t head, int64_t x) {
  const auto& d = t.shape.dims();
  return ((b * d[1] + pos) * d[2] + head) * d[3] + x;
}

// softmax(scale q k^T + mask) v written out directly: the full score matrix per
// (batch, query head), masked entries -inf (query i at position q_offset + i sees
// key j at k_offset + j up to its own position), plain exp / sum (no max shift); and
// each row's log(sum exp(scores)).
struct Reference {
  HostTensor out;
  HostTensor lse;
};
Reference ReferenceAttention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                             bool causal, double scale, int64_t q_offset = 0,
                             int64_t k_offset = 0) {
  const int64_t batch = q.shape.dim(0), s = q.shape.dim(1), hq = q.shape.dim(2);
  const int64_t dk = q.shape.dim(3), t = k.shape.dim(1), hkv = k.shape.dim(2);
  const int64_t dv = v.shape.dim(3);
  Reference r{HostTensor(Shape({batch, s, hq, dv}), DType::kF64),
              HostTensor(Shape({batch, s, hq}), DType::kF64)};
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> scores(t);
        double total = 0;
        for (int64_t j = 0; j < t; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < dk; ++x) dot += q[Index(q, b, i, h, x)] * k[Index(k, b, j, g, x)];
          const bool masked = causal && k_offset + j > q_offset + i;
          scores[j] = masked ? -std::numeric_limits<double>::infinity() : scale * dot;
          total += std::exp(scores[j]);
        }
        r.lse[(b * s + i) * hq + h] = std::log(total);
        for (int64_t j = 0; j < t; ++j) {
          const double p = total == 0 ? 0 : std::exp(scores[j]) / total;
          for (int64_t x = 0; x < dv; ++x) {
            r.out[Index(r.out, b, i, h, x)] += p * v[Index(v, b, j, g, x)];
          }
        }
      }
    }
  }
  return r;
}

AttrMap AttentionAttrs(int64_t causal, double scale) {
  return AttrMap{{"causal", causal}, {"scale", scale}};
}

// Both outputs of attention: the weighted values and each row's log-sum-exp.
std::vector<HostTensor> RunAttention(const std::vector<HostTensor>& in, const AttrMap& attrs) {
  auto out = RunOp(OpKind::kAttention, in, attrs);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {HostTensor(), HostTensor()};
  EXPECT_EQ(out->size(), 2u);
  return *std::move(out);
}

// Rows [begin, end) along dim 1 of a [b, l, ...] tensor.
HostTensor Rows(const HostTensor& x, int64_t begin, int64_t end) {
  const std::vector<int64_t> dims = x.shape.dims();
  const int64_t inner = x.size() / (dims[0] * dims[1]);
  std::vector<int64_t> out_dims = dims;
  out_dims[1] = end - begin;
  HostTensor out{Shape(out_dims), x.dtype};
  for (int64_t b = 0; b < dims[0]; ++b) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t e = 0; e < inner; ++e) {
        out[(b * (end - begin) + i - begin) * inner + e] = x[(b * dims[1] + i) * inner + e];
      }
    }
  }
  return out;
}

// ---- attention ---------------------------------------------------------------------

// Non-causal GQA equals softmax(scale q k^T) v with query head h reading kv head h / (hq/hkv);
// the second output is each row's log-sum-exp of its scores.
TEST(AttentionTest, MatchesExplicitSoftmaxOfScores) {
  std::mt19937_64 rng(1);
  HostTensor q = RandomTensor(Shape({2, 3, 4, 3}), rng);
  HostTensor k = RandomTensor(Shape({2, 4, 2, 3}), rng);
  HostTensor v = RandomTensor(Shape({2, 4, 2, 2}), rng);
  std::vector<HostTensor> y = RunAttention({q, k, v}, AttentionAttrs(0, 0.6));
  Reference r = ReferenceAttention(q, k, v, /*causal=*/false, 0.6);
  ExpectNear(y[0], r.out);
  ExpectNear(y[1], r.lse);
}

// With causal masking query i sees keys 0..i only: the first query returns v[0].
TEST(AttentionTest, CausalQueryAttendsOnlyToEarlierKeys) {
  std::mt19937_64 rng(2);
  HostTensor q = RandomTensor(Shape({1, 4, 2, 3}), rng);
  HostTensor k = RandomTensor(Shape({1, 4, 1, 3}), rng);
  HostTensor v = RandomTensor(Shape({1, 4, 1, 2}), rng);
  HostTensor y = RunAttention({q, k, v}, AttentionAttrs(1, 0.8))[0];
  ExpectNear(y, ReferenceAttention(q, k, v, /*causal=*/true, 0.8).out);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t x = 0; x < 2; ++x) {
      EXPECT_NEAR(y[Index(y, 0, 0, h, x)], v[Index(v, 0, 0, 0, x)], 1e-15);
    }
  }
  // Changing the last key and value leaves every earlier query unchanged.
  HostTensor k2 = k;
  HostTensor v2 = v;
  for (int64_t x = 0; x < 3; ++x) k2[Index(k2, 0, 3, 0, x)] += 1.0;
  for (int64_t x = 0; x < 2; ++x) v2[Index(v2, 0, 3, 0, x)] -= 1.0;
  HostTensor y2 = RunAttention({q, k2, v2}, AttentionAttrs(1, 0.8))[0];
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t x = 0; x < 2; ++x) EXPECT_EQ(y2[Index(y2, 0, i, h, x)], y[Index(y, 0, i, h, x)]);
    }
  }
}

// Without attributes attention is causal with scale 1/sqrt(dk).
TEST(AttentionTest, DefaultsToCausalWithInverseSqrtScale) {
  std::mt19937_64 rng(3);
  HostTensor q = RandomTensor(Shape({1, 3, 2, 4}), rng);
  HostTensor k = RandomTensor(Shape({1, 3, 2, 4}), rng);
  HostTensor v = RandomTensor(Shape({1, 3, 2, 2}), rng);
  ExpectNear(RunAttention({q, k, v}, {})[0],
             ReferenceAttention(q, k, v, /*causal=*/true, 0.5).out);
}

// A block of queries placed at its offset computes that block of the whole attention.
TEST(AttentionTest, QueryBlockAtItsOffsetIsThatBlockOfTheWhole) {
  std::mt19937_64 rng(9);
  HostTensor q = RandomTensor(Shape({1, 6, 2, 3}), rng);
  HostTensor k = RandomTensor(Shape({1, 6, 1, 3}), rng);
  HostTensor v = RandomTensor(Shape({1, 6, 1, 2}), rng);
  std::vector<HostTensor> whole = RunAttention({q, k, v}, AttentionAttrs(1, 0.7));
  AttrMap attrs = AttentionAttrs(1, 0.7);
  attrs.Set("q_offset", int64_t{2});
  std::vector<HostTensor> block = RunAttention({Rows(q, 2, 4), k, v}, attrs);
  ExpectNear(block[0], Rows(whole[0], 2, 4));
  ExpectNear(block[1], Rows(whole[1], 2, 4));
}

// Attention over two chunks of the keys, each placed at its offset, merges into the
// attention over all of them (the online-softmax identity), causal chunks included.
TEST(AttentionTest, KeyChunksMergeIntoTheWhole) {
  std::mt19937_64 rng(10);
  HostTensor q = RandomTensor(Shape({2, 4, 2, 3}), rng);
  HostTensor k = RandomTensor(Shape({2, 6, 2, 3}), rng);
  HostTensor v = RandomTensor(Shape({2, 6, 2, 2}), rng);
  for (int64_t causal : {0, 1}) {
    SCOPED_TRACE(causal);
    AttrMap attrs = AttentionAttrs(causal, 0.5);
    attrs.Set("q_offset", int64_t{2});  // queries 2..5 of the six positions
    std::vector<HostTensor> whole = RunAttention({q, k, v}, attrs);
    std::vector<HostTensor> first = RunAttention({q, Rows(k, 0, 3), Rows(v, 0, 3)}, attrs);
    attrs.Set("k_offset", int64_t{3});
    std::vector<HostTensor> second = RunAttention({q, Rows(k, 3, 6), Rows(v, 3, 6)}, attrs);
    auto merged =
        RunOp(OpKind::kAttentionMerge, {first[0], first[1], second[0], second[1]}, {});
    ASSERT_TRUE(merged.ok()) << merged.status();
    ExpectNear((*merged)[0], whole[0], 1e-12);
    ExpectNear((*merged)[1], whole[1], 1e-12);
    // Query 2 sees none of keys 3..5 under the mask: 0 and -inf, which merge as nothing.
    if (causal == 1) {
      EXPECT_EQ(second[0][Index(second[0], 0, 0, 0, 0)], 0.0);
      EXPECT_EQ(second[1][0], -std::numeric_limits<double>::infinity());
    }
  }
}

// Scores in the thousands neither overflow nor produce NaN: the softmax is shifted.
TEST(AttentionTest, StaysFiniteForLargeScores) {
  HostTensor q(Shape({1, 1, 1, 1}), DType::kF64);
  q[0] = 100.0;
  HostTensor k(Shape({1, 3, 1, 1}), DType::kF64);
  k.data = {10.0, 30.0, 20.0};
  HostTensor v(Shape({1, 3, 1, 1}), DType::kF64);
  v.data = {1.0, 2.0, 3.0};
  std::vector<HostTensor> y = RunAttention({q, k, v}, AttentionAttrs(0, 1.0));
  ASSERT_EQ(y[0].size(), 1);
  EXPECT_DOUBLE_EQ(y[0][0], 2.0);  // key 1 wins by e^1000
  EXPECT_NEAR(y[1][0], 3000.0, 1e-9);
}

// Mismatched batch, head size, key length, head grouping and bad attributes are rejected.
TEST(AttentionTest, RejectsInconsistentShapes) {
  auto error = [](std::vector<int64_t> q, std::vector<int64_t> k, std::vector<int64_t> v,
                  AttrMap attrs = {}) {
    return std::string(InferError(OpKind::kAttention, {F64(q), F64(k), F64(v)}, attrs).message());
  };
  EXPECT_EQ(error({2, 3, 4, 8}, {1, 3, 2, 8}, {2, 3, 2, 8}),
            "input 1 has size 1 at dim 0, expected 2 like dim 0 of input 0");
  EXPECT_EQ(error({2, 3, 4, 8}, {2, 3, 2, 4}, {2, 3, 2, 8}),
            "input 1 has size 4 at dim 3, expected 8 like dim 3 of input 0");
  EXPECT_EQ(error({2, 3, 4, 8}, {2, 3, 2, 8}, {2, 2, 2, 8}),
            "input 2 has size 2 at dim 1, expected 3 like dim 1 of input 1");
  EXPECT_EQ(error({2, 3, 4, 8}, {2, 3, 3, 8}, {2, 3, 3, 8}),
            "query heads (4) are not a multiple of key/value heads (3)");
  EXPECT_EQ(error({2, 3, 4, 8}, {2, 5, 2, 8}, {2, 5, 2, 8}, {{"causal", int64_t{2}}}),
            "attribute 'causal' is 2, expected 0 or 1");
  EXPECT_EQ(error({2, 3, 4, 8}, {2, 5, 2, 8}, {2, 5, 2, 8}, {{"k_offset", int64_t{-1}}}),
            "attribute 'k_offset' is negative");
  EXPECT_EQ(error({2, 3, 4}, {2, 3, 2, 8}, {2, 3, 2, 8}), "input 0 has 3 dims, expected 4");
  auto out = InferOutputTypes(OpKind::kAttention,
                              {F64({2, 3, 4, 8}), F64({2, 5, 2, 8}), F64({2, 5, 2, 6})},
                              {{"causal", int64_t{0}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[1], F64({2, 3, 4}));
  // A 16-bit attention keeps its log-sum-exp in float32.
  auto bf16 = InferOutputTypes(OpKind::kAttention,
                               {TensorType{Shape({1, 2, 1, 2}), DType::kBF16},
                                TensorType{Shape({1, 2, 1, 2}), DType::kBF16},
                                TensorType{Shape({1, 2, 1, 2}), DType::kBF16}},
                               {});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ((*bf16)[1].dtype, DType::kF32);
}

// Query and kv heads split together; queries split as blocks, keys as partial softmaxes.
TEST(AttentionTest, SignatureCouplesQueryAndKvHeads) {
  EXPECT_EQ(
      Signature(OpKind::kAttention, {F64({2, 3, 4, 8}), F64({2, 3, 2, 8}), F64({2, 3, 2, 6})}, {}),
      "b s h dk, b t g dk, b t g dv -> b s h dv, b s h | dk:fixed dv:fixed t:logsumexp "
      "coupled(h,g)");
}

// 2*b*hq*(dk+dv) per (query, key) pair attended: a causal square keeps (t+1)/(2t), a
// block of queries after its keys all of them; the backward costs 2.5x.
TEST(AttentionTest, FlopsCountTheAttendedPairs) {
  std::vector<TensorType> in = {F64({1, 4, 2, 3}), F64({1, 4, 1, 3}), F64({1, 4, 1, 2})};
  std::vector<TensorType> out = {F64({1, 4, 2, 2}), F64({1, 4, 2})};
  const double full = 2.0 * 1 * 2 * 4 * 4 * (3 + 2);
  EXPECT_EQ(GetOpSchema(OpKind::kAttention).flops(in, out, {{"causal", int64_t{0}}}), full);
  EXPECT_EQ(GetOpSchema(OpKind::kAttention).flops(in, out, {}), full * 5.0 / 8.0);
  EXPECT_EQ(GetOpSchema(OpKind::kAttention).flops(in, out, {{"q_offset", int64_t{4}}}), full);
  EXPECT_EQ(GetOpSchema(OpKind::kAttention).flops(in, out, {{"k_offset", int64_t{4}}}), 0.0);
  EXPECT_EQ(GetOpSchema(OpKind::kAttention).flops(in, out, {{"q_offset", int64_t{2}}}),
            full * (3 + 4 + 4 + 4) / 16.0);
  std::vector<TensorType> grad_in = {in[0], in[1], in[2], out[0], out[1], out[0]};
  EXPECT_EQ(GetOpSchema(OpKind::kAttentionGrad).flops(grad_in, {in[0], in[1], in[2]}, {}),
            2.5 * full * 5.0 / 8.0);
}

// ---- attention_grad ------------------------------------------------------------------

// dq, dk, dv equal central differences of sum(dout * attention(q, k, v)); the
// backward reads the forward's output and log-sum-exp.
TEST(AttentionGradTest, MatchesFiniteDifferencesOfAttention) {
  struct Case {
    std::vector<int64_t> q, k, v;
    AttrMap attrs;
  };
  std::vector<Case> cases = {
      {{1, 3, 4, 2}, {1, 3, 2, 2}, {1, 3, 2, 3}, {}},
      {{2, 2, 2, 3}, {2, 3, 1, 3}, {2, 3, 1, 2}, AttentionAttrs(0, 0.9)},
      {{1, 2, 2, 2}, {1, 4, 1, 2}, {1, 4, 1, 2}, {{"q_offset", int64_t{1}}}},
  };
  std::mt19937_64 rng(4);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.attrs.ToString());
    std::vector<HostTensor> in = {RandomTensor(Shape(c.q), rng), RandomTensor(Shape(c.k), rng),
                                  RandomTensor(Shape(c.v), rng)};
    HostTensor dout = RandomTensor(Shape({c.q[0], c.q[1], c.q[2], c.v[3]}), rng);
    auto loss = [&](const std::vector<HostTensor>& x) {
      HostTensor y = RunAttention(x, c.attrs)[0];
      double sum = 0;
      for (int64_t i = 0; i < y.size(); ++i) sum += y[i] * dout[i];
      return sum;
    };
    std::vector<HostTensor> fwd = RunAttention(in, c.attrs);
    auto grads = RunOp(OpKind::kAttentionGrad, {in[0], in[1], in[2], fwd[0], fwd[1], dout},
                       c.attrs);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_EQ(grads->size(), 3u);
    constexpr double kStep = 1e-6;
    for (int w = 0; w < 3; ++w) {
      ASSERT_TRUE((*grads)[w].shape.SameDims(in[w].shape));
      for (int64_t e = 0; e < in[w].size(); ++e) {
        std::vector<HostTensor> up = in;
        std::vector<HostTensor> down = in;
        up[w][e] += kStep;
        down[w][e] -= kStep;
        EXPECT_NEAR((*grads)[w][e], (loss(up) - loss(down)) / (2 * kStep), 1e-8)
            << "input " << w << " element " << e;
      }
    }
  }
}

// Given the whole attention's log-sum-exp, the backward over chunks of the keys sums
// to the whole's dq and gives each chunk's dk and dv.
TEST(AttentionGradTest, KeyChunksAddUpGivenTheWholeLogSumExp) {
  std::mt19937_64 rng(11);
  HostTensor q = RandomTensor(Shape({1, 4, 2, 2}), rng);
  HostTensor k = RandomTensor(Shape({1, 4, 1, 2}), rng);
  HostTensor v = RandomTensor(Shape({1, 4, 1, 3}), rng);
  HostTensor dout = RandomTensor(Shape({1, 4, 2, 3}), rng);
  std::vector<HostTensor> fwd = RunAttention({q, k, v}, {});
  auto whole = RunOp(OpKind::kAttentionGrad, {q, k, v, fwd[0], fwd[1], dout}, {});
  auto first = RunOp(OpKind::kAttentionGrad,
                     {q, Rows(k, 0, 2), Rows(v, 0, 2), fwd[0], fwd[1], dout}, {});
  auto second = RunOp(OpKind::kAttentionGrad,
                      {q, Rows(k, 2, 4), Rows(v, 2, 4), fwd[0], fwd[1], dout},
                      {{"k_offset", int64_t{2}}});
  ASSERT_TRUE(whole.ok() && first.ok() && second.ok());
  HostTensor dq = (*first)[0];
  for (int64_t e = 0; e < dq.size(); ++e) dq[e] += (*second)[0][e];
  ExpectNear(dq, (*whole)[0], 1e-12);
  ExpectNear((*first)[1], Rows((*whole)[1], 0, 2), 1e-12);
  ExpectNear((*second)[2], Rows((*whole)[2], 2, 4), 1e-12);
}

// The gradient rule emits one attention_grad with the forward op's attributes, reading
// its output and log-sum-exp.
TEST(AttentionGradTest, GradientRuleEmitsAttentionGradWithTheSameAttrs) {
  std::mt19937_64 rng(5);
  std::vector<HostTensor> in = {RandomTensor(Shape({1, 2, 2, 2}), rng),
                                RandomTensor(Shape({1, 3, 1, 2}), rng),
                                RandomTensor(Shape({1, 3, 1, 2}), rng)};
  HostTensor dout = RandomTensor(Shape({1, 2, 2, 2}), rng);
  AttrMap attrs = AttentionAttrs(0, 0.3);
  auto r = ApplyGradRule(OpKind::kAttention, in, attrs, {dout, std::nullopt});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->graph.num_ops(), 2);
  EXPECT_EQ(r->graph.op(1).kind, OpKind::kAttentionGrad);
  EXPECT_EQ(r->graph.op(1).attrs, attrs);
  EXPECT_EQ(r->graph.op(1).inputs[3], r->graph.op(0).outputs[0]);
  EXPECT_EQ(r->graph.op(1).inputs[4], r->graph.op(0).outputs[1]);
  std::vector<HostTensor> fwd = RunAttention(in, attrs);
  auto direct = RunOp(OpKind::kAttentionGrad, {in[0], in[1], in[2], fwd[0], fwd[1], dout}, attrs);
  ASSERT_TRUE(direct.ok()) << direct.status();
  for (int w = 0; w < 3; ++w) ExpectNear(*r->grads[w], (*direct)[w]);
  // A gradient of the log-sum-exp too goes in as the backward's seventh operand.
  HostTensor dlse = RandomTensor(Shape({1, 2, 2}), rng);
  auto both = ApplyGradRule(OpKind::kAttention, in, attrs, {dout, dlse});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->graph.op(1).inputs.size(), 7u);
}

// out, lse and dout must have the forward's shapes; queries and keys are both reduced
// in the backward's signature (each kept by the outputs that carry it).
TEST(AttentionGradTest, ChecksItsOperandsAndReducesQueriesAndKeys) {
  std::vector<TensorType> in = {F64({2, 3, 4, 8}), F64({2, 3, 2, 8}), F64({2, 3, 2, 6}),
                                F64({2, 3, 4, 6}), F64({2, 3, 4}),    F64({2, 3, 4, 8})};
  EXPECT_EQ(InferError(OpKind::kAttentionGrad, in, {}).message(),
            "input 5 is f64[2,3,4,8], expected dims [2,3,4,6]");
  in[5] = F64({2, 3, 4, 6});
  in[4] = F64({2, 3, 2});
  EXPECT_EQ(InferError(OpKind::kAttentionGrad, in, {}).message(),
            "input 4 is f64[2,3,2], expected dims [2,3,4]");
  in[4] = F64({2, 3, 4});
  auto out = InferOutputTypes(OpKind::kAttentionGrad, in, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], in[0]);
  EXPECT_EQ((*out)[1], in[1]);
  EXPECT_EQ((*out)[2], in[2]);
  EXPECT_EQ(Signature(OpKind::kAttentionGrad, in, {}),
            "b s h dk, b t g dk, b t g dv, b s h dv, b s h, b s h dv -> b s h dk, b t g dk, "
            "b t g dv | dk:fixed dv:fixed s:reduce t:reduce coupled(h,g)");
}

// ---- attention_merge -----------------------------------------------------------------

// Merging is exact where one side saw nothing (-inf) and stays finite for large
// log-sum-exps.
TEST(AttentionMergeTest, MergesByTheLargerLogSumExp) {
  HostTensor o1(Shape({1, 1, 1, 2}), DType::kF64), o2(Shape({1, 1, 1, 2}), DType::kF64);
  HostTensor l1(Shape({1, 1, 1}), DType::kF64), l2(Shape({1, 1, 1}), DType::kF64);
  o1.data = {1.0, 2.0};
  o2.data = {3.0, 5.0};
  l1.data = {1000.0};
  l2.data = {1000.0 + std::log(3.0)};  // three times the weight
  auto m = RunOp(OpKind::kAttentionMerge, {o1, l1, o2, l2}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR((*m)[0][0], (1.0 + 3 * 3.0) / 4, 1e-12);
  EXPECT_NEAR((*m)[0][1], (2.0 + 3 * 5.0) / 4, 1e-12);
  EXPECT_NEAR((*m)[1][0], 1000.0 + std::log(4.0), 1e-9);
  l2.data = {-std::numeric_limits<double>::infinity()};
  o2.data = {0.0, 0.0};
  m = RunOp(OpKind::kAttentionMerge, {o1, l1, o2, l2}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)[0][0], 1.0);
  EXPECT_EQ((*m)[1][0], 1000.0);
  EXPECT_EQ(Signature(OpKind::kAttentionMerge, {F64({1, 2, 3, 4}), F64({1, 2, 3}),
                                                F64({1, 2, 3, 4}), F64({1, 2, 3})},
                      {}),
            "b s h d, b s h, b s h d, b s h -> b s h d, b s h | d:fixed");
  EXPECT_EQ(InferError(OpKind::kAttentionMerge,
                       {F64({1, 2, 3, 4}), F64({1, 2, 4}), F64({1, 2, 3, 4}), F64({1, 2, 3})},
                       {})
                .message(),
            "input 1 is f64[1,2,4], expected dims [1,2,3]");
}

// ---- rope ----------------------------------------------------------------------------

// Hugging Face Llama's formulation: x * cos + rotate_half(x) * sin with
// cos/sin of pos * inv_freq repeated over both halves.
HostTensor ReferenceRope(const HostTensor& x, double theta) {
  const int64_t d = x.shape.dim(3);
  const int64_t half = d / 2;
  HostTensor out(x.shape, DType::kF64);
  for (int64_t b = 0; b < x.shape.dim(0); ++b) {
    for (int64_t pos = 0; pos < x.shape.dim(1); ++pos) {
      std::vector<double> emb(d);
      for (int64_t i = 0; i < d; ++i) {
        emb[i] =
            static_cast<double>(pos) / std::pow(theta, static_cast<double>(2 * (i % half)) / d);
      }
      for (int64_t h = 0; h < x.shape.dim(2); ++h) {
        for (int64_t i = 0; i < d; ++i) {
          const double rotated =
              i < half ? -x[Index(x, b, pos, h, i + half)] : x[Index(x, b, pos, h, i - half)];
          out[Index(out, b, pos, h, i)] =
              x[Index(x, b, pos, h, i)] * std::cos(emb[i]) + rotated * std::sin(emb[i]);
        }
      }
    }
  }
  return out;
}

// rope matches the rotate-half reference for the default and a custom theta.
TEST(RopeTest, MatchesRotateHalfReference) {
  std::mt19937_64 rng(6);
  HostTensor x = RandomTensor(Shape({2, 5, 2, 6}), rng);
  ExpectNear(Run1(OpKind::kRope, {x}, {}), ReferenceRope(x, 10000.0));
  ExpectNear(Run1(OpKind::kRope, {x}, {{"theta", 100.0}}), ReferenceRope(x, 100.0));
}

// inverse=1 rotates back: rope(rope(x), inverse=1) == x; position 0 is untouched.
TEST(RopeTest, InverseUndoesTheRotation) {
  std::mt19937_64 rng(7);
  HostTensor x = RandomTensor(Shape({1, 4, 3, 4}), rng);
  AttrMap forward{{"theta", 50.0}};
  AttrMap backward{{"theta", 50.0}, {"inverse", int64_t{1}}};
  HostTensor y = Run1(OpKind::kRope, {x}, forward);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(y[i], x[i]);  // position 0
  EXPECT_GT(std::abs(y[Index(y, 0, 1, 0, 0)] - x[Index(x, 0, 1, 0, 0)]), 1e-3);
  ExpectNear(Run1(OpKind::kRope, {y}, backward), x, 1e-14);
}

// The gradient is rope with inverse flipped and theta kept: the adjoint rotation.
TEST(RopeTest, GradientIsTheInverseRotation) {
  std::mt19937_64 rng(8);
  HostTensor x = RandomTensor(Shape({1, 3, 2, 4}), rng);
  HostTensor dy = RandomTensor(Shape({1, 3, 2, 4}), rng);
  for (int64_t inverse : {0, 1}) {
    AttrMap attrs{{"theta", 20.0}, {"inverse", inverse}};
    auto r = ApplyGradRule(OpKind::kRope, {x}, attrs, {dy});
    ASSERT_TRUE(r.ok()) << r.status();
    const Op& grad_op = r->graph.ops().back();
    EXPECT_EQ(grad_op.kind, OpKind::kRope);
    EXPECT_EQ(grad_op.attrs, (AttrMap{{"theta", 20.0}, {"inverse", 1 - inverse}}));
    HostTensor y = Run1(OpKind::kRope, {x}, attrs);
    EXPECT_NEAR(Dot(dy, y), Dot(*r->grads[0], x), 1e-12);
  }
}

// Odd head sizes, other ranks and bad attributes are rejected.
TEST(RopeTest, RejectsOddHeadSizeAndBadAttributes) {
  EXPECT_EQ(InferError(OpKind::kRope, {F64({1, 2, 2, 3})}, {}).message(),
            "input 0 has odd head size 3, expected an even one");
  EXPECT_EQ(InferError(OpKind::kRope, {F64({2, 2, 4})}, {}).message(),
            "input 0 has 3 dims, expected 4");
  EXPECT_EQ(InferError(OpKind::kRope, {F64({1, 2, 2, 4})}, {{"inverse", int64_t{3}}}).message(),
            "attribute 'inverse' is 3, expected 0 or 1");
  EXPECT_EQ(InferError(OpKind::kRope, {F64({1, 2, 2, 4})}, {{"theta", -1.0}}).message(),
            "attribute 'theta' is -1, expected a positive number");
}

// Batch, positions and heads split; the rotated dim does not.
TEST(RopeTest, SignatureFixesTheRotatedDim) {
  EXPECT_EQ(Signature(OpKind::kRope, {F64({2, 3, 4, 8})}, {}), "b s h d -> b s h d | d:fixed");
}

// A block of positions placed at its offset rotates as that block of the whole.
TEST(RopeTest, BlockAtItsOffsetIsThatBlockOfTheWhole) {
  std::mt19937_64 rng(12);
  HostTensor x = RandomTensor(Shape({2, 6, 2, 4}), rng);
  HostTensor whole = Run1(OpKind::kRope, {x}, {});
  ExpectNear(Run1(OpKind::kRope, {Rows(x, 3, 5)}, {{"offset", int64_t{3}}}), Rows(whole, 3, 5));
  EXPECT_EQ(InferError(OpKind::kRope, {F64({1, 2, 2, 4})}, {{"offset", int64_t{-2}}}).message(),
            "attribute 'offset' is negative");
}

}  // namespace
}  // namespace loom::ir
