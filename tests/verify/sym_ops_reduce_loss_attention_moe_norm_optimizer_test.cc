// Symbolic kernels of the reduce, loss, attention, MoE, norm and optimizer families
// against their reference kernels: every output term, evaluated at an instance's
// values, equals the reference kernel's output on those values.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/op_schema.h"
#include "smt/term.h"
#include "tests/ir/op_samples.h"
#include "verify/sym_ops.h"

namespace loom::verify {
namespace {

using ir::AttrMap;
using ir::HostTensor;
using ir::OpKind;
using ir::TensorType;
using ir::testing::F64;
using ir::testing::I64;
using ir::testing::OpSample;

// The kinds whose schemas ir/ops/{reduce,loss,attention,moe,norm,optimizer}.cc register.
const std::vector<OpKind>& FamilyKinds() {
  static const auto* kinds = new std::vector<OpKind>{
      OpKind::kLogSoftmax,    OpKind::kLogSoftmaxGrad,
      OpKind::kMax,           OpKind::kMaxGrad,
      OpKind::kMean,          OpKind::kSoftmax,
      OpKind::kSoftmaxGrad,   OpKind::kSum,
      OpKind::kSumSquares,    OpKind::kAttention,
      OpKind::kAttentionGrad, OpKind::kAttentionMerge,
      OpKind::kRope,
      OpKind::kCrossEntropy,  OpKind::kCrossEntropyGrad,
      OpKind::kPick,          OpKind::kPickGrad,
      OpKind::kMoeCombine,    OpKind::kMoeCombineGrad,
      OpKind::kMoeDispatch,   OpKind::kMoeDispatchGrad,
      OpKind::kTopKGate,      OpKind::kTopKGateGrad,
      OpKind::kLayerNorm,     OpKind::kLayerNormGrad,
      OpKind::kRmsNorm,       OpKind::kRmsNormGrad,
      OpKind::kAdamW,         OpKind::kClipCoef,
      OpKind::kSgd,
  };
  return *kinds;
}

bool InFamilies(OpKind kind) {
  for (OpKind k : FamilyKinds()) {
    if (k == kind) return true;
  }
  return false;
}

// Runs the reference kernel of `kind` on `values`.
absl::StatusOr<std::vector<HostTensor>> RunReference(OpKind kind,
                                                     const std::vector<HostTensor>& values,
                                                     const AttrMap& attrs) {
  std::vector<TensorType> types;
  std::vector<const HostTensor*> in;
  for (const HostTensor& v : values) {
    types.push_back({v.shape, v.dtype});
    in.push_back(&v);
  }
  absl::StatusOr<std::vector<TensorType>> out_types = ir::InferOutputTypes(kind, types, attrs);
  if (!out_types.ok()) return out_types.status();
  std::vector<HostTensor> out;
  for (const TensorType& t : *out_types) out.emplace_back(t.shape, t.dtype);
  absl::Status status = ir::GetOpSchema(kind).kernel(in, attrs, absl::MakeSpan(out));
  if (!status.ok()) return status;
  return out;
}

// Evaluates the symbolic kernel of `kind` on variables bound to `values` and
// compares every output element with the reference kernel. Returns the number of
// elements compared.
int64_t ExpectMatchesReference(OpKind kind, const std::vector<HostTensor>& values,
                               const AttrMap& attrs, const std::string& label) {
  SCOPED_TRACE(absl::StrCat(ir::OpKindName(kind), "/", label, " ", attrs.ToString()));
  smt::Terms terms;
  DefineSymbolicFunctions(terms);
  absl::flat_hash_map<std::string, double> env;
  std::vector<SymTensor> sym_in(values.size());
  std::vector<const SymTensor*> sym_ptrs;
  for (size_t i = 0; i < values.size(); ++i) {
    sym_in[i].shape = values[i].shape;
    sym_in[i].dtype = values[i].dtype;
    for (int64_t e = 0; e < values[i].size(); ++e) {
      std::string name = absl::StrCat("in", i, "_", e);
      sym_in[i].data.push_back(terms.Var(name));
      env[name] = values[i][e];
    }
  }
  for (const SymTensor& t : sym_in) sym_ptrs.push_back(&t);

  absl::StatusOr<std::vector<HostTensor>> want = RunReference(kind, values, attrs);
  EXPECT_TRUE(want.ok()) << want.status();
  if (!want.ok()) return 0;
  absl::StatusOr<std::vector<SymTensor>> got = EvalSymbolic(terms, kind, sym_ptrs, attrs);
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok()) return 0;
  EXPECT_EQ(got->size(), want->size());
  if (got->size() != want->size()) return 0;
  int64_t compared = 0;
  for (size_t o = 0; o < want->size(); ++o) {
    const HostTensor& w = (*want)[o];
    const SymTensor& g = (*got)[o];
    EXPECT_TRUE(g.shape.SameDims(w.shape)) << "output " << o;
    EXPECT_EQ(g.dtype, w.dtype) << "output " << o;
    if (static_cast<int64_t>(g.data.size()) != w.size()) continue;
    for (int64_t e = 0; e < w.size(); ++e) {
      absl::StatusOr<double> value = terms.Evaluate(g.data[e], env);
      EXPECT_TRUE(value.ok()) << "output " << o << " element " << e << ": " << value.status()
                              << "\n  term: " << terms.ToString(g.data[e]);
      if (!value.ok()) continue;
      const double ref = w[e];
      EXPECT_LE(std::abs(*value - ref), 1e-9 * std::max(1.0, std::abs(ref)))
          << "output " << o << " element " << e << ": symbolic " << *value << ", reference " << ref
          << "\n  term: " << terms.ToString(g.data[e]);
      ++compared;
    }
  }
  return compared;
}

// Every kind of the six families has symbolic semantics.
TEST(SymOpsReductionFamiliesTest, EveryFamilyKindHasSymbolicSemantics) {
  for (OpKind kind : FamilyKinds()) {
    EXPECT_TRUE(HasSymbolicSemantics(kind)) << ir::OpKindName(kind);
    EXPECT_GE(SemanticsVersion(kind), 1) << ir::OpKindName(kind);
  }
}

// The shared op samples of the six families, over several seeds: symbolic outputs
// evaluate to the reference kernel's outputs, and every kind is covered.
TEST(SymOpsReductionFamiliesTest, SharedSamplesMatchReferenceKernels) {
  std::set<OpKind> covered;
  int64_t compared = 0;
  for (uint64_t seed : {1u, 7u, 42u}) {
    std::vector<OpSample> samples = ir::testing::AllSamples(seed);
    std::mt19937_64 rng(seed * 1000 + 3);
    for (const OpSample& sample : samples) {
      if (!InFamilies(sample.kind)) continue;
      std::vector<HostTensor> values = ir::testing::SampleInputs(sample, rng);
      const int64_t n = ExpectMatchesReference(sample.kind, values, sample.attrs, sample.label);
      if (n > 0) covered.insert(sample.kind);
      compared += n;
    }
  }
  for (OpKind kind : FamilyKinds()) {
    EXPECT_TRUE(covered.count(kind)) << "no sample of " << ir::OpKindName(kind);
  }
  EXPECT_GT(compared, 1000);
  if (const char* dump = std::getenv("LOOM_SYM_DUMP"); dump != nullptr) {
    std::printf("compared %lld output elements\n", static_cast<long long>(compared));
  }
}

// Discrete choices stay uninterpreted functions of the values they depend on, and
// the rope rotation uses the reference's cosines and sines.
TEST(SymOpsReductionFamiliesTest, ChoicesAreUninterpretedFunctions) {
  smt::Terms terms;
  SymTensor a{
      ir::Shape({1, 3}), ir::DType::kF64, {terms.Var("a0"), terms.Var("a1"), terms.Var("a2")}};
  SymTensor dy{ir::Shape({1}), ir::DType::kF64, {terms.Var("g")}};
  const SymTensor* max_in[] = {&a, &dy};
  auto grad = EvalSymbolic(terms, OpKind::kMaxGrad, max_in, {{"dim", int64_t{1}}});
  ASSERT_TRUE(grad.ok()) << grad.status();
  EXPECT_EQ(terms.Variables((*grad)[0].data[1]), (std::vector<std::string>{"a0", "a1", "a2", "g"}));
  EXPECT_NE(terms.ToString((*grad)[0].data[1]).find("argmax"), std::string::npos);

  const SymTensor* gate_in[] = {&a};
  auto gate = EvalSymbolic(terms, OpKind::kTopKGate, gate_in, {{"k", int64_t{2}}});
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_NE(terms.ToString((*gate)[1].data[1]).find("topk_index"), std::string::npos);
  EXPECT_EQ(terms.Variables((*gate)[1].data[1]), (std::vector<std::string>{"a0", "a1", "a2"}));

  SymTensor x{ir::Shape({1, 2, 1, 2}),
              ir::DType::kF64,
              {terms.Var("x0"), terms.Var("x1"), terms.Var("x2"), terms.Var("x3")}};
  const SymTensor* rope_in[] = {&x};
  auto rope = EvalSymbolic(terms, OpKind::kRope, rope_in, {});
  ASSERT_TRUE(rope.ok()) << rope.status();
  // Position 1, frequency 0: angle 1.
  const smt::TermId want = terms.Sub(terms.Mul(terms.Var("x2"), terms.Double(std::cos(1.0))),
                                     terms.Mul(terms.Var("x3"), terms.Double(std::sin(1.0))));
  EXPECT_EQ((*rope)[0].data[2], want) << terms.ToString((*rope)[0].data[2]);
  // Position 0 is the identity.
  EXPECT_EQ((*rope)[0].data[0], terms.Var("x0"));
}

// Values uniform in [lo, hi] for a float tensor, or in [0, bound) for an integer one.
HostTensor Fill(const TensorType& t, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0,
                int64_t bound = 2) {
  HostTensor v(t.shape, t.dtype);
  if (ir::IsFloat(t.dtype)) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (double& x : v.data) x = dist(rng);
  } else {
    std::uniform_int_distribution<int64_t> dist(0, bound - 1);
    for (double& x : v.data) x = static_cast<double>(dist(rng));
  }
  return v;
}

