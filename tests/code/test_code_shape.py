"""The shape of the C++ core: files named by what they hold, no textual includes of
code, no pair of verifier files that include each other, no long functions, and
no op named in the derivation (an op's knowledge lives in its schema)."""

import pathlib
import re

import pytest

from cpp_source import functions, includes

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORE = ["ir", "transform", "schedule", "verify"]
SOURCE_DIRS = CORE + ["smt", "models", "exec", "api", "tools", "python", "bench", "fuzz", "tests"]
LONGEST_FUNCTION = 150
# The local tasks a plan carries without a logical op (transform/): the derivation
# knows these by kind; any other op reaches it only through its schema.
LOCAL_TASK_KINDS = {"kSlice", "kConcat", "kFill", "kScale", "kAccumulate", "kSplit",
                    "kAttentionMerge"}


def sources(dirs, suffixes=(".cc", ".h", ".cu")):
    for d in dirs:
        for p in sorted((ROOT / d).rglob("*")):
            if p.suffix in suffixes and p.is_file():
                yield p


def test_no_textually_included_code_and_no_lettered_names():
    bad = []
    for d in SOURCE_DIRS:
        for p in (ROOT / d).rglob("*"):
            lettered = p.suffix in (".cc", ".h", ".cu", ".py") and re.search(r"_[a-z]$", p.stem)
            if p.suffix == ".inc" or lettered:
                bad.append(str(p.relative_to(ROOT)))
    assert bad == []


def test_no_two_verifier_files_include_each_other():
    headers = {}
    for p in sources(["verify"]):
        headers.setdefault(p.with_suffix("").name, set()).update(
            inc for inc in includes(p.read_text()) if inc.startswith("verify/"))
    pairs = set()
    for a, incs in headers.items():
        for inc in incs:
            b = pathlib.Path(inc).with_suffix("").name
            if b == a or b.endswith("_internal") or a.endswith("_internal"):
                continue
            if f"verify/{a}.h" in headers.get(b, set()):
                pairs.add(tuple(sorted((a, b))))
    assert sorted(pairs) == []


def test_no_long_functions_in_the_core():
    long = []
    for p in sources(CORE):
        for name, first, count in functions(p.read_text()):
            if count > LONGEST_FUNCTION:
                long.append(f"{p.relative_to(ROOT)}:{first} {name} ({count} lines)")
    assert long == []


def test_the_derivation_names_no_op_but_the_local_tasks():
    named = {}
    for p in (ROOT / "verify").glob("derive*"):
        for kind in re.findall(r"OpKind::(k\w+)", p.read_text()):
            if kind not in LOCAL_TASK_KINDS:
                named.setdefault(kind, []).append(p.name)
    assert named == {}


@pytest.mark.parametrize("lines,expected", [(150, []), (151, [("Long", 1, 151)])])
def test_a_function_is_measured_from_its_brace_to_its_end(lines, expected):
    body = "\n".join(["  if (x) { y(); }  // {"] + ['  s = "}";'] * (lines - 3))
    src = f"int Long(int x) {{\n{body}\n}}\nnamespace n {{\nstruct S {{ int a; }};\n}}\n"
    assert [f for f in functions(src) if f[2] > LONGEST_FUNCTION] == expected
