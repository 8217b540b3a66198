// Every collective kind and reduce op the plan format allows, over every dim it
// can take: the verifier's derivation, the plan interpreter and the CPU backend
// all read a collective through ir/collective_semantics.h, so they must agree on
// each: a correct use is proved equivalent and computes the spec's numbers on
// both executors, and every mutant of it (the other reduce op, chunks claimed
// in the other order, members out of order, a share sent where a complete value belongs) is refuted
// by the verifier and computes other numbers.

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "exec/backend.h"
#include "exec/plan_interpreter.h"
#include "exec/program.h"
#include "gtest/gtest.h"
#include "ir/collective_semantics.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "ir/text_format.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ir::Box;
using ir::CollectiveKind;
using ir::OpKind;
using ir::ReduceOp;
using ir::ValueId;
using ir::ValuePart;

// y = x w (partial sums when the contracted dim is split), z = max over the
// last dim of t (partial maxima when it is split).
constexpr char kSpec[] = R"(
graph "collectives" {
  %x = input f64[4,4]
  %w = input f64[4,4]
  %t = input f64[4,4,4]
  %y = matmul(%x, %w) : f64[4,4] @forward
  %z = max(%t) {dim=2} : f64[4,4] @forward
  output %y, %z
}
)";

struct Spec {
  ir::Graph graph;
  ir::TensorId x, w, t, y, z;
  ir::OpId matmul, max;
};

Spec MakeSpec() {
  auto g = ir::ParseGraph(kSpec, "collectives.loom");
  EXPECT_TRUE(g.ok()) << g.status();
  Spec s;
  s.graph = *std::move(g);
  s.x = 0, s.w = 1, s.t = 2, s.y = 3, s.z = 4;
  s.matmul = 0, s.max = 1;
  return s;
}

Box B(std::vector<std::pair<int64_t, int64_t>> iv) {
  Box b;
  for (auto [lo, hi] : iv) b.push_back(ir::Interval{lo, hi});
  return b;
}

// Builds a two-device plan over the spec.
class Builder {
 public:
  explicit Builder(const Spec& s) : s_(s) { plan_.mesh = ir::Mesh({ir::MeshAxis{"tp", 2}}); }

