#include "schedule/block_model.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"

namespace loom::schedule {
namespace {

struct KindInfo {
  BlockKind kind;
  absl::string_view name;
  char letter;
};
constexpr KindInfo kKinds[] = {
#define LOOM_BLOCK_KIND_INFO_(e, name, letter) {BlockKind::e, name, letter},
    LOOM_BLOCK_KIND_LIST(LOOM_BLOCK_KIND_INFO_)
#undef LOOM_BLOCK_KIND_INFO_
};

std::string Quoted(absl::string_view name) { return absl::StrCat("'", name, "'"); }

// Least peak of the running sum over the orders of `blocks` (all on one device)
// that respect `before` (transitive precedence among them), exact by a search over
// subsets for up to 20 blocks. Above that, a lower bound: when block b starts, every
// block that must precede it has run, and at most every block that frees memory and
// need not follow it; the first block is one with no predecessor among them; and the
// level at the end is reached by every order.
//
// `floor` receives a lower bound on the least level a prefix of such an order reaches
// (exact up to 20 blocks). Above, a prefix holding some of the blocks that free memory
// holds every block that must precede them; each block that takes memory is shared
// evenly (rounded down) among the freeing blocks it must precede, so the prefix is at
// least the sum, over its freeing blocks, of their delta plus their shares. Below
// zero, a block frees memory its micro-batch may not have taken yet, and micro-batches
// interleaved can then run lower than one alone.
int64_t LeastPeak(const std::vector<int>& blocks, const BlockModel& model,
                  const std::vector<std::vector<bool>>& before, int64_t* floor) {
  const int n = static_cast<int>(blocks.size());
  *floor = 0;
  if (n == 0) return 0;
  if (n > 20) {
    std::vector<int64_t> freeing(model.num_blocks(), 0);  // freeing blocks each precedes
    for (int a : blocks) {
      for (int b : blocks) {
        if (before[a][b] && model.blocks[b].memory < 0) ++freeing[a];
      }
    }
    for (int b : blocks) {
      if (model.blocks[b].memory >= 0) continue;
      int64_t level = model.blocks[b].memory;
      for (int a : blocks) {
        if (before[a][b] && model.blocks[a].memory > 0) level += model.blocks[a].memory / freeing[a];
      }
      *floor += std::min<int64_t>(0, level);
    }
    int64_t end = 0;
    for (int b : blocks) end += model.blocks[b].memory;
    int64_t bound = std::max<int64_t>(0, end);
    int64_t first = std::numeric_limits<int64_t>::max();
    for (int b : blocks) {
      bool source = true;
      for (int a : blocks) source = source && !before[a][b];
      if (source) first = std::min(first, model.blocks[b].memory);
    }
    bound = std::max(bound, first);
    for (int b : blocks) {
      int64_t level = model.blocks[b].memory;
      for (int a : blocks) {
        if (a == b || before[b][a]) continue;
        const int64_t m = model.blocks[a].memory;
        if (before[a][b]) {
          level += m;
        } else if (m < 0) {
          level += m;
        }
      }
      bound = std::max(bound, level);
    }
    return bound;
  }
  std::vector<uint32_t> need(n, 0);  // blocks that must come before block i
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (before[blocks[j]][blocks[i]]) need[i] |= 1u << j;
    }
  }
  const uint32_t full = (n == 32) ? ~0u : ((1u << n) - 1);
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // best[mask]: least peak reaching the state where exactly `mask` has run.
  std::vector<int64_t> best(size_t{1} << n, kInf);
  std::vector<int64_t> level(size_t{1} << n, 0);
  for (uint32_t mask = 1; mask <= full; ++mask) {
    const int low = __builtin_ctz(mask);
    level[mask] = level[mask & (mask - 1)] + model.blocks[blocks[low]].memory;
  }
  best[0] = 0;
  for (uint32_t mask = 0; mask <= full; ++mask) {
    if (best[mask] == kInf) continue;
    *floor = std::min(*floor, level[mask]);  // every mask reached is a prefix
    if (mask == full) break;
    for (int i = 0; i < n; ++i) {
      if ((mask >> i) & 1u) continue;
      if ((need[i] & mask) != need[i]) continue;
      const uint32_t next = mask | (1u << i);
      const int64_t peak = std::max(best[mask], level[next]);
      best[next] = std::min(best[next], peak);
    }
  }
  return best[full];
}

}  // namespace

