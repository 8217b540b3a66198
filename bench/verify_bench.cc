// Verification at production scale: builds a model's training step and its
// factored Megatron-style plan, then verifies it twice, with a cold and then a
// warm proof cache, and prints one line of figures. One case per process, so the
// peak resident size printed is the case's own.
//
//   loom_bench_verify CASE [--threads N] [--derive-only [--plain] [--repeat N]]
//   loom_bench_verify --list
// --derive-only times the lineage derivation alone (no law proofs); --plain
// times the plain derivation (the one that reports failures) instead of the fast;
// --repeat derives N times and reports the last (for profiling the derivation).

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/autodiff.h"
#include "models/models.h"
#include "transform/parallelize.h"
#include "verify/derive.h"
#include "verify/verify.h"

namespace {

struct Case {
  std::string name;
  std::string model;
  int layers;  // 0: the model's own
  int dp, tp, pp, ep, mb;
};

std::vector<Case> Cases() {
  return {
      {"llama3-405b", "llama3-405b", 0, 64, 8, 16, 1, 16},
      {"deepseek-v3", "deepseek-v3-671b", 0, 32, 8, 8, 8, 16},
      // Growth, one knob at a time from the llama3-405b case.
      {"dp2", "llama3-405b", 0, 2, 8, 16, 1, 16},
      {"dp64", "llama3-405b", 0, 64, 8, 16, 1, 16},
      {"mb2", "llama3-405b", 0, 64, 8, 16, 1, 2},
      {"mb32", "llama3-405b", 0, 64, 8, 16, 1, 32},
      {"layers4", "llama3-405b", 4, 64, 8, 4, 1, 16},
      {"layers126", "llama3-405b", 126, 64, 8, 4, 1, 16},
  };
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double PeakMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

int Run(const Case& c, int threads, bool derive_only, bool plain, int repeat) {
  double t0 = Now();
  loom::models::ModelOptions options;
  options.layers = c.layers;
  options.batch = c.dp;  // one sequence per replica and micro-batch
  auto forward = loom::models::BuildForward(c.model, options);
  if (!forward.ok()) {
    std::fprintf(stderr, "%s\n", std::string(forward.status().message()).c_str());
    return 2;
  }
  loom::ir::TrainingOptions training;
  training.microbatches = c.mb;
  auto spec = loom::ir::BuildTrainingStep(*forward, training);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  const double spec_s = Now() - t0;
  t0 = Now();
  loom::transform::Strategy s;
  s.dp = c.dp;
  s.tp = c.tp;
  s.pp = c.pp;
  s.ep = c.ep;
  s.microbatches = c.mb;
  s.factored = true;
  auto plan = loom::transform::Parallelize(*spec, s);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  const double plan_s = Now() - t0;

  if (derive_only) {
    loom::verify::DeriveOptions options;
    options.fast = !plain;
    for (int i = 1; i < repeat; ++i) (void)loom::verify::DeriveLineage(*spec, *plan, options);
    t0 = Now();
    auto d = loom::verify::DeriveLineage(*spec, *plan, options);
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", std::string(d.status().message()).c_str());
      return 2;
    }
    std::printf(
        "%-12s %-17s layers=%-3d dp=%-2d tp=%d pp=%-2d ep=%d mb=%-2d | spec %.1f s, plan %.1f s "
        "(%zu tasks) | derive %.3f s: %lld items, %lld stages (%lld distinct, %lld reused), "
        "%zu failures, %zu undecided, %zu laws | validate %.1f fold %.1f slice %.1f classes %.1f "
        "walk %.1f ms%s | peak %.0f MiB\n",
        c.name.c_str(), c.model.c_str(), c.layers, c.dp, c.tp, c.pp, c.ep, c.mb, spec_s, plan_s,
        plan->tasks.size(), Now() - t0, static_cast<long long>(d->items),
        static_cast<long long>(d->stages), static_cast<long long>(d->distinct_stages),
        static_cast<long long>(d->stages_reused), d->failures.size(),
        d->undecided.size(), d->laws.size(), 1e3 * d->times.validate, 1e3 * d->times.fold,
        1e3 * d->times.slice, 1e3 * d->times.classes, 1e3 * d->times.walk,
        d->plain ? " (plain)" : "", PeakMiB());
    for (size_t i = 0; i < d->undecided.size() && i < 5; ++i) {
      std::printf("  undecided %s: %s\n", d->undecided[i].item.c_str(),
                  d->undecided[i].reason.c_str());
    }
    for (size_t i = 0; i < d->failures.size() && i < 5; ++i) {
      std::printf("  failure %s: %s\n", d->failures[i].item.c_str(),
                  d->failures[i].message.c_str());
    }
    return d->failures.empty() ? 0 : 1;
  }
  const std::string cache = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                         "/loom_bench_verify_", getpid());
  std::filesystem::remove_all(cache);
  loom::verify::VerifyOptions vo;
  vo.cache_dir = cache;
  vo.threads = threads;
  auto cold = loom::verify::Verify(*spec, *plan, vo);
  if (!cold.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cold.status().message()).c_str());
    return 2;
  }
  auto warm = loom::verify::Verify(*spec, *plan, vo);
  std::filesystem::remove_all(cache);
  if (!warm.ok()) return 2;
  std::printf(
      "%-12s %-17s layers=%-3d dp=%-2d tp=%d pp=%-2d ep=%d mb=%-2d | spec %.1f s, plan %.1f s "
      "(%zu tasks) | verify cold %.3f s (derive %.3f s, %zu laws %.3f s) warm %.3f s "
      "(%lld cache hits) | %s | peak %.0f MiB\n",
      c.name.c_str(), c.model.c_str(), c.layers, c.dp, c.tp, c.pp, c.ep, c.mb, spec_s, plan_s,
      plan->tasks.size(), cold->seconds, cold->derive_seconds, cold->laws.size(),
      cold->law_seconds, warm->seconds, static_cast<long long>(warm->cache_hits),
      loom::verify::VerdictWords(cold->verdict).c_str(), PeakMiB());
  if (cold->verdict != loom::verify::Verdict::kEquivalent) {
    int shown = 0;
    for (const auto& u : cold->undecided) {
      if (shown++ < 5) std::printf("  undecided %s: %s\n", u.item.c_str(), u.reason.c_str());
    }
    for (const auto& f : cold->failures) {
      if (shown++ < 10) std::printf("  failure %s: %s\n", f.item.c_str(), f.message.c_str());
    }
  }
  return loom::verify::ExitCode(cold->verdict);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  bool derive_only = false;
  bool plain = false;
  int repeat = 1;
  std::string name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--derive-only") {
      derive_only = true;
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--plain") {
      plain = true;
    } else if (a == "--list") {
      for (const Case& c : Cases()) std::printf("%s\n", c.name.c_str());
      return 0;
    } else {
      name = a;
    }
  }
  for (const Case& c : Cases()) {
    if (c.name == name) return Run(c, threads, derive_only, plain, repeat);
  }
  std::fprintf(stderr,
               "usage: loom_bench_verify CASE [--threads N] [--derive-only [--plain] [--repeat N]] | --list\n");
  return 2;
}
