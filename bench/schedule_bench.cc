// Schedule search against Tessel: every preset placement at 4, 6 and 8 devices with
// 128 micro-batches under Tessel's memory caps (bench/tessel_cases.h), then a
// 16-device stage model with 64 blocks per micro-batch. Prints, per case, the
// period and its bound, the makespan next to Tessel's, and the median search time
// of 5 runs next to Tessel's search time.
//
//   build/bench/loom_bench_schedule [repetitions]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/tessel_cases.h"
#include "schedule/placements.h"
#include "schedule/search.h"

namespace {

using loom::schedule::BlockModel;
using loom::schedule::SearchResult;

struct Timed {
  SearchResult result;
  double median_seconds = 0;
};

bool TimeSearch(const BlockModel& model, int microbatches, int repetitions, Timed& out) {
  std::vector<double> seconds;
  for (int i = 0; i < repetitions; ++i) {
    loom::schedule::SearchOptions options;
    options.microbatches = microbatches;
    auto r = loom::schedule::SearchSchedule(model, options);
    if (!r.ok()) {
      std::printf("  %s: %s\n", model.name.c_str(), std::string(r.status().message()).c_str());
      return false;
    }
    seconds.push_back(r->seconds);
    out.result = *std::move(r);
  }
  std::sort(seconds.begin(), seconds.end());
  out.median_seconds = seconds[seconds.size() / 2];
  return true;
}

std::string Peaks(const std::vector<int64_t>& peaks) { return absl::StrJoin(peaks, "/"); }

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::printf("%-14s %3s %4s %8s %6s %9s %8s %8s %-25s %10s %9s %9s\n", "placement", "D", "cap",
              "period", "bound", "makespan", "LB", "Tessel", "peak memory", "search s", "Tessel s",
              "speed-up");
  double worst_ratio = 0;
  for (const loom::bench::TesselCase& c : loom::bench::TesselCases()) {
    auto model = loom::schedule::MakePlacement(c.placement, c.devices);
    if (!model.ok()) return 1;
    model->SetUniformCap(c.memory);
    Timed t;
    if (!TimeSearch(*model, 128, repetitions, t)) return 1;
    const SearchResult& r = t.result;
    const std::string tessel = c.tessel_makespan > 0 ? absl::StrCat(c.tessel_makespan) : "-";
    std::string speedup = "-";
    if (c.tessel_seconds > 0) {
      const double ratio = c.tessel_seconds / std::max(t.median_seconds, 1e-6);
      speedup = absl::StrFormat("%s%.0fx", c.tessel_makespan > 0 ? "" : ">", ratio);
      worst_ratio = worst_ratio == 0 ? ratio : std::min(worst_ratio, ratio);
    }
    std::printf("%-14s %3d %4d %5lld%s %6lld %9lld %8lld %8s %-25s %10.5f %9s %9s  %s\n",
                c.placement, c.devices, c.memory, static_cast<long long>(r.period),
                r.period_optimal ? "*" : " ", static_cast<long long>(r.period_lower_bound),
                static_cast<long long>(r.sim.makespan),
                static_cast<long long>(r.makespan_lower_bound), tessel.c_str(),
                Peaks(r.sim.peak_memory).c_str(), t.median_seconds,
                c.tessel_seconds > 0 ? absl::StrFormat("%.1f", c.tessel_seconds).c_str() : "-",
                speedup.c_str(), r.sim.valid ? "" : "INVALID");
  }
  std::printf("(* period equals its lower bound: optimal; speed-up: Tessel's time / ours, "
              "> where Tessel timed out; least speed-up %.0fx)\n\n", worst_ratio);

  // 16 devices, 32 interleaved stages (2 per device), forward 2, backward 4, a
  // transfer lag of 1 between devices: 64 blocks per micro-batch.
  loom::schedule::StageCosts costs;
  costs.forward = 2;
  costs.backward_input = 4;
  costs.backward_weight = 0;
  costs.comm = 1;
  costs.activation = 1;
  auto big = loom::schedule::MakeStageModel(16, 32, "loop", costs);
  if (!big.ok()) return 1;
  for (int cap : {64, 24}) {
    big->SetUniformCap(cap);
    Timed t;
    if (!TimeSearch(*big, 128, repetitions, t)) return 1;
    const SearchResult& r = t.result;
    std::printf("16 devices, %d blocks per micro-batch, 128 micro-batches, cap %d: period %lld "
                "(bound %lld%s), makespan %lld (bound %lld), peak %s, search %.4f s median, "
                "%lld nodes\n",
                big->num_blocks(), cap, static_cast<long long>(r.period),
                static_cast<long long>(r.period_lower_bound), r.period_optimal ? ", optimal" : "",
                static_cast<long long>(r.sim.makespan),
                static_cast<long long>(r.makespan_lower_bound), Peaks(r.sim.peak_memory).c_str(),
                t.median_seconds, static_cast<long long>(r.nodes));
    if (!r.period_optimal) std::printf("  gap: %s\n", r.gap_reason.c_str());
  }
  return 0;
}
