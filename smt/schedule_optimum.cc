#include "smt/schedule_optimum.h"

#include <z3++.h>

#include <algorithm>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::smt {

absl::StatusOr<ScheduleOptimum> MinimumMakespan(const ScheduleProblem& problem,
                                                unsigned timeout_ms) {
  const int jobs = static_cast<int>(problem.jobs.size());
  for (const ScheduleJob& j : problem.jobs) {
    for (int d : j.devices) {
      if (d < 0 || d >= problem.num_devices) return absl::InvalidArgumentError("bad device");
    }
    for (const auto& [p, lag] : j.preds) {
      if (p < 0 || p >= jobs) return absl::InvalidArgumentError("bad predecessor");
    }
  }
  for (const auto& [a, b] : problem.symmetric_order) {
    if (a < 0 || a >= jobs || b < 0 || b >= jobs || a == b) {
      return absl::InvalidArgumentError("bad job in symmetric_order");
    }
  }
  if (!problem.caps.empty() && static_cast<int>(problem.caps.size()) != problem.num_devices) {
    return absl::InvalidArgumentError("caps must be empty or one per device");
  }
  try {
    z3::context ctx;
    z3::optimize opt(ctx);
    if (timeout_ms > 0) {
      z3::params params(ctx);
      params.set("timeout", timeout_ms);
      opt.set(params);
    }
    std::vector<z3::expr> start;
    z3::expr makespan = ctx.int_const("makespan");
    for (int i = 0; i < jobs; ++i) {
      start.push_back(ctx.int_const(absl::StrCat("s", i).c_str()));
      opt.add(start[i] >= 0);
      opt.add(makespan >= start[i] + ctx.int_val(problem.jobs[i].span));
      for (const auto& [p, lag] : problem.jobs[i].preds) {
        opt.add(start[i] >= start[p] + ctx.int_val(problem.jobs[p].span + lag));
      }
    }
    for (const auto& [a, b] : problem.symmetric_order) opt.add(start[a] <= start[b]);
    if (problem.makespan_below > 0) opt.add(makespan < ctx.int_val(problem.makespan_below));
    // Per device: its jobs, and for each pair sharing a device whether the first
    // runs before the second.
    std::vector<std::vector<int>> on(problem.num_devices);
    for (int i = 0; i < jobs; ++i) {
      for (int d : problem.jobs[i].devices) on[d].push_back(i);
    }
    std::vector<std::vector<std::optional<z3::expr>>> before(jobs);
    for (auto& row : before) row.resize(jobs);
    for (int d = 0; d < problem.num_devices; ++d) {
      for (size_t x = 0; x < on[d].size(); ++x) {
        for (size_t y = x + 1; y < on[d].size(); ++y) {
          const int i = on[d][x], j = on[d][y];
          if (before[i][j].has_value()) continue;  // shared with an earlier device
          z3::expr o = ctx.bool_const(absl::StrCat("o", i, "_", j).c_str());
          opt.add(z3::implies(o, start[i] + ctx.int_val(problem.jobs[i].span) <= start[j]));
          opt.add(z3::implies(!o, start[j] + ctx.int_val(problem.jobs[j].span) <= start[i]));
          before[i][j] = o;
          before[j][i] = !o;
        }
      }
    }
    if (!problem.caps.empty()) {
      for (int d = 0; d < problem.num_devices; ++d) {
        for (int i : on[d]) {
          z3::expr held = ctx.int_val(problem.jobs[i].memory);
          for (int j : on[d]) {
            if (j == i || problem.jobs[j].memory == 0) continue;
            held = held + z3::ite(*before[j][i], ctx.int_val(problem.jobs[j].memory),
                                  ctx.int_val(0));
          }
          opt.add(held <= ctx.int_val(problem.caps[d]));
        }
      }
    }
    opt.minimize(makespan);
    const z3::check_result r = opt.check();
    ScheduleOptimum out;
    if (r == z3::unsat) {
      out.proved = true;  // no schedule at all
      return out;
    }
    // sat: optimal; unknown: the best model found before the limit, if any.
    std::optional<z3::model> found;
    try {
      found = opt.get_model();
    } catch (const z3::exception&) {
      return out;  // nothing found in time
    }
    const z3::model& model = *found;
    if (model.num_consts() == 0) return out;
    out.feasible = true;
    out.proved = r == z3::sat;
    for (int i = 0; i < jobs; ++i) {
      out.start.push_back(model.eval(start[i], true).get_numeral_int64());
    }
    int64_t end = 0;
    for (int i = 0; i < jobs; ++i) end = std::max(end, out.start[i] + problem.jobs[i].span);
    out.makespan = end;
    return out;
  } catch (const z3::exception& e) {
    return absl::InternalError(absl::StrCat("z3: ", e.msg()));
  }
}

}  // namespace loom::smt
