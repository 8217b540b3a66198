#ifndef LOOM_IR_PLAN_JSON_H_
#define LOOM_IR_PLAN_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/plan.h"

namespace loom::ir {

inline constexpr int kPlanJsonVersion = 1;

// Versioned JSON form of a plan, explicit or factored (schema in docs/formats.md).
// It never holds tensor data. PlanFromJson(PlanToJson(p)) reproduces p exactly.
// A plan's step source as the plan file writes it: one JSON object (docs/formats.md).
std::string StepSourceJson(const PlanStepSource& source);

std::string PlanToJson(const Plan& plan);

// Errors are InvalidArgument naming the file and JSON path
// ("plan.json: tasks[381].inputs[1]: unknown value id 99").
absl::StatusOr<Plan> PlanFromJson(absl::string_view text,
                                  absl::string_view filename = "<plan>");

absl::StatusOr<Plan> LoadPlanFile(const std::string& path);
// Atomic: temporary file, then rename.
absl::Status SavePlanFile(const Plan& plan, const std::string& path);

}  // namespace loom::ir

#endif  // LOOM_IR_PLAN_JSON_H_
