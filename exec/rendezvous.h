#ifndef LOOM_EXEC_RENDEZVOUS_H_
#define LOOM_EXEC_RENDEZVOUS_H_

// Where the device threads of one step meet for their collectives, with NCCL's
// matching rules (exec/backend.h): the CPU backend's collectives, and the CUDA
// backend's when several plan devices share a GPU (staged through the host).

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exec/host_ops.h"
#include "exec/program.h"
#include "ir/host_tensor.h"

namespace loom::exec {

// The sequence a collective is matched in: its group in rank order (NCCL's
// communicator), or for send/recv the direction between its two devices.
std::vector<int64_t> MatchKey(const ir::Collective& c);

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
  absl::StatusOr<std::vector<std::pair<size_t, ir::HostTensor>>> Join(
      int64_t d, int32_t c, std::vector<std::pair<size_t, const ir::HostTensor*>> inputs,
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
    std::vector<const ir::HostTensor*> in;
    int arrived = 0;
    int taken = 0;
    bool done = false;
    std::vector<ir::HostTensor> out;
  };

  const ir::Collective& collective(int32_t c) const { return program_.plan.collectives[c]; }

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

}  // namespace loom::exec

#endif  // LOOM_EXEC_RENDEZVOUS_H_
