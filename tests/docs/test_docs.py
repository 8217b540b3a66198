"""Every command that README.md and docs/*.md show, run as the page shows it, its output
compared with the page's (doc_sessions.py says how). Blocks of one page share one
sandbox, in page order, as a reader following the page would."""

import os
import pathlib
import re
import subprocess
import tempfile

import pytest

import doc_sessions

SOURCE = pathlib.Path(os.environ.get("LOOM_SOURCE_DIR",
                                     pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("LOOM_BUILD_DIR", SOURCE / "build"))

BLOCKS = [block for page in doc_sessions.pages(SOURCE)
          for block in doc_sessions.blocks_of(SOURCE, page)]

_sandboxes: dict[str, doc_sessions.Sandbox] = {}
_scratch = tempfile.TemporaryDirectory(prefix="loom-docs-")


def sandbox_of(page: str) -> doc_sessions.Sandbox:
    if page not in _sandboxes:
        where = pathlib.Path(_scratch.name) / page.replace("/", "_")
        _sandboxes[page] = doc_sessions.Sandbox(where, SOURCE, BUILD)
    return _sandboxes[page]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block_runs_as_shown(block):
    problems = doc_sessions.check_block(block, sandbox_of(block.page))
    assert not problems, "\n\n".join(problems)


def test_every_shown_command_is_in_a_checked_block():
    """A `$ ` line outside a block this test runs (a fence with another info string, a
    command in prose-only blocks) would escape the check."""
    checked = {(b.page, b.line) for b in BLOCKS}
    escaped = []
    for page in doc_sessions.pages(SOURCE):
        text = (SOURCE / page).read_text()
        for fence in doc_sessions.FENCE.finditer(text):
            line = text.count("\n", 0, fence.start()) + 1
            if (page, line) in checked:
                continue
            if re.search(r"^\$ ", fence.group(2), re.M) or re.search(r"^>>> ", fence.group(2), re.M):
                escaped.append(f"{page}:{line}")
    assert not escaped, f"commands shown but not run: {escaped}"


def test_commands_that_are_not_run_say_why():
    for block in BLOCKS:
        for prefix, why in block.not_run.items():
            assert why, f"{block.name}: 'not run: {prefix}' gives no reason"
            assert any(c.text.startswith(prefix) for c in block.commands()), (
                f"{block.name}: 'not run: {prefix}' names no command of the block")


def test_the_comparison_can_fail():
    shown = ["verdict:      proved equivalent", "laws:         104/104 proved", "time: 0.02 s"]
    assert doc_sessions.match_output(shown, ["verdict: proved equivalent",
                                             "laws: 104/104 proved", "time: 3.5 s"]) is None
    assert doc_sessions.match_output(shown, ["verdict: proved equivalent",
                                             "laws: 103/104 proved", "time: 0.02 s"])
    assert doc_sessions.match_output(shown, ["verdict: not equivalent",
                                             "laws: 104/104 proved", "time: 0.02 s"])
    assert doc_sessions.match_output(shown[:2], shown)   # a line the page leaves out
    assert doc_sessions.match_output(["a", "...", "c"], ["a", "b", "b", "c"]) is None
    assert doc_sessions.match_output(["a", "...", "c"], ["a", "b"])
    assert doc_sessions.match_output(["peak 96.97 GB"], ["peak 97.01 GB"])
    assert doc_sessions.match_output(["error: x ..."], ["error: x y z"]) is None
    assert doc_sessions.expected_exit(["loom show: error: bad.loom:3:8"]) == 2
    assert doc_sessions.expected_exit(["verdict:   not equivalent"]) == 1


def teardown_module():
    for sandbox in _sandboxes.values():
        sandbox.remove()
    _scratch.cleanup()


def _flags_of(command):
    loom = BUILD / "tools" / "loom"
    help_text = subprocess.run([str(loom), command, "--help"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True).stdout
    return set(re.findall(r"^\s+(--?[a-z][a-z0-9-]*)", help_text, re.M)) - {"--help"}


def test_the_command_table_names_every_flag():
    """README.md's table of commands: every flag a command's --help lists is on one of its
    rows, or is a model flag of the paragraph below the table."""
    text = (SOURCE / "README.md").read_text()
    section = text[text.index("## The `loom` command"):]
    section = section[:section.index("\n## ")]
    model_flags = set(re.findall(r"--[a-z][a-z0-9-]*",
                                 section[section.index("MODEL FLAGS,"):]))
    missing = {}
    for command in ["models", "ops", "show", "graph", "plan", "search", "simulate",
                    "verify", "run"]:
        rows = [line for line in section.splitlines() if line.startswith(f"| `loom {command}")]
        assert rows, f"no row for loom {command}"
        named = set(re.findall(r"(--?[a-z][a-z0-9-]*)", " ".join(r.split("` |")[0] for r in rows)))
        if command not in ("models", "ops"):
            named |= model_flags | {"--model"}
        absent = _flags_of(command) - named
        if absent:
            missing[command] = sorted(absent)
    assert not missing, f"flags missing from README.md's command table: {missing}"


def test_the_ops_table_is_what_loom_ops_prints():
    """README.md's Ops table says it is `loom ops`: every op kind, its gradient rule and
    its signature, in the same order."""
    printed = subprocess.run([str(BUILD / "tools" / "loom"), "ops"], stdout=subprocess.PIPE,
                             text=True, check=True).stdout.splitlines()
    want = []
    for line in printed:
        name, grad, signature = re.match(r"(\S+)\s+(grad|-)\s+(.*)$", line).groups()
        want.append((name, "yes" if grad == "grad" else "-", signature))
    text = (SOURCE / "README.md").read_text()
    table = re.findall(r"^\| `([a-z0-9_]+)` \| (yes|-) \| (.*) \|$",
                       text[text.index("\n## Ops\n"):text.index("\n## Layout\n")], re.M)
    shown = [(n, g, s.replace("\\|", "|")) for n, g, s in table]
    assert shown == want, (
        f"README.md's Ops table ({len(shown)} ops) is not `loom ops` ({len(want)} ops): "
        f"missing {sorted({w[0] for w in want} - {s[0] for s in shown})}, "
        f"first difference {next((a, b) for a, b in zip(shown + [None] * len(want), want) if a != b)}")
