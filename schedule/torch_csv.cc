#include "schedule/torch_csv.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/status_macros.h"

namespace loom::schedule {
namespace {

// X(enumerator, text, is compute). Sorted by text. torch's _ComputationType.
#define LOOM_TORCH_ACTION_LIST(X)          \
  X(kFullBackward, "B", true)              \
  X(kForward, "F", true)                   \
  X(kBackwardInput, "I", true)             \
  X(kOverlapFB, "OVERLAP_F_B", false)      \
  X(kRecvB, "RECV_B", false)               \
  X(kRecvF, "RECV_F", false)               \
  X(kReduceGrad, "REDUCE_GRAD", false)     \
  X(kReshard, "RESHARD", false)            \
  X(kSendB, "SEND_B", false)               \
  X(kSendF, "SEND_F", false)               \
  X(kUnshard, "UNSHARD", false)            \
  X(kBackwardWeight, "W", true)

enum class ActionType {
#define LOOM_TORCH_ACTION_ENUM_(e, text, compute) e,
  LOOM_TORCH_ACTION_LIST(LOOM_TORCH_ACTION_ENUM_)
#undef LOOM_TORCH_ACTION_ENUM_
};

struct ActionInfo {
  ActionType type;
  absl::string_view text;
  bool compute;
};

constexpr ActionInfo kActions[] = {
#define LOOM_TORCH_ACTION_INFO_(e, text, compute) {ActionType::e, text, compute},
    LOOM_TORCH_ACTION_LIST(LOOM_TORCH_ACTION_INFO_)
#undef LOOM_TORCH_ACTION_INFO_
};

const ActionInfo& Info(ActionType type) { return kActions[static_cast<int>(type)]; }

bool IsTransfer(ActionType t) {
  return t == ActionType::kSendF || t == ActionType::kRecvF || t == ActionType::kSendB ||
         t == ActionType::kRecvB;
}

struct Action {
  ActionType type = ActionType::kForward;
  int stage = 0;
  int microbatch = -1;  // -1: none
};

std::string ActionText(const Action& a) {
  return absl::StrCat(a.stage, Info(a.type).text, a.microbatch >= 0 ? absl::StrCat(a.microbatch) : "");
}

int64_t Key(ActionType type, int stage, int microbatch) {
  return (int64_t{static_cast<int>(type)} << 52) | (int64_t{stage} << 24) | microbatch;
}
int64_t Key(const Action& a) { return Key(a.type, a.stage, a.microbatch); }

constexpr int kMaxStage = 65535;
constexpr int kMaxMicrobatch = (1 << 22) - 1;

bool ParseInt(absl::string_view digits, int limit, int& out) {
  if (digits.empty() || digits.size() > 9) return false;
  int64_t v = 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(c)) return false;
    v = v * 10 + (c - '0');
  }
  if (v > limit) return false;
  out = static_cast<int>(v);
  return true;
}

// One action `{stage}{type}{micro-batch}`; false when it is not one.
bool ParseSingle(absl::string_view text, Action& a) {
  size_t i = 0;
  while (i < text.size() && absl::ascii_isdigit(text[i])) ++i;
  if (!ParseInt(text.substr(0, i), kMaxStage, a.stage)) return false;
  const absl::string_view rest = text.substr(i);
  const ActionInfo* best = nullptr;
  for (const ActionInfo& info : kActions) {
    if (info.type == ActionType::kOverlapFB) continue;
    if (absl::StartsWith(rest, info.text) && (best == nullptr || info.text.size() > best->text.size())) {
      best = &info;
    }
  }
  if (best == nullptr) return false;
  a.type = best->type;
  const absl::string_view mb = rest.substr(best->text.size());
  a.microbatch = -1;
  if (mb.empty()) return true;
  return ParseInt(mb, kMaxMicrobatch, a.microbatch);
}

// One CSV field: nothing (idle), one action, or an OVERLAP_F_B of compute actions.
absl::StatusOr<std::vector<Action>> ParseField(absl::string_view field, const std::string& where) {
  field = absl::StripAsciiWhitespace(field);
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
    field = absl::StripAsciiWhitespace(field.substr(1, field.size() - 2));
  }
  std::vector<Action> out;
  if (field.empty()) return out;
  auto unknown = [&] {
    return absl::InvalidArgumentError(absl::StrCat(where, "unknown action '", field, "'"));
  };
  if (field.front() == '(') {
    const size_t close = field.find(')');
    if (close == absl::string_view::npos || field.substr(close + 1) != "OVERLAP_F_B") {
      return unknown();
    }
    for (absl::string_view part : absl::StrSplit(field.substr(1, close - 1), ';')) {
      part = absl::StripAsciiWhitespace(part);
      if (part.empty()) continue;
      Action a;
      if (!ParseSingle(part, a) || !Info(a.type).compute) return unknown();
      out.push_back(a);
    }
    return out;
  }
  Action a;
  if (!ParseSingle(field, a)) return unknown();
  const bool needs_mb = Info(a.type).compute || IsTransfer(a.type);
  if (needs_mb && a.microbatch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "action '", field, "' has no micro-batch"));
  }
  out.push_back(a);
  return out;
}

