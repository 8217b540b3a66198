#include "schedule/predefined.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "ir/status_macros.h"

namespace loom::schedule {
namespace {

// What a schedule step runs on one stage: a forward, a full backward (the B block,
// or I then W at once in a split model), or one half of a split backward.
enum class StepKind { kF, kB, kI, kW };

// One step of a device's program: `kind` of stage `stage` of chain `chain` (0 for
// a single pipeline; 0 down and 1 up in a bidirectional model) on micro-batch `mb`.
struct Op {
  int chain = 0;
  int stage = 0;
  StepKind kind = StepKind::kF;
  int mb = 0;
};
using Program = std::vector<std::vector<Op>>;  // per device

// The pipeline chains of a stage model: block ids and devices per [chain][stage].
struct Chains {
  int devices = 0;
  int stages = 0;  // per chain
  bool split = false;
  std::vector<std::vector<int>> f, b, w;  // b: B, or I when split; w: W, empty unless split
  std::vector<std::vector<int>> device;
  int num_chains() const { return static_cast<int>(f.size()); }
};

absl::Status Unfit(absl::string_view schedule, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("schedule '", schedule, "': ", why));
}

// Reads the chains of a stage model built by MakeStageModel (suffixes {""}) or
// MakeBidirectionalStageModel (suffixes {"d", "u"}).
absl::StatusOr<Chains> FindChains(absl::string_view schedule, const BlockModel& model,
                                  const std::vector<std::string>& suffixes) {
  Chains c;
  c.devices = model.num_devices;
  const std::string what =
      suffixes.size() == 1 ? "a pipeline stage model (blocks F<s>, then B<s> or I<s> and W<s>)"
                           : "a bidirectional stage model (blocks Fd<s>, Fu<s>, Bd<s>, Bu<s>, "
                             "...; see MakeBidirectionalStageModel)";
  for (const std::string& x : suffixes) {
    c.f.emplace_back();
    while (model.Find(absl::StrCat("F", x, c.f.back().size())) >= 0) {
      c.f.back().push_back(model.Find(absl::StrCat("F", x, c.f.back().size())));
    }
    if (c.f.back().empty()) {
      return Unfit(schedule, absl::StrCat("needs ", what, "; model '", model.name,
                                          "' has no block 'F", x, "0'"));
    }
  }
  c.stages = static_cast<int>(c.f[0].size());
  c.split = model.Find(absl::StrCat("I", suffixes[0], 0)) >= 0;
  const int per_stage = c.split ? 3 : 2;
  if (model.num_blocks() != per_stage * c.stages * static_cast<int>(suffixes.size())) {
    return Unfit(schedule, absl::StrCat("needs ", what, "; model '", model.name, "' has ",
                                        model.num_blocks(), " blocks"));
  }
  c.device.assign(suffixes.size(), std::vector<int>(c.stages, -1));
  c.b.assign(suffixes.size(), std::vector<int>(c.stages, -1));
  if (c.split) c.w.assign(suffixes.size(), std::vector<int>(c.stages, -1));
  for (size_t k = 0; k < suffixes.size(); ++k) {
    if (static_cast<int>(c.f[k].size()) != c.stages) {
      return Unfit(schedule, absl::StrCat("needs ", what, "; model '", model.name,
                                          "' has chains of different lengths"));
    }
    for (int s = 0; s < c.stages; ++s) {
      c.b[k][s] = model.Find(absl::StrCat(c.split ? "I" : "B", suffixes[k], s));
      if (c.split) c.w[k][s] = model.Find(absl::StrCat("W", suffixes[k], s));
      const std::vector<int>& devs = model.blocks[c.f[k][s]].devices;
      if (c.b[k][s] < 0 || (c.split && c.w[k][s] < 0) || devs.size() != 1) {
        return Unfit(schedule, absl::StrCat("needs ", what, "; model '", model.name,
                                            "' does not have that shape at stage ", s));
      }
      c.device[k][s] = devs[0];
    }
  }
  return c;
}

// Stage s on device s % devices (MakeStageModel's "loop"), checked.
absl::Status CheckLoop(absl::string_view schedule, const Chains& c) {
  for (int s = 0; s < c.stages; ++s) {
    if (c.device[0][s] != s % c.devices) {
      return Unfit(schedule, absl::StrCat("needs the loop layout (stage s on device s % ",
                                          c.devices, "); stage ", s, " is on device ",
                                          c.device[0][s]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSplit(absl::string_view schedule, const Chains& c, bool want) {
  if (c.split == want) return absl::OkStatus();
  return Unfit(schedule, want ? "needs a split backward (input- and weight-gradient blocks: "
                                "a weight-gradient cost W > 0, --costs F,B,W)"
                              : "needs an unsplit backward (one backward block per stage: "
                                "--costs F,B, or W = 0)");
}

// The schedule running `program`, a full backward expanded to I then W when split.
Schedule ToSchedule(const Chains& c, const Program& program, int microbatches,
                    absl::string_view name) {
  Schedule s;
  s.name = std::string(name);
  s.microbatches = microbatches;
  s.order.resize(c.devices);
  for (int d = 0; d < c.devices; ++d) {
    for (const Op& op : program[d]) {
      auto add = [&](int block) { s.order[d].push_back(Instance{block, op.mb}); };
      switch (op.kind) {
        case StepKind::kF:
          add(c.f[op.chain][op.stage]);
          break;
        case StepKind::kB:
          add(c.b[op.chain][op.stage]);
          if (c.split) add(c.w[op.chain][op.stage]);
          break;
        case StepKind::kI:
          add(c.b[op.chain][op.stage]);
          break;
        case StepKind::kW:
          add(c.w[op.chain][op.stage]);
          break;
      }
    }
  }
  return s;
}

// ---------------------------------------------------------------------------
// Closed-form programs.

// GPipe: every forward, then every backward, micro-batches in order.
Program GPipe(int p, int m) {
  Program prog(p);
  for (int d = 0; d < p; ++d) {
    for (int k = 0; k < m; ++k) prog[d].push_back(Op{0, d, StepKind::kF, k});
    for (int k = 0; k < m; ++k) prog[d].push_back(Op{0, d, StepKind::kB, k});
  }
  return prog;
}

// Megatron's interleaved 1F1B (Narayanan et al., SC'21), v chunks per device (v = 1:
// 1F1B / PipeDream-flush). Device d runs its k-th forward on chunk (k / p) % v and
// micro-batch (k / (p v)) p + k % p, and its k-th backward on chunk v - 1 - (k / p) % v
// of the same micro-batch: min(2 (p - 1 - d) + (v - 1) p, m v) warm-up forwards (all of
// them when m == p and v > 1), then one forward and one backward each step, then the
// remaining backwards. v = 1 gives the warm-up p - 1 - d.
Program Interleaved(int p, int v, int m) {
  Program prog(p);
  const int total = m * v;
  auto chunk_mb = [&](int k, bool backward) {
    const int group = (k / p) % v;
    return std::make_pair(backward ? v - 1 - group : group, (k / (p * v)) * p + k % p);
  };
  for (int d = 0; d < p; ++d) {
    int warmup = v == 1 ? std::min(p - 1 - d, m) : std::min(2 * (p - 1 - d) + (v - 1) * p, total);
    if (v > 1 && m == p) warmup = total;
    int nf = 0, nb = 0;
    auto forward = [&] {
      auto [chunk, mb] = chunk_mb(nf++, false);
      prog[d].push_back(Op{0, chunk * p + d, StepKind::kF, mb});
    };
    auto backward = [&] {
      auto [chunk, mb] = chunk_mb(nb++, true);
      prog[d].push_back(Op{0, chunk * p + d, StepKind::kB, mb});
    };
    for (int k = 0; k < warmup; ++k) forward();
    for (int k = warmup; k < total; ++k) {
      forward();
      backward();
    }
    while (nb < total) backward();
  }
  return prog;
}

// ZB-H1 and ZB-H2 (Qi et al., ICLR'24, figure 3 and table 2; ZB-H1 as torch's
// ScheduleInterleavedZeroBubble with one stage per device): the 1F1B order with I in
// place of B, device d running `depth` (p - 1 - d) warm-up forwards and its weight
// backward W of micro-batch k right after the input backward of micro-batch
// k + depth d (the remaining ones at the end). Depth 1 is ZB-H1 (p micro-batches in
// flight, 1F1B's memory), depth 2 ZB-H2 (2 (p - d) - 1 forwards before the first
// backward, peak (2p - 1) M_B: the deferred W fill the warm-up and cool-down).
Program ZbH(int p, int m, int depth) {
  Program prog(p);
  for (int d = 0; d < p; ++d) {
    const int warmup = std::min(depth * (p - 1 - d), m);
    int nf = 0, ni = 0, nw = 0;
    auto input = [&] {
      prog[d].push_back(Op{0, d, StepKind::kI, ni});
      if (ni++ >= depth * d) prog[d].push_back(Op{0, d, StepKind::kW, nw++});
    };
    for (; nf < warmup;) prog[d].push_back(Op{0, d, StepKind::kF, nf++});
    while (nf < m) {
      prog[d].push_back(Op{0, d, StepKind::kF, nf++});
      input();
    }
    while (ni < m) input();
    while (nw < m) prog[d].push_back(Op{0, d, StepKind::kW, nw++});
  }
  return prog;
}

// ZB-V (Qi et al., ICLR'24 section 6; torch's ScheduleZBVZeroBubble). Device d holds
// stage d (chunk 0) and stage 2p - 1 - d (chunk 1): 2 (p - d) - 1 chunk-0 forwards;
// d pairs (chunk-1 forward, chunk-0 forward); p - d triples (chunk-1 F, I, W); then
// steady (chunk-0 F, I, W, chunk-1 F, I, W) until every forward ran; then d pairs of
// input backwards (chunk 0, chunk 1), p - d pairs (chunk-0 I, W) and the remaining
// weight backwards, chunk 1 first. Built for max(m, 2p - 1) micro-batches, dropping
// the steps of micro-batches past m, as torch does.
Program ZbV(int p, int m) {
  Program prog(p);
  const int n = std::max(m, 2 * p - 1);
  for (int d = 0; d < p; ++d) {
    const int s0 = d, s1 = 2 * p - 1 - d;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::vector<Op>& out = prog[d];
    auto add = [&](int stage, StepKind kind, int mb) {
      if (mb < m) out.push_back(Op{0, stage, kind, mb});
    };
    for (int k = 0; k < 2 * (p - d) - 1; ++k) add(s0, StepKind::kF, f0++);
    for (int k = 0; k < d; ++k) {
      add(s1, StepKind::kF, f1++);
      add(s0, StepKind::kF, f0++);
    }
    for (int k = 0; k < p - d; ++k) {
      add(s1, StepKind::kF, f1++);
      add(s1, StepKind::kI, b1);
      add(s1, StepKind::kW, b1++);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) add(s0, StepKind::kF, f0++);
      add(s0, StepKind::kI, b0);
      add(s0, StepKind::kW, b0++);
      add(s1, StepKind::kF, f1++);
      add(s1, StepKind::kI, b1);
      add(s1, StepKind::kW, b1++);
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < d; ++k) {
      add(s0, StepKind::kI, b0++);
      add(s1, StepKind::kI, b1++);
    }
    for (int k = 0; k < p - d; ++k) {
      add(s0, StepKind::kI, b0++);
      add(s0, StepKind::kW, w0++);
    }
    while (w1 < b1) add(s1, StepKind::kW, w1++);
    while (w0 < b0) add(s0, StepKind::kW, w0++);
  }
  return prog;
}

// DualPipe (DeepSeek-V3; deepseek-ai/DualPipe's `step`), m pairs of micro-batches
// (num_chunks = 2m). On device d, with h = min(d, p - 1 - d) and phase 0 the direction
// in which d is in the first half of the pipeline (down for d < p/2), in eight steps:
//  1. 2 (p/2 - h - 1) x F0;   2. (h + 1) x (F0, F1);   3. (p/2 - h - 1) x (I1, W, F1);
//  4. (m - p + h + 1) x (F0, B1, F1, B0);   5. (p/2 - h - 1) x (B1, F1, B0);
//  6. (h + 1) x (B1, B0), the later half of them deferring W;
//  7. (p/2 - h - 1) x (W, I0);   8. (h + 1) x W.
// B is a full backward (I then W at once), I one whose W is deferred to a FIFO queue
// that each W step pops. The overlapped F&B pairs of step 4 run one after the other.
Program DualPipe(int p, int m) {
  Program prog(p);
  const int half = p / 2;
  for (int d = 0; d < p; ++d) {
    const int h = std::min(d, p - 1 - d);
    const int flip = d >= half ? 1 : 0;
    const int stage[2] = {d, p - 1 - d};  // per chain (0 down, 1 up)
    int nf[2] = {0, 0}, nb[2] = {0, 0};
    std::deque<std::pair<int, int>> deferred;  // (chain, mb) awaiting W
    std::vector<Op>& out = prog[d];
    auto fwd = [&](int phase) {
      const int c = phase ^ flip;
      out.push_back(Op{c, stage[c], StepKind::kF, nf[c]++});
    };
    auto bwd = [&](int phase, bool defer_w) {
      const int c = phase ^ flip;
      out.push_back(Op{c, stage[c], defer_w ? StepKind::kI : StepKind::kB, nb[c]});
      if (defer_w) deferred.push_back({c, nb[c]});
      ++nb[c];
    };
    auto weight = [&] {
      auto [c, mb] = deferred.front();
      deferred.pop_front();
      out.push_back(Op{c, stage[c], StepKind::kW, mb});
    };
    for (int i = 0; i < 2 * (half - h - 1); ++i) fwd(0);
    for (int i = 0; i < h + 1; ++i) fwd(0), fwd(1);
    for (int i = 0; i < half - h - 1; ++i) bwd(1, true), weight(), fwd(1);
    for (int i = 0; i < m - p + h + 1; ++i) fwd(0), bwd(1, false), fwd(1), bwd(0, false);
    for (int i = 0; i < half - h - 1; ++i) bwd(1, false), fwd(1), bwd(0, false);
    bool defer = false;
    for (int i = 0; i < h + 1; ++i) {
      if (i == (h + 1) / 2 && h % 2 == 1) defer = true;
      bwd(1, defer);
      if (i == (h + 1) / 2 && h % 2 == 0) defer = true;
      bwd(0, defer);
    }
    for (int i = 0; i < half - h - 1; ++i) weight(), bwd(0, true);
    while (!deferred.empty()) weight();
  }
  return prog;
}

// ---------------------------------------------------------------------------
// Greedy programs: devices take, whenever free, the ready step a rule prefers.

// A rule of a greedy schedule. `Pick` returns the index in `ready` (steps of
// `device` whose dependencies are met now and that have not run, by chain, stage,
// kind and micro-batch) of the one to run, or -1 to wait for the next completion;
// `Ran` is told each step that runs.
class Rule {
 public:
  virtual ~Rule() = default;
  virtual int Pick(int device, absl::Span<const Op> ready) = 0;
  virtual void Ran(int device, const Op& op) = 0;
};

int BlockOf(const Chains& c, const Op& op) {
  switch (op.kind) {
    case StepKind::kF:
      return c.f[op.chain][op.stage];
    case StepKind::kB:
    case StepKind::kI:
      return c.b[op.chain][op.stage];
    case StepKind::kW:
      return c.w[op.chain][op.stage];
  }
  return -1;
}

// Runs `rule` as an event-driven list scheduler over the blocks of `m` micro-batches
// (one step per block instance; full backwards only in unsplit models) and returns
// the order in which each device ran them.
absl::StatusOr<Program> RunGreedy(const BlockModel& model, const Chains& c, int m, Rule& rule) {
  const int n = model.num_blocks();
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> end(static_cast<size_t>(n) * m, kNever);
  std::vector<std::vector<Op>> todo(c.devices);
  for (int k = 0; k < c.num_chains(); ++k) {
    for (int s = 0; s < c.stages; ++s) {
      for (int mb = 0; mb < m; ++mb) {
        std::vector<Op>& list = todo[c.device[k][s]];
        list.push_back(Op{k, s, StepKind::kF, mb});
        list.push_back(Op{k, s, c.split ? StepKind::kI : StepKind::kB, mb});
        if (c.split) list.push_back(Op{k, s, StepKind::kW, mb});
      }
    }
  }
  std::vector<int64_t> lags = {0};
  for (const Block& b : model.blocks) {
    for (const Dep& dep : b.preds) lags.push_back(dep.lag);
  }
  std::sort(lags.begin(), lags.end());
  lags.erase(std::unique(lags.begin(), lags.end()), lags.end());
  std::set<int64_t> events;
  std::vector<int64_t> free(c.devices, 0), waiting_since(c.devices, -1);
  Program prog(c.devices);
  for (;;) {
    int d = -1;
    for (int e = 0; e < c.devices; ++e) {
      if (!todo[e].empty() && (d < 0 || free[e] < free[d])) d = e;
    }
    if (d < 0) break;
    LOOM_RET_CHECK(free[d] != kNever) << "greedy schedule stuck on device " << d;
    const int64_t t = free[d];
    std::vector<Op> ready;
    std::vector<int> index;
    for (int i = 0; i < static_cast<int>(todo[d].size()); ++i) {
      const Op& op = todo[d][i];
      bool ok = true;
      for (const Dep& dep : model.blocks[BlockOf(c, op)].preds) {
        const int64_t e = end[static_cast<size_t>(op.mb) * n + dep.block];
        ok = ok && e != kNever && e + dep.lag <= t;
      }
      if (ok) ready.push_back(op), index.push_back(i);
    }
    const int pick = rule.Pick(d, ready);
    if (pick < 0) {
      auto next = events.upper_bound(t);
      // Waits for the next completion, or for one a device free now may still start.
      waiting_since[d] = t;
      free[d] = next == events.end() ? kNever : *next;
      continue;
    }
    const Op op = ready[pick];
    todo[d].erase(todo[d].begin() + index[pick]);
    const int block = BlockOf(c, op);
    const int64_t finish = t + model.blocks[block].span;
    end[static_cast<size_t>(op.mb) * n + block] = finish;
    free[d] = finish;
    waiting_since[d] = -1;
    prog[d].push_back(op);
    rule.Ran(d, op);
    for (int64_t lag : lags) {
      const int64_t ev = finish + lag;
      events.insert(ev);
      for (int e = 0; e < c.devices; ++e) {
        if (waiting_since[e] >= 0 && waiting_since[e] < ev && ev < free[e]) free[e] = ev;
      }
    }
  }
  return prog;
}

// Chimera (Li & Hoefler, SC'21): the down and the up pipeline share the devices;
// stage s of either direction keeps at most min(p/2, p - s) micro-batches in flight
// (1F1B's bound, capped at the p/2 micro-batches of one basic unit), and a free
// device takes the oldest ready backward, else the oldest ready forward allowed by
// that bound (the chain with fewer forwards run first).
class ChimeraRule : public Rule {
 public:
  explicit ChimeraRule(int p) : p_(p), in_flight_(p, std::vector<int>(2, 0)),
                                forwards_(p, std::vector<int>(2, 0)) {}
  int Pick(int device, absl::Span<const Op> ready) override {
    int best = -1;
    for (int i = 0; i < static_cast<int>(ready.size()); ++i) {
      if (ready[i].kind == StepKind::kB && (best < 0 || ready[i].mb < ready[best].mb)) best = i;
    }
    if (best >= 0) return best;
    for (int i = 0; i < static_cast<int>(ready.size()); ++i) {
      const Op& op = ready[i];
      if (op.kind != StepKind::kF) continue;
      if (in_flight_[device][op.chain] >= std::min(p_ / 2, p_ - op.stage)) continue;
      if (best < 0 || forwards_[device][op.chain] < forwards_[device][ready[best].chain] ||
          (op.chain == ready[best].chain && op.mb < ready[best].mb)) {
        best = i;
      }
    }
    return best;
  }
  void Ran(int device, const Op& op) override {
    if (op.kind == StepKind::kF) ++in_flight_[device][op.chain], ++forwards_[device][op.chain];
    if (op.kind == StepKind::kB) --in_flight_[device][op.chain];
  }

 private:
  int p_;
  std::vector<std::vector<int>> in_flight_, forwards_;
};

// ---------------------------------------------------------------------------

absl::StatusOr<Program> Build(absl::string_view name, const BlockModel& model, const Chains& c,
                              int m) {
  const int p = c.devices;
  if (name == "gpipe" || name == "1f1b") {
    if (c.stages != p) {
      return Unfit(name, absl::StrCat("needs one stage per device (", p, "), the model has ",
                                      c.stages, "; use interleaved_1f1b for more"));
    }
    return name == "gpipe" ? GPipe(p, m) : Interleaved(p, /*v=*/1, m);
  }
  if (name == "interleaved_1f1b") {
    if (m % p != 0) {
      return Unfit(name, absl::StrCat("needs a micro-batch count divisible by the ", p,
                                      " devices, got ", m));
    }
    return Interleaved(p, c.stages / p, m);
  }
  if (c.stages != p) {
    return Unfit(name, absl::StrCat("needs one stage per device (", p, "), the model has ",
                                    c.stages));
  }
  if (name == "zb_h1") return ZbH(p, m, /*depth=*/1);
  if (name == "zb_h2") return ZbH(p, m, /*depth=*/2);
  LOOM_RET_CHECK(name == "chimera") << name;
  ChimeraRule rule(p);
  return RunGreedy(model, c, m, rule);
}

}  // namespace

std::vector<std::string> PredefinedScheduleNames() {
  return {"1f1b", "chimera", "dualpipe", "gpipe", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v"};
}

absl::StatusOr<Schedule> MakePredefinedSchedule(absl::string_view name, const BlockModel& model,
                                                int microbatches) {
  const std::vector<std::string> names = PredefinedScheduleNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown schedule '", name, "' (known: ",
                                                   absl::StrJoin(names, ", "), ")"));
  }
  if (microbatches < 1) {
    return Unfit(name, absl::StrCat("needs at least one micro-batch, got ", microbatches));
  }
  LOOM_RETURN_IF_ERROR(ValidateBlockModel(model));
  const bool bidirectional = name == "chimera" || name == "dualpipe";
  LOOM_ASSIGN_OR_RETURN(
      Chains c, FindChains(name, model,
                           bidirectional ? std::vector<std::string>{"d", "u"}
                                         : std::vector<std::string>{""}));
  const int p = c.devices;
  Program prog;
  if (bidirectional) {
    for (int s = 0; s < c.stages; ++s) {
      if (c.stages != p || c.device[0][s] != s || c.device[1][s] != p - 1 - s) {
        return Unfit(name, "needs the layout of MakeBidirectionalStageModel (down stage s on "
                           "device s, up stage s on device p - 1 - s)");
      }
    }
    if (p % 2 != 0) {
      return Unfit(name, absl::StrCat("needs an even device count, got ", p));
    }
    LOOM_RETURN_IF_ERROR(CheckSplit(name, c, /*want=*/name == "dualpipe"));
    if (name == "dualpipe") {
      if (microbatches < p) {
        return Unfit(name, absl::StrCat("needs at least ", p, " micro-batch pairs (2 * ", p,
                                        " micro-batches) on ", p, " devices, got ",
                                        microbatches));
      }
      prog = DualPipe(p, microbatches);
    } else {
      LOOM_ASSIGN_OR_RETURN(prog, Build(name, model, c, microbatches));
    }
  } else if (name == "zb_v") {
    LOOM_RETURN_IF_ERROR(CheckSplit(name, c, /*want=*/true));
    for (int s = 0; s < c.stages; ++s) {
      const int want = s < p ? s : 2 * p - 1 - s;
      if (c.stages != 2 * p || c.device[0][s] != want) {
        return Unfit(name, absl::StrCat("needs the v layout with ", 2 * p,
                                        " stages (MakeStageModel(", p, ", ", 2 * p,
                                        ", \"v\", ...))"));
      }
    }
    prog = ZbV(p, microbatches);
  } else {
    LOOM_RETURN_IF_ERROR(CheckLoop(name, c));
    if (name == "zb_h1" || name == "zb_h2") {
      LOOM_RETURN_IF_ERROR(CheckSplit(name, c, /*want=*/true));
    }
    LOOM_ASSIGN_OR_RETURN(prog, Build(name, model, c, microbatches));
  }
  return ToSchedule(c, prog, microbatches, name);
}

absl::StatusOr<BlockModel> MakeBidirectionalStageModel(int devices, const StageCosts& costs) {
  if (devices < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bidirectional stage model: needs at least 2 devices, got ", devices));
  }
  LOOM_ASSIGN_OR_RETURN(BlockModel down, MakeStageModel(devices, devices, "loop", costs));
  BlockModel m;
  m.name = absl::StrCat("stages-bidirectional-", devices);
  m.num_devices = devices;
  const int n = down.num_blocks();
  for (int dir = 0; dir < 2; ++dir) {
    for (const Block& b : down.blocks) {
      Block x = b;
      x.name = absl::StrCat(b.name.substr(0, 1), dir == 0 ? "d" : "u", b.name.substr(1));
      if (dir == 1) {
        for (int& d : x.devices) d = devices - 1 - d;
        for (Dep& dep : x.preds) dep.block += n;
      }
      m.blocks.push_back(std::move(x));
    }
  }
  return m;
}

}  // namespace loom::schedule
