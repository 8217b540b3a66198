#include "schedule/repetend_search.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "smt/modulo_schedule.h"

namespace loom::schedule {

// The deadline `seconds` after `started` (none when seconds is 0).
std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::steady_clock::time_point started,
                                                    double seconds) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::time_point::max();
  if (seconds > 0) {
    deadline = started + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(seconds));
  }
  return deadline;
}

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
constexpr int64_t kGridColumns = 512;

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

}  // namespace

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

}  // namespace loom::schedule
