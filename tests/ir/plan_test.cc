#include "ir/plan.h"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/plan_json.h"
#include "tests/ir/plan_testutil.h"

namespace loom::ir {
namespace {

using testing::ExplicitTestPlan;
using testing::FactoredTestPlan;
using testing::PlanTestStep;
using testing::TensorNamed;

ValuePart Part(absl::string_view text) {
  auto part = ValuePart::Parse(text);
  EXPECT_TRUE(part.ok()) << part.status();
  return part.ok() ? *part : ValuePart::Empty();
}

// ---- Mesh ------------------------------------------------------------------------

// Device ids are row-major over the axes, outermost first.
TEST(MeshTest, DeviceIdsAreRowMajorOverAxes) {
  Mesh mesh({{"dp", 2}, {"pp", 3}, {"tp", 2}});
  EXPECT_EQ(mesh.num_devices(), 12);
  EXPECT_EQ(mesh.Device({1, 2, 1}), 11);
  EXPECT_EQ(mesh.Device({0, 1, 1}), 3);
  EXPECT_EQ(mesh.Coordinates(7), (std::vector<int64_t>{1, 0, 1}));
  for (int64_t d = 0; d < 12; ++d) EXPECT_EQ(mesh.Device(mesh.Coordinates(d)), d);
  EXPECT_EQ(mesh.AxisIndex("pp"), 1);
  EXPECT_EQ(mesh.AxisIndex("ep"), -1);
  EXPECT_EQ(mesh.AxisSize("tp"), 2);
  EXPECT_EQ(mesh.AxisSize("ep"), 1);
  EXPECT_EQ(mesh.ToString(), "dp=2 x pp=3 x tp=2");
  EXPECT_EQ(Mesh().num_devices(), 1);
  EXPECT_TRUE(mesh == Mesh({{"dp", 2}, {"pp", 3}, {"tp", 2}}));
  EXPECT_FALSE(mesh == Mesh({{"dp", 2}, {"pp", 3}, {"sp", 2}}));
}

// A group holds the devices differing only along one axis, in axis order.
TEST(MeshTest, GroupVariesOneAxisInOrder) {
  Mesh mesh({{"dp", 2}, {"pp", 3}, {"tp", 2}});
  EXPECT_EQ(mesh.Group(9, 0), (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(mesh.Group(9, 1), (std::vector<int64_t>{7, 9, 11}));
  EXPECT_EQ(mesh.Group(9, 2), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(mesh.Group(0, 1), (std::vector<int64_t>{0, 2, 4}));
}

// ---- Rational and ValuePart ------------------------------------------------------

// Rationals are kept in lowest terms and compare exactly, even near int64 limits.
TEST(RationalTest, NormalisesAndComparesWithoutOverflow) {
  EXPECT_EQ(Rational::Of(2, 4), (Rational{1, 2}));
  EXPECT_EQ(Rational::Of(0, 7), (Rational{0, 1}));
  EXPECT_EQ(Rational::Of(6, 3), (Rational{2, 1}));
  EXPECT_EQ(Rational::Of(3, 12).ToString(), "1/4");
  EXPECT_EQ(Rational::Of(0, 5).ToString(), "0");
  EXPECT_EQ(Rational::Of(1, 1).ToString(), "1");
  EXPECT_TRUE(Rational::Of(1, 3) < Rational::Of(1, 2));
  EXPECT_FALSE(Rational::Of(1, 2) < Rational::Of(2, 4));
  const int64_t big = INT64_MAX;
  EXPECT_TRUE(Rational::Of(1, big) < Rational::Of(1, big - 1));
  EXPECT_TRUE(Rational::Of(big - 2, big) < Rational::Of(big - 1, big));
  EXPECT_TRUE(Rational::Of(big - 1, big) < Rational::Of(1, 1));
}

// Share(k, n) splits every piece into n equal parts and keeps the k-th of each.
TEST(ValuePartTest, ShareRefinesEveryPiece) {
  EXPECT_EQ(ValuePart::Full().Share(1, 4).ToString(), "[1/4,1/2)");
  EXPECT_EQ(ValuePart::Full().Share(0, 1), ValuePart::Full());
  EXPECT_EQ(ValuePart::Full().Share(2, 3).Share(1, 2).ToString(), "[5/6,1)");
  EXPECT_EQ(Part("[0,1/4)+[1/2,3/4)").Share(1, 2).ToString(), "[1/8,1/4)+[5/8,3/4)");
  EXPECT_EQ(Part("[0,1/4)+[1/2,3/4)").Share(0, 3).ToString(), "[0,1/12)+[1/2,7/12)");
  EXPECT_TRUE(ValuePart::Empty().Share(0, 2).IsEmpty());
  EXPECT_TRUE(ValuePart::Full().Share(2, 2).IsEmpty());  // k out of range
  // Refining 64 times halves 64 times: still exact.
  ValuePart p = ValuePart::Full();
  for (int i = 0; i < 62; ++i) p = p.Share(1, 2);
  EXPECT_EQ(p.pieces()[0].lo, Rational::Of((int64_t{1} << 62) - 1, int64_t{1} << 62));
  EXPECT_EQ(p.pieces()[0].hi, Rational::Of(1, 1));
}

// Refine(lo, hi) keeps the fraction [lo, hi) of every piece; Share(k, n) is
// Refine(k/n, (k+1)/n).
TEST(ValuePartTest, RefineKeepsAFractionOfEveryPiece) {
  EXPECT_EQ(ValuePart::Full().Refine(Rational::Of(1, 4), Rational::Of(3, 4)).ToString(),
            "[1/4,3/4)");
  EXPECT_EQ(Part("[0,1/4)+[1/2,3/4)").Refine(Rational::Of(1, 2), Rational::Of(1, 1)).ToString(),
            "[1/8,1/4)+[5/8,3/4)");
  EXPECT_EQ(Part("[1/3,2/3)").Refine(Rational::Of(1, 3), Rational::Of(2, 3)),
            Part("[1/3,2/3)").Share(1, 3));
  EXPECT_TRUE(ValuePart::Full().Refine(Rational::Of(1, 2), Rational::Of(1, 2)).IsEmpty());
  EXPECT_TRUE(ValuePart::Full().Refine(Rational::Of(3, 4), Rational::Of(1, 4)).IsEmpty());
  EXPECT_TRUE(ValuePart::Full().Refine(Rational::Of(0, 1), Rational::Of(5, 4)).IsEmpty());
}

// EqualShareCount: n for one of n equal shares of the whole, none otherwise.
TEST(ValuePartTest, EqualShareCountNamesTheMembers) {
  EXPECT_EQ(Part("[1/2,1)").EqualShareCount(), 2);
  EXPECT_EQ(Part("[1/4,1/2)").EqualShareCount(), 4);
  EXPECT_EQ(ValuePart::Full().Share(2, 3).EqualShareCount(), 3);
  EXPECT_FALSE(ValuePart::Full().EqualShareCount().has_value());
  EXPECT_FALSE(Part("[1/4,3/4)").EqualShareCount().has_value());
  EXPECT_FALSE(Part("[0,1/4)+[1/2,3/4)").EqualShareCount().has_value());
  EXPECT_EQ(Part("[1/3,1/2)").EqualShareCount(), 6);  // [2/6, 3/6)
  EXPECT_FALSE(Part("[1/4,2/3)").EqualShareCount().has_value());
}

// Union merges adjacent pieces, keeps gaps and refuses overlapping parts.
TEST(ValuePartTest, UnionMergesAdjacentAndRejectsOverlap) {
  const ValuePart full = ValuePart::Full();
  auto halves = full.Share(0, 2).Union(full.Share(1, 2));
  ASSERT_TRUE(halves.ok()) << halves.status();
  EXPECT_TRUE(halves->IsFull());
  auto gapped = full.Share(2, 4).Union(full.Share(0, 4));
  ASSERT_TRUE(gapped.ok());
  EXPECT_EQ(gapped->ToString(), "[0,1/4)+[1/2,3/4)");
  EXPECT_EQ(gapped->pieces().size(), 2u);
  auto three = gapped->Union(full.Share(1, 4));
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->ToString(), "[0,3/4)");
  auto with_empty = full.Share(1, 3).Union(ValuePart::Empty());
  ASSERT_TRUE(with_empty.ok());
  EXPECT_EQ(*with_empty, full.Share(1, 3));

  EXPECT_TRUE(full.Share(0, 2).Disjoint(full.Share(1, 2)));
  EXPECT_TRUE(ValuePart::Empty().Disjoint(full));
  EXPECT_FALSE(full.Disjoint(full.Share(1, 7)));
  EXPECT_FALSE(Part("[0,1/4)+[1/2,3/4)").Disjoint(Part("[1/8,1/3)")));
  EXPECT_TRUE(Part("[0,1/4)+[1/2,3/4)").Disjoint(Part("[1/4,1/2)+[3/4,1)")));
  auto overlap = Part("[0,1/2)").Union(Part("[1/3,2/3)"));
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().message(), "value parts [0,1/2) and [1/3,2/3) overlap");
  EXPECT_FALSE(full.Union(full).ok());  // replicas never meet in one sum
}

// Parts print canonically and parse back; bad text is an error naming it.
TEST(ValuePartTest, PrintsAndParsesCanonically) {
  for (const char* text : {"full", "0", "[0,1/2)", "[0,1/4)+[1/2,3/4)", "[1/3,1)"}) {
    EXPECT_EQ(Part(text).ToString(), text);
  }
  EXPECT_TRUE(Part("[0,1)").IsFull());
  EXPECT_TRUE(Part("[1/2,1)+[0,1/2)").IsFull());
  EXPECT_EQ(Part(" [2/4, 3/4) ").ToString(), "[1/2,3/4)");
  EXPECT_EQ(Part("[0,1/4)+[1/4,1/2)").ToString(), "[0,1/2)");
  for (const char* bad : {"", "half", "[0,2)", "[1/2,1/4)", "[0,1/2)+[1/4,3/4)", "[0,1/0)",
                          "[0,1/2]", "[0;1/2)", "[-1/2,1/2)", "[0,1/2", "[0,x)", "[0,1/2,1)",
                          "[0,1/2/3)", "[0,+1/2)", "[0,/2)", "[0,99999999999999999999/2)"}) {
    auto part = ValuePart::Parse(bad);
    ASSERT_FALSE(part.ok()) << "accepted '" << bad << "'";
    EXPECT_TRUE(absl::StartsWith(part.status().message(), absl::StrCat("bad value part '", bad)))
        << part.status();
  }
  EXPECT_EQ(ValuePart::Parse("[0,1/2)+[1/4,3/4)").status().message(),
            "bad value part '[0,1/2)+[1/4,3/4)': [0,1/2) and [1/4,3/4) overlap (expected "
            "\"full\", \"0\" or intervals like \"[0,1/4)+[1/2,3/4)\")");
}

// ---- Boxes and kinds -------------------------------------------------------------

// Box helpers: full box, extents, printing, intersection and containment.
TEST(BoxTest, IntersectsAndContains) {
  const Box full = FullBox(Shape({4, 6}));
  EXPECT_EQ(BoxToString(full), "[0:4,0:6]");
  EXPECT_EQ(BoxDims(full), (std::vector<int64_t>{4, 6}));
  const Box a{{0, 2}, {1, 5}}, b{{1, 4}, {3, 6}}, c{{2, 4}, {0, 6}};
  auto ab = Intersect(a, b);
  ASSERT_TRUE(ab.has_value());
  EXPECT_EQ(BoxToString(*ab), "[1:2,3:5]");
  EXPECT_FALSE(Intersect(a, c).has_value());  // touching rows only
  EXPECT_FALSE(Intersect(a, Box{{0, 2}}).has_value());  // rank mismatch
  auto scalar = Intersect(Box{}, Box{});
  ASSERT_TRUE(scalar.has_value());
  EXPECT_TRUE(scalar->empty());
  EXPECT_TRUE(Contains(full, a));
  EXPECT_TRUE(Contains(a, a));
  EXPECT_FALSE(Contains(a, full));
  EXPECT_FALSE(Contains(full, Box{{0, 4}}));
  EXPECT_FALSE(Contains(full, Box{{3, 5}, {0, 1}}));
  PlanValue v;
  v.sub.box = b;
  EXPECT_EQ(ValueShape(v), Shape({3, 3}));
}

// Every collective kind has a name that parses back; unknown names are errors.
TEST(CollectiveKindTest, NamesRoundTrip) {
  int count = 0;
#define LOOM_CHECK_KIND_(e, name)                                    \
  EXPECT_EQ(CollectiveKindName(CollectiveKind::e), name);            \
  EXPECT_EQ(*ParseCollectiveKind(name), CollectiveKind::e);          \
  ++count;
  LOOM_COLLECTIVE_KIND_LIST(LOOM_CHECK_KIND_)
#undef LOOM_CHECK_KIND_
  EXPECT_EQ(count, 6);
  auto bad = ParseCollectiveKind("allreduce");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown collective kind 'allreduce'");
}

// ---- MicrobatchMap ---------------------------------------------------------------

// Ops and tensors of micro-batch 0 map to the same position in micro-batch m;
// shared tensors and untagged ops map to themselves.
TEST(MicrobatchMapTest, MapsTrainingStepMicrobatches) {
  Graph spec = PlanTestStep(/*microbatches=*/3);
  auto map = MicrobatchMap::Build(spec);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->microbatches(), 3);
  int tagged = 0;
  for (const Op& op : spec.ops()) {
    if (op.info.microbatch != 0) continue;
    ++tagged;
    for (int m = 0; m < 3; ++m) {
      const OpId other = map->Op(op.id, m);
      ASSERT_NE(other, kNoId);
      EXPECT_EQ(spec.op(other).info.microbatch, m);
      EXPECT_EQ(spec.op(other).kind, op.kind);
      EXPECT_EQ(map->Op(other, 0), op.id);
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        EXPECT_EQ(map->Tensor(op.outputs[k], m), spec.op(other).outputs[k]);
      }
    }
  }
  EXPECT_GT(tagged, 6);
  auto name = [&](TensorId t) { return spec.tensor(t).name; };
  const TensorId tokens0 = TensorNamed(spec, "tokens.mb0");
  EXPECT_EQ(name(map->Tensor(tokens0, 2)), "tokens.mb2");
  EXPECT_EQ(name(map->Tensor(TensorNamed(spec, "targets.mb0"), 1)), "targets.mb1");
  EXPECT_EQ(name(map->Tensor(TensorNamed(spec, "h.mb0"), 1)), "h.mb1");
  EXPECT_EQ(name(map->Tensor(TensorNamed(spec, "h.mb2"), 0)), "h.mb0");
  EXPECT_EQ(map->TensorMicrobatch(TensorNamed(spec, "logits.mb1")), 1);
  EXPECT_EQ(map->TensorMicrobatch(tokens0), 0);
  const TensorId embed = TensorNamed(spec, "embed");
  EXPECT_EQ(map->Tensor(embed, 2), embed);
  EXPECT_EQ(map->TensorMicrobatch(embed), -1);
  const OpId accumulate = testing::ProducerOf(spec, "grad.embed");
  EXPECT_EQ(map->Op(accumulate, 1), accumulate);
  EXPECT_EQ(map->Op(accumulate, 3), kNoId);
  EXPECT_EQ(map->Op(-1, 0), kNoId);
  EXPECT_EQ(map->Tensor(spec.num_tensors(), 0), kNoId);
}

// A graph without micro-batch tags has one micro-batch and the identity map.
TEST(MicrobatchMapTest, UntaggedGraphIsOneMicrobatch) {
  Graph g;
  TensorId x = *g.AddInput("x", Shape({2}), DType::kF32, TensorRole::kInput);
  TensorId y = (*g.AddOp(OpKind::kGelu, {x}, {}, OpInfo{}, {{"y"}}))[0];
  auto map = MicrobatchMap::Build(g);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->microbatches(), 1);
  EXPECT_EQ(map->Op(0, 0), 0);
  EXPECT_EQ(map->Tensor(y, 0), y);
  EXPECT_EQ(map->Tensor(x, 0), x);
}

