"""The plan of a pipelined job: what stages send each other, and each device's
program in the order its schedule runs it (pipeline.py says what the ranks compute).

What a stage sends is joined to what the next one receives by a send_recv
collective. A device's program is what comes before the schedule's first action
(FSDP's gathers), each action's tasks and collectives in the order the rank's trace
made them, then the update. Where the schedule's runtime runs a program with its
sends and receives (the multi-stage schedules: a receive posted ahead of the forward
that waits for it, a send posted after the forward that makes it), the send_recv is
where both sides post it; where it batches an action's sends with the next action's
receives (Schedule1F1B, ScheduleGPipe), the batch is one group of send_recvs, in one
order on every device. Loom's schedule checks then run on the schedule torch will
run: every send met by its receive, no deadlock, memory per device.
"""

import collections

from loom.torch.errors import CaptureError
from loom.torch.pipeline import COMPUTE, recv_name, send_name


def sender_of(L, name):
    """(device, send name) of what rank L receives as `name` (pipeline.recv_name)."""
    pipe = L.rank.pipeline
    _, what, stage, mb = name.split(".")
    s = int(stage[len("stage"):])
    m = int(mb[len("mb"):])
    source = s - 1 if what == "activation" else s + 1
    kind = "F" if what == "activation" else "B"
    return pipe.rank_of(source), send_name(kind, source, m)


def assemble_sends(doc):
    """A send_recv collective per value a pipeline stage sends: (receiving device,
    receive name) -> its id."""
    ids = {}
    for e in doc.p2p:
        item = {"id": len(doc.collectives), "kind": "send_recv", "reduce": "sum",
                "devices": [e["source"].device, e["destination"].device],
                "inputs": [e["source"].id], "outputs": [e["destination"].id],
                "dim": -1, "dim2": -1, "phase": "forward" if ".activation." in e["name"]
                else "backward", "layer": -1}
        ids[(e["destination"].device, e["name"])] = item["id"]
        doc.collectives.append(item)
    return ids


def pipeline_order(doc, lowerings, p2p):
    """Each device's program in the order its pipeline schedule runs it (the module
    docstring)."""
    made = collections.defaultdict(list)  # device -> (seq, action, step)
    for task in doc.tasks:
        action = (doc.origin_of_task[task["id"]] or {}).get("action")
        made[task["device"]].append((task["seq"], action,
                                     {"collective": False, "id": task["id"]}))
    for c in doc.collectives:
        if c["kind"] == "send_recv":
            continue
        action = (doc.origin_of_collective.get(c["id"]) or {}).get("action")
        for d in c["devices"]:
            made[d].append((doc.seq_of_collective[(c["id"], d)], action,
                            {"collective": True, "id": c["id"]}))
    steps = collections.defaultdict(lambda: collections.defaultdict(list))
    for d, items in made.items():
        for _, action, step in sorted(items, key=lambda item: item[0]):
            steps[d][action].append(step)
    order = []
    for L in lowerings:
        d = L.device
        pipe = L.rank.pipeline
        if pipe is None:
            program = list(steps[d].pop(None, []))
            for rest in steps[d].values():
                program += rest
            order.append(program)
            continue
        update = steps[d].pop(None, [])
        before = [st for st in update if _before_actions(doc, st)]
        after = [st for st in update if not _before_actions(doc, st)]
        # A driven train_step's code between its schedule steps (pipeline.driven_step).
        between = collections.defaultdict(list)
        for st in list(after):
            k = _origin(doc, st).get("schedule_step")
            if k is not None and k < pipe.steps - 1:
                between[k].append(st)
                after.remove(st)
        program = before
        for k in range(pipe.steps):
            if pipe.program is not None:
                program += _posted(doc, d, pipe.step_program(k), steps[d], p2p)
            else:
                program += _batched(doc, d, pipe, pipe.step_actions(k), steps[d], p2p)
            program += between[k]
        for rest in steps[d].values():  # actions the schedule does not list: none expected
            program += rest
        order.append(program + after)
    return order


def _collective(cid):
    return {"collective": True, "id": cid}


def _posted(doc, d, actions, steps, p2p):
    """A multi-stage schedule's program (`actions`, a step's): its actions and its
    sends and receives where its runtime posts them."""
    program = []
    for kind, s, m in actions:
        if kind in COMPUTE:
            program += steps.pop(f"{kind}{s}.{m}", [])
        elif kind == "RECV_F":
            program.append(_collective(p2p[(d, recv_name("F", s, m))]))
        elif kind == "RECV_B":
            program.append(_collective(p2p[(d, recv_name("B", s, m))]))
        elif kind == "SEND_F":
            program.append(_collective(_sent(doc, d, send_name("F", s, m), p2p)))
        elif kind == "SEND_B":
            program.append(_collective(_sent(doc, d, send_name("B", s, m), p2p)))
    return program


def _batched(doc, d, pipe, actions, steps, p2p):
    """A single-stage schedule's program (`actions`, a step's): a send and the
    receives of the next action form one batch, as its runtime posts them."""
    program, pending = [], []
    stage_of = {st.stage_index: st for st in pipe.stages}
    for kind, s, m in actions:
        st = stage_of[s]
        receives = []
        if kind == "F" and not st.is_first:
            receives.append(p2p[(d, recv_name("F", s, m))])
        if kind in ("B", "I") and not st.is_last:
            receives.append(p2p[(d, recv_name("B", s, m))])
        program += [_collective(i) for i in sorted(set(pending + receives))]
        program += steps.pop(f"{kind}{s}.{m}", [])
        pending = []
        if kind == "F" and not st.is_last:
            pending.append(_sent(doc, d, send_name("F", s, m), p2p))
        if kind in ("B", "I") and not st.is_first:
            pending.append(_sent(doc, d, send_name("B", s, m), p2p))
    return program + [_collective(i) for i in sorted(pending)]


def _origin(doc, step):
    if step["collective"]:
        return doc.origin_of_collective.get(step["id"]) or {}
    return doc.origin_of_task[step["id"]] or {}


def _before_actions(doc, step):
    """Untagged steps before the schedule's first action: the forward phase's (the
    parameters FSDP gathers before any stage runs)."""
    item = doc.collectives[step["id"]] if step["collective"] else doc.tasks[step["id"]]
    return item.get("phase") == "forward"


def _sent(doc, device, name, p2p):
    """The send_recv collective of what `device` sends as `name`."""
    for (dst, recv), cid in p2p.items():
        c = doc.collectives[cid]
        if c["devices"][0] == device and _matches(recv, name):
            return cid
    raise CaptureError(f"rank {device} sends {name} to no rank")


def _matches(recv, send):
    """Whether receive `recv` gets what `send` sends (pipeline names)."""
    _, what, stage, mb = recv.split(".")
    _, what2, stage2, mb2 = send.split(".")
    s, s2 = int(stage[5:]), int(stage2[5:])
    return what == what2 and mb == mb2 and s == (s2 + 1 if what == "activation" else s2 - 1)
