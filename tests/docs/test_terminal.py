"""What a person at a terminal sees while a command's seconds pass: each step named on
one status line of standard error, cleared before the result; nothing of it when the
output goes to a file or a pipe (CI logs stay as they were). `script` gives the command
a terminal."""

import os
import pathlib
import shutil
import subprocess

import pytest

SOURCE = pathlib.Path(os.environ.get("LOOM_SOURCE_DIR",
                                     pathlib.Path(__file__).resolve().parents[2]))
LOOM = pathlib.Path(os.environ.get("LOOM_BUILD_DIR", SOURCE / "build")) / "tools" / "loom"

pytestmark = pytest.mark.skipif(shutil.which("script") is None, reason="no 'script' here")


def on_terminal(command, cwd):
    result = subprocess.run(["script", "-qec", command, "/dev/null"], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    # Bytes, decoded without newline translation: the status line's \r must survive.
    return result.returncode, result.stdout.decode()


PLAN = "plan --model llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 8 -o plan.json"


def test_plan_search_and_verify_name_their_steps_on_a_terminal(tmp_path):
    rc, seen = on_terminal(f"{LOOM} {PLAN}", tmp_path)
    assert rc == 0, seen
    for step in ["plan: building the training step of llama3-8b",
                 "plan: splitting it over 8 devices", "plan: writing plan.json"]:
        assert step in seen, seen
    # Cleared before the result: the result's first line starts after an erase.
    assert "\r\x1b[Kplan:         llama3-8b" in seen
    rc, seen = on_terminal(f"{LOOM} search --plan plan.json -o ordered.json", tmp_path)
    assert rc == 0, seen
    for step in ["search: building the training step the plan records",
                 "search: timing the blocks of the plan's devices", "search: searching",
                 "search: writing ordered.json"]:
        assert step in seen, seen
    rc, seen = on_terminal(f"{LOOM} verify --plan ordered.json --no-cache", tmp_path)
    assert rc == 0, seen
    assert "verify: building the training step the plan records" in seen
    assert "verify: laws 157/157 proved" in seen


def test_nothing_of_it_in_a_file_or_a_pipe(tmp_path):
    result = subprocess.run(f"{LOOM} {PLAN} 2>&1 | cat", shell=True, cwd=tmp_path,
                            stdout=subprocess.PIPE, text=True, check=True)
    assert "\x1b" not in result.stdout and "building" not in result.stdout
    assert result.stdout.startswith("plan:         llama3-8b")


def test_an_error_is_not_written_over_the_status_line(tmp_path):
    rc, seen = on_terminal(f"{LOOM} plan --model llama3-8b --tp 3 -o plan.json", tmp_path)
    assert rc == 2, seen
    line = next(l for l in seen.split("\n") if "loom plan: error:" in l)
    assert line.split("\r\x1b[K")[-1].startswith("loom plan: error:"), repr(line)
