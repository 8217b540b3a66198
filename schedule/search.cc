#include "schedule/search.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace loom::schedule {
namespace {

using Clock = std::chrono::steady_clock;

// Periods up to this many columns try every free column in a block's window, which
// makes the search exhaustive for packing; above it only columns at the block's
// earliest start or right after a booked column are tried.
constexpr int64_t kFullDomainPeriod = 256;

struct Budget {
  int64_t nodes = 0;
  int64_t limit = 0;
  Clock::time_point deadline = Clock::time_point::max();
  bool stopped = false;

  bool Spend() {
    if (stopped) return false;
    ++nodes;
    if (nodes > limit || ((nodes & 4095) == 0 && Clock::now() > deadline)) stopped = true;
    return !stopped;
  }
};

// Peak of the running memory sum on one device over N micro-batches when each block
// b there starts at s[b] + m * P (m = 0..N-1) and memory changes at block starts.
// Instance (b, m) comes after m + floor((s[b] - s[c]) / P) + 1 instances of another
// block c (clamped to [0, N]): the level after it is piecewise linear in m, so it
// peaks where a clamp begins or ends, or at m = 0 or N - 1.
int64_t DevicePeak(const BlockModel& model, const std::vector<int>& blocks,
                   const std::vector<int64_t>& s, int64_t period, int n) {
  const size_t k = blocks.size();
  std::vector<int64_t> lead(k);
  std::vector<int64_t> candidates;
  int64_t peak = 0;
  for (size_t i = 0; i < k; ++i) {
    const int b = blocks[i];
    for (size_t j = 0; j < k; ++j) {
      const int64_t diff = s[b] - s[blocks[j]];
      // floor division for negative differences
      const int64_t q = diff >= 0 ? diff / period : -((-diff + period - 1) / period);
      lead[j] = (j == i) ? 1 : q + 1;
    }
    candidates.assign({0, n - 1});
    for (size_t j = 0; j < k; ++j) {
      for (int64_t m : {-lead[j] - 1, -lead[j], n - lead[j] - 1, n - lead[j]}) {
        if (m >= 0 && m < n) candidates.push_back(m);
      }
    }
    for (int64_t m : candidates) {
      int64_t level = 0;
      for (size_t j = 0; j < k; ++j) {
        const int64_t count = std::clamp<int64_t>(m + lead[j], 0, n);
        level += model.blocks[blocks[j]].memory * count;
      }
      peak = std::max(peak, level);
    }
  }
  return peak;
}

// Depth-first branch and bound over block offsets at one period.
class ModuloSearch {
 public:
  enum class Outcome { kFound, kExhausted, kStopped };

  ModuloSearch(const BlockModel& model, const ModelFacts& facts, int microbatches,
               int64_t period, bool use_memory, int64_t improve_nodes, Budget& budget)
      : model_(model),
        facts_(facts),
        n_(microbatches),
        period_(period),
        use_memory_(use_memory && model.has_cap()),
        budget_(budget),
        words_((period + 63) / 64),
        improve_nodes_(improve_nodes) {}

  Outcome Run() {
    const int blocks = model_.num_blocks();
    s_.assign(blocks, -1);
    table_.assign(model_.num_devices, std::vector<uint64_t>(words_, 0));
    remaining_.assign(model_.num_devices, 0);
    for (int d = 0; d < model_.num_devices; ++d) {
      remaining_[d] = static_cast<int>(facts_.on_device[d].size());
    }
    peaks_.assign(model_.num_devices, 0);
    multi_device_sets_.clear();
    for (const Block& b : model_.blocks) {
      if (b.devices.size() > 1 &&
          std::find(multi_device_sets_.begin(), multi_device_sets_.end(), b.devices) ==
              multi_device_sets_.end()) {
        multi_device_sets_.push_back(b.devices);
      }
    }
    Dfs(0, 0);
    if (!best_.empty()) return Outcome::kFound;
    return budget_.stopped ? Outcome::kStopped : Outcome::kExhausted;
  }
  const std::vector<int64_t>& best() const { return best_; }
  int64_t best_latency() const { return best_latency_; }

