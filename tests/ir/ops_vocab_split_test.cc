// Ops that write cross-entropy as a composition whose vocabulary dim can be split:
// log, stop_gradient, pick, pick_grad, max as a max-reduction and expand pieces.

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using ::loom::ir::testing::ApplyGradRule;
using ::loom::ir::testing::ExpectNear;
using ::loom::ir::testing::F64;
using ::loom::ir::testing::I64;
using ::loom::ir::testing::InferError;
using ::loom::ir::testing::Make;
using ::loom::ir::testing::RandomTensor;
using ::loom::ir::testing::Run1;
using ::loom::ir::testing::RunOp;
using ::loom::ir::testing::Signature;

// Entries [begin, end) of the last dim of `x`.
HostTensor LastDimRange(const HostTensor& x, int64_t begin, int64_t end) {
  const int64_t v = x.shape.dim(x.shape.rank() - 1);
  std::vector<int64_t> dims = x.shape.dims();
  dims.back() = end - begin;
  HostTensor out(Shape(dims), x.dtype);
  const int64_t rows = x.size() / v;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = begin; j < end; ++j) out[r * (end - begin) + j - begin] = x[r * v + j];
  }
  return out;
}

// The box covering all of `shape` except [begin, end) along its last dim.
Box LastDimBox(const Shape& shape, int64_t begin, int64_t end) {
  Box box = FullBox(shape);
  box.back() = Interval{begin, end};
  return box;
}

// Attributes of the piece of `kind` reading `in_boxes` and writing `out_boxes`.
AttrMap PieceAttrs(OpKind kind, const AttrMap& attrs, std::vector<TensorType> in,
                   std::vector<Box> in_boxes, std::vector<TensorType> out,
                   std::vector<Box> out_boxes) {
  const OpSchema& schema = GetOpSchema(kind);
  EXPECT_NE(schema.shard_attrs, nullptr) << OpKindName(kind);
  if (schema.shard_attrs == nullptr) return attrs;
  auto piece = schema.shard_attrs(attrs, in, in_boxes, out, out_boxes);
  EXPECT_TRUE(piece.ok()) << piece.status();
  return piece.ok() ? *piece : attrs;
}

// ---- log and stop_gradient ------------------------------------------------------

// log matches std::log element by element.
TEST(LogTest, MatchesNaturalLog) {
  HostTensor x = Make({2, 2}, {0.5, 1.0, 2.0, 10.0});
  HostTensor y = Run1(OpKind::kLog, {x}, {});
  ExpectNear(y, {std::log(0.5), 0.0, std::log(2.0), std::log(10.0)});
}

// log's gradient is dy / x, emitted as mul(dy, pow(x, -1)).
TEST(LogTest, GradientIsDyOverX) {
  HostTensor x = Make({3}, {0.5, 2.0, 4.0});
  HostTensor dy = Make({3}, {1.0, -3.0, 2.0});
  auto r = ApplyGradRule(OpKind::kLog, {x}, {}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->grads[0].has_value());
  ExpectNear(*r->grads[0], {2.0, -1.5, 0.5});
}

// log rejects integer inputs.
TEST(LogTest, RejectsIntegerInput) {
  EXPECT_FALSE(InferError(OpKind::kLog, {I64({2})}, {}).ok());
}

// stop_gradient passes its input through unchanged.
TEST(StopGradientTest, ForwardIsIdentity) {
  HostTensor x = Make({2, 3}, {1, -2, 3, -4, 5, -6});
  HostTensor y = Run1(OpKind::kStopGradient, {x}, {});
  EXPECT_EQ(y.shape.dims(), x.shape.dims());
  EXPECT_EQ(y.data, x.data);
  EXPECT_EQ(Signature(OpKind::kStopGradient, {F64({2, 3})}, {}), "d0 d1 -> d0 d1");
}

