#include "ir/json_format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "ir/text_format.h"
#include "nlohmann/json.hpp"
#include "tests/ir/op_samples.h"

namespace loom::ir {
namespace {

using Json = nlohmann::json;

// A graph holding one op of `sample`, every output marked.
absl::StatusOr<Graph> SampleGraph(const testing::OpSample& sample) {
  Graph graph(absl::StrCat(OpKindName(sample.kind), "/", sample.label));
  std::vector<TensorId> inputs;
  for (size_t i = 0; i < sample.inputs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(
        TensorId id, graph.AddInput(absl::StrCat("in", i), sample.inputs[i].shape,
                                    sample.inputs[i].dtype,
                                    i % 2 ? TensorRole::kParameter : TensorRole::kInput));
    inputs.push_back(id);
  }
  LOOM_ASSIGN_OR_RETURN(auto types, InferOutputTypes(sample.kind, sample.inputs, sample.attrs));
  std::vector<OutputSpec> outputs;
  for (size_t i = 0; i < types.size(); ++i) outputs.push_back({absl::StrCat("out", i)});
  LOOM_ASSIGN_OR_RETURN(auto ids, graph.AddOp(sample.kind, inputs, sample.attrs,
                                              OpInfo{Phase::kBackward, /*layer=*/1,
                                                     /*microbatch=*/3},
                                              outputs));
  for (TensorId id : ids) graph.AddOutput(id);
  return graph;
}

// Named dims on inputs and results, every phase and role, a two-result op and
// attributes of every type.
constexpr absl::string_view kMultiOpText = R"(graph "multi" {
  %x = input f32[b:2,3]
  %w = parameter f32[2,3]
  %w.m = state f32[2,3]
  %h = mul(%x, %w) : f32[b:2,"d model":3] @forward layer=0 mb=0
  %"h 1" = scale(%h) {factor=0.1} : f32[2,3] @forward layer=1
  %c = fill() {dtype="f32", shape=[], value=inf} : f32[] @backward
  %d.h = mul_scalar(%"h 1", %c) : f32[2,3] gradient @backward layer=0 mb=1
  %d.x, %d.w = swiglu_grad(%x, %w, %d.h) : f32[2,3] gradient, f32[rows:2,3] gradient @backward layer=0 mb=1
  %w.new = accumulate(%d.w, %w.m, %w) : f32[2,3] parameter @optimizer layer=3 mb=7
  output %w.new, %h
}
)";

Graph MultiOpGraph() {
  auto g = ParseGraph(kMultiOpText);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : Graph();
}

// Reads `text` expecting an InvalidArgument and returns its message.
std::string ErrorOf(absl::string_view text) {
  auto graph = GraphFromJson(text, "g.json");
  EXPECT_FALSE(graph.ok()) << "read:\n" << text;
  if (graph.ok()) return "";
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(graph.status().message());
}

// The JSON of the multi-op graph, edited by `edit`, as text.
template <typename F>
std::string Edited(F edit) {
  Json j = Json::parse(GraphToJson(MultiOpGraph()));
  edit(j);
  return j.dump();
}

// A fresh, empty directory for file tests, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    path_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("loom_json_format_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string File(absl::string_view name) const { return (path_ / std::string(name)).string(); }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