 private:
  bool Booked(int d, int64_t column) const {
    return (table_[d][column >> 6] >> (column & 63)) & 1u;
  }
  void Mark(int d, int64_t column, bool on) {
    const uint64_t bit = uint64_t{1} << (column & 63);
    if (on) {
      table_[d][column >> 6] |= bit;
    } else {
      table_[d][column >> 6] &= ~bit;
    }
  }
  bool Fits(const Block& b, int64_t t) const {
    for (int d : b.devices) {
      for (int64_t i = 0; i < b.span; ++i) {
        if (Booked(d, (t + i) % period_)) return false;
      }
    }
    return true;
  }
  void Book(const Block& b, int64_t t, bool on) {
    for (int d : b.devices) {
      for (int64_t i = 0; i < b.span; ++i) Mark(d, (t + i) % period_, on);
    }
  }
  // Earliest start allowed by the placed predecessors.
  int64_t Earliest(int b) const {
    int64_t est = 0;
    for (const Dep& p : model_.blocks[b].preds) {
      est = std::max(est, s_[p.block] + model_.blocks[p.block].span + p.lag);
    }
    return est;
  }
  // A necessary condition for the unplaced blocks that occupy every device of `set`:
  // they need columns free on all of it, so for each span k among them, those at
  // least k long fit in the commonly free runs, a run of r columns holding at most
  // floor(r / k) of them.
  bool CapacityOk(const std::vector<int>& set) const {
    std::vector<int> waiting;
    for (int b : facts_.on_device[set.front()]) {
      if (s_[b] < 0 && std::includes(model_.blocks[b].devices.begin(),
                                     model_.blocks[b].devices.end(), set.begin(), set.end())) {
        waiting.push_back(b);
      }
    }
    if (waiting.empty()) return true;
    auto free = [&](int64_t c) {
      for (int d : set) {
        if (Booked(d, c)) return false;
      }
      return true;
    };
    // Walk the cycle from just after a column that is not free (if any).
    int64_t origin = 0;
    for (int64_t c = 0; c < period_; ++c) {
      if (!free(c)) {
        origin = (c + 1) % period_;
        break;
      }
    }
    std::vector<int64_t> runs;
    int64_t run = 0;
    for (int64_t i = 0; i < period_; ++i) {
      if (!free((origin + i) % period_)) {
        if (run > 0) runs.push_back(run);
        run = 0;
      } else {
        ++run;
      }
    }
    if (run > 0) runs.push_back(run);
    for (int b : waiting) {
      const int64_t k = model_.blocks[b].span;
      int64_t need = 0;
      for (int c : waiting) need += model_.blocks[c].span >= k ? 1 : 0;
      int64_t have = 0;
      for (int64_t r : runs) have += r / k;
      if (need > have) return false;
    }
    return true;
  }
  // Every device set the capacity check must look at after placing `block`: each of
  // its devices alone and each multi-device block's devices that meet them.
  bool CapacityAfter(const Block& block) const {
    for (int d : block.devices) {
      if (!CapacityOk({d})) return false;
    }
    for (const std::vector<int>& set : multi_device_sets_) {
      bool meets = false;
      for (int d : set) {
        meets |= std::binary_search(block.devices.begin(), block.devices.end(), d);
      }
      if (meets && !CapacityOk(set)) return false;
    }
    return true;
  }
  bool LeftJustified(const Block& b, int64_t t, int64_t est) const {
    if (t == est) return true;
    const int64_t before = (t - 1) % period_;
    for (int d : b.devices) {
      if (Booked(d, before)) return true;
    }
    return false;
  }

