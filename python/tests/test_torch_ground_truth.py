"""Every verdict against torch itself (ground_truth.py): the launchers that write data
parallelism, gradient synchronisation, loss normalisation, clipping and the optimizer
themselves or through FSDP2, and the bugs of those."""

import pytest

import ground_truth


@pytest.mark.parametrize("path", ground_truth.cases(lambda name: not name.startswith(("hf_", "pp_", "bug_", "ac_", "titan_"))))
def test_the_verdict_is_what_the_real_run_shows(path):
    ground_truth.check(path)