  ValueId Value(int64_t device, ir::TensorId tensor, Box box,
                ValuePart part = ValuePart::Full(), ReduceOp combine = ReduceOp::kSum) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan_.values.size());
    v.device = device;
    v.sub = ir::SubTensor{tensor, std::move(box), std::move(part), combine};
    v.dtype = ir::DType::kF64;
    plan_.values.push_back(std::move(v));
    return plan_.values.back().id;
  }
  void Task(int64_t device, OpKind kind, ir::OpId op, std::vector<ValueId> in, ValueId out,
            ir::AttrMap attrs = {}) {
    ir::Task t;
    t.id = static_cast<int>(plan_.tasks.size());
    t.op = op;
    t.kind = kind;
    t.device = device;
    t.attrs = std::move(attrs);
    t.inputs = std::move(in);
    t.outputs = {out};
    plan_.tasks.push_back(std::move(t));
  }
  void Collective(CollectiveKind kind, ReduceOp reduce, std::vector<int64_t> devices,
                  std::vector<ValueId> in, std::vector<ValueId> out, int dim = -1,
                  int dim2 = -1) {
    ir::Collective c;
    c.id = static_cast<int>(plan_.collectives.size());
    c.kind = kind;
    c.reduce = reduce;
    c.devices = std::move(devices);
    c.inputs = std::move(in);
    c.outputs = std::move(out);
    c.dim = dim;
    c.dim2 = dim2;
    plan_.collectives.push_back(std::move(c));
  }
  // y over `box` on `device`, computed from the matching rows of x and columns of w.
  ValueId Product(int64_t device, Box box) {
    ValueId x = Value(device, s_.x, B({{box[0].begin, box[0].end}, {0, 4}}));
    ValueId w = Value(device, s_.w, B({{0, 4}, {box[1].begin, box[1].end}}));
    ValueId y = Value(device, s_.y, box);
    Task(device, OpKind::kMatMul, s_.matmul, {x, w}, y);
    return y;
  }
  // Share k of 2 of y (the contracted dim split in halves), `scale` times it when
  // its x is loaded that many times over.
  ValueId PartialProduct(int64_t device, int k, ir::Rational scale = ir::Rational::One()) {
    ValueId x = Value(device, s_.x, B({{0, 4}, {2 * k, 2 * k + 2}}));
    plan_.values[x].sub.scale = scale;
    ValueId w = Value(device, s_.w, B({{2 * k, 2 * k + 2}, {0, 4}}));
    ValueId y = Value(device, s_.y, B({{0, 4}, {0, 4}}), ValuePart::Full().Share(k, 2));
    plan_.values[y].sub.scale = scale;
    Task(device, OpKind::kMatMul, s_.matmul, {x, w}, y);
    return y;
  }
  // Share k of 2 of z: the maximum over half of the last dim of t.
  ValueId PartialMax(int64_t device, int k) {
    ValueId t = Value(device, s_.t, B({{0, 4}, {0, 4}, {2 * k, 2 * k + 2}}));
    ValueId z = Value(device, s_.z, B({{0, 4}, {0, 4}}), ValuePart::Full().Share(k, 2),
                      ReduceOp::kMax);
    Task(device, OpKind::kMax, s_.max, {t}, z, ir::AttrMap{{"dim", int64_t{2}}});
    return z;
  }
  // Every spec output not covered yet, computed whole on device 0.
  ir::Plan Finish(std::vector<ValueId> outputs, bool covers_y, bool covers_z) {
    if (!covers_y) outputs.push_back(Product(0, B({{0, 4}, {0, 4}})));
    if (!covers_z) {
      ValueId t = Value(0, s_.t, B({{0, 4}, {0, 4}, {0, 4}}));
      ValueId z = Value(0, s_.z, B({{0, 4}, {0, 4}}));
      Task(0, OpKind::kMax, s_.max, {t}, z, ir::AttrMap{{"dim", int64_t{2}}});
      outputs.push_back(z);
    }
    plan_.outputs = std::move(outputs);
    return std::move(plan_);
  }

 private:
  const Spec& s_;
  ir::Plan plan_;
};

// One use of a collective: a correct plan, or one of its mutants.
struct Case {
  std::string name;
  ir::Plan plan;
  bool correct;
};

