"""`python -m loom.torch verify LAUNCHER.py`: loom.torch.verify for CI (docs/torch.md);
`python -m loom.torch titan ...`: a torchtitan job from its own command line
(titan_cli.py).

The launcher file is Python that defines what loom.torch.verify takes, by name:
`model`, `parallelize`, `mesh`, `inputs`, `loss`, `optimizer`, and optionally
`train_context` and `fake`. The command prints the verdict, writes the report files
(--report: the JSON of `loom verify --report`, each failure with the user's module
and source line; --junit: JUnit XML) and exits as `loom verify` does: 0 proved
equivalent, 1 not equivalent, 2 undecided or an error (a bad option, a launcher
whose own code fails, exits or runs past --timeout, a batch the mesh cannot split, a
program Loom cannot capture): then one error line says why and where, and the report
files say "undecided".
"""

import argparse
import json
import math
import os
import re
import runpy
import sys
import tempfile
import traceback
from xml.sax.saxutils import escape, quoteattr

from loom.torch.errors import CaptureError
from loom.torch.launcher import Guard, exception_text, one_line
from loom.torch.terminal_status import TerminalStatus

REQUIRED = ("model", "parallelize", "mesh", "inputs", "optimizer")

_CLASS_WORDS = {
    "missing_reduction": "missing reduction", "scaled": "scaled by a constant factor",
    "wrong_shard": "wrong shard", "wrong_group": "wrong group",
    "swapped_operands": "swapped operands", "missing_piece": "missing piece",
    "doubled_piece": "doubled piece", "computation_differs": "computation differs",
    "wrong_claim": "wrong claim", "deadlock": "deadlock", "schedule_order": "schedule order",
    "memory": "memory"}


class UsageError(Exception):
    """A command line the command cannot run: a bad option, a missing launcher."""


def load_launcher(path):
    """The names the launcher file defines (REQUIRED, train_context, fake).
    LauncherError where its own code fails or exits."""
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file")
    # As `python launcher.py` would: its directory first on the import path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    guard = Guard(files=[path], subject="the launcher")
    with guard:
        guard.stage = "loading it"
        names = runpy.run_path(path, run_name="__loom_torch_launcher__")
    missing = [n for n in REQUIRED if n not in names]
    if "loss" not in names and "train_step" not in names:
        missing.append("loss (or train_step)")
    if missing:
        raise UsageError(f"{path}: defines no {', '.join(missing)} (it must define "
                         f"{', '.join(REQUIRED)} and loss or train_step; train_context and "
                         "fake are optional)")
    if "fake" in names and not isinstance(names["fake"], bool):
        raise UsageError(f"{path}: fake = {names['fake']!r}: it must be True or False")
    return names


def parse_mesh(text):
    """"dp=2,tp=2" -> {"dp": 2, "tp": 2}; UsageError for an empty or repeated dim,
    a size that is not an integer >= 1."""
    mesh = {}
    for item in text.split(","):
        name, equals, size = (part.strip() for part in item.partition("="))
        if not equals or not re.fullmatch(r"[^\s,=]+", name) or \
                not re.fullmatch(r"[0-9]+", size) or int(size) < 1:
            raise UsageError(f"--mesh {text!r}: {item.strip()!r} is not name=size (a size "
                             ">= 1); expected pairs such as dp=2,tp=2")
        if name in mesh:
            raise UsageError(f"--mesh {text!r}: dim {name!r} given twice")
        mesh[name] = int(size)
    return mesh


def check_report_paths(args):
    """Refuses, before any work, report files that cannot be written or would
    overwrite each other or the launcher."""
    paths = [(flag, path) for flag, path in (("--report", args.report),
                                             ("--junit", args.junit)) if path is not None]
    for flag, path in paths:
        directory = os.path.dirname(os.path.abspath(path))
        if not path or os.path.isdir(path):
            raise UsageError(f"{flag} {path!r}: not a file's path")
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            raise UsageError(f"{flag} {path}: cannot write there ({directory} is not a "
                             "writable directory)")
        if os.path.realpath(path) == os.path.realpath(args.launcher):
            raise UsageError(f"{flag} {path}: that is the launcher")
    if len(paths) == 2 and os.path.realpath(args.report) == os.path.realpath(args.junit):
        raise UsageError(f"--report and --junit are the same file ({args.report}); give "
                         "each its own")


