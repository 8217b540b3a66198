#include <random>
#include <string>
#include <utility>
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

std::vector<OpKind> OpKinds(const Graph& graph) {
  std::vector<OpKind> kinds;
  for (const Op& op : graph.ops()) kinds.push_back(op.kind);
  return kinds;
}

// ---- matmul ------------------------------------------------------------------------

// y[p, i, j] = sum_l a[p, i, l] * b[p, l, j] for every batch entry p.
TEST(MatMulTest, BatchedMatchesExplicitSums) {
  std::mt19937_64 rng(1);
  HostTensor a = RandomTensor(Shape({2, 3, 4}), rng);
  HostTensor b = RandomTensor(Shape({2, 4, 5}), rng);
  HostTensor want(Shape({2, 3, 5}), DType::kF64);
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) {
        for (int l = 0; l < 4; ++l) {
          want[(p * 3 + i) * 5 + j] += a[(p * 3 + i) * 4 + l] * b[(p * 4 + l) * 5 + j];
        }
      }
    }
  }
  ExpectNear(Run1(OpKind::kMatMul, {a, b}, {}), want);
}

// A rank-2 right operand multiplies every batch entry of the left one.
TEST(MatMulTest, Rank2RhsIsSharedByEveryBatchEntry) {
  std::mt19937_64 rng(2);
  HostTensor a = RandomTensor(Shape({2, 2, 3, 4}), rng);
  HostTensor b = RandomTensor(Shape({4, 2}), rng);
  HostTensor want(Shape({2, 2, 3, 2}), DType::kF64);
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 2; ++j) {
        for (int l = 0; l < 4; ++l) {
          want[(p * 3 + i) * 2 + j] += a[(p * 3 + i) * 4 + l] * b[l * 2 + j];
        }
      }
    }
  }
  ExpectNear(Run1(OpKind::kMatMul, {a, b}, {}), want);
}

// Contraction, batch, rank and dtype mismatches are reported against the input.
TEST(MatMulTest, RejectsIncompatibleOperands) {
  EXPECT_EQ(InferError(OpKind::kMatMul, {F64({2, 3, 4}), F64({2, 5, 6})}, {}).message(),
            "input 1 has size 5 at dim 1, expected 4 (the last dim of input 0)");
  EXPECT_EQ(InferError(OpKind::kMatMul, {F64({2, 3, 4}), F64({3, 4, 5})}, {}).message(),
            "input 1 has size 3 at dim 0, expected 2 like input 0");
  EXPECT_EQ(InferError(OpKind::kMatMul, {F64({2, 3, 4}), F64({1, 2, 4, 5})}, {}).message(),
            "input 1 has 4 dims, expected 2 or 3");
  EXPECT_EQ(InferError(OpKind::kMatMul, {F64({4}), F64({4, 5})}, {}).message(),
            "input 0 has 1 dims, expected at least 2");
  EXPECT_EQ(InferError(OpKind::kMatMul, {F64({3, 4}), TensorType{Shape({4, 5}), DType::kF32}}, {})
                .message(),
            "input 1 has dtype f32, expected f64 like input 0");
}

// k is a reduction label; batch labels are shared only when b is batched.
TEST(MatMulTest, SignatureReducesContractionDim) {
  EXPECT_EQ(Signature(OpKind::kMatMul, {F64({2, 3, 4}), F64({2, 4, 5})}, {}),
            "b0 m k, b0 k n -> b0 m n | k:reduce");
  EXPECT_EQ(Signature(OpKind::kMatMul, {F64({2, 2, 3, 4}), F64({4, 5})}, {}),
            "b0 b1 m k, k n -> b0 b1 m n | k:reduce");
}

// FLOPs are 2 * batch * m * k * n.
TEST(MatMulTest, FlopsAreTwoPerMultiplyAdd) {
  std::vector<TensorType> in = {F64({2, 3, 4}), F64({4, 5})};
  EXPECT_EQ(GetOpSchema(OpKind::kMatMul).flops(in, {F64({2, 3, 5})}, {}), 2.0 * 2 * 3 * 4 * 5);
}

