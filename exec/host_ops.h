#ifndef LOOM_EXEC_HOST_OPS_H_
#define LOOM_EXEC_HOST_OPS_H_

// Host-side building blocks shared by the plan interpreter and the CPU backend:
// dense block copies, the collectives' semantics on host tensors, how errors name
// plan items, and the numeric comparison helpers.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/plan.h"

namespace loom::exec {

// Copies the block of `extents` at `src_origin` in `src` to `dst_origin` in `dst`.
void CopyBlock(const ir::HostTensor& src, absl::Span<const int64_t> src_origin,
               ir::HostTensor& dst, absl::Span<const int64_t> dst_origin,
               absl::Span<const int64_t> extents);
// The region `box` of `t` (the box must lie inside t's shape).
ir::HostTensor SliceBox(const ir::HostTensor& t, const ir::Box& box);
// Every element of `t` times `scale` (a claim's scale: what a plan input holds of
// its piece); nothing when it is 1.
void ScaleBy(ir::HostTensor& t, const ir::Rational& scale);
// Positions [begin, begin + size) of `t` along `dim`.
ir::HostTensor SliceDim(const ir::HostTensor& t, int dim, int64_t begin, int64_t size);
// `parts` concatenated along `dim` (same rank, equal dims elsewhere).
ir::HostTensor ConcatDim(absl::Span<const ir::HostTensor> parts, int dim);

// "value 12 (device 1, 'logits' [0:2,0:7] full)".
std::string DescribeValue(const ir::Graph& spec, const ir::PlanValue& v);
// "task 3 (device 0, linear)".
std::string DescribeTask(const ir::Task& t);
// "collective 5 (all_reduce over devices 0,1)".
std::string DescribeCollective(const ir::Collective& c);
// InvalidArgument "plan: <where>: <what>".
absl::Status PlanError(absl::string_view where, absl::string_view what);

// Whether a collective over its group has the inputs and outputs its kind needs.
bool CollectiveArityOk(const ir::Collective& c);
// Device that holds the i-th input / output of a collective.
int64_t CollectiveInputDevice(const ir::Collective& c, size_t i);
int64_t CollectiveOutputDevice(const ir::Collective& c, size_t i);

// The outputs of `c` given its inputs (inputs[i] held by devices[i]), as
// ir/collective_semantics.h defines every kind and reduce op. Inputs of mismatched
// shapes, dims out of range and chunks that do not divide are InvalidArgument
// errors naming the collective.
absl::StatusOr<std::vector<ir::HostTensor>> CollectiveOutputs(
    const ir::Collective& c, absl::Span<const ir::HostTensor* const> in);

// Smallest vocabulary in `spec`: rows of embedding tables, classes of cross-entropy
// logits. Integer inputs drawn below it are valid for every op reading them.
std::optional<int64_t> SmallestVocabulary(const ir::Graph& spec);

// Tensor roles as numeric reports group them.
enum class RoleClass { kLoss, kGradient, kParameter, kOther };
inline constexpr int kNumRoleClasses = 4;
RoleClass ClassOf(ir::TensorRole role);

// Values below this fraction of the largest value of their role class are
// measured against that fraction: a gradient that is zero in exact arithmetic
// (the key bias's, softmax being shift invariant) holds only rounding noise, which
// a different summation order changes completely.
inline constexpr double kNoiseFloor = 1e-6;

// Largest |x| of `t`.
double MaxAbs(const ir::HostTensor& t);
// Largest |a - b| of two tensors of equal size. A NaN or an infinity on one side
// only counts as an infinite difference.
double MaxDiff(const ir::HostTensor& a, const ir::HostTensor& b);

}  // namespace loom::exec

#endif  // LOOM_EXEC_HOST_OPS_H_
