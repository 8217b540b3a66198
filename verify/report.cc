#include "verify/report.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/json_util.h"

namespace loom::verify {
namespace {

bool IsScheduleClass(FailureClass c) {
  return c == FailureClass::kDeadlock || c == FailureClass::kScheduleOrder ||
         c == FailureClass::kMemory;
}

ir::OrderedJson FailureJson(const Failure& f) {
  ir::OrderedJson j;
  j["class"] = FailureClassName(f.cls);
  j["class_words"] = FailureClassWords(f.cls);
  j["group"] = FailureGroup(f);
  j["tensor"] = f.tensor;
  j["box"] = f.box;
  j["part"] = f.part;
  j["devices"] = f.devices;
  j["microbatch"] = f.microbatch >= 0 ? ir::OrderedJson(f.microbatch) : ir::OrderedJson(nullptr);
  j["item"] = f.item;
  j["first_op"] = f.first_op;
  j["message"] = f.message;
  j["counterexample"] = f.counterexample;
  return j;
}

// The lines of a failure's details, as the <failure> body shows them.
std::string FailureDetails(const Failure& f) {
  std::string out;
  auto line = [&](const char* name, const std::string& value) {
    if (!value.empty()) absl::StrAppend(&out, name, ": ", value, "\n");
  };
  line("class", absl::StrCat(FailureClassWords(f.cls), " (", FailureClassName(f.cls), ")"));
  line("tensor", f.tensor);
  line("box", f.box);
  line("part", f.part);
  line("devices", absl::StrJoin(f.devices, ", "));
  line("micro-batch", f.microbatch >= 0 ? absl::StrCat(f.microbatch) : "");
  line("item", f.item);
  line("first op", f.first_op);
  line("message", f.message);
  line("counterexample", f.counterexample);
  return out;
}

// One <testcase>: its failures, its errors as (message, body) pairs, a skip reason.
struct TestCase {
  std::string name;
  double seconds = 0;
  struct Entry {
    std::string type;  // a failure's class name
    std::string message;
    std::string body;
  };
  std::vector<Entry> failures;
  std::vector<std::pair<std::string, std::string>> errors;
  std::string skipped;  // the reason, when skipped
  std::string out;      // <system-out>
};

void AddFailure(TestCase& t, const Failure& f) {
  std::string message = absl::StrCat(FailureClassWords(f.cls), ": ", f.message);
  if (!f.tensor.empty() && !absl::StrContains(f.message, f.tensor)) {
    absl::StrAppend(&message, " (tensor ", f.tensor, ")");
  }
  t.failures.push_back({FailureClassName(f.cls), message, FailureDetails(f)});
}

// A failure is a test case of its own, one per class and tensor (the same wrong
// tensor on several devices is one case with a <failure> per entry), named after the
// check that found it: `group` ("lineage", "law:linear", "schedule").
void AddFailureCase(std::vector<TestCase>& cases, const std::string& group, const Failure& f) {
  std::string name = absl::StrCat(group, ": ", FailureClassName(f.cls));
  if (!f.tensor.empty()) absl::StrAppend(&name, " '", f.tensor, "'");
  auto it = std::find_if(cases.begin(), cases.end(),
                         [&](const TestCase& t) { return t.name == name; });
  if (it == cases.end()) {
    TestCase t;
    t.name = name;
    cases.push_back(std::move(t));
    it = cases.end() - 1;
  }
  AddFailure(*it, f);
}

void AddUndecided(TestCase& t, const Undecided& u) {
  t.errors.push_back({absl::StrCat("undecided: ", u.item, ": ", u.reason),
                      absl::StrCat("item: ", u.item, "\nreason: ", u.reason, "\n")});
}

// A test case per check group (what it checked, its time, its undecided entries as
// errors), each followed by a test case per failure it found (AddFailureCase).
std::vector<TestCase> TestCases(const VerifyReport& report) {
  std::vector<TestCase> cases;
  std::vector<TestCase> found;
  TestCase lineage;
  lineage.name = "coverage and lineage";
  lineage.seconds = report.derive_seconds;
  lineage.out = absl::StrCat(report.items, " tasks and collectives, ", report.values,
                             " values derived\n");
  for (const Failure& f : report.failures) {
    if (FailureGroup(f) == "lineage") AddFailureCase(found, "lineage", f);
  }
  // Undecided entries of laws go to their law's test case below.
  std::vector<std::string> law_items;
  std::vector<std::string> ops;
  for (const LawResult& l : report.laws) {
    if (std::find(ops.begin(), ops.end(), l.op_kind) == ops.end()) ops.push_back(l.op_kind);
  }
  for (const std::string& op : ops) law_items.push_back(LawItem(op));
  for (const Undecided& u : report.undecided) {
    if (std::find(law_items.begin(), law_items.end(), u.item) == law_items.end()) {
      AddUndecided(lineage, u);
    }
  }
  cases.push_back(std::move(lineage));
  for (TestCase& t : found) cases.push_back(std::move(t));

  for (const std::string& op : ops) {
    TestCase law;
    law.name = absl::StrCat("law:", op);
    int64_t total = 0, proved = 0, cached = 0;
    for (const LawResult& l : report.laws) {
      if (l.op_kind != op) continue;
      ++total;
      proved += l.verdict == "proved";
      cached += l.cached;
      law.seconds += l.seconds;
      absl::StrAppend(&law.out, l.verdict, l.cached ? " (cached)" : "", ": ", l.key, "\n");
    }
    law.out = absl::StrCat(proved, " of ", total, " laws proved, ", cached, " from the cache\n",
                           law.out);
    const std::string item = LawItem(op);
    found.clear();
    for (const Failure& f : report.failures) {
      if (f.item == item) AddFailureCase(found, law.name, f);
    }
    for (const Undecided& u : report.undecided) {
      if (u.item == item) AddUndecided(law, u);
    }
    cases.push_back(std::move(law));
    for (TestCase& t : found) cases.push_back(std::move(t));
  }

  TestCase schedule;
  schedule.name = "schedule safety";
  // What is neither derivation nor law proofs: reading, checking the order.
  schedule.seconds =
      std::max(0.0, report.seconds - report.derive_seconds - report.law_seconds);
  found.clear();
  for (const Failure& f : report.failures) {
    if (FailureGroup(f) == "schedule") AddFailureCase(found, "schedule", f);
  }
  if (report.schedule_checked) {
    schedule.out = absl::StrCat("peak bytes per device: ", absl::StrJoin(report.peak_bytes, ", "),
                                "\n");
  } else if (found.empty()) {
    schedule.skipped = "the plan has no per-device order";
  }
  cases.push_back(std::move(schedule));
  for (TestCase& t : found) cases.push_back(std::move(t));
  return cases;
}

std::string Seconds(double s) { return absl::StrFormat("%.3f", s); }

}  // namespace

std::string VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kEquivalent: return "equivalent";
    case Verdict::kNotEquivalent: return "not_equivalent";
    case Verdict::kUnknown: return "unknown";
  }
  return "unknown";
}

