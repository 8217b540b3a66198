#include "smt/modulo_schedule.h"

#include <z3++.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::smt {

absl::StatusOr<std::optional<std::vector<int64_t>>> FindModuloOffsets(
    const ModuloProblem& problem, const ModuloLimits& limits, bool* proved_none) {
  if (proved_none != nullptr) *proved_none = false;
  const int jobs = static_cast<int>(problem.jobs.size());
  const int64_t period = problem.period;
  if (period < 1) return absl::InvalidArgumentError("period must be positive");
  int64_t horizon = problem.horizon;
  for (const ModuloJob& j : problem.jobs) {
    if (j.span < 1) return absl::InvalidArgumentError("spans must be positive");
    for (int d : j.devices) {
      if (d < 0 || d >= problem.num_devices) return absl::InvalidArgumentError("bad device");
    }
    for (const auto& [p, lag] : j.preds) {
      if (p < 0 || p >= jobs || lag < 0) return absl::InvalidArgumentError("bad predecessor");
    }
    if (j.span > period) {
      if (proved_none != nullptr) *proved_none = true;
      return std::nullopt;  // a block longer than the period overlaps its next instance
    }
    if (problem.horizon <= 0) {
      horizon += j.span + period;
      for (const auto& [p, lag] : j.preds) horizon += lag;
    }
  }
  try {
    z3::context ctx;
    // Feasibility only: minimising the latency as well costs Z3 far more than
    // finding a placement, and the period is what the repetend is for.
    z3::solver opt(ctx);
    z3::params params(ctx);
    if (limits.timeout_ms > 0) params.set("timeout", limits.timeout_ms);
    if (limits.resource_limit > 0) {
      params.set("rlimit", static_cast<unsigned>(std::min<uint64_t>(limits.resource_limit,
                                                                     UINT32_MAX)));
    }
    opt.set(params);
    std::vector<z3::expr> start, column;
    const z3::expr p = ctx.int_val(period);
    for (int i = 0; i < jobs; ++i) {
      start.push_back(ctx.int_const(absl::StrCat("s", i).c_str()));
      column.push_back(ctx.int_const(absl::StrCat("r", i).c_str()));
      const z3::expr turn = ctx.int_const(absl::StrCat("q", i).c_str());
      opt.add(start[i] >= 0 && start[i] < ctx.int_val(horizon));
      opt.add(column[i] >= 0 && column[i] < p && turn >= 0);
      opt.add(start[i] == turn * p + column[i]);
      for (const auto& [q, lag] : problem.jobs[i].preds) {
        opt.add(start[i] >= start[q] + ctx.int_val(problem.jobs[q].span + lag));
      }
    }
    // Blocks sharing a device occupy disjoint columns modulo the period: one of
    // the two comes first within the period and the other ends before the first
    // comes round again.
    std::vector<std::vector<int>> on(problem.num_devices);
    for (int i = 0; i < jobs; ++i) {
      for (int d : problem.jobs[i].devices) on[d].push_back(i);
    }
    std::vector<std::vector<char>> paired(jobs, std::vector<char>(jobs, 0));
    for (int d = 0; d < problem.num_devices; ++d) {
      int64_t work = 0;
      for (int i : on[d]) work += problem.jobs[i].span;
      if (work > period) {
        if (proved_none != nullptr) *proved_none = true;
        return std::nullopt;
      }
      for (size_t x = 0; x < on[d].size(); ++x) {
        for (size_t y = x + 1; y < on[d].size(); ++y) {
          const int a = on[d][x], b = on[d][y];
          if (paired[a][b]) continue;
          paired[a][b] = paired[b][a] = 1;
          const z3::expr sa = ctx.int_val(problem.jobs[a].span);
          const z3::expr sb = ctx.int_val(problem.jobs[b].span);
          const z3::expr first = ctx.bool_const(absl::StrCat("o", a, "_", b).c_str());
          opt.add(z3::implies(first, column[a] + sa <= column[b] && column[b] + sb <= column[a] + p));
          opt.add(
              z3::implies(!first, column[b] + sb <= column[a] && column[a] + sa <= column[b] + p));
        }
      }
    }
    const z3::check_result r = opt.check();
    if (r == z3::unsat) {
      if (proved_none != nullptr) *proved_none = true;
      return std::nullopt;
    }
    std::optional<z3::model> found;
    try {
      found = opt.get_model();
    } catch (const z3::exception&) {
      return std::nullopt;  // no model within the limits
    }
    std::vector<int64_t> offsets(jobs);
    for (int i = 0; i < jobs; ++i) {
      const z3::expr v = found->eval(start[i], /*model_completion=*/true);
      int64_t value = 0;
      if (!v.is_numeral_i64(value)) return std::nullopt;
      offsets[i] = value;
    }
    // Z3's answer is checked before it is used.
    for (int i = 0; i < jobs; ++i) {
      for (const auto& [q, lag] : problem.jobs[i].preds) {
        if (offsets[i] < offsets[q] + problem.jobs[q].span + lag) return std::nullopt;
      }
    }
    for (int d = 0; d < problem.num_devices; ++d) {
      // Columns as intervals sorted by start: each ends before the next starts, and
      // the last, wrapping, before the first comes round again.
      std::vector<std::pair<int64_t, int64_t>> columns;  // start mod period, end
      for (int i : on[d]) {
        const int64_t c = offsets[i] % period;
        columns.push_back({c, c + problem.jobs[i].span});
      }
      std::sort(columns.begin(), columns.end());
      for (size_t k = 0; k + 1 < columns.size(); ++k) {
        if (columns[k].second > columns[k + 1].first) return std::nullopt;
      }
      if (columns.size() > 1 && columns.back().second > columns.front().first + period) {
        return std::nullopt;
      }
    }
    return offsets;
  } catch (const z3::exception& e) {
    return absl::InternalError(absl::StrCat("z3: ", e.msg()));
  }
}

}  // namespace loom::smt
