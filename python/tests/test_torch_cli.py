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
    assert "\033[K" not in r.stderr  # no status line when standard error is a pipe
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


class _Terminal:
    """Standard error as a terminal: what was written, in order."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return True


def test_the_stages_show_on_a_terminal_and_are_cleared(monkeypatch, capsys):
    from loom.torch import cli
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main(["verify", EXAMPLE]) == 0
    lines = [line for line in terminal.text.split("\r\033[K") if line]
    stages = [line.split(" (")[0] for line in lines]
    assert stages[0] == f"loom.torch: loading {EXAMPLE}"
    assert "loom.torch: checking the batch" in stages
    assert "loom.torch: tracing rank 0" in stages
    assert stages[-3:] == ["loom.torch: tracing the single-device step",
                           "loom.torch: lowering the plan", "loom.torch: proving the plan"]
    assert terminal.text.endswith("\r\033[K")  # cleared before the result
    assert "verdict:   proved equivalent" in capsys.readouterr().out


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


# A launcher's own failures, bad options and what the mesh cannot split: exit 2 with
# one error line (the launcher's function, file and line, the exception's message),
# never a traceback, and the report files say undecided.

LAUNCHER = '''
import torch

mesh = {"tp": 2}


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2).double()


def parallelize(module, device_mesh):
    return module


def inputs():
    return (torch.arange(16, dtype=torch.float64).reshape(4, 4),)


def loss(output):
    return output.pow(2).mean()


def optimizer(params):
    return torch.optim.SGD(params, lr=0.1)
'''


def write_launcher(tmp_path, extra="", name="launcher.py"):
    """The tiny launcher above (proved equivalent as it is) with `extra` appended:
    its path and the line of `extra` marked `# here`."""
    text = LAUNCHER + extra
    path = tmp_path / name
    path.write_text(text)
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if "# here" in line]
    return str(path), (lines[0] if lines else None)


def run_inprocess(capsys, *args):
    from loom.torch import cli
    code = cli.main(["verify", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


FAILURES = {
    "load": ('raise RuntimeError("the config server is down")  # here\n',
             "the launcher failed", "RuntimeError: the config server is down"),
    "model": ('def model():\n    raise RuntimeError("no checkpoint")  # here\n',
              "the launcher's model failed", "RuntimeError: no checkpoint"),
    "fully_shard twice": (
        "def parallelize(module, device_mesh):\n"
        "    from torch.distributed.fsdp import fully_shard\n"
        "    fully_shard(module, mesh=device_mesh['tp'])\n"
        "    fully_shard(module, mesh=device_mesh['tp'])  # here\n",
        "the launcher's parallelize failed", "fully_shard has already been applied"),
    "a mesh dim torch does not know": (
        "def parallelize(module, device_mesh):\n"
        "    device_mesh['dp']  # here\n    return module\n",
        "the launcher's parallelize failed", "Invalid mesh_dim_names ('dp',)"),
    "inputs": ('def inputs():\n    return {}["input_ids"]  # here\n',
               "the launcher's inputs failed", "KeyError: 'input_ids'"),
    "optimizer": ("def optimizer(params):\n"
                  "    return torch.optim.SGD(params, lr=-1.0)  # here\n",
                  "the launcher's optimizer failed", "Invalid learning rate: -1.0"),
    "loss": ('def loss(output):\n    raise ValueError("no labels")  # here\n',
             "the launcher's loss failed", "ValueError: no labels"),
    "train_step": ("del loss\n\n\ndef train_step(model, optimizer, batch):\n"
                   "    model(*batch).sum().backward()\n"
                   '    raise RuntimeError("clip failed")  # here\n',
                   "the launcher's train_step failed", "RuntimeError: clip failed"),
    "the model's forward": (
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a = torch.nn.Linear(4, 3)\n"
        "        self.b = torch.nn.Linear(4, 2)\n\n"
        "    def forward(self, x):\n"
        "        return self.b(self.a(x))  # here\n\n\n"
        "def model():\n    return Model().double()\n",
        "tracing the training step failed", "mat1 and mat2 shapes cannot be multiplied"),
    "sys.exit(0) in model": ("def model():\n    import sys\n    sys.exit(0)  # here\n",
                             "the launcher's model exited", "sys.exit(0)"),
    "sys.exit at load": ("import sys\nsys.exit(3)  # here\n", "the launcher exited",
                         "sys.exit(3)"),
    "SystemExit in loss": ('def loss(output):\n    raise SystemExit("done")  # here\n',
                           "the launcher's loss exited", "sys.exit('done')"),
    "KeyboardInterrupt in optimizer": ("def optimizer(params):\n"
                                       "    raise KeyboardInterrupt  # here\n",
                                       "the launcher's optimizer failed", "KeyboardInterrupt"),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_launchers_own_failure_is_one_error_line_and_exit_2(tmp_path, capsys, case):
    extra, who, message = FAILURES[case]
    path, line = write_launcher(tmp_path, "\n\n" + extra)
    code, out, err = run_inprocess(capsys, path, "--report", str(tmp_path / "r.json"))
    assert code == 2, out + err
    error = one_error_line(err)
    assert f"{who} at {path}:{line}" in error, error
    assert ("(loading it)" if "load" in case else "(checking the batch)" if case == "inputs"
            else "(rank 0)" if "forward" in case else "(tracing rank 0)") in error, error
    assert message in error, error
    assert "verdict:   undecided" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "unknown" and doc["exit_code"] == 2
    assert doc["undecided"][0]["reason"] == error[len("error: "):]


def test_a_failure_in_a_neighbour_module_names_the_launchers_line_and_its_own(
        tmp_path, capsys):
    (tmp_path / "helpers.py").write_text("def shard(module):\n"
                                         "    raise NotImplementedError('no plan for Linear')\n")
    path, line = write_launcher(tmp_path, "\n\nimport helpers\n\n\n"
                                          "def parallelize(module, device_mesh):\n"
                                          "    return helpers.shard(module)  # here\n")
    code, out, err = run_inprocess(capsys, path, "--traceback")
    assert code == 2
    # --traceback: Python's traceback first, then the one line.
    assert "Traceback" in err
    error = err.strip().splitlines()[-1]
    assert error == (f"error: the launcher's parallelize failed at {path}:{line}, in "
                     f"{tmp_path / 'helpers.py'}:2 (tracing rank 0): NotImplementedError: "
                     "no plan for Linear")


def test_loom_torchs_own_failure_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    import loom.torch.api

    # A failure raised in loom.torch's own code (a C function called there).
    monkeypatch.setattr(loom.torch.api, "build_plan", {}.pop)
    path, _ = write_launcher(tmp_path)
    code, out, err = run_inprocess(capsys, path)
    assert code == 2
    error = one_error_line(err)
    assert error.startswith("error: loom.torch failed (lowering the plan) at ")
    assert "loom/torch/api.py:" in error and "TypeError: " in error


def test_a_launcher_exiting_0_exits_2_with_undecided_reports(tmp_path):
    # As its own process: sys.exit(0) inside model() must not end the command with 0.
    path, line = write_launcher(tmp_path, "\n\ndef model():\n    import sys\n"
                                          "    sys.exit(0)  # here\n")
    r = run("verify", path, "--report", str(tmp_path / "r.json"),
            "--junit", str(tmp_path / "v.xml"))
    assert r.returncode == 2, r.stdout + r.stderr
    error = one_error_line(r.stderr)
    assert f"the launcher's model exited at {path}:{line} (tracing rank 0)" in error
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict_words"] == "undecided" and doc["exit_code"] == 2
    suite = ET.parse(tmp_path / "v.xml").getroot()
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    capture = next(c for c in suite.iter("testcase") if c.get("name") == "capture")
    assert "sys.exit(0)" in capture.find("error").get("message")


@pytest.mark.parametrize("body", ["    while True:\n        pass  # here\n",
                                  # A bare except in a loop swallows the timeout.
                                  "    while True:\n        try:\n"
                                  "            time.sleep(0.01)  # here\n"
                                  "        except BaseException:\n            pass\n"])
def test_a_launcher_that_never_returns_is_stopped_by_the_timeout(tmp_path, body):
    path, line = write_launcher(tmp_path, "\n\nimport time\n\n\ndef model():\n" + body)
    r = run("verify", path, "--timeout", "4", "--report", str(tmp_path / "r.json"))
    assert r.returncode == 2, r.stdout + r.stderr
    error = one_error_line(r.stderr)
    assert f"the launcher's model ran past the 4 s timeout at {path}:" in error, error
    assert f"{path}:{line - 1}" in error or f"{path}:{line}" in error, error
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 2


def test_the_timeout_leaves_a_launcher_that_returns_alone(tmp_path, capsys):
    path, _ = write_launcher(tmp_path)
    code, out, err = run_inprocess(capsys, path, "--timeout", "300")
    assert code == 0, out + err
    assert "verdict:   proved equivalent" in out


def test_a_batch_the_data_parallel_ranks_cannot_share_is_refused_before_tracing(
        tmp_path, capsys):
    # model() raising would say so if anything were traced.
    path, _ = write_launcher(tmp_path, "\n\ndef model():\n    raise RuntimeError('traced')\n")
    for mesh, ranks in (("dp=8", 8), ("dp=3", 3), ("fsdp=2,tp=2,dp_shard=4", 8)):
        code, out, err = run_inprocess(capsys, path, "--mesh", mesh)
        assert code == 2, out + err
        error = one_error_line(err)
        assert f"the batch's 'arg0' has 4 rows, which the {ranks} data-parallel ranks" \
            in error, error
    path, _ = write_launcher(tmp_path, "\n\nmesh = {'dp': 2}\n\n\ndef inputs():\n"
                                       "    return (torch.ones(3, 4, dtype=torch.float64),)\n")
    code, out, err = run_inprocess(capsys, path)
    assert code == 2
    assert "'arg0' has 3 rows, which the 2 data-parallel ranks of the mesh (dp=2) " \
        "cannot share equally" in one_error_line(err)


@pytest.mark.parametrize("mesh", ["dp=2,,tp=2", "dp=2,dp=2", "=2", "dp=0", "dp", "dp=-1",
                                  "dp=2.0"])
def test_a_bad_mesh_option_is_an_error(tmp_path, capsys, mesh):
    path, _ = write_launcher(tmp_path)
    code, out, err = run_inprocess(capsys, path, "--mesh", mesh, "--report",
                                   str(tmp_path / "r.json"))
    assert code == 2
    assert one_error_line(err).startswith(f"error: --mesh {mesh!r}")
    # The report a CI job reads says why it stopped (no stale verdict left there).
    assert json.loads((tmp_path / "r.json").read_text())["verdict_words"] == "undecided"


@pytest.mark.parametrize("extra, words", [
    ("mesh = {'dp': 0}", "size 0 is not an integer >= 1"),
    ("mesh = {'dp': '2'}", "size '2' is not an integer >= 1"),
    ("mesh = {'dp': True}", "size True is not an integer >= 1"),
    ("mesh = {'': 2}", "mesh dim name '' is not a name"),
    ("mesh = [('dp', 2), ('dp', 2)]", "mesh must be a dict"),
    ("fake = 'False'", "fake = 'False': it must be True or False"),
    ("inputs = (torch.ones(4, 4),)", "inputs must be a function, not a tuple"),
])
def test_a_bad_launcher_definition_is_an_error(tmp_path, capsys, extra, words):
    path, _ = write_launcher(tmp_path, "\n" + extra + "\n")
    code, out, err = run_inprocess(capsys, path)
    assert code == 2, out + err
    assert words in one_error_line(err)


def test_bad_report_and_cache_paths_are_errors(tmp_path, capsys):
    path, _ = write_launcher(tmp_path)
    same = str(tmp_path / "same")
    for args, words in (
            (["--report", same, "--junit", same], "--report and --junit are the same file"),
            (["--report", path], "that is the launcher"),
            (["--junit", str(tmp_path / "no" / "v.xml")], "cannot write there"),
            (["--cache", path], f"--cache: proof cache {path}: not a directory"),
            (["--cache", path + "/sub"], "cannot create it")):
        code, out, err = run_inprocess(capsys, path, *args)
        assert code == 2, (args, out + err)
        assert words in one_error_line(err), args
    assert not os.path.exists(same)


def test_unknown_and_malformed_options_exit_2(tmp_path, capsys):
    r = run("verify", EXAMPLE, "--no-such-option")
    assert r.returncode == 2 and "unrecognized arguments: --no-such-option" in r.stderr
    from loom.torch import cli
    for args in (["--timeout", "0"], ["--timeout", "soon"], ["--timeout-ms", "-5"]):
        with pytest.raises(SystemExit) as e:
            cli.main(["verify", EXAMPLE, *args])
        assert e.value.code == 2, args
        assert f"argument {args[0]}: {args[1]!r} is not" in capsys.readouterr().err


def test_the_api_raises_launcher_error_and_never_exits(tmp_path):
    import sys as _sys
    import torch

    import loom.torch
    from loom.torch import LauncherError

    def model():
        _sys.exit(0)

    def never_returns():
        while True:
            pass

    common = dict(parallelize=lambda m, mesh: m, mesh={"tp": 2},
                  inputs=lambda: (torch.ones(4, 4, dtype=torch.float64),),
                  loss=lambda out: out.sum(),
                  optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))
    with pytest.raises(LauncherError) as e:
        loom.torch.verify(model=model, **common)
    assert e.value.function == "model" and "sys.exit(0)" in str(e.value)
    assert e.value.where.endswith(f":{model.__code__.co_firstlineno + 1}")
    with pytest.raises(LauncherError) as e:
        loom.torch.verify(model=never_returns, capture_timeout=2, **common)
    assert e.value.function == "model" and "ran past the 2 s timeout" in str(e.value)
    for bad, words in ((dict(fake="False"), "fake must be True or False"),
                       (dict(mesh={"dp": 0}), "size 0"),
                       (dict(capture_timeout=-1), "capture_timeout"),
                       (dict(cache_dir=__file__), "not a directory")):
        with pytest.raises(loom.torch.CaptureError, match=words):
            loom.torch.verify(model=model, **dict(common, **bad))


def test_the_proof_does_not_count_against_the_capture_timeout():
    import time

    from loom.torch.launcher import Guard, timeouts_paused
    with Guard(timeout=1.0):
        with timeouts_paused():  # as verify runs loom.verify
            time.sleep(1.5)
        time.sleep(0.2)