std::string FailureGroup(const Failure& f) {
  if (IsScheduleClass(f.cls)) return "schedule";
  // LawItem("") ends in the quotes around the op kind; its prefix is every law's.
  const std::string law = LawItem("");
  if (f.item.rfind(law.substr(0, law.size() - 1), 0) == 0) return "law";
  return "lineage";
}

namespace {

// The fields every report starts with, and the text a report is written as.
ir::OrderedJson ReportHead(const std::string& verdict, const std::string& words, int exit_code,
                           const ReportContext& context) {
  ir::OrderedJson j;
  j["format"] = "loom.verify.report";
  j["version"] = kReportJsonVersion;
  j["verdict"] = verdict;
  j["verdict_words"] = words;
  j["exit_code"] = exit_code;
  j["model"] = context.model;
  j["plan"] = context.plan;
  return j;
}

std::string ReportText(const ir::OrderedJson& j) {
  return j.dump(/*indent=*/2, /*indent_char=*/' ', /*ensure_ascii=*/false,
                nlohmann::detail::error_handler_t::replace) +
         "\n";
}

}  // namespace

std::string ReportJson(const VerifyReport& report, const ReportContext& context) {
  ir::OrderedJson j = ReportHead(VerdictName(report.verdict), VerdictWords(report.verdict),
                                 ExitCode(report.verdict), context);
  ir::OrderedJson counts;
  counts["items"] = report.items;
  counts["values"] = report.values;
  counts["stages"] = report.stages;
  counts["distinct_stages"] = report.distinct_stages;
  counts["stages_reused"] = report.stages_reused;
  counts["laws"] = report.laws.size();
  counts["laws_proved"] = report.laws_proved;
  counts["cache_hits"] = report.cache_hits;
  counts["failures"] = report.failures.size();
  counts["undecided"] = report.undecided.size();
  j["counts"] = counts;
  j["seconds"] = report.seconds;
  j["failures"] = ir::OrderedJson::array();
  for (const Failure& f : report.failures) j["failures"].push_back(FailureJson(f));
  j["undecided"] = ir::OrderedJson::array();
  for (const Undecided& u : report.undecided) {
    ir::OrderedJson e;
    e["item"] = u.item;
    e["reason"] = u.reason;
    j["undecided"].push_back(e);
  }
  j["laws"] = ir::OrderedJson::array();
  for (const LawResult& l : report.laws) {
    ir::OrderedJson e;
    e["op"] = l.op_kind;
    e["key"] = l.key;
    e["verdict"] = l.verdict;
    e["detail"] = l.detail;
    e["cached"] = l.cached;
    e["seconds"] = l.seconds;
    j["laws"].push_back(e);
  }
  ir::OrderedJson schedule;
  schedule["checked"] = report.schedule_checked;
  schedule["replicas"] = report.schedule_replicas;
  schedule["peak_bytes"] = report.peak_bytes;
  if (!report.peak_by_role.empty()) {
    ir::OrderedJson roles = ir::OrderedJson::array();
    for (const MemoryByRole& m : report.peak_by_role) {
      ir::OrderedJson e;
      e["weights"] = m.weights;
      e["gradients"] = m.gradients;
      e["optimizer_states"] = m.optimizer_states;
      e["activations"] = m.activations;
      e["communication"] = m.communication;
      roles.push_back(e);
    }
    schedule["peak_by_role"] = roles;
  }
  if (report.memory_capacity_bytes.has_value()) {
    schedule["memory_capacity_bytes"] = *report.memory_capacity_bytes;
    if (report.schedule_checked) {
      int64_t largest = 0;
      for (int64_t b : report.peak_bytes) largest = std::max(largest, b);
      schedule["fits"] = largest <= *report.memory_capacity_bytes;
    }
  }
  j["schedule"] = schedule;
  return ReportText(j);
}

