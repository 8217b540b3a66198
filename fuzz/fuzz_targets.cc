#include "fuzz/fuzz_targets.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "api/loom.h"
#include "ir/json_format.h"
#include "ir/plan_json.h"
#include "ir/text_format.h"
#include "schedule/block_model.h"
#include "schedule/schedule.h"
#include "schedule/torch_csv.h"
#include "verify/proof_cache.h"

namespace loom::fuzz {
namespace {

// Inputs past this are not worth the fuzzer's time: the readers' own bounds are
// tested on purpose-built inputs (tests/ir/input_bounds_test.cc).
constexpr size_t kMaxInput = size_t{1} << 20;

absl::string_view Text(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

// A broken promise: the input is saved by libFuzzer as the crash reproducer.
[[noreturn]] void Broken(const char* target, const std::string& what) {
  std::fprintf(stderr, "loom fuzz %s: %s\n", target, what.c_str());
  std::abort();
}

}  // namespace

int GraphText(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  auto graph = ir::ParseGraph(Text(data, size), "<fuzz>");
  if (!graph.ok()) return 0;
  // What reads prints back to text that reads to the same graph.
  const std::string printed = ir::PrintGraph(*graph);
  auto again = ir::ParseGraph(printed, "<printed>");
  if (!again.ok()) Broken("graph_text", "printed graph does not read: " + again.status().ToString());
  if (!(*again == *graph)) Broken("graph_text", "printed graph reads differently:\n" + printed);
  return 0;
}

int GraphJson(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  auto graph = ir::GraphFromJson(Text(data, size), "<fuzz>");
  if (!graph.ok()) return 0;
  auto again = ir::GraphFromJson(ir::GraphToJson(*graph), "<written>");
  if (!again.ok()) Broken("graph_json", "written graph does not read: " + again.status().ToString());
  if (!(*again == *graph)) Broken("graph_json", "written graph reads differently");
  return 0;
}

int PlanJson(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  auto plan = ir::PlanFromJson(Text(data, size), "<fuzz>");
  if (!plan.ok()) return 0;
  const std::string written = ir::PlanToJson(*plan);
  auto again = ir::PlanFromJson(written, "<written>");
  if (!again.ok()) Broken("plan_json", "written plan does not read: " + again.status().ToString());
  if (ir::PlanToJson(*again) != written) Broken("plan_json", "written plan reads differently");
  return 0;
}

int TrainConfig(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  (void)ParseTrainConfig(std::string(Text(data, size)), "<fuzz>");
  return 0;
}

int BlockModel(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  auto model = schedule::BlockModelFromJson(Text(data, size), "<fuzz>");
  if (!model.ok()) return 0;
  const std::string written = schedule::BlockModelToJson(*model);
  auto again = schedule::BlockModelFromJson(written, "<written>");
  if (!again.ok()) Broken("block_model", "written model does not read: " + again.status().ToString());
  if (schedule::BlockModelToJson(*again) != written) Broken("block_model", "written model reads differently");
  return 0;
}

int ScheduleJson(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  auto loaded = schedule::ScheduleFromJson(Text(data, size), "<fuzz>");
  if (!loaded.ok()) return 0;
  const std::string written = schedule::ScheduleToJson(loaded->model, loaded->schedule);
  auto again = schedule::ScheduleFromJson(written, "<written>");
  if (!again.ok()) Broken("schedule_json", "written schedule does not read: " + again.status().ToString());
  if (schedule::ScheduleToJson(again->model, again->schedule) != written) {
    Broken("schedule_json", "written schedule reads differently");
  }
  return 0;
}

int TorchCsv(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  (void)schedule::ScheduleFromTorchCsv(Text(data, size), "<fuzz>");
  return 0;
}

int ProofCache(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  // Every key read writes back to a line that reads to the same key alone.
  for (const std::string& key : verify::ProofCache::Parse(Text(data, size))) {
    const auto again = verify::ProofCache::Parse(verify::ProofCache::Line(key));
    if (again.size() != 1 || !again.contains(key)) Broken("proof_cache", "a key does not round-trip");
  }
  return 0;
}

const std::vector<Target>& AllTargets() {
  static const std::vector<Target> targets = {
      {"graph_text", GraphText}, {"graph_json", GraphJson},   {"plan_json", PlanJson},
      {"train_config", TrainConfig}, {"block_model", BlockModel},
      {"schedule_json", ScheduleJson}, {"torch_csv", TorchCsv}, {"proof_cache", ProofCache}};
  return targets;
}

}  // namespace loom::fuzz
