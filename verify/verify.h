#ifndef LOOM_VERIFY_VERIFY_H_
#define LOOM_VERIFY_VERIFY_H_

// `Verify`: is a distributed plan equivalent to its logical training step?
//
// Three parts, each of which can refute; only all three together prove:
//  1. lineage derivation (verify/derive.h): every value's contents derived from
//     the plan's inputs through every task and collective, claims checked, sums
//     checked exactly, the spec's outputs covered;
//  2. partition laws (verify/laws.h): each op kind's pieces, as the plan uses
//     them, compose to the op, proved with symbolic kernels and Z3;
//  3. schedule safety (verify/schedule_safety.h), when the plan has an order.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "verify/derive.h"
#include "verify/schedule_safety.h"

namespace loom::verify {

enum class Verdict { kEquivalent, kNotEquivalent, kUnknown };
std::string VerdictWords(Verdict v);  // "proved equivalent", "not equivalent", "undecided"
int ExitCode(Verdict v);              // 0, 1, 2

// How far the law proofs are: laws finished (proved or not), proved, in all.
struct Progress {
  int64_t laws_done = 0;
  int64_t laws_proved = 0;
  int64_t laws_total = 0;
  int64_t cache_hits = 0;
  double seconds = 0;
};

struct VerifyOptions {
  // Directory of the proof cache; empty: no cache.
  std::string cache_dir;
  unsigned solver_timeout_ms = 10000;
  std::optional<int64_t> memory_capacity_bytes;
  int threads = 0;  // 0: every core; more than the cores count as every core
  // Called from the calling thread about ten times a second while the laws are
  // proved, and once when they are done.
  std::function<void(const Progress&)> progress;
};

// The `item` of the failures and undecided entries of an op kind's partition law:
// "partition law of 'linear'".
std::string LawItem(const std::string& op_kind);

// The proof of one partition law.
struct LawResult {
  std::string op_kind;
  std::string key;
  std::string verdict;  // "proved", "refuted", "unknown"
  std::string detail;
  bool cached = false;
  double seconds = 0;
};

struct VerifyReport {
  Verdict verdict = Verdict::kUnknown;
  std::vector<Failure> failures;     // lineage, law and schedule failures, data-flow order
  std::vector<Undecided> undecided;  // why the verdict is not a proof
  std::vector<LawResult> laws;
  int64_t items = 0;
  int64_t values = 0;
  // Layer stages cut for the derivation, classes of alike ones, and stages whose
  // derivation was an alike stage's (verify/stages.h).
  int64_t stages = 0;
  int64_t distinct_stages = 0;
  int64_t stages_reused = 0;
  int64_t laws_proved = 0;
  int64_t cache_hits = 0;
  bool schedule_checked = false;
  std::vector<int64_t> peak_bytes;   // per device, when the schedule was checked
  std::vector<MemoryByRole> peak_by_role;  // per device: its peak by role
  // A factored plan's order is checked on its scale unit, which this many
  // data-parallel replicas run (1: an explicit plan).
  int64_t schedule_replicas = 1;
  std::optional<int64_t> memory_capacity_bytes;  // the capacity checked, if any
  double seconds = 0;
  double derive_seconds = 0;         // of which lineage derivation
  double law_seconds = 0;            // and partition-law proofs
};

// Verifies an explicit or factored plan (a factored one is expanded).
absl::StatusOr<VerifyReport> Verify(const ir::Graph& spec, const ir::Plan& plan,
                                    const VerifyOptions& options = {});

}  // namespace loom::verify

#endif  // LOOM_VERIFY_VERIFY_H_