struct Entry {
  Action action;
  int line = 0;
  int column = 0;
};

std::string Where(absl::string_view filename, const Entry& e) {
  return absl::StrCat(filename, ":", e.line, ":", e.column, ": ");
}

// The name of the block an action of a loaded model runs as.
std::string BlockName(ActionType type, int stage) {
  switch (type) {
    case ActionType::kForward: return absl::StrCat("F", stage);
    case ActionType::kFullBackward: return absl::StrCat("B", stage);
    case ActionType::kBackwardInput: return absl::StrCat("I", stage);
    case ActionType::kBackwardWeight: return absl::StrCat("W", stage);
    default: return absl::StrCat(Info(type).text, stage);
  }
}

// Adds the SEND/RECV blocks of torch's simulator between stages on different ranks.
void AddTransferBlocks(BlockModel& m, const std::vector<int>& rank_of, bool split) {
  const int stages = static_cast<int>(rank_of.size());
  auto add = [&](ActionType type, int stage, int rank, int pred) {
    Block b;
    b.name = BlockName(type, stage);
    b.kind = BlockKind::kOther;
    b.stage = stage;
    b.span = 1;
    b.devices = {rank};
    b.preds = {Dep{pred, 0}};
    m.blocks.push_back(b);
    return m.num_blocks() - 1;
  };
  for (int s = 0; s + 1 < stages; ++s) {
    if (rank_of[s] == rank_of[s + 1]) continue;
    const int f = m.Find(BlockName(ActionType::kForward, s));
    add(ActionType::kSendF, s, rank_of[s], f);
    const int recv = add(ActionType::kRecvF, s + 1, rank_of[s + 1], f);
    m.blocks[m.Find(BlockName(ActionType::kForward, s + 1))].preds = {Dep{recv, 0}};
  }
  const ActionType bw = split ? ActionType::kBackwardInput : ActionType::kFullBackward;
  for (int s = stages - 1; s > 0; --s) {
    if (rank_of[s] == rank_of[s - 1]) continue;
    const int b = m.Find(BlockName(bw, s));
    add(ActionType::kSendB, s, rank_of[s], b);
    const int recv = add(ActionType::kRecvB, s - 1, rank_of[s - 1], b);
    m.blocks[m.Find(BlockName(bw, s - 1))].preds = {Dep{recv, 0}};
  }
}

