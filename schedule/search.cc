#include "schedule/search.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "schedule/exact_schedule.h"
#include "schedule/inflight_search.h"
#include "schedule/list_schedule.h"
#include "schedule/order_search.h"
#include "schedule/predefined.h"
#include "schedule/span_timing.h"
#include "smt/modulo_schedule.h"

namespace loom::schedule {
namespace {

using Clock = std::chrono::steady_clock;

// Periods up to this many columns try every free column in a block's window, which
// makes the search exhaustive for packing; above it only columns at the block's
// earliest start or right after a booked column are tried.
constexpr int64_t kFullDomainPeriod = 256;

// Periods handed to Z3 when the search leaves them undecided, and Z3's resource
// limit per search node allowed (about a second for the default node limit).
constexpr int kSolverPeriods = 4;
constexpr uint64_t kSolverWorkPerNode = 25;

// Problems of up to this many block instances also get a branch and bound over every
// schedule (exact_schedule.h), on a budget of nodes times instances (a node costs
// about a pass over the instances): about half a second.
constexpr int64_t kExactInstances = 256;
constexpr int64_t kExactWork = int64_t{64} << 20;
// The local search before it: moves times instances (a move is one simulation).
constexpr int64_t kLocalWork = int64_t{2} << 20;

struct Budget {
  int64_t nodes = 0;
  int64_t limit = 0;
  Clock::time_point deadline = Clock::time_point::max();
  bool stopped = false;

  // Whether time is left, checking the clock (for loops that run long between
  // nodes: a period of millions of columns).
  bool TimeLeft() {
    if (!stopped && Clock::now() > deadline) stopped = true;
    return !stopped;
  }
  bool Spend() {
    if (stopped) return false;
    ++nodes;
    // The clock every 16 nodes: a node of a large model (thousands of blocks) can
    // take milliseconds, and a time limit is a promise.
    if (nodes > limit || ((nodes & 15) == 0 && Clock::now() > deadline)) stopped = true;
    return !stopped;
  }
};

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Depth-first search over block offsets at one period, pruned by column capacity
// and a memory lower bound.
class ModuloSearch {
 public:
  enum class Outcome { kFound, kExhausted, kStopped };

  ModuloSearch(const BlockModel& model, const ModelFacts& facts, int microbatches,
               int64_t period, bool use_memory, Budget& budget)
      : model_(model),
        facts_(facts),
        n_(microbatches),
        period_(period),
        use_memory_(use_memory && model.has_cap()),
        budget_(budget),
        words_((period + 63) / 64) {}