def _positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _positive_int(text):
    if not re.fullmatch(r"[0-9]+", text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return int(text)


def _jsonable(mesh):
    try:
        json.dumps(mesh)
        return mesh
    except (TypeError, ValueError):
        return repr(mesh)


def error_line(e):
    """One line for any failure of a run: a CaptureError's (a LauncherError's) own
    message; for another failure, loom.torch's, with what it was doing and where."""
    if isinstance(e, CaptureError):
        return one_line(e, limit=2400)
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = ""
    if tb is not None:
        from loom.torch.lower import short_path
        where = f" at {short_path(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    stage = getattr(e, "loom_stage", None)
    return (f"loom.torch failed{f' ({stage})' if stage else ''}{where}: "
            f"{exception_text(e)} (--traceback prints its traceback)")


def report_json(report, launcher, mesh):
    """The report as `loom verify --report` writes it, each failure with the user's
    module path, source line, code and ATen op, and the capture's own failures."""
    if report.loom_report is None:  # refuted while capturing: no proof was run
        doc = undecided_json(launcher, mesh, "")
        doc.update(model=report.spec.trace.model_class, undecided=[])
        doc["counts"]["undecided"] = 0
    else:
        doc = json.loads(report.loom_report.to_json(report.spec.trace.model_class,
                                                    "<captured plan>"))
    loom_failures = doc["failures"]
    failures = []
    for f in report.failures:
        if f.loom_index < 0:
            entry = {"class": f.cls, "class_words": _CLASS_WORDS.get(f.cls, f.cls),
                     "group": "capture", "tensor": f.tensor, "box": f.box, "part": f.part,
                     "devices": f.devices, "microbatch": None, "item": f.item,
                     "first_op": "", "message": f.message,
                     "counterexample": f.counterexample}
        else:
            entry = dict(loom_failures[f.loom_index], devices=f.devices)
        entry.update(module=f.module, source=f.source, code=f.code, aten=f.aten,
                     phase=f.phase, found_in=f.found_in)
        failures.append(entry)
    doc["failures"] = failures
    doc["counts"]["failures"] = len(failures)
    doc["verdict"] = {0: "equivalent", 1: "not_equivalent"}.get(report.exit_code, "unknown")
    doc["verdict_words"] = report.verdict
    doc["exit_code"] = report.exit_code
    doc["plan"] = f"captured from {launcher}"
    doc["torch"] = {"launcher": launcher, "mesh": mesh, "ranks": report.capture,
                    "seconds": {k: round(v, 3) for k, v in report.times.items()}}
    return doc


def undecided_json(launcher, mesh, reason):
    """The report of a capture that stopped: undecided, with the reason."""
    return {"format": "loom.verify.report", "version": 1, "verdict": "unknown",
            "verdict_words": "undecided", "exit_code": 2, "model": "",
            "plan": f"captured from {launcher}",
            "counts": {"items": 0, "values": 0, "stages": 0, "distinct_stages": 0,
                       "stages_reused": 0, "laws": 0, "laws_proved": 0, "cache_hits": 0,
                       "failures": 0, "undecided": 1},
            "seconds": 0.0, "failures": [], "undecided": [{"item": "capture", "reason": reason}],
            "laws": [], "schedule": {"checked": False, "peak_bytes": []},
            "torch": {"launcher": launcher, "mesh": mesh, "seconds": {}}}


def report_junit(doc):
    """JUnit XML of a report_json document, as `loom verify --junit` writes it
    (docs/formats.md): a test case per check group (capture, lineage, one per law,
    schedule) with its time and its undecided entries as errors, each followed by a
    test case per failure it found, one per class and tensor, with the user's module
    and line."""
    seconds = doc["torch"].get("seconds", {})
    groups = [["capture", sum(seconds.get(k, 0.0) for k in ("spec", "ranks", "plan"))],
              ["coverage and lineage", 0.0]]
    law_time = {}
    for law in doc["laws"]:
        law_time[f"law:{law['op']}"] = law_time.get(f"law:{law['op']}", 0.0) + \
            law.get("seconds", 0.0)
    groups += [[name, t] for name, t in law_time.items()]
    groups.append(["schedule safety", 0.0])
    groups[1][1] = max(0.0, seconds.get("verify", 0.0) - sum(law_time.values()))
    found = {name: {} for name, _ in groups}
    for f in doc["failures"]:
        group = {"capture": "capture", "lineage": "coverage and lineage",
                 "schedule": "schedule safety"}.get(f["group"])
        prefix = {"coverage and lineage": "lineage", "schedule safety": "schedule"}
        if group is None:  # a refuted law: "partition law of 'linear'"
            op = f["item"].split("'")[1] if f["item"].count("'") >= 2 else f["item"]
            group = f"law:{op}"
            found.setdefault(group, {})
            groups.append([group, 0.0])
        name = f"{prefix.get(group, group)}: {f['class']}" + \
            (f" '{f['tensor']}'" if f.get("tensor") else "")
        found[group].setdefault(name, []).append(f)
    errors = {}
    for u in doc["undecided"]:
        group = "capture" if u["item"] == "capture" else "coverage and lineage"
        errors.setdefault(group, []).append(u)
    cases = []  # (name, seconds, failures, errors)
    for name, t in groups:
        cases.append((name, t, [], errors.get(name, [])))
        cases += [(case, 0.0, fs, []) for case, fs in found.get(name, {}).items()]
    failed = sum(1 for c in cases if c[2])
    errored = sum(1 for c in cases if c[3] and not c[2])
    counts = (f'tests="{len(cases)}" failures="{failed}" errors="{errored}" skipped="0" '
              f'time="{doc["seconds"]:.3f}"')
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites name="loom.torch verify" {counts}>',
           f'  <testsuite name="loom.torch" {counts}>', "    <properties>"]
    for name, value in (("launcher", doc["torch"]["launcher"]), ("model", doc["model"]),
                        ("mesh", json.dumps(doc["torch"]["mesh"])),
                        ("verdict", doc["verdict"]), ("exit_code", str(doc["exit_code"]))):
        out.append(f'      <property name="{name}" value={quoteattr(value)}/>')
    out.append("    </properties>")
    for name, t, failures, undecided in cases:
        out.append(f'    <testcase classname="loom.torch" name={quoteattr(name)} '
                   f'time="{t:.3f}">')
        for u in undecided:
            out.append(f'      <error type="undecided" message={quoteattr(u["reason"])}>'
                       f'{escape(u["item"])}</error>')
        for f in failures:
            where = ", ".join(p for p in (f.get("module"), f.get("source")) if p)
            message = f"{f['class_words']} in '{f['tensor']}' ({where}): {f['message']}"
            body = "\n".join(line for line in (
                f"class: {f['class_words']} ({f['class']})", f"tensor: {f['tensor']} {f['box']}",
                f"module: {f.get('module', '')}", f"source: {f.get('source', '')}",
                f"code: {f.get('code', '')}", f"aten: {f.get('aten', '')}",
                f"devices: {f['devices']}", f"item: {f['item']}",
                f"counterexample: {f['counterexample']}") if not line.endswith(": "))
            out.append(f'      <failure type={quoteattr(f["class"])} message={quoteattr(message)}>'
                       f'{escape(body)}</failure>')
        out.append("    </testcase>")
    out += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(out)


