#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using ::loom::ir::testing::Dot;
using ::loom::ir::testing::ExpectNear;
using ::loom::ir::testing::F64;
using ::loom::ir::testing::I64;
using ::loom::ir::testing::Make;
using ::loom::ir::testing::RandomTensor;
using ::loom::ir::testing::Run1;
using ::loom::ir::testing::RunOp;
using ::loom::ir::testing::Signature;
using ::loom::ir::testing::TestGradBuilder;

// Expert indices in [0, experts), repeats within a row allowed.
HostTensor RandomIndices(int64_t tokens, int64_t k, int64_t experts, std::mt19937_64& rng) {
  HostTensor t(Shape({tokens, k}), DType::kI64);
  std::uniform_int_distribution<int64_t> dist(0, experts - 1);
  for (double& x : t.data) x = static_cast<double>(dist(rng));
  return t;
}

AttrMap GateAttrs(int64_t k, std::string score, int64_t normalize) {
  return AttrMap{{"k", k}, {"score", std::move(score)}, {"normalize", normalize}};
}

// Scores of one row, written out directly.
std::vector<double> ReferenceScores(const std::vector<double>& logits, bool softmax) {
  std::vector<double> s;
  double total = 0.0;
  for (double x : logits) total += std::exp(x);
  for (double x : logits) s.push_back(softmax ? std::exp(x) / total : 1.0 / (1.0 + std::exp(-x)));
  return s;
}

// k rounds of strict argmax over the experts not yet chosen (ties: lower index).
std::vector<int64_t> ReferenceTopK(const std::vector<double>& scores, int64_t k) {
  std::vector<int64_t> chosen;
  std::vector<bool> taken(scores.size(), false);
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < static_cast<int64_t>(scores.size()); ++e) {
      if (!taken[e] && (best < 0 || scores[e] > scores[best])) best = e;
    }
    taken[best] = true;
    chosen.push_back(best);
  }
  return chosen;
}

// Row-distinct logits at least 0.3 apart, so the selection survives small steps.
HostTensor SpacedLogits(int64_t tokens, int64_t experts, std::mt19937_64& rng) {
  HostTensor t(Shape({tokens, experts}), DType::kF64);
  std::uniform_real_distribution<double> jitter(0.0, 0.1);
  for (int64_t r = 0; r < tokens; ++r) {
    std::vector<int64_t> perm(experts);
    for (int64_t e = 0; e < experts; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t e = 0; e < experts; ++e) {
      t[r * experts + e] = 0.4 * static_cast<double>(perm[e]) - 0.8 + jitter(rng);
    }
  }
  return t;
}

// Rows `rows` of a [T, n] tensor.
HostTensor Rows(const HostTensor& t, Interval rows) {
  const int64_t n = t.shape.dim(1);
  HostTensor out(Shape({rows.size(), n}), t.dtype);
  for (int64_t i = 0; i < out.size(); ++i) out[i] = t[rows.begin * n + i];
  return out;
}

// Slot columns `cols` (dim 1) of an [E, N, d] tensor.
HostTensor Columns(const HostTensor& t, Interval cols) {
  const int64_t experts = t.shape.dim(0), n = t.shape.dim(1), d = t.shape.dim(2);
  HostTensor out(Shape({experts, cols.size(), d}), t.dtype);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t c = cols.begin; c < cols.end; ++c) {
      for (int64_t i = 0; i < d; ++i) {
        out[(e * cols.size() + c - cols.begin) * d + i] = t[(e * n + c) * d + i];
      }
    }
  }
  return out;
}

// ---- topk_gate ------------------------------------------------------------------

// topk_gate matches explicit softmax / sigmoid scores and a naive top-k, for every
// score function with and without normalisation.
TEST(MoeOpsTest, TopKGateMatchesNaiveScoresAndSelection) {
  std::mt19937_64 rng(7);
  const int64_t tokens = 4, experts = 5, k = 3;
  for (std::string score : {"softmax", "sigmoid"}) {
    for (int64_t normalize : {0, 1}) {
      SCOPED_TRACE(absl::StrCat(score, " normalize=", normalize));
      HostTensor logits = RandomTensor({tokens, experts}, rng);
      auto out = RunOp(OpKind::kTopKGate, {logits}, GateAttrs(k, score, normalize));
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->size(), 2u);
      EXPECT_EQ((*out)[0].shape.dims(), (std::vector<int64_t>{tokens, k}));
      EXPECT_EQ((*out)[1].dtype, DType::kI64);
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<double> row(logits.data.begin() + t * experts,
                                logits.data.begin() + (t + 1) * experts);
        std::vector<double> s = ReferenceScores(row, score == "softmax");
        std::vector<int64_t> chosen = ReferenceTopK(s, k);
        double sum = 0.0;
        for (int64_t e : chosen) sum += s[e];
        for (int64_t j = 0; j < k; ++j) {
          EXPECT_EQ((*out)[1][t * k + j], static_cast<double>(chosen[j]));
          double want = normalize ? s[chosen[j]] / sum : s[chosen[j]];
          EXPECT_NEAR((*out)[0][t * k + j], want, 1e-12);
        }
      }
    }
  }
}

