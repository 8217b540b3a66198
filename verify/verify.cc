#include "verify/verify.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"
#include "verify/law_reduce.h"
#include "verify/proof_cache.h"
#include "verify/laws.h"
#include "verify/schedule_safety.h"

namespace loom::verify {
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

// Reduces and proves laws, each distinct reduced one once, on worker threads (one
// term store and solver context per proof). The derivation submits each use of a
// law as it finds it and goes on: reducing it to its small sizes and proving it
// happen on the workers meanwhile.
class LawProver {
 public:
  LawProver(const VerifyOptions& options, int workers)
      : options_(options), cache_(options.cache_dir) {
    for (int t = 0; t < workers; ++t) pool_.emplace_back([this] { Work(/*until_done=*/false); });
  }
  ~LawProver() { Stop(); }

  // Queues a use of a law (once per distinct use).
  void Submit(const LawUse& use) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, fresh] = by_use_.try_emplace(use.key, kPending);
    if (!fresh) return;
    uses_.push_back(use);
    changed_.notify_all();
  }
  // Helps until every submitted use is reduced and every law proved; `progress`
  // is called about ten times a second from this thread while they are, and once
  // at the end. Then writes the new proofs to the cache.
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
      while (!changed_.wait_for(lock, std::chrono::milliseconds(100), [&] { return Idle(); })) {
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
    changed_.wait(lock, [&] { return Idle(); });
    cache_.Flush();
  }
  // After Finish: the law a use reduced to.
  size_t LawOf(const LawUse& use) const { return by_use_.at(use.key); }
  const LawUse& law(size_t i) const { return laws_[i]; }
  const LawResult& result(size_t i) const { return results_[i]; }

 private:
  static constexpr size_t kPending = static_cast<size_t>(-1);

  bool Idle() const { return uses_.empty() && reducing_ == 0 && done_ == laws_.size(); }
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
  // Reduces uses and proves laws as they come (uses first: they may bring laws);
  // with until_done, returns once nothing is left to take.
  void Work(bool until_done) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] {
        return stopping_ || !uses_.empty() || next_ < laws_.size() || (until_done && finishing_);
      });
      if (stopping_) return;
      if (!uses_.empty()) {
        LawUse use = std::move(uses_.front());
        uses_.pop_front();
        ++reducing_;
        lock.unlock();
        LawUse reduced = ReduceLaw(use);
        lock.lock();
        --reducing_;
        auto [it, fresh] = index_.try_emplace(reduced.key, laws_.size());
        by_use_[use.key] = it->second;
        if (fresh) {
          laws_.push_back(std::move(reduced));
          results_.emplace_back();
        }
        changed_.notify_all();
        continue;
      }
      if (next_ >= laws_.size()) {
        if (until_done) return;
        continue;
      }
      const size_t i = next_++;
      LawUse law = laws_[i];
      lock.unlock();
      LawResult r = Prove(law);
      lock.lock();
      if (r.cached) ++hits_;
      if (r.verdict == "proved") {
        ++proved_;
        if (!r.cached) cache_.Add(r.key);
      }
      results_[i] = std::move(r);
      ++done_;
      changed_.notify_all();
    }
  }
  LawResult Prove(const LawUse& law) const {
    LawResult r;
    r.op_kind = std::string(ir::OpKindName(law.kind));
    r.key = LawCacheKey(law);
    if (cache_.Has(r.key)) {
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
    return r;
  }

  const VerifyOptions& options_;
  ProofCache cache_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<LawUse> uses_;         // submitted, not yet reduced
  std::deque<LawUse> laws_;         // stable references while growing
  std::deque<LawResult> results_;
  absl::flat_hash_map<std::string, size_t> index_;   // by reduced law key
  absl::flat_hash_map<std::string, size_t> by_use_;  // by the use's own key
  size_t next_ = 0, done_ = 0, reducing_ = 0;
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
  // More threads than cores gain nothing; each costs a stack (a thousand of them
  // would not start under a 4 GiB address-space limit).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? std::min(options.threads, cores) : cores;
  // Laws are proved at reduced sizes (uses at different real sizes often share
  // one) while the derivation runs on this thread: threads - 1 workers now,
  // this thread too once it is done.
  LawProver prover(options, threads - 1);
  DeriveOptions derive_options;
  derive_options.on_law = [&](const LawUse& use) { prover.Submit(use); };
  derive_options.threads = threads;
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
  for (const LawUse& use : d.laws) prover.Submit(use);
  prover.Finish(options.progress, started);
  std::vector<size_t> relied;
  {
    std::set<size_t> seen;
    for (const LawUse& use : d.laws) {
      const size_t i = prover.LawOf(use);
      if (seen.insert(i).second) relied.push_back(i);
    }
  }
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

  // Schedule safety of the per-device order (a factored plan's on its scale unit).
  SafetyOptions safety_options;
  safety_options.memory_capacity_bytes = options.memory_capacity_bytes;
  LOOM_ASSIGN_OR_RETURN(SafetyReport safety, CheckScheduleSafety(spec, plan, safety_options));
  report.schedule_checked = safety.checked;
  report.peak_bytes = safety.peak_bytes;
  report.peak_by_role = safety.peak_by_role;
  report.schedule_replicas = safety.replicas;
  report.memory_capacity_bytes = options.memory_capacity_bytes;
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