std::string ErrorReportJson(const std::string& message, const ReportContext& context) {
  ir::OrderedJson j =
      ReportHead("error", "no verdict: the input could not be verified", 2, context);
  j["error"] = message;
  return ReportText(j);
}

std::string ErrorReportJUnit(const std::string& message, const ReportContext& context) {
  const std::string counts = "tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0.000\"";
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppend(&out, "<testsuites name=\"loom verify\" ", counts, ">\n");
  absl::StrAppend(&out, "  <testsuite name=\"loom.verify\" ", counts, ">\n");
  absl::StrAppend(&out, "    <properties>\n      <property name=\"model\" value=\"",
                  XmlEscape(context.model), "\"/>\n      <property name=\"plan\" value=\"",
                  XmlEscape(context.plan), "\"/>\n    </properties>\n");
  absl::StrAppend(&out, "    <testcase classname=\"loom.verify\" name=\"input\" time=\"0.000\">\n",
                  "      <error type=\"bad_input\" message=\"", XmlEscape(message), "\">",
                  XmlEscape(message, /*attribute=*/false), "</error>\n    </testcase>\n");
  absl::StrAppend(&out, "  </testsuite>\n</testsuites>\n");
  return out;
}

std::string XmlEscape(const std::string& s, bool attribute) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += attribute ? "&quot;" : "\""; break;
      case '\'': out += attribute ? "&apos;" : "'"; break;
      case '\n': out += attribute ? "&#10;" : "\n"; break;
      case '\r': out += "&#13;"; break;
      case '\t': out += attribute ? "&#9;" : "\t"; break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    }
  }
  return out;
}

std::string ReportJUnit(const VerifyReport& report, const ReportContext& context) {
  const std::vector<TestCase> cases = TestCases(report);
  int failed = 0, errors = 0, skipped = 0;
  for (const TestCase& t : cases) {
    if (!t.failures.empty()) {
      ++failed;
    } else if (!t.errors.empty()) {
      ++errors;
    } else if (!t.skipped.empty()) {
      ++skipped;
    }
  }
  const std::string counts =
      absl::StrFormat("tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%s\"",
                      cases.size(), failed, errors, skipped, Seconds(report.seconds));
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppend(&out, "<testsuites name=\"loom verify\" ", counts, ">\n");
  absl::StrAppend(&out, "  <testsuite name=\"loom.verify\" ", counts, ">\n");
  absl::StrAppend(&out, "    <properties>\n");
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"model", context.model},
           {"plan", context.plan},
           {"verdict", VerdictName(report.verdict)},
           {"exit_code", absl::StrCat(ExitCode(report.verdict))}}) {
    absl::StrAppend(&out, "      <property name=\"", name, "\" value=\"", XmlEscape(value),
                    "\"/>\n");
  }
  absl::StrAppend(&out, "    </properties>\n");
  for (const TestCase& t : cases) {
    absl::StrAppend(&out, "    <testcase classname=\"loom.verify\" name=\"", XmlEscape(t.name),
                    "\" time=\"", Seconds(t.seconds), "\">\n");
    if (!t.skipped.empty()) {
      absl::StrAppend(&out, "      <skipped message=\"", XmlEscape(t.skipped), "\"/>\n");
    }
    for (const auto& [message, body] : t.errors) {
      absl::StrAppend(&out, "      <error type=\"undecided\" message=\"", XmlEscape(message),
                      "\">", XmlEscape(body, /*attribute=*/false), "</error>\n");
    }
    for (const auto& [type, message, body] : t.failures) {
      absl::StrAppend(&out, "      <failure type=\"", XmlEscape(type), "\" message=\"",
                      XmlEscape(message), "\">", XmlEscape(body, /*attribute=*/false),
                      "</failure>\n");
    }
    if (!t.out.empty()) {
      absl::StrAppend(&out, "      <system-out>", XmlEscape(t.out, /*attribute=*/false),
                      "</system-out>\n");
    }
    absl::StrAppend(&out, "    </testcase>\n");
  }
  absl::StrAppend(&out, "  </testsuite>\n</testsuites>\n");
  return out;
}

}  // namespace loom::verify
