#include "verify/report.h"

#include <string>
#include <tuple>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ir/json_util.h"
#include "tests/testing/xml_check.h"

namespace loom::verify {
namespace {

using ::loom::testing::XmlWellFormedError;

int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A report with one entry of every kind: a lineage failure, a refuted and an
// undecided law, a schedule failure, an undecided lineage item.
VerifyReport Mixed() {
  VerifyReport r;
  r.verdict = Verdict::kNotEquivalent;
  r.items = 12;
  r.values = 30;
  Failure lineage;
  lineage.cls = FailureClass::kMissingReduction;
  lineage.item = "collective 3 broadcast";
  lineage.devices = {0, 1};
  lineage.microbatch = 0;
  lineage.tensor = "h.1";
  lineage.box = "[0:2,0:8]";
  lineage.part = "[0,1/2)";
  lineage.first_op = "layers.0.attn.proj";
  lineage.message = "holds a partial sum <1/2> where the sum is claimed & used";
  r.failures.push_back(lineage);
  Failure law;
  law.item = LawItem("linear");
  law.message = "the pieces of 'linear' do not compose to the op";
  law.counterexample = "x = 1";
  r.failures.push_back(law);
  Failure deadlock;
  deadlock.cls = FailureClass::kDeadlock;
  deadlock.item = "schedule (deadlock)";
  deadlock.devices = {0, 1};
  deadlock.message = "device 0 waits for device 1\nand device 1 for device 0";
  r.failures.push_back(deadlock);
  r.undecided.push_back({LawItem("attention"), "solver timeout"});
  r.undecided.push_back({"task 7 'moe_dispatch'", "unsupported \x01 op"});
  r.laws.push_back({"linear", "linear|k1", "refuted", "x = 1", false, 0.25});
  r.laws.push_back({"attention", "attention|k2", "unknown", "solver timeout", false, 1.5});
  r.laws.push_back({"linear", "linear|k3", "proved", "", true, 0});
  r.laws_proved = 1;
  r.cache_hits = 1;
  r.schedule_checked = true;
  r.peak_bytes = {1024, 2048};
  r.seconds = 2.5;
  return r;
}

// The JSON report parses and carries every documented field.
TEST(ReportTest, JsonHasEveryField) {
  const std::string text = ReportJson(Mixed(), {"gpt2", "p.json"});
  const ir::Json j = ir::Json::parse(text);
  EXPECT_EQ(j["format"], "loom.verify.report");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["verdict"], "not_equivalent");
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["model"], "gpt2");
  EXPECT_EQ(j["plan"], "p.json");
  EXPECT_EQ(j["counts"]["items"], 12);
  EXPECT_EQ(j["counts"]["values"], 30);
  EXPECT_EQ(j["counts"]["laws"], 3);
  EXPECT_EQ(j["counts"]["laws_proved"], 1);
  EXPECT_EQ(j["counts"]["cache_hits"], 1);
  EXPECT_EQ(j["counts"]["failures"], 3);
  EXPECT_EQ(j["counts"]["undecided"], 2);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 2.5);
  ASSERT_EQ(j["failures"].size(), 3u);
  const ir::Json& f = j["failures"][0];
  EXPECT_EQ(f["class"], "missing_reduction");
  EXPECT_EQ(f["class_words"], "missing reduction");
  EXPECT_EQ(f["group"], "lineage");
  EXPECT_EQ(f["tensor"], "h.1");
  EXPECT_EQ(f["box"], "[0:2,0:8]");
  EXPECT_EQ(f["part"], "[0,1/2)");
  EXPECT_EQ(f["devices"], ir::Json::array({0, 1}));
  EXPECT_EQ(f["microbatch"], 0);
  EXPECT_EQ(f["item"], "collective 3 broadcast");
  EXPECT_EQ(f["first_op"], "layers.0.attn.proj");
  EXPECT_TRUE(f.contains("message"));
  EXPECT_EQ(f["counterexample"], "");
  EXPECT_EQ(j["failures"][1]["group"], "law");
  EXPECT_TRUE(j["failures"][1]["microbatch"].is_null());
  EXPECT_EQ(j["failures"][2]["group"], "schedule");
  ASSERT_EQ(j["undecided"].size(), 2u);
  EXPECT_EQ(j["undecided"][0]["item"], "partition law of 'attention'");
  EXPECT_EQ(j["undecided"][0]["reason"], "solver timeout");
  ASSERT_EQ(j["laws"].size(), 3u);
  EXPECT_EQ(j["laws"][2]["op"], "linear");
  EXPECT_EQ(j["laws"][2]["key"], "linear|k3");
  EXPECT_EQ(j["laws"][2]["verdict"], "proved");
  EXPECT_EQ(j["laws"][2]["cached"], true);
  EXPECT_TRUE(j["laws"][2].contains("detail"));
  EXPECT_TRUE(j["laws"][2].contains("seconds"));
  EXPECT_EQ(j["schedule"]["checked"], true);
  EXPECT_EQ(j["schedule"]["peak_bytes"], ir::Json::array({1024, 2048}));
}

