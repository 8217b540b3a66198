#include "ir/text_format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "tests/ir/op_samples.h"

namespace loom::ir {
namespace {

// A graph holding one op of `sample`: inputs in0.. (roles cycle through input,
// parameter, state), outputs out0.., all outputs marked.
absl::StatusOr<Graph> SampleGraph(const testing::OpSample& sample) {
  Graph graph(absl::StrCat(OpKindName(sample.kind), "/", sample.label));
  const TensorRole roles[] = {TensorRole::kInput, TensorRole::kParameter,
                              TensorRole::kOptimizerState};
  std::vector<TensorId> inputs;
  for (size_t i = 0; i < sample.inputs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorId id,
                          graph.AddInput(absl::StrCat("in", i), sample.inputs[i].shape,
                                         sample.inputs[i].dtype, roles[i % 3]));
    inputs.push_back(id);
  }
  LOOM_ASSIGN_OR_RETURN(auto types, InferOutputTypes(sample.kind, sample.inputs, sample.attrs));
  std::vector<OutputSpec> outputs;
  for (size_t i = 0; i < types.size(); ++i) outputs.push_back({absl::StrCat("out", i)});
  LOOM_ASSIGN_OR_RETURN(auto ids, graph.AddOp(sample.kind, inputs, sample.attrs,
                                              OpInfo{Phase::kForward, /*layer=*/2,
                                                     /*microbatch=*/1},
                                              outputs));
  for (TensorId id : ids) graph.AddOutput(id);
  return graph;
}

// A few ops over every phase and role, with named dims on inputs and results, a
// two-result op, names that need quoting, and attributes of every type.
Graph MultiOpGraph() {
  Graph g("multi \"op\"");
  Shape bd({2, 3}, {"b", ""});
  TensorId x = *g.AddInput("x", bd, DType::kF32, TensorRole::kInput);
  TensorId w = *g.AddInput("layers.0/w", Shape{2, 3}, DType::kF32, TensorRole::kParameter);
  TensorId m = *g.AddInput("layers.0/w.m", Shape{2, 3}, DType::kF32,
                           TensorRole::kOptimizerState);
  TensorId h = (*g.AddOp(OpKind::kMul, {x, w}, {}, {Phase::kForward, 0, 0}, {{"h"}}))[0];
  Shape h_named = g.tensor(h).shape;
  h_named.set_dim_name(1, "d model");
  EXPECT_TRUE(g.SetDimNames(h, h_named));
  TensorId s = (*g.AddOp(OpKind::kScale, {h}, {{"factor", 0.1}}, {Phase::kForward, 1, -1},
                         {{"h 1 \"q\" \\"}}))[0];
  TensorId c = (*g.AddOp(OpKind::kFill, {},
                         {{"shape", std::vector<int64_t>{}},
                          {"value", std::numeric_limits<double>::infinity()},
                          {"dtype", std::string("f32")}},
                         {Phase::kBackward, -1, -1}, {{"c"}}))[0];
  TensorId dh = (*g.AddOp(OpKind::kMulScalar, {s, c}, {}, {Phase::kBackward, 0, 1},
                          {{"d.h", TensorRole::kGradient}}))[0];
  auto two = *g.AddOp(OpKind::kSwiGluGrad, {x, w, dh}, {}, {Phase::kBackward, 0, 1},
                      {{"d.x", TensorRole::kGradient}, {"d.w", TensorRole::kGradient}});
  Shape rows_named = g.tensor(two[1]).shape;
  rows_named.set_dim_name(0, "rows");
  EXPECT_TRUE(g.SetDimNames(two[1], rows_named));
  TensorId upd = (*g.AddOp(OpKind::kAccumulate, {two[1], m, w}, {},
                           {Phase::kOptimizer, 3, 7}, {{"w.new", TensorRole::kParameter}}))[0];
  g.AddOutput(upd);
  g.AddOutput(h);
  return g;
}

// Parses `text` expecting an InvalidArgument and returns its message.
std::string ErrorOf(absl::string_view text) {
  auto graph = ParseGraph(text, "model.loom");
  EXPECT_FALSE(graph.ok()) << "parsed:\n" << text;
  if (graph.ok()) return "";
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(graph.status().message());
}

// ---- round trips ------------------------------------------------------------------

// Every op sample, as a one-op graph, prints and parses back to an equal graph.
TEST(TextFormatTest, RoundTripsOneOpGraphOfEverySample) {
  int checked = 0;
  for (uint64_t seed : {1, 2}) {
    for (const auto& sample : testing::AllSamples(seed)) {
      SCOPED_TRACE(absl::StrCat(OpKindName(sample.kind), "/", sample.label));
      auto graph = SampleGraph(sample);
      ASSERT_TRUE(graph.ok()) << graph.status();
      std::string text = PrintGraph(*graph);
      auto parsed = ParseGraph(text);
      ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
      EXPECT_TRUE(*parsed == *graph) << text;
      EXPECT_EQ(PrintGraph(*parsed), text);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// A multi-op graph with named dims, quoted names, phases, roles, tags and odd
// attribute values round-trips exactly, ids included.
TEST(TextFormatTest, RoundTripsMultiOpGraph) {
  Graph g = MultiOpGraph();
  ASSERT_TRUE(g.Validate().ok()) << g.Validate();
  std::string text = PrintGraph(g);
  auto parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_TRUE(*parsed == g) << text << "\n---\n" << PrintGraph(*parsed);
  EXPECT_EQ(PrintGraph(*parsed), text);
  EXPECT_EQ(parsed->tensor(*parsed->FindTensor("h")).shape.dim_name(1), "d model");
  EXPECT_EQ(parsed->tensor(*parsed->FindTensor("d.w")).shape.dim_name(0), "rows");
}

// Result dim names follow the text, also when inference would propagate others.
TEST(TextFormatTest, ResultDimNamesAreTakenFromTheText) {
  auto g = ParseGraph(R"(graph "g" {
  %x = input f32[b:2,3]
  %y = neg(%x) : f32[2,c:3] @forward
})");
  ASSERT_TRUE(g.ok()) << g.status();
  const Tensor& y = g->tensor(1);
  EXPECT_EQ(y.shape.dim_name(0), "");
  EXPECT_EQ(y.shape.dim_name(1), "c");
}

// A small graph prints exactly as documented.
TEST(TextFormatTest, PrintsGoldenText) {
  Graph g("golden");
  TensorId x = *g.AddInput("x", Shape({2, 3}, {"b", ""}), DType::kF32, TensorRole::kInput);
  TensorId w = *g.AddInput("w", Shape{2, 3}, DType::kF32, TensorRole::kParameter);
  TensorId h = (*g.AddOp(OpKind::kMul, {x, w}, {}, {Phase::kForward, 0, -1}, {{"h"}}))[0];
  TensorId y = (*g.AddOp(OpKind::kScale, {h}, {{"factor", 0.5}}, {Phase::kForward, 0, 1},
                         {{"y.0", TensorRole::kLoss}}))[0];
  (void)*g.AddOp(OpKind::kFill, {},
                 {{"shape", std::vector<int64_t>{}}, {"value", 1.0},
                  {"dtype", std::string("f32")}},
                 {Phase::kBackward, -1, -1}, {{"d y"}});
  g.AddOutput(y);
  EXPECT_EQ(PrintGraph(g), R"(graph "golden" {
  %x = input f32[b:2,3]
  %w = parameter f32[2,3]
  %h = mul(%x, %w) : f32[b:2,3] @forward layer=0
  %y.0 = scale(%h) {factor=0.5} : f32[b:2,3] loss @forward layer=0 mb=1
  %"d y" = fill() {dtype="f32", shape=[], value=1.0} : f32[] @backward
  output %y.0
}
)");
}

// The example of docs/formats.md parses and prints back as written.
TEST(TextFormatTest, ParsesDocumentedExample) {
  constexpr absl::string_view kExample = R"(graph "toy-lm" {
  %tokens = input i64[b:2,s:4]
  %targets = input i64[b:2,s:4]
  %embed.weight = parameter f32[vocab:16,8]
  %h = embedding(%tokens, %embed.weight) : f32[b:2,s:4,8] @forward layer=0 mb=0
  %gate, %up = split(%h) {dim=2, sizes=[4,4]} : f32[2,4,4], f32[2,4,4] @forward layer=0 mb=0
  %act = swiglu(%gate, %up) : f32[2,4,4] @forward layer=0 mb=0
  %y = concat(%act, %act) {dim=2} : f32[b:2,s:4,8] @forward layer=0 mb=0
  %logits = linear(%y, %embed.weight) : f32[2,4,16] @forward mb=0
  %loss = cross_entropy(%logits, %targets) : f32[] loss @forward mb=0
  %d.loss = fill() {dtype="f32", shape=[], value=1.0} : f32[] gradient @backward mb=0
  %d.logits = cross_entropy_grad(%logits, %targets, %d.loss) : f32[2,4,16] gradient @backward mb=0
  %d.embed.weight = linear_wgrad(%d.logits, %y) : f32[16,8] gradient @backward mb=0
  %embed.weight.new = sgd(%embed.weight, %d.embed.weight) {lr=0.01} : f32[vocab:16,8] parameter @optimizer
  output %loss, %embed.weight.new
}
)";
  auto g = ParseGraph(absl::StrCat("# A toy language-model step.\n", kExample));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_tensors(), 14);
  EXPECT_EQ(g->num_ops(), 10);
  EXPECT_TRUE(g->Validate().ok());
  const Op& split = g->op(1);
  EXPECT_EQ(split.kind, OpKind::kSplit);
  EXPECT_EQ(split.outputs, (std::vector<TensorId>{4, 5}));
  EXPECT_EQ(*split.attrs.GetInts("sizes"), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(g->tensor(*g->FindTensor("loss")).role, TensorRole::kLoss);
  EXPECT_EQ(g->op(9).info.phase, Phase::kOptimizer);
  EXPECT_EQ(PrintGraph(*g), kExample);
}