void WriteFile(const std::string& path, absl::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// ---- round trips ------------------------------------------------------------------

// Every op sample, as a one-op graph, round-trips through JSON.
TEST(JsonFormatTest, RoundTripsOneOpGraphOfEverySample) {
  int checked = 0;
  for (uint64_t seed : {1, 2}) {
    for (const auto& sample : testing::AllSamples(seed)) {
      SCOPED_TRACE(absl::StrCat(OpKindName(sample.kind), "/", sample.label));
      auto graph = SampleGraph(sample);
      ASSERT_TRUE(graph.ok()) << graph.status();
      std::string json = GraphToJson(*graph);
      auto back = GraphFromJson(json);
      ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
      EXPECT_TRUE(*back == *graph) << json;
      EXPECT_EQ(GraphToJson(*back), json);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// A multi-op graph with named dims, phases, roles and odd attributes round-trips.
TEST(JsonFormatTest, RoundTripsMultiOpGraph) {
  Graph g = MultiOpGraph();
  ASSERT_EQ(g.num_ops(), 6);
  std::string json = GraphToJson(g);
  auto back = GraphFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  EXPECT_TRUE(*back == g) << json;
  EXPECT_EQ(PrintGraph(*back), kMultiOpText);
}

// The writer produces the documented, versioned schema.
TEST(JsonFormatTest, WritesDocumentedSchema) {
  Json j = Json::parse(GraphToJson(MultiOpGraph()));
  EXPECT_EQ(j["format"], "loom.graph");
  EXPECT_EQ(j["version"], kGraphJsonVersion);
  EXPECT_EQ(j["name"], "multi");
  EXPECT_EQ(j["tensors"][0], Json::parse(R"({"id": 0, "name": "x", "dtype": "f32",
      "shape": [2, 3], "dim_names": ["b", ""], "role": "input", "producer": -1,
      "output_index": -1})"));
  EXPECT_FALSE(j["tensors"][1].contains("dim_names"));  // only when named
  EXPECT_EQ(j["tensors"][3]["producer"], 0);
  EXPECT_EQ(j["tensors"][3]["dim_names"], Json::parse(R"(["b", "d model"])"));
  EXPECT_EQ(j["ops"][0], Json::parse(R"({"id": 0, "kind": "mul", "inputs": [0, 1],
      "outputs": [3], "attrs": {}, "phase": "forward", "layer": 0, "microbatch": 0})"));
  EXPECT_EQ(j["ops"][2]["attrs"], Json::parse(R"({"dtype": {"string": "f32"},
      "shape": {"ints": []}, "value": {"float": "inf"}})"));
  EXPECT_EQ(j["ops"][1]["attrs"], Json::parse(R"({"factor": {"float": 0.1}})"));
  EXPECT_EQ(j["ops"][5]["attrs"], Json::parse("{}"));
  EXPECT_EQ(j["outputs"], Json::parse("[9, 3]"));
}

// Float attributes keep their exact value (NaN stays NaN, -0.0 keeps its sign).
TEST(JsonFormatTest, FloatAttributesRoundTripExactly) {
  const double values[] = {0.1, -0.0, 1e300, 5e-324, 1.0, 123456789.123456789,
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  for (double v : values) {
    SCOPED_TRACE(v);
    Graph g("f");
    TensorId x = *g.AddInput("x", Shape{2}, DType::kF32, TensorRole::kInput);
    ASSERT_TRUE(g.AddOp(OpKind::kScale, {x}, {{"factor", v}}, {}, {{"y"}}).ok());
    auto back = GraphFromJson(GraphToJson(g));
    ASSERT_TRUE(back.ok()) << back.status();
    const AttrValue& value = *back->op(0).attrs.Find("factor");
    ASSERT_TRUE(std::holds_alternative<double>(value));
    double got = std::get<double>(value);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      EXPECT_EQ(got, v);
      EXPECT_EQ(std::signbit(got), std::signbit(v));
      EXPECT_TRUE(*back == g);
    }
  }
}

// Hand-written JSON may leave out attrs, layer and microbatch.
TEST(JsonFormatTest, OptionalOpFieldsDefault) {
  auto g = GraphFromJson(R"({"format": "loom.graph", "version": 1, "name": "g",
    "tensors": [
      {"id": 0, "name": "x", "dtype": "f64", "shape": [2], "role": "input",
       "producer": -1, "output_index": -1},
      {"id": 1, "name": "y", "dtype": "f64", "shape": [2], "role": "activation",
       "producer": 0, "output_index": 0}],
    "ops": [{"id": 0, "kind": "neg", "inputs": [0], "outputs": [1], "phase": "forward"}],
    "outputs": [1]})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->op(0).info.layer, -1);
  EXPECT_EQ(g->op(0).info.microbatch, -1);
  EXPECT_TRUE(g->op(0).attrs.empty());
  EXPECT_EQ(g->tensor(1).type(), (TensorType{Shape{2}, DType::kF64}));
}

// ---- errors -------------------------------------------------------------------------

// A dangling input id is named by its JSON path.
TEST(JsonFormatErrorTest, UnknownInputTensorId) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][1]["inputs"][0] = 99; })),
            "g.json: ops[1].inputs[0]: unknown tensor id 99");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][1]["inputs"][0] = -1; })),
            "g.json: ops[1].inputs[0]: unknown tensor id -1");
}

// An input produced later than the op that reads it breaks creation order.
TEST(JsonFormatErrorTest, InputDefinedAfterOp) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][0]["inputs"][1] = 5; })),
            "g.json: ops[0].inputs[1]: tensor id 5 is defined after the op (ids must follow "
            "creation order)");
}

// Format name and version are checked first.
TEST(JsonFormatErrorTest, FormatAndVersion) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["version"] = 2; })),
            "g.json: version: unsupported version 2 (this reader handles 1)");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["format"] = "loom.plan"; })),
            "g.json: format: expected \"loom.graph\", got \"loom.plan\"");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j.erase("version"); })),
            "g.json: missing field 'version'");
  EXPECT_EQ(ErrorOf("[1, 2]"), "g.json: expected a JSON object");
}

