// The CPU backend: one thread per device, blocking collectives between threads
// with NCCL's matching rules (exec/backend.h).

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exec/backend.h"
#include "exec/host_ops.h"
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

// The sequence a collective is matched in: its group in rank order (NCCL's
// communicator), or for send/recv the direction between its two devices.
std::vector<int64_t> MatchKey(const Collective& c) {
  if (c.kind == ir::CollectiveKind::kSendRecv) return {-1, c.devices[0], c.devices[1]};
  return c.devices;
}

// Meeting point of the device threads of one step.
class Rendezvous {
 public:
  Rendezvous(const Program& program, double timeout_s)
      : program_(program),
        timeout_s_(timeout_s),
        slots_(program.plan.collectives.size()),
        issued_(program.devices.size()),
        waiting_on_(program.devices.size(), -1),
        finished_(program.devices.size(), 0) {}

  // Device `d` takes part in collective `c` with the inputs it holds (by input
  // index); returns the outputs it holds, by output index.
  absl::StatusOr<std::vector<std::pair<size_t, HostTensor>>> Join(
      int64_t d, int32_t c, std::vector<std::pair<size_t, const HostTensor*>> inputs,
      double& wait_seconds);

  void Finish(int64_t d) {
    std::lock_guard<std::mutex> lock(mu_);
    finished_[d] = 1;
    CheckDeadlock();
  }
  void Abort(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    AbortLocked(std::move(status));
  }
  bool aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return !status_.ok();
  }
  absl::Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  struct Slot {
    std::vector<const HostTensor*> in;
    int arrived = 0;
    int taken = 0;
    bool done = false;
    std::vector<HostTensor> out;
  };

  const Collective& collective(int32_t c) const { return program_.plan.collectives[c]; }

  void AbortLocked(absl::Status status) {
    if (status_.ok()) status_ = std::move(status);
    cv_.notify_all();
  }

  // Members of `c` that have not reached it yet, with where they are.
  std::string Absent(int32_t c) const {
    std::vector<std::string> absent;
    for (int64_t m : collective(c).devices) {
      if (waiting_on_[m] == c) continue;
      if (finished_[m]) {
        absent.push_back(absl::StrCat("device ", m, " (finished its program)"));
      } else if (waiting_on_[m] >= 0) {
        absent.push_back(absl::StrCat("device ", m, " (waiting at ",
                                      DescribeCollective(collective(waiting_on_[m])), ")"));
      } else {
        absent.push_back(absl::StrCat("device ", m, " (running)"));
      }
    }
    return absl::StrJoin(absent, ", ");
  }

  std::string WaitReport() const {
    std::vector<std::string> lines;
    for (size_t d = 0; d < waiting_on_.size(); ++d) {
      if (waiting_on_[d] < 0) continue;
      lines.push_back(absl::StrCat("device ", d, " waits at ",
                                   DescribeCollective(collective(waiting_on_[d])), " for ",
                                   Absent(waiting_on_[d])));
    }
    return absl::StrJoin(lines, "; ");
  }

  // Every device still running waits at a collective that cannot complete.
  void CheckDeadlock() {
    bool any_waiting = false;
    for (size_t d = 0; d < waiting_on_.size(); ++d) {
      if (finished_[d]) continue;
      // A device whose collective completed is running again, awake or not.
      if (waiting_on_[d] < 0 || slots_[waiting_on_[d]].done) return;
      any_waiting = true;
    }
    if (!any_waiting) return;
    AbortLocked(absl::FailedPreconditionError(
        absl::StrCat("deadlock: every device still running waits at a collective: ",
                     WaitReport())));
  }

  // NCCL's rule: the k-th collective a device issues on a group is the k-th of
  // every other member.
  absl::Status CheckIssueOrder(int64_t d, int32_t c) {
    const std::vector<int64_t> key = MatchKey(collective(c));
    const int position = issued_[d][key]++;
    std::vector<std::pair<int32_t, int64_t>>& sequence = sequences_[key];
    if (position < static_cast<int>(sequence.size())) {
      const auto [expected, by] = sequence[position];
      if (expected != c) {
        return absl::FailedPreconditionError(absl::StrCat(
            "collectives issued in different orders: device ", d, " issued ",
            DescribeCollective(collective(c)), " as its collective #", position + 1,
            " on devices ", absl::StrJoin(collective(c).devices, ","), ", where device ", by,
            " issued ", DescribeCollective(collective(expected))));
      }
      return absl::OkStatus();
    }
    sequence.emplace_back(c, d);
    return absl::OkStatus();
  }

  const Program& program_;
  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  absl::Status status_;
  std::vector<Slot> slots_;
  std::vector<absl::flat_hash_map<std::vector<int64_t>, int>> issued_;
  absl::flat_hash_map<std::vector<int64_t>, std::vector<std::pair<int32_t, int64_t>>> sequences_;
  std::vector<int32_t> waiting_on_;
  std::vector<char> finished_;
};

