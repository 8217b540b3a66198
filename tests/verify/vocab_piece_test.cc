// A gradient over a vocabulary split across devices: each piece of pick_grad
// writes the columns its attributes name (vocab_begin, vocab), which no input of
// the op carries. The verifier holds the piece to the columns its output claims:
// the right attributes are proved, a piece writing other columns than it claims
// is refuted, and so are pieces that leave a column out.

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "ir/text_format.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ir::Box;
using ir::OpKind;
using ir::ValueId;

constexpr char kSpec[] = R"(
graph "vocab" {
  %t = input i64[4]
  %dy = input f64[4]
  %dx = pick_grad(%t, %dy) {vocab=8} : f64[4,8] @backward
  output %dx
}
)";

Box Columns(int64_t begin, int64_t end) { return Box{{0, 4}, {begin, end}}; }

// Device k computes the columns `claimed[k]` with attributes (vocab, vocab_begin).
struct Piece {
  Box claimed;
  int64_t vocab;
  int64_t vocab_begin;
};

ir::Plan PlanOf(const std::vector<Piece>& pieces) {
  ir::Plan plan;
  plan.mesh = ir::Mesh({ir::MeshAxis{"tp", static_cast<int64_t>(pieces.size())}});
  auto value = [&](int64_t device, ir::TensorId tensor, Box box, ir::DType dtype) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan.values.size());
    v.device = device;
    v.sub = ir::SubTensor{tensor, std::move(box)};
    v.dtype = dtype;
    plan.values.push_back(std::move(v));
    return plan.values.back().id;
  };
  for (size_t k = 0; k < pieces.size(); ++k) {
    const int64_t device = static_cast<int64_t>(k);
    const ValueId t = value(device, 0, Box{{0, 4}}, ir::DType::kI64);
    const ValueId dy = value(device, 1, Box{{0, 4}}, ir::DType::kF64);
    const ValueId dx = value(device, 2, pieces[k].claimed, ir::DType::kF64);
    ir::Task task;
    task.id = static_cast<int>(plan.tasks.size());
    task.op = 0;
    task.kind = OpKind::kPickGrad;
    task.device = device;
    task.attrs = ir::AttrMap{{"vocab", pieces[k].vocab}, {"vocab_begin", pieces[k].vocab_begin}};
    task.inputs = {t, dy};
    task.outputs = {dx};
    plan.tasks.push_back(std::move(task));
    plan.outputs.push_back(dx);
  }
  return plan;
}

Verdict VerdictOf(const std::vector<Piece>& pieces) {
  auto spec = ir::ParseGraph(kSpec, "vocab.loom");
  EXPECT_TRUE(spec.ok()) << spec.status();
  const ir::Plan plan = PlanOf(pieces);
  EXPECT_TRUE(ir::ValidatePlan(*spec, plan).ok()) << ir::ValidatePlan(*spec, plan);
  VerifyOptions options;
  options.threads = 1;
  auto report = Verify(*spec, plan, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? report->verdict : Verdict::kUnknown;
}

TEST(VocabPieceTest, PiecesWritingTheirClaimedColumnsAreProved) {
  EXPECT_EQ(VerdictOf({{Columns(0, 4), 4, 0}, {Columns(4, 8), 4, 4}}), Verdict::kEquivalent);
  EXPECT_EQ(VerdictOf({{Columns(0, 2), 2, 0}, {Columns(2, 8), 6, 2}}), Verdict::kEquivalent);
}

TEST(VocabPieceTest, APieceWritingOtherColumnsThanItClaimsIsRefuted) {
  // Device 1 claims columns 4..7 but writes the gradient of columns 0..3.
  EXPECT_EQ(VerdictOf({{Columns(0, 4), 4, 0}, {Columns(4, 8), 4, 0}}),
            Verdict::kNotEquivalent);
}

TEST(VocabPieceTest, PiecesLeavingAColumnOutAreRefuted) {
  // Both devices hold columns 0..3: nothing holds 4..7 of the gradient.
  EXPECT_EQ(VerdictOf({{Columns(0, 4), 4, 0}, {Columns(0, 4), 4, 0}}),
            Verdict::kNotEquivalent);
}

}  // namespace
}  // namespace loom::verify
