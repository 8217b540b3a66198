"""torchtitan's own job, from torchtitan's own command line.

`python -m loom.torch titan --model.name llama3 --model.flavor debugmodel
--parallelism.tensor_parallel_degree 2 ...` takes the arguments torchtitan's trainer
takes, parsed by torchtitan's own ConfigManager (a `--job.config_file` TOML and
overrides), and builds what its Trainer builds, with torchtitan's code: the model of
its train spec and flavour (`update_from_config`, `init_weights`), its
`parallelize_fn` (tensor, sequence and loss parallelism, FSDP2, activation
checkpointing) on ParallelDims of the job's degrees, or its `pipelining_fn` (the
stages split from the model, each parallelized, and the schedule), its loss,
its optimizer and learning-rate schedule from the config, and its step: the
Trainer's own `train_step` (micro-batches of the local batch, the sum loss divided by
the tokens counted over the batch mesh, clipping by torchtitan's clip_grad_norm_,
the optimizer and the schedule), run on the trainer's state without its data loader,
checkpointer or metrics. The single-device step is the same job on a world of one.

The job becomes a launcher (the names loom.torch.verify takes), so the same job is
proved by loom.torch.verify and run for real by the test suite's ground truth.
Supported: torchtitan 0.2's train-spec API (`torchtitan.train.Trainer`,
`protocols.train_spec.get_train_spec`); what the job uses that Loom cannot capture
is refused by name.
"""

import contextlib
import dataclasses
import logging
import weakref

import torch

from loom.torch.errors import CaptureError

# torchtitan's mesh dims that Loom's mesh carries, outermost first, as ParallelDims
# orders them; the names Loom's data-parallel and pipeline rules know.
_DIMS = (("pp", "pipeline_parallel_degree"),
         ("dp_replicate", "data_parallel_replicate_degree"),
         ("dp_shard", "data_parallel_shard_degree"),
         ("cp", "context_parallel_degree"),
         ("tp", "tensor_parallel_degree"))


def _titan():
    try:
        import torchtitan  # noqa: F401
        from torchtitan.config import ConfigManager
        from torchtitan.protocols import train_spec
        from torchtitan.train import Trainer
    except ImportError as e:
        raise CaptureError(f"torchtitan cannot be imported ({e}); the `titan` command "
                           "runs torchtitan's own code: install torchtitan 0.2 (pip "
                           "install torchtitan==0.2.2)") from e
    if not hasattr(train_spec, "get_train_spec"):
        raise CaptureError(f"torchtitan {getattr(torchtitan, '__version__', '?')}: "
                           "its trainer has no train-spec registry "
                           "(torchtitan.protocols.train_spec.get_train_spec); Loom runs "
                           "torchtitan 0.2's jobs")
    _on_cpu()
    return ConfigManager, train_spec, Trainer


def _on_cpu():
    """torchtitan 0.2 picks its device at import (`tools.utils.device_type`, CUDA
    where none is found) and its modules import that name: Loom captures and the
    ground truth runs the job's programs on the CPU, so each torchtitan module's
    `device_type` says "cpu" (what is computed does not depend on it)."""
    import sys
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] != "torchtitan" or module is None:
            continue
        if getattr(module, "device_type", None) == "cuda":
            module.device_type = "cpu"
        if getattr(module, "device_module", None) is torch.cuda:
            module.device_module = torch.cpu


def quiet_torchtitan():
    """torchtitan's logger (the root logger) at errors only: its job banner and its
    notes about the job (a tokenizer path it does not need here) are no verdict."""
    from loom.torch.capture import logger_at
    return logger_at("", logging.ERROR)