absl::string_view BlockKindName(BlockKind kind) {
  for (const KindInfo& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "?";
}

absl::StatusOr<BlockKind> ParseBlockKind(absl::string_view name) {
  for (const KindInfo& k : kKinds) {
    if (k.name == name) return k.kind;
  }
  std::vector<std::string> names;
  for (const KindInfo& k : kKinds) names.emplace_back(k.name);
  return absl::InvalidArgumentError(absl::StrCat("unknown block kind '", name, "' (known: ",
                                                 absl::StrJoin(names, ", "), ")"));
}

char BlockKindLetter(BlockKind kind) {
  for (const KindInfo& k : kKinds) {
    if (k.kind == kind) return k.letter;
  }
  return '\0';
}

absl::StatusOr<BlockKind> BlockKindFromLetter(char letter) {
  for (const KindInfo& k : kKinds) {
    if (k.letter != '\0' && k.letter == letter) return k.kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown action type '", std::string(1, letter), "' (known: F, B, I, W)"));
}

bool Block::operator==(const Block& o) const {
  return name == o.name && kind == o.kind && stage == o.stage && span == o.span &&
         memory == o.memory && devices == o.devices && preds == o.preds;
}

int BlockModel::Find(absl::string_view block_name) const {
  for (int i = 0; i < num_blocks(); ++i) {
    if (blocks[i].name == block_name) return i;
  }
  return -1;
}

bool BlockModel::operator==(const BlockModel& o) const {
  return name == o.name && num_devices == o.num_devices && blocks == o.blocks &&
         memory_cap == o.memory_cap;
}

namespace {

// Structure only (no caps): names, devices, spans, dependency ids, acyclicity.
absl::Status ValidateStructure(const BlockModel& model) {
  if (model.num_devices <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block model '", model.name, "': needs at least one device"));
  }
  if (model.blocks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("block model '", model.name, "': has no blocks"));
  }
  absl::flat_hash_map<std::string, int> names;
  for (int i = 0; i < model.num_blocks(); ++i) {
    const Block& b = model.blocks[i];
    const std::string where = absl::StrCat("block ", Quoted(b.name), " (index ", i, ")");
    if (b.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("block ", i, ": has no name"));
    }
    if (!names.emplace(b.name, i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": name already used by block ", names[b.name]));
    }
    if (b.span <= 0 || b.span > kMaxSpan) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": span must be in 1..", kMaxSpan, ", got ", b.span));
    }
    if (b.memory < -kMaxBlockMemory || b.memory > kMaxBlockMemory) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": memory ", b.memory,
                                                     " is outside -", kMaxBlockMemory, "..",
                                                     kMaxBlockMemory));
    }
    if (b.devices.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": runs on no device"));
    }
    for (size_t k = 0; k < b.devices.size(); ++k) {
      const int d = b.devices[k];
      if (d < 0 || d >= model.num_devices) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": device ", d,
                                                       " does not exist (the model has ",
                                                       model.num_devices, " devices)"));
      }
      if (k > 0 && b.devices[k - 1] >= d) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": devices must be sorted and distinct"));
      }
    }
    for (const Dep& p : b.preds) {
      if (p.block < 0 || p.block >= model.num_blocks()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": depends on block ", p.block, ", which does not exist"));
      }
      if (p.block == i) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": depends on itself"));
      }
      if (p.lag < 0 || p.lag > kMaxSpan) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": lag ", p.lag, " after ", Quoted(model.blocks[p.block].name),
                         " is outside 0..", kMaxSpan));
      }
    }
  }
  // Cycle detection by depth-first search over predecessors.
  const int n = model.num_blocks();
  std::vector<int> state(n, 0);  // 0 new, 1 on stack, 2 done
  std::vector<int> parent(n, -1);
  for (int root = 0; root < n; ++root) {
    if (state[root] != 0) continue;
    std::vector<std::pair<int, size_t>> stack = {{root, 0}};
    state[root] = 1;
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      if (next < model.blocks[v].preds.size()) {
        const int u = model.blocks[v].preds[next++].block;
        if (state[u] == 1) {
          // v waits for u, which (through the stack) waits for v.
          std::vector<std::string> cycle = {Quoted(model.blocks[u].name)};
          for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
            cycle.push_back(Quoted(model.blocks[it->first].name));
            if (it->first == u) break;
          }
          std::reverse(cycle.begin(), cycle.end());
          return absl::InvalidArgumentError(absl::StrCat(
              "block model '", model.name, "': dependency cycle: ", absl::StrJoin(cycle, " -> ")));
        }
        if (state[u] == 0) {
          state[u] = 1;
          stack.push_back({u, 0});
        }
      } else {
        state[v] = 2;
        stack.pop_back();
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelFacts> AnalyzeBlockModel(const BlockModel& model) {
  LOOM_RETURN_IF_ERROR(ValidateStructure(model));
  const int n = model.num_blocks();
  ModelFacts f;
  f.succs.assign(n, {});
  std::vector<int> indegree(n, 0);
  for (int b = 0; b < n; ++b) {
    for (const Dep& p : model.blocks[b].preds) {
      f.succs[p.block].push_back(b);
      ++indegree[b];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int b = 0; b < n; ++b) {
    if (indegree[b] == 0) ready.push(b);
  }
  while (!ready.empty()) {
    const int b = ready.top();
    ready.pop();
    f.topo.push_back(b);
    for (int s : f.succs[b]) {
      if (--indegree[s] == 0) ready.push(s);
    }
  }
  LOOM_RET_CHECK(static_cast<int>(f.topo.size()) == n) << "cycle after validation";
  f.on_device.assign(model.num_devices, {});
  f.work.assign(model.num_devices, 0);
  f.net_memory.assign(model.num_devices, 0);
  for (int b = 0; b < n; ++b) {
    for (int d : model.blocks[b].devices) {
      f.on_device[d].push_back(b);
      f.work[d] += model.blocks[b].span;
      f.net_memory[d] += model.blocks[b].memory;
    }
  }
  f.max_work = *std::max_element(f.work.begin(), f.work.end());
  f.head.assign(n, 0);
  for (int b : f.topo) {
    for (const Dep& p : model.blocks[b].preds) {
      f.head[b] = std::max(f.head[b], f.head[p.block] + model.blocks[p.block].span + p.lag);
    }
  }
  f.tail.assign(n, 0);
  for (auto it = f.topo.rbegin(); it != f.topo.rend(); ++it) {
    const int b = *it;
    for (int s : f.succs[b]) {
      int64_t lag = 0;
      for (const Dep& p : model.blocks[s].preds) {
        if (p.block == b) lag = std::max(lag, p.lag);
      }
      f.tail[b] = std::max(f.tail[b], lag + model.blocks[s].span + f.tail[s]);
    }
  }
  for (int b = 0; b < n; ++b) {
    f.critical_path = std::max(f.critical_path, f.head[b] + model.blocks[b].span + f.tail[b]);
  }
  // Transitive precedence, for the least single-micro-batch peak.
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));
  for (int b : f.topo) {
    for (const Dep& p : model.blocks[b].preds) {
      before[p.block][b] = true;
      for (int a = 0; a < n; ++a) {
        if (before[a][p.block]) before[a][b] = true;
      }
    }
  }
  f.single_peak.assign(model.num_devices, 0);
  f.single_floor.assign(model.num_devices, 0);
  std::vector<int> position(n, 0);
  for (int i = 0; i < n; ++i) position[f.topo[i]] = i;
  for (int d = 0; d < model.num_devices; ++d) {
    std::vector<int> blocks = f.on_device[d];
    std::sort(blocks.begin(), blocks.end(),
              [&](int a, int b) { return position[a] < position[b]; });
    f.single_peak[d] = LeastPeak(blocks, model, before, &f.single_floor[d]);
  }
  return f;
}