// Micro-batches with different op counts, kinds, attributes or data inputs are rejected.
TEST(MicrobatchMapTest, RejectsMismatchedMicrobatches) {
  auto build = [](OpKind second_kind, double second_factor, bool extra_op, bool extra_input) {
    Graph g;
    TensorId x0 = *g.AddInput("x0", Shape({2}), DType::kF32, TensorRole::kInput);
    TensorId x1 = *g.AddInput("x1", Shape({2}), DType::kF32, TensorRole::kInput);
    (void)*g.AddOp(OpKind::kScale, {x0}, {{"factor", 0.5}}, OpInfo{Phase::kForward, -1, 0},
                   {{"y0"}});
    AttrMap second_attrs;
    if (second_kind == OpKind::kScale) second_attrs.Set("factor", second_factor);
    (void)*g.AddOp(second_kind, {x1}, second_attrs, OpInfo{Phase::kForward, -1, 1}, {{"y1"}});
    if (extra_op) (void)*g.AddOp(OpKind::kGelu, {x1}, {}, OpInfo{Phase::kForward, -1, 1}, {{"z"}});
    if (extra_input) {
      TensorId x2 = *g.AddInput("x2", Shape({2}), DType::kF32, TensorRole::kInput);
      (void)*g.AddOp(OpKind::kGelu, {x2}, {}, OpInfo{Phase::kForward, -1, 1}, {{"w1"}});
      (void)*g.AddOp(OpKind::kGelu, {x0}, {}, OpInfo{Phase::kForward, -1, 0}, {{"w0"}});
    }
    return MicrobatchMap::Build(g);
  };
  EXPECT_TRUE(build(OpKind::kScale, 0.5, false, false).ok());
  auto kind = build(OpKind::kGelu, 0.5, false, false);
  ASSERT_FALSE(kind.ok());
  EXPECT_TRUE(absl::StartsWith(kind.status().message(),
                               "op 0 of micro-batch 1, op 'gelu' (y1)"))
      << kind.status();
  auto attrs = build(OpKind::kScale, 0.25, false, false);
  ASSERT_FALSE(attrs.ok());
  EXPECT_TRUE(absl::StrContains(attrs.status().message(), "{factor=0.25}")) << attrs.status();
  auto count = build(OpKind::kScale, 0.5, true, false);
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().message(), "micro-batch 1 has 2 ops, micro-batch 0 has 1");
  auto inputs = build(OpKind::kScale, 0.5, false, true);
  ASSERT_FALSE(inputs.ok());
  EXPECT_EQ(inputs.status().message(), "micro-batch 1 has 2 data inputs, micro-batch 0 has 1")
      << inputs.status();
}

