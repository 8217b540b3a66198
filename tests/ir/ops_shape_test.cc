#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using ::loom::ir::testing::ApplyGradRule;
using ::loom::ir::testing::Dot;
using ::loom::ir::testing::F64;
using ::loom::ir::testing::I64;
using ::loom::ir::testing::InferError;
using ::loom::ir::testing::Make;
using ::loom::ir::testing::RandomTensor;
using ::loom::ir::testing::Run1;
using ::loom::ir::testing::RunOp;
using ::loom::ir::testing::Signature;

// 0, 1, 2, ... in row-major order, so every element is identifiable.
HostTensor Iota(std::vector<int64_t> dims) {
  HostTensor t(Shape(std::move(dims)), DType::kF64);
  for (int64_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(i);
  return t;
}

bool IsShapeOp(OpKind kind) {
  switch (kind) {
    case OpKind::kConcat:
    case OpKind::kExpand:
    case OpKind::kPad:
    case OpKind::kReshape:
    case OpKind::kSlice:
    case OpKind::kSplit:
    case OpKind::kTranspose:
      return true;
    default:
      return false;
  }
}

// ---- reshape ---------------------------------------------------------------------

// The -1 entry becomes the remaining element count; the row-major data is unchanged.
TEST(ReshapeTest, InfersMinusOneAndKeepsRowMajorData) {
  HostTensor x = Iota({2, 3, 4});
  HostTensor y = Run1(OpKind::kReshape, {x}, {{"shape", std::vector<int64_t>{4, -1}}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(y.data, x.data);
}

// Element-count mismatches, two -1 entries and other negative dims are rejected.
TEST(ReshapeTest, RejectsBadTargetShapes) {
  TensorType t = F64({2, 3});
  EXPECT_EQ(InferError(OpKind::kReshape, {t}, {{"shape", std::vector<int64_t>{4, 2}}}).message(),
            "cannot reshape [2,3] (6 elements) into [4,2] (8 elements)");
  EXPECT_EQ(InferError(OpKind::kReshape, {t}, {{"shape", std::vector<int64_t>{4, -1}}}).message(),
            "cannot reshape [2,3] into [4,-1]");
  EXPECT_EQ(InferError(OpKind::kReshape, {t}, {{"shape", std::vector<int64_t>{-1, -1}}}).message(),
            "attribute 'shape' [-1,-1] has dim -1 at position 1; only one -1 (inferred) is "
            "allowed");
  EXPECT_FALSE(
      InferOutputTypes(OpKind::kReshape, {t}, {{"shape", std::vector<int64_t>{-2, -3}}}).ok());
  EXPECT_FALSE(InferOutputTypes(OpKind::kReshape, {t}, {}).ok());
}

// Equal dims share a spatial label; a merge group shares its leading dims' label and
// fixes the rest; an unpaired size-1 dim is fixed.
TEST(ReshapeTest, SignatureGroupsDimsByRunningProducts) {
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({2, 3, 4})}, {{"shape", std::vector<int64_t>{2, 12}}}),
            "d0 d1 x2 -> d0 d1 | x2:fixed");
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({6, 4})}, {{"shape", std::vector<int64_t>{2, 3, 4}}}),
            "d0 d1 -> d0 y1 d1 | y1:fixed");
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({2, 3})}, {{"shape", std::vector<int64_t>{2, 3, 1}}}),
            "d0 d1 -> d0 d1 y2 | y2:fixed");
  EXPECT_EQ(
      Signature(OpKind::kReshape, {F64({2, 1, 3})}, {{"shape", std::vector<int64_t>{2, 1, -1}}}),
      "d0 d1 d2 -> d0 d1 d2");
}

// [b, s, (h d)] -> [b, s, h, d] and back: (h d) and h share one label, d is fixed.
TEST(ReshapeTest, SignatureSharesHeadsBetweenSplitAndMergedDims) {
  EXPECT_EQ(
      Signature(OpKind::kReshape, {F64({2, 3, 8})}, {{"shape", std::vector<int64_t>{2, 3, 4, 2}}}),
      "d0 d1 d2 -> d0 d1 d2 y3 | y3:fixed");
  EXPECT_EQ(
      Signature(OpKind::kReshape, {F64({2, 3, 4, 2})}, {{"shape", std::vector<int64_t>{2, 3, 8}}}),
      "d0 d1 d2 x3 -> d0 d1 d2 | x3:fixed");
}