absl::Status ValidateBlockModel(const BlockModel& model) {
  LOOM_ASSIGN_OR_RETURN(ModelFacts facts, AnalyzeBlockModel(model));
  if (!model.has_cap()) return absl::OkStatus();
  if (static_cast<int>(model.memory_cap.size()) != model.num_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("block model '", model.name, "': ", model.memory_cap.size(),
                     " memory caps for ", model.num_devices, " devices"));
  }
  // A proof for any number of micro-batches only where no prefix of one micro-batch
  // goes below zero: the level is then at least the part of any one micro-batch that
  // has run, which reaches that micro-batch's peak. Otherwise the other micro-batches'
  // freeing blocks could run first (the search refuses one micro-batch alone).
  for (int d = 0; d < model.num_devices; ++d) {
    if (model.memory_cap[d] < facts.single_peak[d] && facts.single_floor[d] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "block model '", model.name, "': memory cap ", model.memory_cap[d], " on device ", d,
          " is below what one micro-batch needs (", facts.single_peak[d], ")"));
    }
  }
  return absl::OkStatus();
}

int64_t MakespanLowerBound(const ModelFacts& facts, int microbatches) {
  int64_t bound = 0;
  for (size_t d = 0; d < facts.on_device.size(); ++d) {
    if (facts.on_device[d].empty()) continue;
    int64_t head = std::numeric_limits<int64_t>::max();
    int64_t tail = std::numeric_limits<int64_t>::max();
    for (int b : facts.on_device[d]) {
      head = std::min(head, facts.head[b]);
      tail = std::min(tail, facts.tail[b]);
    }
    bound = std::max(bound, head + microbatches * facts.work[d] + tail);
  }
  return std::max(bound, facts.critical_path);
}

