// Shape reduction of partition laws: a law's verdict at its reduced sizes must
// agree with a numeric comparison of the same law at two larger sizes, for every
// law the strategy matrix's plans use and for mutated versions of them.

#include "verify/law_reduce.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/op_schema.h"
#include "models/models.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/derive.h"
#include "verify/law_resize.h"
#include "verify/laws.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

int64_t Elements(const LawUse& law) {
  int64_t n = 0;
  for (const auto& t : law.inputs) n += t.shape.num_elements();
  return n;
}

// Every distinct law the matrix's plans use (derived once for the whole file).
const std::vector<LawUse>& MatrixLaws() {
  static const std::vector<LawUse>* laws = [] {
    std::map<std::string, LawUse> by_key;
    for (const auto& c : ::loom::testing::Matrix()) {
      ir::Graph spec = TinyStep(c.model, c.strategy.microbatches, c.layers,
                                c.batch > 0 ? c.batch : 2 * c.strategy.dp);
      auto plan = transform::Parallelize(spec, c.strategy);
      if (!plan.ok()) continue;
      auto d = DeriveLineage(spec, *plan);
      if (!d.ok()) continue;
      for (LawUse& law : d->laws) by_key.emplace(law.key, std::move(law));
    }
    auto* out = new std::vector<LawUse>;
    for (auto& [key, law] : by_key) out->push_back(std::move(law));
    return out;
  }();
  return *laws;
}

// The law with every label, free output labels included, `factor` times its
// extent (but those an attribute fixes).
absl::StatusOr<LawUse> Enlarge(const LawUse& law, int64_t factor) {
  const std::set<std::string> fixed = SizeFixedLabels(law);
  std::map<std::string, int64_t> extents;
  for (size_t k = 0; k < law.labels.size(); ++k) {
    extents[law.labels[k]] = law.extents[k] * (fixed.count(law.labels[k]) > 0 ? 1 : factor);
  }
  auto sig = ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs);
  if (!sig.ok()) return sig.status();
  auto free = FreeOutputLabels(law, *sig);
  if (!free.ok()) return free.status();
  for (const auto& [label, size] : *free) extents[label] = size * factor;
  return ResizeLaw(law, extents);
}

// Mutations of a correct law, as a wrong plan would use it: a non-additive
// operand summed from partial pieces, a fixed (normalised) axis split in half.
std::vector<std::pair<std::string, LawUse>> Mutants(const LawUse& law) {
  std::vector<std::pair<std::string, LawUse>> out;
  // (Summed top-k scores put the selection function under Z3's nonlinear search,
  // which can run past its time limit: top-k gets the split mutant only.)
  const bool topk = law.kind == ir::OpKind::kTopKGate || law.kind == ir::OpKind::kTopKGateGrad;
  for (size_t i = 0; i < law.inputs.size() && !topk; ++i) {
    if (!ir::IsFloat(law.inputs[i].dtype)) continue;
    if (std::find(law.partial_inputs.begin(), law.partial_inputs.end(), static_cast<int>(i)) !=
        law.partial_inputs.end()) {
      continue;
    }
    LawUse m = law;
    m.partial_inputs.push_back(static_cast<int>(i));
    std::sort(m.partial_inputs.begin(), m.partial_inputs.end());
    m.key = LawKey(m);
    out.emplace_back(absl::StrCat("partial input ", i), std::move(m));
    break;
  }
  // A routing op's experts and k per token are sizes its routing fixes, not
  // split mutants: the numeric inputs' expert indices (0 to 3) all lie in the
  // first half of the experts, where a half piece agrees with the op, and a split
  // k puts the slot ranks under Z3's nonlinear search. The derivation rejects both
  // before any law, as split fixed labels.
  const std::set<std::string> routing_sizes =
      IsRouting(law.kind) ? SizeFixedLabels(law) : std::set<std::string>{};
  auto sig = ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs);
  if (sig.ok()) {
    for (size_t k = 0; k < law.labels.size(); ++k) {
      if (routing_sizes.count(law.labels[k]) > 0) continue;
      auto it = sig->kinds.find(law.labels[k]);
      if (it == sig->kinds.end() || it->second != ir::DimKind::kFixed) continue;
      if (law.extents[k] < 2 || law.extents[k] % 2 != 0) continue;
      if (law.intervals[k].begin != 0 || law.intervals[k].end != law.extents[k]) continue;
      LawUse m = law;
      m.intervals[k].end = law.extents[k] / 2;
      m.key = LawKey(m);
      out.emplace_back(absl::StrCat("fixed label ", law.labels[k], " split"), std::move(m));
      break;
    }
  }
  return out;
}

