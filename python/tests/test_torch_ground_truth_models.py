"""Every verdict against torch itself (ground_truth.py): Hugging Face model families at
their defaults under tensor parallelism, FSDP2 and both, as their own plans split them,
and the bugs of those."""

import pytest

import ground_truth


@pytest.mark.parametrize("path", ground_truth.cases(lambda name: name.startswith("hf_")))
def test_the_verdict_is_what_the_real_run_shows(path):
    ground_truth.check(path)