// Normalised weights of a row sum to one and are listed in descending order.
TEST(MoeOpsTest, TopKGateNormalizedWeightsSumToOneInDescendingOrder) {
  HostTensor logits = Make({2, 4}, {0.1, 2.0, -1.0, 0.7, 3.0, -2.0, 1.5, 1.6});
  auto out = RunOp(OpKind::kTopKGate, {logits}, GateAttrs(3, "sigmoid", 1));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[1], {1, 3, 0, 0, 3, 2});
  for (int t = 0; t < 2; ++t) {
    const double* w = &(*out)[0].data[t * 3];
    EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-12);
    EXPECT_GT(w[0], w[1]);
    EXPECT_GT(w[1], w[2]);
  }
}

// Equal scores are chosen lower expert index first.
TEST(MoeOpsTest, TopKGateBreaksTiesByLowerExpertIndex) {
  HostTensor logits = Make({3, 4}, {1.0, 3.0, 3.0, 0.0,     //
                                    2.0, 2.0, 2.0, 2.0,     //
                                    0.0, -1.0, 0.5, 0.5});
  auto out = RunOp(OpKind::kTopKGate, {logits}, GateAttrs(2, "softmax", 0));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[1], {1, 2, 0, 1, 2, 3});
  EXPECT_EQ((*out)[0][2], 0.25);
  EXPECT_EQ((*out)[0][3], 0.25);
}

// topk_gate_grad equals central differences of the weights with the selection fixed.
TEST(MoeOpsTest, TopKGateGradMatchesFiniteDifferences) {
  std::mt19937_64 rng(11);
  const int64_t tokens = 3, experts = 5, k = 2;
  const double h = 1e-6;
  for (std::string score : {"softmax", "sigmoid"}) {
    for (int64_t normalize : {0, 1}) {
      SCOPED_TRACE(absl::StrCat(score, " normalize=", normalize));
      AttrMap attrs = GateAttrs(k, score, normalize);
      HostTensor logits = SpacedLogits(tokens, experts, rng);
      HostTensor dw = RandomTensor({tokens, k}, rng);
      auto fwd = RunOp(OpKind::kTopKGate, {logits}, attrs);
      ASSERT_TRUE(fwd.ok()) << fwd.status();
      auto grad = RunOp(OpKind::kTopKGateGrad, {logits, (*fwd)[1], dw}, attrs);
      ASSERT_TRUE(grad.ok()) << grad.status();
      for (int64_t i = 0; i < logits.size(); ++i) {
        HostTensor plus = logits, minus = logits;
        plus[i] += h;
        minus[i] -= h;
        auto up = RunOp(OpKind::kTopKGate, {plus}, attrs);
        auto down = RunOp(OpKind::kTopKGate, {minus}, attrs);
        ASSERT_TRUE(up.ok() && down.ok());
        ASSERT_EQ((*up)[1].data, (*fwd)[1].data) << "selection moved";
        double numeric = (Dot((*up)[0], dw) - Dot((*down)[0], dw)) / (2 * h);
        EXPECT_NEAR((*grad)[0][i], numeric, 1e-8) << "logit " << i;
      }
    }
  }
}

// ---- the slot rule: dispatch and combine ---------------------------------------------

// Pairs take slots in (t, j) order; a full expert drops later pairs. With E=3, C=2:
// (0,0)->e0 s0, (0,1)->e1 s0, (1,0)->e2 s0, (1,1)->e0 s1, (2,0)->e0 dropped,
// (2,1)->e1 s1, (3,0)->e1 dropped, (3,1)->e0 dropped.
const std::vector<double> kRoutes = {0, 1, 2, 0, 0, 1, 1, 0};

TEST(MoeOpsTest, DispatchFillsSlotsInTokenOrderAndDropsOverflow) {
  // Token t's row is (10t + 1, 10t + 2); unused slots stay zero.
  HostTensor x = Make({4, 2}, {1, 2, 11, 12, 21, 22, 31, 32});
  HostTensor indices = Make({4, 2}, kRoutes, DType::kI64);
  auto out = RunOp(OpKind::kMoeDispatch, {x, indices}, {{"experts", 3}, {"capacity", 2}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.dims(), (std::vector<int64_t>{3, 2, 2}));
  ExpectNear((*out)[0], {1, 2, 11, 12,  // expert 0: tokens 0, 1
                         1, 2, 21, 22,  // expert 1: tokens 0, 2
                         11, 12, 0, 0});  // expert 2: token 1, one free slot
}

// Capacity large enough for every pair drops nothing: each token lands k times.
TEST(MoeOpsTest, DispatchWithAmpleCapacityKeepsEveryPair) {
  HostTensor x = Make({4, 1}, {1, 2, 3, 4});
  HostTensor indices = Make({4, 2}, kRoutes, DType::kI64);
  auto out = RunOp(OpKind::kMoeDispatch, {x, indices}, {{"experts", 3}, {"capacity", 4}});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {1, 2, 3, 4,  // expert 0: (0,0) (1,1) (2,0) (3,1)
                         1, 3, 4, 0,  // expert 1: (0,1) (2,1) (3,0)
                         2, 0, 0, 0});
}

// combine sums weight * slot row over a token's pairs; dropped pairs add nothing.
TEST(MoeOpsTest, CombineSumsWeightedSlotsAndSkipsDroppedPairs) {
  // Slot (e, s) holds the single value 10e + s + 1.
  HostTensor expert_out = Make({3, 2, 1}, {1, 2, 11, 12, 21, 22});
  HostTensor weights = Make({4, 2}, {0.5, 0.25, 2, 3, 4, 5, 6, 7});
  HostTensor indices = Make({4, 2}, kRoutes, DType::kI64);
  auto out = RunOp(OpKind::kMoeCombine, {expert_out, weights, indices});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {0.5 * 1 + 0.25 * 11,  // (e0 s0), (e1 s0)
                         2 * 21 + 3 * 2,       // (e2 s0), (e0 s1)
                         5 * 12,               // dropped, (e1 s1)
                         0});                  // both dropped
}