// torch's `_add_send_recv`: ranks take turns in rank order placing their next
// field (an idle field, or one whose actions are all skipped, just uses the turn)
// once the inputs of its actions are there (a RECV, or the producing action on the
// same rank); a placed action that feeds a stage on another rank appends its SEND
// to its own list and the RECV to the receiver's list at once.
absl::StatusOr<std::vector<std::vector<Action>>> AddSendRecv(
    const std::vector<std::vector<std::vector<Action>>>& turns, const std::vector<int>& rank_of,
    absl::string_view filename) {
  const int ranks = static_cast<int>(turns.size());
  const int stages = static_cast<int>(rank_of.size());
  std::vector<std::vector<Action>> out(ranks);
  std::vector<absl::flat_hash_set<int64_t>> prev(ranks);
  std::vector<size_t> next(ranks, 0);
  auto ready = [&](const Action& a, const absl::flat_hash_set<int64_t>& done) {
    const int s = a.stage, m = a.microbatch;
    switch (a.type) {
      case ActionType::kForward:
        return s == 0 || done.contains(Key(ActionType::kRecvF, s, m)) ||
               done.contains(Key(ActionType::kForward, s - 1, m));
      case ActionType::kFullBackward:
      case ActionType::kBackwardInput:
        return s == stages - 1 || done.contains(Key(ActionType::kRecvB, s, m)) ||
               done.contains(Key(ActionType::kBackwardInput, s + 1, m)) ||
               done.contains(Key(ActionType::kFullBackward, s + 1, m));
      default:
        return true;
    }
  };
  while (true) {
    bool left = false, progress = false;
    for (int r = 0; r < ranks; ++r) {
      if (next[r] >= turns[r].size()) continue;
      left = true;
      const std::vector<Action>& turn = turns[r][next[r]];
      if (!std::all_of(turn.begin(), turn.end(),
                       [&](const Action& a) { return ready(a, prev[r]); })) {
        continue;
      }
      for (const Action& a : turn) {
        out[r].push_back(a);
        prev[r].insert(Key(a));
        const bool fwd = a.type == ActionType::kForward;
        const bool bwd =
            a.type == ActionType::kFullBackward || a.type == ActionType::kBackwardInput;
        const int to = fwd ? a.stage + 1 : a.stage - 1;
        if ((fwd || bwd) && to >= 0 && to < stages && rank_of[to] != rank_of[a.stage]) {
          const Action send{fwd ? ActionType::kSendF : ActionType::kSendB, a.stage, a.microbatch};
          const Action recv{fwd ? ActionType::kRecvF : ActionType::kRecvB, to, a.microbatch};
          out[r].push_back(send);
          prev[r].insert(Key(send));
          out[rank_of[to]].push_back(recv);
          prev[rank_of[to]].insert(Key(recv));
        }
      }
      ++next[r];
      progress = true;
    }
    if (!left) break;
    if (!progress) {
      std::vector<std::string> waits;
      for (int r = 0; r < ranks; ++r) {
        if (next[r] < turns[r].size()) {
          std::vector<std::string> texts;
          for (const Action& a : turns[r][next[r]]) texts.push_back(ActionText(a));
          waits.push_back(absl::StrCat("rank ", r, " at '", absl::StrJoin(texts, ";"), "'"));
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat(filename, ": cannot place sends and receives as torch's lowering does; ",
                       "every rank waits for an input: ", absl::StrJoin(waits, ", ")));
    }
  }
  return out;
}

// The rows of a torch CSV. A row ends in "\r\n" (Python's csv module), "\n" or a
// lone "\r" (old Mac line ends): all three are read alike.
std::vector<absl::string_view> CsvRows(absl::string_view text) {
  std::vector<absl::string_view> lines;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = text.find_first_of("\r\n", begin);
    if (end == absl::string_view::npos) {
      lines.push_back(text.substr(begin));
      break;
    }
    lines.push_back(text.substr(begin, end - begin));
    begin = end + (text.substr(end, 2) == "\r\n" ? 2 : 1);
  }
  return lines;
}

// A torch CSV's actions as read: per rank its actions with the fields they come
// from, per field its compute actions, and whether it lists sends and receives.
struct CsvActions {
  std::vector<std::vector<Entry>> rows;
  std::vector<std::vector<std::vector<Action>>> turns;
  bool has_transfers = false;
};

absl::StatusOr<CsvActions> ParseCsvActions(const std::vector<absl::string_view>& lines,
                                           absl::string_view filename) {
  const int ranks = static_cast<int>(lines.size());
  CsvActions csv;
  csv.rows.resize(ranks);
  csv.turns.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    absl::string_view line = lines[r];
    if (line.empty()) continue;
    int column = 0;
    for (absl::string_view field : absl::StrSplit(line, ',')) {
      ++column;
      const std::string where = absl::StrCat(filename, ":", r + 1, ":", column, ": ");
      LOOM_ASSIGN_OR_RETURN(std::vector<Action> actions, ParseField(field, where));
      csv.turns[r].emplace_back();
      for (const Action& a : actions) {
        if (IsTransfer(a.type)) csv.has_transfers = true;
        if (Info(a.type).compute) csv.turns[r].back().push_back(a);
        csv.rows[r].push_back(Entry{a, r + 1, column});
      }
    }
  }
  return csv;
}

// How a CSV's stages sit on its ranks (the loop or the v layout), with its
// micro-batch count and whether its backward is split.
struct StageLayout {
  std::vector<int> rank_of;  // by stage
  int microbatches = 0;
  bool split = false;
  bool loop = false;  // the loop layout; else the v layout
};

