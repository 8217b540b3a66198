"""Every command that README.md and docs/*.md show, run as the page shows it, its output
compared with the page's (doc_sessions.py says how). Blocks of one page share one
sandbox, in page order, as a reader following the page would."""

import os
import pathlib
import re
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