// Through loss = sum(stop_gradient(x) * w), w gets d loss / d w = x and x gets no
// gradient at all.
TEST(StopGradientTest, BlocksGradientToItsInput) {
  Graph g("stop");
  TensorId x = *g.AddInput("x", Shape({2, 3}), DType::kF64, TensorRole::kParameter);
  TensorId w = *g.AddInput("w", Shape({2, 3}), DType::kF64, TensorRole::kParameter);
  TensorId s = (*g.AddOp(OpKind::kStopGradient, {x}, {}, OpInfo{}, {{"s"}}))[0];
  TensorId y = (*g.AddOp(OpKind::kMul, {s, w}, {}, OpInfo{}, {{"y"}}))[0];
  TensorId loss = (*g.AddOp(OpKind::kSum, {y}, {{"dims", std::vector<int64_t>{0, 1}}},
                            OpInfo{}, {{"loss", TensorRole::kLoss}}))[0];
  auto grads = AppendBackward(g, loss, {x, w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), 2u);
  EXPECT_FALSE((*grads)[0].has_value());
  ASSERT_TRUE((*grads)[1].has_value());
  std::mt19937_64 rng(5);
  HostTensor xv = RandomTensor(Shape({2, 3}), rng);
  HostTensor wv = RandomTensor(Shape({2, 3}), rng);
  auto r = Evaluate(g, {{x, xv}, {w, wv}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear(*(*r)[*(*grads)[1]], xv);
}

// ---- pick -------------------------------------------------------------------------

// pick reads x[..., target] at every position.
TEST(PickTest, ReadsTheTargetEntry) {
  std::mt19937_64 rng(1);
  HostTensor x = RandomTensor(Shape({2, 3, 4}), rng);
  HostTensor targets = Make({2, 3}, {0, 3, 1, 2, 2, 0}, DType::kI64);
  HostTensor y = Run1(OpKind::kPick, {x, targets}, {});
  ASSERT_EQ(y.shape.dims(), (std::vector<int64_t>{2, 3}));
  for (int64_t r = 0; r < 6; ++r) {
    EXPECT_DOUBLE_EQ(y[r], x[r * 4 + static_cast<int64_t>(targets[r])]) << r;
  }
}

// Without vocab_begin, a target outside the vocabulary is an error naming its position.
TEST(PickTest, RejectsTargetOutsideVocabulary) {
  HostTensor x = Make({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor targets = Make({2}, {1, 3}, DType::kI64);
  auto r = RunOp(OpKind::kPick, {x, targets});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("target 3 at position [1]"), std::string::npos)
      << r.status();
}

// With vocab_begin, a target inside [vocab_begin, vocab_begin + V) reads its entry
// and one outside gives 0.
TEST(PickTest, VocabPieceGivesZeroOutsideItsRange) {
  HostTensor x = Make({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  HostTensor targets = Make({4}, {0, 2, 3, 5}, DType::kI64);
  HostTensor y = Run1(OpKind::kPick, {x, targets}, {{"vocab_begin", int64_t{2}}});
  ExpectNear(y, {0.0, 3.0, 6.0, 0.0});
}

// Shape errors: targets must be integer and shaped like x without its last dim.
TEST(PickTest, RejectsBadInputs) {
  const absl::Status wrong_dims = InferError(OpKind::kPick, {F64({2, 3}), I64({3})}, {});
  EXPECT_NE(wrong_dims.message().find("input 1"), std::string::npos) << wrong_dims;
  EXPECT_NE(wrong_dims.message().find("expected dims [2]"), std::string::npos) << wrong_dims;
  EXPECT_FALSE(InferError(OpKind::kPick, {F64({2, 3}), F64({2})}, {}).ok());
  EXPECT_FALSE(InferError(OpKind::kPick, {I64({2, 3}), I64({2})}, {}).ok());
  EXPECT_FALSE(
      InferError(OpKind::kPick, {F64({2, 3}), I64({2})}, {{"vocab_begin", int64_t{-1}}}).ok());
}

// The vocabulary label reduces (pieces are partial sums); leading labels are spatial.
TEST(PickTest, SignatureReducesVocabulary) {
  EXPECT_EQ(Signature(OpKind::kPick, {F64({2, 3, 5}), I64({2, 3})}, {}),
            "d0 d1 v, d0 d1 -> d0 d1 | v:reduce");
}

// Two vocabulary pieces, with the attributes shard_attrs gives them, sum to the whole
// pick; a piece of a piece offsets from the outer piece's vocab_begin.
TEST(PickTest, VocabularyPiecesSumToWholePick) {
  std::mt19937_64 rng(2);
  const Shape xs({2, 3, 5});
  HostTensor x = RandomTensor(xs, rng);
  HostTensor targets = Make({2, 3}, {0, 4, 1, 2, 3, 4}, DType::kI64);
  std::vector<TensorType> in = {F64({2, 3, 5}), I64({2, 3})};
  std::vector<TensorType> out = {F64({2, 3})};
  HostTensor whole = Run1(OpKind::kPick, {x, targets}, {});
  HostTensor sum(Shape({2, 3}), DType::kF64);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 5}}) {
    AttrMap attrs = PieceAttrs(OpKind::kPick, {}, in,
                               {LastDimBox(xs, begin, end), FullBox(Shape({2, 3}))}, out,
                               {FullBox(Shape({2, 3}))});
    EXPECT_EQ(*attrs.GetInt("vocab_begin"), begin);
    HostTensor piece = Run1(OpKind::kPick, {LastDimRange(x, begin, end), targets}, attrs);
    for (int64_t i = 0; i < sum.size(); ++i) sum[i] += piece[i];
  }
  ExpectNear(sum, whole);

  // Split the piece [2, 5) again at its local position 1: the inner pieces start at 2
  // and 3 of the whole vocabulary.
  AttrMap outer{{"vocab_begin", int64_t{2}}};
  std::vector<TensorType> piece_in = {F64({2, 3, 3}), I64({2, 3})};
  AttrMap inner = PieceAttrs(OpKind::kPick, outer, piece_in,
                             {LastDimBox(Shape({2, 3, 3}), 1, 3), FullBox(Shape({2, 3}))}, out,
                             {FullBox(Shape({2, 3}))});
  EXPECT_EQ(*inner.GetInt("vocab_begin"), 3);
}

// A piece over some positions and the whole vocabulary keeps the op's attributes.
TEST(PickTest, WholeVocabularyPieceKeepsAttributes) {
  std::vector<TensorType> in = {F64({4, 5}), I64({4})};
  AttrMap attrs = PieceAttrs(OpKind::kPick, {}, in, {Box{{2, 4}, {0, 5}}, Box{{2, 4}}},
                             {F64({4})}, {Box{{2, 4}}});
  EXPECT_FALSE(attrs.Has("vocab_begin"));
}

// pick's gradient is pick_grad(targets, dy) over x's vocabulary, with vocab_begin
// carried over; the targets get none.
TEST(PickTest, GradientScattersDyIntoTheTargetEntry) {
  HostTensor x = Make({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor targets = Make({2}, {3, 5}, DType::kI64);
  HostTensor dy = Make({2}, {7, -2});
  auto r = ApplyGradRule(OpKind::kPick, {x, targets}, {{"vocab_begin", int64_t{3}}}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->grads[0].has_value());
  EXPECT_FALSE(r->grads[1].has_value());
  EXPECT_EQ(r->graph.op(1).kind, OpKind::kPickGrad);
  ExpectNear(*r->grads[0], {7, 0, 0, 0, 0, -2});
}

// ---- pick_grad ----------------------------------------------------------------------

// pick_grad writes dy at the target entry of each row and zeros elsewhere.
TEST(PickGradTest, MatchesOneHotTimesDy) {
  HostTensor targets = Make({2, 2}, {0, 3, 2, 1}, DType::kI64);
  HostTensor dy = Make({2, 2}, {1.5, -2, 3, 4});
  HostTensor dx = Run1(OpKind::kPickGrad, {targets, dy}, {{"vocab", int64_t{4}}});
  ASSERT_EQ(dx.shape.dims(), (std::vector<int64_t>{2, 2, 4}));
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_DOUBLE_EQ(dx[r * 4 + j], j == targets[r] ? dy[r] : 0.0) << r << "," << j;
    }
  }
}

// Shape errors: vocab is required and positive, dy is shaped like targets.
TEST(PickGradTest, RejectsBadInputs) {
  EXPECT_FALSE(InferError(OpKind::kPickGrad, {I64({2}), F64({2})}, {}).ok());
  EXPECT_EQ(
      InferError(OpKind::kPickGrad, {I64({2}), F64({2})}, {{"vocab", int64_t{0}}}).message(),
      "attribute 'vocab' is 0, expected at least 1");
  EXPECT_FALSE(
      InferError(OpKind::kPickGrad, {I64({2}), F64({3})}, {{"vocab", int64_t{4}}}).ok());
  EXPECT_FALSE(
      InferError(OpKind::kPickGrad, {F64({2}), F64({2})}, {{"vocab", int64_t{4}}}).ok());
}

// The vocabulary label is spatial and appears only in the output.
TEST(PickGradTest, SignatureHasSpatialOutputOnlyVocabulary) {
  EXPECT_EQ(Signature(OpKind::kPickGrad, {I64({2, 3}), F64({2, 3})}, {{"vocab", int64_t{5}}}),
            "d0 d1, d0 d1 -> d0 d1 v");
}

// Pieces of pick_grad along the vocabulary, with the attributes shard_attrs gives
// them, concatenate to the whole pick_grad.
TEST(PickGradTest, VocabularyPiecesConcatenateToWhole) {
  HostTensor targets = Make({3}, {0, 4, 2}, DType::kI64);
  HostTensor dy = Make({3}, {1, 2, 3});
  AttrMap attrs{{"vocab", int64_t{5}}};
  HostTensor whole = Run1(OpKind::kPickGrad, {targets, dy}, attrs);
  std::vector<TensorType> in = {I64({3}), F64({3})};
  std::vector<TensorType> out = {F64({3, 5})};
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}}) {
    AttrMap piece_attrs = PieceAttrs(OpKind::kPickGrad, attrs, in,
                                     {FullBox(Shape({3})), FullBox(Shape({3}))}, out,
                                     {LastDimBox(Shape({3, 5}), begin, end)});
    EXPECT_EQ(*piece_attrs.GetInt("vocab"), end - begin);
    EXPECT_EQ(*piece_attrs.GetInt("vocab_begin"), begin);
    HostTensor piece = Run1(OpKind::kPickGrad, {targets, dy}, piece_attrs);
    ExpectNear(piece, LastDimRange(whole, begin, end));
  }
}