  void Dfs(int depth, int64_t bound) {
    if (done_ || !budget_.Spend()) return;
    if (!best_.empty() && budget_.nodes > improve_until_) {
      done_ = true;
      return;
    }
    if (depth == model_.num_blocks()) {
      Leaf(bound);
      return;
    }
    const int b = facts_.topo[depth];
    const Block& block = model_.blocks[b];
    const int64_t est = Earliest(b);
    // The first block is pinned at 0: shifting every offset by one column changes nothing.
    const int64_t last = depth == 0 ? 0 : est + period_ - 1;
    for (int64_t t = est; t <= last; ++t) {
      const int64_t reach = std::max(bound, t + block.span + facts_.tail[b]);
      if (!best_.empty() && reach >= best_latency_) break;  // reach grows with t
      if (!Fits(block, t)) continue;
      if (period_ > kFullDomainPeriod && !LeftJustified(block, t, est)) continue;
      Book(block, t, true);
      s_[b] = t;
      bool ok = true;
      std::vector<std::pair<int, int64_t>> saved;
      for (int d : block.devices) --remaining_[d];
      if (!CapacityAfter(block)) ok = false;
      for (int d : block.devices) {
        if (ok && remaining_[d] == 0) {
          saved.push_back({d, peaks_[d]});
          peaks_[d] = DevicePeak(model_, facts_.on_device[d], s_, period_, n_);
          if (use_memory_ && peaks_[d] > model_.memory_cap[d]) ok = false;
        }
      }
      if (ok) Dfs(depth + 1, reach);  // capacity and memory both hold
      for (const auto& [d, peak] : saved) peaks_[d] = peak;
      for (int d : block.devices) ++remaining_[d];
      s_[b] = -1;
      Book(block, t, false);
      if (done_ || budget_.stopped) return;
    }
  }

  void Leaf(int64_t latency) {
    if (!best_.empty() && latency >= best_latency_) return;
    if (best_.empty()) improve_until_ = budget_.nodes + improve_nodes_;
    best_ = s_;
    best_latency_ = latency;
    // Nothing can beat a micro-batch running at its critical path.
    if (latency <= facts_.critical_path) done_ = true;
  }

  const BlockModel& model_;
  const ModelFacts& facts_;
  const int n_;
  const int64_t period_;
  const bool use_memory_;
  Budget& budget_;
  const int64_t words_;
  const int64_t improve_nodes_;
  std::vector<int64_t> s_;
  std::vector<std::vector<uint64_t>> table_;
  std::vector<int> remaining_;
  std::vector<int64_t> peaks_;
  std::vector<std::vector<int>> multi_device_sets_;
  std::vector<int64_t> best_;
  int64_t best_latency_ = std::numeric_limits<int64_t>::max();
  bool done_ = false;
  int64_t improve_until_ = 0;
};

// Why no repetend exists at `period`, after the memory-aware search was exhausted.
std::string ClassifyGap(const BlockModel& model, const ModelFacts& facts, int n, int64_t period,
                        ModuloSearch::Outcome outcome, Budget& budget) {
  if (outcome == ModuloSearch::Outcome::kStopped) {
    return absl::StrCat("period ", period, ": not decided within the search budget");
  }
  ModuloSearch packing(model, facts, n, period, /*use_memory=*/false, /*improve_nodes=*/0,
                       budget);
  const ModuloSearch::Outcome p = packing.Run();
  if (p == ModuloSearch::Outcome::kFound) {
    return absl::StrCat("period ", period,
                        ": the blocks pack, but every repetend tried exceeds the memory cap "
                        "(blocks start within one period of being ready)");
  }
  if (p == ModuloSearch::Outcome::kExhausted && period <= kFullDomainPeriod) {
    return absl::StrCat("period ", period,
                        ": the blocks cannot be packed (blocks on several devices collide)");
  }
  return absl::StrCat("period ", period, ": no packing found within the search budget");
}

}  // namespace