struct Tally {
  int proved = 0;
  int refuted = 0;
  int unknown = 0;
};

// The reduced verdict of `law` agrees with the numeric gap at 2x and 3x sizes.
void ExpectAgreement(const std::string& what, const LawUse& law, Tally* tally) {
  const auto t0 = std::chrono::steady_clock::now();
  const LawProof proof = ProveLaw(law, 20000);
  if (std::getenv("LOOM_TRACE")) {
    std::fprintf(stderr, "%.2fs %d %s %s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 static_cast<int>(proof.verdict), what.c_str(), law.key.c_str());
  }
  if (proof.verdict == smt::Verdict::kUnknown) {
    ++tally->unknown;
    return;
  }
  const bool valid = proof.verdict == smt::Verdict::kValid;
  (valid ? tally->proved : tally->refuted)++;
  for (int64_t factor : {2, 3}) {
    auto large = Enlarge(law, factor);
    ASSERT_TRUE(large.ok()) << what << ": " << large.status();
    auto gap = LawNumericGap(*large, 7 + factor);
    ASSERT_TRUE(gap.ok()) << what << " x" << factor << ": " << gap.status();
    if (valid) {
      EXPECT_LT(*gap, 1e-9) << what << " proved at reduced sizes, differs at x" << factor
                            << "\n  " << law.key;
    } else {
      EXPECT_GT(*gap, 1e-12) << what << " refuted at reduced sizes, agrees at x" << factor
                             << "\n  " << law.key;
    }
  }
}

TEST(LawReduceTest, ReducedLawsAreSmallAndKeepTheirPattern) {
  int reduced = 0;
  for (const LawUse& law : MatrixLaws()) {
    const LawUse r = ReduceLaw(law);
    EXPECT_LE(Elements(r), Elements(law)) << law.key;
    ASSERT_EQ(r.labels, law.labels);
    for (size_t k = 0; k < law.labels.size(); ++k) {
      // Whole stays whole, split stays split, first stays first and last stays
      // last; the position of a piece in units of the extent is kept, or the
      // label is cropped to the piece and at most one neighbour on each side.
      const ir::Interval iv = law.intervals[k], riv = r.intervals[k];
      const int64_t e = law.extents[k], re = r.extents[k];
      EXPECT_EQ(iv.begin == 0 && iv.end == e, riv.begin == 0 && riv.end == re) << law.key;
      EXPECT_EQ(iv.begin == 0, riv.begin == 0) << law.key;
      EXPECT_EQ(iv.end == e, riv.end == re) << law.key;
      const bool kept = iv.begin * re == riv.begin * e && iv.end * re == riv.end * e;
      const bool cropped = riv.size() > 0 && re <= 3 * riv.size() && e > re;
      EXPECT_TRUE(kept || cropped) << law.key << " -> " << r.key;
    }
    if (r.key != law.key) ++reduced;
  }
  EXPECT_GT(reduced, static_cast<int>(MatrixLaws().size()) / 2);
}

// Cropping a many-way spatial split to the piece and its neighbours: on every
// matrix law it applies to, the cropped law's verdict is what a numeric
// comparison of the uncropped law finds.
TEST(LawReduceTest, CroppedLawsAgreeWithTheUncroppedPattern) {
  int cropped = 0, refuted = 0;
  for (const LawUse& law : MatrixLaws()) {
    if (!ReducibleKind(law.kind)) continue;
    auto extents = ReducedExtents(law);
    if (!extents.ok()) continue;
    auto full = ResizeLaw(law, *extents);
    if (!full.ok()) continue;
    auto c = CropSpatialLabels(*full);
    if (!c.ok() || c->key == full->key) continue;
    ++cropped;
    // The law itself and its mutants: the cropped verdict against the uncropped
    // law compared numerically (at twice the reduced sizes, where integer
    // inputs such as token ids have room).
    std::vector<std::pair<std::string, LawUse>> cases = {{"law", *full}};
    for (auto& m : Mutants(*full)) cases.push_back(std::move(m));
    for (const auto& [what, u] : cases) {
      auto uc = CropSpatialLabels(u);
      if (!uc.ok()) continue;
      const smt::Verdict v = ProveLaw(*uc, 10000).verdict;
      if (v == smt::Verdict::kUnknown) continue;
      auto large = Enlarge(u, 2);
      if (!large.ok()) continue;
      auto gap = LawNumericGap(*large, 11);
      ASSERT_TRUE(gap.ok()) << gap.status();
      if (v == smt::Verdict::kValid) {
        EXPECT_LT(*gap, 1e-9) << what << " proved cropped, differs uncropped: " << u.key;
      } else {
        ++refuted;
        EXPECT_GT(*gap, 1e-12) << what << " refuted cropped, agrees uncropped: " << u.key;
      }
    }
  }
  EXPECT_GT(cropped, 10);
  std::printf("cropped laws: %d, refuted mutants among them: %d\n", cropped, refuted);
}

TEST(LawReduceTest, SplitLabelsKeepTheirShardCount) {
  LawUse law;
  law.kind = ir::OpKind::kMatMul;
  law.inputs = {ir::TensorType{ir::Shape({64, 512}), ir::DType::kF32},
                ir::TensorType{ir::Shape({512, 96}), ir::DType::kF32}};
  // m whole, k split in 4 (a reduction), n split in 3 (spatial).
  auto sig = ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs);
  ASSERT_TRUE(sig.ok()) << sig.status();
  const std::string m = sig->inputs[0][0], k = sig->inputs[0][1], n = sig->inputs[1][1];
  std::map<std::string, std::pair<ir::Interval, int64_t>> at = {
      {k, {{128, 256}, 512}}, {m, {{0, 64}, 64}}, {n, {{64, 96}, 96}}};
  for (const auto& [l, v] : at) {
    law.labels.push_back(l);
    law.intervals.push_back(v.first);
    law.extents.push_back(v.second);
  }
  law.key = LawKey(law);
  auto extents = ReducedExtents(law);
  ASSERT_TRUE(extents.ok()) << extents.status();
  EXPECT_EQ((*extents)[k], 8);  // 4 chunks of 2
  EXPECT_EQ((*extents)[m], 1);
  EXPECT_EQ((*extents)[n], 3);  // 3 shards of 1
  // n's last shard is then cropped to itself and its one neighbour, and k's
  // second chunk to the first three chunks (whole chunks of 2).
  const LawUse r = ReduceLaw(law);
  EXPECT_EQ(r.inputs[0].shape, ir::Shape({1, 6}));
  EXPECT_EQ(r.inputs[1].shape, ir::Shape({6, 2}));
  EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid);
}

