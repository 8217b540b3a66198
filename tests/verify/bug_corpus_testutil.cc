#include "tests/verify/bug_corpus_testutil.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "schedule/plan_blocks.h"
#include "schedule/predefined.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/schedule_safety.h"

namespace loom::verify::corpus {
namespace {

std::string Describe(const Failure& f) {
  return absl::StrCat(FailureClassName(f.cls), " at ", f.item, " (devices ",
                      absl::StrJoin(f.devices, ","), ") '", f.tensor, "' ", f.box, ": ", f.message,
                      " | counterexample: ", f.counterexample);
}

std::string DescribeAll(const Derivation& d) {
  std::string s;
  for (size_t i = 0; i < d.failures.size() && i < 8; ++i) {
    absl::StrAppend(&s, "  ", Describe(d.failures[i]), "\n");
  }
  return s;
}

bool Has(const std::vector<int64_t>& devices, int64_t d) {
  return std::find(devices.begin(), devices.end(), d) != devices.end();
}

void ExpectScheduleRejected(const Mutant& m, const ir::Graph& spec, const ir::Plan& plan,
                            const Where& where) {
  // The data flow is untouched: only the order is wrong.
  auto d = DeriveLineage(spec, plan);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->failures.empty()) << DescribeAll(*d);
  auto report = CheckScheduleSafety(plan);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->checked);
  const SafetyIssue* issue = nullptr;
  std::string all;
  for (const SafetyIssue& i : report->issues) {
    absl::StrAppend(&all, "  ", SafetyIssueKindName(i.kind), ": ", i.message, "\n");
    if (issue == nullptr && SafetyFailureClass(i.kind) == m.expect) issue = &i;
  }
  ASSERT_NE(issue, nullptr) << "no " << FailureClassName(m.expect) << " issue:\n" << all;
  EXPECT_EQ(SafetyIssueKindName(issue->kind), where.item) << all;
  for (int64_t dev : where.devices) {
    EXPECT_TRUE(Has(issue->devices, dev)) << "device " << dev << " not named: " << issue->message;
  }
  if (!where.message_has.empty()) {
    EXPECT_TRUE(absl::StrContains(issue->message, where.message_has))
        << "'" << where.message_has << "' not in: " << issue->message;
  }
}

}  // namespace

void ExpectRejected(const Mutant& m) {
  const int64_t batch = m.batch > 0 ? m.batch : 2 * m.strategy.dp;
  ir::Graph spec = ::loom::testing::TinyStep(m.model, m.strategy.microbatches, m.layers, batch);
  auto made = transform::Parallelize(spec, m.strategy);
  ASSERT_TRUE(made.ok()) << made.status();
  ir::Plan plan = *std::move(made);
  if (m.scheduled) {
    auto blocks = schedule::BlocksFromPlan(spec, plan);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    auto sched = schedule::MakePredefinedSchedule("1f1b", blocks->model, m.strategy.microbatches);
    ASSERT_TRUE(sched.ok()) << sched.status();
    auto ordered = schedule::ApplySchedule(plan, *blocks, *sched);
    ASSERT_TRUE(ordered.ok()) << ordered.status();
    plan = *std::move(ordered);
  }
  std::optional<Where> where = m.mutate(spec, plan);
  ASSERT_TRUE(where.has_value()) << "no place for the mutation";
  ASSERT_TRUE(ir::ValidatePlan(spec, plan).ok()) << ir::ValidatePlan(spec, plan);
  if (m.scheduled) return ExpectScheduleRejected(m, spec, plan, *where);

  // The fast derivation alone never derives it cleanly (DeriveLineage then
  // reports what the plain one finds).
  DeriveOptions fast_only;
  fast_only.plain = false;
  auto fast = DeriveLineage(spec, plan, fast_only);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_FALSE(fast->failures.empty() && fast->undecided.empty())
      << "the fast derivation finds nothing wrong";

  auto d = DeriveLineage(spec, plan);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_FALSE(d->failures.empty()) << "the mutated plan derives without a failure";
  const Failure& first = d->failures.front();
  const std::string all = DescribeAll(*d);
  EXPECT_EQ(FailureClassName(first.cls), FailureClassName(m.expect)) << all;
  EXPECT_EQ(first.item, where->item) << all;
  if (!where->tensor.empty()) {
    EXPECT_EQ(first.tensor, where->tensor) << all;
  }
  for (int64_t dev : where->devices) {
    EXPECT_TRUE(Has(first.devices, dev)) << "device " << dev << " not named:\n" << all;
  }
  if (!where->message_has.empty()) {
    EXPECT_TRUE(absl::StrContains(first.message, where->message_has))
        << "'" << where->message_has << "' not in the message:\n" << all;
  }
  for (int64_t dev : where->every_device) {
    EXPECT_TRUE(std::any_of(d->failures.begin(), d->failures.end(),
                            [&](const Failure& f) { return f.cls == m.expect && Has(f.devices, dev); }))
        << "no " << FailureClassName(m.expect) << " failure on device " << dev << ":\n" << all;
  }
  // Every lineage failure comes with a small concrete counterexample.
  for (const Failure& f : d->failures) {
    EXPECT_FALSE(f.counterexample.empty()) << "no counterexample: " << Describe(f);
  }
}

