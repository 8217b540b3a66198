// Verifies a dp2 tp2 plan of tiny Llama 3 8B through the installed library:
// prints the verdict and exits with its code (0: proved equivalent).
#include <iostream>

#include "api/loom.h"

int main() {
  loom::ModelConfig model{.name = "llama3-8b", .tiny = true, .layers = 2};
  loom::ParallelConfig parallel{.dp = 2, .tp = 2, .microbatches = 2};
  auto step = loom::BuildStep(model, parallel);
  if (!step.ok()) {
    std::cerr << step.status() << "\n";
    return 2;
  }
  auto plan = loom::MakePlan(*step, parallel);
  if (!plan.ok()) {
    std::cerr << plan.status() << "\n";
    return 2;
  }
  loom::VerifyConfig config;  // cache_dir empty: no proof cache
  auto report = loom::VerifyPlan(*step, *plan, config);
  if (!report.ok()) {
    std::cerr << report.status() << "\n";
    return 2;
  }
  std::cout << "verdict: " << loom::verify::VerdictWords(report->verdict) << "\n";
  return loom::verify::ExitCode(report->verdict);
}