// Groups that both split and merge, size-1 dims inside and outside groups, and empty
// tensors (nothing to split: every label fixed).
TEST(ReshapeTest, SignatureHandlesMixedGroupsSizeOneAndEmpty) {
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({6, 4})}, {{"shape", std::vector<int64_t>{4, 6}}}),
            "d0 x1 -> d0 y1 | x1:fixed y1:fixed");
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({1, 6})}, {{"shape", std::vector<int64_t>{6}}}),
            "x0 d1 -> d1 | x0:fixed");
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({2, 1, 3})}, {{"shape", std::vector<int64_t>{6}}}),
            "d0 x1 x2 -> d0 | x1:fixed x2:fixed");
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({2, 1})}, {{"shape", std::vector<int64_t>{1, 2}}}),
            "d0 x1 -> y0 d0 | x1:fixed y0:fixed");
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({1})}, {{"shape", std::vector<int64_t>{}}}),
            "x0 ->  | x0:fixed");
  EXPECT_EQ(Signature(OpKind::kReshape, {F64({0, 3})}, {{"shape", std::vector<int64_t>{3, 0}}}),
            "x0 x1 -> y0 y1 | x0:fixed x1:fixed y0:fixed y1:fixed");
}

// The elements of `t` inside `box`, as a tensor of the box's dims.
HostTensor SliceBox(const HostTensor& t, const Box& box) {
  HostTensor out(Shape(BoxDims(box)), t.dtype);
  const int rank = t.shape.rank();
  std::vector<int64_t> strides = t.shape.Strides();
  std::vector<int64_t> index(rank, 0);  // into the box
  for (int64_t o = 0; o < out.size(); ++o) {
    int64_t src = 0;
    for (int d = 0; d < rank; ++d) src += (box[d].begin + index[d]) * strides[d];
    out[o] = t[src];
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < box[d].size()) break;
      index[d] = 0;
    }
  }
  return out;
}

// Splitting any spatial label of a reshape n ways (n the smallest prime dividing every
// size it labels) gives pieces whose reshape, with the attributes shard_attrs returns,
// is exactly the matching box of the full result.
TEST(ReshapeTest, PiecesOfEverySpatialLabelMatchTheFullResult) {
  struct Case {
    std::vector<int64_t> in, out;
  };
  const std::vector<Case> cases = {{{2, 3, 8}, {2, 3, 4, 2}}, {{2, 3, 4, 2}, {2, 3, 8}},
                                   {{6, 4}, {4, 6}},          {{2, 1, 6}, {12}},
                                   {{3, 4}, {3, 2, 2}},       {{1, 4}, {2, 1, 2}}};
  const OpSchema& schema = GetOpSchema(OpKind::kReshape);
  ASSERT_NE(schema.shard_attrs, nullptr);
  std::mt19937_64 rng(5);
  int splits = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(
        absl::StrCat("[", absl::StrJoin(c.in, ","), "] -> [", absl::StrJoin(c.out, ","), "]"));
    const AttrMap attrs{{"shape", c.out}};
    const std::vector<TensorType> in = {F64(c.in)};
    const std::vector<TensorType> out = {F64(c.out)};
    HostTensor x = RandomTensor(Shape(c.in), rng);
    HostTensor y = Run1(OpKind::kReshape, {x}, attrs);
    auto sig = schema.signature(in, attrs);
    ASSERT_TRUE(sig.ok()) << sig.status();
    for (const auto& [label, kind] : sig->kinds) {
      if (kind != DimKind::kSpatial) continue;
      int64_t g = 0;
      for (size_t d = 0; d < c.in.size(); ++d) {
        if (sig->inputs[0][d] == label) g = std::gcd(g, c.in[d]);
      }
      for (size_t d = 0; d < c.out.size(); ++d) {
        if (sig->outputs[0][d] == label) g = std::gcd(g, c.out[d]);
      }
      int64_t n = 2;
      while (n <= g && g % n != 0) ++n;
      if (n > g) continue;  // size 1: nothing to split
      ++splits;
      for (int64_t k = 0; k < n; ++k) {
        auto box = [&](const std::vector<int64_t>& dims, const std::vector<std::string>& labels) {
          Box b;
          for (size_t d = 0; d < dims.size(); ++d) {
            const int64_t chunk = dims[d] / n;
            b.push_back(labels[d] == label ? Interval{k * chunk, (k + 1) * chunk}
                                           : Interval{0, dims[d]});
          }
          return b;
        };
        const Box in_box = box(c.in, sig->inputs[0]);
        const Box out_box = box(c.out, sig->outputs[0]);
        SCOPED_TRACE(absl::StrCat(label, " piece ", k, ": ", BoxToString(in_box), " -> ",
                                  BoxToString(out_box)));
        auto piece_attrs = schema.shard_attrs(attrs, in, {in_box}, out, {out_box});
        ASSERT_TRUE(piece_attrs.ok()) << piece_attrs.status();
        EXPECT_EQ(piece_attrs->ToString(),
                  absl::StrCat("{shape=[", absl::StrJoin(BoxDims(out_box), ","), "]}"));
        HostTensor piece = Run1(OpKind::kReshape, {SliceBox(x, in_box)}, *piece_attrs);
        HostTensor want = SliceBox(y, out_box);
        EXPECT_EQ(piece.shape.dims(), want.shape.dims());
        EXPECT_EQ(piece.data, want.data);
      }
    }
  }
  EXPECT_EQ(splits, 11);
}

