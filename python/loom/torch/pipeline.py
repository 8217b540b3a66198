"""Pipeline parallelism (torch.distributed.pipelining), as the program each rank runs.

A launcher's `parallelize` that pipelines the model returns the schedule it built
(Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
ScheduleZBVZeroBubble, ScheduleDualPipeV, ...) over its PipelineStages. The schedule's
runtime sends and receives between ranks and drives autograd one micro-batch at a
time, which a trace cannot follow; what it computes is this, per rank, and that is
what the rank's trace runs (Body):

- the batch the rank reads is split into the schedule's micro-batches along dim 0
  (torch.tensor_split, as the schedule's step does): `input_ids.mb0`, ...; under
  pipelining the batch's `labels` are the loss function's target (the schedule's
  `target`), the other entries the first stage's keyword arguments;
- each of the rank's actions in the order its schedule runs them: a forward F(stage,
  m) runs the stage's module on the micro-batch (the first stage), on what the
  previous stage sent (received: an input of the trace), or on the previous stage's
  output where that stage is on the same rank (a V schedule's turn), then the
  schedule's loss function on the last stage; a full backward B(stage, m) takes the
  gradients of the stage's output (of the loss, or the gradient the next stage sent
  or handed over) with respect to the stage's parameters and input; a zero-bubble
  schedule's input backward I(stage, m) takes the input's alone (sent back at once)
  and its weight backward W(stage, m) the parameters' later; an overlapped F and B
  (DualPipeV) runs both, in order. Parameter gradients accumulate over the
  micro-batches in order (each sum marked, rank_collectives.py: partial sums of the step's
  gradient over the batch), and are divided by the micro-batches when the schedule
  scales them (scale_grads, its default);
- then the optimizer's step.

The values a stage sends are outputs of the trace; what a stage receives is the
sender's value (plan.py joins them with send_recv collectives). Each traced op is
tagged with the action that ran it; the plan's per-device order follows the
schedule's own, its sends and receives included (`program`), so Loom's schedule
checks (every send met by its receive, no deadlock) run on the schedule torch will
run.

The model's step is the whole batch at once, with the launcher's own loss: a
schedule whose micro-batch losses and gradient scaling do not add up to it (a mean
loss with scale_grads=False; torchtitan's loss over the whole batch's tokens with
scale_grads=True) is refuted, class scaled.
"""

import contextlib
import dataclasses

import torch
import torch.fx.traceback as fx_traceback
from torch.nn.utils.stateless import _reparametrize_module

from loom.torch.capture import Body, Placeholder, backward, compute_loss
from loom.torch.errors import CaptureError
from loom.torch.train_step import _set_phase

TARGET = "labels"   # the batch entry a pipelined job's loss function takes as target
COMPUTE = ("F", "B", "I", "W")
COMMS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")