@contextlib.contextmanager
def _counts_read_as_tensors():
    """torchtitan's dist_sum (the tokens counted over the batch mesh, the loss's
    divisor) reads the all-reduced count to the host with .item(), which a trace
    cannot do; while Loom traces, the count stays the all-reduced tensor it reads
    as float32, the same number dividing the same float32 loss (exactly, below 2^24
    tokens). Outside a trace torchtitan's own."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode
    from torchtitan.distributed import utils as dist_utils
    original = dist_utils._dist_reduce

    def reduce(x, reduceOp, mesh=None, extra_pg=None):
        if get_proxy_mode() is None or mesh is None or extra_pg is not None:
            return original(x, reduceOp=reduceOp, mesh=mesh, extra_pg=extra_pg)
        import torch.distributed._functional_collectives as funcol
        from torch.distributed.tensor import DTensor
        if isinstance(x, DTensor):
            x = x.full_tensor()
        # .item()'s Python number divides the float32 loss as float32 does; a count
        # (an integer below 2^24) is summed exactly in float32 too.
        return funcol.all_reduce(x.to(torch.float32), reduceOp=reduceOp, group=mesh)
    dist_utils._dist_reduce = reduce
    try:
        yield
    finally:
        dist_utils._dist_reduce = original


class _NoMetrics:
    """The trainer's metrics processor where no step is logged."""
    ntokens_since_last_log = 0

    def __init__(self):
        self.data_loading_times = []

    def should_log(self, step):
        return False


class _NoCheckpoint:
    def maybe_wait_for_staging(self):
        pass