  Outcome Run() {
    const int blocks = model_.num_blocks();
    s_.assign(blocks, -1);
    table_.assign(model_.num_devices, std::vector<uint64_t>(words_, 0));
    remaining_.assign(model_.num_devices, 0);
    for (int d = 0; d < model_.num_devices; ++d) {
      remaining_[d] = static_cast<int>(facts_.on_device[d].size());
    }
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
  // Lower bound on the peak of the running memory sum on device d over N
  // micro-batches, exact once every block there is placed. Block b at s[b] + m * P:
  // instance (b, m) comes after clamp(m + floor((s[b] - s[c]) / P) + 1, 0, N)
  // instances of another block c, so the level after it is piecewise linear in m and
  // peaks where a clamp begins or ends, or at m = 0 or N - 1. An unplaced block that
  // frees memory is counted as if it started at the earliest time its placed
  // ancestors allow (counting at least as many of its instances); one that takes
  // memory is left out (it adds at least 0).
  int64_t DevicePeak(int d) const {
    const std::vector<int>& blocks = facts_.on_device[d];
    const size_t k = blocks.size();
    bool complete = true;
    for (int c : blocks) complete &= s_[c] >= 0;
    if (!complete) StartBounds();
    start_.resize(k);
    used_.assign(k, 0);
    for (size_t j = 0; j < k; ++j) {
      const int c = blocks[j];
      if (s_[c] >= 0) {
        start_[j] = s_[c];
        used_[j] = 1;
      } else if (model_.blocks[c].memory < 0) {
        start_[j] = earliest_[c];  // counts at most this many instances
        used_[j] = 1;
      } else if (model_.blocks[c].memory > 0) {
        start_[j] = latest_[c];  // counts at least this many instances
        used_[j] = 1;
      }
    }
    lead_.resize(k);
    int64_t peak = 0;
    for (size_t i = 0; i < k; ++i) {
      if (s_[blocks[i]] < 0) continue;  // events of placed blocks only
      for (size_t j = 0; j < k; ++j) {
        lead_[j] = j == i ? 1 : FloorDiv(start_[i] - start_[j], period_) + 1;
      }
      candidates_.assign({0, n_ - 1});
      for (size_t j = 0; j < k; ++j) {
        if (!used_[j]) continue;
        for (int64_t m : {-lead_[j] - 1, -lead_[j], n_ - lead_[j] - 1, n_ - lead_[j]}) {
          if (m >= 0 && m < n_) candidates_.push_back(m);
        }
      }
      for (int64_t m : candidates_) {
        int64_t level = 0;
        for (size_t j = 0; j < k; ++j) {
          if (used_[j]) {
            level += model_.blocks[blocks[j]].memory * std::clamp<int64_t>(m + lead_[j], 0, n_);
          }
        }
        peak = std::max(peak, level);
      }
    }
    return peak;
  }

  // Earliest and latest starts of every block in this search's space (each block
  // within one period of being ready), given the placed blocks.
  void StartBounds() const {
    const int n = model_.num_blocks();
    earliest_.resize(n);
    latest_.resize(n);
    for (int b : facts_.topo) {
      if (s_[b] >= 0) {
        earliest_[b] = latest_[b] = s_[b];
        continue;
      }
      int64_t lo = 0, hi = 0;
      for (const Dep& p : model_.blocks[b].preds) {
        const int64_t step = model_.blocks[p.block].span + p.lag;
        lo = std::max(lo, earliest_[p.block] + step);
        hi = std::max(hi, latest_[p.block] + step);
      }
      earliest_[b] = lo;
      latest_[b] = hi + period_ - 1;
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
    std::vector<int>& waiting = waiting_;
    waiting.clear();
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
    std::vector<int64_t>& runs = runs_;
    runs.clear();
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
      if (((t - est) & 4095) == 4095 && !budget_.TimeLeft()) return;
      const int64_t reach = std::max(bound, t + block.span + facts_.tail[b]);
      if (period_ > kFullDomainPeriod && !LeftJustified(block, t, est)) continue;
      if (!Fits(block, t)) continue;
      Book(block, t, true);
      s_[b] = t;
      bool ok = true;
      for (int d : block.devices) --remaining_[d];
      if (!CapacityAfter(block)) ok = false;
      if (ok && use_memory_) {
        for (int d : block.devices) {
          if (DevicePeak(d) > model_.memory_cap[d]) {
            ok = false;
            break;
          }
        }
      }
      if (ok) Dfs(depth + 1, reach);  // capacity and memory both hold
      for (int d : block.devices) ++remaining_[d];
      s_[b] = -1;
      Book(block, t, false);
      if (done_ || budget_.stopped) return;
    }
  }

  // The first complete placement is kept: at this period it is as good as any other.
  void Leaf(int64_t latency) {
    best_ = s_;
    best_latency_ = latency;
    done_ = true;
  }

  const BlockModel& model_;
  const ModelFacts& facts_;
  const int n_;
  const int64_t period_;
  const bool use_memory_;
  Budget& budget_;
  const int64_t words_;
  std::vector<int64_t> s_;
  std::vector<std::vector<uint64_t>> table_;
  std::vector<int> remaining_;
  // Scratch space of DevicePeak and StartBounds.
  mutable std::vector<int64_t> start_, lead_, candidates_, earliest_, latest_;
  mutable std::vector<char> used_;
  mutable std::vector<int> waiting_;
  mutable std::vector<int64_t> runs_;
  std::vector<std::vector<int>> multi_device_sets_;
  std::vector<int64_t> best_;
  int64_t best_latency_ = std::numeric_limits<int64_t>::max();
  bool done_ = false;
};

// A lower bound on device memory at a period that holds for every schedule. Each
// unit a block takes is given back by blocks after it on the same device (a greedy
// pairing along dependency paths, longest distance first). A pair (a, b) at distance
// L (start to start) keeps at least floor(L / P) of a's instances alive at any time
// of the steady state and ceil(L / P) right after a starts; with N micro-batches no
// more than N. Returns, per device, the bound (0 where no pairing covers the device).
class MemoryBound {
 public:
  MemoryBound(const BlockModel& model, const ModelFacts& facts) {
    const int n = model.num_blocks();
    std::vector<std::vector<int64_t>> dist(n, std::vector<int64_t>(n, -1));
    if (n > 2048) return;
    for (int b : facts.topo) {
      dist[b][b] = 0;
      for (const Dep& p : model.blocks[b].preds) {
        const int64_t step = model.blocks[p.block].span + p.lag;
        for (int a = 0; a < n; ++a) {
          if (dist[a][p.block] >= 0) dist[a][b] = std::max(dist[a][b], dist[a][p.block] + step);
        }
      }
    }
    pairs_.assign(model.num_devices, {});
    for (int d = 0; d < model.num_devices; ++d) {
      if (facts.net_memory[d] != 0) continue;
      std::vector<int64_t> left(n, 0);
      for (int b : facts.on_device[d]) left[b] = -model.blocks[b].memory;  // to give back
      bool covered = true;
      for (int a : facts.on_device[d]) {
        int64_t take = model.blocks[a].memory;
        if (take <= 0) continue;
        while (take > 0) {
          int best = -1;
          for (int b : facts.on_device[d]) {
            if (left[b] > 0 && dist[a][b] > 0 && (best < 0 || dist[a][b] > dist[a][best])) best = b;
          }
          if (best < 0) break;
          const int64_t f = std::min(take, left[best]);
          pairs_[d].push_back({f, dist[a][best], a});
          take -= f;
          left[best] -= f;
        }
        covered &= take == 0;
      }
      if (!covered) pairs_[d].clear();
    }
  }

  int64_t Device(int d, int64_t period, int n) const {
    if (pairs_.empty() || pairs_[d].empty()) return 0;
    // Right after one block a starts: ceil for its pairs, floor for the others, in
    // the steady state; without one (few micro-batches), one pair alone.
    int64_t floors = 0, most_ceil = 0, single = 0;
    bool steady = true;
    for (const Pair& p : pairs_[d]) {
      floors += p.amount * (p.distance / period);
      steady &= 2 * ((p.distance + period - 1) / period) + 1 <= n;
      single = std::max(single, p.amount * std::min<int64_t>(n, (p.distance + period - 1) / period));
    }
    if (!steady) return single;
    for (const Pair& p : pairs_[d]) {
      int64_t extra = 0;
      for (const Pair& q : pairs_[d]) {
        if (q.from == p.from && q.distance % period != 0) extra += q.amount;
      }
      most_ceil = std::max(most_ceil, extra);
    }
    return std::max(single, floors + most_ceil);
  }

