#include "ir/plan_json.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "nlohmann/json.hpp"
#include "tests/ir/plan_testutil.h"

namespace loom::ir {
namespace {

using Json = nlohmann::json;
using testing::ExplicitTestPlan;
using testing::FactoredTestPlan;
using testing::PlanTestStep;

// A two-device plan written without a spec: a tensor-parallel linear piece, its
// all-reduce and a scheduled order.
Plan SmallPlan() {
  Plan p;
  p.model = "demo \"tiny\" \xc3\xa9";
  p.mesh = Mesh({{"tp", 2}});
  auto value = [](ValueId id, int64_t device, TensorId tensor, Box box, ValuePart part) {
    PlanValue v;
    v.id = id;
    v.device = device;
    v.sub = SubTensor{tensor, std::move(box), std::move(part)};
    v.microbatch = 0;
    return v;
  };
  const ValuePart full = ValuePart::Full();
  p.values = {value(0, 0, 2, {{0, 2}, {0, 4}}, full),
              value(1, 0, 5, {{0, 2}, {0, 3}}, full.Share(0, 2)),
              value(2, 0, 5, {{0, 2}, {0, 3}}, full)};
  Task t;
  t.id = 0;
  t.op = 7;
  t.kind = OpKind::kScale;
  t.attrs = AttrMap{{"factor", 0.5}, {"limit", HUGE_VAL}, {"sizes", std::vector<int64_t>{2, 3}},
                    {"mode", std::string("a\"b")}, {"n", int64_t{-3}}};
  t.device = 0;
  t.info = OpInfo{Phase::kBackward, 1, 0};
  t.stage = 1;
  t.recompute = true;
  t.inputs = {0};
  t.outputs = {1};
  p.tasks = {t};
  Collective c;
  c.id = 0;
  c.kind = CollectiveKind::kAllReduce;
  c.reduce = ReduceOp::kMax;
  c.devices = {0};
  c.inputs = {1};
  c.outputs = {2};
  c.microbatch = 0;
  c.phase = Phase::kBackward;
  c.layer = 1;
  p.collectives = {c};
  p.outputs = {2};
  p.order = {{PlanStep{false, 0}, PlanStep{true, 0}}, {}};
  return p;
}

// The JSON of the explicit test plan, edited by `edit`, as text.
std::string EditedJson(const std::function<void(Json&)>& edit) {
  Graph spec = PlanTestStep(2);
  Plan plan = ExplicitTestPlan(spec);
  plan.factored_order = FactoredOrder::FromPrograms({{PlanStep{false, 0}}, {}, {}, {}});
  plan.factoring = Factoring{/*dp=*/1, /*dp_device_stride=*/0, /*microbatches=*/2};
  Json j = Json::parse(PlanToJson(plan));
  edit(j);
  return j.dump();
}

std::string ErrorOf(absl::string_view text) {
  auto plan = PlanFromJson(text, "p.json");
  EXPECT_FALSE(plan.ok()) << "read:\n" << text;
  if (plan.ok()) return "";
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

class ScratchDir {
 public:
  ScratchDir() {
    path_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("loom_plan_json_test_", getpid(), "_",
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

// ---- writing and round trips ---------------------------------------------------------

// The writer produces the documented layout: header lines, then one item per line.
TEST(PlanJsonTest, WritesDocumentedLayout) {
  EXPECT_EQ(PlanToJson(SmallPlan()), R"json({
  "format": "loom.plan",
  "version": 1,
  "model": "demo \"tiny\" é",
  "mesh": [{"name":"tp","size":2}],
  "values": [
    {"id":0,"device":0,"tensor":2,"box":[[0,2],[0,4]],"part":"full","dtype":"f32","microbatch":0},
    {"id":1,"device":0,"tensor":5,"box":[[0,2],[0,3]],"part":"[0,1/2)","dtype":"f32","microbatch":0},
    {"id":2,"device":0,"tensor":5,"box":[[0,2],[0,3]],"part":"full","dtype":"f32","microbatch":0}
  ],
  "tasks": [
    {"id":0,"op":7,"kind":"scale","attrs":{"factor":{"float":0.5},"limit":{"float":"inf"},"mode":{"string":"a\"b"},"n":{"int":-3},"sizes":{"ints":[2,3]}},"device":0,"phase":"backward","layer":1,"microbatch":0,"stage":1,"recompute":true,"inputs":[0],"outputs":[1]}
  ],
  "collectives": [
    {"id":0,"kind":"all_reduce","reduce":"max","devices":[0],"inputs":[1],"outputs":[2],"dim":-1,"dim2":-1,"microbatch":0,"phase":"backward","layer":1,"recompute":false,"spans_dp":false}
  ],
  "outputs": [2],
  "order": [
    [{"collective":false,"id":0},{"collective":true,"id":0}],
    []
  ]
}
)json");
}

// Explicit, factored and hand-written plans read back exactly, and re-writing the
// result gives the same text.
TEST(PlanJsonTest, RoundTripsPlansExactly) {
  Graph spec = PlanTestStep(2);
  Plan ordered = ExplicitTestPlan(spec);
  ordered.order = {{PlanStep{false, 0}, PlanStep{true, 2}}, {}, {PlanStep{true, 2}}, {}};
  Plan empty;
  for (const Plan& plan : {SmallPlan(), FactoredTestPlan(spec), ExplicitTestPlan(spec), ordered,
                           empty}) {
    const std::string text = PlanToJson(plan);
    auto back = PlanFromJson(text, "p.json");
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
    EXPECT_TRUE(*back == plan) << text;
    EXPECT_EQ(PlanToJson(*back), text);
  }
}

// Fields with a documented default may be left out; readers accept any layout.
TEST(PlanJsonTest, OptionalFieldsDefault) {
  auto plan = PlanFromJson(R"json({"version": 1, "format": "loom.plan", "model": "m", "mesh": [],
      "values": [{"id": 0, "device": 0, "tensor": 0, "box": [], "part": "[0,1/3)", "dtype": "f32"}],
      "tasks": [{"id": 0, "op": -1, "kind": "fill", "device": 0, "phase": "forward",
                 "inputs": [], "outputs": [0]}],
      "collectives": [{"id": 0, "kind": "broadcast", "devices": [0], "inputs": [0],
                       "outputs": [0]}]})json");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->is_factored());
  EXPECT_EQ(plan->mesh.num_devices(), 1);
  EXPECT_EQ(plan->values[0].microbatch, -1);
  EXPECT_EQ(plan->values[0].dp_dim, -1);
  EXPECT_FALSE(plan->values[0].dp_share);
  EXPECT_EQ(plan->values[0].sub.part.ToString(), "[0,1/3)");
  const Task& t = plan->tasks[0];
  EXPECT_TRUE(t.attrs.empty());
  EXPECT_EQ(t.info.layer, -1);
  EXPECT_EQ(t.info.microbatch, -1);
  EXPECT_EQ(t.stage, -1);
  EXPECT_FALSE(t.recompute);
  const Collective& c = plan->collectives[0];
  EXPECT_EQ(c.reduce, ReduceOp::kSum);
  EXPECT_EQ(c.dim, -1);
  EXPECT_EQ(c.dim2, -1);
  EXPECT_EQ(c.microbatch, -1);
  EXPECT_EQ(c.phase, Phase::kForward);
  EXPECT_EQ(c.layer, -1);
  EXPECT_FALSE(c.recompute);
  EXPECT_FALSE(c.spans_dp);
  EXPECT_TRUE(plan->outputs.empty());
  EXPECT_TRUE(plan->order.empty());
}

// ---- errors ------------------------------------------------------------------------------

struct ErrorCase {
  std::function<void(Json&)> edit;
  std::string message;
};

// Each malformed document is reported with the file and the JSON path.
TEST(PlanJsonErrorTest, ErrorsNameTheJsonPath) {
  const std::vector<ErrorCase> cases = {
      {[](Json& j) { j["format"] = "loom.graph"; },
       "p.json: format: expected \"loom.plan\", got \"loom.graph\""},
      {[](Json& j) { j["version"] = 2; },
       "p.json: version: unsupported version 2 (this reader handles 1)"},
      {[](Json& j) { j.erase("values"); }, "p.json: missing field 'values'"},
      {[](Json& j) { j["values"] = Json::object(); }, "p.json: values: expected an array"},
      {[](Json& j) { j["tasks"][0]["inputs"][1] = 99; },
       "p.json: tasks[0].inputs[1]: unknown value id 99"},
      {[](Json& j) { j["tasks"][0]["outputs"][0] = 18446744073709551615u; },
       "p.json: tasks[0].outputs[0]: unknown value id 18446744073709551615"},
      {[](Json& j) { j["tasks"][0]["device"] = 1.5; },
       "p.json: tasks[0].device: expected an integer"},
      {[](Json& j) { j["tasks"][0] = 3; }, "p.json: tasks[0]: expected an object"},
      {[](Json& j) { j["tasks"][0].erase("phase"); }, "p.json: tasks[0]: missing field 'phase'"},
      {[](Json& j) { j["tasks"][0]["phase"] = "sideways"; },
       "p.json: tasks[0].phase: unknown phase 'sideways'"},
      {[](Json& j) { j["tasks"][0]["kind"] = "matmull"; },
       "p.json: tasks[0].kind: unknown op 'matmull'"},
      {[](Json& j) { j["tasks"][0]["recompute"] = 1; },
       "p.json: tasks[0].recompute: expected true or false"},
      {[](Json& j) { j["tasks"][0]["attrs"]["x"] = Json{{"double", 1}}; },
       "p.json: tasks[0].attrs.x: unknown attribute encoding 'double' (expected int, float, "
       "ints or string)"},
      {[](Json& j) { j["tasks"][0]["dp_attrs"] = Json{{"begin", "x"}}; },
       "p.json: tasks[0].dp_attrs.begin: expected an integer"},
      {[](Json& j) { j["tasks"][0]["dp_attrs"] = Json::array(); },
       "p.json: tasks[0].dp_attrs: expected an object"},
      {[](Json& j) { j["tasks"][2]["id"] = 7; },
       "p.json: tasks[2].id: expected 2, got 7 (task ids are dense and in order)"},
      {[](Json& j) { j["values"][1]["id"] = 5; },
       "p.json: values[1].id: expected 1, got 5 (value ids are dense and in order)"},
      {[](Json& j) { j["values"][0]["part"] = "[0,1/2]"; },
       "p.json: values[0].part: bad value part '[0,1/2]': '[0,1/2]' is not an interval "
       "[lo,hi) (expected \"full\", \"0\" or intervals like \"[0,1/4)+[1/2,3/4)\")"},
      {[](Json& j) { j["values"][0]["box"][1] = Json::array({3, 1}); },
       "p.json: values[0].box[1]: expected [begin, end] with 0 <= begin <= end"},
      {[](Json& j) { j["values"][0]["box"] = 0; }, "p.json: values[0].box: expected an array"},
      {[](Json& j) { j["values"][0]["device"] = 4; },
       "p.json: values[0].device: 4 is out of range (expected 0..3)"},
      {[](Json& j) { j["values"][0]["tensor"] = -1; },
       "p.json: values[0].tensor: -1 is out of range (expected 0..2147483647)"},
      {[](Json& j) { j["values"][0]["dtype"] = "f8"; },
       "p.json: values[0].dtype: unknown dtype 'f8'"},
      {[](Json& j) { j["values"][0]["dp_dim"] = 2; },
       "p.json: values[0].dp_dim: 2 is out of range (expected -1..1)"},
      {[](Json& j) { j["values"][0]["dp_share"] = "yes"; },
       "p.json: values[0].dp_share: expected true or false"},
      {[](Json& j) { j["collectives"][0]["kind"] = "allreduce"; },
       "p.json: collectives[0].kind: unknown collective kind 'allreduce'"},
      {[](Json& j) { j["collectives"][0]["reduce"] = "min"; },
       "p.json: collectives[0].reduce: unknown reduction 'min' (expected sum, max or avg)"},
      {[](Json& j) { j["collectives"][0]["devices"][1] = 7; },
       "p.json: collectives[0].devices[1]: device 7 is outside the mesh (4 devices)"},
      {[](Json& j) { j["mesh"][0]["size"] = 0; },
       "p.json: mesh[0].size: 0 is out of range (expected 1..2147483648)"},
      {[](Json& j) { j["mesh"][0].erase("name"); }, "p.json: mesh[0]: missing field 'name'"},
      {[](Json& j) { j["factoring"]["dp"] = 0; },
       "p.json: factoring.dp: 0 is out of range (expected 1..4)"},
      {[](Json& j) { j["factoring"] = Json::array(); }, "p.json: factoring: expected an object"},
      // The factored plan's order: segments of steps, and per device [segment, copy].
      {[](Json& j) { j["order_segments"][0][0][1] = 99; },
       "p.json: order_segments[0][0]: unknown task id 99"},
      {[](Json& j) { j["order_segments"][0][0] = Json::array({1, 5}); },
       "p.json: order_segments[0][0]: unknown collective id 5"},
      {[](Json& j) { j["order_segments"][0][0] = Json::array({2, 0}); },
       "p.json: order_segments[0][0]: kind 2 is not 0 or 1"},
      {[](Json& j) { j["order"][1] = 0; }, "p.json: order[1]: expected an array"},
      {[](Json& j) { j["order"][0][0] = Json::array({3, -1}); },
       "p.json: order[0][0]: unknown segment 3"},
      {[](Json& j) { j["order"][0][0][1] = -2; },
       "p.json: order[0][0]: micro-batch -2 is not a copy (-1 or more)"},
      {[](Json& j) { j.erase("order_segments"); },
       "p.json: order: a factored plan's order needs 'order_segments' (docs/formats.md)"},
      // An explicit plan's order: {collective, id} per step.
      {[](Json& j) {
         j.erase("factoring");
         j.erase("order_segments");
         j["order"] = Json::array({Json::array({Json{{"collective", false}, {"id", 99}}})});
       },
       "p.json: order[0][0].id: unknown task id 99"},
      {[](Json& j) {
         j.erase("factoring");
         j.erase("order_segments");
         j["order"] = Json::array({Json::array({Json{{"collective", true}, {"id", 5}}})});
       },
       "p.json: order[0][0].id: unknown collective id 5"},
      {[](Json& j) {
         j.erase("factoring");
         j["order"] = Json::array();
       },
       "p.json: order_segments: only a factored plan's order is written in segments"},
      {[](Json& j) { j["outputs"] = Json::array({99}); },
       "p.json: outputs[0]: unknown value id 99"},
      {[](Json& j) { j = Json::array(); }, "p.json: expected a JSON object"},
  };
  for (const ErrorCase& c : cases) {
    EXPECT_EQ(ErrorOf(EditedJson(c.edit)), c.message);
  }
  EXPECT_TRUE(absl::StartsWith(ErrorOf("{\"format\": "), "p.json: parse error at line 1"))
      << ErrorOf("{\"format\": ");
  EXPECT_TRUE(PlanFromJson(EditedJson([](Json&) {}), "p.json").ok());
}

// Truncated and mutated documents never throw or crash; they are InvalidArgument
// naming the file.
TEST(PlanJsonErrorTest, TruncatedAndMutatedInputNeverThrow) {
  const std::string json = PlanToJson(FactoredTestPlan(PlanTestStep(2)));
  const size_t closing = json.rfind('}');
  for (size_t n = 0; n <= closing; ++n) {
    auto plan = PlanFromJson(absl::string_view(json).substr(0, n), "t.json");
    ASSERT_FALSE(plan.ok()) << "prefix of " << n << " bytes was read";
    ASSERT_TRUE(absl::StartsWith(plan.status().message(), "t.json: ")) << plan.status();
  }
  std::mt19937_64 rng(17);
  const std::string charset = "{}[],:\"-+/.0123456789 \\eE()ft\x01\xff";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string mutated = json;
    for (int k = 0; k < 3; ++k) mutated[rng() % mutated.size()] = charset[rng() % charset.size()];
    auto plan = PlanFromJson(mutated, "t.json");
    if (!plan.ok()) {
      ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
      ASSERT_TRUE(absl::StartsWith(plan.status().message(), "t.json: ")) << plan.status();
    }
  }
}

// ---- files -------------------------------------------------------------------------------

// A saved plan loads back equal; overwriting leaves no temporary files.
TEST(PlanFileTest, SavesAndLoads) {
  ScratchDir dir;
  const Plan plan = FactoredTestPlan(PlanTestStep(2));
  ASSERT_TRUE(SavePlanFile(plan, dir.File("p.json")).ok());
  auto back = LoadPlanFile(dir.File("p.json"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == plan);
  std::ifstream in(dir.File("p.json"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), PlanToJson(plan));
  ASSERT_TRUE(SavePlanFile(SmallPlan(), dir.File("p.json")).ok());
  back = LoadPlanFile(dir.File("p.json"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == SmallPlan());
  EXPECT_EQ(dir.Entries(), (std::vector<std::string>{"p.json"}));
}

// Missing files are NotFound; read errors name the path.
TEST(PlanFileTest, LoadErrorsNameThePath) {
  ScratchDir dir;
  auto missing = LoadPlanFile(dir.File("absent.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), absl::StrCat(dir.File("absent.json"), ": no such file"));
  {
    std::ofstream out(dir.File("bad.json"));
    out << R"({"format": "loom.plan", "version": 3})";
  }
  auto bad = LoadPlanFile(dir.File("bad.json"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            absl::StrCat(dir.File("bad.json"), ": version: unsupported version 3 (this reader "
                                               "handles 1)"));
}

// A save that cannot complete fails and leaves nothing behind.
TEST(PlanFileTest, FailedSaveLeavesNothing) {
  ScratchDir dir;
  absl::Status status = SavePlanFile(SmallPlan(), dir.File("missing/p.json"));
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), dir.File("missing/p.json"))) << status;
  std::filesystem::create_directory(dir.File("taken.json"));
  std::filesystem::create_directory(dir.File("taken.json/child"));
  status = SavePlanFile(SmallPlan(), dir.File("taken.json"));
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(dir.Entries(), (std::vector<std::string>{"taken.json"}));
}

}  // namespace
}  // namespace loom::ir
