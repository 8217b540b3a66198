#include "exec/program.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exec/host_ops.h"
#include "ir/status_macros.h"

namespace loom::exec {
namespace {

using ir::Collective;
using ir::PlanStep;
using ir::ValueId;

// The inputs of a collective that device `d` holds.
std::vector<ValueId> HeldInputs(const Collective& c, int64_t d) {
  std::vector<ValueId> held;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (CollectiveInputDevice(c, i) == d) held.push_back(c.inputs[i]);
  }
  return held;
}

std::vector<ValueId> HeldOutputs(const Collective& c, int64_t d) {
  std::vector<ValueId> held;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (CollectiveOutputDevice(c, i) == d) held.push_back(c.outputs[i]);
  }
  return held;
}

// Every member device of a collective (send_recv: source and destination).
const std::vector<int64_t>& Members(const Collective& c) { return c.devices; }

// One data-flow order of all items (tasks by id, then collectives, among those
// whose inputs are ready), projected on each device.
absl::StatusOr<std::vector<std::vector<PlanStep>>> DataflowOrder(const ir::Plan& plan,
                                                                  int64_t num_devices) {
  const int32_t nt = static_cast<int32_t>(plan.tasks.size());
  const int32_t nc = static_cast<int32_t>(plan.collectives.size());
  std::vector<int32_t> producer(plan.values.size(), -1);
  for (const ir::Task& t : plan.tasks) {
    for (ValueId v : t.outputs) producer[v] = t.id;
  }
  for (const Collective& c : plan.collectives) {
    for (ValueId v : c.outputs) producer[v] = nt + c.id;
  }
  std::vector<int> pending(nt + nc, 0);
  std::vector<std::vector<int32_t>> readers(plan.values.size());
  auto note_inputs = [&](int32_t item, const std::vector<ValueId>& inputs) {
    for (ValueId v : inputs) {
      if (producer[v] < 0) continue;
      ++pending[item];
      readers[v].push_back(item);
    }
  };
  for (const ir::Task& t : plan.tasks) note_inputs(t.id, t.inputs);
  for (const Collective& c : plan.collectives) note_inputs(nt + c.id, c.inputs);
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;
  for (int32_t i = 0; i < nt + nc; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<std::vector<PlanStep>> order(num_devices);
  int32_t done = 0;
  while (!ready.empty()) {
    const int32_t i = ready.top();
    ready.pop();
    ++done;
    const std::vector<ValueId>* outputs;
    if (i < nt) {
      order[plan.tasks[i].device].push_back(PlanStep{false, i});
      outputs = &plan.tasks[i].outputs;
    } else {
      const Collective& c = plan.collectives[i - nt];
      for (int64_t d : Members(c)) order[d].push_back(PlanStep{true, c.id});
      outputs = &c.outputs;
    }
    for (ValueId v : *outputs) {
      for (int32_t r : readers[v]) {
        if (--pending[r] == 0) ready.push(r);
      }
    }
  }
  if (done != nt + nc) {
    for (int32_t i = 0; i < nt + nc; ++i) {
      if (pending[i] == 0) continue;
      return PlanError(i < nt ? DescribeTask(plan.tasks[i])
                              : DescribeCollective(plan.collectives[i - nt]),
                       "never becomes ready: its inputs depend on a cycle");
    }
  }
  return order;
}

// Every task once in its device's order, every collective once in each member's.
absl::Status CheckOrderCovers(const ir::Plan& plan, int64_t num_devices) {
  if (static_cast<int64_t>(plan.order.size()) > num_devices) {
    return PlanError("order", absl::StrCat("lists ", plan.order.size(), " devices, the plan has ",
                                           num_devices));
  }
  std::vector<int> task_seen(plan.tasks.size(), 0);
  std::vector<std::vector<int>> member_seen(plan.collectives.size());
  for (const Collective& c : plan.collectives) member_seen[c.id].assign(c.devices.size(), 0);
  for (size_t d = 0; d < plan.order.size(); ++d) {
    const std::string where = absl::StrCat("order of device ", d);
    for (const PlanStep& s : plan.order[d]) {
      if (!s.is_collective) {
        if (s.id < 0 || s.id >= static_cast<int32_t>(plan.tasks.size())) {
          return PlanError(where, absl::StrCat("names task ", s.id, ", not in the plan"));
        }
        if (plan.tasks[s.id].device != static_cast<int64_t>(d)) {
          return PlanError(where, absl::StrCat("lists ", DescribeTask(plan.tasks[s.id])));
        }
        ++task_seen[s.id];
        continue;
      }
      if (s.id < 0 || s.id >= static_cast<int32_t>(plan.collectives.size())) {
        return PlanError(where, absl::StrCat("names collective ", s.id, ", not in the plan"));
      }
      const Collective& c = plan.collectives[s.id];
      auto it = std::find(c.devices.begin(), c.devices.end(), static_cast<int64_t>(d));
      if (it == c.devices.end()) {
        return PlanError(where, absl::StrCat("lists ", DescribeCollective(c), ", which device ",
                                             d, " is not part of"));
      }
      ++member_seen[c.id][it - c.devices.begin()];
    }
  }
  for (const ir::Task& t : plan.tasks) {
    if (task_seen[t.id] != 1) {
      return PlanError(DescribeTask(t), absl::StrCat("appears ", task_seen[t.id],
                                                     " times in its device's order, expected 1"));
    }
  }
  for (const Collective& c : plan.collectives) {
    for (size_t k = 0; k < c.devices.size(); ++k) {
      if (member_seen[c.id][k] != 1) {
        return PlanError(DescribeCollective(c),
                         absl::StrCat("appears ", member_seen[c.id][k], " times in the order of ",
                                      "device ", c.devices[k], ", expected 1"));
      }
    }
  }
  return absl::OkStatus();
}

// Builds device `d`'s instructions from its order: frees after last uses, and
// the memory figures.
absl::Status BuildDevice(const ir::Plan& plan, const std::vector<PlanStep>& order,
                         const std::vector<char>& kept, const std::vector<char>& is_input,
                         const std::vector<char>& activation, int64_t bytes_per_element,
                         DeviceProgram& out) {
  const int64_t d = out.device;
  auto inputs_of = [&](const PlanStep& s) {
    return s.is_collective ? HeldInputs(plan.collectives[s.id], d) : plan.tasks[s.id].inputs;
  };
  auto outputs_of = [&](const PlanStep& s) {
    return s.is_collective ? HeldOutputs(plan.collectives[s.id], d) : plan.tasks[s.id].outputs;
  };
  auto describe = [&](const PlanStep& s) {
    return s.is_collective ? DescribeCollective(plan.collectives[s.id])
                           : DescribeTask(plan.tasks[s.id]);
  };
  auto bytes = [&](ValueId v) {
    int64_t n = 1;
    for (const ir::Interval& iv : plan.values[v].sub.box) n *= iv.size();
    return n * bytes_per_element;
  };
  // Last reader of each value on this device (index into `order`), and whether
  // the device holds it yet.
  absl::flat_hash_map<ValueId, size_t> last_use;
  std::vector<ValueId> held_inputs;
  for (const ir::PlanValue& v : plan.values) {
    if (v.device == d && is_input[v.id]) held_inputs.push_back(v.id);
  }
  absl::flat_hash_map<ValueId, bool> live;
  for (ValueId v : held_inputs) live[v] = true;
  for (size_t k = 0; k < order.size(); ++k) {
    for (ValueId v : inputs_of(order[k])) {
      if (!live.contains(v)) {
        return PlanError(describe(order[k]),
                         absl::StrCat("reads ", "value ", v, " before device ", d,
                                      "'s order produces it"));
      }
      last_use[v] = k;
    }
    for (ValueId v : outputs_of(order[k])) {
      if (live.contains(v)) {
        return PlanError(describe(order[k]), absl::StrCat("produces value ", v, " a second time"));
      }
      live[v] = true;
    }
  }
  // Instructions, with each value freed after its last reader (or at once when
  // nothing reads it), unless kept.
  std::vector<std::vector<ValueId>> free_after(order.size());
  for (const auto& [v, alive] : live) {
    if (kept[v]) continue;
    auto it = last_use.find(v);
    if (it != last_use.end()) {
      free_after[it->second].push_back(v);
    }
  }
  int64_t current = 0, current_activations = 0;
  for (ValueId v : held_inputs) {
    current += bytes(v);
    if (activation[v]) current_activations += bytes(v);
  }
  out.input_bytes = current;
  out.peak_bytes = current;
  out.peak_activation_bytes = current_activations;
  std::vector<ValueId> unread;
  for (size_t k = 0; k < order.size(); ++k) {
    const PlanStep& s = order[k];
    out.instrs.push_back(
        Instr{s.is_collective ? InstrKind::kCollective : InstrKind::kTask, s.id});
    for (ValueId v : outputs_of(s)) {
      current += bytes(v);
      if (activation[v]) current_activations += bytes(v);
      if (!kept[v] && !last_use.contains(v)) unread.push_back(v);
    }
    out.peak_bytes = std::max(out.peak_bytes, current);
    out.peak_activation_bytes = std::max(out.peak_activation_bytes, current_activations);
    std::sort(free_after[k].begin(), free_after[k].end());
    free_after[k].insert(free_after[k].end(), unread.begin(), unread.end());
    unread.clear();
    for (ValueId v : free_after[k]) {
      out.instrs.push_back(Instr{InstrKind::kFree, v});
      current -= bytes(v);
      if (activation[v]) current_activations -= bytes(v);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Program> LowerPlan(const ir::Graph& spec, const ir::Plan& plan,
                                  const LowerOptions& options) {
  Program program;
  if (plan.is_factored()) {
    // Checked as written first, so that errors name the file's items, not the
    // expansion's.
    LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan));
    LOOM_ASSIGN_OR_RETURN(program.plan, ir::ExpandPlan(spec, plan));
  } else {
    program.plan = plan;
  }
  const ir::Plan& p = program.plan;
  LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, p));
  program.bytes_per_element = options.bytes_per_element;
  int64_t num_devices = static_cast<int64_t>(p.order.size());
  for (const ir::PlanValue& v : p.values) num_devices = std::max(num_devices, v.device + 1);
  for (const ir::Task& t : p.tasks) num_devices = std::max(num_devices, t.device + 1);

  std::vector<char> is_input(p.values.size(), 1);
  for (const ir::Task& t : p.tasks) {
    for (ValueId v : t.outputs) is_input[v] = 0;
  }
  for (const Collective& c : p.collectives) {
    for (ValueId v : c.outputs) is_input[v] = 0;
  }
  for (ValueId v = 0; v < static_cast<ValueId>(p.values.size()); ++v) {
    if (is_input[v]) program.inputs.push_back(v);
  }
  program.activation.assign(p.values.size(), 0);
  for (const ir::PlanValue& v : p.values) {
    program.activation[v.id] = spec.tensor(v.sub.tensor).role == ir::TensorRole::kActivation;
  }
  program.kept.assign(p.values.size(), 0);
  for (ValueId v : p.outputs) program.kept[v] = 1;
  for (ValueId v : options.keep) {
    if (v < 0 || v >= static_cast<ValueId>(p.values.size())) {
      return absl::InvalidArgumentError(absl::StrCat("keep: value ", v, " is not in the plan"));
    }
    program.kept[v] = 1;
  }

  std::vector<std::vector<PlanStep>> order;
  if (!p.order.empty()) {
    LOOM_RETURN_IF_ERROR(CheckOrderCovers(p, num_devices));
    order = p.order;
    order.resize(num_devices);
  } else {
    LOOM_ASSIGN_OR_RETURN(order, DataflowOrder(p, num_devices));
  }
  program.devices.resize(num_devices);
  for (int64_t d = 0; d < num_devices; ++d) {
    program.devices[d].device = d;
    LOOM_RETURN_IF_ERROR(BuildDevice(p, order[d], program.kept, is_input, program.activation,
                                     options.bytes_per_element, program.devices[d]));
  }
  return program;
}

