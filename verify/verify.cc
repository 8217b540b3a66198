#include "verify/verify.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "verify/law_reduce.h"
#include "verify/laws.h"
#include "verify/schedule_safety.h"

namespace loom::verify {
namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string CachePath(const std::string& dir, const std::string& key) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a(key)));
  return absl::StrCat(dir, "/laws/", hex);
}

// A cached proof holds the key it proved, so a hash collision is a miss.
bool CachedProof(const std::string& dir, const std::string& key) {
  if (dir.empty()) return false;
  std::ifstream in(CachePath(dir, key));
  if (!in) return false;
  std::string verdict, stored;
  std::getline(in, verdict);
  std::getline(in, stored);
  return verdict == "proved" && stored == key;
}

void StoreProof(const std::string& dir, const std::string& key) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(absl::StrCat(dir, "/laws"), ec);
  const std::string path = CachePath(dir, key);
  const std::string tmp = absl::StrCat(path, ".tmp", std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp);
    out << "proved\n" << key << "\n";
  }
  std::filesystem::rename(tmp, path, ec);
}

}  // namespace

std::string VerdictWords(Verdict v) {
  switch (v) {
    case Verdict::kEquivalent: return "proved equivalent";
    case Verdict::kNotEquivalent: return "not equivalent";
    case Verdict::kUnknown: return "undecided";
  }
  return "undecided";
}

std::string LawItem(const std::string& op_kind) {
  return absl::StrCat("partition law of '", op_kind, "'");
}

int ExitCode(Verdict v) {
  switch (v) {
    case Verdict::kEquivalent: return 0;
    case Verdict::kNotEquivalent: return 1;
    case Verdict::kUnknown: return 2;
  }
  return 2;
}

absl::StatusOr<VerifyReport> Verify(const ir::Graph& spec, const ir::Plan& plan,
                                    const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // A factored plan is derived on a slice of its expansion (verify/factored.h).
  LOOM_ASSIGN_OR_RETURN(Derivation d, DeriveLineage(spec, plan));
  const double derived_at = elapsed();

  VerifyReport report;
  report.failures = std::move(d.failures);
  report.undecided = std::move(d.undecided);
  report.items = d.items;
  report.values = d.values;
  report.stages = d.stages;
  report.distinct_stages = d.distinct_stages;
  report.stages_reused = d.stages_reused;

  // Laws at reduced sizes, each distinct one once (uses at different real sizes
  // often share one), in parallel, one term store and solver context per proof.
  std::vector<LawUse> laws;
  {
    std::map<std::string, size_t> seen;
    for (const LawUse& use : d.laws) {
      LawUse reduced = ReduceLaw(use);
      if (seen.emplace(reduced.key, laws.size()).second) laws.push_back(std::move(reduced));
    }
  }
  const int64_t n = static_cast<int64_t>(laws.size());
  report.laws.resize(n);
  std::atomic<int64_t> next{0}, done{0}, proved{0}, hits{0};
  std::mutex done_mutex;
  std::condition_variable done_changed;
  auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) {
      const LawUse& law = laws[i];
      LawResult& r = report.laws[i];
      r.op_kind = std::string(ir::OpKindName(law.kind));
      r.key = LawCacheKey(law);
      if (CachedProof(options.cache_dir, r.key)) {
        r.verdict = "proved";
        r.cached = true;
        ++hits;
      } else {
        const auto t0 = std::chrono::steady_clock::now();
        LawProof p = ProveLaw(law, options.solver_timeout_ms);
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.verdict = p.verdict == smt::Verdict::kValid     ? "proved"
                    : p.verdict == smt::Verdict::kInvalid ? "refuted"
                                                          : "unknown";
        r.detail = p.detail;
        if (p.verdict == smt::Verdict::kValid) StoreProof(options.cache_dir, r.key);
      }
      if (r.verdict == "proved") ++proved;
      {
        std::lock_guard<std::mutex> lock(done_mutex);
        ++done;
      }
      done_changed.notify_all();
    }
  };
  auto progress = [&] {
    return Progress{done.load(), proved.load(), n, hits.load(), elapsed()};
  };
  int threads = options.threads > 0 ? options.threads
                                    : std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n, 1)));
  std::vector<std::thread> pool;
  if (options.progress) {
    // Every proof runs on the pool; the calling thread reports until they are done.
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    std::unique_lock<std::mutex> lock(done_mutex);
    while (!done_changed.wait_for(lock, std::chrono::milliseconds(100),
                                  [&] { return done.load() == n; })) {
      lock.unlock();
      options.progress(progress());
      lock.lock();
    }
    lock.unlock();
    for (auto& th : pool) th.join();
    options.progress(progress());
  } else {
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
  }
  for (size_t i = 0; i < report.laws.size(); ++i) {
    const LawResult& r = report.laws[i];
    if (r.verdict == "proved") {
      ++report.laws_proved;
    } else if (r.verdict == "refuted") {
      Failure f;
      f.cls = FailureClass::kComputationDiffers;
      f.item = LawItem(r.op_kind);
      if (laws[i].op != ir::kNoId && laws[i].op < spec.num_ops()) {
        const ir::Op& op = spec.op(laws[i].op);
        if (!op.outputs.empty()) f.tensor = spec.tensor(op.outputs[0]).name;
        f.first_op = absl::StrCat(ir::OpKindName(op.kind), " -> '", f.tensor, "'");
      }
      f.message = absl::StrCat("the pieces of '", r.op_kind, "' do not compose to the op: ", r.detail);
      f.counterexample = r.detail;
      f.position = d.items;
      report.failures.push_back(std::move(f));
    } else {
      report.undecided.push_back({LawItem(r.op_kind), r.detail});
    }
  }
  report.cache_hits = hits.load();
  report.derive_seconds = derived_at;
  report.law_seconds = elapsed() - derived_at;

  // Schedule safety of the per-device order (a factored plan has none).
  SafetyOptions safety_options;
  safety_options.memory_capacity_bytes = options.memory_capacity_bytes;
  SafetyReport safety;
  if (!plan.is_factored()) {
    LOOM_ASSIGN_OR_RETURN(safety, CheckScheduleSafety(plan, safety_options));
  }
  report.schedule_checked = safety.checked;
  report.peak_bytes = safety.peak_bytes;
  for (const SafetyIssue& issue : safety.issues) {
    Failure f;
    f.cls = SafetyFailureClass(issue.kind);
    f.item = absl::StrCat("schedule (", SafetyIssueKindName(issue.kind), ")");
    f.devices = issue.devices;
    f.message = issue.message;
    f.position = d.items + 1;
    report.failures.push_back(std::move(f));
  }

  report.verdict = !report.failures.empty()  ? Verdict::kNotEquivalent
                   : !report.undecided.empty() ? Verdict::kUnknown
                                               : Verdict::kEquivalent;
  report.seconds = elapsed();
  return report;
}

}  // namespace loom::verify
