#include "tools/run_command.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "exec/backend.h"
#include "exec/training.h"
#include "ir/plan_json.h"
#include "tools/cli.h"
#include "tools/flags.h"
#include "tools/spec_flags.h"
#include "tools/terminal_status.h"

namespace loom::tools {
namespace {

constexpr char kCommand[] = "run";

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / 1073741824.0);
  if (b >= (int64_t{1} << 20)) return absl::StrFormat("%.2f MiB", b / 1048576.0);
  if (b >= (int64_t{1} << 10)) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrCat(b, " B");
}

// A run stopped by the plan itself (collectives out of order, a deadlock, a
// wait past the timeout) is a finding, exit 1; bad input is exit 2.
int FailRun(std::ostream& err, const absl::Status& status) {
  err << "loom run: error: " << status.message() << "\n";
  if (status.code() == absl::StatusCode::kFailedPrecondition ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    return kExitFailure;
  }
  return ExitCodeFor(status);
}

void PrintReport(const exec::TrainReport& r, double tolerance, ir::DType precision,
                 std::ostream& out) {
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const exec::StepReport& s = r.steps[i];
    out << absl::StrFormat("step %-3d loss %.6f  time %.1f ms", i + 1, s.loss, s.seconds * 1e3);
    if (r.check.has_value()) out << absl::StrFormat("  (reference loss %.6f)", s.reference_loss);
    out << "\n";
  }
  std::vector<std::string> peaks, activations;
  for (const exec::DeviceStats& d : r.devices) {
    peaks.push_back(Bytes(d.peak_bytes));
    activations.push_back(Bytes(d.peak_activation_bytes));
  }
  out << "peak memory:  " << absl::StrJoin(peaks, ", ") << " (devices 0.."
      << r.devices.size() - 1 << ")\n";
  out << "activations:  " << absl::StrJoin(activations, ", ") << " at their peak\n";
  if (r.matmul.seconds > 0) {
    out << absl::StrFormat("matmuls:      %.3f GFLOP in %.3f s, %.2f GFLOP/s\n",
                           r.matmul.flops / 1e9, r.matmul.seconds,
                           r.matmul.flops / r.matmul.seconds / 1e9);
  }
  if (!r.check.has_value()) return;
  const exec::CheckReport& c = *r.check;
  out << "check against the single-device reference (" << ir::DTypeName(precision) << ", "
      << r.steps.size() << " steps), largest relative difference:\n";
  out << absl::StrFormat("  loss        %.3g\n", c.loss);
  out << absl::StrFormat("  gradients   %.3g (%d values)\n", c.gradients, c.gradients_compared);
  out << absl::StrFormat("  parameters  %.3g (%d values: every copy, optimizer states included)\n",
                         c.parameters, c.parameters_compared);
  if (c.clip_coefficient.has_value()) {
    out << absl::StrFormat("  clipping    coefficient %.3g (%s)\n", *c.clip_coefficient,
                           *c.clip_coefficient < 1 ? "active"
                                                   : "inactive: a wrong gradient norm would not "
                                                     "show; lower --max-grad-norm");
  }
  out << "  worst:      " << c.worst << "\n";
  const double worst = std::max({c.loss, c.gradients, c.parameters});
  out << absl::StrFormat("%s tolerance %.0e\n", worst <= tolerance ? "within" : "OUTSIDE",
                         tolerance);
}

}  // namespace

