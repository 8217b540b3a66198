"""What the ground-truth tests share (test_torch_ground_truth*.py): each launcher of
launchers/ is run for real (one process per rank under gloo on the CPU) and on one
device, and Loom's verdict must say what the two runs show: proved equivalent exactly
when the real run's gradients and updated parameters are the single device's (float64,
1e-10, or the launcher's TOLERANCE where its model computes in float32), refuted
otherwise, by the factor Loom states where it states one. Each launcher's EXPECT says
what its run shows, so that a launcher that stopped being the program it describes
fails too."""

import glob
import math
import os
import runpy
import sys
from fractions import Fraction

import pytest

import loom.torch
import real_run

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER_DIR = os.path.join(HERE, "launchers")
TOLERANCE = 1e-10
VERIFY_NAMES = ("model", "parallelize", "mesh", "inputs", "loss", "optimizer", "train_context",
                "train_step")


def launchers():
    out = []
    for path in sorted(glob.glob(os.path.join(LAUNCHER_DIR, "*.py"))):
        with open(path) as f:
            if "\nEXPECT = " in f.read():
                out.append(path)
    return out


def load(path):
    if LAUNCHER_DIR not in sys.path:
        sys.path.insert(0, LAUNCHER_DIR)
    return runpy.run_path(path, run_name="__loom_torch_launcher__")


def verify(names):
    return loom.torch.verify(**{k: names[k] for k in VERIFY_NAMES if k in names})


# Launchers whose verdict Loom does not get right yet, with why: each must fail here
# (strict), so that one that starts passing is moved out of this list.
NOT_YET = {}


def cases(select):
    """pytest parameters of the launchers whose file name `select` accepts."""
    out = []
    for path in launchers():
        if not select(os.path.basename(path)):
            continue
        name = os.path.basename(path)[:-3]
        marks = [pytest.mark.xfail(strict=True, reason=NOT_YET[name])] if name in NOT_YET else []
        out.append(pytest.param(path, id=name, marks=marks))
    return out


def check(path):
    """The launcher's real runs and Loom's verdict agree (the module docstring)."""
    names = load(path)
    expect = names["EXPECT"]
    parallel = real_run.run_parallel(names)
    single = real_run.run_single(names)
    comparison = real_run.compare(parallel, single)
    agree = comparison.agree(names.get("TOLERANCE", TOLERANCE))
    correct = expect["verdict"] == "proved equivalent"
    assert agree == correct, (f"the real run {'agrees' if agree else 'does not agree'} with "
                              f"one device: {comparison}")
    if "factor" in expect:
        assert math.isclose(real_run.gradient_factor(parallel, single), expect["factor"],
                            rel_tol=1e-6), comparison
    report = verify(names)
    assert report.verdict == expect["verdict"], report.summary()
    if "cls" in expect:
        assert any(f.cls == expect["cls"] for f in report.failures), report.summary()
    if "factor" in expect:
        factor = Fraction(expect["factor"]).limit_denominator(1000)
        text = str(factor.numerator) if factor.denominator == 1 else str(factor)
        stated = [f for f in report.failures if f.cls == "scaled"]
        assert any(f"scaled by {text})" in f.message for f in stated), report.summary()
