#ifndef LOOM_SCHEDULE_BLOCK_MODEL_H_
#define LOOM_SCHEDULE_BLOCK_MODEL_H_

// The block model the scheduler works on: the blocks of one micro-batch (a pipeline
// stage's forward, its backward, a tensor-parallel piece spanning every device, ...),
// each with a span (time), a memory delta charged on each of its devices when it
// starts, the devices it occupies for its whole span, and data dependencies inside
// the micro-batch. N micro-batches are N copies of these blocks.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/json_util.h"

namespace loom::schedule {

// X(enumerator, name, action letter). Sorted by name. The letters are those of
// torch.distributed.pipelining's actions (F forward, B full backward, I backward
// for the input gradient, W backward for the weight gradient); `other` has none.
#define LOOM_BLOCK_KIND_LIST(X)               \
  X(kBackward, "backward", 'B')               \
  X(kBackwardInput, "backward_input", 'I')    \
  X(kBackwardWeight, "backward_weight", 'W')  \
  X(kForward, "forward", 'F')                 \
  X(kOther, "other", '\0')

enum class BlockKind {
#define LOOM_BLOCK_KIND_ENUM_(e, name, letter) e,
  LOOM_BLOCK_KIND_LIST(LOOM_BLOCK_KIND_ENUM_)
#undef LOOM_BLOCK_KIND_ENUM_
};
absl::string_view BlockKindName(BlockKind kind);
absl::StatusOr<BlockKind> ParseBlockKind(absl::string_view name);
// 'F', 'B', 'I', 'W', or '\0' for kOther.
char BlockKindLetter(BlockKind kind);
absl::StatusOr<BlockKind> BlockKindFromLetter(char letter);

// `block` must finish `lag` time units before the dependent block starts (a
// transfer between devices, for instance).
struct Dep {
  int block = 0;
  int64_t lag = 0;
  bool operator==(const Dep& o) const { return block == o.block && lag == o.lag; }
};

struct Block {
  std::string name;                 // unique in the model: "F0", "B3", "F_all"
  BlockKind kind = BlockKind::kOther;
  int stage = -1;                   // pipeline stage it computes; -1 when none
  int64_t span = 1;                 // time it occupies its devices, > 0
  int64_t memory = 0;               // change of memory on each of its devices, at start
  std::vector<int> devices;         // the devices it occupies, sorted, distinct
  std::vector<Dep> preds;           // blocks of the same micro-batch it waits for
  bool operator==(const Block& o) const;
};

// A block model with its memory caps. Indices of blocks are their ids.
struct BlockModel {
  std::string name;
  int num_devices = 0;
  std::vector<Block> blocks;
  // Memory cap per device; empty: unlimited.
  std::vector<int64_t> memory_cap;

  int num_blocks() const { return static_cast<int>(blocks.size()); }
  bool has_cap() const { return !memory_cap.empty(); }
  void SetUniformCap(int64_t cap) { memory_cap.assign(num_devices, cap); }
  // Index of the block called `name`, or -1.
  int Find(absl::string_view block_name) const;
  bool operator==(const BlockModel& o) const;
};

// Structural checks with one clear error each ("block 'B3': device 5 does not exist
// (the model has 4 devices)", "dependency cycle: 'a' -> 'b' -> 'a'", "memory cap 2
// on device 0 is below what one micro-batch needs (3)"). The cap check uses the
// least peak any order of one micro-batch's blocks reaches on the device (exact
// for up to 20 blocks on a device, a lower bound above that: a refusal is a proof),
// where no prefix of one micro-batch can go below zero (single_floor).
absl::Status ValidateBlockModel(const BlockModel& model);

// Bounds on a block model's numbers, so that every time and memory sum over a
// schedule (up to ir::kMaxMicrobatches micro-batches of every block) stays far
// from 64-bit overflow and a time grid (the torch CSV, the search's columns)
// stays finite: spans, lags and start times are time units, memory is in the
// model's unit (bytes for plans).
inline constexpr int64_t kMaxSpan = int64_t{1} << 20;
inline constexpr int64_t kMaxBlockMemory = int64_t{1} << 40;
inline constexpr int64_t kMaxStartTime = int64_t{1} << 40;

// Facts derived from a valid model, computed once.
struct ModelFacts {
  std::vector<int> topo;                  // a topological order, ties by id
  std::vector<std::vector<int>> succs;    // successor lists (block ids)
  std::vector<std::vector<int>> on_device;  // blocks per device, by id
  std::vector<int64_t> work;              // per device: sum of spans of one micro-batch
  std::vector<int64_t> head;              // per block: longest path from a source to its start
  std::vector<int64_t> tail;              // per block: longest path from its end to a sink end
  int64_t critical_path = 0;              // one micro-batch alone, unlimited devices
  int64_t max_work = 0;                   // max over devices of work
  std::vector<int64_t> net_memory;        // per device: sum of deltas of one micro-batch
  // Per device: the least peak of one micro-batch alone (exact up to 20 blocks on the
  // device, a lower bound above), so a cap below it is proved too small.
  std::vector<int64_t> single_peak;
  // Per device: a lower bound on the least level a prefix of one micro-batch's blocks
  // reaches (exact up to 20 blocks); below zero, micro-batches interleaved can stay
  // lower than one alone.
  std::vector<int64_t> single_floor;
};
absl::StatusOr<ModelFacts> AnalyzeBlockModel(const BlockModel& model);

// Lower bound on the makespan of any valid schedule of N micro-batches:
// max over devices of (least head of its blocks + N * its work + least tail).
int64_t MakespanLowerBound(const ModelFacts& facts, int microbatches);

// The inference form of a training model: backward blocks (B, I, W) dropped with
// the dependencies through them, every memory delta set to 0.
BlockModel InferenceForm(const BlockModel& model);

// Versioned JSON form (docs/formats.md). Dependencies are written by block name;
// the reader accepts names or indices, and a single number for a uniform cap.
inline constexpr int kBlockModelJsonVersion = 1;
std::string BlockModelToJson(const BlockModel& model);
absl::StatusOr<BlockModel> BlockModelFromJson(absl::string_view text,
                                              absl::string_view filename = "<blocks>");
absl::StatusOr<BlockModel> LoadBlockModelFile(const std::string& path);
// The same, as a JSON value / read from one (for formats that embed a block model;
// `path` is the JSON path of the value, "" at the top).
ir::OrderedJson BlockModelJsonValue(const BlockModel& model);
absl::StatusOr<BlockModel> ReadBlockModelJson(const ir::JsonReader& reader, const ir::Json& j,
                                              const std::string& path);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_BLOCK_MODEL_H_
