// The search against the published schedules on their own block models: for each
// predefined schedule (GPipe, 1F1B, interleaved 1F1B with 2 chunks, ZB-H1, ZB-H2,
// ZB-V, Chimera, DualPipe), 4, 8 and 16 stages, 2P and 128 micro-batches, without
// and with a communication lag of 1, the schedule is simulated, every device's cap
// is set to the peak it reached, and the search runs within those caps. Prints the
// predefined makespan, the searched repetend's, the one returned (the search keeps
// the shortest of its repetend and the predefined schedules the model admits) and
// the lower bound, then how often each was longer. Each case is searched again with
// more memory, every device's cap raised to the largest peak and then no cap at all,
// and the bench counts the cases where more memory gave a longer schedule.
//
//   build/bench/loom_bench_predefined [node_limit]
//
// Costs: forward 1, backward 2 (input 1 + weight 1 where the schedule splits it),
// a forward keeps 2 memory units until its backward, the weight backward frees 1.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schedule/placements.h"
#include "schedule/predefined.h"
#include "schedule/search.h"

namespace {

using loom::schedule::BlockModel;
using loom::schedule::StageCosts;

struct Shape {
  const char* schedule;
  bool split;          // I and W blocks
  bool bidirectional;  // Chimera, DualPipe: micro-batches counted in pairs
  int chunks;          // stages per device
  const char* layout;
};

constexpr Shape kShapes[] = {
    {"gpipe", false, false, 1, "loop"},       {"1f1b", false, false, 1, "loop"},
    {"interleaved_1f1b", false, false, 2, "loop"}, {"zb_h1", true, false, 1, "loop"},
    {"zb_h2", true, false, 1, "loop"},        {"zb_v", true, false, 2, "v"},
    {"chimera", false, true, 1, "loop"},      {"dualpipe", true, true, 1, "loop"},
};

absl::StatusOr<BlockModel> ModelFor(const Shape& s, int p, int64_t comm) {
  StageCosts c;
  c.forward = 1;
  c.backward_input = s.split ? 1 : 2;
  c.backward_weight = s.split ? 1 : 0;
  c.comm = comm;
  if (s.bidirectional) return loom::schedule::MakeBidirectionalStageModel(p, c);
  return loom::schedule::MakeStageModel(p, p * s.chunks, s.layout, c);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t node_limit = argc > 1 ? std::atoll(argv[1]) : 2'000'000;
  std::printf("%-17s %3s %4s %4s %11s %9s %9s %-17s %7s %8s\n", "schedule", "P", "N", "lag",
              "predefined", "search", "returned", "returned by", "bound", "seconds");
  int cases = 0, search_longer = 0, returned_longer = 0, search_shorter = 0;
  int more_memory_longer = 0;
  for (const Shape& s : kShapes) {
    for (int p : {4, 8, 16}) {
      for (int n : {2 * p, 128}) {
        for (int64_t lag : {0, 1}) {
          auto model = ModelFor(s, p, lag);
          if (!model.ok()) {
            std::printf("%s: %s\n", s.schedule, std::string(model.status().message()).c_str());
            return 1;
          }
          const int units = s.bidirectional ? n / 2 : n;  // model micro-batches
          auto predefined = loom::schedule::MakePredefinedSchedule(s.schedule, *model, units);
          if (!predefined.ok()) {
            std::printf("%s: %s\n", s.schedule,
                        std::string(predefined.status().message()).c_str());
            return 1;
          }
          auto sim = loom::schedule::Simulate(*model, *predefined);
          if (!sim.ok() || !sim->valid) return 1;
          model->memory_cap = sim->peak_memory;
          loom::schedule::SearchOptions options;
          options.microbatches = units;
          options.node_limit = node_limit;
          auto r = loom::schedule::SearchSchedule(*model, options);
          ++cases;
          if (!r.ok()) {
            std::printf("%-17s %3d %4d %4lld %11lld   %s\n", s.schedule, p, n,
                        static_cast<long long>(lag), static_cast<long long>(sim->makespan),
                        std::string(r.status().message()).c_str());
            ++returned_longer;
            continue;
          }
          const loom::schedule::ScheduleCandidate& searched = r->candidates.front();
          const std::string search =
              searched.fits ? absl::StrCat(searched.makespan) : std::string("none");
          if (!searched.fits || searched.makespan > sim->makespan) ++search_longer;
          if (searched.fits && searched.makespan < sim->makespan) ++search_shorter;
          if (r->sim.makespan > sim->makespan) ++returned_longer;
          // More memory: the largest peak on every device, then no cap.
          int64_t previous = r->sim.makespan;
          std::string more;
          for (bool capped : {true, false}) {
            BlockModel looser = *model;
            looser.memory_cap.clear();
            if (capped) {
              int64_t top = 0;
              for (int64_t peak : sim->peak_memory) top = std::max(top, peak);
              looser.SetUniformCap(top);
            }
            auto again = loom::schedule::SearchSchedule(looser, options);
            if (!again.ok() || again->sim.makespan > previous) {
              ++more_memory_longer;
              absl::StrAppend(&more, capped ? " LONGER with the largest peak as cap: "
                                            : " LONGER without caps: ",
                              again.ok() ? absl::StrCat(again->sim.makespan)
                                         : std::string(again.status().message()));
            }
            if (again.ok()) previous = again->sim.makespan;
          }
          std::printf("%-17s %3d %4d %4lld %11lld %9s %9lld %-17s %7lld %8.3f%s\n", s.schedule, p,
                      n, static_cast<long long>(lag), static_cast<long long>(sim->makespan),
                      search.c_str(), static_cast<long long>(r->sim.makespan),
                      r->schedule.name.c_str(), static_cast<long long>(r->makespan_lower_bound),
                      r->seconds, more.c_str());
        }
      }
    }
  }
  std::printf("\n%d cases: the searched repetend alone is longer than the predefined schedule "
              "in %d and shorter in %d; the schedule returned is longer in %d\n",
              cases, search_longer, search_shorter, returned_longer);
  std::printf("with more memory (the largest peak on every device, then no cap) the schedule "
              "returned is longer in %d of %d searches\n",
              more_memory_longer, 2 * cases);
  return returned_longer == 0 ? 0 : 1;
}