// A norm's weight times the hidden states at a real model's size: the weight
// [n] is broadcast along the rows of [m, n], which are whole. At one row the
// weight would read as a dim of its own and the law would change its signature,
// so the rows keep two positions; the law proves small.
TEST(LawReduceTest, BroadcastAlongAWholeDimKeepsTwoPositions) {
  LawUse law;
  law.kind = ir::OpKind::kMul;
  law.inputs = {ir::TensorType{ir::Shape({8192, 4096}), ir::DType::kF32},
                ir::TensorType{ir::Shape({4096}), ir::DType::kF32}};
  auto sig = ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs);
  ASSERT_TRUE(sig.ok()) << sig.status();
  ASSERT_EQ(sig->broadcasts.size(), 0u);  // [n] against [m, n]: nothing of size 1
  law.inputs[1] = ir::TensorType{ir::Shape({1, 4096}), ir::DType::kF32};
  sig = ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs);
  ASSERT_TRUE(sig.ok()) << sig.status();
  ASSERT_EQ(sig->broadcasts.size(), 1u);
  const std::string m = sig->inputs[0][0], n = sig->inputs[0][1];
  EXPECT_EQ(sig->broadcasts[0].second, m);
  // Rows whole, columns split in 8.
  law.labels = {m, n};
  law.intervals = {{0, 8192}, {1024, 1536}};
  law.extents = {8192, 4096};
  law.key = LawKey(law);
  auto extents = ReducedExtents(law);
  ASSERT_TRUE(extents.ok()) << extents.status();
  EXPECT_EQ((*extents)[m], 2);
  EXPECT_EQ((*extents)[n], 8);
  const LawUse r = ReduceLaw(law);
  EXPECT_LT(Elements(r), 64);
  EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid);
}