// Every use, correct or a mutant. A reducing collective completes shares only
// with their own combination (partial sums add, partial maxima take the max).
std::vector<Case> Cases(const Spec& s) {
  std::vector<Case> cases;
  for (ReduceOp shares : {ReduceOp::kSum, ReduceOp::kMax}) {
    const std::string of = shares == ReduceOp::kSum ? "partial_sums" : "partial_maxima";
    const ir::TensorId out = shares == ReduceOp::kSum ? s.y : s.z;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      const std::string opname = op == ReduceOp::kSum ? "sum" : "max";
      auto shares_on = [&](Builder& b) {
        return std::vector<ValueId>{
            shares == ReduceOp::kSum ? b.PartialProduct(0, 0) : b.PartialMax(0, 0),
            shares == ReduceOp::kSum ? b.PartialProduct(1, 1) : b.PartialMax(1, 1)};
      };
      {
        Builder b(s);
        std::vector<ValueId> in = shares_on(b);
        std::vector<ValueId> outs = {b.Value(0, out, B({{0, 4}, {0, 4}})),
                                     b.Value(1, out, B({{0, 4}, {0, 4}}))};
        b.Collective(CollectiveKind::kAllReduce, op, {0, 1}, in, outs);
        cases.push_back({absl::StrCat("all_reduce_", opname, "_of_", of),
                         b.Finish(outs, out == s.y, out == s.z), op == shares});
      }
      for (int dim : {0, 1}) {
        for (bool swapped : {false, true}) {
          Builder b(s);
          std::vector<ValueId> in = shares_on(b);
          std::vector<ValueId> outs;
          for (int64_t i = 0; i < 2; ++i) {
            const int64_t chunk = swapped ? 1 - i : i;
            Box box = B({{0, 4}, {0, 4}});
            box[dim] = ir::Interval{2 * chunk, 2 * chunk + 2};
            outs.push_back(b.Value(i, out, box));
          }
          b.Collective(CollectiveKind::kReduceScatter, op, {0, 1}, in, outs, dim);
          cases.push_back({absl::StrCat("reduce_scatter_", opname, "_dim", dim, "_of_", of,
                                        swapped ? "_chunks_claimed_swapped" : ""),
                           b.Finish(outs, out == s.y, out == s.z), op == shares && !swapped});
        }
      }
    }
  }
  for (int dim : {0, 1}) {
    for (bool in_order : {true, false}) {
      Builder b(s);
      std::vector<ValueId> pieces;
      for (int64_t k = 0; k < 2; ++k) {
        Box box = B({{0, 4}, {0, 4}});
        box[dim] = ir::Interval{2 * k, 2 * k + 2};
        pieces.push_back(b.Product(k, box));
      }
      std::vector<ValueId> outs = {b.Value(0, s.y, B({{0, 4}, {0, 4}})),
                                   b.Value(1, s.y, B({{0, 4}, {0, 4}}))};
      if (in_order) {
        b.Collective(CollectiveKind::kAllGather, ReduceOp::kSum, {0, 1}, pieces, outs, dim);
      } else {
        b.Collective(CollectiveKind::kAllGather, ReduceOp::kSum, {1, 0}, {pieces[1], pieces[0]},
                     {outs[1], outs[0]}, dim);
      }
      cases.push_back({absl::StrCat("all_gather_dim", dim, in_order ? "" : "_out_of_order"),
                       b.Finish(outs, true, false), in_order});
    }
  }
  for (auto [dim, dim2] : {std::pair{1, 0}, std::pair{0, 1}}) {
    for (bool in_order : {true, false}) {
      Builder b(s);
      std::vector<ValueId> pieces, outs;
      for (int64_t k = 0; k < 2; ++k) {
        Box split = B({{0, 4}, {0, 4}});
        split[dim2] = ir::Interval{2 * k, 2 * k + 2};
        pieces.push_back(b.Product(k, split));
        Box got = B({{0, 4}, {0, 4}});
        got[dim] = ir::Interval{2 * k, 2 * k + 2};
        outs.push_back(b.Value(k, s.y, got));
      }
      if (in_order) {
        b.Collective(CollectiveKind::kAllToAll, ReduceOp::kSum, {0, 1}, pieces, outs, dim, dim2);
      } else {
        b.Collective(CollectiveKind::kAllToAll, ReduceOp::kSum, {1, 0}, {pieces[1], pieces[0]},
                     {outs[1], outs[0]}, dim, dim2);
      }
      cases.push_back({absl::StrCat("all_to_all_dim", dim, "_dim2_", dim2,
                                    in_order ? "" : "_out_of_order"),
                       b.Finish(outs, true, false), in_order});
    }
  }
  // An average: the sum over its two members halved. Shares of twice the
  // product average to the product; plain shares to half of it.
  for (bool doubled : {true, false}) {
    const ir::Rational scale = doubled ? ir::Rational::Of(2, 1) : ir::Rational::One();
    const std::string of = doubled ? "_of_doubled_partial_sums" : "_of_partial_sums";
    {
      Builder b(s);
      std::vector<ValueId> in = {b.PartialProduct(0, 0, scale), b.PartialProduct(1, 1, scale)};
      std::vector<ValueId> outs = {b.Value(0, s.y, B({{0, 4}, {0, 4}})),
                                   b.Value(1, s.y, B({{0, 4}, {0, 4}}))};
      b.Collective(CollectiveKind::kAllReduce, ReduceOp::kAvg, {0, 1}, in, outs);
      cases.push_back({"all_reduce_avg" + of, b.Finish(outs, true, false), doubled});
    }
    {
      Builder b(s);
      std::vector<ValueId> in = {b.PartialProduct(0, 0, scale), b.PartialProduct(1, 1, scale)};
      std::vector<ValueId> outs = {b.Value(0, s.y, B({{0, 2}, {0, 4}})),
                                   b.Value(1, s.y, B({{2, 4}, {0, 4}}))};
      b.Collective(CollectiveKind::kReduceScatter, ReduceOp::kAvg, {0, 1}, in, outs, 0);
      cases.push_back({"reduce_scatter_avg" + of, b.Finish(outs, true, false), doubled});
    }
  }
  for (bool complete : {true, false}) {
    {
      Builder b(s);
      ValueId root = complete ? b.Product(0, B({{0, 4}, {0, 4}})) : b.PartialProduct(0, 0);
      std::vector<ValueId> outs = {b.Value(0, s.y, B({{0, 4}, {0, 4}}), ValuePart::Full()),
                                   b.Value(1, s.y, B({{0, 4}, {0, 4}}))};
      b.Collective(CollectiveKind::kBroadcast, ReduceOp::kSum, {0, 1}, {root}, outs);
      cases.push_back({complete ? "broadcast" : "broadcast_of_a_share",
                       b.Finish({outs[1]}, true, false), complete});
    }
    {
      Builder b(s);
      ValueId from = complete ? b.Product(0, B({{0, 4}, {0, 4}})) : b.PartialProduct(0, 0);
      ValueId to = b.Value(1, s.y, B({{0, 4}, {0, 4}}));
      b.Collective(CollectiveKind::kSendRecv, ReduceOp::kSum, {0, 1}, {from}, {to});
      cases.push_back({complete ? "send_recv" : "send_recv_of_a_share",
                       b.Finish({to}, true, false), complete});
    }
  }
  return cases;
}