absl::StatusOr<SearchResult> SearchSchedule(const BlockModel& model,
                                            const SearchOptions& options) {
  const auto started = Clock::now();
  LOOM_RETURN_IF_ERROR(ValidateBlockModel(model));
  if (options.microbatches <= 0 || options.microbatches > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch count must be in [1, 1048576], got ", options.microbatches));
  }
  if (int64_t{model.num_blocks()} * options.microbatches > (int64_t{1} << 26)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.num_blocks(), " blocks x ", options.microbatches,
                     " micro-batches is more than this tool schedules"));
  }
  LOOM_ASSIGN_OR_RETURN(ModelFacts facts, AnalyzeBlockModel(model));
  for (int d = 0; d < model.num_devices; ++d) {
    if (model.has_cap() && facts.net_memory[d] > 0 &&
        facts.single_peak[d] + (options.microbatches - 1) * facts.net_memory[d] >
            model.memory_cap[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "block model '", model.name, "': device ", d, " keeps ", facts.net_memory[d],
          " memory per micro-batch, so ", options.microbatches,
          " micro-batches cannot stay within its cap ", model.memory_cap[d]));
    }
  }
  Budget budget;
  budget.limit = options.node_limit;
  if (options.time_limit_seconds > 0) {
    budget.deadline = started + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options.time_limit_seconds));
  }
  // At this period micro-batches cannot overlap at all, so a repetend exists
  // whenever one micro-batch fits alone.
  int64_t serial = 0;
  for (const Block& b : model.blocks) {
    serial += b.span;
    for (const Dep& p : b.preds) serial += p.lag;
  }
  serial = std::max(serial, facts.max_work);
  SearchResult result;
  result.period_lower_bound = facts.max_work;
  result.makespan_lower_bound = MakespanLowerBound(facts, options.microbatches);
  std::vector<int64_t> offsets;
  std::vector<std::pair<int64_t, ModuloSearch::Outcome>> failed;
  for (int64_t period = facts.max_work; period <= serial && !budget.stopped; ++period) {
    ModuloSearch search(model, facts, options.microbatches, period, /*use_memory=*/true,
                        options.improve_nodes, budget);
    const ModuloSearch::Outcome outcome = search.Run();
    if (outcome == ModuloSearch::Outcome::kFound) {
      offsets = search.best();
      result.period = period;
      result.latency = search.best_latency();
      break;
    }
    failed.push_back({period, outcome});
  }
  if (offsets.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no schedule found for '", model.name, "' within ", budget.nodes, " search nodes",
        budget.stopped ? " (limit reached)" : " (memory caps too small)"));
  }
  result.period_optimal = result.period == result.period_lower_bound;
  if (!result.period_optimal) {
    // The first period above the bound explains the gap (the others usually repeat it).
    Budget classify = budget;
    classify.stopped = false;
    classify.limit = budget.nodes + std::max<int64_t>(options.node_limit / 4, 1000);
    result.gap_reason = ClassifyGap(model, facts, options.microbatches, failed.front().first,
                                    failed.front().second, classify);
  }
  const int n = model.num_blocks();
  std::vector<int64_t> start(static_cast<size_t>(n) * options.microbatches);
  for (int m = 0; m < options.microbatches; ++m) {
    for (int b = 0; b < n; ++b) start[static_cast<size_t>(m) * n + b] = offsets[b] + m * result.period;
  }
  result.schedule = ScheduleFromTimes(model, options.microbatches, start);
  result.schedule.name = "search";
  result.schedule.repetend = Repetend{result.period, offsets};
  LOOM_ASSIGN_OR_RETURN(result.sim, Simulate(model, result.schedule));
  LOOM_RET_CHECK(result.sim.valid) << "searched schedule is invalid: " << result.sim.violation;
  int64_t first_end = 0;
  for (int b = 0; b < n; ++b) first_end = std::max(first_end, offsets[b] + model.blocks[b].span);
  result.in_flight = static_cast<int>((first_end + result.period - 1) / result.period);
  result.nodes = budget.nodes;
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
}

}  // namespace loom::schedule