// Grouped-query attention split by heads over many ranks: query heads h and
// key/value groups g are coupled (4 query heads per group). The law of an inner
// piece is cropped to its groups and one group on either side, both labels
// alike, so every query head keeps its group; reduced, each group keeps 2 of its
// heads. Both verdicts agree with the law numerically, for the law and for its
// mutants.
TEST(LawReduceTest, CoupledHeadsAreCroppedTogether) {
  for (ir::OpKind kind : {ir::OpKind::kAttention, ir::OpKind::kAttentionGrad}) {
    SCOPED_TRACE(std::string(ir::OpKindName(kind)));
    LawUse law;
    law.kind = kind;
    law.attrs.Set("causal", int64_t{1});
    const ir::TensorType q{ir::Shape({1, 2, 32, 2}), ir::DType::kF64};
    const ir::TensorType kv{ir::Shape({1, 2, 8, 2}), ir::DType::kF64};
    law.inputs = {q, kv, kv};
    if (kind == ir::OpKind::kAttentionGrad) {
      law.inputs.push_back(q);
      law.inputs.push_back({ir::Shape({1, 2, 32}), ir::DType::kF64});
      law.inputs.push_back(q);
    }
    auto sig = ir::GetOpSchema(kind).signature(law.inputs, law.attrs);
    ASSERT_TRUE(sig.ok()) << sig.status();
    // Piece 2 of 8: heads [8:12) of 32, groups [2:3) of 8.
    std::map<std::string, std::pair<ir::Interval, int64_t>> at;
    for (size_t i = 0; i < sig->inputs.size(); ++i) {
      for (size_t d = 0; d < sig->inputs[i].size(); ++d) {
        const int64_t e = law.inputs[i].shape.dim(static_cast<int>(d));
        at[sig->inputs[i][d]] = {ir::Interval{0, e}, e};
      }
    }
    at["h"] = {ir::Interval{8, 12}, 32};
    at["g"] = {ir::Interval{2, 3}, 8};
    for (const auto& [l, v] : at) {
      law.labels.push_back(l);
      law.intervals.push_back(v.first);
      law.extents.push_back(v.second);
    }
    law.key = LawKey(law);
    auto c = CropSpatialLabels(law);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->inputs[0].shape.dim(2), 12);  // heads [4:16), the piece at [4:8)
    EXPECT_EQ(c->inputs[1].shape.dim(2), 3);   // groups [1:4), the piece at [1:2)
    EXPECT_EQ(ProveLaw(*c, 10000).verdict, smt::Verdict::kValid);
    std::vector<std::pair<std::string, LawUse>> cases = {{"law", law}};
    for (auto& m : Mutants(law)) cases.push_back(std::move(m));
    int refuted = 0;
    for (const auto& [what, u] : cases) {
      auto uc = CropSpatialLabels(u);
      if (!uc.ok()) continue;
      const smt::Verdict v = ProveLaw(*uc, 10000).verdict;
      if (v == smt::Verdict::kUnknown) continue;
      auto gap = LawNumericGap(u, 13);
      ASSERT_TRUE(gap.ok()) << gap.status();
      if (v == smt::Verdict::kValid) {
        EXPECT_LT(*gap, 1e-9) << what << " proved cropped, differs uncropped";
      } else {
        ++refuted;
        EXPECT_GT(*gap, 1e-12) << what << " refuted cropped, agrees uncropped";
      }
    }
    EXPECT_GT(refuted, 0);

    // Reduced: 2 query heads per group (the law has 4), and cropped; the verdict
    // agrees with the law at its own 4 heads per group, mutants included.
    const LawUse r = ReduceLaw(law);
    EXPECT_EQ(r.inputs[0].shape.dim(2), 6);  // 3 groups of 2 heads
    EXPECT_EQ(r.inputs[1].shape.dim(2), 3);
    EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid);
    int reduced_refuted = 0;
    for (const auto& [what, u] : cases) {
      const LawUse ur = ReduceLaw(u);
      const smt::Verdict v = ProveLaw(ur, 10000).verdict;
      if (v == smt::Verdict::kUnknown) continue;
      auto gap = LawNumericGap(u, 19);
      ASSERT_TRUE(gap.ok()) << gap.status();
      if (v == smt::Verdict::kValid) {
        EXPECT_LT(*gap, 1e-9) << what << " proved reduced, differs at 4 heads per group";
      } else {
        ++reduced_refuted;
        EXPECT_GT(*gap, 1e-12) << what << " refuted reduced, agrees at 4 heads per group";
      }
    }
    EXPECT_GT(reduced_refuted, 0);
  }
}

