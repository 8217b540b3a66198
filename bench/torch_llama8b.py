"""loom.torch at real size: a Llama-3-8B-shaped Hugging Face model (32 layers, width
4096, 128k vocabulary, bf16) captured with fake tensors under tp x dp x pp and
verified, the whole process timed (run by hand, never part of the tests):

    PYTHONPATH=build/python .venv/bin/python bench/torch_llama8b.py [--layers 32]
        [--tp 8] [--dp 2] [--pp 2] [--microbatches 2] [--seq 2048]

Prints the split between capture (the spec, the ranks) and verification (the plan,
the proof), and the process's peak memory.
"""

import argparse
import resource
import time

import torch
import transformers
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import loom.torch
from loom.torch import hf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=2)
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args()
    start = time.perf_counter()
    config = transformers.LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=8,
        max_position_embeddings=8192, rope_theta=500000.0, attn_implementation="eager",
        use_cache=False)

    def model():
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)

    def parallelize(module, mesh):
        stage_module = module
        if args.pp > 1:
            pp = mesh["pp"]
            s, n = pp.get_local_rank(), pp.size()
            stage_module = hf.DecoderStage(module, s, n)
        layers = [layer for layer in module.model.layers if not isinstance(layer, hf.Skip)]
        for layer in layers:
            if args.tp > 1:
                parallelize_module(layer, mesh["tp"], {
                    "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                    "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                    "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                    "mlp.down_proj": RowwiseParallel()})
            if args.dp > 1:
                fully_shard(layer, mesh=mesh["dp"])
        if args.dp > 1:
            fully_shard(stage_module, mesh=mesh["dp"])
        if args.pp == 1:
            return stage_module
        stage = PipelineStage(stage_module, s, n, torch.device("cpu"), group=pp.get_group())
        return Schedule1F1B(stage, args.microbatches, loss_fn=hf.causal_lm_loss(module))

    def inputs():
        rows = args.dp * args.microbatches
        ids = torch.randint(0, config.vocab_size, (rows, args.seq))
        return {"input_ids": ids, "labels": ids}

    mesh = {name: size for name, size in (("pp", args.pp), ("dp", args.dp), ("tp", args.tp))
            if size > 1}
    report = loom.torch.verify(
        model=model, parallelize=parallelize, mesh=mesh, inputs=inputs,
        loss=lambda out: out.loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4, foreach=False),
        fake=True)
    total = time.perf_counter() - start
    print(report.summary().split("failures:")[0].rstrip())
    for item, reason in report.undecided[:5]:
        print(f"  undecided {item}: {reason}")
    for f in report.failures[:5]:
        print(f"  {f}")
    t = report.times
    print(f"capture:   {t['spec'] + t['ranks']:.1f} s (spec {t['spec']:.1f} s, ranks "
          f"{t['ranks']:.1f} s); verification {t['plan'] + t['verify']:.1f} s (plan "
          f"{t['plan']:.1f} s, proof {t['verify']:.1f} s)")
    print(f"whole:     {total:.1f} s, peak memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