// Names with spaces, quotes, backslashes and control characters survive quoting.
TEST(TextFormatTest, RoundTripsNamesThatNeedQuoting) {
  Graph g("name with \"quotes\"\n");
  TensorId x = *g.AddInput("line\nbreak\t\\", Shape({2}, {"dim \"q\""}), DType::kF32,
                           TensorRole::kInput);
  ASSERT_TRUE(g.AddOp(OpKind::kNeg, {x}, {}, {}, {{"#not a comment"}}).ok());
  g.AddOutput(1);
  std::string text = PrintGraph(g);
  auto parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_TRUE(*parsed == g) << text;
}

// An empty graph prints with no output line and parses back.
TEST(TextFormatTest, RoundTripsEmptyGraph) {
  Graph g("");
  EXPECT_EQ(PrintGraph(g), "graph \"\" {\n}\n");
  auto parsed = ParseGraph(PrintGraph(g));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(*parsed == g);
}

// Hand-written text with comments and free layout reads into the expected graph.
TEST(TextFormatTest, ParsesHandWrittenTextWithComments) {
  auto g = ParseGraph(R"(# a comment
graph "hand" {   # trailing comment
  %x = input f32[b:2, 3]
  %"w w" = parameter f32[2,3]

  %y = add(%x, %"w w") : f32[2,3]
      @optimizer mb=4 layer=2   # tags in any order
  %c = fill() { shape=[ ], value=-inf, dtype="f32" } : f32[] @forward
  %z = transpose(%y) {perm=[1,
                          0]} : f32[3,2] @forward
  output %y, %x
})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->name(), "hand");
  ASSERT_EQ(g->num_tensors(), 5);
  ASSERT_EQ(g->num_ops(), 3);
  EXPECT_EQ(g->tensor(0).shape, Shape({2, 3}, {"b", ""}));
  EXPECT_EQ(g->tensor(1).name, "w w");
  EXPECT_EQ(g->tensor(1).role, TensorRole::kParameter);
  const Op& op = g->op(0);
  EXPECT_EQ(op.kind, OpKind::kAdd);
  EXPECT_EQ(op.inputs, (std::vector<TensorId>{0, 1}));
  EXPECT_EQ(op.info.phase, Phase::kOptimizer);
  EXPECT_EQ(op.info.layer, 2);
  EXPECT_EQ(op.info.microbatch, 4);
  EXPECT_TRUE(op.attrs.empty());
  const AttrMap& fill = g->op(1).attrs;
  EXPECT_TRUE(fill.GetInts("shape")->empty());
  EXPECT_EQ(*fill.GetFloat("value"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(*fill.GetString("dtype"), "f32");
  EXPECT_EQ(*g->op(2).attrs.GetInts("perm"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(g->outputs(), (std::vector<TensorId>{2, 0}));
  EXPECT_EQ(g->tensor(2).shape, Shape({2, 3}));  // names come from the written type
}

// Float attributes, including infinities, NaN and subnormals, survive a round trip.
TEST(TextFormatTest, FloatAttributesRoundTripExactly) {
  const double values[] = {0.1, -0.0, 1e300, 5e-324, 2.2250738585072014e-308,
                           123456789.123456789, std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  for (double v : values) {
    SCOPED_TRACE(v);
    Graph g("f");
    TensorId x = *g.AddInput("x", Shape{2}, DType::kF32, TensorRole::kInput);
    ASSERT_TRUE(g.AddOp(OpKind::kScale, {x}, {{"factor", v}}, {}, {{"y"}}).ok());
    auto parsed = ParseGraph(PrintGraph(g));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    double back = *parsed->op(0).attrs.GetFloat("factor");
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(back));
    } else {
      EXPECT_EQ(back, v);
      EXPECT_EQ(std::signbit(back), std::signbit(v));
      EXPECT_TRUE(*parsed == g);
    }
    // A float stays a float even when its value is integral.
    EXPECT_TRUE(std::holds_alternative<double>(*parsed->op(0).attrs.Find("factor")));
  }
}

// ---- errors -------------------------------------------------------------------------

// An unknown op kind is reported at the op name.
TEST(TextFormatErrorTest, UnknownOp) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h = matmull(%a, %a) : f32[2,3] @forward
})"),
            "model.loom:3:8: unknown op 'matmull'");
}