// ---- token groups -------------------------------------------------------------------

// Each group runs the slot rule with its own C slots per expert, at columns
// [g*C, (g+1)*C). kRoutes in groups {0, 1} and {2, 3} with E=3, C=1:
// group 0: (0,0)->e0, (0,1)->e1, (1,0)->e2, (1,1)->e0 dropped;
// group 1: (2,0)->e0, (2,1)->e1, (3,0)->e1 dropped, (3,1)->e0 dropped.
// (With one group of C=2, (2,0) was dropped: expert 0 was full.)
TEST(MoeOpsTest, DispatchRunsTheSlotRuleInEachGroup) {
  HostTensor x = Make({4, 2}, {1, 2, 11, 12, 21, 22, 31, 32});
  HostTensor indices = Make({4, 2}, kRoutes, DType::kI64);
  auto out = RunOp(OpKind::kMoeDispatch, {x, indices},
                   {{"experts", 3}, {"capacity", 1}, {"groups", 2}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.dims(), (std::vector<int64_t>{3, 2, 2}));
  ExpectNear((*out)[0], {1, 2, 21, 22,    // expert 0: token 0 | token 2
                         1, 2, 21, 22,    // expert 1: token 0 | token 2
                         11, 12, 0, 0});  // expert 2: token 1 | free
}

// A grouped dispatch / combine equals the one-group op run on each group's tokens
// alone, the group's slots at its columns.
TEST(MoeOpsTest, GroupedOpsEqualEachGroupRoutedAlone) {
  std::mt19937_64 rng(17);
  const int64_t groups = 3, group_tokens = 3, k = 2, experts = 3, capacity = 2, d = 2;
  const int64_t tokens = groups * group_tokens;
  AttrMap grouped{{"experts", experts}, {"capacity", capacity}, {"groups", groups}};
  AttrMap single{{"experts", experts}, {"capacity", capacity}};
  for (int trial = 0; trial < 5; ++trial) {
    HostTensor x = RandomTensor({tokens, d}, rng);
    HostTensor w = RandomTensor({tokens, k}, rng);
    HostTensor indices = RandomIndices(tokens, k, experts, rng);
    HostTensor dispatched = Run1(OpKind::kMoeDispatch, {x, indices}, grouped);
    HostTensor combined = Run1(OpKind::kMoeCombine, {dispatched, w, indices}, {{"groups", groups}});
    ASSERT_EQ(dispatched.shape.dims(), (std::vector<int64_t>{experts, groups * capacity, d}));
    for (int64_t g = 0; g < groups; ++g) {
      SCOPED_TRACE(absl::StrCat("trial ", trial, " group ", g));
      const Interval rows{g * group_tokens, (g + 1) * group_tokens};
      const Interval cols{g * capacity, (g + 1) * capacity};
      HostTensor alone =
          Run1(OpKind::kMoeDispatch, {Rows(x, rows), Rows(indices, rows)}, single);
      ExpectNear(Columns(dispatched, cols), alone);
      ExpectNear(Rows(combined, rows),
                 Run1(OpKind::kMoeCombine, {alone, Rows(w, rows), Rows(indices, rows)}, {}));
    }
  }
}

// A piece of whole groups, run with the attributes shard_attrs gives it, reproduces its
// part of the whole op, for dispatch -> combine and both gradients, over 4 groups split
// into 2 and into 4 pieces. Routes (E=4, C=1, groups of 2 tokens): expert 0 overflows
// in group 0 and expert 3 in group 2; groups 1 and 3 drop nothing.
TEST(MoeOpsTest, TokenPiecesWithShardAttrsEqualThePiecesOfTheWholeOps) {
  const int64_t tokens = 8, k = 2, experts = 4, capacity = 1, groups = 4, d = 2;
  const int64_t columns = groups * capacity;
  HostTensor indices = Make({tokens, k},
                            {0, 1, 0, 2,   // group 0: (1,0) dropped
                             3, 2, 1, 0,   // group 1
                             2, 3, 3, 1,   // group 2: (5,0) dropped
                             0, 1, 2, 3},  // group 3
                            DType::kI64);
  std::mt19937_64 rng(19);
  HostTensor x = RandomTensor({tokens, d}, rng);
  HostTensor w = RandomTensor({tokens, k}, rng);
  HostTensor dy = RandomTensor({tokens, d}, rng);
  HostTensor dslots = RandomTensor({experts, columns, d}, rng);
  AttrMap slots{{"experts", experts}, {"capacity", capacity}, {"groups", groups}};
  AttrMap slots_grad = slots;
  slots_grad.Set("tokens", tokens);
  AttrMap combine{{"groups", groups}};

  HostTensor dispatched = Run1(OpKind::kMoeDispatch, {x, indices}, slots);
  HostTensor combined = Run1(OpKind::kMoeCombine, {dispatched, w, indices}, combine);
  HostTensor dx = Run1(OpKind::kMoeDispatchGrad, {dslots, indices}, slots_grad);
  auto combine_grad = RunOp(OpKind::kMoeCombineGrad, {dispatched, w, indices, dy}, combine);
  ASSERT_TRUE(combine_grad.ok()) << combine_grad.status();
  // Dispatch then combine scales each token by the weights of its kept pairs.
  const std::vector<double> kept = {1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1};
  for (int64_t t = 0; t < tokens; ++t) {
    double scale = kept[2 * t] * w[2 * t] + kept[2 * t + 1] * w[2 * t + 1];
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(combined[t * d + i], scale * x[t * d + i], 1e-12) << "token " << t;
    }
  }

  const TensorType x_type = F64({tokens, d}), w_type = F64({tokens, k});
  const TensorType idx_type = I64({tokens, k}), slots_type = F64({experts, columns, d});
  for (int64_t pieces : {2, 4}) {
    for (int64_t p = 0; p < pieces; ++p) {
      SCOPED_TRACE(absl::StrCat("piece ", p, " of ", pieces));
      const Interval rows{p * tokens / pieces, (p + 1) * tokens / pieces};
      const Interval cols{p * columns / pieces, (p + 1) * columns / pieces};
      const Box token_box{rows, {0, d}}, route_box{rows, {0, k}};
      const Box slot_box{{0, experts}, cols, {0, d}};
      HostTensor x_p = Rows(x, rows), w_p = Rows(w, rows), idx_p = Rows(indices, rows);

      auto dispatch_attrs = GetOpSchema(OpKind::kMoeDispatch)
                                .shard_attrs(slots, {x_type, idx_type}, {token_box, route_box},
                                             {slots_type}, {slot_box});
      ASSERT_TRUE(dispatch_attrs.ok()) << dispatch_attrs.status();
      EXPECT_EQ(dispatch_attrs->GetInt("groups").value_or(-1), groups / pieces);
      EXPECT_EQ(dispatch_attrs->GetInt("capacity").value_or(-1), capacity);
      HostTensor dispatched_p = Run1(OpKind::kMoeDispatch, {x_p, idx_p}, *dispatch_attrs);
      ExpectNear(dispatched_p, Columns(dispatched, cols));

      auto combine_attrs = GetOpSchema(OpKind::kMoeCombine)
                               .shard_attrs(combine, {slots_type, w_type, idx_type},
                                            {slot_box, route_box, route_box}, {x_type},
                                            {token_box});
      ASSERT_TRUE(combine_attrs.ok()) << combine_attrs.status();
      ExpectNear(Run1(OpKind::kMoeCombine, {dispatched_p, w_p, idx_p}, *combine_attrs),
                 Rows(combined, rows));

      auto dispatch_grad_attrs = GetOpSchema(OpKind::kMoeDispatchGrad)
                                     .shard_attrs(slots_grad, {slots_type, idx_type},
                                                  {slot_box, route_box}, {x_type}, {token_box});
      ASSERT_TRUE(dispatch_grad_attrs.ok()) << dispatch_grad_attrs.status();
      EXPECT_EQ(dispatch_grad_attrs->GetInt("tokens").value_or(-1), rows.size());
      ExpectNear(Run1(OpKind::kMoeDispatchGrad, {Columns(dslots, cols), idx_p},
                      *dispatch_grad_attrs),
                 Rows(dx, rows));

      auto combine_grad_attrs =
          GetOpSchema(OpKind::kMoeCombineGrad)
              .shard_attrs(combine, {slots_type, w_type, idx_type, x_type},
                           {slot_box, route_box, route_box, token_box}, {slots_type, w_type},
                           {slot_box, route_box});
      ASSERT_TRUE(combine_grad_attrs.ok()) << combine_grad_attrs.status();
      auto combine_grad_p = RunOp(OpKind::kMoeCombineGrad,
                                  {dispatched_p, w_p, idx_p, Rows(dy, rows)}, *combine_grad_attrs);
      ASSERT_TRUE(combine_grad_p.ok()) << combine_grad_p.status();
      ExpectNear((*combine_grad_p)[0], Columns((*combine_grad)[0], cols));
      ExpectNear((*combine_grad_p)[1], Rows((*combine_grad)[1], rows));
    }
  }
}