@dataclasses.dataclass
class TitanJob:
    """A torchtitan job as a launcher: `launcher()` gives the names loom.torch.verify
    takes; `mesh` the job's mesh ({"dp_shard": 2, "tp": 2}); `describe` one line."""
    job_config: object
    train_spec: object
    model_args: object
    degrees: dict
    world_size: int
    trainer_class: type
    seed: int = 0

    @property
    def mesh(self):
        mesh = {name: self.degrees[name] for name, _ in _DIMS if self.degrees[name] > 1}
        return mesh or {"dp_shard": 1}

    @property
    def describe(self):
        c = self.job_config
        degrees = " x ".join(f"{k}{v}" for k, v in self.mesh.items())
        return (f"torchtitan {c.model.name} {c.model.flavor}, {degrees} on "
                f"{self.world_size} ranks, batch {self.global_batch} x seq "
                f"{c.training.seq_len}")

    @property
    def batch_degree(self):
        return self.degrees["dp_replicate"] * self.degrees["dp_shard"]

    @property
    def global_batch(self):
        t = self.job_config.training
        if t.global_batch_size > 0:
            return t.global_batch_size
        return t.local_batch_size * self.batch_degree

    @property
    def tokens_arg(self):
        """The name the model's forward gives its token ids (its first argument)."""
        import inspect
        params = list(inspect.signature(self.train_spec.model_cls.forward).parameters)
        return params[1] if len(params) > 1 else "tokens"

    @property
    def accumulation(self):
        """The trainer's gradient accumulation steps."""
        return self.global_batch // (self.job_config.training.local_batch_size *
                                     self.batch_degree)

    def parallel_dims(self, world_size):
        from torchtitan.distributed import ParallelDims
        if world_size == 1:
            return ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1,
                                world_size=1)
        d = self.degrees
        return ParallelDims(dp_replicate=d["dp_replicate"], dp_shard=d["dp_shard"],
                            cp=d["cp"], tp=d["tp"], pp=d["pp"], ep=d["ep"], etp=d["etp"],
                            world_size=world_size)

    def launcher(self):
        """model, parallelize, mesh, inputs, optimizer, train_step of this job."""
        job = self
        dims_of = weakref.WeakKeyDictionary()  # module -> its rank's ParallelDims
        schedulers = weakref.WeakKeyDictionary()  # optimizer -> torchtitan's schedule
        # A pipelined rank's schedule -> (its ParallelDims, model parts, whether it
        # holds the first stage, the last): what pipeline_llm gave the trainer.
        pipelines = weakref.WeakKeyDictionary()

        def model():
            from torchtitan.tools import utils
            from torchtitan.config import TORCH_DTYPE_MAP
            torch.manual_seed(job.seed)
            with quiet_torchtitan(), \
                    utils.set_default_dtype(TORCH_DTYPE_MAP[job.job_config.training.dtype]):
                m = job.train_spec.model_cls(job.model_args)
                with torch.no_grad():
                    m.init_weights()
            m.train()
            return m

        def parallelize(module, device_mesh):
            from torchtitan.tools.utils import device_type
            dims = job.parallel_dims(job.world_size)
            if dims.cp_enabled:
                # torchtitan's CP (torch's context_parallel, whose dispatcher its
                # parallelize_fn turns on) on the CPU's attention kernel: torch's
                # ring over it (loom/torch/cpu_context_parallel.py).
                from loom.torch import cpu_context_parallel
                cpu_context_parallel.enable()
            with quiet_torchtitan():
                if not dims.pp_enabled:
                    module = job.train_spec.parallelize_fn(module, dims, job.job_config)
                    dims_of[module] = dims
                    return module
                # The trainer's pipeline_llm: the stages' modules split from the
                # model, each parallelized, and the schedule over them (its loss
                # the trainer's loss function).
                loss_fn = job.train_spec.build_loss_fn(job.job_config, parallel_dims=dims)
                schedule, parts, first, last = job.train_spec.pipelining_fn(
                    module, dims, job.job_config, torch.device(device_type), job.model_args,
                    job.train_spec.parallelize_fn, loss_fn)
            pipelines[schedule] = (dims, parts, first, last, loss_fn)
            return schedule

        def inputs():
            c = job.job_config
            g = torch.Generator().manual_seed(job.seed + 1)
            vocab = job.model_args.vocab_size
            shape = (job.global_batch, c.training.seq_len)
            # Keyed as the model's forward names its tokens (a pipeline's first
            # stage is called with them) and the pipeline's target.
            return {job.tokens_arg: torch.randint(0, vocab, shape, generator=g),
                    "labels": torch.randint(0, vocab, shape, generator=g)}

        def optimizer(params):
            o = job.job_config.optimizer
            if o.name not in ("AdamW", "Adam"):
                raise CaptureError(f"--optimizer.name {o.name}: Loom captures torchtitan's "
                                   "AdamW and Adam")
            if o.early_step_in_backward:
                raise CaptureError("--optimizer.early_step_in_backward: an optimizer "
                                   "step inside the backward is not captured")
            # build_optimizers' arguments; fused, foreach and for-loop are one update,
            # traced from its for-loop form.
            cls = getattr(torch.optim, o.name)
            return cls(params, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                       weight_decay=o.weight_decay, foreach=False)

        def train_step(module, opt, batch):
            from torchtitan.distributed import utils as dist_utils
            from torchtitan.tools.utils import device_type
            c = job.job_config
            schedule = getattr(module, "schedule", None)
            pipeline = pipelines.get(schedule) if schedule is not None else None
            if pipeline is not None:
                dims, parts, first, last, loss_fn = pipeline
                state = dict(model_parts=list(parts), pp_schedule=module.schedule,
                             pp_has_first_stage=first, pp_has_last_stage=last)
            else:
                dims = dims_of.get(module) or job.parallel_dims(1)
                loss_fn = job.train_spec.build_loss_fn(c, parallel_dims=dims)
                state = dict(model_parts=[module])
            if opt not in schedulers:
                with quiet_torchtitan():
                    schedulers[opt] = job.train_spec.build_lr_schedulers_fn(
                        [opt], c.lr_scheduler, c.training.steps)
            trainer = job.trainer_class.__new__(job.trainer_class)
            # The job's gradient accumulation steps; on one device each micro-batch
            # is the data-parallel ranks' micro-batches together.
            accumulation = job.accumulation
            trainer.__dict__.update(
                job_config=c, parallel_dims=dims, model_args=job.model_args,
                optimizers=opt, lr_schedulers=schedulers[opt], loss_fn=loss_fn,
                gradient_accumulation_steps=accumulation, device=torch.device(device_type),
                tokenizer=None, step=0, ntokens_seen=0, metrics_processor=_NoMetrics(),
                checkpointer=_NoCheckpoint(),
                train_context=dist_utils.get_train_context(
                    dims.tp_enabled and not c.parallelism.disable_loss_parallel),
                # The job's precision on one device too: torchtitan autocasts a
                # single device or DDP, not TP, PP or FSDP (whose policy casts).
                maybe_enable_amp=dist_utils.maybe_enable_amp(
                    job.parallel_dims(job.world_size), c.training.mixed_precision_param,
                    device_type), **state)
            ids, labels = batch[job.tokens_arg], batch["labels"]
            # The data loader's micro-batches: consecutive rows (the batch itself
            # when there is one: what a pipeline's schedule splits is its tensor).
            rows = ids.shape[0] // accumulation
            micro = [({"input": ids}, labels)] if accumulation == 1 else \
                [({"input": ids[k * rows:(k + 1) * rows]}, labels[k * rows:(k + 1) * rows])
                 for k in range(accumulation)]
            with quiet_torchtitan(), _counts_read_as_tensors():
                trainer.train_step(iter(micro))

        return {"model": model, "parallelize": parallelize, "mesh": self.mesh,
                "inputs": inputs, "optimizer": optimizer, "train_step": train_step}