// Unknown op kinds, dtypes, roles and phases name the field.
TEST(JsonFormatErrorTest, UnknownNames) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][0]["kind"] = "matmull"; })),
            "g.json: ops[0].kind: unknown op 'matmull'");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][2]["dtype"] = "f33"; })),
            "g.json: tensors[2].dtype: unknown dtype 'f33'");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][2]["role"] = "weights"; })),
            "g.json: tensors[2].role: unknown tensor role 'weights'");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][3]["phase"] = "fwd"; })),
            "g.json: ops[3].phase: unknown phase 'fwd'");
}

// Ids must be dense and in order; outputs follow their op; producers agree.
TEST(JsonFormatErrorTest, IdsOutOfOrder) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][4]["id"] = 7; })),
            "g.json: tensors[4].id: expected 4, got 7 (tensor ids are dense and in order)");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][2]["id"] = 1; })),
            "g.json: ops[2].id: expected 2, got 1 (op ids are dense and in order)");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { std::swap(j["ops"][4]["outputs"][0],
                                                   j["ops"][4]["outputs"][1]); })),
            "g.json: ops[4].outputs[0]: expected tensor id 7, got 8 (an op's outputs follow "
            "it in id order)");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][4]["producer"] = 3; })),
            "g.json: tensors[4].producer: expected 1 (it is output 0 of ops[1]), got 3");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][8]["output_index"] = 0; })),
            "g.json: tensors[8].output_index: expected 1, got 0");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][4]["producer"] = 12; })),
            "g.json: tensors[4].producer: unknown op id 12");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][5]["outputs"] = Json::array(); })),
            "g.json: ops[5]: op 'accumulate': has 1 outputs, 0 names given");
}

// Recorded output types are checked against shape inference; AddOp errors pass through.
TEST(JsonFormatErrorTest, TypeMismatchWithInference) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][4]["shape"] = {2, 4}; })),
            "g.json: tensors[4]: type f32[2,4] does not match f32[b:2,d model:3] inferred for "
            "ops[1]");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][1]["shape"] = {2, 4}; })),
            "g.json: ops[0]: op 'mul' (h): input 1 is f32[2,4], which does not broadcast with "
            "input 0's f32[b:2,3] (dim 1: 4 against 3) (inputs: 'x' f32[b:2,3], 'w' f32[2,4])");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][1]["name"] = "x"; })),
            "g.json: tensors[1]: tensor 'x' is already defined");
}

// Malformed values name the field and what was expected.
TEST(JsonFormatErrorTest, MalformedValues) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][0]["name"] = 5; })),
            "g.json: tensors[0].name: expected a string");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][0].erase("role"); })),
            "g.json: tensors[0]: missing field 'role'");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][0]["shape"] = {2, -3}; })),
            "g.json: tensors[0].shape[1]: negative dim -3");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][0]["shape"] = {2, 3.5}; })),
            "g.json: tensors[0].shape[1]: expected an integer");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][0]["dim_names"] = {"b"}; })),
            "g.json: tensors[0].dim_names: has 1 names for 2 dims");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][0]["layer"] = 4294967296; })),
            "g.json: ops[0].layer: integer is out of range");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][0]["inputs"] = 0; })),
            "g.json: ops[0].inputs: expected an array");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][0] = "x"; })),
            "g.json: tensors[0]: expected an object");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["outputs"][1] = 42; })),
            "g.json: outputs[1]: unknown tensor id 42");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["tensors"][0]["id"] = 18446744073709551615u; })),
            "g.json: tensors[0].id: integer is out of range");
}

// Attribute values must use one of the four tagged encodings.
TEST(JsonFormatErrorTest, MalformedAttributes) {
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][1]["attrs"]["factor"] = 0.1; })),
            "g.json: ops[1].attrs.factor: expected an object with one key: int, float, ints "
            "or string");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][1]["attrs"]["factor"] = {{"double", 0.1}}; })),
            "g.json: ops[1].attrs.factor: unknown attribute encoding 'double' (expected int, "
            "float, ints or string)");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][1]["attrs"]["factor"] = {{"float", "big"}}; })),
            "g.json: ops[1].attrs.factor.float: expected a number, \"inf\", \"-inf\" or \"nan\"");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][2]["attrs"]["shape"] = {{"ints", {1, "2"}}}; })),
            "g.json: ops[2].attrs.shape.ints[1]: expected an integer");
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][1]["attrs"] = {1, 2}; })),
            "g.json: ops[1].attrs: expected an object");
  // Valid encoding, wrong type for the op: the schema's error passes through.
  EXPECT_EQ(ErrorOf(Edited([](Json& j) { j["ops"][2]["attrs"]["value"] = {{"string", "x"}}; })),
            "g.json: ops[2]: op 'fill' (c): attribute 'value' must be a number (inputs: )");
}