// Runs `plan` on the CPU backend in fp64 from the plan interpreter's inputs and
// returns the largest difference of any output from the interpreter's.
double CpuBackendDifference(const Spec& s, const ir::Plan& plan,
                            const std::vector<ir::HostTensor>& interpreted) {
  auto program = exec::LowerPlan(s.graph, plan);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return 1e300;
  exec::ExecOptions options;
  options.precision = ir::DType::kF64;
  options.collective_timeout_s = 30;
  std::unique_ptr<exec::Backend> backend = exec::MakeCpuBackend(options);
  exec::ValueStore inputs(program->plan.values.size());
  for (ValueId v : program->inputs) inputs[v] = interpreted[v];
  auto step = backend->RunStep(*program, std::move(inputs));
  EXPECT_TRUE(step.ok()) << step.status();
  if (!step.ok()) return 1e300;
  double worst = 0;
  for (ValueId v : plan.outputs) {
    EXPECT_TRUE(step->values[v].has_value()) << "output " << v;
    if (!step->values[v].has_value()) return 1e300;
    const ir::HostTensor& a = *step->values[v];
    for (int64_t e = 0; e < a.size(); ++e) {
      worst = std::max(worst, std::abs(a[e] - interpreted[v][e]));
    }
  }
  return worst;
}

// The verifier proves a correct use and refutes a mutant; the numbers on both
// executors say the same.
TEST(CollectiveMeaningTest, VerifierInterpreterAndCpuBackendAgree) {
  const Spec s = MakeSpec();
  const std::vector<Case> cases = Cases(s);
  int correct = 0, mutants = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(ir::ValidatePlan(s.graph, c.plan).ok()) << ir::ValidatePlan(s.graph, c.plan);
    VerifyOptions options;
    options.threads = 1;
    auto report = Verify(s.graph, c.plan, options);
    ASSERT_TRUE(report.ok()) << report.status();
    auto numerics = exec::CheckPlanNumerics(s.graph, c.plan, /*seed=*/7);
    ASSERT_TRUE(numerics.ok()) << numerics.status();
    absl::flat_hash_map<ir::TensorId, ir::HostTensor> feeds;
    for (ir::TensorId t : {s.x, s.w, s.t}) {
      ir::HostTensor h(s.graph.tensor(t).shape, ir::DType::kF64);
      for (int64_t e = 0; e < h.size(); ++e) h[e] = std::sin(1.0 + 3.7 * e + 11.0 * t);
      feeds[t] = std::move(h);
    }
    auto interpreted = exec::RunPlan(s.graph, c.plan, feeds);
    ASSERT_TRUE(interpreted.ok()) << interpreted.status();
    EXPECT_LT(CpuBackendDifference(s, c.plan, *interpreted), 1e-12);
    if (c.correct) {
      ++correct;
      EXPECT_EQ(report->verdict, Verdict::kEquivalent);
      EXPECT_LT(numerics->max_rel_error_all, 1e-12) << numerics->worst;
    } else {
      ++mutants;
      EXPECT_EQ(report->verdict, Verdict::kNotEquivalent);
      EXPECT_FALSE(report->failures.empty());
      EXPECT_GT(numerics->max_rel_error_all, 1e-3) << "the mutant computes the spec's numbers";
    }
  }
  // Correct: all_reduce 2, reduce_scatter 4, averages 2, all_gather 2, all_to_all 2,
  // broadcast and send_recv 1 each; the rest are mutants.
  EXPECT_EQ(correct, 2 + 4 + 2 + 2 + 2 + 2);
  EXPECT_EQ(mutants, static_cast<int>(cases.size()) - correct);
}