void PrintTo(const Mutant& m, std::ostream* os) { *os << m.name; }

std::string TensorName(const ir::Graph& spec, const ir::Plan& plan, ir::ValueId v) {
  return spec.tensor(plan.values[v].sub.tensor).name;
}

std::string ItemName(const ir::Task& t) {
  return absl::StrCat("task ", t.id, " '", ir::OpKindName(t.kind), "'");
}

std::string ItemName(const ir::Collective& c) {
  return absl::StrCat("collective ", c.id, " ", ir::CollectiveKindName(c.kind));
}

std::vector<ir::TaskId> TasksWriting(const ir::Graph& spec, const ir::Plan& plan,
                                     const std::string& tensor) {
  std::vector<ir::TaskId> out;
  for (const ir::Task& t : plan.tasks) {
    if (t.op == ir::kNoId || spec.op(t.op).outputs.empty()) continue;
    if (spec.tensor(spec.op(t.op).outputs[0]).name == tensor) out.push_back(t.id);
  }
  return out;
}

std::vector<ir::TaskId> TasksOfKind(const ir::Plan& plan, ir::OpKind kind) {
  std::vector<ir::TaskId> out;
  for (const ir::Task& t : plan.tasks) {
    if (t.op != ir::kNoId && t.kind == kind) out.push_back(t.id);
  }
  return out;
}

std::vector<ir::CollectiveId> CollectivesOf(const ir::Graph& spec, const ir::Plan& plan,
                                            ir::CollectiveKind kind, const std::string& tensor) {
  std::vector<ir::CollectiveId> out;
  for (const ir::Collective& c : plan.collectives) {
    if (c.kind != kind || c.outputs.empty()) continue;
    if (tensor.empty() || TensorName(spec, plan, c.outputs[0]) == tensor) out.push_back(c.id);
  }
  return out;
}

std::optional<ir::CollectiveId> FirstCollective(const ir::Plan& plan, ir::CollectiveKind kind,
                                                std::optional<ir::Phase> phase) {
  for (const ir::Collective& c : plan.collectives) {
    if (c.kind == kind && c.devices.size() > 1 && (!phase || c.phase == *phase)) return c.id;
  }
  return std::nullopt;
}

std::vector<ir::TaskId> TaskReaders(const ir::Plan& plan, ir::ValueId v) {
  std::vector<ir::TaskId> out;
  for (const ir::Task& t : plan.tasks) {
    if (std::find(t.inputs.begin(), t.inputs.end(), v) != t.inputs.end()) out.push_back(t.id);
  }
  return out;
}

ir::ValueId AddValue(ir::Plan& plan, ir::PlanValue v) {
  v.id = static_cast<ir::ValueId>(plan.values.size());
  plan.values.push_back(std::move(v));
  return plan.values.back().id;
}

ir::TaskId AddTask(ir::Plan& plan, ir::Task t) {
  t.id = static_cast<ir::TaskId>(plan.tasks.size());
  plan.tasks.push_back(std::move(t));
  return plan.tasks.back().id;
}

ir::CollectiveId AddCollective(ir::Plan& plan, ir::Collective c) {
  c.id = static_cast<ir::CollectiveId>(plan.collectives.size());
  plan.collectives.push_back(std::move(c));
  return plan.collectives.back().id;
}

