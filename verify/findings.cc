#include "verify/findings.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::verify {

std::string FailureClassName(FailureClass c) {
  switch (c) {
#define LOOM_FAILURE_NAME_(e, name, words) \
  case FailureClass::e:                    \
    return name;
    LOOM_FAILURE_CLASS_LIST(LOOM_FAILURE_NAME_)
#undef LOOM_FAILURE_NAME_
  }
  return "unknown";
}

std::string FailureClassWords(FailureClass c) {
  switch (c) {
#define LOOM_FAILURE_WORDS_(e, name, words) \
  case FailureClass::e:                     \
    return words;
    LOOM_FAILURE_CLASS_LIST(LOOM_FAILURE_WORDS_)
#undef LOOM_FAILURE_WORDS_
  }
  return "unknown";
}

std::string LawKey(const LawUse& law) {
  std::string key = absl::StrCat(ir::OpKindName(law.kind), "|", law.attrs.ToString(), "|");
  for (const auto& ty : law.inputs) absl::StrAppend(&key, ty.ToString(), ";");
  absl::StrAppend(&key, "|");
  for (size_t k = 0; k < law.labels.size(); ++k) {
    absl::StrAppend(&key, law.labels[k], "=", law.intervals[k].begin, ":", law.intervals[k].end,
                    "/", law.extents[k], ";");
  }
  absl::StrAppend(&key, "|", absl::StrJoin(law.partial_inputs, ","));
  return key;
}

}  // namespace loom::verify
