"""`python -m loom.torch verify LAUNCHER.py`: loom.torch.verify for CI (docs/torch.md).

The launcher file is Python that defines what loom.torch.verify takes, by name:
`model`, `parallelize`, `mesh`, `inputs`, `loss`, `optimizer`, and optionally
`train_context` and `fake`. The command prints the verdict, writes the report files
(--report: the JSON of `loom verify --report`, each failure with the user's module
and source line; --junit: JUnit XML) and exits as `loom verify` does: 0 proved
equivalent, 1 not equivalent, 2 undecided or an error (a launcher that does not
load, a program Loom cannot capture).
"""

import argparse
import json
import os
import runpy
import sys
import tempfile
from xml.sax.saxutils import escape, quoteattr

from loom.torch.errors import CaptureError

REQUIRED = ("model", "parallelize", "mesh", "inputs", "optimizer")

_CLASS_WORDS = {
    "missing_reduction": "missing reduction", "scaled": "scaled by a constant factor",
    "wrong_shard": "wrong shard", "wrong_group": "wrong group",
    "swapped_operands": "swapped operands", "missing_piece": "missing piece",
    "doubled_piece": "doubled piece", "computation_differs": "computation differs",
    "wrong_claim": "wrong claim", "deadlock": "deadlock", "schedule_order": "schedule order",
    "memory": "memory"}


class UsageError(Exception):
    pass


def load_launcher(path):
    """The names the launcher file defines (REQUIRED, train_context, fake)."""
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file")
    # As `python launcher.py` would: its directory first on the import path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        names = runpy.run_path(path, run_name="__loom_torch_launcher__")
    except Exception as e:  # the launcher's own error, with its place
        raise UsageError(f"{path}: loading it failed: {type(e).__name__}: {e}") from e
    missing = [n for n in REQUIRED if n not in names]
    if "loss" not in names and "train_step" not in names:
        missing.append("loss (or train_step)")
    if missing:
        raise UsageError(f"{path}: defines no {', '.join(missing)} (it must define "
                         f"{', '.join(REQUIRED)} and loss or train_step; train_context and "
                         "fake are optional)")
    return names


def parse_mesh(text):
    """"dp=2,tp=2" -> {"dp": 2, "tp": 2}."""
    mesh = {}
    for item in text.split(","):
        name, _, size = item.partition("=")
        if not name or not size.isdigit() or int(size) < 1:
            raise UsageError(f"--mesh {text!r}: expected name=size pairs such as dp=2,tp=2")
        mesh[name.strip()] = int(size)
    return mesh


def report_json(report, launcher, mesh):
    """The report as `loom verify --report` writes it, each failure with the user's
    module path, source line, code and ATen op, and the capture's own failures."""
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


def verify_command(argv):
    parser = argparse.ArgumentParser(
        prog="python -m loom.torch verify",
        description="Prove that the programs torch.distributed runs after the launcher's "
                    "parallelize compute its model's training step.")
    parser.add_argument("launcher", help="Python file defining model, parallelize, mesh, "
                                         "inputs, optimizer, loss or train_step (and "
                                         "train_context, fake)")
    parser.add_argument("--mesh", help="override the launcher's mesh: name=size,... "
                                       "(outermost first), e.g. dp=2,tp=2")
    parser.add_argument("--fake", action="store_true",
                        help="capture with fake tensors (real sizes, nothing allocated)")
    parser.add_argument("--every-rank", action="store_true",
                        help="trace every rank (by default one per pipeline rank stands "
                             "for the others where that is sound; docs/torch.md)")
    parser.add_argument("--report", help="write the JSON report here")
    parser.add_argument("--junit", help="write JUnit XML here")
    parser.add_argument("--timeout-ms", type=int, default=10000,
                        help="solver timeout per proof (default 10000)")
    parser.add_argument("--cache", default="", help="proof cache directory")
    args = parser.parse_args(argv)
    import loom.torch
    try:
        names = load_launcher(args.launcher)
        mesh = parse_mesh(args.mesh) if args.mesh else names["mesh"]
        report = loom.torch.verify(
            model=names["model"], parallelize=names["parallelize"], mesh=mesh,
            inputs=names["inputs"], loss=names.get("loss"), optimizer=names["optimizer"],
            train_step=names.get("train_step"), train_context=names.get("train_context"),
            fake=bool(args.fake or names.get("fake", False)),
            timeout_ms=args.timeout_ms, cache_dir=args.cache, every_rank=args.every_rank)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except CaptureError as e:
        # Never a pass: the verdict is undecided, with the reason and its place.
        print("verdict:   undecided")
        print(f"error: {e}", file=sys.stderr)
        doc = undecided_json(args.launcher, mesh, str(e))
        report = None
    if report is not None:
        print(report.summary())
        doc = report_json(report, args.launcher, mesh)
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
    if not argv or argv[0] != "verify":
        print("usage: python -m loom.torch verify LAUNCHER.py [--mesh dp=2,tp=2] [--fake] "
              "[--every-rank] [--report FILE] [--junit FILE]", file=sys.stderr)
        return 2
    return verify_command(argv[1:])