 private:
  struct Pair {
    int64_t amount;
    int64_t distance;
    int from;
  };
  std::vector<std::vector<Pair>> pairs_;
};

// Why no repetend exists at `period`, after the memory-aware search was exhausted.
std::string ClassifyGap(const BlockModel& model, const ModelFacts& facts, int n, int64_t period,
                        ModuloSearch::Outcome outcome, const std::string& memory_reason,
                        Budget& budget) {
  if (outcome == ModuloSearch::Outcome::kStopped) {
    return absl::StrCat("period ", period, ": not decided within the search budget");
  }
  if (!memory_reason.empty()) return memory_reason;
  ModuloSearch packing(model, facts, n, period, /*use_memory=*/false, budget);
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

// The deadline `seconds` after `started` (none when seconds is 0).
Clock::time_point DeadlineAfter(Clock::time_point started, double seconds) {
  Clock::time_point deadline = Clock::time_point::max();
  if (seconds > 0) {
    deadline = started + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(seconds));
  }
  return deadline;
}

// The period at which micro-batches cannot overlap at all, so a repetend exists
// whenever one micro-batch fits alone.
int64_t SerialPeriod(const BlockModel& model, const ModelFacts& facts) {
  int64_t serial = 0;
  for (const Block& b : model.blocks) {
    serial += b.span;
    for (const Dep& p : b.preds) serial += p.lag;
  }
  return std::max(serial, facts.max_work);
}

// The placement of the model's blocks modulo a period, as Z3's integer program
// (smt/modulo_schedule.h); the period is set per try.
smt::ModuloProblem ModuloProblemOf(const BlockModel& model) {
  smt::ModuloProblem problem;
  problem.num_devices = model.num_devices;
  problem.horizon = 0;  // the solver's default, under which "none" is a proof
  for (const Block& b : model.blocks) {
    smt::ModuloJob job;
    job.span = b.span;
    job.devices = b.devices;
    for (const Dep& d : b.preds) job.preds.push_back({d.block, d.lag});
    problem.jobs.push_back(std::move(job));
  }
  return problem;
}

// The repetend search: periods probed upward from the lower bound, the undecided
// ones below the period found tightened on more budget (and, without memory caps,
// handed to Z3), then why the period found is or is not optimal, and the schedule
// the repetend gives.
class RepetendSearch {
 public:
  RepetendSearch(const BlockModel& model, const ModelFacts& facts, const SearchOptions& options,
                 Clock::time_point deadline)
      : model_(model),
        facts_(facts),
        options_(options),
        deadline_(deadline),
        memory_bound_(model, facts),
        probe_(std::max<int64_t>(1000, options.node_limit / 1024)) {}

  // The searched schedule, or ResourceExhausted when none was found within the limits.
  absl::StatusOr<SearchResult> Run() {
    const int64_t serial = SerialPeriod(model_, facts_);
    result_.period_lower_bound = facts_.max_work;
    result_.makespan_lower_bound = MakespanLowerBound(facts_, options_.microbatches);
    Probe(serial);
    Tighten();
    if (!model_.has_cap()) LOOM_RETURN_IF_ERROR(SolveUndecidedPeriods());
    if (offsets_.empty()) {
      // Out of budget: the serial period still gives a valid schedule.
      TryPeriod(serial, std::max<int64_t>(options_.node_limit, 1000));
    }
    LOOM_RETURN_IF_ERROR(FoundOne());
    ExplainPeriod();
    LOOM_RETURN_IF_ERROR(BuildSchedule());
    return std::move(result_);
  }

 private:
  using Outcome = ModuloSearch::Outcome;

  // Why the memory bound rules out `period` for every schedule; empty when it does not.
  std::string MemoryReason(int64_t period) const {
    if (!model_.has_cap()) return "";
    for (int d = 0; d < model_.num_devices; ++d) {
      const int64_t need = memory_bound_.Device(d, period, options_.microbatches);
      if (need > model_.memory_cap[d]) {
        return absl::StrCat("period ", period, ": device ", d, " must hold at least ", need,
                            " memory (its blocks' dependency distances span that many "
                            "micro-batches), above its cap ", model_.memory_cap[d]);
      }
    }
    return "";
  }

  // The memory-aware search at `period` on `limit` nodes; a repetend found is kept.
  Outcome TryPeriod(int64_t period, int64_t limit) {
    if (std::string why = MemoryReason(period); !why.empty()) {
      memory_reasons_.push_back({period, why});
      return Outcome::kExhausted;
    }
    Budget local;
    local.limit = limit;
    local.deadline = deadline_;
    ModuloSearch search(model_, facts_, options_.microbatches, period, /*use_memory=*/true,
                        local);
    const Outcome outcome = search.Run();
    result_.nodes += local.nodes;
    if (outcome == Outcome::kFound) {
      offsets_ = search.best();
      result_.period = period;
      result_.latency = search.best_latency();
    }
    return outcome;
  }

  // Periods upward from the bound with a small budget each, until one gives a
  // repetend (after 64 periods the step grows geometrically, for large spans).
  void Probe(int64_t serial) {
    int64_t period = facts_.max_work;
    for (int attempt = 0; period <= serial; ++attempt) {
      const int64_t left = options_.node_limit - result_.nodes;
      if (left <= 0 || Clock::now() > deadline_) break;
      const Outcome outcome = TryPeriod(period, std::min(probe_, left));
      if (outcome == Outcome::kFound) break;
      failed_.push_back({period, outcome});
      period = attempt < 64 ? period + 1 : std::max(period + 1, period * 21 / 20);
    }
  }

