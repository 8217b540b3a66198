#ifndef LOOM_SCHEDULE_INFLIGHT_SEARCH_H_
#define LOOM_SCHEDULE_INFLIGHT_SEARCH_H_

// A search over how many micro-batches each device keeps in flight. The schedules
// are built by one rule, run as an event simulation in which devices decide in the
// order they become free: a free device takes the oldest ready backward (B or I),
// then the oldest ready forward unless its micro-batch would exceed the device's
// limit of micro-batches in flight or the forward its cap (or the forward first,
// when `forward_first`), then a weight gradient (W) as the device's W policy says;
// deferring W into the gaps and the ramps is what the Zero Bubble schedules do by
// hand. The limits and policies that make the device orders best for the objective
// are searched: first over the family limit(d) = round(a * r(d)) + c, r(d) being how
// many micro-batches' forwards fit between a device's first forward of a micro-batch
// and that micro-batch's last backward on it (from the model's critical paths: 1F1B
// is about a = 1/2, ZB-H2 and ZB-V a = 1), each W policy on every device; then local
// moves while the objective improves (a device's limit a step, a device's W policy,
// every limit a step, forward_first). Limits are compared by the rule's own timing
// (its orders' earliest), and for kSpan the best few are timed by TimeForLeastSpan
// at the end; the result is checked by the simulator. Models whose blocks each occupy
// one device only (pipeline stage models, any layout).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// When a device runs a weight gradient (W).
enum class WeightPolicy : uint8_t {
  kFillGaps,  // whenever it would otherwise wait
  // only if the W ends before the next forward or backward already on its way
  // arrives (one placed later may still arrive sooner)
  kFitGaps,
  // only when a ready forward is held back (by the limit or the cap) or no forward or
  // backward is left for the device: it waits for arriving work instead
  kDefer,
  // as kFitGaps, but a W that would delay arriving work still runs when waiting
  // instead would leave the device idle for longer, since its first block, than any
  // device so far (the longest span is what counts: below that, waiting is free)
  kBalanceGaps,
  // before any forward: a W right after its backward unless another backward is ready
  // (memory freed at once; ZB-V's steady state)
  kEager,
};
inline constexpr int kWeightPolicies = 5;
// "fill", "fit", "defer", "balance", "eager".
std::string WeightPolicyName(WeightPolicy policy);

// The rule's parameters, per device.
struct InFlightLimits {
  // Micro-batches in flight (from their first forward on the device until their
  // last backward there starts), >= 1.
  std::vector<int> microbatches;
  std::vector<WeightPolicy> weights;
  // Every device: a ready forward allowed by its limit before a ready backward
  // (the default takes the backward first).
  bool forward_first = false;
  bool operator==(const InFlightLimits& o) const {
    return microbatches == o.microbatches && weights == o.weights &&
           forward_first == o.forward_first;
  }
};

// The rule's schedule of `microbatches` micro-batches with `limits` (one entry per
// device); nullopt on a dead end (the caps stop every device) or for a model with a
// block on several devices.
std::optional<Schedule> InFlightSchedule(const BlockModel& model, const ModelFacts& facts,
                                         int microbatches, const InFlightLimits& limits);

// `schedule` (of this model) up to each device's last forward, and the rule with
// `policy` on every device for the cool-down after it: the backwards left in the
// order they become ready, the weight gradients placed as `policy` says. Named
// "<name>/cooldown-<policy>"; nullopt where the rule does not apply or runs into a dead end.
std::optional<Schedule> CompleteCooldown(const BlockModel& model, const ModelFacts& facts,
                                         const Schedule& schedule, WeightPolicy policy);

struct InFlightSearchResult {
  Schedule schedule;  // named "inflight"; explicit start times for kSpan
  SimResult sim;
  InFlightLimits limits;
  int evaluations = 0;  // schedules built and timed
};

// The best schedule the rule gives for `objective` over the limits searched, within
// `max_evaluations` schedules and the time before `deadline` (at least the family's
// first member is always tried); nullopt when none is valid.
std::optional<InFlightSearchResult> SearchInFlightLimits(const BlockModel& model,
                                                         const ModelFacts& facts,
                                                         int microbatches, Objective objective,
                                                         int max_evaluations,
                                                         std::chrono::steady_clock::time_point deadline);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_INFLIGHT_SEARCH_H_