def _write(path, text):
    """Atomically: a temporary file beside it, then a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".loom-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def add_run_options(parser, timeout_help):
    """The options every capture command takes: --every-rank, --report, --junit,
    --timeout (what it bounds: `timeout_help`), --timeout-ms, --cache, --traceback."""
    parser.add_argument("--every-rank", action="store_true",
                        help="trace every rank (by default one per pipeline rank stands "
                             "for the others where that is sound; docs/torch.md)")
    parser.add_argument("--report", help="write the JSON report here")
    parser.add_argument("--junit", help="write JUnit XML here")
    parser.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                        help=timeout_help)
    parser.add_argument("--timeout-ms", type=_positive_int, default=10000,
                        help="solver timeout per proof (default 10000)")
    parser.add_argument("--cache", default="", help="proof cache directory")
    parser.add_argument("--traceback", action="store_true",
                        help="on an error, print its Python traceback too")


def verify_command(argv):
    parser = argparse.ArgumentParser(
        prog="python -m loom.torch verify",
        description="Prove that the programs torch.distributed runs after the launcher's "
                    "parallelize compute its model's training step. Exit 0 proved "
                    "equivalent, 1 not equivalent, 2 undecided or an error.")
    parser.add_argument("launcher", help="Python file defining model, parallelize, mesh, "
                                         "inputs, optimizer, loss or train_step (and "
                                         "train_context, fake)")
    parser.add_argument("--mesh", help="override the launcher's mesh: name=size,... "
                                       "(outermost first), e.g. dp=2,tp=2")
    parser.add_argument("--fake", action="store_true",
                        help="capture with fake tensors (real sizes, nothing allocated)")
    add_run_options(parser, timeout_help="stop loading the launcher and capturing its "
                                         "program after SECONDS (default: no limit)")
    args = parser.parse_args(argv)
    status = TerminalStatus("loom.torch")  # the stages, on a terminal
    try:
        check_report_paths(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    mesh, doc = None, None

    def undecided(e):
        """Says why (one line) and gives the undecided report."""
        if args.traceback:
            traceback.print_exception(e)
        if not isinstance(e, UsageError):
            print("verdict:   undecided")
        line = str(e) if isinstance(e, UsageError) else error_line(e)
        print(f"error: {line}", file=sys.stderr)
        return undecided_json(args.launcher, _jsonable(mesh), line)

    def stuck(e):
        # The launcher's code swallows the timeout and runs on: end the process here.
        code = finish(args, undecided(e))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    try:
        mesh = parse_mesh(args.mesh) if args.mesh else None
        import loom.torch
        from loom.torch.api import check_cache_dir, check_mesh
        try:
            check_cache_dir(args.cache)
        except CaptureError as e:
            raise UsageError(f"--cache: {e}") from e
        # One timeout for loading the launcher and capturing its program.
        with Guard(files=[args.launcher], timeout=args.timeout, subject="the launcher",
                   stuck=stuck) as guard:
            guard.progress = status
            status(f"loading {args.launcher}")
            names = load_launcher(args.launcher)
            if mesh is None:
                mesh = names["mesh"]
                try:
                    check_mesh(mesh)
                except CaptureError as e:
                    raise UsageError(f"{args.launcher}: mesh = {mesh!r}: {e}") from e
            report = loom.torch.verify(
                model=names["model"], parallelize=names["parallelize"], mesh=mesh,
                inputs=names["inputs"], loss=names.get("loss"), optimizer=names["optimizer"],
                train_step=names.get("train_step"), train_context=names.get("train_context"),
                fake=True if args.fake else names.get("fake", False),
                timeout_ms=args.timeout_ms, cache_dir=args.cache, every_rank=args.every_rank,
                progress=status)
        status.done()
        print(report.summary())
        doc = report_json(report, args.launcher, mesh)
    except BaseException as e:  # never a pass: undecided, with the reason and its place
        status.done()
        doc = undecided(e)
    return finish(args, doc)


def finish(args, doc):
    """Writes the report files of `doc`; the exit code."""
    try:
        if args.report:
            _write(args.report, json.dumps(doc, indent=2) + "\n")
            print(f"wrote {args.report}")
        if args.junit:
            _write(args.junit, report_junit(doc))
            print(f"wrote {args.junit}")
    except OSError as e:
        print(f"error: writing the report: {e}", file=sys.stderr)
        return 2
    return doc["exit_code"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "titan":
        from loom.torch.titan_cli import titan_command
        return titan_command(argv[1:])
    if not argv or argv[0] != "verify":
        print("usage: python -m loom.torch verify LAUNCHER.py [--mesh dp=2,tp=2] [--fake] "
              "[--every-rank] [--report FILE] [--junit FILE] [--timeout SECONDS] "
              "[--cache DIR] [--traceback]\n"
              "       python -m loom.torch titan [--nproc N] [--report FILE] [--junit FILE] "
              "[--timeout SECONDS] [--cache DIR] [--traceback] TORCHTITAN_ARGS... "
              "(--model.name llama3 --parallelism.tensor_parallel_degree 2 ...)",
              file=sys.stderr)
        return 2
    return verify_command(argv[1:])