  // Tighten, within half of the whole budget: first the lowest period below the one
  // found that the probe left undecided, on half of that budget, scaled down for
  // nodes dearer than those of a period of 8 columns over 64 blocks (a node scans
  // about period x blocks columns); then the others highest first (under memory caps
  // a period just below a feasible one is the likeliest to be feasible too), each on
  // 16 probes' budget, until one gives no repetend.
  void Tighten() {
    const int64_t tighten_start = result_.nodes;
    const int64_t tighten_limit = options_.node_limit / 2;
    std::vector<size_t> undecided;
    for (size_t i = 0; i < failed_.size() && !offsets_.empty(); ++i) {
      if (failed_[i].second == Outcome::kStopped && failed_[i].first < result_.period) {
        undecided.push_back(i);
      }
    }
    if (undecided.empty()) return;
    const int64_t lowest = failed_[undecided.front()].first;
    const double dearer =
        std::max(1.0, static_cast<double>(lowest) * model_.num_blocks() / (8.0 * 64.0));
    const int64_t budget = static_cast<int64_t>(static_cast<double>(tighten_limit / 2) / dearer);
    failed_[undecided.front()].second = TryPeriod(lowest, std::max(probe_, budget));
    if (failed_[undecided.front()].second == Outcome::kFound) return;
    for (size_t k = undecided.size(); k-- > 1;) {
      auto& [p, outcome] = failed_[undecided[k]];
      const int64_t left = tighten_limit - (result_.nodes - tighten_start);
      if (left <= 0 || Clock::now() > deadline_) break;
      outcome = TryPeriod(p, std::min(left, 16 * probe_));
      if (outcome != Outcome::kFound) break;
    }
  }

  // Without memory caps a period the search left undecided below the one found
  // (or below the serial period, when none was found) goes to Z3, lowest first:
  // the placement modulo the period is then a small integer program
  // (smt/modulo_schedule.h), which decides in seconds what the search's budget did
  // not. Z3's resource limit follows the node limit, so the result stays
  // deterministic; a time limit bounds it too.
  absl::Status SolveUndecidedPeriods() {
    smt::ModuloProblem problem = ModuloProblemOf(model_);
    int tries = 0;
    for (auto& [p, outcome] : failed_) {
      if (!offsets_.empty() && p >= result_.period) continue;
      if (++tries > kSolverPeriods || Clock::now() > deadline_) break;
      problem.period = p;
      smt::ModuloLimits limits;
      limits.resource_limit = static_cast<uint64_t>(options_.node_limit) * kSolverWorkPerNode;
      if (deadline_ != Clock::time_point::max()) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
        limits.timeout_ms = static_cast<unsigned>(std::max<int64_t>(1, left.count()));
      }
      bool proved_none = false;
      LOOM_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> placed,
                            smt::FindModuloOffsets(problem, limits, &proved_none));
      if (proved_none) {
        outcome = Outcome::kExhausted;
        proved_infeasible_.push_back(p);
      }
      if (!placed.has_value()) continue;
      const int64_t first = *std::min_element(placed->begin(), placed->end());
      int64_t latency = 0;
      for (size_t b = 0; b < placed->size(); ++b) {
        (*placed)[b] -= first;
        latency = std::max(latency, (*placed)[b] + model_.blocks[b].span);
      }
      offsets_ = *std::move(placed);
      result_.period = p;
      result_.latency = latency;
      break;
    }
    return absl::OkStatus();
  }

  // ResourceExhausted when no repetend was found.
  absl::Status FoundOne() const {
    if (offsets_.empty() && Clock::now() > deadline_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no repetend found for '", model_.name, "' within the time limit (", result_.nodes,
          " search nodes); raise --time-limit"));
    }
    if (offsets_.empty()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no repetend found for '", model_.name, "' within ", result_.nodes,
          " search nodes", model_.has_cap() ? " under its memory caps" : "",
          " (a limit of the search, not a proof that none exists); raise --node-limit"));
    }
    return absl::OkStatus();
  }

  // Whether the period found is optimal, and why not (or why above the bound).
  void ExplainPeriod() {
    result_.period_optimal = result_.period == result_.period_lower_bound;
    // Above the bound the period is still optimal when every shorter one is proved
    // to have no repetend.
    bool shorter_proved = result_.period > result_.period_lower_bound;
    for (int64_t p = result_.period_lower_bound; p < result_.period && shorter_proved; ++p) {
      shorter_proved = std::find(proved_infeasible_.begin(), proved_infeasible_.end(), p) !=
                       proved_infeasible_.end();
    }
    if (shorter_proved) {
      result_.period_optimal = true;
      result_.gap_reason = absl::StrCat(
          "no repetend at period", result_.period - result_.period_lower_bound > 1 ? "s " : " ",
          result_.period_lower_bound,
          result_.period - result_.period_lower_bound > 1
              ? absl::StrCat(" to ", result_.period - 1)
              : std::string(),
          " (proved: the blocks cannot be placed modulo a shorter period, whatever the memory)");
    } else if (!result_.period_optimal && failed_.empty()) {
      // The time limit ended the probe before any period below this one was tried.
      result_.gap_reason = absl::StrCat("periods ", result_.period_lower_bound, " to ",
                                        result_.period - 1, " not tried within the time limit");
    } else if (!result_.period_optimal) {
      ExplainGap();
    }
  }

  // The first period above the bound explains the gap (the others usually repeat
  // it); the periods below the one found that stayed undecided are named.
  void ExplainGap() {
    Budget classify;
    classify.limit = std::max<int64_t>(options_.node_limit / 4, 1000);
    classify.deadline = deadline_;
    std::string why;
    for (const auto& [p, text] : memory_reasons_) {
      if (p == failed_.front().first) why = text;
    }
    result_.gap_reason = ClassifyGap(model_, facts_, options_.microbatches, failed_.front().first,
                                     failed_.front().second, why, classify);
    int64_t lo = -1, hi = -1;
    for (const auto& [p, outcome] : failed_) {
      if (outcome != Outcome::kStopped || p >= result_.period) continue;
      if (lo < 0) lo = p;
      hi = p;
    }
    if (lo >= 0 && lo != failed_.front().first) {
      absl::StrAppend(&result_.gap_reason, "; periods ", lo, " to ", hi,
                      " not decided within the search budget");
    }
  }

  // The schedule the repetend gives every micro-batch, simulated.
  absl::Status BuildSchedule() {
    const int n = model_.num_blocks();
    std::vector<int64_t> start(static_cast<size_t>(n) * options_.microbatches);
    for (int m = 0; m < options_.microbatches; ++m) {
      for (int b = 0; b < n; ++b) {
        start[static_cast<size_t>(m) * n + b] = offsets_[b] + m * result_.period;
      }
    }
    result_.schedule = ScheduleFromTimes(model_, options_.microbatches, start);
    result_.schedule.name = "search";
    result_.schedule.repetend = Repetend{result_.period, offsets_};
    LOOM_ASSIGN_OR_RETURN(result_.sim, Simulate(model_, result_.schedule));
    LOOM_RET_CHECK(result_.sim.valid) << "searched schedule is invalid: " << result_.sim.violation;
    int64_t first_end = 0;
    for (int b = 0; b < n; ++b) {
      first_end = std::max(first_end, offsets_[b] + model_.blocks[b].span);
    }
    result_.in_flight = static_cast<int>((first_end + result_.period - 1) / result_.period);
    return absl::OkStatus();
  }

  const BlockModel& model_;
  const ModelFacts& facts_;
  const SearchOptions& options_;
  const Clock::time_point deadline_;
  // Periods the memory bound rules out for every schedule, with the reason.
  const MemoryBound memory_bound_;
  std::vector<std::pair<int64_t, std::string>> memory_reasons_;
  // The node budget of one probe.
  const int64_t probe_;
  SearchResult result_;
  // The repetend found: each block's offset.
  std::vector<int64_t> offsets_;
  // Periods tried without a repetend, in the order tried, with how each ended.
  std::vector<std::pair<int64_t, Outcome>> failed_;
  // Periods Z3 proved to have no repetend.
  std::vector<int64_t> proved_infeasible_;
};

