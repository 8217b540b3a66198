// Time to build each model's graphs at full size (no tensor data is allocated):
// the forward graph, and the whole training step (forward, backward, AdamW).

#include <benchmark/benchmark.h>

#include <string>

#include "ir/autodiff.h"
#include "models/models.h"

namespace {

void BM_BuildForward(benchmark::State& state, std::string model) {
  for (auto _ : state) {
    auto g = loom::models::BuildForward(model, {});
    if (!g.ok()) state.SkipWithError(std::string(g.status().message()).c_str());
    benchmark::DoNotOptimize(g);
  }
}

void BM_BuildTrainingStep(benchmark::State& state, std::string model) {
  for (auto _ : state) {
    auto fwd = loom::models::BuildForward(model, {});
    if (!fwd.ok()) {
      state.SkipWithError(std::string(fwd.status().message()).c_str());
      break;
    }
    auto step = loom::ir::BuildTrainingStep(*fwd, {});
    if (!step.ok()) state.SkipWithError(std::string(step.status().message()).c_str());
    state.counters["ops"] = step.ok() ? step->num_ops() : 0;
    benchmark::DoNotOptimize(step);
  }
}

void RegisterAll() {
  for (const auto& info : loom::models::ListModels()) {
    benchmark::RegisterBenchmark(("BuildForward/" + info.name).c_str(), BM_BuildForward,
                                 info.name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BuildTrainingStep/" + info.name).c_str(),
                                 BM_BuildTrainingStep, info.name)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