absl::Status CheckCollectiveOrder(const Program& program) {
  const ir::Plan& plan = program.plan;
  // The same sequence on every member of each matching key.
  auto key_of = [&](const Collective& c) {
    if (c.kind == ir::CollectiveKind::kSendRecv) {
      return std::vector<int64_t>{-1, c.devices[0], c.devices[1]};
    }
    return c.devices;
  };
  absl::flat_hash_map<std::vector<int64_t>, std::vector<std::pair<int32_t, int64_t>>> first;
  std::vector<absl::flat_hash_map<std::vector<int64_t>, int>> count(program.devices.size());
  for (const DeviceProgram& dp : program.devices) {
    for (const Instr& i : dp.instrs) {
      if (i.kind != InstrKind::kCollective) continue;
      const std::vector<int64_t> key = key_of(plan.collectives[i.id]);
      const int position = count[dp.device][key]++;
      std::vector<std::pair<int32_t, int64_t>>& seq = first[key];
      if (position < static_cast<int>(seq.size())) {
        if (seq[position].first != i.id) {
          return absl::FailedPreconditionError(absl::StrCat(
              "collectives issued in different orders: device ", dp.device, " issues ",
              DescribeCollective(plan.collectives[i.id]), " as its collective #", position + 1,
              " on devices ", absl::StrJoin(plan.collectives[i.id].devices, ","), ", where device ",
              seq[position].second, " issues ",
              DescribeCollective(plan.collectives[seq[position].first])));
        }
      } else {
        seq.emplace_back(i.id, dp.device);
      }
    }
  }
  // A run: tasks go ahead, a collective when every member stands at it.
  const size_t n = program.devices.size();
  std::vector<size_t> pc(n, 0);
  auto at = [&](size_t d) -> const Instr* {
    const std::vector<Instr>& s = program.devices[d].instrs;
    return pc[d] < s.size() ? &s[pc[d]] : nullptr;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t d = 0; d < n; ++d) {
      while (const Instr* i = at(d)) {
        if (i->kind != InstrKind::kCollective) {
          ++pc[d];
          progress = true;
          continue;
        }
        const Collective& c = plan.collectives[i->id];
        bool all = true;
        for (int64_t m : c.devices) {
          const Instr* j = at(m);
          all = all && j != nullptr && j->kind == InstrKind::kCollective && j->id == i->id;
        }
        if (!all) break;
        for (int64_t m : c.devices) ++pc[m];
        progress = true;
      }
    }
  }
  std::vector<std::string> blocked;
  for (size_t d = 0; d < n; ++d) {
    const Instr* i = at(d);
    if (i == nullptr) continue;
    std::vector<std::string> absent;
    for (int64_t m : plan.collectives[i->id].devices) {
      const Instr* j = at(m);
      if (j != nullptr && j->kind == InstrKind::kCollective && j->id == i->id) continue;
      absent.push_back(j == nullptr ? absl::StrCat("device ", m, " (finished its program)")
                                    : absl::StrCat("device ", m, " (waiting at ",
                                                   DescribeInstr(program, *j), ")"));
    }
    blocked.push_back(absl::StrCat("device ", d, " waits at ", DescribeInstr(program, *i),
                                   " for ", absl::StrJoin(absent, ", ")));
  }
  if (!blocked.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("deadlock: ", absl::StrJoin(blocked, "; ")));
  }
  return absl::OkStatus();
}

std::string DescribeInstr(const Program& program, const Instr& instr) {
  switch (instr.kind) {
    case InstrKind::kTask:
      return DescribeTask(program.plan.tasks[instr.id]);
    case InstrKind::kCollective:
      return DescribeCollective(program.plan.collectives[instr.id]);
    case InstrKind::kFree:
      return absl::StrCat("free of value ", instr.id);
  }
  return "?";
}

}  // namespace loom::exec