// A missing closing parenthesis is reported at the token found instead.
TEST(TextFormatErrorTest, ExpectedClosingParen) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h = add(%a, %a : f32[2,3] @forward
})"),
            "model.loom:3:19: expected ')'");
}

// Using a tensor that was never defined names it.
TEST(TextFormatErrorTest, UnknownTensor) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h = add(%a, %h.3) : f32[2,3] @forward
})"),
            "model.loom:3:16: unknown tensor '%h.3'");
}

// Defining a name twice fails, for declarations, op results and within one result list.
TEST(TextFormatErrorTest, TensorAlreadyDefined) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %x = input f32[2,3]
  %x = parameter f32[2,3]
})"),
            "model.loom:3:3: tensor '%x' is already defined");
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %x = input f32[2,3]
  %y, %x = swiglu_grad(%x, %x, %x) : f32[2,3], f32[2,3] @backward
})"),
            "model.loom:3:7: tensor '%x' is already defined");
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %x = input f32[2,3]
  %y, %y = swiglu_grad(%x, %x, %x) : f32[2,3], f32[2,3] @backward
})"),
            "model.loom:3:7: tensor '%y' is already defined");
}

// Shape-inference errors of Graph::AddOp pass through, placed at the op name.
TEST(TextFormatErrorTest, InferenceErrorPassesThroughAtOpName) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %b = input f32[2,4]
  %h = add(%a, %b) : f32[2,3] @forward
})"),
            "model.loom:4:8: op 'add' (h): input 1 is f32[2,4], which does not broadcast with "
            "input 0's f32[2,3] (dim 1: 4 against 3) (inputs: 'a' f32[2,3], 'b' f32[2,4])");
}