// The reservation table has a column per time unit of the period: above this many,
// the repetend is searched on a coarser grid.
constexpr int64_t kGridColumns = 1024;

// `model` on a grid of `grid` time units: spans and lags rounded up, so that any
// timing of the coarse model, scaled back by `grid`, is a valid timing of `model`.
BlockModel OnGrid(const BlockModel& model, int64_t grid) {
  BlockModel coarse = model;
  for (Block& b : coarse.blocks) {
    b.span = (b.span + grid - 1) / grid;
    for (Dep& p : b.preds) p.lag = (p.lag + grid - 1) / grid;
  }
  return coarse;
}

// The repetend search from `started`: the searched schedule, or ResourceExhausted
// when none was found within the limits. The repetend is searched in units of the
// greatest common divisor of the spans and lags, and where one micro-batch's work on
// a device still takes more than kGridColumns of them, on a grid of as many as bring
// it to kGridColumns (spans and lags rounded up): its offsets and period,
// scaled back, are a valid repetend of the model itself, and the schedule its device
// orders give is re-timed in the model's own units.
absl::StatusOr<SearchResult> SearchRepetend(const BlockModel& model, const ModelFacts& facts,
                                            const SearchOptions& options,
                                            Clock::time_point started) {
  const Clock::time_point deadline = DeadlineAfter(started, options.time_limit_seconds);
  // The grid: the greatest common divisor of every span and lag (exact), times the
  // factor that brings the work down to kGridColumns columns.
  int64_t divisor = 0;
  for (const Block& b : model.blocks) {
    divisor = std::gcd(divisor, b.span);
    for (const Dep& p : b.preds) divisor = std::gcd(divisor, p.lag);
  }
  const int64_t columns = facts.max_work / divisor;
  const int64_t grid = divisor * ((columns + kGridColumns - 1) / kGridColumns);
  if (grid <= 1) return RepetendSearch(model, facts, options, deadline).Run();
  const BlockModel coarse = OnGrid(model, grid);
  LOOM_ASSIGN_OR_RETURN(ModelFacts coarse_facts, AnalyzeBlockModel(coarse));
  LOOM_ASSIGN_OR_RETURN(SearchResult result,
                        RepetendSearch(coarse, coarse_facts, options, deadline).Run());
  result.period *= grid;
  for (int64_t& offset : result.schedule.repetend->offset) offset *= grid;
  result.schedule.repetend->period = result.period;
  result.schedule.start.clear();  // the device orders, timed in the model's units
  LOOM_ASSIGN_OR_RETURN(result.sim, Simulate(model, result.schedule));
  LOOM_RET_CHECK(result.sim.valid) << "searched schedule is invalid: " << result.sim.violation;
  result.latency *= grid;
  result.period_lower_bound = facts.max_work;
  result.makespan_lower_bound = MakespanLowerBound(facts, options.microbatches);
  result.period_optimal = result.period == result.period_lower_bound;
  result.gap_reason =
      result.period_optimal
          ? ""
          : absl::StrCat("searched on a grid of ", grid, " time units (spans and lags rounded "
                         "up to it)", result.gap_reason.empty() ? "" : "; on that grid: ",
                         result.gap_reason);
  return result;
}