def titan_job(argv, world_size=None, seed=0, capture=True):
    """The TitanJob of torchtitan's command line `argv` (its trainer's arguments).
    world_size: the ranks (torchrun's processes); by default the product of the
    degrees given, a data_parallel_shard_degree of -1 counting as 1. capture: refuse
    what Loom does not capture yet (False: a job to run for real, context
    parallelism included)."""
    ConfigManager, train_spec_module, Trainer = _titan()
    try:
        with quiet_torchtitan():
            job_config = ConfigManager().parse_args(list(argv))
    except SystemExit as e:
        raise CaptureError(f"torchtitan's command line does not parse (exit {e.code}): "
                           f"{' '.join(argv)}") from None
    name, flavor = job_config.model.name, job_config.model.flavor
    try:
        spec = train_spec_module.get_train_spec(name)
    except Exception as e:  # torchtitan's own message names the known models
        raise CaptureError(f"--model.name {name}: {e}") from None
    if flavor not in spec.model_args:
        raise CaptureError(f"--model.flavor {flavor}: {name} has "
                           f"{', '.join(sorted(spec.model_args))}")
    p = job_config.parallelism
    degrees = {"pp": p.pipeline_parallel_degree,
               "dp_replicate": p.data_parallel_replicate_degree,
               "dp_shard": p.data_parallel_shard_degree, "cp": p.context_parallel_degree,
               "tp": p.tensor_parallel_degree, "ep": p.expert_parallel_degree,
               "etp": p.expert_tensor_parallel_degree}
    others = degrees["dp_replicate"] * degrees["cp"] * degrees["tp"] * degrees["pp"]
    if world_size is None:
        world_size = others * max(degrees["dp_shard"], 1)
    if degrees["dp_shard"] < 0:
        if world_size % others:
            raise CaptureError(f"{world_size} ranks do not split into the degrees given "
                               f"(dp_replicate x cp x tp x pp = {others})")
        degrees["dp_shard"] = world_size // others
    if others * degrees["dp_shard"] != world_size:
        raise CaptureError(f"the degrees multiply to {others * degrees['dp_shard']} ranks, "
                           f"not {world_size}")
    for key, what in (("cp", "context parallelism"), ("ep", "expert parallelism")):
        if degrees[key] > 1 and (capture or key != "cp"):
            raise CaptureError(f"{what} ({key}={degrees[key]}) in a torchtitan job is not "
                               "captured yet")
    if degrees["dp_replicate"] > 1 and degrees["dp_shard"] == 1:
        raise CaptureError(f"--parallelism.data_parallel_replicate_degree "
                           f"{degrees['dp_replicate']} without sharding: torchtitan's DDP "
                           "(torch.distributed._composable.replicate, whose reducer runs "
                           "outside what a trace sees) is not captured; HSDP (with "
                           "data_parallel_shard_degree above 1) is")
    if degrees["pp"] > 1 and p.pipeline_parallel_schedule_csv:
        raise CaptureError("--parallelism.pipeline_parallel_schedule_csv: a schedule "
                           "read from a file is not captured")
    if job_config.compile.enable:
        raise CaptureError("--compile.enable: Loom traces the eager step; run it without "
                           "torch.compile (compile does not change what is computed)")
    if job_config.model.converters:
        raise CaptureError(f"--model.converters {','.join(job_config.model.converters)}: "
                           "model converters (float8, mx) are not captured")
    model_args = spec.model_args[flavor]
    with quiet_torchtitan():
        model_args.update_from_config(job_config)
    attn = getattr(model_args, "attn_type", "sdpa")
    if attn != "sdpa":
        raise CaptureError(f"{name} {flavor} attends with {attn}: Loom captures torchtitan "
                           "0.2's SDPA attention")
    t = job_config.training
    job = TitanJob(job_config=job_config, train_spec=spec, model_args=model_args,
                   degrees=degrees, world_size=world_size, trainer_class=Trainer, seed=seed)
    batch_degree = job.batch_degree
    if job.global_batch % (t.local_batch_size * batch_degree):
        raise CaptureError(f"global batch {job.global_batch} is not a multiple of the local "
                           f"batch {t.local_batch_size} x the data-parallel degree "
                           f"{batch_degree}")
    return job
