#ifndef LOOM_VERIFY_HOMOGENEITY_H_
#define LOOM_VERIFY_HOMOGENEITY_H_

// How an op's output follows its operands under addition and scaling: what the
// derivation (verify/derive.h) lets partial sums and scaled values pass through.

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "ir/graph.h"
#include "ir/op_kind.h"
#include "ir/plan.h"

namespace loom::verify {

// Input positions in which an op is jointly linear (a piece may hold partial sums
// there and the pieces' outputs then add up to the op's output), as its schema
// declares (ir::OpSchema::linear_in): a cast only between float dtypes, where it
// is the identity over the reals. Each use is still proved as a law (verify/laws.h).
std::vector<std::vector<int>> LinearGroups(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                                           absl::Span<const ir::TensorType> out);

// Groups of input positions in which an op's output is homogeneous: scaling every
// operand of the group by k scales the output by k^exponent. The linear groups,
// then those the schema declares (ir::OpSchema::homogeneous_in: a gradient op's
// incoming gradient, a divisor with exponent -1). A value a program scaled on its
// way (a rank's gradient of its own mean loss) passes through these with its
// factor; anywhere else the factor changes what the op computes.
// tests/verify/homogeneity_test.cc checks every group on the reference kernels.
struct Homogeneity {
  std::vector<int> positions;
  int exponent = 1;
};
std::vector<Homogeneity> HomogeneousGroups(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                                           absl::Span<const ir::TensorType> out);

// The factor an op's output holds when operand i holds factor[i] times its value
// (zero[i]: it holds zeros, whose factor does not matter): the product, over
// disjoint homogeneous groups covering every scaled operand, each with one factor
// over its operands that are not zeros, of that factor to the group's exponent.
// Where no such groups exist, `operand` names a scaled operand the op is not
// proportional to (`why` says how). The derivation and the PyTorch front end's
// claims both read a piece's factor here.
struct PieceScale {
  ir::Rational factor = ir::Rational::One();
  int operand = -1;  // >= 0: the scaled operand the op is not proportional to
  std::string why;
};
PieceScale ScaleOfPiece(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                        absl::Span<const ir::TensorType> out,
                        absl::Span<const ir::Rational> factor, absl::Span<const char> zero);

// Partial(avg) pieces meeting values held whole in a linear op (a rank's mean over
// its columns minus a replicated log-sum-exp; DTensor keeps the result
// Partial(avg)). `members[i]` is n where operand i holds one of n equal members'
// shares of a sum (every such operand of a group the same member's), 0 where it
// holds the complete value, -1 otherwise. In a linear group whose operands that
// are not zeros are such shares held n times (factor n) and complete values held
// once, and that has both, each complete value is n times its even share (1/n of
// it, the member's part): the members' pieces add up to the op on the complete
// values. Returns the factors with those complete operands' set to n, and which
// operands they are; `factor` and nothing marked where no group qualifies.
struct EvenShares {
  std::vector<ir::Rational> factor;
  std::vector<char> even;  // operand i is read as n times its even share
};
EvenShares EvenShareFactors(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                            absl::Span<const ir::TensorType> out,
                            absl::Span<const ir::Rational> factor, absl::Span<const char> zero,
                            absl::Span<const int64_t> members);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_HOMOGENEITY_H_