absl::StatusOr<StageLayout> InferStageLayout(const std::vector<std::vector<Entry>>& rows,
                                             absl::string_view filename) {
  const int ranks = static_cast<int>(rows.size());
  StageLayout layout;
  std::vector<int>& rank_of = layout.rank_of;
  std::vector<const Entry*> first_of;
  for (int r = 0; r < ranks; ++r) {
    for (const Entry& e : rows[r]) {
      if (!Info(e.action.type).compute) continue;
      const int s = e.action.stage;
      if (s >= static_cast<int>(rank_of.size())) {
        rank_of.resize(s + 1, -1);
        first_of.resize(s + 1, nullptr);
      }
      if (rank_of[s] >= 0 && rank_of[s] != r) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(filename, e), "stage ", s, " is on rank ", r, " and on rank ", rank_of[s],
            " (at ", first_of[s]->line, ":", first_of[s]->column, ")"));
      }
      rank_of[s] = r;
      if (first_of[s] == nullptr) first_of[s] = &e;
      layout.microbatches = std::max(layout.microbatches, e.action.microbatch + 1);
      layout.split |= e.action.type == ActionType::kBackwardInput ||
                      e.action.type == ActionType::kBackwardWeight;
    }
  }
  const int stages = static_cast<int>(rank_of.size());
  if (stages == 0) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ": no compute actions"));
  }
  for (int s = 0; s < stages; ++s) {
    if (rank_of[s] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(filename, ": stage ", s, " has no actions (stages 0..", stages - 1, ")"));
    }
  }
  bool loop = stages % ranks == 0, v = stages == 2 * ranks;
  for (int s = 0; s < stages; ++s) {
    loop &= rank_of[s] == s % ranks;
    v &= rank_of[s] == (s < ranks ? s : 2 * ranks - 1 - s);
  }
  if (!loop && !v) {
    return absl::InvalidArgumentError(absl::StrCat(
        filename, ": stages sit on ranks [", absl::StrJoin(rank_of, ", "),
        "], neither the loop layout (stage s on rank s % ", ranks, ") nor the v layout"));
  }
  layout.loop = loop;
  return layout;
}

// The stage model of `layout` with the options' spans, and with --comm-steps the
// SEND and RECV blocks between its ranks.
absl::StatusOr<BlockModel> CsvStageModel(const StageLayout& layout, int ranks,
                                         const TorchImportOptions& options,
                                         absl::string_view filename) {
  StageCosts costs = options.costs;
  if (layout.split && costs.backward_weight == 0) costs.backward_weight = 1;
  if (!layout.split) costs.backward_weight = 0;
  if (options.comm_steps) costs.comm = 0;
  const int stages = static_cast<int>(layout.rank_of.size());
  auto made = MakeStageModel(ranks, stages, layout.loop ? "loop" : "v", costs);
  if (!made.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ": ", made.status().message()));
  }
  BlockModel model = *std::move(made);
  if (options.comm_steps) AddTransferBlocks(model, layout.rank_of, layout.split);
  return model;
}

// Per rank, the actions the schedule keeps, and the entries they come from (for
// errors; nullptr for sends and receives placed as torch's lowering does).
struct KeptActions {
  std::vector<std::vector<Action>> actions;
  std::vector<std::vector<const Entry*>> origin;
};

absl::StatusOr<KeptActions> KeepActions(const CsvActions& csv, const StageLayout& layout,
                                        const TorchImportOptions& options,
                                        absl::string_view filename) {
  const int ranks = static_cast<int>(csv.rows.size());
  KeptActions kept;
  kept.actions.resize(ranks);
  kept.origin.resize(ranks);
  if (options.comm_steps && !csv.has_transfers) {
    LOOM_ASSIGN_OR_RETURN(kept.actions, AddSendRecv(csv.turns, layout.rank_of, filename));
    for (int r = 0; r < ranks; ++r) kept.origin[r].assign(kept.actions[r].size(), nullptr);
    return kept;
  }
  for (int r = 0; r < ranks; ++r) {
    for (const Entry& e : csv.rows[r]) {
      const Action& a = e.action;
      const bool transfer = IsTransfer(a.type);
      if (!Info(a.type).compute && !(transfer && options.comm_steps)) continue;
      if (transfer && a.microbatch >= layout.microbatches) {
        return absl::InvalidArgumentError(absl::StrCat(Where(filename, e), "'", ActionText(a),
                                                       "': micro-batch beyond the computed ",
                                                       layout.microbatches));
      }
      kept.actions[r].push_back(a);
      kept.origin[r].push_back(&e);
    }
  }
  return kept;
}

// A full backward in a split model is its I then its W.
void ExpandFullBackwards(KeptActions& kept) {
  for (size_t r = 0; r < kept.actions.size(); ++r) {
    std::vector<Action> expanded;
    std::vector<const Entry*> expanded_origin;
    for (size_t i = 0; i < kept.actions[r].size(); ++i) {
      const Action& a = kept.actions[r][i];
      if (a.type == ActionType::kFullBackward) {
        expanded.push_back(Action{ActionType::kBackwardInput, a.stage, a.microbatch});
        expanded.push_back(Action{ActionType::kBackwardWeight, a.stage, a.microbatch});
        expanded_origin.insert(expanded_origin.end(), 2, kept.origin[r][i]);
      } else {
        expanded.push_back(a);
        expanded_origin.push_back(kept.origin[r][i]);
      }
    }
    kept.actions[r] = std::move(expanded);
    kept.origin[r] = std::move(expanded_origin);
  }
}

}  // namespace