absl::StatusOr<std::vector<std::pair<size_t, HostTensor>>> Rendezvous::Join(
    int64_t d, int32_t c, std::vector<std::pair<size_t, const HostTensor*>> inputs,
    double& wait_seconds) {
  const Collective& coll = collective(c);
  std::unique_lock<std::mutex> lock(mu_);
  if (!status_.ok()) return status_;
  if (absl::Status order = CheckIssueOrder(d, c); !order.ok()) {
    AbortLocked(order);
    return order;
  }
  Slot& slot = slots_[c];
  if (slot.in.empty()) slot.in.assign(coll.inputs.size(), nullptr);
  for (const auto& [i, t] : inputs) slot.in[i] = t;
  ++slot.arrived;
  if (slot.arrived == static_cast<int>(coll.devices.size())) {
    // The last member computes for all, outside the lock: the others wait.
    lock.unlock();
    absl::StatusOr<std::vector<HostTensor>> out = CollectiveOutputs(coll, slot.in);
    lock.lock();
    if (!out.ok()) {
      AbortLocked(out.status());
      return out.status();
    }
    slot.out = *std::move(out);
    slot.done = true;
    cv_.notify_all();
  } else {
    waiting_on_[d] = c;
    CheckDeadlock();
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(timeout_s_));
    while (!slot.done && status_.ok()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !slot.done &&
          status_.ok()) {
        AbortLocked(absl::DeadlineExceededError(
            absl::StrCat("a collective waited longer than ", timeout_s_, " s: ", WaitReport())));
      }
    }
    waiting_on_[d] = -1;
    wait_seconds += Since(start);
    if (!status_.ok()) return status_;
  }
  std::vector<std::pair<size_t, HostTensor>> mine;
  for (size_t i = 0; i < coll.outputs.size(); ++i) {
    if (CollectiveOutputDevice(coll, i) != d) continue;
    mine.emplace_back(i, std::move(slot.out[i]));
  }
  if (++slot.taken == static_cast<int>(coll.devices.size())) {
    slot.out.clear();
    slot.in.clear();
  }
  return mine;
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
  int64_t live = dp.input_bytes;
  stats.peak_bytes = live;
  auto store = [&](ValueId v, HostTensor t, absl::string_view who) -> absl::Status {
    const ir::PlanValue& pv = plan.values[v];
    if (t.shape.dims() != ir::BoxDims(pv.sub.box)) {
      return PlanError(who, absl::StrCat("computes shape ", t.shape.ToString(), " for value ", v,
                                         ", whose box is ", ir::BoxToString(pv.sub.box)));
    }
    values[v] = std::move(t);
    live += Elements(pv) * program.bytes_per_element;
    stats.peak_bytes = std::max(stats.peak_bytes, live);
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
        live -= Elements(plan.values[instr.id]) * program.bytes_per_element;
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