ScheduleCandidate Candidate(const std::string& name, const absl::StatusOr<SimResult>& sim) {
  ScheduleCandidate c;
  c.name = name;
  c.defined = sim.ok();
  if (!sim.ok()) {
    c.why_not = std::string(sim.status().message());
  } else if (!sim->valid) {
    c.why_not = sim->violation;
  } else {
    c.fits = true;
    c.makespan = sim->makespan;
    c.span = sim->span;
    c.peak_memory = sim->peak_memory;
  }
  return c;
}

// The micro-batch count and the problem's size are within what the search takes.
absl::Status ValidateSearchSize(const BlockModel& model, const SearchOptions& options) {
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
  return absl::OkStatus();
}

// Proved impossible: every schedule ends holding what each micro-batch keeps; and
// one micro-batch alone needs its least peak (validation refuses a cap below it
// for any count only where no prefix of a micro-batch goes below zero).
absl::Status CheckCapsAdmitSchedule(const BlockModel& model, const ModelFacts& facts,
                                    int microbatches) {
  for (int d = 0; d < model.num_devices && model.has_cap(); ++d) {
    if (facts.net_memory[d] > 0 && facts.net_memory[d] > model.memory_cap[d] / microbatches) {
      int64_t held = 0;
      const bool overflows = __builtin_mul_overflow(facts.net_memory[d], microbatches, &held);
      return absl::InvalidArgumentError(absl::StrCat(
          "block model '", model.name, "': device ", d, " keeps ", facts.net_memory[d],
          " memory per micro-batch, so ", microbatches, " micro-batches end holding ",
          overflows ? std::string("more than 2^63") : absl::StrCat(held), ", above its cap ",
          model.memory_cap[d], " (no schedule can exist)"));
    }
    if (microbatches == 1 && model.memory_cap[d] < facts.single_peak[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "block model '", model.name, "': memory cap ", model.memory_cap[d], " on device ", d,
          " is below what one micro-batch needs (", facts.single_peak[d], ")"));
    }
  }
  return absl::OkStatus();
}

// `schedule` as the objective times it: for kSpan at its least span.
absl::StatusOr<Schedule> TimedFor(Objective objective, const BlockModel& model,
                                  absl::StatusOr<Schedule> schedule) {
  if (objective != Objective::kSpan || !schedule.ok()) return schedule;
  return TimeForLeastSpan(model, *schedule);
}

// The schedules the search competes with: each one simulated within the model's
// caps and listed as a candidate; the best valid one by the objective is kept.
class Alternatives {
 public:
  Alternatives(const BlockModel& model, Objective objective)
      : model_(model), objective_(objective) {}

  // Adds `made` as candidate `name` (`defined`: whether the model admits it).
  void Compare(const std::string& name, absl::StatusOr<Schedule> made, bool defined) {
    made = TimedFor(objective_, model_, std::move(made));
    absl::StatusOr<SimResult> sim =
        made.ok() ? Simulate(model_, *made) : absl::StatusOr<SimResult>(made.status());
    candidates_.push_back(Candidate(name, sim));
    ScheduleCandidate& c = candidates_.back();
    c.defined = defined;
    if (c.fits && (!best_sim_.has_value() ||
                   ObjectiveValue(objective_, *sim) < ObjectiveValue(objective_, *best_sim_))) {
      best_ = *std::move(made);
      best_sim_ = *std::move(sim);
    }
  }

  std::vector<ScheduleCandidate>& candidates() { return candidates_; }
  std::optional<Schedule>& best() { return best_; }
  std::optional<SimResult>& best_sim() { return best_sim_; }

 private:
  const BlockModel& model_;
  const Objective objective_;
  std::vector<ScheduleCandidate> candidates_;
  std::optional<Schedule> best_;
  std::optional<SimResult> best_sim_;
};

// Small problems: randomised list schedules, the best of them (the ramps of a few
// micro-batches are where the repetend is weakest).
absl::StatusOr<Schedule> BestRandomListSchedule(const BlockModel& model, const ModelFacts& facts,
                                                int microbatches) {
  constexpr int kRandomTries = 200;
  std::optional<Schedule> kept;
  int64_t kept_makespan = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < kRandomTries; ++k) {
    std::optional<Schedule> made = RandomListSchedule(model, facts, microbatches,
                                                      /*seed=*/k + 1, /*spread=*/0.5 * (k % 8));
    if (!made.has_value()) continue;
    absl::StatusOr<SimResult> sim = Simulate(model, *made);
    if (sim.ok() && sim->valid && sim->makespan < kept_makespan) {
      kept_makespan = sim->makespan;
      kept = *std::move(made);
    }
  }
  if (!kept.has_value()) {
    return absl::FailedPreconditionError("every randomised list schedule hit a dead end");
  }
  return *std::move(kept);
}

// The in-flight search, compared as "inflight" where the model admits it (every
// block on one device), on a budget of schedules that shrinks as they grow.
void CompareInFlightSearch(const BlockModel& model, const ModelFacts& facts,
                           const SearchOptions& options, Clock::time_point deadline,
                           Alternatives& alternatives) {
  constexpr int64_t kInFlightWork = int64_t{1} << 22;  // instances built, over all tries
  const int64_t instances = int64_t{model.num_blocks()} * options.microbatches;
  const int evaluations =
      static_cast<int>(std::clamp<int64_t>(kInFlightWork / instances, 30, 400));
  std::optional<InFlightSearchResult> found = SearchInFlightLimits(
      model, facts, options.microbatches, options.objective, evaluations, deadline);
  for (const Block& block : model.blocks) {
    if (block.devices.size() != 1) return;  // not defined: a block spans devices
  }
  alternatives.Compare(
      "inflight",
      found.has_value()
          ? absl::StatusOr<Schedule>(std::move(found->schedule))
          : absl::StatusOr<Schedule>(absl::FailedPreconditionError(
                "every in-flight limit tried ran into a dead end within the caps")),
      true);
}

