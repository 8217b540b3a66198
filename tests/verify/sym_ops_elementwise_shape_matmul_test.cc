// Symbolic kernels of the elementwise, shape and matmul families checked against
// the reference kernels: on every shared op sample of those families, the output
// terms evaluated at the sample's concrete inputs equal the reference outputs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/host_tensor.h"
#include "ir/op_kind.h"
#include "ir/op_schema.h"
#include "smt/term.h"
#include "tests/ir/op_samples.h"
#include "verify/sym_ops.h"

namespace loom::verify {
namespace {

using ir::OpKind;

// Every kind whose reference kernel is registered in ir/ops/elementwise.cc,
// ir/ops/shape.cc and ir/ops/matmul.cc.
const std::vector<OpKind>& FamilyKinds() {
  static const auto* kinds = new std::vector<OpKind>{
      // elementwise
      OpKind::kAccumulate, OpKind::kAdd, OpKind::kDivScalar, OpKind::kExp, OpKind::kFill,
      OpKind::kGelu, OpKind::kGeluGrad, OpKind::kGeluExact, OpKind::kGeluExactGrad, OpKind::kLog, OpKind::kMul, OpKind::kMulScalar,
      OpKind::kNeg, OpKind::kPow, OpKind::kRsqrt, OpKind::kScale, OpKind::kSilu, OpKind::kSiluGrad,
      OpKind::kStopGradient, OpKind::kSub, OpKind::kSwiGlu, OpKind::kSwiGluGrad,
      // shape
      OpKind::kConcat, OpKind::kExpand, OpKind::kPad, OpKind::kReshape, OpKind::kSlice,
      OpKind::kSplit, OpKind::kTranspose,
      // matmul
      OpKind::kEmbedding, OpKind::kEmbeddingGrad, OpKind::kLinear, OpKind::kLinearWGrad,
      OpKind::kMatMul,
      // pointwise and index
      OpKind::kArange, OpKind::kCast, OpKind::kCompare, OpKind::kCos, OpKind::kCumsum,
      OpKind::kDiv, OpKind::kIndex, OpKind::kLogical, OpKind::kRelu, OpKind::kReluGrad,
      OpKind::kSigmoid, OpKind::kSigmoidGrad, OpKind::kSin, OpKind::kSqrt, OpKind::kTanh,
      OpKind::kTanhGrad, OpKind::kWhere};
  return *kinds;
}

bool InFamilies(OpKind kind) {
  const auto& kinds = FamilyKinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

// Symbolic inputs: element e of input i is the variable "in<i>_<e>".
std::vector<SymTensor> VariableInputs(smt::Terms& terms, const std::vector<ir::TensorType>& types) {
  std::vector<SymTensor> out;
  for (size_t i = 0; i < types.size(); ++i) {
    SymTensor t;
    t.shape = types[i].shape;
    t.dtype = types[i].dtype;
    for (int64_t e = 0; e < types[i].shape.num_elements(); ++e) {
      t.data.push_back(terms.Var(absl::StrCat("in", i, "_", e)));
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Runs the reference kernel directly on `values`.
absl::StatusOr<std::vector<ir::HostTensor>> Reference(OpKind kind,
                                                      const std::vector<ir::HostTensor>& values,
                                                      const ir::AttrMap& attrs) {
  std::vector<ir::TensorType> types;
  std::vector<const ir::HostTensor*> ptrs;
  for (const ir::HostTensor& v : values) {
    types.push_back({v.shape, v.dtype});
    ptrs.push_back(&v);
  }
  absl::StatusOr<std::vector<ir::TensorType>> out_types = ir::InferOutputTypes(kind, types, attrs);
  if (!out_types.ok()) return out_types.status();
  std::vector<ir::HostTensor> out;
  for (const ir::TensorType& t : *out_types) out.emplace_back(t.shape, t.dtype);
  absl::Status s = ir::GetOpSchema(kind).kernel(ptrs, attrs, absl::MakeSpan(out));
  if (!s.ok()) return s;
  return out;
}

// Evaluates the symbolic kernel of `sample` on `draws` random input draws and
// compares every output element with the reference kernel.
void ExpectMatchesReference(const ir::testing::OpSample& sample, int draws, uint64_t seed) {
  const std::string where = absl::StrCat(ir::OpKindName(sample.kind), "/", sample.label);
  smt::Terms terms;
  DefineSymbolicFunctions(terms);
  std::vector<SymTensor> sym_in = VariableInputs(terms, sample.inputs);
  std::vector<const SymTensor*> sym_ptrs;
  for (const SymTensor& t : sym_in) sym_ptrs.push_back(&t);
  absl::StatusOr<std::vector<SymTensor>> sym_out =
      EvalSymbolic(terms, sample.kind, sym_ptrs, sample.attrs);
  ASSERT_TRUE(sym_out.ok()) << where << ": " << sym_out.status();

  std::mt19937_64 rng(seed);
  for (int draw = 0; draw < draws; ++draw) {
    std::vector<ir::HostTensor> values = ir::testing::SampleInputs(sample, rng);
    absl::flat_hash_map<std::string, double> vars;
    for (size_t i = 0; i < values.size(); ++i) {
      for (int64_t e = 0; e < values[i].size(); ++e)
        vars[absl::StrCat("in", i, "_", e)] = values[i][e];
    }
    absl::StatusOr<std::vector<ir::HostTensor>> ref = Reference(sample.kind, values, sample.attrs);
    ASSERT_TRUE(ref.ok()) << where << ": " << ref.status();
    ASSERT_EQ(ref->size(), sym_out->size()) << where;
    for (size_t o = 0; o < ref->size(); ++o) {
      const ir::HostTensor& r = (*ref)[o];
      const SymTensor& s = (*sym_out)[o];
      ASSERT_TRUE(s.shape == r.shape)
          << where << " output " << o << ": " << s.shape.ToString() << " vs " << r.shape.ToString();
      EXPECT_EQ(s.dtype, r.dtype) << where << " output " << o;
      ASSERT_EQ(static_cast<int64_t>(s.data.size()), r.size()) << where;
      for (int64_t e = 0; e < r.size(); ++e) {
        absl::StatusOr<double> v = terms.Evaluate(s.data[e], vars);
        ASSERT_TRUE(v.ok()) << where << " output " << o << " element " << e << ": " << v.status()
                            << " in " << terms.ToString(s.data[e]);
        EXPECT_LE(std::fabs(*v - r[e]), 1e-9 * std::max(1.0, std::fabs(r[e])))
            << where << " output " << o << " element " << e << " (draw " << draw << "): symbolic "
            << *v << ", reference " << r[e] << "; term " << terms.ToString(s.data[e]);
      }
    }
  }
}

// Every kind of the four families (elementwise, shape, matmul, pointwise) has symbolic semantics.
TEST(SymOpsElementwiseShapeMatmulTest, EveryFamilyKindHasSymbolicSemantics) {
  for (OpKind kind : FamilyKinds()) {
    EXPECT_TRUE(HasSymbolicSemantics(kind)) << ir::OpKindName(kind);
    EXPECT_GE(SemanticsVersion(kind), 1) << ir::OpKindName(kind);
  }
}

// The symbolic kernels agree with the reference kernels on every shared sample of
// the four families (elementwise, shape, matmul, pointwise), over several seeds and input draws.
TEST(SymOpsElementwiseShapeMatmulTest, MatchesReferenceKernelsOnSamples) {
  int checked = 0;
  std::vector<bool> seen(ir::kNumOpKinds, false);
  for (uint64_t seed : {1u, 2u, 3u}) {
    for (const ir::testing::OpSample& sample : ir::testing::AllSamples(seed)) {
      if (!InFamilies(sample.kind)) continue;
      SCOPED_TRACE(absl::StrCat(ir::OpKindName(sample.kind), "/", sample.label, " seed ", seed));
      ExpectMatchesReference(sample, /*draws=*/3, /*seed=*/seed * 7919 + checked);
      seen[static_cast<int>(sample.kind)] = true;
      ++checked;
    }
  }
  for (OpKind kind : FamilyKinds()) {
    EXPECT_TRUE(seen[static_cast<int>(kind)]) << "no sample of " << ir::OpKindName(kind);
  }
}

// Instances the shared samples do not cover: negative dims, integer and
// non-integer exponents, pad on both sides, a rank-2 linear_wgrad, an
// embedding piece whose offset moves every id out of range.
TEST(SymOpsElementwiseShapeMatmulTest, MatchesReferenceKernelsOnExtraInstances) {
  using ir::testing::F64;
  using ir::testing::I64;
  using ir::testing::OpSample;
  auto positive = [](int, ir::HostTensor& v, std::mt19937_64& r) {
    std::uniform_real_distribution<double> dist(0.5, 2.0);
    for (double& x : v.data) x = dist(r);
  };
  const std::vector<OpSample> samples = {
      {"inverse", OpKind::kPow, {F64({2, 3})}, {{"exponent", -1.0}}, positive},
      {"zero", OpKind::kPow, {F64({2, 3})}, {{"exponent", 0.0}}},
      {"sqrt", OpKind::kPow, {F64({2, 3})}, {{"exponent", 0.5}}, positive},
      {"neg_half", OpKind::kPow, {F64({4})}, {{"exponent", -0.5}}, positive},
      {"tiny", OpKind::kPow, {F64({4})}, {{"exponent", 1e-5}}, positive},
      {"int_factor", OpKind::kScale, {F64({3})}, {{"factor", int64_t{3}}}},
      {"single", OpKind::kAccumulate, {F64({2, 2})}},
      {"int_fill",
       OpKind::kFill,
       {},
       {{"shape", std::vector<int64_t>{2, 1}}, {"value", -2.0}, {"dtype", std::string("i64")}}},
      {"scalar_fill", OpKind::kFill, {}, {{"shape", std::vector<int64_t>{}}, {"value", 0.1}}},
      {"both_sides",
       OpKind::kPad,
       {F64({2, 3})},
       {{"dim", int64_t{-1}}, {"before", int64_t{2}}, {"after", int64_t{1}}}},
      {"leading",
       OpKind::kSlice,
       {F64({4, 2})},
       {{"dim", int64_t{0}}, {"begin", int64_t{0}}, {"end", int64_t{3}}}},
      {"last",
       OpKind::kSplit,
       {F64({2, 5})},
       {{"dim", int64_t{-1}}, {"sizes", std::vector<int64_t>{1, 3, 1}}}},
      {"swap", OpKind::kTranspose, {F64({2, 3, 4})}, {{"perm", std::vector<int64_t>{0, -1, 1}}}},
      {"integer", OpKind::kReshape, {I64({2, 3})}, {{"shape", std::vector<int64_t>{3, -1}}}},
      {"integer", OpKind::kConcat, {I64({2}), I64({3})}, {{"dim", int64_t{0}}}},
      {"leading", OpKind::kExpand, {F64({1, 3})}, {{"dim", int64_t{0}}, {"size", int64_t{4}}}},
      {"rank2", OpKind::kLinearWGrad, {F64({3, 2}), F64({3, 4})}},
      {"rank4", OpKind::kLinear, {F64({2, 1, 2, 3}), F64({2, 3}), F64({2})}},
      {"rank4", OpKind::kMatMul, {F64({2, 2, 2, 3}), F64({2, 2, 3, 2})}},
      {"far_piece",
       OpKind::kEmbedding,
       {I64({2, 3}), F64({2, 2})},
       {{"vocab_begin", int64_t{5}}},
       nullptr,
       8},
      {"far_piece",
       OpKind::kEmbeddingGrad,
       {I64({4}), F64({4, 2})},
       {{"vocab", int64_t{3}}, {"vocab_begin", int64_t{4}}},
       nullptr,
       8},
      {"scalar_ids", OpKind::kEmbedding, {I64({}), F64({3, 2})}, {}, nullptr, 3},
  };
  uint64_t seed = 11;
  for (const OpSample& sample : samples) {
    SCOPED_TRACE(absl::StrCat(ir::OpKindName(sample.kind), "/", sample.label));
    ExpectMatchesReference(sample, /*draws=*/4, seed++);
  }
}

// A token id is a term: the looked-up row is a sum of indicator-selected rows,
// and a concrete id selects exactly its row.
TEST(SymOpsElementwiseShapeMatmulTest, EmbeddingSelectsRowsByIndicator) {
  smt::Terms terms;
  SymTensor ids{ir::Shape({1}), ir::DType::kI64, {terms.Int(3)}};
  SymTensor table{ir::Shape({2, 1}), ir::DType::kF64, {terms.Var("r0"), terms.Var("r1")}};
  const SymTensor* in[] = {&ids, &table};
  auto out = EvalSymbolic(terms, OpKind::kEmbedding, in, {{"vocab_begin", int64_t{2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data[0], terms.Var("r1"));

  ids.data[0] = terms.Int(7);  // outside the rows [2, 4) this piece holds
  out = EvalSymbolic(terms, OpKind::kEmbedding, in, {{"vocab_begin", int64_t{2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data[0], terms.Zero());
}

// Attributes the reference kernel would reject are errors naming the op.
TEST(SymOpsElementwiseShapeMatmulTest, RejectsBadAttributes) {
  smt::Terms terms;
  SymTensor x{ir::Shape({2}), ir::DType::kF64, {terms.Var("a"), terms.Var("b")}};
  const SymTensor* in[] = {&x};
  EXPECT_FALSE(EvalSymbolic(terms, OpKind::kPow, in, {}).ok());
  EXPECT_FALSE(EvalSymbolic(terms, OpKind::kSlice, in,
                            {{"dim", int64_t{0}}, {"begin", int64_t{1}}, {"end", int64_t{1}}})
                   .ok());
  SymTensor ids{ir::Shape({1}), ir::DType::kI64, {terms.Var("id")}};
  SymTensor table{ir::Shape({2, 1}), ir::DType::kF64, {terms.Var("r0"), terms.Var("r1")}};
  const SymTensor* emb_in[] = {&ids, &table};
  auto bad = EvalSymbolic(terms, OpKind::kEmbedding, emb_in, {{"vocab_begin", int64_t{-1}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vocab_begin"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace loom::verify
