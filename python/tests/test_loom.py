"""Tests of the `loom` Python module (docs/python.md).

Run with the interpreter the module was built for and the module's folder on
PYTHONPATH (CTest's python_tests does both):

    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q python/tests
"""

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import loom

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "python.md"

# The example of docs/python.md: tiny llama3-8b, 2 layers, dp2 tp2 pp2, 4 micro-batches.
MODEL = dict(name="llama3-8b", tiny=True, layers=2)
PARALLEL = dict(dp=2, tp=2, pp=2, microbatches=4)


def loom_binary():
    """The `loom` command of this build, or None when it is not built."""
    path = os.environ.get("LOOM_BINARY")
    if not path:
        path = str(Path(loom.__file__).resolve().parents[2] / "tools" / "loom")
    return path if os.access(path, os.X_OK) else None


def cli_error(args, tmp_path):
    """The message `loom plan ARGS` prints after 'error: ', or None without the command."""
    binary = loom_binary()
    if binary is None:
        return None
    proc = subprocess.run([binary, "plan", *args, "-o", str(tmp_path / "plan.json")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("loom plan: error: "), proc.stderr
    return line.split("error: ", 1)[1]


def module_env():
    """The environment of a child interpreter that imports this module."""
    env = dict(os.environ)
    folder = str(Path(loom.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="module")
def example():
    """The step and the (unscheduled) plan of the example configuration."""
    model = loom.ModelConfig(**MODEL)
    parallel = loom.ParallelConfig(**PARALLEL)
    step = loom.build_step(model, parallel)
    plan = loom.make_plan(step, parallel)
    return step, plan


def test_models_and_version():
    names = loom.models()
    assert names[:3] == ["mlp", "gpt2", "llama3-8b"]
    assert all(isinstance(n, str) for n in names)
    assert len(set(names)) == len(names)
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", loom.__version__)


def test_configs_defaults_attributes_and_repr():
    m = loom.ModelConfig("gpt2")
    assert (m.name, m.tiny, m.layers, m.batch, m.seq) == ("gpt2", False, 0, 0, 0)
    p = loom.ParallelConfig()
    assert (p.dp, p.tp, p.pp, p.vpp, p.ep, p.sp, p.zero, p.microbatches, p.recompute,
            p.factored) == (1, 1, 1, 1, 1, False, 0, 1, False, True)
    p.tp = 4
    p.sp = True
    assert (p.tp, p.sp) == (4, True)
    assert repr(loom.ModelConfig(**MODEL)) == (
        "ModelConfig(name='llama3-8b', tiny=True, layers=2, batch=0, seq=0, precision='fp32', "
        "max_grad_norm=1)")
    names = {"ModelConfig": loom.ModelConfig, "ParallelConfig": loom.ParallelConfig}
    for config in (loom.ModelConfig(**MODEL), loom.ModelConfig(**MODEL, precision="bf16"),
                   loom.ParallelConfig(**PARALLEL, zero=1)):
        assert eval(repr(config), names) == config  # pylint: disable=eval-used
    assert loom.ParallelConfig(dp=2) != loom.ParallelConfig(dp=4)


def test_step_and_plan_properties(example):
    step, plan = example
    assert step.name == "llama3-8b"
    assert step.num_ops > 0 and step.num_tensors > step.num_ops
    assert step.parameters > 0
    assert "micro-batches: 4" in step.summary()
    assert plan.devices == 8
    assert plan.mesh == "dp=2 x pp=2 x tp=2"
    assert plan.factored
    assert not plan.scheduled
    assert plan.num_collectives == sum(plan.collective_counts.values())
    assert set(plan.collective_counts) == {"all_reduce", "send_recv"}
    assert plan.num_tasks > 0


def test_plan_search_verify_run(example, tmp_path):
    step, unscheduled = example
    plan = unscheduled.copy()
    summary = plan.search(step)
    # The search orders this plan only, in place; a factored plan stays factored.
    assert plan.scheduled and plan.factored == unscheduled.factored
    assert not unscheduled.scheduled
    assert summary.period >= summary.period_lower_bound > 0
    assert summary.makespan >= summary.period
    assert summary.makespan >= summary.makespan_lower_bound > 0
    # Optimal only with its proof: the lower bound met, or an exhaustive branch and bound.
    assert summary.makespan_optimal == bool(summary.makespan_proof)
    if summary.makespan == summary.makespan_lower_bound:
        assert summary.makespan_optimal and "lower bound" in summary.makespan_proof
    assert summary.schedule == "search" or summary.schedule in {
        "gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v", "chimera", "dualpipe",
    } or summary.schedule.startswith("list/") or summary.schedule in {
        "serial", "local", "exact", "inflight"} or "/cooldown-" in summary.schedule
    assert summary.objective == "makespan"
    assert summary.makespan >= summary.span >= summary.span_lower_bound > 0
    assert summary.span_optimal == (summary.span == summary.span_lower_bound)
    assert 0 <= summary.bubble < 1 and 0 <= summary.span_bubble <= summary.bubble
    assert len(summary.peak_memory) == PARALLEL["pp"]
    # An SVG document: the XML declaration, then the <svg> element.
    assert re.sub(r"^<\?xml[^>]*\?>\s*", "", summary.svg).startswith("<svg")
    assert summary.svg.rstrip().endswith("</svg>")

    report = loom.verify(step, plan)
    assert report.verdict == "proved equivalent"
    assert report.verdict_name == "equivalent"
    assert report.exit_code == 0
    assert report.equivalent
    assert report.failures == []
    assert report.undecided == []
    assert 0 < report.laws_proved == len(report.laws)
    assert report.schedule_checked and len(report.peak_bytes) == 8
    data = json.loads(report.to_json(model="llama3-8b", plan_path="plan.json"))
    assert (data["verdict"], data["exit_code"], data["model"], data["plan"]) == (
        "equivalent", 0, "llama3-8b", "plan.json")

    # A saved and reloaded plan is the same plan.
    plan.save(str(tmp_path / "plan.json"))
    loaded = loom.load_plan(str(tmp_path / "plan.json"))
    assert (loaded.num_tasks, loaded.num_collectives, loaded.scheduled) == (
        plan.num_tasks, plan.num_collectives, True)

    run = loom.run(step, plan, steps=2, check=True)
    assert len(run.losses) == 2 and len(run.step_seconds) == 2
    assert all(loss > 0 for loss in run.losses)
    assert run.reference_losses == pytest.approx(run.losses, rel=1e-5)
    assert len(run.peak_bytes) == 8 and min(run.peak_bytes) > 0
    check = run.check
    assert check is not None
    assert check.loss <= 1e-5 and check.gradients <= 1e-5 and check.parameters <= 1e-5
    assert check.largest == max(check.loss, check.gradients, check.parameters)
    assert check.gradients_compared > 0 and check.parameters_compared > 0
    assert check.worst.startswith("step ")

    unchecked = loom.run(step, plan, steps=1)
    assert unchecked.check is None and unchecked.reference_losses is None
    assert unchecked.losses == pytest.approx(run.losses[:1], rel=1e-6)


def test_verify_finds_a_missing_reduction(tmp_path):
    # A tensor-parallel plan whose first forward all-reduce became a broadcast: the
    # partial sums of the row-parallel linear are never summed.
    parallel = loom.ParallelConfig(tp=2, factored=False)
    step = loom.build_step(loom.ModelConfig("gpt2", tiny=True, layers=1), parallel)
    loom.make_plan(step, parallel).save(str(tmp_path / "plan.json"))
    data = json.loads((tmp_path / "plan.json").read_text())
    broken = next(c for c in data["collectives"]
                  if c["kind"] == "all_reduce" and c["phase"] == "forward")
    broken["kind"] = "broadcast"
    broken["inputs"] = broken["inputs"][:1]
    (tmp_path / "mutated.json").write_text(json.dumps(data))
    report = loom.verify(step, loom.load_plan(str(tmp_path / "mutated.json")))
    assert report.verdict == "not equivalent"
    assert report.verdict_name == "not_equivalent"
    assert report.exit_code == 1
    assert not report.equivalent
    first = report.failures[0]
    assert (first.cls, first.cls_words) == ("missing_reduction", "missing reduction")
    assert first.item and first.tensor and first.message and first.counterexample
    assert first.devices and all(isinstance(d, int) for d in first.devices)
    data = json.loads(report.to_json())
    assert data["failures"][0]["class"] == "missing_reduction"


@pytest.mark.parametrize("cli_args, model, parallel, known", [
    (["--model", "nosuch"], dict(name="nosuch"), {}, "unknown model 'nosuch' (known: mlp, gpt2, "),
    (["--model", "llama3-8b", "--tiny", "--layers", "2", "--tp", "3"], MODEL, dict(tp=3),
     "tp 3 does not divide the 8 query / 4 key-value heads"),
    (["--model", "llama3-8b", "--tiny", "--layers", "2", "--pp", "3"], MODEL, dict(pp=3),
     "pp 3 x vpp 1 = 3 pipeline chunks is more than the 2 layers"),
])
def test_bad_input_raises_value_error_with_the_cli_message(cli_args, model, parallel, known,
                                                           tmp_path):
    config = loom.ParallelConfig(**parallel)
    with pytest.raises(ValueError) as raised:
        loom.make_plan(loom.build_step(loom.ModelConfig(**model), config), config)
    message = str(raised.value)
    assert known in message
    expected = cli_error(cli_args, tmp_path)
    if expected is not None:
        assert message == expected


def test_other_errors():
    assert issubclass(loom.LoomError, RuntimeError)
    assert not issubclass(loom.LoomError, ValueError)
    with pytest.raises(ValueError, match=r"^/nonexistent/plan\.json: "):
        loom.load_plan("/nonexistent/plan.json")
    with pytest.raises(ValueError, match="^microbatches must be at least 1$"):
        loom.build_step(loom.ModelConfig("gpt2"), loom.ParallelConfig(microbatches=0))
    step = loom.build_step(loom.ModelConfig("gpt2", tiny=True, layers=1))
    other = loom.build_step(loom.ModelConfig("mlp", tiny=True))
    with pytest.raises(ValueError):
        loom.verify(other, loom.make_plan(step, loom.ParallelConfig()))


def test_load_config(tmp_path):
    path = tmp_path / "megatron.yaml"
    path.write_text("""\
loom_model: llama3-8b
tiny: true
model:
  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 2
  data_parallel_size: 2
  sequence_parallel: true
  num_layers: 4
  seq_length: 32
  micro_batch_size: 1
  global_batch_size: 8
  use_distributed_optimizer: true
  recompute_granularity: full
  unknown_key: ignored
""")
    model, parallel = loom.load_config(str(path))
    assert model == loom.ModelConfig("llama3-8b", tiny=True, layers=4, batch=2, seq=32)
    assert parallel == loom.ParallelConfig(dp=2, tp=2, pp=2, sp=True, zero=1, microbatches=4,
                                           recompute=True)
    assert loom.parse_config(path.read_text(), "megatron.yaml") == (model, parallel)

    bad = tmp_path / "bad.yaml"
    bad.write_text("tensor_model_parallel_size: two\n")
    with pytest.raises(ValueError) as raised:
        loom.load_config(str(bad))
    assert str(raised.value) == (f"{bad}:1:1: key 'tensor_model_parallel_size': expected an "
                                 "integer, got 'two'")
    with pytest.raises(ValueError, match="missing.yaml: no such file"):
        loom.load_config(str(tmp_path / "missing.yaml"))


def test_precision_field(tmp_path):
    """ModelConfig.precision: 'fp32' (default) or 'bf16', from a configuration's
    `bf16: true`, and the bf16 step the library builds from it."""
    m = loom.ModelConfig("gpt2")
    assert m.precision == "fp32"
    m.precision = "bf16"
    assert m.precision == "bf16"
    assert m != loom.ModelConfig("gpt2")
    for bad in ("fp16", "BF16", ""):
        with pytest.raises(ValueError, match="expected bf16, fp32"):
            loom.ModelConfig("gpt2", precision=bad)
        with pytest.raises(ValueError, match="expected bf16, fp32"):
            m.precision = bad
    assert m.precision == "bf16"

    path = tmp_path / "bf16.yaml"
    path.write_text("loom_model: llama3-8b\ntiny: true\nnum_layers: 1\n"
                    "data_parallel_size: 2\nuse_distributed_optimizer: true\nbf16: true\n")
    model, parallel = loom.load_config(str(path))
    assert model == loom.ModelConfig("llama3-8b", tiny=True, layers=1, batch=2, precision="bf16")
    fp32, _ = loom.parse_config("loom_model: llama3-8b\n")
    assert fp32.precision == "fp32"
    with pytest.raises(ValueError, match="key 'fp16': fp16 training"):
        loom.parse_config("loom_model: gpt2\nfp16: true\n", "fp16.yaml")

    bf16 = loom.build_step(model, parallel)
    model.precision = "fp32"
    plain = loom.build_step(model, parallel)
    assert bf16.parameters == plain.parameters
    assert bf16.num_tensors > plain.num_tensors  # the masters and the main gradients
    report = loom.verify(bf16, loom.make_plan(bf16, parallel), threads=1)
    assert report.exit_code == 0, report


def fenced_blocks(text):
    """(language, body) of every ``` fenced block of a Markdown text, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)


def test_docs_example_runs_and_prints_what_the_doc_shows():
    blocks = fenced_blocks(DOC.read_text())
    index = next(i for i, (lang, _) in enumerate(blocks) if lang == "python")
    code = blocks[index][1]
    lang, shown = blocks[index + 1]
    assert lang == "text", "the example's output follows it in a ```text block"
    proc = subprocess.run([sys.executable, "-c", code], env=module_env(), capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown


def test_docs_one_liner():
    blocks = fenced_blocks(DOC.read_text())
    lines = next(body for _, body in blocks if 'python3 -c "import loom;' in body).splitlines()
    command = next(i for i, line in enumerate(lines) if 'python3 -c "import loom;' in line)
    argv = shlex.split(lines[command].lstrip("$ "))
    argv = argv[next(i for i, a in enumerate(argv) if a.endswith("python3")):]
    proc = subprocess.run([sys.executable, *argv[1:]], env=module_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == lines[command + 1] + "\n"


def test_plan_copy_is_independent(example):
    step, plan = example
    duplicate = copy.deepcopy(plan)
    duplicate.search(step, node_limit=100000)
    assert duplicate.scheduled and not plan.scheduled


def test_collective_meaning_is_ir_s():
    """What the front end reads a collective's claims from (loom.collective_meaning):
    the moves, reduce op and scale ir gives each kind."""
    gather = loom.collective_meaning("all_gather", "sum", 2, 1, -1, [4, 3])
    assert gather["reduce"] is None and gather["output_dims"] == [4, 6]
    own = [m for m in gather["moves"] if m["target"] == 1 and m["source"] == 1]
    assert own == [{"target": 1, "to": [(0, 4), (3, 6)], "source": 1, "from": [(0, 4), (0, 3)]}]
    scatter = loom.collective_meaning("reduce_scatter", "avg", 2, 0, -1, [4, 3])
    assert scatter["reduce"] == "sum" and scatter["scale"] == (1, 2)
    assert scatter["output_dims"] == [2, 3]
    into_1 = [m["from"] for m in scatter["moves"] if m["target"] == 1]
    assert into_1 == [[(2, 4), (0, 3)], [(2, 4), (0, 3)]]
    assert loom.collective_meaning("all_reduce", "max", 4, -1, -1, [5])["reduce"] == "max"
    with pytest.raises(ValueError, match="equal"):
        loom.collective_meaning("reduce_scatter", "sum", 2, 0, -1, [3, 3])
    with pytest.raises(ValueError, match="reduce op"):
        loom.collective_meaning("all_reduce", "mean", 2, -1, -1, [3])


def test_a_plan_carries_its_step(tmp_path):
    """make_plan(ModelConfig, ...) records the step (sizes as built, clipping,
    precision); step_of rebuilds it from the plan alone, also after a save and a
    load; a plan made from a bare step records none."""
    model = loom.ModelConfig("llama3-8b", tiny=True, layers=2, max_grad_norm=0.01)
    parallel = loom.ParallelConfig(dp=2, tp=2, microbatches=2)
    plan = loom.make_plan(model, parallel)
    assert plan.step["model"] == "llama3-8b"
    assert (plan.step["layers"], plan.step["batch"], plan.step["seq"]) == (2, 2, 8)
    assert plan.step["max_grad_norm"] == 0.01
    assert plan.step["microbatches"] == 2
    path = tmp_path / "plan.json"
    plan.save(str(path))
    loaded = loom.load_plan(str(path))
    assert loaded.step == plan.step
    report = loom.verify(loom.step_of(loaded), loaded, threads=1)
    assert report.exit_code == 0, report
    # The clipping threshold is part of the step: the default one is another step.
    other = loom.build_step(loom.ModelConfig("llama3-8b", tiny=True, layers=2), parallel)
    assert loom.verify(other, loaded, threads=1).exit_code == 1
    bare = loom.make_plan(other, parallel)
    assert bare.step is None
    with pytest.raises(ValueError, match="does not record the step it was made from"):
        loom.step_of(bare)


def test_megatron_and_deepspeed_configs():
    """The three forms users launch with, read strictly, each into the same pair."""
    model, parallel = loom.parse_megatron_args(
        "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --tensor-model-parallel-size 4 "
        "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 16 --bf16 "
        "--clip-grad 0.5 --lr 3e-4")
    assert (parallel.dp, parallel.tp, parallel.pp, parallel.microbatches) == (2, 4, 2, 8)
    assert (model.precision, model.max_grad_norm) == ("bf16", 0.5)
    model, parallel = loom.parse_deepspeed_config(
        '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, '
        '"gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}')
    assert (parallel.dp, parallel.zero, parallel.microbatches) == (8, 2, 2)
    assert model.max_grad_norm == 0  # DeepSpeed clips nothing unless told to
    with pytest.raises(ValueError, match=r"did you mean 'tensor_model_parallel_size'"):
        loom.parse_megatron_args("--tensor-model-paralel-size 2")
    # The architecture a command line describes is checked against the model named.
    model, _ = loom.parse_megatron_args("--hidden-size 8192 --num-query-groups 8",
                                        model="llama3-70b")
    assert model.name == "llama3-70b"
    with pytest.raises(ValueError, match=r"4096 disagrees with llama3-70b, whose hidden_size"):
        loom.parse_megatron_args("--hidden-size 4096", model="llama3-70b")
    with pytest.raises(ValueError, match=r"names no model to check it against"):
        loom.parse_megatron_args("--hidden-size 4096")


def test_plan_search_by_span(example):
    step, unscheduled = example
    plan = unscheduled.copy()
    by_span = plan.search(step, objective="span")
    assert by_span.objective == "span" and plan.scheduled
    assert by_span.makespan >= by_span.span >= by_span.span_lower_bound > 0
    assert by_span.span_optimal == (by_span.span == by_span.span_lower_bound)
    with pytest.raises(ValueError, match="unknown objective 'fastest' \\(makespan or span\\)"):
        unscheduled.copy().search(step, objective="fastest")


def test_context_parallel_plan_is_proved_and_runs_as_the_reference():
    """ParallelConfig(cp=2): every sequence in four load-balanced chunks over a cp axis
    between pp and tp (rank r holding chunks r and 3 - r); the plan is proved equivalent
    and its CPU run matches the single-device step. cp_balanced=False: two contiguous
    chunks, proved too."""
    model = loom.ModelConfig("llama3-8b", tiny=True, layers=2)
    parallel = loom.ParallelConfig(dp=2, tp=2, microbatches=2, cp=2)
    assert parallel.cp == 2 and "cp=2" in repr(parallel)
    plan = loom.make_plan(model, parallel)
    assert plan.devices == 8
    step = loom.step_of(plan)
    report = loom.verify(step, plan, threads=1)
    assert report.exit_code == 0, report
    run = loom.run(step, plan, steps=2, check=True)
    assert run.check.largest <= 1e-5, run.check.worst
    with pytest.raises(ValueError, match="2 x cp = 6 load-balanced chunks does not divide "
                       "the sequence length 8"):
        loom.make_plan(model, loom.ParallelConfig(cp=3))
    contiguous = loom.ParallelConfig(dp=2, tp=2, microbatches=2, cp=2, cp_balanced=False)
    assert "cp_balanced=False" in repr(contiguous) and contiguous != parallel
    assert loom.verify(step, loom.make_plan(model, contiguous), threads=1).exit_code == 0
    with pytest.raises(ValueError, match="cp 3 does not divide the sequence length 8"):
        loom.make_plan(model, loom.ParallelConfig(cp=3, cp_balanced=False))