// A written result type that differs from the inferred one is reported at the type.
TEST(TextFormatErrorTest, ResultTypeMismatch) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h = add(%a, %a) : f32[2,4] @forward
})"),
            "model.loom:3:22: result type f32[2,4] does not match inferred f32[2,3]");
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h = add(%a, %a) : f64[2,3] @forward
})"),
            "model.loom:3:22: result type f64[2,3] does not match inferred f32[2,3]");
}

// The number of result types must match the number of results.
TEST(TextFormatErrorTest, ResultTypeCountMismatch) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h = add(%a, %a) : f32[2,3], f32[2,3] @forward
})"),
            "model.loom:3:22: expected 1 result types, got 2");
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h = add(%a, %a) : @forward
})"),
            "model.loom:3:22: expected 1 result types, got 0");
}

// A result count the op does not produce is Graph::AddOp's error.
TEST(TextFormatErrorTest, ResultCountDiffersFromOp) {
  EXPECT_EQ(ErrorOf(R"(graph "m" {
  %a = input f32[2,3]
  %h, %g = add(%a, %a) : f32[2,3], f32[2,3] @forward
})"),
            "model.loom:3:12: op 'add' (h): has 1 outputs, 2 names given");
}

// Unknown roles, dtypes and phases are named at their position.
TEST(TextFormatErrorTest, UnknownNames) {
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = weights f32[2]\n}"),
            "model.loom:2:8: unknown tensor role 'weights'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f33[2]\n}"),
            "model.loom:2:14: unknown dtype 'f33'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n  %b = neg(%a) : f32[2] @fwd\n}"),
            "model.loom:3:26: unknown phase 'fwd'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n  %b = neg(%a) : f32[2] grad "
                    "@forward\n}"),
            "model.loom:3:25: unknown tensor role 'grad'");
}