BlockModel InferenceForm(const BlockModel& model) {
  BlockModel out;
  out.name = model.name;
  out.num_devices = model.num_devices;
  std::vector<int> new_id(model.num_blocks(), -1);
  for (int b = 0; b < model.num_blocks(); ++b) {
    const BlockKind k = model.blocks[b].kind;
    if (k == BlockKind::kBackward || k == BlockKind::kBackwardInput ||
        k == BlockKind::kBackwardWeight) {
      continue;
    }
    new_id[b] = static_cast<int>(out.blocks.size());
    Block copy = model.blocks[b];
    copy.memory = 0;
    copy.preds.clear();
    for (const Dep& p : model.blocks[b].preds) {
      if (new_id[p.block] >= 0) copy.preds.push_back({new_id[p.block], p.lag});
    }
    out.blocks.push_back(std::move(copy));
  }
  return out;
}

// ---------------------------------------------------------------------------
// JSON

std::string BlockModelToJson(const BlockModel& model) {
  return ir::DumpJson(BlockModelJsonValue(model)) + "\n";
}

ir::OrderedJson BlockModelJsonValue(const BlockModel& model) {
  ir::OrderedJson j;
  j["format"] = "loom.blocks";
  j["version"] = kBlockModelJsonVersion;
  j["name"] = model.name;
  j["devices"] = model.num_devices;
  if (model.has_cap()) j["memory_cap"] = model.memory_cap;
  ir::OrderedJson blocks = ir::OrderedJson::array();
  for (const Block& b : model.blocks) {
    ir::OrderedJson jb;
    jb["name"] = b.name;
    jb["kind"] = std::string(BlockKindName(b.kind));
    if (b.stage >= 0) jb["stage"] = b.stage;
    jb["span"] = b.span;
    jb["memory"] = b.memory;
    jb["devices"] = b.devices;
    ir::OrderedJson preds = ir::OrderedJson::array();
    for (const Dep& p : b.preds) {
      if (p.lag == 0) {
        preds.push_back(model.blocks[p.block].name);
      } else {
        preds.push_back({{"block", model.blocks[p.block].name}, {"lag", p.lag}});
      }
    }
    jb["after"] = preds;
    blocks.push_back(jb);
  }
  j["blocks"] = blocks;
  return j;
}

