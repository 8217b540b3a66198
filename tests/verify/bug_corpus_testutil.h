#ifndef LOOM_TESTS_VERIFY_BUG_CORPUS_TESTUTIL_H_
#define LOOM_TESTS_VERIFY_BUG_CORPUS_TESTUTIL_H_

// The bug corpus: correct plans made by transform::Parallelize, each with one
// real bug injected, and the place where the verifier must report it. Shared by
// the bug_corpus_*_test.cc files; each keeps one theme.

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/plan.h"
#include "transform/strategy.h"
#include "verify/derive.h"

namespace loom::verify::corpus {

// Where the first failure of the expected class must point.
struct Where {
  std::string item;              // Failure::item exactly ("collective 3 all_reduce")
  std::string tensor;            // Failure::tensor exactly (empty: not checked)
  std::vector<int64_t> devices;  // each is among Failure::devices
  std::string message_has;       // a substring of Failure::message (empty: not checked)
  // Devices on which some failure of the expected class must be reported (a bug
  // injected on several ranks).
  std::vector<int64_t> every_device;
};

struct Mutant {
  std::string name;
  std::string model;
  transform::Strategy strategy;
  int layers = 1;     // 0: the tiny model's default
  int64_t batch = 0;  // 0: 2 * dp
  // Edits a correct plan; nullopt when the plan has no place for this bug.
  std::function<std::optional<Where>(const ir::Graph&, ir::Plan&)> mutate;
  FailureClass expect = FailureClass::kComputationDiffers;
  // The plan is ordered by the 1F1B schedule before mutating; the bug is in the
  // order, found by CheckScheduleSafety while the lineage stays clean.
  bool scheduled = false;
};

// Prints the name (gtest shows it for parameterised tests).
void PrintTo(const Mutant& m, std::ostream* os);

// Builds the plan, mutates it and checks that the verifier rejects it with the
// expected class at the expected place, with a counterexample.
void ExpectRejected(const Mutant& m);

// ---- places
std::string TensorName(const ir::Graph& spec, const ir::Plan& plan, ir::ValueId v);
std::string ItemName(const ir::Task& t);        // "task 12 'linear'"
std::string ItemName(const ir::Collective& c);  // "collective 3 all_reduce"

// Tasks computing a piece of the spec op that writes `tensor` (its first output),
// in id order.
std::vector<ir::TaskId> TasksWriting(const ir::Graph& spec, const ir::Plan& plan,
                                     const std::string& tensor);
// Tasks of `kind` (with a logical op), in id order.
std::vector<ir::TaskId> TasksOfKind(const ir::Plan& plan, ir::OpKind kind);
// Collectives of `kind` whose first output claims `tensor` (any tensor when
// empty), in id order.
std::vector<ir::CollectiveId> CollectivesOf(const ir::Graph& spec, const ir::Plan& plan,
                                            ir::CollectiveKind kind,
                                            const std::string& tensor = "");
// The first collective of `kind` with more than one member (in `phase` when set).
std::optional<ir::CollectiveId> FirstCollective(const ir::Plan& plan, ir::CollectiveKind kind,
                                                std::optional<ir::Phase> phase = std::nullopt);
// Tasks reading value v, in id order.
std::vector<ir::TaskId> TaskReaders(const ir::Plan& plan, ir::ValueId v);

// ---- edits (ids stay dense; new items are appended)
ir::ValueId AddValue(ir::Plan& plan, ir::PlanValue v);
ir::TaskId AddTask(ir::Plan& plan, ir::Task t);
ir::CollectiveId AddCollective(ir::Plan& plan, ir::Collective c);
// A local zero fill on `device` whose output claims zeros of the tensor and box of
// value `like`.
ir::ValueId AddZeros(ir::Plan& plan, ir::ValueId like, int64_t device);
// Replaces every read of `from` by a read of `to`.
void Rewire(ir::Plan& plan, ir::ValueId from, ir::ValueId to);
// Each member of collective c keeps its own input: c becomes member 0 alone and
// one new collective per other member (an all-reduce that no longer reduces).
void SplitIntoMembers(ir::Plan& plan, ir::CollectiveId c);
// Removes collective c and its outputs; readers of output i read input i.
void Bypass(ir::Plan& plan, ir::CollectiveId c);
// Swaps members i and j of collective c (device, input and output together).
void SwapMembers(ir::Plan& plan, ir::CollectiveId c, int i, int j);
// Exchanges member i of collective a with member j of collective b.
void TradeMembers(ir::Plan& plan, ir::CollectiveId a, int i, ir::CollectiveId b, int j);
// Runs collective c a second time on its own outputs; its readers read the
// repeated collective's outputs. Returns the new collective.
ir::CollectiveId Repeat(ir::Plan& plan, ir::CollectiveId c);

}  // namespace loom::verify::corpus

#endif  // LOOM_TESTS_VERIFY_BUG_CORPUS_TESTUTIL_H_