TEST(LawReduceTest, EveryKindIsReducible) {
  EXPECT_TRUE(ReducibleKind(ir::OpKind::kMoeDispatch));
  EXPECT_TRUE(ReducibleKind(ir::OpKind::kReshape));
  EXPECT_TRUE(ReducibleKind(ir::OpKind::kPickGrad));
  EXPECT_TRUE(ReducibleKind(ir::OpKind::kLayerNormGrad));
}

// A moe_dispatch law over 128 tokens in 16 groups of 8 (E = 8, C = 3, k = 2).
LawUse DispatchLaw(int64_t groups, ir::Interval tokens) {
  LawUse law;
  law.kind = ir::OpKind::kMoeDispatch;
  law.attrs.Set("experts", int64_t{8});
  law.attrs.Set("capacity", int64_t{3});
  law.attrs.Set("groups", groups);
  law.inputs = {ir::TensorType{ir::Shape({128, 32}), ir::DType::kF64},
                ir::TensorType{ir::Shape({128, 2}), ir::DType::kI64}};
  auto sig = ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs);
  const std::string t = (*sig).inputs[0][0], d = (*sig).inputs[0][1], j = (*sig).inputs[1][1];
  std::map<std::string, std::pair<ir::Interval, int64_t>> at = {
      {t, {tokens, 128}}, {d, {{0, 32}, 32}}, {j, {{0, 2}, 2}}};
  for (const auto& [l, v] : at) {
    law.labels.push_back(l);
    law.intervals.push_back(v.first);
    law.extents.push_back(v.second);
  }
  law.key = LawKey(law);
  return law;
}

// A token piece of whole routing groups reduces to whole groups in the piece's
// pattern (groups 4 and 5 of 16: unit 2 of 8 units), each group shrunk to 2
// tokens and 1 slot per expert (`groups` and `capacity` follow), cropped to the
// piece's unit and one on either side; it is proved, as the law itself is.
TEST(LawReduceTest, RoutingPiecesReduceToWholeGroups) {
  const LawUse law = DispatchLaw(/*groups=*/16, ir::Interval{32, 48});
  const LawUse r = ReduceLaw(law);
  EXPECT_EQ(r.inputs[0].shape, ir::Shape({6, 1}));  // 3 groups of 2 tokens, d = 1
  EXPECT_EQ(r.inputs[1].shape, ir::Shape({6, 2}));
  EXPECT_EQ(r.attrs.GetInt("groups").value_or(0), 3);
  EXPECT_EQ(r.attrs.GetInt("capacity").value_or(0), 1);
  EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid) << r.key;
  EXPECT_EQ(ProveLaw(law, 10000).verdict, smt::Verdict::kValid) << law.key;
}

// Shrinking routing groups keeps the verdict: on every routing law the matrix
// uses (groups of a whole sequence's tokens) and on its mutants, the verdict
// with groups of 2 tokens and 1 slot per expert is what a numeric comparison
// finds with the law's own groups, and with twice as many of them.
TEST(LawReduceTest, ShrunkRoutingGroupsKeepTheVerdict) {
  int shrunk = 0, refuted = 0;
  for (const LawUse& law : MatrixLaws()) {
    if (!IsRouting(law.kind)) continue;
    std::vector<std::pair<std::string, LawUse>> cases = {{"law", law}};
    for (auto& m : Mutants(law)) cases.push_back(std::move(m));
    for (const auto& [what, u] : cases) {
      const LawUse r = ReduceLaw(u);
      if (r.key == u.key) continue;
      ++shrunk;
      const smt::Verdict v = ProveLaw(r, 20000).verdict;
      if (v == smt::Verdict::kUnknown) continue;
      if (what == "law") {
        EXPECT_EQ(v, smt::Verdict::kValid) << r.key;
      }
      if (v == smt::Verdict::kInvalid) ++refuted;
      for (int64_t factor : {1, 2}) {
        absl::StatusOr<LawUse> large = u;
        if (factor > 1) large = Enlarge(u, factor);
        ASSERT_TRUE(large.ok()) << large.status();
        auto gap = LawNumericGap(*large, 17 + factor);
        ASSERT_TRUE(gap.ok()) << gap.status();
        if (v == smt::Verdict::kValid) {
          EXPECT_LT(*gap, 1e-9) << what << " proved shrunk, differs at x" << factor << ": "
                                << u.key;
        } else {
          EXPECT_GT(*gap, 1e-12) << what << " refuted shrunk, agrees at x" << factor << ": "
                                 << u.key;
        }
      }
    }
  }
  EXPECT_GT(shrunk, 5);
  std::printf("shrunk routing laws: %d, refuted among them: %d\n", shrunk, refuted);
}