// Lexical errors: stray characters, bad strings, malformed numbers.
TEST(TextFormatErrorTest, LexicalErrors) {
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  $a = input f32[2]\n}"),
            "model.loom:2:3: unexpected character '$'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\x01\n}"),
            "model.loom:2:20: unexpected character '\\x01'");
  EXPECT_EQ(ErrorOf("graph \"m {\n}"), "model.loom:1:7: unterminated string");
  EXPECT_EQ(ErrorOf("graph \"a\\n\" {\n}"),
            "model.loom:1:9: invalid escape '\\n' in string (only \\\" and \\\\ are allowed)");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2x]\n}"),
            "model.loom:2:18: malformed number '2x'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  % = input f32[2]\n}"),
            "model.loom:2:3: expected a tensor name after '%'");
}

// Structural errors name what was expected.
TEST(TextFormatErrorTest, StructuralErrors) {
  EXPECT_EQ(ErrorOf(""), "model.loom:1:1: expected 'graph'");
  EXPECT_EQ(ErrorOf("graph m {}"), "model.loom:1:7: expected the graph name as a quoted string");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n"), "model.loom:3:1: expected '}'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n}\n}"), "model.loom:3:1: expected end of input");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  input f32[2]\n}"),
            "model.loom:2:3: expected a tensor definition, 'output' or '}'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a input f32[2]\n}"), "model.loom:2:6: expected '='");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2,]\n}"),
            "model.loom:2:20: expected a dim size");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2\n}"), "model.loom:3:1: expected ']'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n  %b = neg(%a) f32[2] @forward\n}"),
            "model.loom:3:16: expected ':'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n  %b = neg(%a) : f32[2] forward\n}"),
            "model.loom:3:25: unknown tensor role 'forward'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n  %b = neg(%a) : f32[2]\n}"),
            "model.loom:4:1: expected '@'");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n  output\n}"),
            "model.loom:4:1: expected a tensor name");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a, %b = input f32[2]\n}"),
            "model.loom:2:12: a declaration defines exactly one tensor");
}

