// The CPU backend: one thread per device, blocking collectives between threads
// with NCCL's matching rules (exec/backend.h).

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "exec/backend.h"
#include "exec/host_ops.h"
#include "exec/rendezvous.h"
#include "ir/status_macros.h"

namespace loom::exec {
namespace {

using Clock = std::chrono::steady_clock;
using ir::Collective;
using ir::HostTensor;
using ir::ValueId;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const ExecOptions& options) : options_(options) {
    UseSingleThreadedBlas();
  }
  std::string name() const override { return "cpu"; }
  absl::StatusOr<StepResult> RunStep(const Program& program, ValueStore inputs) override;

 private:
  absl::Status RunDevice(const Program& program, int64_t d, ValueStore& values,
                         Rendezvous& rendezvous, DeviceStats& stats);

  ExecOptions options_;
};

// A program that reads a buffer its device does not hold (never produced, or
// freed): an error, never a crash.
absl::Status Missing(const Program& program, int64_t d, ValueId v, absl::string_view who) {
  return absl::FailedPreconditionError(absl::StrCat(
      who, " on device ", d, " reads value ", v, ", which the device does not hold (",
      program.plan.values[v].device == d ? "not produced yet, or freed" : "it lives on another device",
      ")"));
}

int64_t Elements(const ir::PlanValue& v) {
  int64_t n = 1;
  for (const ir::Interval& iv : v.sub.box) n *= iv.size();
  return n;
}

absl::Status CpuBackend::RunDevice(const Program& program, int64_t d, ValueStore& values,
                                   Rendezvous& rendezvous, DeviceStats& stats) {
  const ir::Plan& plan = program.plan;
  const DeviceProgram& dp = program.devices[d];
  MemoryMeter meter(program, program.bytes_per_element, stats);
  for (ValueId v : program.inputs) {
    if (plan.values[v].device == d) meter.Hold(v, Elements(plan.values[v]));
  }
  auto store = [&](ValueId v, HostTensor t, absl::string_view who) -> absl::Status {
    const ir::PlanValue& pv = plan.values[v];
    if (t.shape.dims() != ir::BoxDims(pv.sub.box)) {
      return PlanError(who, absl::StrCat("computes shape ", t.shape.ToString(), " for value ", v,
                                         ", whose box is ", ir::BoxToString(pv.sub.box)));
    }
    values[v] = std::move(t);
    meter.Hold(v, Elements(pv));
    return absl::OkStatus();
  };
  std::vector<const HostTensor*> in;
  std::vector<HostTensor> out;
  for (const Instr& instr : dp.instrs) {
    if (rendezvous.aborted()) return absl::OkStatus();
    const auto start = Clock::now();
    switch (instr.kind) {
      case InstrKind::kTask: {
        const ir::Task& t = plan.tasks[instr.id];
        in.clear();
        for (ValueId v : t.inputs) {
          if (!values[v].has_value()) return Missing(program, d, v, DescribeTask(t));
          in.push_back(&*values[v]);
        }
        LOOM_RETURN_IF_ERROR(
            RunTaskKernel(t, in, options_.precision, out, &stats.matmul));
        if (out.size() != t.outputs.size()) {
          return PlanError(DescribeTask(t), absl::StrCat("has ", t.outputs.size(),
                                                         " outputs, the op computes ",
                                                         out.size()));
        }
        for (size_t i = 0; i < out.size(); ++i) {
          LOOM_RETURN_IF_ERROR(store(t.outputs[i], std::move(out[i]), DescribeTask(t)));
        }
        break;
      }
      case InstrKind::kCollective: {
        const Collective& c = plan.collectives[instr.id];
        std::vector<std::pair<size_t, const HostTensor*>> held;
        for (size_t i = 0; i < c.inputs.size(); ++i) {
          if (CollectiveInputDevice(c, i) != d) continue;
          if (!values[c.inputs[i]].has_value()) {
            return Missing(program, d, c.inputs[i], DescribeCollective(c));
          }
          held.emplace_back(i, &*values[c.inputs[i]]);
        }
        double waited = 0;
        absl::StatusOr<std::vector<std::pair<size_t, HostTensor>>> got =
            rendezvous.Join(d, instr.id, std::move(held), waited);
        stats.wait_seconds += waited;
        stats.busy_seconds -= waited;
        if (!got.ok()) return absl::OkStatus();  // the rendezvous holds the error
        for (auto& [i, t] : *got) {
          LOOM_RETURN_IF_ERROR(store(c.outputs[i], std::move(t), DescribeCollective(c)));
        }
        break;
      }
      case InstrKind::kFree:
        values[instr.id].reset();
        meter.Release(instr.id, Elements(plan.values[instr.id]));
        break;
    }
    stats.busy_seconds += Since(start);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> CpuBackend::RunStep(const Program& program, ValueStore inputs) {
  const ir::Plan& plan = program.plan;
  ValueStore values = std::move(inputs);
  values.resize(plan.values.size());
  for (ValueId v : program.inputs) {
    if (!values[v].has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("no input given for value ", v));
    }
    RoundToPrecision(*values[v], options_.precision);
  }
  const size_t n = program.devices.size();
  Rendezvous rendezvous(program, options_.collective_timeout_s);
  StepResult result;
  result.devices.resize(n);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t d = 0; d < n; ++d) {
    threads.emplace_back([&, d] {
      absl::Status s = RunDevice(program, static_cast<int64_t>(d), values, rendezvous,
                                 result.devices[d]);
      if (!s.ok()) rendezvous.Abort(s);
      rendezvous.Finish(static_cast<int64_t>(d));
    });
  }
  for (std::thread& t : threads) t.join();
  result.seconds = Since(start);
  LOOM_RETURN_IF_ERROR(rendezvous.status());
  result.values.resize(plan.values.size());
  for (ValueId v = 0; v < static_cast<ValueId>(plan.values.size()); ++v) {
    if (program.kept[v]) result.values[v] = std::move(values[v]);
  }
  return result;
}

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(const ExecOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace loom::exec