// A token piece that cuts a routing group, or that splits tokens sharing one
// capacity (a single group), is no piece of the op: never proved, at any size.
TEST(LawReduceTest, RoutingPiecesCuttingAGroupAreNotProved) {
  for (const LawUse& law : {DispatchLaw(/*groups=*/16, ir::Interval{0, 4}),
                            DispatchLaw(/*groups=*/16, ir::Interval{4, 12}),
                            DispatchLaw(/*groups=*/1, ir::Interval{0, 64})}) {
    EXPECT_NE(ProveLaw(ReduceLaw(law), 10000).verdict, smt::Verdict::kValid) << law.key;
    EXPECT_NE(ProveLaw(law, 10000).verdict, smt::Verdict::kValid) << law.key;
  }
}

// The property: on every law the matrix uses, and on mutants of each, the
// verdict at the reduced sizes is what a numeric comparison finds at 2x and 3x.

// The law of one op of kind `kind` with `inputs` and `attrs`, its input labels
// at the intervals `at` (label -> interval, extent), the others whole.
LawUse MakeLaw(ir::OpKind kind, std::vector<ir::TensorType> inputs, ir::AttrMap attrs,
               const std::map<std::string, std::pair<ir::Interval, int64_t>>& at) {
  LawUse law;
  law.kind = kind;
  law.inputs = std::move(inputs);
  law.attrs = std::move(attrs);
  auto sig = ir::GetOpSchema(kind).signature(law.inputs, law.attrs);
  EXPECT_TRUE(sig.ok()) << sig.status();
  std::map<std::string, std::pair<ir::Interval, int64_t>> all;
  for (size_t i = 0; sig.ok() && i < sig->inputs.size(); ++i) {
    for (size_t d = 0; d < sig->inputs[i].size(); ++d) {
      const int64_t e = law.inputs[i].shape.dim(static_cast<int>(d));
      all.emplace(sig->inputs[i][d], std::make_pair(ir::Interval{0, e}, e));
    }
  }
  for (const auto& [l, v] : at) all[l] = v;
  for (const auto& [l, v] : all) {
    law.labels.push_back(l);
    law.intervals.push_back(v.first);
    law.extents.push_back(v.second);
  }
  law.key = LawKey(law);
  return law;
}

// A head split of (b, s, h*d) -> (b, s, h, d) shrinks to a few elements per
// group: the merged dim keeps its 8 shards (2 elements each), then is cropped to
// the piece and a shard on each side; the head dim becomes 2, and the group's
// products stay equal (the output's head count follows the cropped input).
TEST(LawReduceTest, ReshapeGroupsKeepShardsAndEqualProducts) {
  const ir::TensorType x{ir::Shape({1, 8192, 16384}), ir::DType::kF32};
  const LawUse law = MakeLaw(ir::OpKind::kReshape, {x},
                             ir::AttrMap{{"shape", std::vector<int64_t>{1, 8192, 128, 128}}},
                             {{"d2", {ir::Interval{2048, 4096}, 16384}}});
  const LawUse r = ReduceLaw(law);
  ASSERT_NE(r.key, law.key);
  EXPECT_EQ(r.inputs[0].shape, ir::Shape({1, 1, 6}));
  EXPECT_EQ(r.attrs.GetInts("shape").value(), (std::vector<int64_t>{1, 1, 3, 2}));
  EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid);
}

// The batch split over many data-parallel replicas: a reshape's rows are
// reshaped apart, and its piece attributes are the same at every row, so the
// law is cropped to the piece and a row on each side, wherever the piece is, and
// the first, an inner and the last row are the only laws for any replica count.
TEST(LawReduceTest, ReshapeOfABatchSplitIsCroppedToThreeRows) {
  std::set<std::string> keys;
  for (const auto& [rows, piece] :
       std::vector<std::pair<int64_t, int64_t>>{{64, 0}, {64, 1}, {64, 30}, {64, 63},
                                                {1024, 0}, {1024, 511}, {1024, 1023}}) {
    const ir::TensorType in{ir::Shape({rows, 1, 16}), ir::DType::kF32};
    const LawUse law = MakeLaw(ir::OpKind::kReshape, {in},
                               ir::AttrMap{{"shape", std::vector<int64_t>{rows, 1, 8, 2}}},
                               {{"d0", {ir::Interval{piece, piece + 1}, rows}}});
    const LawUse r = ReduceLaw(law);
    EXPECT_LE(r.inputs[0].shape.dim(0), 3) << rows << " " << piece;
    EXPECT_EQ(r.attrs.GetInts("shape").value()[0], r.inputs[0].shape.dim(0));
    EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid);
    keys.insert(r.key);
  }
  EXPECT_EQ(keys.size(), 3u);
}

