"""docs/ci.md's GitHub Actions and GitLab CI jobs, run as written.

Each job's shell lines run in order in a scratch checkout holding `configs/train.yaml`
(examples/llama3-70b.yaml), with two readings a real runner would not need: the clone of
Loom is left out and `/opt/loom` is the tree under test; the `apt-get` line of the bare
image runs as written when the test runs as root (as CI does) and is otherwise checked
against what is installed. `uses:` steps are the runner's: checkout is the scratch
directory; what the artifact and JUnit steps upload must exist afterwards."""

import os
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

SOURCE = pathlib.Path(os.environ.get("LOOM_SOURCE_DIR",
                                     pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("LOOM_BUILD_DIR", SOURCE / "build"))
CLONE = re.compile(r"^\s*git clone\b.*\s/opt/loom\s*$")


def ci_jobs():
    text = (SOURCE / "docs" / "ci.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)]
    github = next(b for b in blocks if "jobs" in b)
    gitlab = next(b for b in blocks if "verify-plan" in b)
    return github, gitlab


def shell_lines(lines):
    """The job's lines as the test runs them (see the module's comment)."""
    out = []
    for line in lines:
        if CLONE.match(line):
            continue
        out.append(line.replace("/opt/loom", str(SOURCE)))
    return out


def apt_get_check(line):
    """The bare image's apt-get line: as written when root, else its packages must be
    installed already."""
    if os.geteuid() == 0:
        return line
    packages = [w for w in shlex.split(line.split("install", 1)[1]) if not w.startswith("-")]
    return " && ".join(f"dpkg-query -W -f='${{Status}}' {p} | grep -q 'install ok installed'"
                       for p in packages)


def run_job(lines, workspace):
    script = "\n".join(apt_get_check(l) if l.lstrip().startswith("apt-get") else l
                       for l in shell_lines(lines))
    env = dict(os.environ, XDG_CACHE_HOME=str(workspace / ".xdg"))
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                            cwd=workspace, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=900)
    assert result.returncode == 0, f"the job failed ({result.returncode}):\n{script}\n---\n{result.stdout}"
    return result.stdout


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "configs").mkdir()
    shutil.copy(SOURCE / "examples" / "llama3-70b.yaml", tmp_path / "configs" / "train.yaml")
    return tmp_path


def test_github_job_runs_as_written_from_a_bare_image(workspace):
    github, _ = ci_jobs()
    (job,) = github["jobs"].values()
    assert job["container"] == "debian:12"
    steps = job["steps"]
    # A bare image has no git: the first step must install it before the checkout.
    assert "apt-get install" in steps[0].get("run", "") and "git" in steps[0]["run"]
    assert steps[1].get("uses", "").startswith("actions/checkout")
    lines = []
    for step in steps:
        if "run" in step:
            lines += step["run"].splitlines()
    output = run_job(lines, workspace)
    assert re.search(r"^verdict:\s+proved equivalent$", output, re.M), output
    assert re.search(r"^schedule:\s+checked", output, re.M), output
    for step in steps:
        uploaded = step.get("with", {}).get("path") or step.get("with", {}).get("report_paths")
        if step.get("uses", "").startswith(("actions/upload-artifact", "mikepenz/")):
            for path in uploaded.split():
                assert (workspace / path).is_file(), f"{step['uses']} uploads {path}, not written"
    assert (workspace / ".loom-cache" / "proved-laws").is_file()


def test_gitlab_job_runs_as_written_from_a_bare_image(workspace):
    _, gitlab = ci_jobs()
    job = gitlab["verify-plan"]
    assert job["image"] == "debian:12"
    assert "apt-get install" in job["before_script"][0]
    output = run_job(job["before_script"] + job["script"], workspace)
    assert re.search(r"^verdict:\s+proved equivalent$", output, re.M), output
    assert re.search(r"^schedule:\s+checked", output, re.M), output
    assert (workspace / job["artifacts"]["reports"]["junit"]).is_file()
    for path in job["artifacts"]["paths"]:
        assert (workspace / path).is_file()
    assert (workspace / job["cache"]["paths"][0] / "proved-laws").is_file()


def test_a_broken_configuration_fails_the_job(workspace):
    """The job is a gate: a configuration Loom refuses stops it (exit 2 from plan)."""
    _, gitlab = ci_jobs()
    (workspace / "configs" / "train.yaml").write_text(
        (SOURCE / "examples" / "llama3-70b.yaml").read_text()
        + "tensor_model_paralel_size: 4\n")
    script = "\n".join(shell_lines(gitlab["verify-plan"]["script"]))
    result = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=workspace,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=300)
    assert result.returncode == 2, result.stdout
    assert "tensor_model_parallel_size" in result.stdout
