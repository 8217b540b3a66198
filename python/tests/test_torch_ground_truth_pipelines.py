"""Every verdict against torch itself (ground_truth.py): torch's own pipeline schedules
(GPipe, 1F1B, Interleaved1F1B, the zero-bubble schedules and DualPipeV) on pp2, alone and
with tensor and data parallelism, with their losses scaled by the schedule or by the
program, and the bugs of those."""

import pytest

import ground_truth


@pytest.mark.parametrize("path", ground_truth.cases(lambda name: name.startswith("pp_")))
def test_the_verdict_is_what_the_real_run_shows(path):
    ground_truth.check(path)