// A reshape that drops a size-1 dim (DeepSeek's [b, s, 1, d] -> [b, s, d]) keeps
// its other dims above 1 at reduced sizes, else a neighbour of size 1 would be
// taken for the dropped one and the dims relabelled.
TEST(LawReduceTest, ReshapeDroppingAUnitDimKeepsItsLabels) {
  const ir::TensorType x{ir::Shape({32, 4096, 1, 64}), ir::DType::kF32};
  const LawUse law = MakeLaw(ir::OpKind::kReshape, {x},
                             ir::AttrMap{{"shape", std::vector<int64_t>{32, 4096, 64}}},
                             {{"d0", {ir::Interval{9, 10}, 32}}});
  const LawUse r = ReduceLaw(law);
  ASSERT_NE(r.key, law.key);
  // Rows 8 to 10: the piece and one on each side.
  EXPECT_EQ(r.inputs[0].shape, ir::Shape({3, 2, 1, 2}));
  EXPECT_EQ(r.attrs.GetInts("shape").value(), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid);
}

// pick_grad's vocabulary is an attribute: it follows the reduced output dim. Its
// piece attributes do not depend on where the piece lies along the positions, so
// those are cropped to the first piece and its neighbour (8 units, then 2).
TEST(LawReduceTest, PickGradVocabularyShrinks) {
  const ir::TensorType targets{ir::Shape({1, 8192}), ir::DType::kI64};
  const ir::TensorType dy{ir::Shape({1, 8192}), ir::DType::kF32};
  const LawUse law = MakeLaw(ir::OpKind::kPickGrad, {targets, dy},
                             ir::AttrMap{{"vocab", int64_t{128256}}},
                             {{"d1", {ir::Interval{0, 1024}, 8192}}});
  const LawUse r = ReduceLaw(law);
  EXPECT_EQ(r.attrs.GetInt("vocab").value(), 2);
  EXPECT_EQ(r.inputs[1].shape, ir::Shape({1, 2}));
  EXPECT_EQ(ProveLaw(r, 10000).verdict, smt::Verdict::kValid);
}

// An embedding piece of a vocabulary range (piece attribute vocab_begin) and of
// one of 64 batch rows: the attribute does not change as the piece moves along
// the batch, so the batch is cropped; the vocabulary, which it does follow, is not.
TEST(LawReduceTest, PieceAttributesBlindToALabelLetItBeCropped) {
  const ir::TensorType ids{ir::Shape({64, 1}), ir::DType::kI64};
  const ir::TensorType table{ir::Shape({16, 1}), ir::DType::kF64};
  const LawUse law = MakeLaw(ir::OpKind::kEmbedding, {ids, table}, ir::AttrMap{},
                             {{"b0", {ir::Interval{10, 11}, 64}}, {"v", {ir::Interval{4, 6}, 16}}});
  auto c = CropSpatialLabels(law);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->inputs[0].shape, ir::Shape({3, 1}));   // rows 9..11, the piece in the middle
  EXPECT_EQ(c->inputs[1].shape, ir::Shape({16, 1}));  // the vocabulary kept whole
  EXPECT_EQ(ProveLaw(*c, 10000).verdict, smt::Verdict::kValid);
}