// Verdicts have their names and exit codes.
TEST(ReportTest, VerdictNamesAndExitCodes) {
  VerifyReport r;
  for (auto [v, name, code] : {std::tuple{Verdict::kEquivalent, "equivalent", 0},
                               std::tuple{Verdict::kNotEquivalent, "not_equivalent", 1},
                               std::tuple{Verdict::kUnknown, "unknown", 2}}) {
    r.verdict = v;
    const ir::Json j = ir::Json::parse(ReportJson(r, {}));
    EXPECT_EQ(j["verdict"], name);
    EXPECT_EQ(j["exit_code"], code);
  }
}

// The JUnit file is well-formed: one suite, a test case per check group with its
// time and its undecided entries as <error>s, then a test case per failure it found
// (one per class and tensor, a <failure> per entry), special characters escaped.
TEST(ReportTest, JUnitGroupsChecksIntoTestCases) {
  VerifyReport mixed = Mixed();
  mixed.derive_seconds = 0.5;
  mixed.law_seconds = 1.75;
  Failure again = mixed.failures[0];  // the same tensor wrong on another device
  again.devices = {2};
  mixed.failures.push_back(again);
  const std::string xml = ReportJUnit(mixed, {"gpt2", "a<b>&\"c\".json"});
  EXPECT_EQ(XmlWellFormedError(xml), "") << xml;
  EXPECT_EQ(Count(xml, "<testsuite "), 1) << xml;
  EXPECT_TRUE(absl::StrContains(xml, "<testsuite name=\"loom.verify\" tests=\"7\" failures=\"3\" "
                                     "errors=\"2\" skipped=\"0\" time=\"2.500\""))
      << xml;
  EXPECT_EQ(Count(xml, "<testcase "), 7);
  EXPECT_TRUE(absl::StrContains(xml, "name=\"coverage and lineage\" time=\"0.500\"")) << xml;
  EXPECT_TRUE(absl::StrContains(xml, "name=\"lineage: missing_reduction &apos;h.1&apos;\""))
      << xml;
  EXPECT_TRUE(absl::StrContains(xml, "name=\"law:linear\""));
  EXPECT_TRUE(absl::StrContains(xml, "name=\"law:linear: computation_differs\""));
  EXPECT_TRUE(absl::StrContains(xml, "name=\"law:attention\""));
  EXPECT_TRUE(absl::StrContains(xml, "name=\"schedule safety\" time=\"0.250\"")) << xml;
  EXPECT_TRUE(absl::StrContains(xml, "name=\"schedule: deadlock\""));
  EXPECT_EQ(Count(xml, "<failure "), 4);
  EXPECT_EQ(Count(xml, "<error "), 2);
  EXPECT_TRUE(absl::StrContains(
      xml, "<failure type=\"missing_reduction\" message=\"missing reduction: holds a partial sum "
           "&lt;1/2&gt; where the sum is claimed &amp; used (tensor h.1)\">"))
      << xml;
  EXPECT_TRUE(absl::StrContains(xml, "first op: layers.0.attn.proj\n")) << xml;
  EXPECT_TRUE(absl::StrContains(xml, "device 1&#10;and device 1 for device 0")) << xml;
  EXPECT_TRUE(absl::StrContains(xml, "value=\"a&lt;b&gt;&amp;&quot;c&quot;.json\"")) << xml;
  EXPECT_TRUE(absl::StrContains(xml, "unsupported ? op")) << xml;
}

// A plan without an order skips the schedule test case; a clean report has no
// failure or error.
TEST(ReportTest, JUnitSkipsAnUncheckedSchedule) {
  VerifyReport r;
  r.verdict = Verdict::kEquivalent;
  r.laws.push_back({"add", "add|k", "proved", "", false, 0.01});
  r.laws_proved = 1;
  const std::string xml = ReportJUnit(r, {"gpt2", "p.json"});
  EXPECT_EQ(XmlWellFormedError(xml), "") << xml;
  EXPECT_TRUE(absl::StrContains(xml, "tests=\"3\" failures=\"0\" errors=\"0\" skipped=\"1\""))
      << xml;
  EXPECT_TRUE(absl::StrContains(xml, "<skipped message=\"the plan has no per-device order\"/>"));
  EXPECT_FALSE(absl::StrContains(xml, "<failure"));
  EXPECT_FALSE(absl::StrContains(xml, "<error"));
}

// The checker itself rejects what a CI reader would.
TEST(ReportTest, XmlCheckRejectsMalformedDocuments) {
  EXPECT_EQ(XmlWellFormedError("<a x=\"1\"><b/>t &amp; &#10;&#xA;</a>"), "");
  EXPECT_NE(XmlWellFormedError("<a><b></a></b>"), "");
  EXPECT_NE(XmlWellFormedError("<a x=\"<\"/>"), "");
  EXPECT_NE(XmlWellFormedError("<a>&nbsp;</a>"), "");
  EXPECT_NE(XmlWellFormedError("<a>"), "");
  EXPECT_NE(XmlWellFormedError("<a/><b/>"), "");
  EXPECT_NE(XmlWellFormedError("<a x=1/>"), "");
}

}  // namespace
}  // namespace loom::verify