// da = dy b^T and db = a^T dy, per entry of a two-dim batch.
TEST(MatMulTest, BatchedGradientsMatchExplicitSums) {
  std::mt19937_64 rng(3);
  HostTensor a = RandomTensor(Shape({2, 2, 3, 4}), rng);
  HostTensor b = RandomTensor(Shape({2, 2, 4, 5}), rng);
  HostTensor dy = RandomTensor(Shape({2, 2, 3, 5}), rng);
  HostTensor da(a.shape, DType::kF64);
  HostTensor db(b.shape, DType::kF64);
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) {
        for (int l = 0; l < 4; ++l) {
          da[(p * 3 + i) * 4 + l] += dy[(p * 3 + i) * 5 + j] * b[(p * 4 + l) * 5 + j];
          db[(p * 4 + l) * 5 + j] += a[(p * 3 + i) * 4 + l] * dy[(p * 3 + i) * 5 + j];
        }
      }
    }
  }
  auto r = ApplyGradRule(OpKind::kMatMul, {a, b}, {}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear(*r->grads[0], da);
  ExpectNear(*r->grads[1], db);
}

// With a shared rank-2 b, db sums a^T dy over the batch through [B*m, k] reshapes.
TEST(MatMulTest, SharedRhsGradientSumsOverTheBatch) {
  std::mt19937_64 rng(4);
  HostTensor a = RandomTensor(Shape({2, 3, 4}), rng);
  HostTensor b = RandomTensor(Shape({4, 5}), rng);
  HostTensor dy = RandomTensor(Shape({2, 3, 5}), rng);
  HostTensor da(a.shape, DType::kF64);
  HostTensor db(b.shape, DType::kF64);
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) {
        for (int l = 0; l < 4; ++l) {
          da[(p * 3 + i) * 4 + l] += dy[(p * 3 + i) * 5 + j] * b[l * 5 + j];
          db[l * 5 + j] += a[(p * 3 + i) * 4 + l] * dy[(p * 3 + i) * 5 + j];
        }
      }
    }
  }
  auto r = ApplyGradRule(OpKind::kMatMul, {a, b}, {}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(
      OpKinds(r->graph),
      (std::vector<OpKind>{OpKind::kMatMul, OpKind::kTranspose, OpKind::kMatMul, OpKind::kReshape,
                           OpKind::kReshape, OpKind::kTranspose, OpKind::kMatMul}));
  ExpectNear(*r->grads[0], da);
  ExpectNear(*r->grads[1], db);
}

// ---- linear ------------------------------------------------------------------------

// y[n, o] = sum_i x[n, i] * w[o, i] + bias[o] over every leading position n.
TEST(LinearTest, ComputesXWTransposePlusBias) {
  std::mt19937_64 rng(5);
  HostTensor x = RandomTensor(Shape({2, 3, 4}), rng);
  HostTensor w = RandomTensor(Shape({5, 4}), rng);
  HostTensor bias = RandomTensor(Shape({5}), rng);
  HostTensor want(Shape({2, 3, 5}), DType::kF64);
  HostTensor want_no_bias(Shape({2, 3, 5}), DType::kF64);
  for (int n = 0; n < 6; ++n) {
    for (int o = 0; o < 5; ++o) {
      for (int i = 0; i < 4; ++i) want_no_bias[n * 5 + o] += x[n * 4 + i] * w[o * 4 + i];
      want[n * 5 + o] = want_no_bias[n * 5 + o] + bias[o];
    }
  }
  ExpectNear(Run1(OpKind::kLinear, {x, w, bias}, {}), want);
  ExpectNear(Run1(OpKind::kLinear, {x, w}, {}), want_no_bias);
}

// Feature, bias and rank mismatches are rejected.
TEST(LinearTest, RejectsIncompatibleOperands) {
  EXPECT_EQ(InferError(OpKind::kLinear, {F64({2, 4}), F64({5, 3})}, {}).message(),
            "input 1 has 3 input features, expected 4 (the last dim of input 0)");
  EXPECT_EQ(InferError(OpKind::kLinear, {F64({2, 4}), F64({5, 4}), F64({4})}, {}).message(),
            "input 2 is f64[4], expected dims [5]");
  EXPECT_EQ(InferError(OpKind::kLinear, {F64({4}), F64({5, 4})}, {}).message(),
            "input 0 has 1 dims, expected at least 2");
  EXPECT_EQ(InferError(OpKind::kLinear, {F64({2, 4}), F64({1, 5, 4})}, {}).message(),
            "input 1 has 3 dims, expected 2");
}

// The input-feature dim i is a reduction; leading dims and o are spatial.
TEST(LinearTest, SignatureReducesInputFeatures) {
  EXPECT_EQ(Signature(OpKind::kLinear, {F64({2, 3, 4}), F64({5, 4}), F64({5})}, {}),
            "b0 b1 i, o i, o -> b0 b1 o | i:reduce");
  EXPECT_EQ(Signature(OpKind::kLinear, {F64({3, 4}), F64({5, 4})}, {}),
            "b0 i, o i -> b0 o | i:reduce");
}

