#include "exec/rendezvous.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace loom::exec {
namespace {

using Clock = std::chrono::steady_clock;
using ir::Collective;
using ir::HostTensor;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

std::vector<int64_t> MatchKey(const Collective& c) {
  if (c.kind == ir::CollectiveKind::kSendRecv) return {-1, c.devices[0], c.devices[1]};
  return c.devices;
}


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

}  // namespace loom::exec