// A piece's shape is its output box's dims (a -1 in the op's shape is gone); a box
// list that does not fit the output is an error.
TEST(ReshapeTest, ShardAttrsReplaceShapeByTheOutputBox) {
  const OpSchema& schema = GetOpSchema(OpKind::kReshape);
  ASSERT_NE(schema.shard_attrs, nullptr);
  const AttrMap attrs{{"shape", std::vector<int64_t>{2, -1, 2}}};
  const std::vector<TensorType> in = {F64({2, 8})};
  const std::vector<TensorType> out = {F64({2, 4, 2})};
  auto piece =
      schema.shard_attrs(attrs, in, {Box{{0, 2}, {4, 8}}}, out, {Box{{0, 2}, {2, 4}, {0, 2}}});
  ASSERT_TRUE(piece.ok()) << piece.status();
  EXPECT_EQ(piece->ToString(), "{shape=[2,2,2]}");
  EXPECT_FALSE(schema.shard_attrs(attrs, in, {Box{{0, 2}, {0, 8}}}, out, {}).ok());
  EXPECT_FALSE(
      schema.shard_attrs(attrs, in, {Box{{0, 2}, {0, 8}}}, out, {Box{{0, 2}, {0, 8}}}).ok());
}

// Integer tensors reshape like float ones and receive no gradient.
TEST(ReshapeTest, MovesIntegerDataWithoutGradient) {
  HostTensor ids = Make({2, 2}, {3, 1, 4, 1}, DType::kI64);
  HostTensor y = Run1(OpKind::kReshape, {ids}, {{"shape", std::vector<int64_t>{4}}});
  EXPECT_EQ(y.dtype, DType::kI64);
  EXPECT_EQ(y.data, ids.data);
  auto r = ApplyGradRule(OpKind::kReshape, {ids}, {{"shape", std::vector<int64_t>{4}}},
                         {Make({4}, {0, 0, 0, 0}, DType::kI64)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->grads[0].has_value());
}

// ---- transpose -------------------------------------------------------------------

// Output element [i0, i1, i2] is input element [i1, i2, i0] for perm [2, 0, 1].
TEST(TransposeTest, OutputDimIReadsInputDimPermI) {
  HostTensor x = Iota({2, 3, 4});
  HostTensor y = Run1(OpKind::kTranspose, {x}, {{"perm", std::vector<int64_t>{2, 0, 1}}});
  ASSERT_EQ(y.shape.dims(), (std::vector<int64_t>{4, 2, 3}));
  for (int64_t i0 = 0; i0 < 4; ++i0) {
    for (int64_t i1 = 0; i1 < 2; ++i1) {
      for (int64_t i2 = 0; i2 < 3; ++i2) {
        EXPECT_EQ(y[(i0 * 2 + i1) * 3 + i2], x[(i1 * 3 + i2) * 4 + i0]);
      }
    }
  }
}

// Negative entries count from the end.
TEST(TransposeTest, AcceptsNegativePermEntries) {
  HostTensor x = Iota({2, 3});
  HostTensor y = Run1(OpKind::kTranspose, {x}, {{"perm", std::vector<int64_t>{-1, 0}}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(y.data, (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

// A perm of the wrong length, with a repeat or out of range is rejected.
TEST(TransposeTest, RejectsNonPermutations) {
  TensorType t = F64({2, 3, 4});
  EXPECT_EQ(InferError(OpKind::kTranspose, {t}, {{"perm", std::vector<int64_t>{1, 0}}}).message(),
            "attribute 'perm' has 2 entries, expected 3 (the input rank)");
  EXPECT_EQ(
      InferError(OpKind::kTranspose, {t}, {{"perm", std::vector<int64_t>{0, 2, -1}}}).message(),
      "attribute 'perm' [0,2,-1] names dim 2 twice");
  EXPECT_EQ(
      InferError(OpKind::kTranspose, {t}, {{"perm", std::vector<int64_t>{0, 1, 3}}}).message(),
      "dim 3 is out of range for rank 3");
}

// Labels follow their dims; all stay spatial.
TEST(TransposeTest, SignaturePermutesLabels) {
  EXPECT_EQ(
      Signature(OpKind::kTranspose, {F64({2, 3, 4})}, {{"perm", std::vector<int64_t>{2, 0, 1}}}),
      "d0 d1 d2 -> d2 d0 d1");
}

// ---- concat / split ----------------------------------------------------------------

// Inputs are laid one after another along the (negative) dim.
TEST(ConcatTest, JoinsAlongDim) {
  HostTensor a = Make({2, 2}, {1, 2, 3, 4});
  HostTensor b = Make({2, 1}, {5, 6});
  HostTensor y = Run1(OpKind::kConcat, {a, b}, {{"dim", int64_t{-1}}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.data, (std::vector<double>{1, 2, 5, 3, 4, 6}));
  HostTensor z = Run1(OpKind::kConcat, {a, Make({1, 2}, {7, 8})}, {{"dim", int64_t{0}}});
  EXPECT_EQ(z.data, (std::vector<double>{1, 2, 3, 4, 7, 8}));
}

// Inputs must agree off the concat dim, in rank and in dtype.
TEST(ConcatTest, RejectsMismatchOffTheConcatDim) {
  EXPECT_EQ(
      InferError(OpKind::kConcat, {F64({2, 3}), F64({3, 3})}, {{"dim", int64_t{1}}}).message(),
      "input 1 is f64[3,3], expected f64[2,3] like input 0 except along dim 1");
  EXPECT_FALSE(
      InferOutputTypes(OpKind::kConcat, {F64({2, 3}), F64({2, 3, 1})}, {{"dim", int64_t{0}}}).ok());
  EXPECT_FALSE(
      InferOutputTypes(OpKind::kConcat, {F64({2, 3}), I64({2, 3})}, {{"dim", int64_t{0}}}).ok());
  EXPECT_FALSE(InferOutputTypes(OpKind::kConcat, {F64({2, 3})}, {{"dim", int64_t{2}}}).ok());
}

// The concat dim carries one fixed label per input; the other dims are shared.
TEST(ConcatTest, SignatureGivesEachInputItsOwnConcatLabel) {
  EXPECT_EQ(Signature(OpKind::kConcat, {F64({2, 3, 4}), F64({2, 1, 4})}, {{"dim", int64_t{1}}}),
            "d0 c0 d2, d0 c1 d2 -> d0 c d2 | c:fixed c0:fixed c1:fixed");
}

// Pieces come out in order and concatenate back to the input.
TEST(SplitTest, PiecesAreConsecutiveRanges) {
  HostTensor x = Iota({2, 4});
  auto out =
      RunOp(OpKind::kSplit, {x}, {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{1, 3}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].data, (std::vector<double>{0, 4}));
  EXPECT_EQ((*out)[1].data, (std::vector<double>{1, 2, 3, 5, 6, 7}));
  HostTensor back = Run1(OpKind::kConcat, *out, {{"dim", int64_t{1}}});
  EXPECT_EQ(back.data, x.data);
}

// Sizes must be positive and sum to the dim.
TEST(SplitTest, RejectsSizesNotCoveringTheDim) {
  TensorType t = F64({2, 4});
  EXPECT_EQ(
      InferError(OpKind::kSplit, {t}, {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{1, 2}}})
          .message(),
      "attribute 'sizes' [1,2] sums to 3, expected 4 (dim 1)");
  EXPECT_FALSE(InferOutputTypes(OpKind::kSplit, {t},
                                {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{0, 4}}})
                   .ok());
  EXPECT_FALSE(InferOutputTypes(OpKind::kSplit, {t},
                                {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{5, -1}}})
                   .ok());
}

// A split output without a gradient contributes zeros to the concatenated gradient.
TEST(SplitTest, GradientFillsMissingPiecesWithZeros) {
  HostTensor x = Iota({2, 3});
  AttrMap attrs{{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{2, 1}}};
  auto r = ApplyGradRule(OpKind::kSplit, {x}, attrs, {std::nullopt, Make({2, 1}, {7, 8})});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->grads[0].has_value());
  EXPECT_EQ(r->grads[0]->data, (std::vector<double>{0, 0, 7, 0, 0, 8}));
}

// ---- slice / pad / expand ----------------------------------------------------------

// Slice keeps positions [begin, end) of one dim.
TEST(SliceTest, KeepsRangeAlongDim) {
  HostTensor x = Iota({2, 4});
  HostTensor y =
      Run1(OpKind::kSlice, {x}, {{"dim", int64_t{-1}}, {"begin", int64_t{1}}, {"end", int64_t{3}}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(y.data, (std::vector<double>{1, 2, 5, 6}));
}

// Empty, reversed and out-of-range slices are rejected.
TEST(SliceTest, RejectsRangesOutsideTheDim) {
  TensorType t = F64({2, 4});
  auto attrs = [](int64_t begin, int64_t end) {
    return AttrMap{{"dim", int64_t{1}}, {"begin", begin}, {"end", end}};
  };
  EXPECT_EQ(InferError(OpKind::kSlice, {t}, attrs(1, 5)).message(),
            "slice [1, 5) is not a non-empty range of dim 1 (size 4)");
  EXPECT_FALSE(InferOutputTypes(OpKind::kSlice, {t}, attrs(2, 2)).ok());
  EXPECT_FALSE(InferOutputTypes(OpKind::kSlice, {t}, attrs(-1, 2)).ok());
  EXPECT_TRUE(InferOutputTypes(OpKind::kSlice, {t}, attrs(0, 4)).ok());
}

// The gradient of a slice is dy padded back into place with zeros.
TEST(SliceTest, GradientIsPadWithTheSlicedAwayExtents) {
  HostTensor x = Iota({2, 5});
  AttrMap attrs{{"dim", int64_t{1}}, {"begin", int64_t{1}}, {"end", int64_t{3}}};
  auto r = ApplyGradRule(OpKind::kSlice, {x}, attrs, {Make({2, 2}, {1, 2, 3, 4})});
  ASSERT_TRUE(r.ok()) << r.status();
  const Op& grad_op = r->graph.ops().back();
  EXPECT_EQ(grad_op.kind, OpKind::kPad);
  EXPECT_EQ(grad_op.attrs.ToString(), "{after=2, before=1, dim=1}");
  EXPECT_EQ(r->grads[0]->data, (std::vector<double>{0, 1, 2, 0, 0, 0, 3, 4, 0, 0}));
}

// Pad surrounds the input with zeros along one dim.
TEST(PadTest, AddsZerosBeforeAndAfter) {
  HostTensor x = Make({2, 2}, {1, 2, 3, 4});
  HostTensor y =
      Run1(OpKind::kPad, {x}, {{"dim", int64_t{0}}, {"before", int64_t{1}}, {"after", int64_t{2}}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(y.data, (std::vector<double>{0, 0, 1, 2, 3, 4, 0, 0, 0, 0}));
  EXPECT_EQ(InferError(OpKind::kPad, {F64({2})},
                       {{"dim", int64_t{0}}, {"before", int64_t{-1}}, {"after", int64_t{0}}})
                .message(),
            "padding before=-1 after=0 is negative");
}

// Expand repeats the unit dim `size` times.
TEST(ExpandTest, RepeatsTheUnitDim) {
  HostTensor x = Make({2, 1, 2}, {1, 2, 3, 4});
  HostTensor y = Run1(OpKind::kExpand, {x}, {{"dim", int64_t{1}}, {"size", int64_t{3}}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(y.data, (std::vector<double>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
}

// Only a dim of size 1 can be expanded, to a positive size.
TEST(ExpandTest, RejectsNonUnitDim) {
  EXPECT_EQ(InferError(OpKind::kExpand, {F64({2, 3})}, {{"dim", int64_t{1}}, {"size", int64_t{4}}})
                .message(),
            "input 0 has size 3 at dim 1, expected 1");
  EXPECT_FALSE(
      InferOutputTypes(OpKind::kExpand, {F64({2, 1})}, {{"dim", int64_t{1}}, {"size", int64_t{0}}})
          .ok());
}

// The gradient of expand sums the copies: sum over the dim, then reshape.
TEST(ExpandTest, GradientSumsTheCopies) {
  HostTensor x = Make({2, 1}, {1, 2});
  auto r = ApplyGradRule(OpKind::kExpand, {x}, {{"dim", int64_t{-1}}, {"size", int64_t{3}}},
                         {Make({2, 3}, {1, 2, 3, 10, 20, 30})});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GE(r->graph.num_ops(), 3);
  EXPECT_EQ(r->graph.op(1).kind, OpKind::kSum);
  EXPECT_EQ(r->graph.op(2).kind, OpKind::kReshape);
  EXPECT_EQ(r->grads[0]->shape.dims(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r->grads[0]->data, (std::vector<double>{6, 60}));
}

// slice and split fix the dim they change and keep the others spatial; expand fixes
// its size-1 input dim and gives the expanded output dim its own spatial label.
TEST(ShapeOpsTest, OneDimOpsFixOnlyTheirDim) {
  EXPECT_EQ(Signature(OpKind::kSlice, {F64({2, 4, 3})},
                      {{"dim", int64_t{-2}}, {"begin", int64_t{0}}, {"end", int64_t{2}}}),
            "d0 x d2 -> d0 y d2 | x:fixed y:fixed");
  EXPECT_EQ(Signature(OpKind::kExpand, {F64({2, 1})}, {{"dim", int64_t{1}}, {"size", int64_t{3}}}),
            "d0 x -> d0 y | x:fixed");
  EXPECT_EQ(Signature(OpKind::kSplit, {F64({4, 2})},
                      {{"dim", int64_t{0}}, {"sizes", std::vector<int64_t>{1, 3}}}),
            "c d1 -> c0 d1, c1 d1 | c:fixed c0:fixed c1:fixed");
}

// ---- every shape op ------------------------------------------------------------------

// Shape ops are linear, so each gradient rule must be the adjoint: <dy, f(x)> == <f^T dy, x>.
TEST(ShapeOpsTest, GradientRulesAreAdjointsOnEverySample) {
  std::set<OpKind> seen;
  for (uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 rng(seed);
    for (const auto& sample : testing::AllSamples(seed)) {
      if (!IsShapeOp(sample.kind)) continue;
      SCOPED_TRACE(absl::StrCat(OpKindName(sample.kind), "/", sample.label, " seed ", seed));
      seen.insert(sample.kind);
      std::vector<HostTensor> x = testing::SampleInputs(sample, rng);
      auto y = RunOp(sample.kind, x, sample.attrs);
      ASSERT_TRUE(y.ok()) << y.status();
      std::vector<std::optional<HostTensor>> dys;
      double lhs = 0.0;
      for (const HostTensor& yi : *y) {
        HostTensor dy = RandomTensor(yi.shape, rng);
        lhs += Dot(dy, yi);
        dys.push_back(std::move(dy));
      }
      auto r = ApplyGradRule(sample.kind, x, sample.attrs, dys);
      ASSERT_TRUE(r.ok()) << r.status();
      double rhs = 0.0;
      for (size_t j = 0; j < x.size(); ++j) {
        ASSERT_TRUE(r->grads[j].has_value()) << "input " << j;
        ASSERT_TRUE(r->grads[j]->shape.SameDims(x[j].shape)) << "input " << j;
        rhs += Dot(*r->grads[j], x[j]);
      }
      EXPECT_NEAR(lhs, rhs, 1e-12 * (1.0 + std::abs(lhs)));
    }
  }
  EXPECT_EQ(seen.size(), 7u);
}

// Data movement costs no FLOPs, and every shape op is documented.
TEST(ShapeOpsTest, CountNoFlopsAndHaveDocs) {
  for (const auto& sample : testing::AllSamples(/*seed=*/4)) {
    if (!IsShapeOp(sample.kind)) continue;
    const OpSchema& schema = GetOpSchema(sample.kind);
    auto out = InferOutputTypes(sample.kind, sample.inputs, sample.attrs);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(schema.flops(sample.inputs, *out, sample.attrs), 0.0) << sample.label;
    EXPECT_EQ(schema.doc.rfind(std::string(OpKindName(sample.kind)) + "(", 0), 0u) << schema.doc;
  }
}

}  // namespace
}  // namespace loom::ir