// shard_attrs keeps a whole op's attributes, gives a piece of whole groups their count,
// and rejects pieces that cut a group or hold another group's slot columns.
TEST(MoeOpsTest, ShardAttrsRejectPiecesThatCutAGroup) {
  const OpSchema& schema = GetOpSchema(OpKind::kMoeDispatch);
  ASSERT_NE(schema.shard_attrs, nullptr);
  // 8 tokens in 4 groups of 2, capacity 2: 8 slot columns.
  AttrMap attrs{{"experts", 3}, {"capacity", 2}, {"groups", 4}};
  std::vector<TensorType> in = {F64({8, 5}), I64({8, 2})};
  std::vector<TensorType> out = {F64({3, 8, 5})};
  auto piece = [&](Interval rows, Interval cols) {
    return schema.shard_attrs(attrs, in, {Box{rows, {0, 5}}, Box{rows, {0, 2}}}, out,
                              {Box{{0, 3}, cols, {0, 5}}});
  };
  auto whole = piece({0, 8}, {0, 8});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, attrs);
  auto middle = piece({2, 6}, {2, 6});  // groups 1 and 2
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(middle->GetInt("groups").value_or(-1), 2);
  auto cut = piece({0, 3}, {0, 3});
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find(
                "a routing piece over tokens [0:3) of 8 does not hold whole groups of 2 "
                "tokens (attribute 'groups' = 4)"),
            std::string::npos)
      << cut.status();
  auto wrong = piece({0, 4}, {0, 8});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("holds slot columns [0:8), expected [0:4)"),
            std::string::npos)
      << wrong.status();
  EXPECT_FALSE(schema.shard_attrs(attrs, in, {}, out, {}).ok());
}

