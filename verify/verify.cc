#include "verify/verify.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
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

namespace {

// Proves laws at their reduced sizes, each distinct one once, on worker threads
// (one term store and solver context per proof). Laws are submitted as the
// derivation finds them, so proofs run while it goes on.
class LawProver {
 public:
  LawProver(const VerifyOptions& options, int workers) : options_(options) {
    for (int t = 0; t < workers; ++t) pool_.emplace_back([this] { Work(/*until_done=*/false); });
  }
  ~LawProver() { Stop(); }

  // The index of the law a use reduces to (submitted when new).
  size_t Submit(const LawUse& use) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = by_use_.find(use.key);
      if (it != by_use_.end()) return it->second;
    }
    LawUse reduced = ReduceLaw(use);
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, fresh] = index_.emplace(reduced.key, laws_.size());
    by_use_.emplace(use.key, it->second);
    if (fresh) {
      laws_.push_back(std::move(reduced));
      results_.emplace_back();
      changed_.notify_all();
    }
    return it->second;
  }
  // Helps until every submitted law is proved; `progress` is called about ten
  // times a second from this thread while they are, and once at the end.
  void Finish(const std::function<void(const Progress&)>& progress, double started) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finishing_ = true;
      changed_.notify_all();
    }
    if (!progress) {
      Work(/*until_done=*/true);
    } else {
      std::thread helper([this] { Work(/*until_done=*/true); });
      std::unique_lock<std::mutex> lock(mutex_);
      while (!changed_.wait_for(lock, std::chrono::milliseconds(100),
                                [&] { return done_ == laws_.size(); })) {
        const Progress p = Snapshot(started);
        lock.unlock();
        progress(p);
        lock.lock();
      }
      const Progress p = Snapshot(started);
      lock.unlock();
      helper.join();
      progress(p);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ == laws_.size(); });
  }
  const LawUse& law(size_t i) const { return laws_[i]; }
  const LawResult& result(size_t i) const { return results_[i]; }
  int64_t hits() const { return hits_; }

 private:
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      changed_.notify_all();
    }
    for (auto& th : pool_) th.join();
    pool_.clear();
  }
  Progress Snapshot(double started) const {
    const double now =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return Progress{static_cast<int64_t>(done_), proved_, static_cast<int64_t>(laws_.size()),
                    hits_, now - started};
  }
  // Proves laws as they come; with until_done, returns once none is left to take.
  void Work(bool until_done) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] {
        return stopping_ || next_ < laws_.size() || (until_done && finishing_);
      });
      if (stopping_) return;
      if (next_ >= laws_.size()) {
        if (stopping_ || until_done) return;
        continue;
      }
      const size_t i = next_++;
      LawUse law = laws_[i];
      lock.unlock();
      LawResult r = Prove(law);
      lock.lock();
      if (r.cached) ++hits_;
      if (r.verdict == "proved") ++proved_;
      results_[i] = std::move(r);
      ++done_;
      changed_.notify_all();
    }
  }
  LawResult Prove(const LawUse& law) const {
    LawResult r;
    r.op_kind = std::string(ir::OpKindName(law.kind));
    r.key = LawCacheKey(law);
    if (CachedProof(options_.cache_dir, r.key)) {
      r.verdict = "proved";
      r.cached = true;
      return r;
    }
    const auto t0 = std::chrono::steady_clock::now();
    LawProof p = ProveLaw(law, options_.solver_timeout_ms);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.verdict = p.verdict == smt::Verdict::kValid     ? "proved"
                : p.verdict == smt::Verdict::kInvalid ? "refuted"
                                                      : "unknown";
    r.detail = p.detail;
    if (p.verdict == smt::Verdict::kValid) StoreProof(options_.cache_dir, r.key);
    return r;
  }

  const VerifyOptions& options_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<LawUse> laws_;         // stable references while growing
  std::deque<LawResult> results_;
  std::map<std::string, size_t> index_;   // by reduced law key
  std::map<std::string, size_t> by_use_;  // by the use's own key
  size_t next_ = 0, done_ = 0;
  int64_t proved_ = 0, hits_ = 0;
  bool finishing_ = false, stopping_ = false;
  std::vector<std::thread> pool_;
};

}  // namespace

absl::StatusOr<VerifyReport> Verify(const ir::Graph& spec, const ir::Plan& plan,
                                    const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double started =
      std::chrono::duration<double>(start.time_since_epoch()).count();
  const int threads = options.threads > 0 ? options.threads
                                          : std::max(1u, std::thread::hardware_concurrency());
  // Laws are proved at reduced sizes (uses at different real sizes often share
  // one) while the derivation runs on this thread: threads - 1 workers now,
  // this thread too once it is done.
  LawProver prover(options, threads - 1);
  DeriveOptions derive_options;
  derive_options.on_law = [&](const LawUse& use) { prover.Submit(use); };
  // A factored plan is derived on a slice of its expansion (verify/factored.h).
  LOOM_ASSIGN_OR_RETURN(Derivation d, DeriveLineage(spec, plan, derive_options));
  const double derived_at = elapsed();

  VerifyReport report;
  report.failures = std::move(d.failures);
  report.undecided = std::move(d.undecided);
  report.items = d.items;
  report.values = d.values;
  report.stages = d.stages;
  report.distinct_stages = d.distinct_stages;
  report.stages_reused = d.stages_reused;

  // The laws this derivation relies on, each distinct reduced one once.
  std::vector<size_t> relied;
  {
    std::set<size_t> seen;
    for (const LawUse& use : d.laws) {
      const size_t i = prover.Submit(use);
      if (seen.insert(i).second) relied.push_back(i);
    }
  }
  prover.Finish(options.progress, started);
  std::vector<LawUse> laws;
  for (size_t i : relied) {
    laws.push_back(prover.law(i));
    report.laws.push_back(prover.result(i));
  }
  int64_t hits = 0;
  for (const LawResult& r : report.laws) hits += r.cached ? 1 : 0;
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
  report.cache_hits = hits;
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
