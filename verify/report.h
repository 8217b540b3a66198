#ifndef LOOM_VERIFY_REPORT_H_
#define LOOM_VERIFY_REPORT_H_

// Machine-readable forms of a VerifyReport: the verification report JSON and a
// JUnit XML file a CI system reads. Both are documented field by field in
// docs/formats.md ("Verification report").

#include <string>

#include "verify/verify.h"

namespace loom::verify {

inline constexpr int kReportJsonVersion = 1;

// What was verified, as the caller names it.
struct ReportContext {
  std::string model;  // "gpt2"
  std::string plan;   // the plan file's path
};

// "equivalent", "not_equivalent" or "unknown".
std::string VerdictName(Verdict v);

// The check group a failure belongs to: "lineage", "law" or "schedule". Law
// failures are the ones whose item is LawItem(op kind).
std::string FailureGroup(const Failure& f);

// {"format": "loom.verify.report", "version": 1, "verdict": ..., ...}, one line of
// compact JSON ending in a newline. Failures, undecided entries and laws keep the
// report's order.
std::string ReportJson(const VerifyReport& report, const ReportContext& context);

// One <testsuite name="loom.verify"> with a testcase per check group: "coverage and
// lineage", "law:<op>" for each op kind with a law (in the order of report.laws) and
// "schedule safety". Failures are <failure> elements, undecided entries <error>
// elements, an unchecked schedule <skipped>.
std::string ReportJUnit(const VerifyReport& report, const ReportContext& context);

// The report of a run that reached no verdict because its input was bad (or
// anything else stopped it): verdict "error", exit code 2 and the message, so
// that a CI job reads why. The JUnit form is one testcase holding an <error>.
std::string ErrorReportJson(const std::string& message, const ReportContext& context);
std::string ErrorReportJUnit(const std::string& message, const ReportContext& context);

// `s` escaped for an XML attribute value (quotes, newlines and tabs as references
// too) or, with attribute false, for element text (only &, < and >). Characters XML 1.0 does
// not allow (control characters other than tab, newline, carriage return) become '?'.
std::string XmlEscape(const std::string& s, bool attribute = true);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_REPORT_H_