// An attribute the op does not have is an error naming the op, the name and the
// attributes it has (with the one meant, for a typo), never ignored: an rmsnorm
// written with `epsilon` would otherwise run with the default eps.
TEST(TextFormatErrorTest, UnknownAttributeNamesAreErrors) {
  const std::string head =
      "graph \"t\" {\n  %x = input f32[2,4]\n  %g = parameter f32[4]\n  %y = rmsnorm(%x, %g) ";
  EXPECT_EQ(ErrorOf(head + "{epsilon=0.5} : f32[2,4] @forward\n}"),
            "model.loom:4:8: op 'rmsnorm' (y): 'rmsnorm' has no attribute 'epsilon'; did you "
            "mean 'eps'? (its attributes: eps) (inputs: 'x' f32[2,4], 'g' f32[4])");
  EXPECT_TRUE(ParseGraph(head + "{eps=0.5} : f32[2,4] @forward\n}").ok());
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[2]\n  %b = neg(%a) {k=1} : f32[2] "
                    "@forward\n}"),
            "model.loom:3:8: op 'neg' (b): 'neg' has no attribute 'k'; it has none "
            "(inputs: 'a' f32[2])");
  // The names come from each schema's one-line doc.
  EXPECT_EQ(GetOpSchema(OpKind::kAdamW).attributes,
            (std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay", "step"}));
  EXPECT_EQ(GetOpSchema(OpKind::kTopKGate).attributes,
            (std::vector<std::string>{"k", "score", "normalize"}));
  EXPECT_TRUE(GetOpSchema(OpKind::kMatMul).attributes.empty());
}

// Attribute errors: duplicates, bad values, out-of-range integers, repeated tags.
TEST(TextFormatErrorTest, AttributeErrors) {
  const std::string head = "graph \"m\" {\n  %a = input f32[2]\n  %b = scale(%a) ";
  EXPECT_EQ(ErrorOf(head + "{factor=1.0, factor=2.0} : f32[2] @forward\n}"),
            "model.loom:3:31: duplicate attribute 'factor'");
  EXPECT_EQ(ErrorOf(head + "{factor=%a} : f32[2] @forward\n}"),
            "model.loom:3:26: expected an attribute value (integer, float, [integers] or "
            "string)");
  EXPECT_EQ(ErrorOf(head + "{l=[1,2.5]} : f32[2] @forward\n}"),
            "model.loom:3:24: expected an integer");
  EXPECT_EQ(ErrorOf(head + "{k=9223372036854775808} : f32[2] @forward\n}"),
            "model.loom:3:21: integer 9223372036854775808 is out of range");
  EXPECT_EQ(ErrorOf(head + "{f=1e999} : f32[2] @forward\n}"),
            "model.loom:3:21: float 1e999 is out of range");
  EXPECT_EQ(ErrorOf(head + "{factor=1.0} : f32[2] @forward layer=1 layer=2\n}"),
            "model.loom:3:57: duplicate 'layer'");
  EXPECT_EQ(ErrorOf(head + "{factor=1.0} : f32[2] @forward mb=4294967296\n}"),
            "model.loom:3:52: integer 4294967296 is out of range");
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %c = fill() {shape=[2], value=\"x\"} : f32[2] "
                    "@forward\n}"),
            "model.loom:2:8: op 'fill' (c): attribute 'value' must be a number (inputs: )");
}

// Errors from Graph::AddInput (negative dims) are placed at the tensor name.
TEST(TextFormatErrorTest, NegativeDim) {
  EXPECT_EQ(ErrorOf("graph \"m\" {\n  %a = input f32[-2]\n}"),
            "model.loom:2:3: tensor 'a' has negative dim in f32[-2]");
}

// ---- robustness ------------------------------------------------------------------------

// Every proper prefix of a valid text is rejected with a located error, never a crash.
TEST(TextFormatRobustnessTest, EveryPrefixIsRejectedWithoutCrashing) {
  std::string text = PrintGraph(MultiOpGraph());
  ASSERT_TRUE(ParseGraph(text).ok());
  const size_t closing = text.rfind('}');
  for (size_t n = 0; n <= closing; ++n) {
    auto g = ParseGraph(absl::string_view(text).substr(0, n), "p.loom");
    ASSERT_FALSE(g.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_TRUE(absl::StartsWith(g.status().message(), "p.loom:")) << g.status();
    ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  }
}

// Random bytes, shuffled tokens and single-character mutations never crash the parser.
TEST(TextFormatRobustnessTest, GarbageNeverCrashes) {
  std::mt19937_64 rng(7);
  std::string text = PrintGraph(MultiOpGraph());
  auto check = [](absl::string_view input) {
    auto g = ParseGraph(input, "g.loom");
    if (!g.ok()) {
      ASSERT_TRUE(absl::StartsWith(g.status().message(), "g.loom:")) << g.status();
    }
  };
  for (int iter = 0; iter < 500; ++iter) {
    std::string bytes(std::uniform_int_distribution<int>(0, 120)(rng), '\0');
    for (char& c : bytes) c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    check(bytes);
    check(absl::StrCat("graph \"g\" {\n", bytes));
  }
  std::vector<std::string> words = absl::StrSplit(text, absl::ByAnyChar(" \n"));
  for (int iter = 0; iter < 500; ++iter) {
    std::shuffle(words.begin() + 3, words.end(), rng);
    std::string soup;
    for (const auto& w : words) {
      if (rng() % 4 != 0) absl::StrAppend(&soup, w, rng() % 5 == 0 ? "\n" : " ");
    }
    check(soup);
  }
  const std::string charset = "{}[](),:=@%\"\\#-.0123456789 \n";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string mutated = text;
    for (int k = 0; k < 3; ++k) {
      mutated[rng() % mutated.size()] = charset[rng() % charset.size()];
    }
    check(mutated);
  }
}

}  // namespace
}  // namespace loom::ir