ir::ValueId AddZeros(ir::Plan& plan, ir::ValueId like, int64_t device) {
  ir::PlanValue v = plan.values[like];
  v.device = device;
  v.sub.part = ir::ValuePart::Empty();
  const ir::ValueId out = AddValue(plan, v);
  ir::Task fill;
  fill.kind = ir::OpKind::kFill;
  fill.device = device;
  fill.info.microbatch = v.microbatch;
  fill.attrs.Set("value", 0.0);
  fill.attrs.Set("shape", ir::BoxDims(v.sub.box));
  fill.attrs.Set("dtype", std::string(ir::DTypeName(v.dtype)));
  fill.outputs = {out};
  AddTask(plan, std::move(fill));
  return out;
}

void Rewire(ir::Plan& plan, ir::ValueId from, ir::ValueId to) {
  for (ir::Task& t : plan.tasks) std::replace(t.inputs.begin(), t.inputs.end(), from, to);
  for (ir::Collective& c : plan.collectives) {
    std::replace(c.inputs.begin(), c.inputs.end(), from, to);
  }
  std::replace(plan.outputs.begin(), plan.outputs.end(), from, to);
}

void SplitIntoMembers(ir::Plan& plan, ir::CollectiveId id) {
  const ir::Collective whole = plan.collectives[id];
  for (size_t i = 0; i < whole.devices.size(); ++i) {
    ir::Collective one = whole;
    one.devices = {whole.devices[i]};
    one.inputs = {whole.inputs[i]};
    one.outputs = {whole.outputs[i]};
    if (i == 0) {
      plan.collectives[id] = std::move(one);
    } else {
      AddCollective(plan, std::move(one));
    }
  }
}

void Bypass(ir::Plan& plan, ir::CollectiveId id) {
  const ir::Collective c = plan.collectives[id];
  for (size_t i = 0; i < c.outputs.size(); ++i) Rewire(plan, c.outputs[i], c.inputs[i]);
  plan.collectives.erase(plan.collectives.begin() + id);
  for (size_t k = 0; k < plan.collectives.size(); ++k) {
    plan.collectives[k].id = static_cast<ir::CollectiveId>(k);
  }
  // Drop the outputs, renumbering the values after them.
  std::vector<ir::ValueId> remap(plan.values.size());
  std::vector<ir::PlanValue> kept;
  for (const ir::PlanValue& v : plan.values) {
    if (std::find(c.outputs.begin(), c.outputs.end(), v.id) != c.outputs.end()) continue;
    remap[v.id] = static_cast<ir::ValueId>(kept.size());
    kept.push_back(v);
    kept.back().id = remap[v.id];
  }
  plan.values = std::move(kept);
  auto fix = [&](std::vector<ir::ValueId>& ids) {
    for (ir::ValueId& v : ids) v = remap[v];
  };
  for (ir::Task& t : plan.tasks) fix(t.inputs), fix(t.outputs);
  for (ir::Collective& k : plan.collectives) fix(k.inputs), fix(k.outputs);
  fix(plan.outputs);
}

void SwapMembers(ir::Plan& plan, ir::CollectiveId id, int i, int j) {
  ir::Collective& c = plan.collectives[id];
  std::swap(c.devices[i], c.devices[j]);
  std::swap(c.inputs[i], c.inputs[j]);
  std::swap(c.outputs[i], c.outputs[j]);
}

void TradeMembers(ir::Plan& plan, ir::CollectiveId a, int i, ir::CollectiveId b, int j) {
  ir::Collective& x = plan.collectives[a];
  ir::Collective& y = plan.collectives[b];
  std::swap(x.devices[i], y.devices[j]);
  std::swap(x.inputs[i], y.inputs[j]);
  std::swap(x.outputs[i], y.outputs[j]);
}

ir::CollectiveId Repeat(ir::Plan& plan, ir::CollectiveId id) {
  ir::Collective again = plan.collectives[id];
  again.inputs = plan.collectives[id].outputs;
  again.outputs.clear();
  for (ir::ValueId v : again.inputs) again.outputs.push_back(AddValue(plan, plan.values[v]));
  for (size_t i = 0; i < again.inputs.size(); ++i) Rewire(plan, again.inputs[i], again.outputs[i]);
  return AddCollective(plan, std::move(again));
}

}  // namespace loom::verify::corpus