absl::StatusOr<std::string> ScheduleToTorchCsv(const BlockModel& model, const Schedule& schedule,
                                               const SimResult* sim) {
  const int n = model.num_blocks();
  std::vector<std::string> action(n);
  for (int b = 0; b < n; ++b) {
    const Block& block = model.blocks[b];
    if (block.stage < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "torch csv: block '", block.name, "' has no pipeline stage; torch actions need one"));
    }
    if (block.devices.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("torch csv: block '", block.name, "' runs on ", block.devices.size(),
                       " devices; a torch action runs on one rank"));
    }
    const char letter = BlockKindLetter(block.kind);
    if (letter != '\0') {
      action[b] = absl::StrCat(block.stage, std::string(1, letter));
      continue;
    }
    for (ActionType t : {ActionType::kSendF, ActionType::kRecvF, ActionType::kSendB,
                         ActionType::kRecvB}) {
      if (block.name == BlockName(t, block.stage)) action[b] = absl::StrCat(block.stage, Info(t).text);
    }
    if (action[b].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("torch csv: block '", block.name, "' of kind '",
                                                     BlockKindName(block.kind),
                                                     "' has no torch action type"));
    }
  }
  const bool timed = sim != nullptr && !sim->start.empty();
  int64_t t0 = 0;
  if (timed) t0 = *std::min_element(sim->start.begin(), sim->start.end());
  // A timed row has a column per time unit.
  constexpr int64_t kMaxColumns = 1000000;
  if (timed && sim->makespan > kMaxColumns) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch csv: the schedule spans ", sim->makespan, " time units; a timed row writes a "
        "column per unit, at most ", kMaxColumns, " (use --gantt or --trace)"));
  }
  std::string out;
  for (const std::vector<Instance>& row : schedule.order) {
    std::vector<std::string> fields;
    for (const Instance& x : row) {
      if (x.block < 0 || x.block >= n) {
        return absl::InvalidArgumentError(absl::StrCat("torch csv: unknown block ", x.block));
      }
      if (timed) {
        const size_t id = static_cast<size_t>(x.microbatch) * n + x.block;
        if (id < sim->start.size()) {
          const int64_t column = sim->start[id] - t0;
          while (static_cast<int64_t>(fields.size()) < column) fields.emplace_back();
        }
      }
      fields.push_back(absl::StrCat(action[x.block], x.microbatch));
    }
    absl::StrAppend(&out, absl::StrJoin(fields, ","), "\r\n");
  }
  return out;
}

absl::StatusOr<LoadedSchedule> ScheduleFromTorchCsv(absl::string_view text,
                                                    absl::string_view filename,
                                                    const TorchImportOptions& options) {
  const std::vector<absl::string_view> lines = CsvRows(text);
  const int ranks = static_cast<int>(lines.size());
  if (ranks == 0) return absl::InvalidArgumentError(absl::StrCat(filename, ": no rows"));
  LOOM_ASSIGN_OR_RETURN(const CsvActions csv, ParseCsvActions(lines, filename));
  LOOM_ASSIGN_OR_RETURN(const StageLayout layout, InferStageLayout(csv.rows, filename));
  LoadedSchedule out;
  LOOM_ASSIGN_OR_RETURN(out.model, CsvStageModel(layout, ranks, options, filename));
  LOOM_ASSIGN_OR_RETURN(KeptActions kept, KeepActions(csv, layout, options, filename));
  if (layout.split) ExpandFullBackwards(kept);

  Schedule& s = out.schedule;
  s.microbatches = layout.microbatches;
  s.name = "torch";
  s.order.assign(ranks, {});
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < kept.actions[r].size(); ++i) {
      const Action& a = kept.actions[r][i];
      const int block = out.model.Find(BlockName(a.type, a.stage));
      if (block < 0) {
        const std::string where = kept.origin[r][i] != nullptr
                                      ? Where(filename, *kept.origin[r][i])
                                      : absl::StrCat(filename, ": ");
        return absl::InvalidArgumentError(absl::StrCat(
            where, "'", ActionText(a), "': stage ", a.stage,
            " and the stage it talks to are on one rank, nothing is sent between them"));
      }
      s.order[r].push_back(Instance{block, a.microbatch});
    }
  }
  return out;
}

}  // namespace loom::schedule