absl::StatusOr<BlockModel> ReadBlockModelJson(const ir::JsonReader& r, const ir::Json& j,
                                          const std::string& path) {
  static const std::vector<std::string>* const kModelKeys = new std::vector<std::string>{
      "format", "version", "name", "devices", "memory_cap", "blocks"};
  static const std::vector<std::string>* const kBlockKeys = new std::vector<std::string>{
      "name", "kind", "stage", "span", "memory", "devices", "after"};
  LOOM_RETURN_IF_ERROR(r.ExpectKeys(j, path, *kModelKeys));
  auto sub = [&](absl::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  };
  BlockModel model;
  if (auto it = j.find("format"); it != j.end()) {
    LOOM_ASSIGN_OR_RETURN(std::string format, r.String(*it, sub("format")));
    if (format != "loom.blocks") {
      return r.Error(sub("format"), absl::StrCat("expected \"loom.blocks\", got \"", format, "\""));
    }
  }
  if (auto it = j.find("version"); it != j.end()) {
    LOOM_ASSIGN_OR_RETURN(int64_t version, r.Int(*it, sub("version")));
    if (version != kBlockModelJsonVersion) {
      return r.Error(sub("version"), absl::StrCat("unsupported version ", version,
                                                     " (this build reads ",
                                                     kBlockModelJsonVersion, ")"));
    }
  }
  if (auto it = j.find("name"); it != j.end()) {
    LOOM_ASSIGN_OR_RETURN(model.name, r.String(*it, sub("name")));
  }
  LOOM_ASSIGN_OR_RETURN(const ir::Json* devices, r.Field(j, "devices", path));
  LOOM_ASSIGN_OR_RETURN(int64_t num_devices, r.Int(*devices, sub("devices")));
  if (num_devices <= 0 || num_devices > 1 << 16) {
    return r.Error(sub("devices"),
                   absl::StrCat("device count must be in [1, 65536], got ", num_devices));
  }
  model.num_devices = static_cast<int>(num_devices);
  LOOM_ASSIGN_OR_RETURN(const ir::Json* blocks, r.Field(j, "blocks", path));
  LOOM_RETURN_IF_ERROR(r.ExpectArray(*blocks, sub("blocks")));
  // Names first, so dependencies may name later blocks.
  absl::flat_hash_map<std::string, int> index;
  for (size_t i = 0; i < blocks->size(); ++i) {
    const std::string bpath = absl::StrCat(sub("blocks"), "[", i, "]");
    LOOM_RETURN_IF_ERROR(r.ExpectKeys((*blocks)[i], bpath, *kBlockKeys));
    LOOM_ASSIGN_OR_RETURN(const ir::Json* name, r.Field((*blocks)[i], "name", bpath));
    LOOM_ASSIGN_OR_RETURN(std::string text, r.String(*name, bpath + ".name"));
    if (!index.emplace(text, static_cast<int>(i)).second) {
      return r.Error(bpath + ".name", absl::StrCat("block name '", text, "' used twice"));
    }
    Block b;
    b.name = text;
    model.blocks.push_back(b);
  }
  for (size_t i = 0; i < blocks->size(); ++i) {
    const ir::Json& jb = (*blocks)[i];
    const std::string bpath = absl::StrCat(sub("blocks"), "[", i, "]");
    Block& b = model.blocks[i];
    if (auto it = jb.find("kind"); it != jb.end()) {
      LOOM_ASSIGN_OR_RETURN(std::string kind, r.String(*it, bpath + ".kind"));
      auto parsed = ParseBlockKind(kind);
      if (!parsed.ok()) return r.Wrap(bpath + ".kind", parsed.status());
      b.kind = *parsed;
    }
    if (auto it = jb.find("stage"); it != jb.end()) {
      LOOM_ASSIGN_OR_RETURN(b.stage, r.Int32(*it, bpath + ".stage"));
    }
    if (auto it = jb.find("span"); it != jb.end()) {
      LOOM_ASSIGN_OR_RETURN(b.span, r.Int(*it, bpath + ".span"));
    }
    if (auto it = jb.find("memory"); it != jb.end()) {
      LOOM_ASSIGN_OR_RETURN(b.memory, r.Int(*it, bpath + ".memory"));
    }
    LOOM_ASSIGN_OR_RETURN(const ir::Json* devs, r.Field(jb, "devices", bpath));
    LOOM_ASSIGN_OR_RETURN(b.devices, r.IdList(*devs, bpath + ".devices"));
    std::sort(b.devices.begin(), b.devices.end());
    if (auto it = jb.find("after"); it != jb.end()) {
      LOOM_RETURN_IF_ERROR(r.ExpectArray(*it, bpath + ".after"));
      for (size_t k = 0; k < it->size(); ++k) {
        const std::string ppath = absl::StrCat(bpath, ".after[", k, "]");
        const ir::Json* ref = &(*it)[k];
        Dep dep;
        if (ref->is_object()) {
          static const std::vector<std::string>* const kDepKeys =
              new std::vector<std::string>{"block", "lag"};
          LOOM_RETURN_IF_ERROR(r.ExpectKeys(*ref, ppath, *kDepKeys));
          if (auto lag = ref->find("lag"); lag != ref->end()) {
            LOOM_ASSIGN_OR_RETURN(dep.lag, r.Int(*lag, ppath + ".lag"));
          }
          LOOM_ASSIGN_OR_RETURN(ref, r.Field(*ref, "block", ppath));
        }
        if (ref->is_string()) {
          auto found = index.find(ref->get<std::string>());
          if (found == index.end()) {
            return r.Error(ppath, absl::StrCat("unknown block '", ref->get<std::string>(), "'"));
          }
          dep.block = found->second;
        } else {
          LOOM_ASSIGN_OR_RETURN(int64_t id, r.Int(*ref, ppath));
          if (id < 0 || id >= static_cast<int64_t>(blocks->size())) {
            return r.Error(ppath, absl::StrCat("block index ", id, " out of range"));
          }
          dep.block = static_cast<int>(id);
        }
        b.preds.push_back(dep);
      }
    }
  }
  if (auto it = j.find("memory_cap"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      for (size_t d = 0; d < it->size(); ++d) {
        LOOM_ASSIGN_OR_RETURN(int64_t cap, r.Int((*it)[d], absl::StrCat(sub("memory_cap"), "[", d, "]")));
        model.memory_cap.push_back(cap);
      }
    } else {
      LOOM_ASSIGN_OR_RETURN(int64_t cap, r.Int(*it, sub("memory_cap")));
      model.SetUniformCap(cap);
    }
  }
  auto valid = ValidateBlockModel(model);
  if (!valid.ok()) return r.Error(path, valid.message());
  return model;
}

absl::StatusOr<BlockModel> BlockModelFromJson(absl::string_view text, absl::string_view filename) {
  ir::JsonReader r(filename);
  ir::Json j;
  try {
    j = ir::Json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(filename, ": ", ir::JsonExceptionMessage(e)));
  }
  return ReadBlockModelJson(r, j, "");
}

absl::StatusOr<BlockModel> LoadBlockModelFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, ir::ReadTextFile(path));
  return BlockModelFromJson(text, path);
}

}  // namespace loom::schedule