// The meaning of each kind, written out for two members and inputs of dims [4,6].
TEST(CollectiveMeaningTest, OutputDimsAndMoves) {
  auto dims = [](CollectiveKind k, int dim, int dim2, ReduceOp r = ReduceOp::kSum) {
    auto m = ir::MeaningOf(k, r, 2, dim, dim2, {4, 6});
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? m->output_dims : std::vector<int64_t>{};
  };
  EXPECT_EQ(dims(CollectiveKind::kAllReduce, -1, -1), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(dims(CollectiveKind::kReduceScatter, 1, -1), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(dims(CollectiveKind::kAllGather, 0, -1), (std::vector<int64_t>{8, 6}));
  EXPECT_EQ(dims(CollectiveKind::kAllToAll, 1, 0), (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(dims(CollectiveKind::kBroadcast, -1, -1), (std::vector<int64_t>{4, 6}));
  auto rs = ir::MeaningOf(CollectiveKind::kReduceScatter, ReduceOp::kMax, 2, 0, -1, {4, 6});
  ASSERT_TRUE(rs.ok());
  ASSERT_TRUE(rs->reduce.has_value());
  EXPECT_EQ(*rs->reduce, ReduceOp::kMax);
  // Output 1 is the max of the second halves of both inputs.
  ASSERT_EQ(rs->moves.size(), 4u);
  EXPECT_EQ(rs->moves[2].target, 1);
  EXPECT_EQ(ir::BoxToString(rs->moves[2].from), "[2:4,0:6]");
  EXPECT_EQ(rs->moves[3].source, 1);
  EXPECT_EQ(ir::BoxToString(rs->moves[3].from), "[2:4,0:6]");
}

// Kinds that do not reduce refuse a max; dims out of range and chunks that do
// not divide are errors, not reinterpreted.
TEST(CollectiveMeaningTest, RejectsWhatItCannotMean) {
  auto error = [](CollectiveKind k, ReduceOp r, int64_t n, int dim, int dim2) {
    auto m = ir::MeaningOf(k, r, n, dim, dim2, {4, 6});
    return m.ok() ? std::string("ok") : std::string(m.status().message());
  };
  EXPECT_EQ(error(CollectiveKind::kAllGather, ReduceOp::kMax, 2, 0, -1),
            "reduce op 'max' on all_gather, which does not reduce (only all_reduce and "
            "reduce_scatter read it)");
  EXPECT_EQ(error(CollectiveKind::kReduceScatter, ReduceOp::kSum, 2, -1, -1),
            "dim -1 is not a dim of inputs [4,6]");
  EXPECT_EQ(error(CollectiveKind::kReduceScatter, ReduceOp::kSum, 4, 1, -1),
            "dim 1 of inputs [4,6] does not split into 4 equal chunks");
  EXPECT_EQ(error(CollectiveKind::kAllToAll, ReduceOp::kSum, 2, 1, 1),
            "dim and dim2 are both 1 (all_to_all splits one dim and joins another)");
  EXPECT_EQ(error(CollectiveKind::kSendRecv, ReduceOp::kSum, 3, -1, -1),
            "send_recv needs exactly 2 devices (source, destination), has 3");
}

}  // namespace
}  // namespace loom::verify
