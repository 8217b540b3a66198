"""loom.torch traces one rank per pipeline rank and writes the others' plans from a
few lowered ones, unless a rank's program reads its rank itself: the plan must be the
one tracing every rank gives, and a program that differs on one rank must be caught."""

import json

import pytest
import torch
import torch.distributed as dist

import loom.torch

import torch_models
from test_torch_plan import executor_difference, fsdp, tensor_parallel


def _per_device(plan_json):
    """The plan as each device's tasks and the collectives, with the claims of what
    they read and write (value ids differ with the order values were made in)."""
    doc = json.loads(plan_json)
    values = {v["id"]: v for v in doc["values"]}

    def claims(ids):
        return tuple((values[i]["tensor"], json.dumps(values[i]["box"]), values[i]["part"],
                      values[i]["dtype"], values[i]["device"]) for i in ids)
    tasks = {}
    for t in doc["tasks"]:
        tasks.setdefault(t["device"], []).append(
            (t["op"], t["kind"], json.dumps(t["attrs"], sort_keys=True), t["phase"],
             claims(t["inputs"]), claims(t["outputs"])))
    collectives = sorted((c["kind"], c["reduce"], tuple(c["devices"]), claims(c["inputs"]),
                          claims(c["outputs"])) for c in doc["collectives"])
    outputs = sorted(claims(doc["outputs"]))
    return tasks, collectives, outputs


def test_ranks_written_from_others_are_the_ranks_lowered_alone():
    # dp4 x tp2 (FSDP over TP): one trace stands for the 8 ranks, 4 are lowered
    # (coordinate 0, a step along each dim, the far corner) and the other 4 written.
    def tp_fsdp(model, mesh):
        tensor_parallel(model, mesh)
        fsdp(model, mesh)

    def run(every_rank):
        return loom.torch.verify(model=torch_models.builder("llama"), parallelize=tp_fsdp,
                                 mesh={"dp": 4, "tp": 2},
                                 inputs=torch_models.batch(batch_size=4),
                                 loss=torch_models.hf_loss, optimizer=torch_models.adamw,
                                 every_rank=every_rank)
    shared = run(False)
    assert shared.capture == ("one rank traced per pipeline rank (1 of 8); 4 lowered, the "
                              "others' plans written from theirs"), shared.capture
    assert shared.verdict == "proved equivalent", shared.summary()
    alone = run(True)
    assert alone.capture == "every rank traced"
    assert _per_device(shared.plan_json) == _per_device(alone.plan_json)
    assert executor_difference(shared) < 1e-10


def _global_rank(mesh):
    return dist.get_rank()


def _local_rank_along_dp(mesh):
    return mesh.get_local_rank("dp")


def _sampler_index(mesh):
    from torch.utils.data.distributed import DistributedSampler
    return list(DistributedSampler(range(2), shuffle=False))[0]


def _not_in_a_new_group(mesh):
    return int(dist.new_group([0]) is dist.GroupMember.NON_GROUP_MEMBER)


def _mesh_attribute(mesh):
    return mesh._rank


@pytest.mark.parametrize("read", [_global_rank, _local_rank_along_dp, _sampler_index,
                                  _not_in_a_new_group, _mesh_attribute])
def test_a_program_that_reads_its_rank_has_every_rank_traced(read):
    # The launcher doubles the final norm's output on rank 1 only, deciding so from its
    # rank read one way or another: tracing rank 0 alone would prove it; every rank is
    # traced and rank 1's extra scaling is found.
    def fsdp_scaled_on_rank_1(model, mesh):
        if read(mesh) == 1:
            model.model.norm.register_forward_hook(lambda module, args, out: out * 2.0)
        fsdp(model, mesh)

    report = loom.torch.verify(model=torch_models.builder("llama"),
                               parallelize=fsdp_scaled_on_rank_1, mesh={"dp": 2},
                               inputs=torch_models.batch(batch_size=4),
                               loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    assert report.capture.startswith("every rank traced: rank 0's program reads its rank at "
                                     f"{__file__}:"), report.capture
    assert report.exit_code == 1, report.summary()
    # Rank 1's values are twice what they claim from its extra scaling on: every failure
    # is put at that line, the first on rank 1 alone.
    assert report.failures and report.failures[0].devices == [1], report.summary()
    assert all("out * 2.0" in f.code for f in report.failures), report.summary()


def test_uneven_shards_are_no_layout_one_trace_stands_for():
    # Sharded over 3 ranks, 32 rows are 11, 11 and 10: the last rank's program has other
    # shapes than the first's, so every rank must be traced; 33 rows are even.
    from types import SimpleNamespace

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from loom.torch.distributed import fake_process_group
    from loom.torch.symmetry import uneven_layout

    def layout(rows):
        spec = distribute_tensor(torch.zeros(rows, 4), mesh, [Shard(0)])._spec
        return SimpleNamespace(
            trace=SimpleNamespace(placeholders=[SimpleNamespace(dtensor=spec)]),
            recorder=SimpleNamespace(specs={}, redistributions=[], mask_windows={}))
    with fake_process_group(0, 3):
        mesh = init_device_mesh("cpu", (3,), mesh_dim_names=("dp",))
        assert uneven_layout(layout(32)) == ("a tensor of shape [32, 4] is sharded along "
                                             "dim 0 over 3 ranks, unevenly")
        assert uneven_layout(layout(33)) is None