@dataclasses.dataclass
class Pipeline:
    """What a rank's schedule runs."""
    schedule: object
    stages: list          # the rank's PipelineStages
    num_stages: int
    microbatches: int
    loss_fn: object
    scale_grads: bool
    actions: list         # the rank's compute actions, in order: (kind F/B/I/W, stage, mb)
    pp_ranks: list        # global rank of each rank of the pipeline group
    stage_rank: dict      # stage index -> its rank in the pipeline group
    # The rank's program with its sends and receives as the schedule's runtime runs
    # it ((kind, stage, mb), kind in COMPUTE or COMMS), or None where the runtime
    # batches each action's sends with the next one's receives (single-stage).
    program: list = None
    # The launcher's train_step calls the schedule's step (driven_step): the batch
    # reaches the trace whole, its micro-batches as inputs of their own beside it.
    driven: bool = False
    # Schedule steps a driven train_step runs before the optimizer's step (gradient
    # accumulation over steps): step k runs micro-batches k * microbatches, ...; the
    # rank's actions and program are those of every step in turn.
    steps: int = 1

    @property
    def total_microbatches(self):
        """The micro-batches of all the rank's schedule steps."""
        return self.steps * self.microbatches

    def repeat(self, steps):
        """The rank's actions and program over `steps` schedule steps, each step's
        micro-batches numbered after the step before's."""
        if steps == self.steps:
            return
        one = len(self.actions) // self.steps
        base = self.actions[:one]
        n = self.microbatches

        def over(actions):
            return [(kind, s, m + k * n) for k in range(steps) for kind, s, m in actions]
        self.actions = over(base)
        if self.program is not None:
            self.program = over(self.program[:len(self.program) // self.steps])
        self.steps = steps

    def step_actions(self, k):
        """The actions of schedule step k."""
        one = len(self.actions) // self.steps
        return self.actions[k * one:(k + 1) * one]

    def step_program(self, k):
        """The program of schedule step k (None where the pipeline has none)."""
        if self.program is None:
            return None
        one = len(self.program) // self.steps
        return self.program[k * one:(k + 1) * one]

    def rank_of(self, stage):
        """The global rank holding `stage`."""
        return self.pp_ranks[self.stage_rank[stage]]

    def local(self, stage):
        return any(st.stage_index == stage for st in self.stages)


def schedule_of(result):
    """The Pipeline of what `parallelize` returned, or None (not a schedule)."""
    from torch.distributed.pipelining.schedules import (PipelineScheduleMulti,
                                                        PipelineScheduleSingle,
                                                        _PipelineSchedule)
    if not isinstance(result, _PipelineSchedule):
        return None
    if isinstance(result, PipelineScheduleSingle):
        stages = [result._stage]
    elif isinstance(result, PipelineScheduleMulti):
        stages = list(result._stages)
    else:
        raise CaptureError(f"pipeline schedule {type(result).__name__} is not supported")
    if result._loss_fn is None:
        raise CaptureError("the pipeline schedule has no loss_fn: it runs no backward")
    import torch.distributed as dist
    group = stages[0].group
    pp_ranks = dist.get_process_group_ranks(group) if group is not None else \
        list(range(dist.get_world_size()))
    rank = pp_ranks.index(dist.get_rank())
    num_stages = stages[0].num_stages
    if isinstance(result, PipelineScheduleMulti):
        stage_rank = dict(result.stage_index_to_group_rank)
    else:
        stage_rank = {s: s for s in range(num_stages)}
    actions, program = _actions(result, stages, rank)
    return Pipeline(schedule=result, stages=stages, num_stages=num_stages,
                    microbatches=result._n_microbatches, loss_fn=result._loss_fn,
                    scale_grads=result.scale_grads, actions=actions, pp_ranks=pp_ranks,
                    stage_rank=stage_rank, program=program)


def _actions(schedule, stages, rank):
    """The rank's compute actions in the order the schedule's runtime runs them, and
    its program with the sends and receives (None for the single-stage schedules)."""
    from torch.distributed.pipelining.schedules import (PipelineScheduleMulti, Schedule1F1B,
                                                        ScheduleGPipe)
    n = schedule._n_microbatches
    name = type(schedule).__name__
    if isinstance(schedule, PipelineScheduleMulti):
        order = getattr(schedule, "pipeline_order_with_comms", None)
        if order:
            program = _program(name, order[rank])
            return [a for a in program if a[0] in COMPUTE], program
        # PipelineScheduleMulti's own step: each time step's action, then its sends
        # and the neighbours' receives in one batch (not modelled as a program).
        return _program(name, schedule.pipeline_order[rank]), None
    stage = stages[0].stage_index
    if isinstance(schedule, ScheduleGPipe):
        return [("F", stage, m) for m in range(n)] + [("B", stage, m) for m in range(n)], None
    if isinstance(schedule, Schedule1F1B):
        # Schedule1F1B._step_microbatches (its pipeline_order is not what it runs):
        # num_stages - stage warm-up forwards, then one backward and one forward at a
        # time, then the remaining backwards.
        warmup = min(n, stages[0].num_stages - stage)
        out = [("F", stage, m) for m in range(warmup)]
        forward, backward_ = warmup, 0
        while True:
            out.append(("B", stage, backward_))
            backward_ += 1
            if forward == n:
                break
            out.append(("F", stage, forward))
            forward += 1
        out += [("B", stage, m) for m in range(backward_, n)]
        return out, None
    raise CaptureError(f"pipeline schedule {name} is not supported (Schedule1F1B, "
                       "ScheduleGPipe and the multi-stage schedules are)")


def _program(schedule, actions):
    """(kind, stage, mb) of each action that computes or communicates; an overlapped
    forward and backward as its two actions in order; FSDP's unshard and reshard and
    the gradient reduction, which the trace runs as its DTensor program, left out."""
    from torch.distributed.pipelining.schedules import _ComputationType as T
    kinds = {T.FORWARD: "F", T.FULL_BACKWARD: "B", T.BACKWARD_INPUT: "I",
             T.BACKWARD_WEIGHT: "W", T.SEND_F: "SEND_F", T.RECV_F: "RECV_F",
             T.SEND_B: "SEND_B", T.RECV_B: "RECV_B"}
    out = []
    for a in actions:
        if a is None or a.computation_type in (T.REDUCE_GRAD, T.UNSHARD, T.RESHARD):
            continue
        if a.computation_type == T.OVERLAP_F_B:
            out += _program(schedule, a.sub_actions or [])
            continue
        kind = kinds.get(a.computation_type)
        if kind is None:
            raise CaptureError(f"{schedule}: action {a} ({a.computation_type.name}) is not "
                               "supported")
        out.append((kind, a.stage_index, a.microbatch_index))
    return out


class StageModules(torch.nn.Module):
    """A rank's stage modules as one module whose parameters, buffers and submodules
    keep the names they have in the model (each stage is the model with the other
    stages' parts taken out). `schedule`: the schedule `parallelize` returned, which a
    launcher's train_step drives (its step runs the rank's stages on the batch)."""

    def __init__(self, stages, schedule=None):
        super().__init__()
        object.__setattr__(self, "_stage_list", list(stages))
        object.__setattr__(self, "schedule", schedule)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        for m in self._stage_list:
            for name, p in m.named_parameters(remove_duplicate=remove_duplicate):
                if remove_duplicate and id(p) in seen:
                    continue
                seen.add(id(p))
                yield name, p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        for m in self._stage_list:
            for name, b in m.named_buffers(remove_duplicate=remove_duplicate):
                if name in seen:
                    continue
                seen.add(name)
                yield name, b

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        for m in self._stage_list:
            yield from m.named_modules()

    def modules(self):
        for _, m in self.named_modules():
            yield m


def microbatches(batch, count):
    """The batch (a dict of keyword arguments) as `count` micro-batches along dim 0,
    as one dict: `input_ids.mb0`, `input_ids.mb1`, ... (torch.tensor_split)."""
    if not isinstance(batch, dict):
        raise CaptureError("a pipelined job's inputs() must give a dict of keyword arguments")
    out = {}
    for m in range(count):
        for key, value in batch.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                if value.shape[0] % count:
                    raise CaptureError(f"batch input '{key}' has {value.shape[0]} rows, which "
                                       f"{count} micro-batches cannot share equally")
                value = torch.tensor_split(value, count, 0)[m]
            out[f"{key}.mb{m}"] = value
    return out


def microbatch_of(name):
    """(the batch entry, m) of a micro-batch input's name (`input_ids.mb2`), or None."""
    base, dot, last = name.rpartition(".")
    if dot and last.startswith("mb") and last[2:].isdigit():
        return base, int(last[2:])
    return None


def _microbatch(kwargs, m):
    suffix = f".mb{m}"
    return {k[:-len(suffix)]: v for k, v in kwargs.items() if k.endswith(suffix)}


def _tag(kind, stage, m):
    meta = fx_traceback.get_current_meta().setdefault("custom", {})
    if kind is None:
        meta.pop("action", None)
    else:
        meta["action"] = f"{kind}{stage}.{m}"


def microbatch_of_action(action):
    """The micro-batch of an action tag (`F1.3` -> 3), or None."""
    if not action:
        return None
    return int(action.rsplit(".", 1)[1])


def recv_name(kind, stage, m):
    """What stage `stage` receives for its action: the activation for F, the
    gradient of its output for B (and I)."""
    return f"recv.{'activation' if kind == 'F' else 'gradient'}.stage{stage}.mb{m}"


def send_name(kind, stage, m):
    """What stage `stage` sends after its action: its output after F (to stage + 1),
    the gradient of its input after B or I (to stage - 1)."""
    return f"send.{'activation' if kind == 'F' else 'gradient'}.stage{stage}.mb{m}"


def _after_step(k):
    """Marks what the trace runs next as run after schedule step k (None: unmarked)."""
    meta = fx_traceback.get_current_meta().setdefault("custom", {})
    if k is None:
        meta.pop("schedule_step", None)
    else:
        meta["schedule_step"] = k


def _accumulate(total, grads):
    """Each parameter's gradient summed over the micro-batches in order; each sum is
    marked as one (rank_collectives.py: a sum of partial sums of the step's gradient)."""
    meta = fx_traceback.get_current_meta().setdefault("custom", {})
    meta["accumulate"] = True
    try:
        for i, g in enumerate(grads):
            if g is not None:
                total[i] = g if total[i] is None else total[i] + g
    finally:
        meta.pop("accumulate", None)


def _scaled(total, count, scale):
    if not scale:
        return total
    from loom.torch.capture import _set_phase
    _set_phase("backward")
    return [g / count if g is not None else None for g in total]


def pipeline_body(pipe, names_of_stage, param_names, meta_of_input, microbatch_inputs=None):
    """The Body of a pipelined rank (the module docstring). `names_of_stage[i]`: the
    weight names stage i's module reads; `param_names`: the rank's parameters in the
    trace's order; `meta_of_input(stage)`: (shape, dtype) of what the stage
    receives; `microbatch_inputs` (a driven schedule's: pipe.driven): the batch's
    micro-batches, name (`input_ids.mb0`) -> tensor, inputs of the trace."""
    by_index = {st.stage_index: st for st in pipe.stages}
    extra, sends = [], []
    for name, value in (microbatch_inputs or {}).items():
        extra.append(Placeholder("input", name, "", value, None))
    for kind, s, m in pipe.actions:
        st = by_index[s]
        if kind == "F" and not st.is_first and not pipe.local(s - 1):
            shape, dtype = meta_of_input(s)
            extra.append(Placeholder("recv", recv_name("F", s, m), "",
                                     torch.empty(shape, dtype=dtype), None))
        if kind == "F" and not st.is_last and not pipe.local(s + 1):
            sends.append(send_name("F", s, m))
        if kind in ("B", "I") and not st.is_last and not pipe.local(s + 1):
            shape, dtype = meta_of_input(s + 1)
            extra.append(Placeholder("recv", recv_name("B", s, m), "",
                                     torch.empty(shape, dtype=dtype), None))
        if kind in ("B", "I") and not st.is_first and not pipe.local(s - 1):
            sends.append(send_name("B", s, m))

    def run_actions(weights, ps, microbatch, received, out, losses, step=0, initial=None):
        """The rank's actions of schedule step `step` on micro-batch m's inputs
        microbatch(m) (a dict, with the target as TARGET); what it sends goes to `out`,
        the last stage's losses to `losses`. Gives each parameter's gradient summed
        over the micro-batches, after `initial` (what .grad holds before) where given."""
        index = {id(p): i for i, p in enumerate(ps)}
        total = list(initial) if initial is not None else [None] * len(ps)
        state = {}       # (stage, mb) -> (input leaf, output, loss)
        handed = {}      # (stage, mb) -> the input gradient a stage hands the one before
        outputs = {}     # (stage, mb) -> what a stage's forward gave (for the next one here)
        for kind, s, m in pipe.step_actions(step):
            st = by_index[s]
            stage_weights = {k: weights[k] for k in names_of_stage[s]}
            stage_params = [p for p, n in zip(ps, param_names) if n in stage_weights]
            _tag(kind, s, m)
            if kind == "F":
                mb = microbatch(m)
                target = mb.pop(TARGET, None)
                if st.is_first:
                    x = None
                    output = torch.func.functional_call(st.submod, stage_weights, (), mb)
                else:
                    source = outputs.pop((s - 1, m)) if pipe.local(s - 1) else \
                        received[recv_name("F", s, m)]
                    x = source.detach().requires_grad_(True)
                    output = torch.func.functional_call(st.submod, stage_weights, (x,))
                if not isinstance(output, torch.Tensor):
                    raise CaptureError(f"stage {s} gives a {type(output).__name__}; a pipeline "
                                       "stage's output must be one tensor")
                loss = compute_loss(pipe.loss_fn, output, target) if st.is_last else None
                if loss is not None:
                    losses.append(loss)
                state[(s, m)] = (x, output, loss)
                if not st.is_last:
                    if pipe.local(s + 1):
                        outputs[(s, m)] = output
                    else:
                        out[send_name("F", s, m)] = output
                continue
            x, output, loss = state[(s, m)][:3]
            params = stage_params if kind in ("B", "W") else []
            wrt = params + ([x] if x is not None and kind in ("B", "I") else [])
            # The stage's weights are in its module through the backward too: a
            # checkpointed block's forward runs again there, on them.
            with _reparametrize_module(st.submod, stage_weights, tie_weights=True):
                if st.is_last:
                    grads = backward(loss, wrt, retain_graph=kind == "I")
                else:
                    grad_out = handed.pop((s + 1, m)) if pipe.local(s + 1) and kind != "W" \
                        else state[(s, m)][3] if kind == "W" else \
                        received[recv_name("B", s, m)]
                    grads = backward(output, wrt, [grad_out], retain_graph=kind == "I")
            if kind == "I" and not st.is_last:
                state[(s, m)] = (x, output, loss, grad_out)  # the weight backward's too
            if kind in ("B", "W"):
                state.pop((s, m))
                contribution = [None] * len(ps)
                for p, g in zip(params, grads):
                    contribution[index[id(p)]] = g
                _accumulate(total, contribution)
            if kind in ("B", "I") and x is not None:
                if grads[-1] is None:
                    raise CaptureError(f"stage {s}'s output does not depend on its input")
                if pipe.local(s - 1):
                    handed[(s, m)] = grads[-1]
                else:
                    out[send_name("B", s, m)] = grads[-1]
        _tag(None, 0, 0)
        return total

    def run(weights, ps, args, kwargs, extra_values):
        received = {ph.name: v for ph, v in zip(extra, extra_values)}
        out = {}
        total = run_actions(weights, ps, lambda m: _microbatch(kwargs, m), received, out, [])
        return None, _scaled(total, pipe.microbatches, pipe.scale_grads), \
            [out[n] for n in sends]

    @contextlib.contextmanager
    def drive(weights, ps, batch, extra_values):
        """The launcher's train_step drives the schedule: while it runs, the
        schedule's step runs the rank's actions (driven_step); yields the values
        the rank sends, by name, once the step has run."""
        received = {ph.name: v for ph, v in zip(extra, extra_values)}
        out = {}
        with driven_step(pipe, lambda mb, losses, k, initial: run_actions(
                weights, ps, mb, received, out, losses, k, initial), ps, batch, received):
            yield out

    return Body(run=run, extra=extra, sends=sends, drive=drive if pipe.driven else None)


class MoreSteps(CaptureError):
    """A driven train_step called the schedule's step `steps` times, on as many pieces
    of the batch, where the rank was traced for another number: traced again for
    these (distributed.trace_rank)."""

    def __init__(self, steps):
        super().__init__(f"the train_step runs {steps} schedule steps")
        self.steps = steps


def driven_step(pipe, run, ps, batch, received):
    """A context in which `pipe.schedule.step(**kwargs, target=..., losses=...)`, called
    by the launcher's train_step, runs the rank's actions as its runtime would
    (run(microbatch, losses, k, initial) -> each parameter's gradient summed over
    step k's micro-batches after `initial`) and leaves in each parameter's .grad what
    torch leaves there: what .grad held before (the steps before, accumulated), plus
    the step's sum, all divided by the micro-batches where the schedule scales its
    gradients. Each step is given the batch's own tensors, or (gradient accumulation
    over pipeline steps, as torchtitan's trainer does it) step k of K is given the
    k-th of K equal consecutive pieces of their rows; the rank's micro-batches are
    inputs of the trace (`received` by name), pipe.steps * pipe.microbatches of
    them. A train_step that runs another number of steps than pipe.steps raises
    MoreSteps (at once where its pieces tell the number, else once it ends), so that
    the rank is traced again for that number. The first step comes before any other
    backward."""
    schedule = pipe.schedule
    calls = []      # per call: whether the rank ran it (False: more steps than pipe.steps)
    by_identity = {id(v): k for k, v in batch.items() if isinstance(v, torch.Tensor)}

    def rows_of(name, value, k):
        """(batch entry, micro-batches of step k) of a tensor given to the step, or
        None where its rows are not step k's of pipe.steps."""
        key = by_identity.get(id(value))
        if key is not None:
            return key, 0, 1
        base = getattr(value, "_base", None)
        key = by_identity.get(id(base)) if base is not None else None
        if key is None or base.dim() == 0 or tuple(value.shape[1:]) != tuple(base.shape[1:]) \
                or value.stride() != base.stride() or not value.shape[0]:
            raise CaptureError(f"the train_step gives the schedule's step a '{name}' that is "
                               "neither one of the batch's tensors nor a piece of its rows; "
                               "the step is captured on the batch's own tensors or on "
                               "consecutive equal pieces of their rows")
        offset = value.storage_offset() - base.storage_offset()
        rows, total = value.shape[0], base.shape[0]
        if offset % base.stride(0) or total % rows or offset // base.stride(0) % rows:
            raise CaptureError(f"the train_step gives the schedule's step rows of '{name}' "
                               "that are not one of equal consecutive pieces of the batch")
        return key, offset // base.stride(0) // rows, total // rows

    def step(*args, target=None, losses=None, return_outputs=True, **kwargs):
        # return_outputs: whether torch's step returns the last stage's outputs; the
        # capture returns none either way (what the step computes is the same).
        if args:
            # Positional inputs are the first stage's forward's, in its order (as the
            # schedule passes them on: torchtitan's trainer gives the tokens so).
            kwargs = dict(_first_stage_keywords(pipe, args), **kwargs)
        k = len(calls)
        if k == 0 and any(p.grad is not None for p in ps):
            raise CaptureError("the train_step runs a backward before the schedule's step; "
                               "the capture takes the schedule's as the only ones")
        given = {k_: v for k_, v in kwargs.items() if isinstance(v, torch.Tensor)}
        if target is not None:
            given[TARGET] = target
        pieces = {name: rows_of(name, v, k) for name, v in given.items()}
        counts = {count for _, _, count in pieces.values()}
        if len(counts) > 1:
            raise CaptureError("the train_step gives the schedule's step pieces of the batch's "
                               "tensors of different sizes")
        if counts and counts != {pipe.steps}:
            raise MoreSteps(counts.pop())   # K pieces: traced again for K steps
        for _, index, count in pieces.values():
            if index != k:
                what = "the whole batch" if count == 1 else \
                    f"piece {index + 1} of {count} of the batch's rows"
                raise CaptureError(f"the train_step gives the schedule's step {what} at its "
                                   f"call {k + 1}; captured: the k-th of K equal consecutive "
                                   "pieces of the batch's rows at call k, or the whole batch "
                                   "once")
        if k >= pipe.steps:
            calls.append(False)   # more steps (a stage given no inputs): traced again
            return None
        calls.append(True)
        _after_step(None)
        n = pipe.microbatches
        inputs = {name: [received[f"{key}.mb{k * n + m}"] for m in range(n)]
                  for name, (key, _, _) in pieces.items()}
        others = {k_: v for k_, v in kwargs.items() if not isinstance(v, torch.Tensor)}

        def microbatch(m):
            return {**others, **{name: v[m - k * n] for name, v in inputs.items()}}
        got = []
        total = run(microbatch, got, k, [p.grad for p in ps])
        _after_step(k)   # what the train_step runs until the next step (pipeline_plan.py)
        for p, g in zip(ps, _scaled(total, pipe.microbatches, pipe.scale_grads)):
            if g is not None:
                p.grad = g
        _set_phase("backward", own_site=True)  # what follows the schedule's backward
        if losses is not None:
            losses.extend(got)
        return None

    original = schedule.__dict__.get("step")
    schedule.step = step

    @contextlib.contextmanager
    def installed():
        try:
            yield
            _after_step(None)
        finally:
            if original is None:
                del schedule.step
            else:
                schedule.step = original
        if calls and len(calls) != pipe.steps:
            raise MoreSteps(len(calls))
    return installed()


def _first_stage_keywords(pipe, args):
    """The schedule step's positional inputs `args` by the names of the first stage's
    forward parameters; CaptureError where this rank holds no first stage or its
    forward takes fewer."""
    import inspect
    first = [st for st in pipe.stages if st.is_first]
    if not first:
        raise CaptureError("the train_step gives the schedule's step positional inputs on "
                           "a rank that holds no first stage")
    names = [n for n, p in inspect.signature(first[0].submod.forward).parameters.items()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(args) > len(names):
        raise CaptureError(f"the train_step gives the schedule's step {len(args)} positional "
                           f"inputs; the first stage's forward takes {len(names)}")
    return dict(zip(names, args))