// <dispatch(x), dy> = <x, dispatch_grad(dy)> for random routes with overflow, for one
// group and for several.
TEST(MoeOpsTest, DispatchGradIsAdjointOfDispatch) {
  std::mt19937_64 rng(3);
  const int64_t tokens = 6, k = 2, experts = 3, capacity = 2, d = 3;
  for (int64_t groups : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("groups=", groups));
    AttrMap attrs{{"experts", experts}, {"capacity", capacity}, {"groups", groups}};
    AttrMap grad_attrs = attrs;
    grad_attrs.Set("tokens", tokens);
    for (int trial = 0; trial < 5; ++trial) {
      HostTensor x = RandomTensor({tokens, d}, rng);
      HostTensor dy = RandomTensor({experts, groups * capacity, d}, rng);
      HostTensor indices = RandomIndices(tokens, k, experts, rng);
      auto y = RunOp(OpKind::kMoeDispatch, {x, indices}, attrs);
      auto dx = RunOp(OpKind::kMoeDispatchGrad, {dy, indices}, grad_attrs);
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_TRUE(dx.ok()) << dx.status();
      EXPECT_NEAR(Dot((*y)[0], dy), Dot(x, (*dx)[0]), 1e-12);
    }
  }
}

// With unit weights, combine is the adjoint of dispatch: <dispatch(x), e> = <x, combine(e)>,
// for one group and for several.
TEST(MoeOpsTest, CombineWithUnitWeightsIsAdjointOfDispatch) {
  std::mt19937_64 rng(5);
  const int64_t tokens = 6, k = 3, experts = 4, capacity = 2, d = 2;
  for (int64_t groups : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("groups=", groups));
    for (int trial = 0; trial < 5; ++trial) {
      HostTensor x = RandomTensor({tokens, d}, rng);
      HostTensor expert_out = RandomTensor({experts, groups * capacity, d}, rng);
      HostTensor ones = Make({tokens, k}, std::vector<double>(tokens * k, 1.0));
      HostTensor indices = RandomIndices(tokens, k, experts, rng);
      auto dispatched =
          RunOp(OpKind::kMoeDispatch, {x, indices},
                {{"experts", experts}, {"capacity", capacity}, {"groups", groups}});
      auto combined =
          RunOp(OpKind::kMoeCombine, {expert_out, ones, indices}, {{"groups", groups}});
      ASSERT_TRUE(dispatched.ok()) << dispatched.status();
      ASSERT_TRUE(combined.ok()) << combined.status();
      EXPECT_NEAR(Dot((*dispatched)[0], expert_out), Dot(x, (*combined)[0]), 1e-12);
    }
  }
}

// combine is bilinear, so its gradients are exact adjoints: for random directions
// <combine(e2, w), dy> = <e2, d_expert_out> and <combine(e, w2), dy> = <w2, d_weights>,
// for one group and for several.
TEST(MoeOpsTest, CombineGradIsAdjointInBothFloatInputs) {
  std::mt19937_64 rng(9);
  const int64_t tokens = 4, k = 2, experts = 3, capacity = 2, d = 3;
  for (int64_t groups : {1, 2, 4}) {
    SCOPED_TRACE(absl::StrCat("groups=", groups));
    AttrMap attrs{{"groups", groups}};
    const int64_t columns = groups * capacity;
    for (int trial = 0; trial < 5; ++trial) {
      HostTensor expert_out = RandomTensor({experts, columns, d}, rng);
      HostTensor weights = RandomTensor({tokens, k}, rng);
      HostTensor indices = RandomIndices(tokens, k, experts, rng);
      HostTensor dy = RandomTensor({tokens, d}, rng);
      HostTensor e2 = RandomTensor({experts, columns, d}, rng);
      HostTensor w2 = RandomTensor({tokens, k}, rng);
      auto grads = RunOp(OpKind::kMoeCombineGrad, {expert_out, weights, indices, dy}, attrs);
      auto along_e = RunOp(OpKind::kMoeCombine, {e2, weights, indices}, attrs);
      auto along_w = RunOp(OpKind::kMoeCombine, {expert_out, w2, indices}, attrs);
      ASSERT_TRUE(grads.ok()) << grads.status();
      ASSERT_TRUE(along_e.ok() && along_w.ok());
      ASSERT_EQ(grads->size(), 2u);
      EXPECT_NEAR(Dot((*along_e)[0], dy), Dot(e2, (*grads)[0]), 1e-12);
      EXPECT_NEAR(Dot((*along_w)[0], dy), Dot(w2, (*grads)[1]), 1e-12);
    }
  }
}

// Dropped pairs get a zero weight gradient and pass no gradient to any slot.
TEST(MoeOpsTest, CombineGradGivesDroppedPairsZeroGradient) {
  HostTensor expert_out = Make({3, 2, 1}, {1, 2, 11, 12, 21, 22});
  HostTensor weights = Make({4, 2}, {1, 1, 1, 1, 1, 1, 1, 1});
  HostTensor indices = Make({4, 2}, kRoutes, DType::kI64);
  HostTensor dy = Make({4, 1}, {1, 10, 100, 1000});
  auto out = RunOp(OpKind::kMoeCombineGrad, {expert_out, weights, indices, dy});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {1, 10, 1, 100, 10, 0});
  ExpectNear((*out)[1], {1, 11, 210, 20, 0, 1200, 0, 0});
}

