#ifndef LOOM_VERIFY_COUNTEREXAMPLE_H_
#define LOOM_VERIFY_COUNTEREXAMPLE_H_

// Small concrete counterexamples for lineage failures (Failure::counterexample):
// one line each, with the values a plan and its spec compute under a simple
// assignment of the inputs. Contributions read themselves (ContribStore::Example);
// these cover regions, tensors and op pieces.

#include <cstdint>
#include <string>
#include <vector>

#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/plan.h"
#include "ir/shape.h"

namespace loom::verify {

// Two regions of `tensor` that should be equal, read with the tensor's elements
// numbered along the first dim where they differ: "with 'h'[.., i, ..] = i along
// dim 1: the value holds i = 4..7 where its claim says i = 0..3". `held` and
// `wanted` name the two sides.
std::string RegionExample(const std::string& tensor, const ir::Box& held, const ir::Box& wanted,
                          const std::string& held_words = "the value holds",
                          const std::string& wanted_words = "its claim says");

// Two different tensors where one is expected: "with 'a' = 1 and 'b' = 2
// everywhere: the value holds 1 where its claim says 2".
std::string TensorExample(const std::string& held, const std::string& wanted,
                          const std::string& held_words = "the value holds",
                          const std::string& wanted_words = "its claim says");

// An operand of an op piece, by the data it carries: `tensor` (a spec tensor id)
// fixes its contents, element i being 1 + ((i + tensor) mod 7) / 8 (0 for integer
// tensors such as token ids), so equal tensors read equal data.
struct KernelOperand {
  int64_t tensor = 0;
  ir::Shape shape;
  ir::DType dtype = ir::DType::kF64;
};

// Runs the reference kernel of `kind` on the task's operands with the task's
// attributes and on the spec's with the spec's piece attributes, and names the
// first output element where they differ: "with inputs x[i] = 1 + ((i + t) mod 7)/8
// (t the tensor id): output 0 at [0,3] is 0.25 where the spec's piece gives 0.5".
// Empty when a kernel fails, the shapes disagree or the outputs agree.
std::string KernelExample(ir::OpKind kind, const std::vector<KernelOperand>& task_operands,
                          const ir::AttrMap& task_attrs,
                          const std::vector<KernelOperand>& spec_operands,
                          const ir::AttrMap& spec_attrs);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_COUNTEREXAMPLE_H_
