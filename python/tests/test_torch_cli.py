"""python -m loom.torch verify: the launcher file, the exit codes and the report files."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "torch", "llama_tp_fsdp.py")


def run(*args, cwd=None):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "loom.torch", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=600)


def test_the_example_launcher_is_proved_with_its_reports(tmp_path):
    # The torchtitan-style example of docs/torch.md: TP + SP, then FSDP2, dp2 x tp2.
    r = run("verify", EXAMPLE, "--report", str(tmp_path / "r.json"),
            "--junit", str(tmp_path / "v.xml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict:   proved equivalent" in r.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["format"] == "loom.verify.report"
    assert doc["verdict"] == "equivalent" and doc["exit_code"] == 0
    assert doc["torch"]["mesh"] == {"dp": 2, "tp": 2}
    assert doc["torch"]["ranks"] == "one rank traced per pipeline rank (1 of 4)"
    assert doc["counts"]["laws_proved"] == doc["counts"]["laws"] > 0
    suite = ET.parse(tmp_path / "v.xml").getroot()
    assert suite.get("failures") == "0"
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names[:2] == ["capture", "coverage and lineage"]
    assert any(n.startswith("law:") for n in names)


def test_every_rank_traces_every_rank():
    r = run("verify", EXAMPLE, "--every-rank")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ranks:     every rank traced\n" in r.stdout


def test_a_planted_bug_exits_1_and_the_reports_name_the_users_code(tmp_path):
    # Tensor parallelism with the last block's down projection left partial where it
    # meets the residual: the report names the module and the source line.
    launcher = os.path.join(ROOT, "examples", "torch", "llama_tp_partial_residual.py")
    r = run("verify", launcher, "--report", str(tmp_path / "r.json"),
            "--junit", str(tmp_path / "v.xml"))
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "not_equivalent" and doc["exit_code"] == 1
    assert len(doc["failures"]) == 1  # one failure, on both ranks
    first = doc["failures"][0]
    assert first["class"] == "missing_reduction" and first["devices"] == [0, 1]
    assert first["module"].startswith("model.layers.1")
    assert first["source"].startswith("transformers/models/llama/modeling_llama.py:")
    suite = ET.parse(tmp_path / "v.xml").getroot()
    failures = list(suite.iter("failure"))
    assert failures and failures[0].get("type") == "missing_reduction"
    assert "model.layers.1" in failures[0].get("message")
    # A test case per failing tensor, counted as a failure; the groups keep their times.
    failing = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failing] == [f"lineage: missing_reduction '{first['tensor']}'"]
    assert suite.get("failures") == "1"
    capture = next(c for c in suite.iter("testcase") if c.get("name") == "capture")
    assert float(capture.get("time")) > 0


def test_a_launcher_without_an_optimizer_exits_2():
    r = run("verify", os.path.join(HERE, "launchers", "bad_launcher.py"))
    assert r.returncode == 2
    assert "defines no optimizer" in r.stderr


def test_a_missing_launcher_and_a_bad_mesh_exit_2(tmp_path):
    r = run("verify", str(tmp_path / "nothing.py"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run("verify", EXAMPLE, "--mesh", "dp=two")
    assert r.returncode == 2 and "--mesh" in r.stderr
    r = run("check", EXAMPLE)
    assert r.returncode == 2 and "usage" in r.stderr