// Indices outside [0, E) are kernel errors naming the position.
TEST(MoeOpsTest, KernelsRejectIndicesOutsideTheExperts) {
  HostTensor x = Make({2, 1}, {1, 2});
  HostTensor bad = Make({2, 2}, {0, 1, 3, 0}, DType::kI64);
  HostTensor negative = Make({2, 2}, {0, -1, 1, 0}, DType::kI64);
  AttrMap attrs{{"experts", 3}, {"capacity", 2}};
  auto out = RunOp(OpKind::kMoeDispatch, {x, bad}, attrs);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("expert index 3 at [1,0]"), std::string::npos)
      << out.status();
  EXPECT_FALSE(RunOp(OpKind::kMoeDispatch, {x, negative}, attrs).ok());
  EXPECT_FALSE(RunOp(OpKind::kMoeCombine, {Make({3, 2, 1}, std::vector<double>(6, 1.0)),
                                           Make({2, 2}, {1, 1, 1, 1}), bad})
                   .ok());
  EXPECT_FALSE(RunOp(OpKind::kTopKGateGrad,
                     {Make({2, 3}, {0, 1, 2, 3, 4, 5}), bad, Make({2, 2}, {1, 1, 1, 1})},
                     GateAttrs(2, "softmax", 0))
                   .ok());
}

// ---- shape inference, signatures, FLOPs ---------------------------------------------

struct BadCase {
  std::string name;
  OpKind kind;
  std::vector<TensorType> inputs;
  AttrMap attrs;
  std::string message;  // expected substring
};

// Shape inference rejects bad ranks, dtypes, sizes and attributes with clear messages.
TEST(MoeOpsTest, ShapeInferenceRejectsInconsistentInputs) {
  AttrMap slots{{"experts", 3}, {"capacity", 2}};
  AttrMap dispatch_grad{{"experts", 3}, {"capacity", 2}, {"tokens", 4}};
  std::vector<BadCase> cases = {
      {"logits rank", OpKind::kTopKGate, {F64({4})}, GateAttrs(2, "softmax", 0),
       "input 0 has 1 dims, expected 2"},
      {"k above E", OpKind::kTopKGate, {F64({4, 3})}, GateAttrs(4, "softmax", 0),
       "attribute 'k' is 4, expected 1 to 3"},
      {"k zero", OpKind::kTopKGate, {F64({4, 3})}, GateAttrs(0, "softmax", 0),
       "attribute 'k' is 0"},
      {"k missing", OpKind::kTopKGate, {F64({4, 3})}, {}, "'k'"},
      {"score", OpKind::kTopKGate, {F64({4, 3})}, GateAttrs(2, "relu", 0),
       "attribute 'score' is \"relu\""},
      {"normalize", OpKind::kTopKGate, {F64({4, 3})}, GateAttrs(2, "softmax", 2),
       "attribute 'normalize' is 2, expected 0 or 1"},
      {"integer logits", OpKind::kTopKGate, {I64({4, 3})}, GateAttrs(2, "softmax", 0),
       "expected a float type"},
      {"grad k", OpKind::kTopKGateGrad, {F64({4, 3}), I64({4, 1}), F64({4, 1})},
       GateAttrs(2, "softmax", 0), "input 1 is i64[4,1], expected dim 1 = 2"},
      {"grad dweights", OpKind::kTopKGateGrad, {F64({4, 3}), I64({4, 2}), F64({4, 3})},
       GateAttrs(2, "softmax", 0), "input 2 is f64[4,3], expected dims [4,2]"},
      {"float indices", OpKind::kMoeDispatch, {F64({4, 2}), F64({4, 2})}, slots,
       "input 1 has dtype f64, expected an integer type"},
      {"token count", OpKind::kMoeDispatch, {F64({4, 2}), I64({5, 2})}, slots,
       "input 1 is i64[5,2], expected dim 0 = 4 (tokens)"},
      {"capacity", OpKind::kMoeDispatch, {F64({4, 2}), I64({4, 2})},
       {{"experts", 3}, {"capacity", 0}}, "attribute 'capacity' is 0, expected at least 1"},
      {"experts missing", OpKind::kMoeDispatch, {F64({4, 2}), I64({4, 2})},
       {{"capacity", 2}}, "'experts'"},
      {"grad experts", OpKind::kMoeDispatchGrad, {F64({2, 2, 5}), I64({4, 2})}, dispatch_grad,
       "input 0 is f64[2,2,5], expected dim 0 = 3"},
      {"grad tokens", OpKind::kMoeDispatchGrad, {F64({3, 2, 5}), I64({3, 2})}, dispatch_grad,
       "expected dim 0 = 4 (tokens)"},
      {"groups zero", OpKind::kMoeDispatch, {F64({4, 2}), I64({4, 2})},
       {{"experts", 3}, {"capacity", 2}, {"groups", 0}},
       "attribute 'groups' is 0, expected at least 1"},
      {"groups divide tokens", OpKind::kMoeDispatch, {F64({4, 2}), I64({4, 2})},
       {{"experts", 3}, {"capacity", 2}, {"groups", 3}},
       "attribute 'groups' is 3, which does not divide dim 0 (tokens) = 4 of input 0"},
      {"grad slot columns", OpKind::kMoeDispatchGrad, {F64({3, 2, 5}), I64({4, 2})},
       {{"experts", 3}, {"capacity", 2}, {"tokens", 4}, {"groups", 2}},
       "input 0 is f64[3,2,5], expected dim 1 = 4 (attribute 'groups' times 'capacity')"},
      {"grad groups", OpKind::kMoeDispatchGrad, {F64({3, 6, 5}), I64({4, 2})},
       {{"experts", 3}, {"capacity", 2}, {"tokens", 4}, {"groups", 3}},
       "attribute 'groups' is 3, which does not divide dim 0 (tokens) = 4 of input 1"},
      {"combine slots", OpKind::kMoeCombine, {F64({3, 3, 5}), F64({4, 2}), I64({4, 2})},
       {{"groups", 2}},
       "attribute 'groups' is 2, which does not divide dim 1 (slots) = 3 of input 0"},
      {"combine tokens", OpKind::kMoeCombine, {F64({3, 6, 5}), F64({4, 2}), I64({4, 2})},
       {{"groups", 3}},
       "attribute 'groups' is 3, which does not divide dim 0 (tokens) = 4 of input 1"},
      {"combine grad groups", OpKind::kMoeCombineGrad,
       {F64({3, 4, 5}), F64({3, 2}), I64({3, 2}), F64({3, 5})}, {{"groups", 2}},
       "attribute 'groups' is 2, which does not divide dim 0 (tokens) = 3 of input 1"},
      {"combine rank", OpKind::kMoeCombine, {F64({3, 2}), F64({4, 2}), I64({4, 2})}, {},
       "input 0 has 2 dims, expected 3"},
      {"combine k", OpKind::kMoeCombine, {F64({3, 2, 5}), F64({4, 2}), I64({4, 3})}, {},
       "input 2 is i64[4,3], expected dim 1 = 2"},
      {"combine grad dy", OpKind::kMoeCombineGrad,
       {F64({3, 2, 5}), F64({4, 2}), I64({4, 2}), F64({4, 4})}, {},
       "input 3 is f64[4,4], expected dims [4,5]"},
  };
  for (const BadCase& c : cases) {
    auto out = InferOutputTypes(c.kind, c.inputs, c.attrs);
    ASSERT_FALSE(out.ok()) << c.name;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(out.status().message().find(c.message), std::string::npos)
        << c.name << ": " << out.status().message();
  }
}