// A law that is not reduced (a vocabulary offset) and too large is undecided
// with its size as the reason, without building it.
TEST(LawReduceTest, LargeUnreducedLawIsUndecidedNotBuilt) {
  const ir::TensorType targets{ir::Shape({1, 8192}), ir::DType::kI64};
  const ir::TensorType dy{ir::Shape({1, 8192}), ir::DType::kF32};
  const LawUse law =
      MakeLaw(ir::OpKind::kPickGrad, {targets, dy},
              ir::AttrMap{{"vocab", int64_t{128256}}, {"vocab_begin", int64_t{128256}}},
              {{"d1", {ir::Interval{0, 1024}, 8192}}});
  EXPECT_EQ(ReduceLaw(law).key, law.key);
  const auto t0 = std::chrono::steady_clock::now();
  const LawProof proof = ProveLaw(law, 10000);
  EXPECT_EQ(proof.verdict, smt::Verdict::kUnknown);
  EXPECT_NE(proof.detail.find("law too large to prove at its real size: 1050689536 elements"),
            std::string::npos)
      << proof.detail;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

// Every law that full-size Llama 3 plans use (real widths and vocabulary, two
// layers) reduces below the law size bound and is proved there.
TEST(LawReduceTest, FullSizeLawsReduceAndProve) {
  std::map<std::string, LawUse> reduced;
  for (const char* model : {"llama3-8b", "llama3-405b"}) {
    models::ModelOptions options;
    options.layers = 4;
    options.batch = 1;
    auto forward = models::BuildForward(model, options);
    ASSERT_TRUE(forward.ok()) << forward.status();
    ir::TrainingOptions training;
    training.microbatches = 2;
    auto spec = ir::BuildTrainingStep(*forward, training);
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (const transform::Strategy& s :
         {Make(1, 8, 1, 2), Make(1, 8, 1, 2, 1, /*sp=*/true), Make(1, 8, 2, 2),
          Make(1, 2, 2, 2, /*vpp=*/2)}) {
      auto plan = transform::Parallelize(*spec, s);
      ASSERT_TRUE(plan.ok()) << model << " " << s.ToString() << ": " << plan.status();
      auto d = DeriveLineage(*spec, *plan);
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_TRUE(d->failures.empty()) << model << " " << s.ToString();
      for (const LawUse& law : d->laws) {
        ASSERT_TRUE(ReducibleKind(law.kind)) << law.key;
        auto extents = ReducedExtents(law);
        ASSERT_TRUE(extents.ok()) << law.key << ": " << extents.status();
        auto r = ResizeLaw(law, *extents);
        if (!r.ok()) {
          ADD_FAILURE() << law.key << ": " << r.status();
          continue;
        }
        auto n = LawElements(*r);
        ASSERT_TRUE(n.ok()) << n.status();
        EXPECT_LE(*n, kMaxLawElements) << law.key;
        const LawUse small = ReduceLaw(law);
        if (small.key != r->key) {
          auto cropped = CropSpatialLabels(*r);
          ASSERT_TRUE(cropped.ok()) << cropped.status();
          EXPECT_EQ(small.key, cropped->key) << law.key;
        }
        reduced.emplace(small.key, small);
      }
    }
  }
  for (const auto& [key, law] : reduced) {
    EXPECT_EQ(ProveLaw(law, 20000).verdict, smt::Verdict::kValid) << key;
  }
  std::printf("full-size laws: %zu distinct reduced\n", reduced.size());
}

// The property: on every law the matrix uses, and on mutants of each, the
// verdict at the reduced sizes is what a numeric comparison finds at 2x and 3x.
TEST(LawReduceTest, ReducedVerdictAgreesWithNumericComparisonAtLargerSizes) {
  Tally correct, mutated;
  std::map<std::string, bool> seen;
  for (const LawUse& law : MatrixLaws()) {
    if (!ReducibleKind(law.kind)) continue;
    const LawUse r = ReduceLaw(law);
    if (!seen.emplace(r.key, true).second) continue;
    ExpectAgreement(absl::StrCat(ir::OpKindName(r.kind), " (correct)"), r, &correct);
    for (const auto& [name, m] : Mutants(r)) {
      ExpectAgreement(absl::StrCat(ir::OpKindName(r.kind), " (", name, ")"), m, &mutated);
    }
  }
  // Correct laws are proved; mutants include refuted ones; little is left open.
  EXPECT_EQ(correct.refuted, 0);
  EXPECT_GT(correct.proved, 50);
  EXPECT_GT(mutated.refuted, 20);
  EXPECT_LE(correct.unknown + mutated.unknown, (correct.proved + mutated.proved) / 10)
      << correct.unknown << " + " << mutated.unknown << " unknown";
  std::printf("reduced laws: %d proved, %d unknown; mutants: %d refuted, %d proved, %d unknown\n",
              correct.proved, correct.unknown, mutated.refuted, mutated.proved, mutated.unknown);
}

}  // namespace
}  // namespace loom::verify