// The published schedules the model admits, the list schedules, the in-flight
// search and the serial schedule, timed within the same caps.
void CompareAlternatives(const BlockModel& model, const ModelFacts& facts,
                         const SearchOptions& options, Clock::time_point deadline,
                         Alternatives& alternatives) {
  for (const std::string& name : PredefinedScheduleNames()) {
    absl::StatusOr<Schedule> made = MakePredefinedSchedule(name, model, options.microbatches);
    const bool defined = made.ok();
    alternatives.Compare(name, std::move(made), defined);
  }
  // A list schedule costs instances x ready instances; above this size the
  // repetend is the better use of the time.
  constexpr int64_t kListInstances = int64_t{1} << 16;
  if (int64_t{model.num_blocks()} * options.microbatches <= kListInstances) {
    for (ListPriority rule : ListPriorities()) {
      std::optional<Schedule> made = ListSchedule(model, facts, options.microbatches, rule);
      absl::StatusOr<Schedule> listed =
          made.has_value()
              ? absl::StatusOr<Schedule>(*std::move(made))
              : absl::StatusOr<Schedule>(absl::FailedPreconditionError(
                    "dead end: every block that could start next would exceed a cap"));
      alternatives.Compare(absl::StrCat("list/", ListPriorityName(rule)), std::move(listed), true);
    }
  }
  CompareInFlightSearch(model, facts, options, deadline, alternatives);
  constexpr int64_t kRandomInstances = 512;
  if (int64_t{model.num_blocks()} * options.microbatches <= kRandomInstances) {
    alternatives.Compare("list/random",
                         BestRandomListSchedule(model, facts, options.microbatches), true);
  }
  // Micro-batches one after another: where memory is too tight for them to
  // overlap, this still gives a valid schedule when one exists in that form.
  std::optional<Schedule> serial = SerialSchedule(model, facts, options.microbatches,
                                                  std::max<int64_t>(options.node_limit / 16, 1000));
  alternatives.Compare("serial",
                       serial.has_value()
                           ? absl::StatusOr<Schedule>(*std::move(serial))
                           : absl::StatusOr<Schedule>(absl::FailedPreconditionError(
                                 "no order of one micro-batch within the caps was found")),
                       true);
}

// Small problems: a branch and bound over every schedule below the best so far,
// compared as "exact" (nullopt where it does not run). When it covers every
// schedule it proves the best one optimal, or that no schedule exists (an error).
absl::StatusOr<std::optional<ExactScheduleResult>> CompareBranchAndBound(
    const BlockModel& model, const ModelFacts& facts, const SearchOptions& options,
    int64_t makespan_bound, Clock::time_point deadline, Alternatives& alternatives) {
  const int64_t instances = int64_t{model.num_blocks()} * options.microbatches;
  const std::optional<SimResult>& best_sim = alternatives.best_sim();
  std::optional<ExactScheduleResult> exact;
  if (!options.compare_alternatives || instances > kExactInstances ||
      options.objective != Objective::kMakespan ||
      (best_sim.has_value() && best_sim->makespan == makespan_bound)) {
    return exact;
  }
  exact = BranchAndBoundSchedule(
      model, facts, options.microbatches,
      best_sim.has_value() ? best_sim->makespan : std::numeric_limits<int64_t>::max(),
      std::max<int64_t>(std::min(options.node_limit / 2, kExactWork / instances), 1000),
      deadline);
  if (exact->schedule.has_value()) {
    // Its proofs rest on its own timing: the simulator must agree with it.
    absl::StatusOr<SimResult> check = Simulate(model, *exact->schedule);
    LOOM_RET_CHECK(check.ok() && check->valid && check->makespan == exact->makespan)
        << "the branch and bound's schedule does not simulate as it says";
    alternatives.Compare("exact", *exact->schedule, true);
  } else {
    alternatives.Compare(
        "exact",
        absl::FailedPreconditionError(exact->exhaustive
                                          ? "no schedule is shorter than the best of the others"
                                          : "none shorter found within the search's limits"),
        true);
  }
  if (exact->exhaustive && !best_sim.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block model '", model.name, "': no schedule of ", options.microbatches,
        " micro-batches keeps within the memory caps (proved: a branch and bound over "
        "every order of the devices found none)"));
  }
  return exact;
}

// The repetend search, unless another schedule is `settled` (proved optimal): then
// the repetend is searched only for its period, on a budget that shrinks as blocks
// make each node dearer, and not at all above kSettledBlocks blocks, where a node
// costs milliseconds.
absl::StatusOr<SearchResult> SearchRepetendUnlessSettled(const BlockModel& model,
                                                         const ModelFacts& facts,
                                                         const SearchOptions& options,
                                                         bool settled, Clock::time_point started) {
  constexpr int kSettledBlocks = 1024;
  SearchOptions repetend_options = options;
  if (settled) {
    // A node costs about a pass over the blocks: 16 million block visits by default,
    // and at most a sixteenth of the node limit.
    repetend_options.node_limit = std::max<int64_t>(
        1000, std::min(options.node_limit / 16, options.node_limit * 8 / model.num_blocks()));
  }
  if (settled && model.num_blocks() > kSettledBlocks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not searched: another schedule meets the ", ObjectiveName(options.objective),
        "'s lower bound, and a "
        "repetend of ", model.num_blocks(), " blocks would cost more than it adds"));
  }
  return SearchRepetend(model, facts, repetend_options, started);
}

