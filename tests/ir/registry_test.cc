#include <set>

#include "gtest/gtest.h"
#include "ir/op_kind.h"
#include "ir/op_schema.h"
#include "tests/ir/op_samples.h"

namespace loom::ir {
namespace {

// Every op kind in the list has a complete schema (shape rule, signature, kernel, FLOPs).
TEST(RegistryTest, EveryOpKindHasACompleteSchema) {
  for (int i = 0; i < kNumOpKinds; ++i) {
    OpKind kind = static_cast<OpKind>(i);
    const OpSchema& schema = GetOpSchema(kind);
    EXPECT_EQ(schema.kind, kind) << OpKindName(kind);
    EXPECT_NE(schema.infer, nullptr) << OpKindName(kind);
    EXPECT_NE(schema.signature, nullptr) << OpKindName(kind);
    EXPECT_NE(schema.kernel, nullptr) << OpKindName(kind);
    EXPECT_NE(schema.flops, nullptr) << OpKindName(kind);
    EXPECT_FALSE(schema.doc.empty()) << OpKindName(kind);
  }
}

// Names parse back to their kinds and the list is sorted (the parser relies on it).
TEST(RegistryTest, OpNamesRoundTripAndAreSorted) {
  for (int i = 0; i < kNumOpKinds; ++i) {
    OpKind kind = static_cast<OpKind>(i);
    auto parsed = ParseOpKind(OpKindName(kind));
    ASSERT_TRUE(parsed.ok()) << OpKindName(kind);
    EXPECT_EQ(*parsed, kind);
    if (i > 0) {
      EXPECT_LT(OpKindName(static_cast<OpKind>(i - 1)), OpKindName(kind));
    }
  }
  EXPECT_FALSE(ParseOpKind("matmull").ok());
  EXPECT_EQ(ParseOpKind("matmull").status().message(), "unknown op 'matmull'");
}

// Every op kind has at least one sample, so kernel, gradient and format tests reach it.
TEST(RegistryTest, EveryOpKindHasASample) {
  std::set<OpKind> seen;
  for (const auto& sample : testing::AllSamples(/*seed=*/1)) seen.insert(sample.kind);
  for (int i = 0; i < kNumOpKinds; ++i) {
    EXPECT_TRUE(seen.count(static_cast<OpKind>(i))) << OpKindName(static_cast<OpKind>(i));
  }
}

// Each sample's shape inference succeeds and its signature labels every dim.
TEST(RegistryTest, SamplesInferAndSignaturesCoverEveryDim) {
  for (const auto& sample : testing::AllSamples(/*seed=*/2)) {
    SCOPED_TRACE(std::string(OpKindName(sample.kind)) + "/" + sample.label);
    auto out = InferOutputTypes(sample.kind, sample.inputs, sample.attrs);
    ASSERT_TRUE(out.ok()) << out.status();
    auto sig = GetOpSchema(sample.kind).signature(sample.inputs, sample.attrs);
    ASSERT_TRUE(sig.ok()) << sig.status();
    ASSERT_EQ(sig->inputs.size(), sample.inputs.size());
    ASSERT_EQ(sig->outputs.size(), out->size());
    for (size_t i = 0; i < sample.inputs.size(); ++i) {
      EXPECT_EQ(static_cast<int>(sig->inputs[i].size()), sample.inputs[i].shape.rank());
    }
    for (size_t i = 0; i < out->size(); ++i) {
      EXPECT_EQ(static_cast<int>(sig->outputs[i].size()), (*out)[i].shape.rank());
    }
    for (const auto* side : {&sig->inputs, &sig->outputs}) {
      for (const auto& labels : *side) {
        for (const auto& l : labels) EXPECT_TRUE(sig->kinds.count(l)) << l;
      }
    }
  }
}

}  // namespace
}  // namespace loom::ir