// Text that is not JSON becomes an InvalidArgument naming the file and the position.
TEST(JsonFormatErrorTest, SyntaxErrors) {
  std::string message = ErrorOf("{\"format\": ");
  EXPECT_TRUE(absl::StartsWith(message, "g.json: parse error at line 1, column 12: "))
      << message;
  EXPECT_TRUE(absl::StartsWith(ErrorOf(""), "g.json: parse error at line 1, column 1: "));
  EXPECT_TRUE(absl::StartsWith(ErrorOf("{} x"), "g.json: parse error at line 1, column 4: "));
}

// ---- robustness ------------------------------------------------------------------------

// Truncated and mutated documents never throw or crash; they are InvalidArgument.
TEST(JsonFormatRobustnessTest, TruncatedAndMutatedInputNeverThrow) {
  std::string json = GraphToJson(MultiOpGraph());
  const size_t closing = json.rfind('}');
  for (size_t n = 0; n <= closing; ++n) {
    auto g = GraphFromJson(absl::string_view(json).substr(0, n), "t.json");
    ASSERT_FALSE(g.ok()) << "prefix of " << n << " bytes was read";
    ASSERT_TRUE(absl::StartsWith(g.status().message(), "t.json: ")) << g.status();
  }
  std::mt19937_64 rng(11);
  const std::string charset = "{}[],:\"-.0123456789 \\eE\x01\xff";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string mutated = json;
    for (int k = 0; k < 3; ++k) mutated[rng() % mutated.size()] = charset[rng() % charset.size()];
    auto g = GraphFromJson(mutated, "t.json");
    if (!g.ok()) {
      ASSERT_TRUE(absl::StartsWith(g.status().message(), "t.json: ")) << g.status();
    }
  }
}

// Deeply nested JSON is rejected without exhausting the stack.
TEST(JsonFormatRobustnessTest, DeeplyNestedInputIsRejected) {
  std::string deep(200000, '[');
  EXPECT_EQ(ErrorOf(deep).substr(0, 21), "g.json: parse error a");
  deep += std::string(200000, ']');
  EXPECT_EQ(ErrorOf(deep), "g.json: expected a JSON object");
  EXPECT_EQ(ErrorOf(absl::StrCat(R"({"format": "loom.graph", "version": 1, "name": )", deep,
                                 "}")),
            "g.json: name: expected a string");
}

// ---- files -------------------------------------------------------------------------------

// Saving picks the format from the extension, loading detects it, and both round-trip.
TEST(GraphFileTest, SavesAndLoadsBothFormats) {
  ScratchDir dir;
  Graph g = MultiOpGraph();
  for (const char* name : {"g.json", "g.loom"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(SaveGraphFile(g, dir.File(name)).ok());
    auto back = LoadGraphFile(dir.File(name));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == g);
  }
  std::ifstream json(dir.File("g.json"));
  std::stringstream text;
  text << json.rdbuf();
  EXPECT_EQ(text.str(), GraphToJson(g));
  // Overwriting keeps the directory free of temporary files.
  ASSERT_TRUE(SaveGraphFile(g, dir.File("g.json")).ok());
  EXPECT_EQ(dir.Entries(), (std::vector<std::string>{"g.json", "g.loom"}));
}

// A missing file is NotFound naming the path.
TEST(GraphFileTest, MissingFileIsNotFound) {
  ScratchDir dir;
  auto g = LoadGraphFile(dir.File("absent.loom"));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(g.status().message(), absl::StrCat(dir.File("absent.loom"), ": no such file"));
}

// Parse errors of either format name the file path.
TEST(GraphFileTest, LoadErrorsNameThePath) {
  ScratchDir dir;
  WriteFile(dir.File("bad.loom"), "# header\ngraph \"g\" {\n  %a = input f32[2]\n  %b = "
                                  "matmull(%a) : f32[2] @forward\n}\n");
  auto text = LoadGraphFile(dir.File("bad.loom"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(),
            absl::StrCat(dir.File("bad.loom"), ":4:8: unknown op 'matmull'"));
  WriteFile(dir.File("bad.graph"), "  \n {\"format\": \"loom.graph\", \"version\": 9}");
  auto json = LoadGraphFile(dir.File("bad.graph"));
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().message(),
            absl::StrCat(dir.File("bad.graph"), ": version: unsupported version 9 (this "
                                                "reader handles 1)"));
}

// A save that cannot complete fails and leaves nothing behind.
TEST(GraphFileTest, FailedSaveLeavesNothing) {
  ScratchDir dir;
  absl::Status status = SaveGraphFile(MultiOpGraph(), dir.File("missing/g.json"));
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), dir.File("missing/g.json"))) << status;
  // Renaming onto a directory fails after the temporary file was written.
  std::filesystem::create_directory(dir.File("taken.json"));
  std::filesystem::create_directory(dir.File("taken.json/child"));
  status = SaveGraphFile(MultiOpGraph(), dir.File("taken.json"));
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(dir.Entries(), (std::vector<std::string>{"taken.json"}));
}

}  // namespace
}  // namespace loom::ir