// Attribute variants the shared samples leave out.
TEST(SymOpsReductionFamiliesTest, AttributeVariantsMatchReferenceKernels) {
  std::mt19937_64 rng(11);
  // Non-causal attention with the default scale, more keys than queries.
  {
    std::vector<HostTensor> v{Fill(F64({1, 2, 2, 3}), rng), Fill(F64({1, 3, 1, 3}), rng),
                              Fill(F64({1, 3, 1, 2}), rng)};
    ExpectMatchesReference(OpKind::kAttention, v, {{"causal", int64_t{0}}}, "noncausal");
    v.push_back(Fill(F64({1, 2, 2, 2}), rng));
    v.push_back(Fill(F64({1, 2, 2}), rng));
    v.push_back(Fill(F64({1, 2, 2, 2}), rng));
    ExpectMatchesReference(OpKind::kAttentionGrad, v, {{"causal", int64_t{0}}}, "noncausal");
  }
  // RoPE with several frequency pairs and positions.
  {
    std::vector<HostTensor> v{Fill(F64({2, 5, 1, 6}), rng)};
    ExpectMatchesReference(OpKind::kRope, v, {}, "default");
    ExpectMatchesReference(OpKind::kRope, v, {{"theta", 100.0}, {"inverse", int64_t{1}}},
                           "inverse");
  }
  // pick_grad and pick over a vocabulary piece that starts at 2.
  {
    std::vector<HostTensor> v{Fill(I64({4}), rng, 0, 0, 7), Fill(F64({4}), rng)};
    ExpectMatchesReference(OpKind::kPickGrad, v,
                           {{"vocab", int64_t{3}}, {"vocab_begin", int64_t{2}}}, "piece");
    std::vector<HostTensor> p{Fill(F64({4, 3}), rng), v[0]};
    ExpectMatchesReference(OpKind::kPick, p, {{"vocab_begin", int64_t{2}}}, "piece");
  }
  // max_grad with ties: the first maximum takes the gradient.
  {
    HostTensor a(ir::Shape({2, 3}), ir::DType::kF64);
    a.data = {0.5, 0.5, 0.1, -1.0, 2.0, 2.0};
    std::vector<HostTensor> v{a, Fill(F64({2}), rng)};
    ExpectMatchesReference(OpKind::kMaxGrad, v, {{"dim", int64_t{1}}}, "ties");
    ExpectMatchesReference(OpKind::kMax, {a}, {{"dim", int64_t{1}}}, "ties");
  }
  // topk_gate with tied logits: the lower expert index comes first.
  {
    HostTensor logits(ir::Shape({2, 4}), ir::DType::kF64);
    logits.data = {0.3, 0.7, 0.7, 0.3, -0.2, -0.2, -0.2, -0.2};
    for (const char* score : {"softmax", "sigmoid"}) {
      ExpectMatchesReference(OpKind::kTopKGate, {logits},
                             {{"k", int64_t{3}}, {"score", std::string(score)}}, score);
    }
  }
  // clip_coef on both sides of the threshold.
  for (double sumsq : {0.01, 9.0}) {
    HostTensor x(ir::Shape({}), ir::DType::kF64);
    x.data = {sumsq};
    ExpectMatchesReference(OpKind::kClipCoef, {x}, {{"max_norm", 1.0}, {"eps", 1e-3}},
                           absl::StrCat(sumsq));
  }
  // AdamW late in training.
  {
    TensorType t = F64({3});
    std::vector<HostTensor> v{Fill(t, rng), Fill(t, rng), Fill(t, rng), Fill(t, rng, 0.0, 1.0)};
    ExpectMatchesReference(OpKind::kAdamW, v,
                           {{"lr", 1e-3},
                            {"beta1", 0.9},
                            {"beta2", 0.999},
                            {"eps", 1e-8},
                            {"weight_decay", 0.1},
                            {"step", int64_t{1000}}},
                           "step1000");
  }
  // Cross-entropy over one flat row set with an explicit count.
  {
    std::vector<HostTensor> v{Fill(F64({3, 4}), rng), Fill(I64({3}), rng, 0, 0, 4)};
    ExpectMatchesReference(OpKind::kCrossEntropy, v, {{"count", int64_t{10}}}, "count");
  }
}

// Errors of the symbolic kernels name the op and the attribute.
TEST(SymOpsReductionFamiliesTest, ErrorsNameOpAndAttribute) {
  smt::Terms terms;
  // A mean over an empty dim has no value (the reference divides 0 by 0).
  SymTensor x{ir::Shape({2, 0}), ir::DType::kF64, {}};
  const SymTensor* in[] = {&x};
  absl::StatusOr<std::vector<SymTensor>> out =
      EvalSymbolic(terms, OpKind::kMean, in, AttrMap{{"dims", std::vector<int64_t>{1}}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("op 'mean'"), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find("'dims'"), std::string::npos) << out.status();
}

}  // namespace
}  // namespace loom::verify