// ---- ExpandPlan ------------------------------------------------------------------

// The hand-written factored plan (2 replicas x 2 micro-batches) expands to exactly
// the hand-written explicit plan, and both pass validation.
TEST(ExpandPlanTest, FactoredPlanExpandsToHandWrittenExplicitPlan) {
  Graph spec = PlanTestStep(/*microbatches=*/2);
  const Plan factored = FactoredTestPlan(spec);
  const Plan want = ExplicitTestPlan(spec);
  ASSERT_TRUE(ValidatePlan(spec, factored).ok()) << ValidatePlan(spec, factored);
  ASSERT_TRUE(ValidatePlan(spec, want).ok()) << ValidatePlan(spec, want);
  auto got = ExpandPlan(spec, factored);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(PlanToJson(*got), PlanToJson(want));
  EXPECT_TRUE(*got == want);
  EXPECT_FALSE(got->is_factored());
}

// An explicit plan comes back unchanged.
TEST(ExpandPlanTest, ExplicitPlanIsReturnedUnchanged) {
  Graph spec = PlanTestStep(2);
  Plan plan = ExplicitTestPlan(spec);
  plan.order.assign(4, {});
  auto got = ExpandPlan(spec, plan);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == plan);
}

// Replica boxes and shares: with dp = 4 the data box walks along dp_dim and the
// dp partial sums become quarters.
TEST(ExpandPlanTest, ShiftsBoxesAndSplitsSharesPerReplica) {
  Graph spec = PlanTestStep(2);
  Plan plan = FactoredTestPlan(spec);
  plan.mesh = Mesh({{"dp", 4}, {"tp", 2}});
  plan.factoring->dp = 4;
  for (PlanValue& v : plan.values) {
    if (v.dp_dim == 0) v.sub.box[0].end = 1;  // one of 4 rows per replica
  }
  ASSERT_TRUE(ValidatePlan(spec, plan).ok()) << ValidatePlan(spec, plan);
  auto got = ExpandPlan(spec, plan);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(ValidatePlan(spec, *got).ok()) << ValidatePlan(spec, *got);
  // 7 unit values, 4 of them per micro-batch: 11 per replica.
  ASSERT_EQ(got->values.size(), 44u);
  for (int r = 0; r < 4; ++r) {
    const PlanValue& tokens = got->values[11 * r];  // tokens.mb0 of replica r
    EXPECT_EQ(tokens.device, 2 * r);
    EXPECT_EQ(BoxToString(tokens.sub.box), absl::StrCat("[", r, ":", r + 1, ",0:3]"));
    const PlanValue& partial = got->values[11 * r + 7];  // grad.embed before all-reduce
    EXPECT_EQ(partial.sub.part, ValuePart::Full().Share(r, 4));
  }
  // The all-reduce spans the replicas once: devices 0, 2, 4, 6.
  const Collective& all_reduce = got->collectives[2];
  EXPECT_EQ(all_reduce.kind, CollectiveKind::kAllReduce);
  EXPECT_EQ(all_reduce.devices, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(all_reduce.inputs, (std::vector<ValueId>{7, 18, 29, 40}));
  EXPECT_EQ(got->collectives.size(), 2u * 4 + 1);
}

// A spans_dp group of several unit devices lists each unit rank's replicas together.
TEST(ExpandPlanTest, SpansDpGroupReplacesEachUnitRankByItsReplicas) {
  Graph spec = PlanTestStep(2);
  Plan plan = FactoredTestPlan(spec);
  // A second unit device joins the gradient all-reduce.
  const TensorId grad = plan.values[4].sub.tensor;
  PlanValue in = plan.values[4], out = plan.values[5];
  in.id = 7;
  in.device = 1;
  out.id = 8;
  out.device = 1;
  in.sub.part = ValuePart::Empty();  // device 1 contributes zeros
  in.dp_share = false;
  plan.values.push_back(in);
  plan.values.push_back(out);
  Collective& c = plan.collectives[1];
  c.devices = {0, 1};
  c.inputs = {4, 7};
  c.outputs = {5, 8};
  ASSERT_TRUE(ValidatePlan(spec, plan).ok()) << ValidatePlan(spec, plan);
  auto got = ExpandPlan(spec, plan);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(ValidatePlan(spec, *got).ok()) << ValidatePlan(spec, *got);
  const Collective& e = got->collectives[2];
  EXPECT_EQ(e.devices, (std::vector<int64_t>{0, 2, 1, 3}));
  ASSERT_EQ(e.inputs.size(), 4u);
  const std::vector<int64_t> in_devices = {got->values[e.inputs[0]].device,
                                           got->values[e.inputs[1]].device,
                                           got->values[e.inputs[2]].device,
                                           got->values[e.inputs[3]].device};
  EXPECT_EQ(in_devices, e.devices);
  for (ValueId v : e.outputs) EXPECT_EQ(got->values[v].sub.tensor, grad);
}

// A slice that cuts replica r's rows out of a replicated value steps its begin and
// end with the replica (dp_attrs); expansion applies the steps and clears them.
TEST(ExpandPlanTest, StepsReplicaDependentAttributes) {
  Graph spec = PlanTestStep(2);
  Plan plan = FactoredTestPlan(spec);
  PlanValue whole = plan.values[0];
  whole.id = 7;
  whole.sub.box = FullBox(spec.tensor(whole.sub.tensor).shape);
  whole.dp_dim = -1;
  plan.values.push_back(whole);
  Task slice;
  slice.id = 2;
  slice.kind = OpKind::kSlice;
  slice.attrs = AttrMap{{"dim", int64_t{0}}, {"begin", int64_t{0}}, {"end", int64_t{2}}};
  slice.info = OpInfo{Phase::kForward, 0, 0};
  slice.inputs = {7};
  slice.outputs = {0};
  slice.dp_attr_steps = {{"begin", 2}, {"end", 2}};
  plan.tasks.push_back(slice);
  ASSERT_TRUE(ValidatePlan(spec, plan).ok()) << ValidatePlan(spec, plan);
  auto json = PlanFromJson(PlanToJson(plan));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(*json == plan);
  EXPECT_TRUE(absl::StrContains(PlanToJson(plan), R"("dp_attrs":{"begin":2,"end":2})"));

  auto got = ExpandPlan(spec, plan);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(ValidatePlan(spec, *got).ok()) << ValidatePlan(spec, *got);
  int slices = 0;
  for (const Task& t : got->tasks) {
    if (t.kind != OpKind::kSlice) continue;
    ++slices;
    const int64_t r = t.device / 2;
    EXPECT_EQ(*t.attrs.GetInt("begin"), 2 * r);
    EXPECT_EQ(*t.attrs.GetInt("end"), 2 * r + 2);
    EXPECT_TRUE(t.dp_attr_steps.empty());
    const Box& out = got->values[t.outputs[0]].sub.box;
    EXPECT_EQ(out[0].begin, 2 * r);
    EXPECT_EQ(out[0].end, 2 * r + 2);
  }
  EXPECT_EQ(slices, 4);  // 2 replicas x 2 micro-batches

  plan.tasks[2].dp_attr_steps["end"] = 3;  // replica 1 would read past the rows
  EXPECT_EQ(ValidatePlan(spec, plan).message(),
            "plan: task 2 'slice' (device 0, micro-batch 0): in replica 1 {begin=2, dim=0, "
            "end=5}: slice [2, 5) is not a non-empty range of dim 0 (size 4) (inputs: value 7 "
            "i64[4,3])");
  plan.tasks[2].dp_attr_steps["end"] = 2;
  plan.tasks[2].dp_attr_steps["bogus"] = 1;
  EXPECT_EQ(ValidatePlan(spec, plan).message(),
            "plan: task 2 'slice' (device 0, micro-batch 0): dp_attrs names 'bogus', which is "
            "not an integer attribute");
  EXPECT_EQ(ExpandPlan(spec, plan).status().message(),
            "plan: task 2: dp_attrs names 'bogus', which is not an integer attribute");
  Plan explicit_plan = ExplicitTestPlan(spec);
  explicit_plan.tasks[0].dp_attr_steps["begin"] = 1;
  EXPECT_EQ(ValidatePlan(spec, explicit_plan).message(),
            "plan: task 0 'embedding' (device 0, micro-batch 0): dp_attrs are set in an explicit "
            "plan");
}

// Factored plans with an order of another size than the scale unit, a wrong
// micro-batch count or a stride that does not fit the mesh are rejected before
// expansion.
TEST(ExpandPlanTest, RejectsBadFactoring) {
  Graph spec = PlanTestStep(2);
  auto error = [&](const std::function<void(Plan&)>& edit) {
    Plan plan = FactoredTestPlan(spec);
    edit(plan);
    auto got = ExpandPlan(spec, plan);
    return got.ok() ? std::string("ok") : std::string(got.status().message());
  };
  EXPECT_EQ(error([](Plan& p) { p.order.assign(2, {}); }),
            "plan: order: a factored plan's order is its factored_order (one program per unit "
            "device), not a per-device order");
  EXPECT_EQ(error([](Plan& p) { p.factored_order.programs.assign(4, {}); }),
            "plan: order: has 4 device programs, the scale unit 2 devices (one program per unit "
            "device)");
  EXPECT_EQ(error([](Plan& p) { p.factoring->microbatches = 3; }),
            "plan: factoring: micro-batches is 3, the spec has 2");
  EXPECT_EQ(error([](Plan& p) { p.factoring->dp_device_stride = 3; }),
            "plan: factoring: dp_device_stride 3 with dp 2 does not fit the 4 devices of mesh "
            "dp=2 x tp=2");
  EXPECT_EQ(error([](Plan& p) { p.factoring->dp = 0; }), "plan: factoring: dp is 0, expected >= 1");
  EXPECT_EQ(error([](Plan& p) { p.tasks[0].inputs[0] = 70; }),
            "plan: task 0: input 0: unknown value id 70");
  EXPECT_EQ(error([](Plan& p) { p.values[2].microbatch = 1; }),
            "plan: value 2: micro-batch 1 in a factored plan (expected 0 or -1)");
  EXPECT_EQ(error([](Plan& p) { p.values[0].dp_dim = 2; }),
            "plan: value 0: dp_dim 2 is not a dim of box [0:2,0:3]");
  EXPECT_EQ(error([](Plan& p) { p.collectives[0].spans_dp = true; }),
            "plan: collective 0: send_recv cannot span the data-parallel replicas");
}

// ---- ValidatePlan ----------------------------------------------------------------

struct BadCase {
  std::string name;
  std::function<void(Plan&)> edit;
  std::string message;
};

// Each broken explicit plan gets an error that names the item and the problem.
TEST(ValidatePlanTest, ErrorsNameTheItem) {
  Graph spec = PlanTestStep(2);
  const std::vector<BadCase> cases = {
      {"dangling input", [](Plan& p) { p.tasks[0].inputs[1] = 99; },
       "plan: task 0 'embedding' (device 0, micro-batch 0): input 1: unknown value id 99"},
      {"device outside mesh", [](Plan& p) { p.values[2].device = 4; },
       "plan: value 2 (device 4): device 4 is outside the mesh dp=2 x tp=2 (4 devices)"},
      {"value on another device", [](Plan& p) { p.tasks[0].inputs[1] = 13; },
       "plan: task 0 'embedding' (device 0, micro-batch 0): input 1: value 13 is on device 2"},
      {"wrong group size", [](Plan& p) { p.collectives[2].inputs.pop_back(); },
       "plan: collective 2 'all_reduce' (devices [0,2]): has 1 inputs and 2 outputs, expected 2 "
       "and 2"},
      {"output shape vs inference", [](Plan& p) { p.values[3].sub.box[2].end = 3; },
       "plan: task 0 'embedding' (device 0, micro-batch 0): output 0: value 3 is f32[2,3,3], "
       "'embedding' infers f32[2,3,4]"},
      {"box outside tensor", [](Plan& p) { p.values[0].sub.box[0].end = 5; },
       "plan: value 0 (device 0, micro-batch 0): box [0:5,0:3] lies outside tensor 'tokens.mb0' "
       "i64[4,3] in dim 0"},
      {"box dims mismatch", [](Plan& p) { p.values[2].sub.box.pop_back(); },
       "plan: value 2 (device 0): box [0:5] has 1 dims, tensor 'embed' f32[5,4] has 2"},
      {"unknown tensor", [](Plan& p) { p.values[2].sub.tensor = 9999; },
       "plan: value 2 (device 0): unknown tensor id 9999"},
      {"micro-batch of tensor", [](Plan& p) { p.values[3].microbatch = 1; },
       "plan: value 3 (device 0, micro-batch 1): tensor 'h.mb0' f32[4,3,4] belongs to "
       "micro-batch 0, the value to 1"},
      {"value written twice", [](Plan& p) { p.tasks[1].outputs[0] = 3; },
       "plan: task 1 'embedding' (device 0, micro-batch 1): value 3 is also written by task 0"},
      {"dense ids", [](Plan& p) { p.tasks[2].id = 7; },
       "plan: task 2 'accumulate' (device 0): id is 7, expected 2 (task ids are dense and in "
       "order)"},
      {"kind differs from op", [](Plan& p) { p.tasks[0].kind = OpKind::kLinear; },
       "plan: task 0 'linear' (device 0, micro-batch 0): computes a piece of op 'embedding' "
       "(h.mb0)"},
      {"output claims another tensor", [](Plan& p) { p.values[3].sub.tensor = p.values[4].sub.tensor; p.values[3].microbatch = 1; },
       "plan: task 0 'embedding' (device 0, micro-batch 0): output 0: value 3 claims tensor "
       "'h.mb1', op 'embedding' (h.mb0) writes 'h.mb0'"},
      {"send_recv devices", [](Plan& p) { p.collectives[0].devices = {0}; },
       "plan: collective 0 'send_recv' (devices [0], micro-batch 0): send_recv needs 2 devices "
       "{src, dst}, has 1"},
      {"collective output device", [](Plan& p) { p.collectives[0].outputs[0] = 4; },
       "plan: collective 0 'send_recv' (devices [0,1], micro-batch 0): output 0: value 4 is on "
       "device 0, expected 1"},
      {"duplicate group device", [](Plan& p) { p.collectives[2].devices = {0, 0}; },
       "plan: collective 2 'all_reduce' (devices [0,0]): lists device 0 twice"},
      {"spans_dp in explicit plan", [](Plan& p) { p.collectives[2].spans_dp = true; },
       "plan: collective 2 'all_reduce' (devices [0,2]): spans_dp is set in an explicit plan"},
      {"dp_dim in explicit plan", [](Plan& p) { p.values[0].dp_dim = 0; },
       "plan: value 0 (device 0, micro-batch 0): dp_dim / dp_share are set in an explicit plan"},
      {"micro-batch beyond spec", [](Plan& p) { p.tasks[2].info.microbatch = 2; },
       "plan: task 2 'accumulate' (device 0, micro-batch 2): micro-batch 2 is outside the "
       "spec's 2 micro-batches"},
      {"dangling output", [](Plan& p) { p.outputs.push_back(-3); },
       "plan: outputs[2]: unknown value id -3"},
      {"bad mesh", [](Plan& p) { p.mesh = Mesh({{"dp", 0}}); },
       "plan: mesh: axis 'dp' has size 0"},
  };
  ASSERT_TRUE(ValidatePlan(spec, ExplicitTestPlan(spec)).ok());
  for (const BadCase& c : cases) {
    Plan plan = ExplicitTestPlan(spec);
    c.edit(plan);
    absl::Status status = ValidatePlan(spec, plan);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(status.message(), c.message) << c.name;
  }
}

// Collective shapes follow the kind: gather multiplies, scatter divides, all-to-all
// moves the split; inputs must agree with each other.
TEST(ValidatePlanTest, ChecksCollectiveShapes) {
  Graph spec = PlanTestStep(2);
  const TensorId h = TensorNamed(spec, "h.mb0");
  auto value = [&](ValueId id, int64_t device, Box box) {
    PlanValue v;
    v.id = id;
    v.device = device;
    v.sub.tensor = h;
    v.sub.box = std::move(box);
    v.microbatch = 0;
    return v;
  };
  auto plan_with = [&](CollectiveKind kind, int dim, int dim2, Box in, Box out) {
    Plan p;
    p.mesh = Mesh({{"tp", 2}});
    p.values = {value(0, 0, in), value(1, 1, in), value(2, 0, out), value(3, 1, out)};
    Collective c;
    c.id = 0;
    c.kind = kind;
    c.devices = {0, 1};
    c.inputs = {0, 1};
    c.outputs = {2, 3};
    c.dim = dim;
    c.dim2 = dim2;
    c.microbatch = 0;
    p.collectives = {c};
    return ValidatePlan(spec, p);
  };
  const Box full{{0, 4}, {0, 3}, {0, 4}};
  const Box half2{{0, 4}, {0, 3}, {0, 2}};
  const Box half0{{0, 2}, {0, 3}, {0, 4}};
  EXPECT_TRUE(plan_with(CollectiveKind::kAllGather, 2, -1, half2, full).ok());
  EXPECT_TRUE(plan_with(CollectiveKind::kReduceScatter, 2, -1, full, half2).ok());
  EXPECT_TRUE(plan_with(CollectiveKind::kAllReduce, -1, -1, full, full).ok());
  EXPECT_TRUE(plan_with(CollectiveKind::kAllToAll, 0, 2, half2, Box{{0, 2}, {0, 3}, {0, 4}}).ok());
  EXPECT_EQ(plan_with(CollectiveKind::kAllGather, 2, -1, half2, half2).message(),
            "plan: collective 0 'all_gather' (devices [0,1], micro-batch 0): output 0: value 2 "
            "is f32[4,3,2], expected f32[4,3,4]");
  EXPECT_EQ(plan_with(CollectiveKind::kAllGather, 3, -1, half2, full).message(),
            "plan: collective 0 'all_gather' (devices [0,1], micro-batch 0): dim 3 is not a dim "
            "of inputs [4,3,2]");
  EXPECT_EQ(plan_with(CollectiveKind::kReduceScatter, 1, -1, full, full).message(),
            "plan: collective 0 'reduce_scatter' (devices [0,1], micro-batch 0): dim 1 of "
            "inputs [4,3,4] does not split into 2 equal chunks");
  EXPECT_EQ(plan_with(CollectiveKind::kAllReduce, -1, -1, full, half0).message(),
            "plan: collective 0 'all_reduce' (devices [0,1], micro-batch 0): output 0: value 2 "
            "is f32[2,3,4], expected f32[4,3,4]");
  EXPECT_EQ(plan_with(CollectiveKind::kAllToAll, 0, -1, half2, full).message(),
            "plan: collective 0 'all_to_all' (devices [0,1], micro-batch 0): dim2 -1 is not a "
            "dim of inputs [4,3,2]");
}

// Factored plans: unit devices lie below the stride, the last replica's box stays
// inside the tensor, and tags are 0 or -1.
TEST(ValidatePlanTest, ChecksFactoredRules) {
  Graph spec = PlanTestStep(2);
  auto error = [&](const std::function<void(Plan&)>& edit) {
    Plan plan = FactoredTestPlan(spec);
    edit(plan);
    absl::Status s = ValidatePlan(spec, plan);
    return s.ok() ? std::string("ok") : std::string(s.message());
  };
  EXPECT_EQ(error([](Plan&) {}), "ok");
  EXPECT_EQ(error([](Plan& p) { p.tasks[0].device = 2; }),
            "plan: task 0 'embedding' (device 2, micro-batch 0): device 2 is outside the scale "
            "unit (devices 0..1)");
  EXPECT_EQ(error([](Plan& p) { p.values[0].sub.box[0] = {1, 3}; }),
            "plan: value 0 (device 0, micro-batch 0): box [1:3,0:3] shifted along dim 0 for 2 "
            "replicas leaves tensor 'tokens.mb0' i64[4,3]");
  EXPECT_EQ(error([](Plan& p) { p.tasks[1].info.microbatch = 1; }),
            "plan: task 1 'accumulate' (device 0, micro-batch 1): micro-batch 1 in a factored "
            "plan (expected 0 or -1)");
  EXPECT_EQ(error([](Plan& p) { p.values[4].microbatch = 0; }),
            "plan: task 1 'accumulate' (device 0): output 0: value 4 has micro-batch 0");
  EXPECT_EQ(error([](Plan& p) { p.collectives[1].microbatch = 0; }),
            "plan: collective 1 'all_reduce' (devices [0], micro-batch 0): output 0: value 5 has "
            "micro-batch -1");
  // An untagged task reads every micro-batch's copy: accumulate sees two inputs.
  EXPECT_EQ(error([](Plan& p) {
              p.tasks[1].kind = OpKind::kAdd;
              p.tasks[1].op = kNoId;
            }),
            "ok");
  EXPECT_EQ(error([](Plan& p) {
              p.tasks[1].kind = OpKind::kGelu;
              p.tasks[1].op = kNoId;
            }),
            "plan: task 1 'gelu' (device 0): takes 1 inputs, got 2 (inputs: value 3 f32[5,4] x "
            "2 micro-batches)");
}

// The per-device order must list every task once on its device and every collective
// once on each of its devices.
TEST(ValidatePlanTest, ChecksOrder) {
  Graph spec = PlanTestStep(2);
  Plan plan = ExplicitTestPlan(spec);
  auto T = [](int id) { return PlanStep{false, id}; };
  auto C = [](int id) { return PlanStep{true, id}; };
  plan.order = {{T(0), C(0), T(1), C(1), T(2), C(2)},
                {C(0), C(1)},
                {T(3), C(3), T(4), C(4), T(5), C(2)},
                {C(3), C(4)}};
  ASSERT_TRUE(ValidatePlan(spec, plan).ok()) << ValidatePlan(spec, plan);
  auto error = [&](const std::function<void(Plan&)>& edit) {
    Plan p = plan;
    edit(p);
    absl::Status s = ValidatePlan(spec, p);
    return s.ok() ? std::string("ok") : std::string(s.message());
  };
  EXPECT_EQ(error([&](Plan& p) { p.order[1].push_back(T(2)); }),
            "plan: order[1][2]: task 2 runs on device 0");
  EXPECT_EQ(error([&](Plan& p) { p.order[0].erase(p.order[0].begin()); }),
            "plan: order: task 0 is on no device's list (device 0)");
  EXPECT_EQ(error([&](Plan& p) { p.order[3].pop_back(); }),
            "plan: order: collective 4 is on 1 of its 2 devices' lists");
  EXPECT_EQ(error([&](Plan& p) { p.order[1].push_back(C(2)); }),
            "plan: order[1][2]: collective 2 does not include device 1");
  EXPECT_EQ(error([&](Plan& p) { p.order[1].push_back(C(0)); }),
            "plan: order[1][2]: collective 0 appears twice on device 1");
  EXPECT_EQ(error([&](Plan& p) { p.order[0].push_back(T(0)); }),
            "plan: order[0][6]: task 0 appears twice");
  EXPECT_EQ(error([&](Plan& p) { p.order[0].push_back(C(9)); }),
            "plan: order[0][6]: unknown collective id 9");
  EXPECT_EQ(error([&](Plan& p) { p.order.pop_back(); }),
            "plan: order: has 3 device lists, the mesh has 4 devices");
}

// Random corruption of ids, devices, boxes and tags never crashes validation or
// expansion; most corruptions are reported.
TEST(ValidatePlanTest, ArbitraryCorruptionNeverCrashes) {
  Graph spec = PlanTestStep(2);
  std::mt19937_64 rng(5);
  auto small = [&]() { return static_cast<int>(rng() % 40) - 10; };
  int rejected = 0;
  const int iterations = 3000;
  for (int iter = 0; iter < iterations; ++iter) {
    Plan plan = iter % 2 ? FactoredTestPlan(spec) : ExplicitTestPlan(spec);
    for (int k = 0; k < 2; ++k) {
      switch (rng() % 13) {
        case 0: plan.values[rng() % plan.values.size()].device = small(); break;
        case 1: plan.values[rng() % plan.values.size()].sub.tensor = small() * 5; break;
        case 2: {
          Box& box = plan.values[rng() % plan.values.size()].sub.box;
          if (rng() % 3 == 0) {
            box.push_back({small(), small()});
          } else if (!box.empty()) {
            box[rng() % box.size()] = {small(), small()};
          }
          break;
        }
        case 3: plan.values[rng() % plan.values.size()].microbatch = small() / 4; break;
        case 4: plan.values[rng() % plan.values.size()].dp_dim = small() / 3; break;
        case 5: {
          Task& t = plan.tasks[rng() % plan.tasks.size()];
          std::vector<ValueId>& ids = rng() % 2 ? t.inputs : t.outputs;
          if (rng() % 3 == 0) ids.push_back(small());
          else if (!ids.empty()) ids[rng() % ids.size()] = small();
          break;
        }
        case 6: {
          Collective& c = plan.collectives[rng() % plan.collectives.size()];
          std::vector<ValueId>& ids = rng() % 2 ? c.inputs : c.outputs;
          if (rng() % 3 == 0) ids.push_back(small());
          else if (!ids.empty()) ids.pop_back();
          break;
        }
        case 7: {
          Collective& c = plan.collectives[rng() % plan.collectives.size()];
          c.devices.push_back(small());
          c.dim = small() / 5;
          c.kind = static_cast<CollectiveKind>(rng() % 6);
          c.spans_dp = rng() % 2;
          break;
        }
        case 8: plan.tasks[rng() % plan.tasks.size()].op = small() * 3; break;
        case 9: plan.tasks[rng() % plan.tasks.size()].info.microbatch = small() / 5; break;
        case 10:
          plan.order.assign(rng() % 6, {PlanStep{rng() % 2 == 0, small()}});
          break;
        case 12: {
          Task& t = plan.tasks[rng() % plan.tasks.size()];
          t.attrs.Set("begin", int64_t{small()});
          t.dp_attr_steps[rng() % 2 ? "begin" : "end"] = small();
          if (rng() % 2) t.kind = OpKind::kSlice;
          break;
        }
        case 11:
          if (plan.factoring) {
            plan.factoring->dp = small();
            plan.factoring->dp_device_stride = small();
          }
          plan.outputs.push_back(small());
          break;
      }
    }
    absl::Status status = ValidatePlan(spec, plan);
    rejected += !status.ok();
    if (!status.ok()) {
      ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      ASSERT_TRUE(absl::StartsWith(status.message(), "plan: ")) << status;
    }
    auto expanded = ExpandPlan(spec, plan);
    if (status.ok() && expanded.ok()) {
      // A valid factored plan expands to a valid explicit plan.
      absl::Status again = ValidatePlan(spec, *expanded);
      ASSERT_TRUE(again.ok()) << again << "\n" << PlanToJson(plan);
    }
  }
  EXPECT_GT(rejected, iterations * 3 / 4);
}

}  // namespace
}  // namespace loom::ir
