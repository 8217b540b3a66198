// Executor throughput: training steps of a tiny llama3 on 2 devices (one
// thread each), and on the CPU backend the rate its matrix products reach
// against OpenBLAS's own single-thread sgemm peak on this machine. Prints one
// line per configuration. With --backend cuda the devices share the machine's
// GPUs and the line gives the step time and the host's share of it.
//
//   loom_bench_exec [--steps K] [--seq S] [--batch B] [--precision fp32|fp64]
//                   [--backend cpu|cuda]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "exec/backend.h"
#include "exec/cpu_kernels.h"
#include "exec/training.h"
#include "ir/autodiff.h"
#include "models/models.h"
#include "transform/parallelize.h"

namespace {

struct Config {
  const char* name;
  int dp, tp, pp, mb;
};

int Run(const Config& c, const std::string& backend_name, int steps, int64_t seq,
        int64_t batch, loom::ir::DType precision, double peak) {
  loom::models::ModelOptions options;
  options.tiny = true;
  options.layers = 2;
  options.seq = seq;
  options.batch = batch;
  options.dtype = precision;
  auto forward = loom::models::BuildForward("llama3-8b", options);
  if (!forward.ok()) {
    std::fprintf(stderr, "%s\n", std::string(forward.status().message()).c_str());
    return 2;
  }
  loom::ir::TrainingOptions training;
  training.microbatches = c.mb;
  auto spec = loom::ir::BuildTrainingStep(*forward, training);
  if (!spec.ok()) return 2;
  loom::transform::Strategy s;
  s.dp = c.dp;
  s.tp = c.tp;
  s.pp = c.pp;
  s.microbatches = c.mb;
  auto plan = loom::transform::Parallelize(*spec, s);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  loom::exec::ExecOptions exec;
  exec.precision = precision;
  auto backend = loom::exec::MakeBackend(backend_name, exec);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str());
    return 2;
  }
  loom::exec::TrainOptions train;
  train.precision = precision;
  train.steps = steps;
  auto report = loom::exec::RunTraining(*spec, *plan, **backend, train);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  // Median step time, the first (warm-up) step left out when there are others.
  std::vector<double> times;
  for (size_t i = report->steps.size() > 1 ? 1 : 0; i < report->steps.size(); ++i) {
    times.push_back(report->steps[i].seconds);
  }
  std::sort(times.begin(), times.end());
  const double step_s = times[times.size() / 2];
  // Tokens per step: the elements of one micro-batch's token ids, times M.
  double tokens = 0;
  for (loom::ir::TensorId id : spec->InputIds()) {
    const loom::ir::Tensor& t = spec->tensor(id);
    if (t.role == loom::ir::TensorRole::kInput && !loom::ir::IsFloat(t.dtype)) {
      tokens = static_cast<double>(t.shape.num_elements()) * c.mb;
      break;
    }
  }
  const char* label = precision == loom::ir::DType::kF32 ? "fp32" : "fp64";
  const long long seq_len = static_cast<long long>(tokens / (batch * c.mb));
  if (backend_name != "cpu") {
    double busy = 0, waits = 0, uploads = 0;
    for (const loom::exec::DeviceStats& d : report->devices) {
      busy += d.busy_seconds;
      waits += d.wait_seconds;
      uploads += d.upload_seconds;
    }
    std::printf(
        "%-4s %s %s seq=%lld batch=%lld mb=%d (%.0f tokens) | step %.2f ms (median of %zu), "
        "%.0f tokens/s | last step, summed over the device threads: inputs uploaded in %.2f ms, "
        "busy %.2f ms, waiting %.2f ms\n",
        c.name, backend_name.c_str(), label, seq_len, static_cast<long long>(batch), c.mb, tokens,
        step_s * 1e3, times.size(), tokens / step_s, uploads * 1e3, busy * 1e3, waits * 1e3);
    return 0;
  }
  const double rate = report->matmul.flops / report->matmul.seconds;
  double device_seconds = 0;  // two devices over every step
  for (const loom::exec::StepReport& r : report->steps) device_seconds += 2 * r.seconds;
  std::printf(
      "%-4s %s seq=%lld batch=%lld mb=%d (%.0f tokens) | step %.2f ms (median of %zu), %.0f tokens/s | "
      "matmuls %.2f GFLOP/s per device thread = %.1f%% of sgemm peak (%.2f GFLOP/s), "
      "%.0f%% of device time\n",
      c.name, label, seq_len, static_cast<long long>(batch), c.mb, tokens, step_s * 1e3,
      times.size(), tokens / step_s, rate / 1e9, 100.0 * rate / peak, peak / 1e9,
      100.0 * report->matmul.seconds / device_seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  int64_t seq = 0, batch = 4;
  loom::ir::DType precision = loom::ir::DType::kF32;
  std::string backend = "cpu";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--seq" && i + 1 < argc) {
      seq = std::atoll(argv[++i]);
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::atoll(argv[++i]);
    } else if (a == "--precision" && i + 1 < argc) {
      precision = std::string(argv[++i]) == "fp64" ? loom::ir::DType::kF64 : loom::ir::DType::kF32;
    } else if (a == "--backend" && i + 1 < argc) {
      backend = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: loom_bench_exec [--steps K] [--seq S] [--batch B] "
                   "[--precision fp32|fp64] [--backend cpu|cuda]\n");
      return 2;
    }
  }
  const double peak =
      backend == "cpu" ? loom::exec::MeasureSgemmPeak(/*n=*/512, /*repeats=*/5) : 0;
  int rc = 0;
  for (const Config& c : {Config{"dp2", 2, 1, 1, 2}, Config{"tp2", 1, 2, 1, 2},
                          Config{"pp2", 1, 1, 2, 4}}) {
    rc = std::max(rc, Run(c, backend, steps, seq, batch, precision, peak));
  }
  return rc;
}
