#ifndef LOOM_TESTS_TESTING_XML_CHECK_H_
#define LOOM_TESTS_TESTING_XML_CHECK_H_

// A small well-formedness check for the XML files Loom writes, for tests.

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace loom::testing {

// Empty when `xml` is a well-formed document: an optional XML declaration, one root
// element, tags nested and closed with matching names, attribute values quoted and
// unique per element, no '<' in attribute values, and after every '&' one of the
// five predefined entities or a numeric character reference. Otherwise the first
// problem and its byte offset. Comments are skipped; DTDs and CDATA are not
// accepted (Loom writes neither).
inline std::string XmlWellFormedError(const std::string& xml) {
  size_t i = 0;
  auto error = [&](const std::string& what) { return absl::StrCat("offset ", i, ": ", what); };
  auto is_name_start = [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  };
  auto is_name = [&](char c) {
    return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  };
  auto name = [&]() {
    size_t start = i;
    if (i < xml.size() && is_name_start(xml[i])) {
      while (i < xml.size() && is_name(xml[i])) ++i;
    }
    return xml.substr(start, i - start);
  };
  auto space = [&] {
    while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
  };
  // Checks the reference at xml[i] == '&' and moves past it.
  auto reference = [&]() -> std::string {
    size_t end = xml.find(';', i);
    if (end == std::string::npos) return error("'&' without ';'");
    std::string ref = xml.substr(i + 1, end - i - 1);
    static const std::set<std::string> kEntities = {"amp", "lt", "gt", "quot", "apos"};
    // &#10; or &#xA;
    const bool hex = ref.size() > 2 && ref[0] == '#' && ref[1] == 'x';
    bool numeric = ref.size() > 1 && ref[0] == '#';
    for (size_t k = hex ? 2 : 1; numeric && k < ref.size(); ++k) {
      const unsigned char d = static_cast<unsigned char>(ref[k]);
      numeric = hex ? std::isxdigit(d) != 0 : std::isdigit(d) != 0;
    }
    if (!numeric && kEntities.count(ref) == 0) return error("unknown reference &" + ref + ";");
    i = end + 1;
    return "";
  };
  if (xml.compare(0, 5, "<?xml") == 0) {
    i = xml.find("?>");
    if (i == std::string::npos) return "unterminated XML declaration";
    i += 2;
  }
  std::vector<std::string> open;
  bool root_done = false;
  while (i < xml.size()) {
    char c = xml[i];
    if (c != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(c))) {
        return error("text outside the root element");
      }
      if (c == '&') {
        if (std::string e = reference(); !e.empty()) return e;
      } else {
        ++i;
      }
      continue;
    }
    if (xml.compare(i, 4, "<!--") == 0) {
      size_t end = xml.find("-->", i + 4);
      if (end == std::string::npos) return error("unterminated comment");
      i = end + 3;
      continue;
    }
    if (xml.compare(i, 2, "</") == 0) {
      i += 2;
      std::string n = name();
      space();
      if (i >= xml.size() || xml[i] != '>') return error("bad end tag");
      ++i;
      if (open.empty() || open.back() != n) return error("end tag </" + n + "> does not match");
      open.pop_back();
      if (open.empty()) root_done = true;
      continue;
    }
    ++i;
    if (root_done && open.empty()) return error("second root element");
    std::string n = name();
    if (n.empty()) return error("bad tag name");
    std::set<std::string> attributes;
    while (true) {
      const size_t before = i;
      space();
      if (i >= xml.size()) return error("unterminated tag <" + n);
      if (xml[i] == '>' || xml.compare(i, 2, "/>") == 0) break;
      if (i == before) return error("no space before an attribute");
      std::string a = name();
      if (a.empty()) return error("bad attribute name");
      if (!attributes.insert(a).second) return error("duplicate attribute " + a);
      space();
      if (i >= xml.size() || xml[i] != '=') return error("attribute " + a + " without '='");
      ++i;
      space();
      if (i >= xml.size() || (xml[i] != '"' && xml[i] != '\'')) {
        return error("attribute " + a + " not quoted");
      }
      const char quote = xml[i++];
      while (i < xml.size() && xml[i] != quote) {
        if (xml[i] == '<') return error("'<' in attribute " + a);
        if (xml[i] == '&') {
          if (std::string e = reference(); !e.empty()) return e;
        } else {
          ++i;
        }
      }
      if (i >= xml.size()) return error("unterminated attribute " + a);
      ++i;
    }
    if (xml[i] == '/') {
      i += 2;
      if (open.empty()) root_done = true;
    } else {
      ++i;
      open.push_back(n);
    }
  }
  if (!open.empty()) return absl::StrCat("element <", open.back(), "> is not closed");
  if (!root_done) return "no root element";
  return "";
}

}  // namespace loom::testing

#endif  // LOOM_TESTS_TESTING_XML_CHECK_H_