// ---- max and expand -------------------------------------------------------------------

// max's reduced label is a max-reduction, printed as `x:max`.
TEST(MaxReductionTest, MaxSignatureMarksMaxReduction) {
  EXPECT_EQ(Signature(OpKind::kMax, {F64({2, 3, 4})}, {{"dim", int64_t{1}}}),
            "d0 d1 d2 -> d0 d2 | d1:max");
}

// The max over vocabulary pieces is the max of the pieces' maxima.
TEST(MaxReductionTest, PiecesCombineByMax) {
  std::mt19937_64 rng(3);
  HostTensor x = RandomTensor(Shape({3, 5}), rng);
  AttrMap attrs{{"dim", int64_t{-1}}};
  HostTensor whole = Run1(OpKind::kMax, {x}, attrs);
  HostTensor a = Run1(OpKind::kMax, {LastDimRange(x, 0, 2)}, attrs);
  HostTensor b = Run1(OpKind::kMax, {LastDimRange(x, 2, 5)}, attrs);
  for (int64_t r = 0; r < 3; ++r) EXPECT_DOUBLE_EQ(std::max(a[r], b[r]), whole[r]) << r;
}

// Pieces of an expand along the expanded dim get their own `size` and match the
// corresponding slices of the whole expansion.
TEST(ExpandPiecesTest, PiecesAreNarrowerExpansions) {
  HostTensor x = Make({2, 1}, {4, -1});
  AttrMap attrs{{"dim", int64_t{1}}, {"size", int64_t{5}}};
  HostTensor whole = Run1(OpKind::kExpand, {x}, attrs);
  std::vector<TensorType> in = {F64({2, 1})};
  std::vector<TensorType> out = {F64({2, 5})};
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 5}}) {
    AttrMap piece_attrs = PieceAttrs(OpKind::kExpand, attrs, in, {FullBox(Shape({2, 1}))}, out,
                                     {LastDimBox(Shape({2, 5}), begin, end)});
    EXPECT_EQ(*piece_attrs.GetInt("size"), end - begin);
    HostTensor piece = Run1(OpKind::kExpand, {x}, piece_attrs);
    ExpectNear(piece, LastDimRange(whole, begin, end));
  }
}

}  // namespace
}  // namespace loom::ir