// The result from the repetend `searched` (or why none was found) and the
// alternatives: the searched schedule unless another is shorter (ties go to the
// search); ResourceExhausted when neither gives a schedule.
absl::StatusOr<SearchResult> ChooseSchedule(const BlockModel& model,
                                            absl::StatusOr<SearchResult> searched,
                                            Alternatives& alternatives, const ModelFacts& facts,
                                            Objective objective, int64_t makespan_bound,
                                            bool settled) {
  SearchResult result;
  if (searched.ok() && objective == Objective::kSpan) {
    // The repetend's orders, timed for their least span.
    LOOM_ASSIGN_OR_RETURN(searched->schedule, TimeForLeastSpan(model, searched->schedule));
    LOOM_ASSIGN_OR_RETURN(searched->sim, Simulate(model, searched->schedule));
  }
  if (searched.ok()) {
    result = *std::move(searched);
    result.candidates.push_back(Candidate("search", result.sim));
  } else {
    result.period_lower_bound = facts.max_work;
    result.makespan_lower_bound = makespan_bound;
    result.gap_reason = std::string(searched.status().message());
    if (settled && searched.status().message().find("not searched") == absl::string_view::npos) {
      absl::StrAppend(&result.gap_reason,
                      " (on a reduced budget: another schedule is proved optimal)");
    }
    ScheduleCandidate none;
    none.name = "search";
    none.defined = true;
    none.why_not = result.gap_reason;
    result.candidates.push_back(none);
  }
  std::vector<ScheduleCandidate>& others = alternatives.candidates();
  std::vector<std::string> tried;
  for (const ScheduleCandidate& c : others) {
    if (c.defined) tried.push_back(c.name);
  }
  for (ScheduleCandidate& c : others) result.candidates.push_back(std::move(c));
  std::optional<SimResult>& best_sim = alternatives.best_sim();
  if (best_sim.has_value() &&
      (!searched.ok() ||
       ObjectiveValue(objective, *best_sim) < ObjectiveValue(objective, result.sim))) {
    result.schedule = *std::move(alternatives.best());
    result.sim = *std::move(best_sim);
  } else if (!searched.ok()) {
    if (others.empty()) return searched.status();
    return absl::ResourceExhaustedError(absl::StrCat(
        searched.status().message(), "; none of the other schedules tried (",
        absl::StrJoin(tried, ", "), ") fits the caps either"));
  }
  return result;
}

}  // namespace

absl::StatusOr<SearchResult> SearchSchedule(const BlockModel& model,
                                            const SearchOptions& options) {
  const auto started = Clock::now();
  const Clock::time_point deadline = DeadlineAfter(started, options.time_limit_seconds);
  LOOM_RETURN_IF_ERROR(ValidateSearchSize(model, options));
  LOOM_ASSIGN_OR_RETURN(ModelFacts facts, AnalyzeBlockModel(model));
  LOOM_RETURN_IF_ERROR(CheckCapsAdmitSchedule(model, facts, options.microbatches));
  const int64_t makespan_bound = MakespanLowerBound(facts, options.microbatches);
  const int64_t span_bound = facts.max_work * options.microbatches;
  const Objective objective = options.objective;
  Alternatives alternatives(model, objective);
  // Every alternative is a whole schedule, simulated: above this many instances
  // only the repetend is built.
  constexpr int64_t kAlternativeInstances = int64_t{1} << 22;
  const int64_t instances = int64_t{model.num_blocks()} * options.microbatches;
  if (options.compare_alternatives && instances <= kAlternativeInstances) {
    CompareAlternatives(model, facts, options, deadline, alternatives);
  }
  // Small problems: a local search over the best schedule's device orders, then a
  // branch and bound over every schedule below the best so far. They find the shorter
  // schedules the ramps of a few micro-batches allow (by makespan).
  if (options.compare_alternatives && instances <= kExactInstances &&
      objective == Objective::kMakespan &&
      alternatives.best().has_value() && alternatives.best_sim()->makespan > makespan_bound) {
    std::optional<Schedule> improved =
        ImproveOrders(model, *alternatives.best(),
                      std::max<int64_t>(1000, kLocalWork / instances), /*seed=*/1, deadline);
    if (improved.has_value()) alternatives.Compare("local", *std::move(improved), true);
  }
  LOOM_ASSIGN_OR_RETURN(std::optional<ExactScheduleResult> exact,
                        CompareBranchAndBound(model, facts, options, makespan_bound, deadline,
                                              alternatives));
  // A schedule meeting the objective's lower bound, or one the branch and bound
  // proved optimal, leaves no repetend better.
  const std::optional<SimResult>& best_sim = alternatives.best_sim();
  const bool settled =
      (best_sim.has_value() && objective == Objective::kMakespan &&
       best_sim->makespan == makespan_bound) ||
      (best_sim.has_value() && objective == Objective::kSpan && best_sim->span == span_bound) ||
      (exact.has_value() && exact->exhaustive);
  absl::StatusOr<SearchResult> searched =
      SearchRepetendUnlessSettled(model, facts, options, settled, started);
  if (!searched.ok() && !absl::IsResourceExhausted(searched.status())) return searched.status();
  LOOM_ASSIGN_OR_RETURN(SearchResult result,
                        ChooseSchedule(model, std::move(searched), alternatives, facts,
                                       objective, makespan_bound, settled));
  result.objective = objective;
  result.span_lower_bound = span_bound;
  result.span_optimal = result.sim.span == span_bound;
  if (result.sim.makespan == result.makespan_lower_bound) {
    result.makespan_optimal = true;
    result.makespan_proof = "it meets the makespan's lower bound";
  } else if (exact.has_value() && exact->exhaustive) {
    result.makespan_optimal = true;
    result.makespan_proof = absl::StrCat("a branch and bound over every schedule (",
                                         exact->nodes, " nodes) found none shorter");
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
}

}  // namespace loom::schedule