// Output types: weights keep the logits dtype, indices are i64, combine_grad mirrors inputs.
TEST(MoeOpsTest, ShapeInferenceGivesRoutingShapes) {
  TensorType f32_logits{Shape({6, 4}), DType::kF32};
  auto gate = InferOutputTypes(OpKind::kTopKGate, {f32_logits}, GateAttrs(2, "sigmoid", 1));
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ((*gate)[0], (TensorType{Shape({6, 2}), DType::kF32}));
  EXPECT_EQ((*gate)[1], I64({6, 2}));
  auto dispatch = InferOutputTypes(OpKind::kMoeDispatch, {F64({6, 8}), I64({6, 2})},
                                   {{"experts", 4}, {"capacity", 3}});
  ASSERT_TRUE(dispatch.ok()) << dispatch.status();
  EXPECT_EQ((*dispatch)[0], F64({4, 3, 8}));
  auto grouped = InferOutputTypes(OpKind::kMoeDispatch, {F64({6, 8}), I64({6, 2})},
                                  {{"experts", 4}, {"capacity", 3}, {"groups", 2}});
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_EQ((*grouped)[0], F64({4, 2 * 3, 8}));
  auto grouped_grad =
      InferOutputTypes(OpKind::kMoeDispatchGrad, {F64({4, 6, 8}), I64({6, 2})},
                       {{"experts", 4}, {"capacity", 3}, {"groups", 2}, {"tokens", 6}});
  ASSERT_TRUE(grouped_grad.ok()) << grouped_grad.status();
  EXPECT_EQ((*grouped_grad)[0], F64({6, 8}));
  auto combine_grad = InferOutputTypes(
      OpKind::kMoeCombineGrad, {F64({4, 3, 8}), F64({6, 2}), I64({6, 2}), F64({6, 8})}, {});
  ASSERT_TRUE(combine_grad.ok()) << combine_grad.status();
  EXPECT_EQ((*combine_grad)[0], F64({4, 3, 8}));
  EXPECT_EQ((*combine_grad)[1], F64({6, 2}));
}

// Tokens t and slot columns c of the routing ops split together (coupled), features d
// too except in combine_grad; experts e and the k dim j stay whole.
TEST(MoeOpsTest, SignaturesSplitTokensAndSlotsTogether) {
  EXPECT_EQ(Signature(OpKind::kTopKGate, {F64({4, 3})}, GateAttrs(2, "softmax", 0)),
            "t e -> t j, t j | e:fixed j:fixed");
  AttrMap slots{{"experts", 3}, {"capacity", 1}, {"groups", 2}};
  EXPECT_EQ(Signature(OpKind::kMoeDispatch, {F64({4, 2}), I64({4, 2})}, slots),
            "t d, t j -> e c d | e:fixed j:fixed coupled(t,c)");
  AttrMap grad = slots;
  grad.Set("tokens", 4);
  EXPECT_EQ(Signature(OpKind::kMoeDispatchGrad, {F64({3, 2, 2}), I64({4, 2})}, grad),
            "e c d, t j -> t d | e:fixed j:fixed coupled(t,c)");
  EXPECT_EQ(Signature(OpKind::kMoeCombine, {F64({3, 2, 5}), F64({4, 2}), I64({4, 2})},
                      {{"groups", 2}}),
            "e c d, t j, t j -> t d | e:fixed j:fixed coupled(t,c)");
  EXPECT_EQ(Signature(OpKind::kMoeCombineGrad,
                      {F64({3, 2, 5}), F64({4, 2}), I64({4, 2}), F64({4, 5})}, {{"groups", 2}}),
            "e c d, t j, t j, t d -> e c d, t j | d:fixed e:fixed j:fixed coupled(t,c)");
}