int CmdRun(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags(kCommand,
                "Runs a plan's training steps device by device in its order (the scheduler's,\n"
                "or data-flow order) and prints the loss and time of each step. With --check\n"
                "the single-device reference runs beside it and the largest relative\n"
                "differences of loss, gradients and updated parameters are printed. Exit 0 on\n"
                "success (and a check within tolerance), 1 when the run stops on the plan\n"
                "(collectives out of order, deadlock) or the check is outside tolerance, 2 on\n"
                "bad input.");
  flags.AddPositional("PLAN", "the plan to run (JSON, as 'loom plan' or 'loom search' write it)");
  flags.AddString("--plan", "FILE", "the plan to run (instead of the positional PLAN)");
  AddSpecFlags(flags, "",
               "fp32 (default), bf16 (the plan of a bf16 step: computed in fp32, its casts "
               "the identity) or fp64 (the fp32 step computed in double precision)");
  flags.AddString("--microbatches", "M", "micro-batches of the training step (default: the plan's)");
  flags.AddString("--backend", "NAME", "cpu (default) or cuda");
  flags.AddString("--steps", "K", "training steps (default 1)");
  flags.AddBool("--check", "compare with the single-device reference");
  flags.AddString("--tolerance", "X",
                  "largest relative difference --check accepts (default 1e-5 in fp32, 1e-10 in fp64)");
  flags.AddString("--seed", "N", "seed of the parameters and synthetic tokens (default 1)");
  flags.AddString("--data", "FILE", "token ids (int32, little-endian) instead of synthetic ones");
  flags.AddString("--timeout", "S", "longest wait at a collective in seconds (default 60)");
  flags.AddString("--memory", "BYTES",
                  "host memory the run may use (80GiB; default: what the machine has "
                  "available); a plan that needs more is refused before it starts");
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  TerminalStatus status(kCommand, err);
  auto fail = [&](const absl::Status& s) {
    status.Done();
    return Fail(err, kCommand, s);
  };

  std::optional<std::string> path = flags.GetString("--plan");
  if (!path.has_value()) path = flags.Positional();
  if (!path.has_value()) return fail(absl::InvalidArgumentError("missing the plan file"));
  // --precision names the step's precision and the arithmetic at once: the fp32
  // and bf16 steps run in fp32 (a cast between floats is the identity there), fp64
  // is the fp32 step in double precision.
  exec::ExecOptions exec_options;
  const std::string precision = flags.GetString("--precision").value_or("fp32");
  if (precision == "fp32" || precision == "bf16") {
    exec_options.precision = ir::DType::kF32;
  } else if (precision == "fp64") {
    exec_options.precision = ir::DType::kF64;
    flags.Erase("--precision");  // the step itself is the fp32 one
  } else {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--precision: expected fp32, bf16 or fp64, got '", precision, "'")));
  }
  auto timeout = flags.GetDouble("--timeout", 60, 0.001, 1e6);
  if (!timeout.ok()) return fail(timeout.status());
  exec_options.collective_timeout_s = *timeout;
  exec::TrainOptions train;
  train.precision = exec_options.precision;
  train.check = flags.GetBool("--check");
  auto steps = flags.GetInt("--steps", 1, 1, 1 << 20);
  if (!steps.ok()) return fail(steps.status());
  train.steps = static_cast<int>(*steps);
  auto seed = flags.GetInt("--seed", 1, 0, int64_t{1} << 62);
  if (!seed.ok()) return fail(seed.status());
  train.seed = static_cast<uint64_t>(*seed);
  train.data_path = flags.GetString("--data").value_or("");
  auto memory = flags.GetBytes("--memory", 0, int64_t{1} << 60);
  if (!memory.ok()) return fail(memory.status());
  train.host_memory_bytes = *memory;
  const double default_tolerance = precision == "fp64" ? 1e-10 : 1e-5;
  auto tolerance = flags.GetDouble("--tolerance", default_tolerance, 0, 1);
  if (!tolerance.ok()) return fail(tolerance.status());

  auto plan = LoadPlanShowingProgress(*path, kCommand);
  if (!plan.ok()) return fail(plan.status());
  status.Step("building the training step the plan records");
  auto spec = SpecForPlan(flags, *plan);
  status.Done();
  if (!spec.ok()) return fail(spec.status());
  const bool bf16_step = std::any_of(spec->tensors().begin(), spec->tensors().end(),
                                     [](const ir::Tensor& t) {
                                       return t.role == ir::TensorRole::kParameter &&
                                              t.dtype == ir::DType::kBF16;
                                     });
  if (precision == "fp64" && bf16_step) {
    return fail(absl::InvalidArgumentError(
        "--precision fp64 runs an fp32 step, but the configuration's step is bf16"));
  }
  auto backend = exec::MakeBackend(flags.GetString("--backend").value_or("cpu"), exec_options);
  if (!backend.ok()) {
    err << "loom run: error: " << backend.status().message() << "\n";
    return kExitBadInput;
  }
  out << "run: " << *path << " on " << (*backend)->name() << ", "
      << (bf16_step ? "bf16 (computed in fp32)" : precision) << ", "
      << train.steps << " step" << (train.steps == 1 ? "" : "s")
      << (plan->order.empty() && plan->factored_order.empty() ? " (data-flow order)"
                                                              : " (the plan's order)")
      << "\n";
  auto report = exec::RunTraining(*spec, *plan, **backend, train);
  if (!report.ok()) return FailRun(err, report.status());
  PrintReport(*report, *tolerance, exec_options.precision, out);
  if (report->check.has_value()) {
    const exec::CheckReport& c = *report->check;
    if (std::max({c.loss, c.gradients, c.parameters}) > *tolerance) return kExitFailure;
  }
  return kExitOk;
}

}  // namespace loom::tools