// FLOPs are 2 * N * in * out, plus N * out for the bias.
TEST(LinearTest, FlopsCountBiasAdds) {
  const OpSchema& s = GetOpSchema(OpKind::kLinear);
  std::vector<TensorType> out = {F64({2, 3, 5})};
  EXPECT_EQ(s.flops({F64({2, 3, 4}), F64({5, 4})}, out, {}), 2.0 * 6 * 4 * 5);
  EXPECT_EQ(s.flops({F64({2, 3, 4}), F64({5, 4}), F64({5})}, out, {}), 2.0 * 6 * 4 * 5 + 6 * 5);
}

// dx = dy w (matmul), dw = linear_wgrad(dy, x), dbias = sum of dy over positions.
TEST(LinearTest, GradientsMatchExplicitSums) {
  std::mt19937_64 rng(6);
  HostTensor x = RandomTensor(Shape({2, 3, 4}), rng);
  HostTensor w = RandomTensor(Shape({5, 4}), rng);
  HostTensor bias = RandomTensor(Shape({5}), rng);
  HostTensor dy = RandomTensor(Shape({2, 3, 5}), rng);
  HostTensor dx(x.shape, DType::kF64);
  HostTensor dw(w.shape, DType::kF64);
  HostTensor dbias(bias.shape, DType::kF64);
  for (int n = 0; n < 6; ++n) {
    for (int o = 0; o < 5; ++o) {
      dbias[o] += dy[n * 5 + o];
      for (int i = 0; i < 4; ++i) {
        dx[n * 4 + i] += dy[n * 5 + o] * w[o * 4 + i];
        dw[o * 4 + i] += dy[n * 5 + o] * x[n * 4 + i];
      }
    }
  }
  auto r = ApplyGradRule(OpKind::kLinear, {x, w, bias}, {}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(OpKinds(r->graph), (std::vector<OpKind>{OpKind::kLinear, OpKind::kMatMul,
                                                    OpKind::kLinearWGrad, OpKind::kSum}));
  ExpectNear(*r->grads[0], dx);
  ExpectNear(*r->grads[1], dw);
  ExpectNear(*r->grads[2], dbias);
}

// dw[o, i] = sum over every leading position of dy[.., o] * x[.., i].
TEST(LinearWGradTest, SumsOuterProductsOverPositions) {
  std::mt19937_64 rng(7);
  HostTensor dy = RandomTensor(Shape({2, 3, 2}), rng);
  HostTensor x = RandomTensor(Shape({2, 3, 4}), rng);
  HostTensor want(Shape({2, 4}), DType::kF64);
  for (int n = 0; n < 6; ++n) {
    for (int o = 0; o < 2; ++o) {
      for (int i = 0; i < 4; ++i) want[o * 4 + i] += dy[n * 2 + o] * x[n * 4 + i];
    }
  }
  ExpectNear(Run1(OpKind::kLinearWGrad, {dy, x}, {}), want);
  std::vector<TensorType> in = {F64({2, 3, 2}), F64({2, 3, 4})};
  EXPECT_EQ(GetOpSchema(OpKind::kLinearWGrad).flops(in, {F64({2, 4})}, {}), 2.0 * 6 * 2 * 4);
}

// Leading dims must match; they are reduction labels of the signature.
TEST(LinearWGradTest, LeadingDimsMustMatchAndAreReduced) {
  EXPECT_EQ(InferError(OpKind::kLinearWGrad, {F64({2, 3, 2}), F64({2, 4, 4})}, {}).message(),
            "input 1 has size 4 at dim 1, expected 3 like input 0");
  EXPECT_EQ(InferError(OpKind::kLinearWGrad, {F64({2, 3, 2}), F64({6, 4})}, {}).message(),
            "input 1 has 2 dims, expected 3");
  EXPECT_EQ(Signature(OpKind::kLinearWGrad, {F64({2, 3, 2}), F64({2, 3, 4})}, {}),
            "b0 b1 o, b0 b1 i -> o i | b0:reduce b1:reduce");
}

// ---- embedding ---------------------------------------------------------------------

// Each id selects its row of the table.
TEST(EmbeddingTest, GathersRowsById) {
  HostTensor ids = Make({2, 2}, {2, 0, 2, 1}, DType::kI64);
  HostTensor table = Make({3, 2}, {1, 2, 3, 4, 5, 6});
  HostTensor y = Run1(OpKind::kEmbedding, {ids, table}, {});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(y.data, (std::vector<double>{5, 6, 1, 2, 5, 6, 3, 4}));
  EXPECT_EQ(GetOpSchema(OpKind::kEmbedding).flops({I64({2, 2}), F64({3, 2})}, {F64({2, 2, 2})}, {}),
            0.0);
}

// An id outside [0, V) is a kernel error naming the id and where it is.
TEST(EmbeddingTest, RejectsOutOfRangeIdNamingIt) {
  HostTensor table = Make({3, 2}, {1, 2, 3, 4, 5, 6});
  auto high = RunOp(OpKind::kEmbedding, {Make({2}, {0, 3}, DType::kI64), table});
  ASSERT_FALSE(high.ok());
  EXPECT_EQ(high.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(high.status().message().find("id 3 at position 1 is out of range [0, 3)"),
            absl::string_view::npos)
      << high.status();
  auto low = RunOp(OpKind::kEmbedding, {Make({1}, {-1}, DType::kI64), table});
  ASSERT_FALSE(low.ok());
  EXPECT_NE(low.status().message().find("id -1 at position 0"), absl::string_view::npos)
      << low.status();
}

// Ids must be integers and the table a float matrix.
TEST(EmbeddingTest, RejectsBadOperandTypes) {
  EXPECT_EQ(InferError(OpKind::kEmbedding, {F64({2}), F64({3, 2})}, {}).message(),
            "input 0 has dtype f64, expected an integer type");
  EXPECT_EQ(InferError(OpKind::kEmbedding, {I64({2}), F64({3, 2, 1})}, {}).message(),
            "input 1 has 3 dims, expected 2");
  EXPECT_EQ(InferError(OpKind::kEmbedding, {I64({2}), I64({3, 2})}, {}).message(),
            "input 1 has dtype i64, expected a float type");
}

// The vocab dim is a reduction: a vocab shard contributes a partial sum.
TEST(EmbeddingTest, SignatureReducesOverVocab) {
  EXPECT_EQ(Signature(OpKind::kEmbedding, {I64({2, 3}), F64({5, 4})}, {}),
            "b0 b1, v d -> b0 b1 d | v:reduce");
}

// The table gets embedding_grad(ids, dy) with the table's vocab; ids get nothing.
TEST(EmbeddingTest, GradientScatterAddsIntoTheTable) {
  HostTensor ids = Make({3}, {1, 3, 1}, DType::kI64);
  HostTensor table(Shape({4, 2}), DType::kF64);
  auto r = ApplyGradRule(OpKind::kEmbedding, {ids, table}, {}, {Make({3, 2}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->grads[0].has_value());
  ASSERT_TRUE(r->grads[1].has_value());
  const Op& grad_op = r->graph.ops().back();
  EXPECT_EQ(grad_op.kind, OpKind::kEmbeddingGrad);
  EXPECT_EQ(grad_op.attrs.ToString(), "{vocab=4}");
  EXPECT_EQ(r->grads[1]->data, (std::vector<double>{0, 0, 6, 8, 0, 0, 3, 4}));
}

// Rows of dy add into the rows their ids name; repeated ids accumulate.
TEST(EmbeddingGradTest, ScatterAddsRepeatedIds) {
  HostTensor ids = Make({2, 2}, {0, 2, 0, 0}, DType::kI64);
  HostTensor dy = Make({2, 2, 1}, {1, 2, 4, 8});
  HostTensor y = Run1(OpKind::kEmbeddingGrad, {ids, dy}, {{"vocab", int64_t{3}}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(y.data, (std::vector<double>{13, 0, 2}));
  EXPECT_FALSE(RunOp(OpKind::kEmbeddingGrad, {ids, dy}, {{"vocab", int64_t{2}}}).ok());
}

// vocab must be positive and dy must extend the ids' dims by one.
TEST(EmbeddingGradTest, RejectsBadShapesAndVocab) {
  EXPECT_EQ(InferError(OpKind::kEmbeddingGrad, {I64({2}), F64({2, 3})}, {{"vocab", int64_t{0}}})
                .message(),
            "attribute 'vocab' is 0, expected at least 1");
  EXPECT_EQ(InferError(OpKind::kEmbeddingGrad, {I64({2}), F64({3, 3})}, {{"vocab", int64_t{4}}})
                .message(),
            "input 1 has size 3 at dim 0, expected 2 like input 0");
  EXPECT_EQ(
      InferError(OpKind::kEmbeddingGrad, {I64({2}), F64({2})}, {{"vocab", int64_t{4}}}).message(),
      "input 1 has 1 dims, expected 2");
  EXPECT_EQ(Signature(OpKind::kEmbeddingGrad, {I64({2}), F64({2, 3})}, {{"vocab", int64_t{4}}}),
            "b0, b0 d -> v d | b0:reduce");
}

// ---- vocabulary pieces ---------------------------------------------------------------

// Rows [begin, end) of a [V, d] table.
HostTensor Rows(const HostTensor& t, int64_t begin, int64_t end) {
  const int64_t d = t.shape.dim(1);
  HostTensor out(Shape({end - begin, d}), t.dtype);
  for (int64_t i = 0; i < out.size(); ++i) out[i] = t[begin * d + i];
  return out;
}

// ids in [0, 5) covering every row of a 5-row table, with repeats.
HostTensor VocabIds() { return Make({2, 4}, {4, 0, 2, 1, 3, 2, 4, 1}, DType::kI64); }

// A piece holding ids [vocab_begin, vocab_begin + V) gathers their rows (shifted) and
// gives zero rows for every other id.
TEST(EmbeddingTest, VocabPieceGathersItsRowsAndZerosTheRest) {
  HostTensor table = Make({2, 2}, {1, 2, 3, 4});  // ids 2 and 3
  HostTensor y = Run1(OpKind::kEmbedding, {Make({5}, {0, 2, 3, 4, 3}, DType::kI64), table},
                      {{"vocab_begin", int64_t{2}}});
  EXPECT_EQ(y.data, (std::vector<double>{0, 0, 1, 2, 3, 4, 0, 0, 3, 4}));
}

// Two vocab pieces, each with the attributes shard_attrs gives it, sum to the full lookup.
TEST(EmbeddingTest, VocabPiecesSumToTheFullLookup) {
  std::mt19937_64 rng(7);
  HostTensor ids = VocabIds();
  HostTensor table = RandomTensor(Shape({5, 3}), rng);
  HostTensor full = Run1(OpKind::kEmbedding, {ids, table}, {});
  const OpSchema& schema = GetOpSchema(OpKind::kEmbedding);
  ASSERT_NE(schema.shard_attrs, nullptr);
  const std::vector<TensorType> in = {I64({2, 4}), F64({5, 3})};
  const std::vector<TensorType> out = {F64({2, 4, 3})};
  HostTensor sum(full.shape, DType::kF64);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 5}}) {
    auto attrs = schema.shard_attrs({}, in, {Box{{0, 2}, {0, 4}}, Box{{begin, end}, {0, 3}}}, out,
                                    {Box{{0, 2}, {0, 4}, {0, 3}}});
    ASSERT_TRUE(attrs.ok()) << attrs.status();
    EXPECT_EQ(attrs->ToString(), absl::StrCat("{vocab_begin=", begin, "}"));
    HostTensor piece = Run1(OpKind::kEmbedding, {ids, Rows(table, begin, end)}, *attrs);
    for (int64_t i = 0; i < sum.size(); ++i) sum[i] += piece[i];
  }
  EXPECT_EQ(sum.data, full.data);
}

// The full vocabulary keeps the attributes; a piece of a piece offsets vocab_begin.
TEST(EmbeddingTest, ShardAttrsSetVocabBeginOnlyForAVocabPiece) {
  const OpSchema& schema = GetOpSchema(OpKind::kEmbedding);
  ASSERT_NE(schema.shard_attrs, nullptr);
  const std::vector<TensorType> in = {I64({4}), F64({6, 2})};
  const std::vector<TensorType> out = {F64({4, 2})};
  const std::vector<Box> out_boxes = {Box{{0, 4}, {0, 2}}};
  auto full = schema.shard_attrs({}, in, {Box{{0, 4}}, Box{{0, 6}, {0, 2}}}, out, out_boxes);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(full->empty());
  auto nested = schema.shard_attrs({{"vocab_begin", int64_t{10}}}, in,
                                   {Box{{0, 4}}, Box{{3, 6}, {0, 2}}}, out, out_boxes);
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->ToString(), "{vocab_begin=13}");
  EXPECT_FALSE(schema.shard_attrs({}, in, {Box{{0, 4}}}, out, out_boxes).ok());
}

// A negative id is an error in a vocab piece too; vocab_begin must be non-negative.
TEST(EmbeddingTest, VocabPieceRejectsNegativeIdsAndVocabBegin) {
  HostTensor table = Make({2, 1}, {1, 2});
  auto y = RunOp(OpKind::kEmbedding, {Make({2}, {5, -1}, DType::kI64), table},
                 {{"vocab_begin", int64_t{4}}});
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("id -1 at position 1 is not a non-negative integer"),
            absl::string_view::npos)
      << y.status();
  auto dt = RunOp(OpKind::kEmbeddingGrad, {Make({2}, {-3, 0}, DType::kI64), Make({2, 1}, {1, 1})},
                  {{"vocab", int64_t{2}}, {"vocab_begin", int64_t{1}}});
  ASSERT_FALSE(dt.ok());
  EXPECT_NE(dt.status().message().find("id -3 at position 0"), absl::string_view::npos)
      << dt.status();
  EXPECT_EQ(InferError(OpKind::kEmbedding, {I64({2}), F64({3, 2})}, {{"vocab_begin", int64_t{-1}}})
                .message(),
            "attribute 'vocab_begin' is -1, expected at least 0");
  EXPECT_EQ(InferError(OpKind::kEmbeddingGrad, {I64({2}), F64({2, 3})},
                       {{"vocab", int64_t{4}}, {"vocab_begin", 0.5}})
                .message(),
            "attribute 'vocab_begin' must be an integer");
}

// The gradient of a vocab piece is embedding_grad over the same rows.
TEST(EmbeddingTest, GradientOfAVocabPieceKeepsVocabBegin) {
  HostTensor ids = Make({3}, {1, 3, 4}, DType::kI64);
  HostTensor table(Shape({2, 2}), DType::kF64);  // ids 3 and 4
  auto r = ApplyGradRule(OpKind::kEmbedding, {ids, table}, {{"vocab_begin", int64_t{3}}},
                         {Make({3, 2}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(r.ok()) << r.status();
  const Op& grad_op = r->graph.ops().back();
  EXPECT_EQ(grad_op.kind, OpKind::kEmbeddingGrad);
  EXPECT_EQ(grad_op.attrs.ToString(), "{vocab=2, vocab_begin=3}");
  EXPECT_EQ(r->grads[1]->data, (std::vector<double>{3, 4, 5, 6}));
}

// Each vocab piece of embedding_grad, with the attributes shard_attrs gives it, equals
// its rows of the full gradient, so the pieces (zero elsewhere) sum to it.
TEST(EmbeddingGradTest, VocabPiecesEqualTheRowsOfTheFullGradient) {
  std::mt19937_64 rng(8);
  HostTensor ids = VocabIds();
  HostTensor dy = RandomTensor(Shape({2, 4, 3}), rng);
  const AttrMap attrs{{"vocab", int64_t{5}}};
  HostTensor full = Run1(OpKind::kEmbeddingGrad, {ids, dy}, attrs);
  const OpSchema& schema = GetOpSchema(OpKind::kEmbeddingGrad);
  ASSERT_NE(schema.shard_attrs, nullptr);
  const std::vector<TensorType> in = {I64({2, 4}), F64({2, 4, 3})};
  const std::vector<TensorType> out = {F64({5, 3})};
  std::vector<double> joined;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}}) {
    auto piece_attrs =
        schema.shard_attrs(attrs, in, {Box{{0, 2}, {0, 4}}, Box{{0, 2}, {0, 4}, {0, 3}}}, out,
                           {Box{{begin, end}, {0, 3}}});
    ASSERT_TRUE(piece_attrs.ok()) << piece_attrs.status();
    EXPECT_EQ(piece_attrs->ToString(),
              absl::StrCat("{vocab=", end - begin, ", vocab_begin=", begin, "}"));
    HostTensor piece = Run1(OpKind::kEmbeddingGrad, {ids, dy}, *piece_attrs);
    EXPECT_EQ(piece.shape.dims(), (std::vector<int64_t>{end - begin, 3}));
    EXPECT_EQ(piece.data, Rows(full, begin, end).data);
    joined.insert(joined.end(), piece.data.begin(), piece.data.end());
  }
  EXPECT_EQ(joined, full.data);
  auto whole = schema.shard_attrs(attrs, in, {Box{{0, 2}, {0, 4}}, Box{{0, 2}, {0, 4}, {0, 3}}},
                                  out, {Box{{0, 5}, {0, 3}}});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, attrs);
}

}  // namespace
}  // namespace loom::ir