// combine counts a multiply-add per (t, j, d); data movement counts nothing.
TEST(MoeOpsTest, FlopsCountCombineMultiplyAdds) {
  std::vector<TensorType> in = {F64({8, 4, 16}), F64({10, 2}), I64({10, 2})};
  EXPECT_EQ(GetOpSchema(OpKind::kMoeCombine).flops(in, {F64({10, 16})}, {}), 2.0 * 10 * 2 * 16);
  AttrMap slots{{"experts", 8}, {"capacity", 4}};
  EXPECT_EQ(GetOpSchema(OpKind::kMoeDispatch)
                .flops({F64({10, 16}), I64({10, 2})}, {F64({8, 4, 16})}, slots),
            0.0);
}

// ---- gradient rules -------------------------------------------------------------------------

// The gate's rule feeds the chosen indices to topk_gate_grad with the same attributes,
// and uses zeros when the weights have no gradient.
TEST(MoeOpsTest, TopKGateGradRuleEmitsGateGradWithSameAttributes) {
  Graph g("gate");
  TensorId logits = *g.AddInput("logits", Shape({4, 3}), DType::kF64, TensorRole::kInput);
  AttrMap attrs = GateAttrs(2, "sigmoid", 1);
  auto outs = g.AddOp(OpKind::kTopKGate, {logits}, attrs, {}, {{"w"}, {"idx"}});
  ASSERT_TRUE(outs.ok()) << outs.status();
  TestGradBuilder b(g, /*op=*/0, {std::nullopt, std::nullopt});
  auto grads = GetOpSchema(OpKind::kTopKGate).grad(b);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), 1u);
  ASSERT_TRUE((*grads)[0].has_value());
  const Op& fill = g.op(1);
  const Op& grad = g.op(g.tensor(*(*grads)[0]).producer);
  EXPECT_EQ(fill.kind, OpKind::kFill);
  EXPECT_EQ(grad.kind, OpKind::kTopKGateGrad);
  EXPECT_EQ(grad.attrs, attrs);
  EXPECT_EQ(grad.inputs, (std::vector<TensorId>{logits, (*outs)[1], fill.outputs[0]}));
  EXPECT_EQ(g.tensor(*(*grads)[0]).shape.dims(), (std::vector<int64_t>{4, 3}));
}

// dispatch and combine pass no gradient to indices; dispatch_grad learns the token count
// and both gradients keep the groups.
TEST(MoeOpsTest, DispatchAndCombineGradRulesSkipIndices) {
  Graph g("route");
  TensorId x = *g.AddInput("x", Shape({4, 2}), DType::kF64, TensorRole::kInput);
  TensorId w = *g.AddInput("w", Shape({4, 2}), DType::kF64, TensorRole::kInput);
  TensorId idx = *g.AddInput("idx", Shape({4, 2}), DType::kI64, TensorRole::kInput);
  TensorId dy = *g.AddInput("dy", Shape({3, 4, 2}), DType::kF64, TensorRole::kInput);
  ASSERT_TRUE(g.AddOp(OpKind::kMoeDispatch, {x, idx},
                      {{"experts", 3}, {"capacity", 2}, {"groups", 2}}, {}, {{"slots"}})
                  .ok());
  TestGradBuilder db(g, /*op=*/0, {dy});
  auto dgrads = GetOpSchema(OpKind::kMoeDispatch).grad(db);
  ASSERT_TRUE(dgrads.ok()) << dgrads.status();
  ASSERT_EQ(dgrads->size(), 2u);
  EXPECT_FALSE((*dgrads)[1].has_value());
  ASSERT_TRUE((*dgrads)[0].has_value());
  const Op& dispatch_grad = g.op(g.tensor(*(*dgrads)[0]).producer);
  EXPECT_EQ(dispatch_grad.kind, OpKind::kMoeDispatchGrad);
  EXPECT_EQ(dispatch_grad.inputs, (std::vector<TensorId>{dy, idx}));
  EXPECT_EQ(dispatch_grad.attrs,
            (AttrMap{{"experts", 3}, {"capacity", 2}, {"groups", 2}, {"tokens", 4}}));

  auto y = g.AddOp(OpKind::kMoeCombine, {dy, w, idx}, {{"groups", 2}}, {}, {{"y"}});
  ASSERT_TRUE(y.ok()) << y.status();
  OpId combine = g.tensor((*y)[0]).producer;
  TestGradBuilder cb(g, combine, {x});
  auto cgrads = GetOpSchema(OpKind::kMoeCombine).grad(cb);
  ASSERT_TRUE(cgrads.ok()) << cgrads.status();
  ASSERT_EQ(cgrads->size(), 3u);
  ASSERT_TRUE((*cgrads)[0].has_value() && (*cgrads)[1].has_value());
  EXPECT_FALSE((*cgrads)[2].has_value());
  const Op& combine_grad = g.op(g.tensor(*(*cgrads)[0]).producer);
  EXPECT_EQ(combine_grad.kind, OpKind::kMoeCombineGrad);
  EXPECT_EQ(combine_grad.inputs, (std::vector<TensorId>{dy, w, idx, x}));
  EXPECT_EQ(combine_grad.outputs, (std::vector<TensorId>{*(*cgrads)[0], *(*cgrads)[1]}));
  EXPECT_EQ(combine_grad.attrs, (AttrMap{{"groups", 2}}));
}

}  // namespace
}  // namespace loom::ir
