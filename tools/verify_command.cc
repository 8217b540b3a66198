#include "tools/verify_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/loom.h"
#include "ir/json_util.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "tools/cli.h"
#include "tools/flags.h"
#include "tools/spec_flags.h"
#include "tools/terminal_status.h"
#include "verify/report.h"
#include "verify/verify.h"

namespace loom::tools {
namespace {

constexpr char kCommand[] = "verify";

std::string Bytes(int64_t b) {
  const double v = static_cast<double>(b);
  if (v >= 1e12) return absl::StrFormat("%.2f TB", v / 1e12);
  if (v >= 1e9) return absl::StrFormat("%.2f GB", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2f MB", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.2f KB", v / 1e3);
  return absl::StrFormat("%d B", b);
}

// Every error of `loom verify` exits 2: bad input, and anything else that kept the
// verifier from a verdict, is "could not decide", never "not equivalent".
int FailVerify(std::ostream& err, const absl::Status& status) {
  Fail(err, kCommand, status);
  return kExitBadInput;
}

// An error about the plan file, its place first: "p.json: task 3 ...". Validation
// errors name the plan "plan: ..."; the file name replaces that.
absl::Status AboutPlanFile(const std::string& path, const absl::Status& status,
                           absl::string_view context = "") {
  absl::string_view message = status.message();
  if (absl::StartsWith(message, "plan: ")) message.remove_prefix(6);
  if (absl::StartsWith(message, path)) return status;
  return absl::Status(status.code(), absl::StrCat(path, ": ", context, message));
}

// The proof cache the flags ask for, created if missing; empty, with a warning to
// print, when it cannot be used.
struct ProofCache {
  std::string dir;
  std::string warning;  // empty when none
};
ProofCache CacheDir(const FlagSet& flags) {
  if (flags.GetBool("--no-cache")) return {};
  std::string dir = flags.GetString("--cache").value_or(DefaultVerifyCacheDir());
  auto warn = [&](absl::string_view why) {
    return ProofCache{"", absl::StrCat("loom verify: warning: ", why,
                                       "; verifying without a proof cache\n")};
  };
  if (dir.empty()) return warn("neither XDG_CACHE_HOME nor HOME is set");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return warn(absl::StrCat("cannot create cache directory ", dir, ": ", ec.message()));
  if (!std::filesystem::is_directory(dir, ec)) {
    return warn(absl::StrCat("cache path ", dir, " is not a directory"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return warn(absl::StrCat("cache directory ", dir, " is not writable"));
  }
  return {dir, ""};
}

void PrintFailure(const verify::Failure& f, int index, int total, std::ostream& out) {
  out << "\nfailure " << index << " of " << total << ": " << verify::FailureClassWords(f.cls)
      << " (" << verify::FailureClassName(f.cls) << ")\n";
  auto line = [&](const char* name, const std::string& value) {
    if (!value.empty()) out << absl::StrFormat("  %-16s%s\n", absl::StrCat(name, ":"), value);
  };
  line("tensor", f.tensor);
  line("box", f.box);
  line("part", f.part);
  line(f.devices.size() == 1 ? "device" : "devices", absl::StrJoin(f.devices, ", "));
  line("micro-batch", f.microbatch >= 0 ? absl::StrCat(f.microbatch) : "");
  line("item", f.item);
  line("first op", f.first_op);
  line("message", f.message);
  line("counterexample", f.counterexample);
}

void PrintReport(const verify::VerifyReport& r, const std::string& plan_path,
                 const std::string& model, std::ostream& out) {
  int64_t cached = 0;
  for (const verify::LawResult& l : r.laws) cached += l.cached;
  out << "verdict:      " << verify::VerdictWords(r.verdict) << "\n";
  out << "plan:         " << plan_path << " (model " << model << ")\n";
  out << "derived:      " << r.items << " tasks and collectives, " << r.values << " values\n";
  if (r.stages > 0) {
    out << "stages:       " << r.stages << " layer stages, " << r.distinct_stages << " distinct, "
        << r.stages_reused << " derived as an alike stage\n";
  }
  out << "laws:         " << r.laws_proved << "/" << r.laws.size() << " proved, " << r.cache_hits
      << " from the cache\n";
  if (r.schedule_checked && !r.peak_bytes.empty()) {
    const auto [lo, hi] = std::minmax_element(r.peak_bytes.begin(), r.peak_bytes.end());
    out << "schedule:     checked"
        << (r.schedule_replicas > 1
                ? absl::StrCat(" on the scale unit (", r.peak_bytes.size() / r.schedule_replicas,
                               " device programs, run by each of ", r.schedule_replicas,
                               " data-parallel replicas)")
                : "")
        << ", peak memory " << Bytes(*lo)
        << (*lo == *hi ? "" : absl::StrCat(" to ", Bytes(*hi))) << " per device\n";
    const int64_t busiest = hi - r.peak_bytes.begin();
    if (static_cast<size_t>(busiest) < r.peak_by_role.size()) {
      const verify::MemoryByRole& m = r.peak_by_role[busiest];
      const int64_t unit = static_cast<int64_t>(r.peak_bytes.size()) / r.schedule_replicas;
      out << "memory:       device " << busiest
          << (r.schedule_replicas > 1 ? absl::StrCat(" (unit device ", busiest % unit, ")") : "")
          << " at its peak: weights " << Bytes(m.weights)
          << ", gradients " << Bytes(m.gradients) << ", optimizer states "
          << Bytes(m.optimizer_states) << ", activations " << Bytes(m.activations)
          << ", communication " << Bytes(m.communication) << "\n";
    }
    if (r.memory_capacity_bytes.has_value()) {
      const bool fits = *hi <= *r.memory_capacity_bytes;
      out << "capacity:     " << Bytes(*r.memory_capacity_bytes) << " per device: "
          << (fits ? "the plan fits" : "the plan does NOT fit")
          << " as a training framework runs it (gradients accumulated in place; loom run holds "
             "each micro-batch's until their sum) (largest peak "
          << Bytes(*hi)
          << ", " << absl::StrFormat("%.1f", 100.0 * *hi / std::max<int64_t>(1, *r.memory_capacity_bytes))
          << "%)\n";
    }
  } else {
    out << "schedule:     " << (r.schedule_checked ? "checked" : "not checked (the plan has no "
                                                                 "per-device order)")
        << "\n";
  }
  out << "failures:     " << r.failures.size() << "\n";
  out << "undecided:    " << r.undecided.size() << "\n";
  out << absl::StrFormat("time:         %.2f s\n", r.seconds);
  const int failures = static_cast<int>(r.failures.size());
  for (int i = 0; i < failures; ++i) PrintFailure(r.failures[i], i + 1, failures, out);
  const int undecided = static_cast<int>(r.undecided.size());
  for (int i = 0; i < undecided; ++i) {
    out << "\nundecided " << i + 1 << " of " << undecided << ": " << r.undecided[i].item << "\n"
        << "  reason:         " << r.undecided[i].reason << "\n";
  }
}

void AddVerifyFlags(FlagSet& flags) {
  flags.AddString("--plan", "FILE", "the plan to verify (JSON, as 'loom plan' writes it)");
  AddSpecFlags(flags);
  flags.AddString("--microbatches", "M", "micro-batches of the training step (default: the plan's)");
  flags.AddString("--report", "FILE", "write the verification report as JSON");
  flags.AddString("--junit", "FILE", "write the checks as JUnit XML (one test suite, loom.verify)");
  flags.AddString("--cache", "DIR",
                  "proof cache (default: $XDG_CACHE_HOME/loom, else $HOME/.cache/loom)");
  flags.AddBool("--no-cache", "prove every law afresh and store no proof");
  flags.AddString("--memory", "BYTES",
                  "device memory capacity the schedule's peak must fit (bytes, or with a unit: "
                  "80GiB, 85.9GB)");
  flags.AddString("--timeout", "MS", "solver time limit per query in milliseconds (default 10000)");
  flags.AddString("--threads", "N", "proof threads (default: every core)");
  flags.AddBool("--quiet", "no progress line on a terminal");
}

// Reads the numeric and cache flags into the verification's configuration.
absl::StatusOr<VerifyConfig> VerifyConfigFromFlags(const FlagSet& flags) {
  VerifyConfig config;
  if (flags.Has("--cache") && flags.Has("--no-cache")) {
    return absl::InvalidArgumentError("give --cache DIR or --no-cache, not both");
  }
  if (flags.Has("--memory")) {
    auto memory = flags.GetBytes("--memory", 0, int64_t{1} << 60);
    if (!memory.ok()) return memory.status();
    config.memory_capacity_bytes = *memory;
  }
  auto timeout = flags.GetInt("--timeout", config.solver_timeout_ms, 1, int64_t{1} << 31);
  if (!timeout.ok()) return timeout.status();
  config.solver_timeout_ms = static_cast<unsigned>(*timeout);
  auto threads = flags.GetInt("--threads", 0, 1, 1024);
  if (!threads.ok()) return threads.status();
  config.threads = static_cast<int>(*threads);
  return config;
}

struct ReportPaths {
  std::optional<std::string> report;
  std::optional<std::string> junit;
};

void WriteErrorReports(const ReportPaths& paths, const absl::Status& status,
                       const std::string& model, const std::string& plan, std::ostream& out,
                       std::ostream& err) {
  const verify::ReportContext context{model, plan};
  const std::string message(status.message());
  std::vector<std::pair<std::string, std::string>> files;
  if (paths.report) files.push_back({*paths.report, verify::ErrorReportJson(message, context)});
  if (paths.junit) files.push_back({*paths.junit, verify::ErrorReportJUnit(message, context)});
  for (const auto& [file, text] : files) {
    if (absl::Status s = ir::WriteFileAtomically(file, text); !s.ok()) {
      err << "loom " << kCommand << ": " << s.message() << "\n";
      continue;
    }
    out << "wrote " << file << "\n";
  }
}

}  // namespace

std::string DefaultVerifyCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  // The XDG base directory rules ignore a relative path.
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/loom");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/loom");
  return "";
}

int CmdVerify(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags(kCommand,
                "Proves that a distributed plan computes exactly the training step of the model\n"
                "it was made from: the lineage of every value, the partition law of every op\n"
                "kind it splits, and the safety of its per-device order. Prints the verdict and\n"
                "every failure (the logical tensor, region, devices and first op where values\n"
                "diverge). Exit 0 proved equivalent, 1 not equivalent, 2 undecided or bad input.");
  AddVerifyFlags(flags);
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  const std::optional<std::string> report_file = flags.GetString("--report");
  const std::optional<std::string> junit_file = flags.GetString("--junit");
  // A report that cannot be written is refused before any work.
  for (const std::optional<std::string>& file : {report_file, junit_file}) {
    if (!file.has_value()) continue;
    std::string dir = std::filesystem::path(*file).parent_path().string();
    if (dir.empty()) dir = ".";
    if (::access(dir.c_str(), W_OK) != 0) {
      std::error_code ec;
      const bool is_dir = std::filesystem::is_directory(dir, ec);
      return FailVerify(err, absl::InvalidArgumentError(absl::StrCat(
                                 *file, ": cannot write there (", dir,
                                 is_dir ? " is not writable)" : " is not a directory)")));
    }
  }
  // Bad input still leaves a report and a JUnit file (verdict "error", exit 2),
  // so that a CI job shows why it stopped.
  const ReportPaths paths{report_file, junit_file};
  TerminalStatus terminal("verify", err, flags.GetBool("--quiet"));
  auto fail = [&](const absl::Status& status) {
    terminal.Done();
    WriteErrorReports(paths, status, flags.GetString("--model").value_or(""),
                      flags.GetString("--plan").value_or(""), out, err);
    return FailVerify(err, status);
  };
  auto path = flags.GetString("--plan");
  if (!path.has_value()) return fail(absl::InvalidArgumentError("missing --plan FILE"));
  auto config = VerifyConfigFromFlags(flags);
  if (!config.ok()) return fail(config.status());

  auto plan = LoadPlanShowingProgress(*path, "verify", flags.GetBool("--quiet"));
  if (!plan.ok()) return fail(plan.status());
  auto model = ModelName(flags, *plan);
  if (!model.ok()) return fail(model.status());
  terminal.Step("building the training step the plan records");
  auto spec = SpecForPlan(flags, *plan);
  terminal.Done();
  if (!spec.ok()) return fail(spec.status());

  const ProofCache cache = CacheDir(flags);
  config->cache_dir = cache.dir;
  // Progress goes to a terminal only: this process's standard error, when it is one.
  const bool show_progress =
      !flags.GetBool("--quiet") && &err == &std::cerr && isatty(STDERR_FILENO) == 1;
  if (show_progress) {
    err << "verify: deriving the lineage of " << plan->tasks.size() << " tasks" << std::flush;
    config->progress = [&err](const verify::Progress& p) {
      err << absl::StrFormat("\rverify: laws %d/%d proved, %d cached, %.1f s\033[K", p.laws_proved,
                             p.laws_total, p.cache_hits, p.seconds)
          << std::flush;
    };
  }
  auto report = VerifyPlan(*spec, *plan, *config);
  if (show_progress) err << "\n";
  // The cache's warning is printed once the plan has passed its checks: a plan that
  // is not a plan of the step gets its error alone.
  if (!report.ok()) {
    // VerifyPlan checks the plan against the step before it derives anything; a plan
    // it stops there is named as not a plan of the step (ir::ValidatePlan says so
    // again, asked only on this path).
    if (absl::Status valid = ir::ValidatePlan(*spec, *plan); !valid.ok()) {
      return fail(AboutPlanFile(
          *path, valid,
          absl::StrCat("not a plan of the training step of '", *model,
                       plan->step.has_value() ? "' it records: " : "' the flags describe: ")));
    }
    err << cache.warning;
    return fail(AboutPlanFile(*path, report.status()));
  }
  err << cache.warning;

  PrintReport(*report, *path, *model, out);
  const verify::ReportContext context{*model, *path};
  std::vector<std::pair<std::string, std::string>> files;
  if (auto file = flags.GetString("--report")) {
    files.push_back({*file, VerifyReportJson(*report, *model, *path)});
  }
  if (auto file = flags.GetString("--junit")) {
    files.push_back({*file, verify::ReportJUnit(*report, context)});
  }
  for (const auto& [file, text] : files) {
    // A gate whose report is missing has not done its job: that is exit 2.
    if (absl::Status s = ir::WriteFileAtomically(file, text); !s.ok()) return FailVerify(err, s);
    out << "wrote " << file << "\n";
  }
  return verify::ExitCode(report->verdict);
}

}  // namespace loom::tools
