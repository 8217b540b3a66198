"""Loom block models of the Zero Bubble paper's settings (docs/formats.md, block model
JSON), shared by compare.py and zb_heuristic.py so that Loom's search and Zero Bubble's
own schedulers see the same stages.

Times in microseconds (the paper's milliseconds x 1000). Memory per Table 1, in units
of sequence x micro-batch: a forward adds 34h + 5as, the input backward frees all of
it but the 32h the weight backward frees. Communication: a forward waits for the
previous stage's forward plus T_comm, an input backward for the next stage's input
backward plus T_comm (between different devices), a weight backward for its own input
backward only.
"""

import csv
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ = 1024
HEADS_AND_HIDDEN = {"1.5B": (24, 2304), "6.2B": (32, 4096), "14.6B": (40, 5120),
                    "28.3B": (48, 6144)}
FIRST_STAGE_FACTOR = 1.3   # an embedding
LAST_STAGE_FACTOR = 1.6    # a 128k-vocabulary projection and the loss


def read_settings(name):
    with open(os.path.join(HERE, name)) as f:
        return list(csv.DictReader(f))


def micros(text):
    return round(float(text) * 1000)


def memory(model):
    """(forward adds, input backward frees, weight backward frees) per Table 1."""
    heads, hidden = HEADS_AND_HIDDEN[model]
    forward = 34 * hidden + 5 * heads * SEQ
    weight = 32 * hidden
    return forward, forward - weight, weight


def stage_times(row, stages, suffix="", skew=False):
    """Per stage (F, B, W) in microseconds, the first and last stages scaled when skewed."""
    base = [micros(row[f"t_{k}{suffix}"]) for k in "fbw"]
    times = [list(base) for _ in range(stages)]
    if skew:
        times[0] = [round(t * FIRST_STAGE_FACTOR) for t in base]
        times[-1] = [round(t * LAST_STAGE_FACTOR) for t in base]
    return times


def stage_memory(model, stages, skew=False):
    """Per stage (forward adds, input backward frees, weight backward frees), the first
    and last stages' activations scaled when skewed."""
    base = memory(model)
    mems = [base] * stages
    if skew:
        for s, factor in ((0, FIRST_STAGE_FACTOR), (stages - 1, LAST_STAGE_FACTOR)):
            forward, weight = round(base[0] * factor), round(base[2] * factor)
            mems[s] = (forward, forward - weight, weight)
    return mems


def block_model(name, devices, device_of, times, comm, mems, cap):
    """Stages s = 0..len(device_of)-1 on device_of[s], each F, I (input gradient) and W,
    named as Loom's own stage models name them (so its built-in schedules apply);
    mems[s] is stage s's (forward adds, input backward frees, weight backward frees)."""
    stages = len(device_of)

    def lag(a, b):
        return 0 if device_of[a] == device_of[b] else comm

    blocks = []
    for s in range(stages):
        after = [] if s == 0 else [{"block": f"F{s - 1}", "lag": lag(s - 1, s)}]
        blocks.append({"name": f"F{s}", "kind": "forward", "stage": s, "span": times[s][0],
                       "memory": mems[s][0], "devices": [device_of[s]], "after": after})
    for s in reversed(range(stages)):
        after = ([f"F{s}"] if s == stages - 1
                 else [{"block": f"I{s + 1}", "lag": lag(s + 1, s)}])
        blocks.append({"name": f"I{s}", "kind": "backward_input", "stage": s,
                       "span": times[s][1], "memory": -mems[s][1], "devices": [device_of[s]],
                       "after": after})
        blocks.append({"name": f"W{s}", "kind": "backward_weight", "stage": s,
                       "span": times[s][2], "memory": -mems[s][2], "devices": [device_of[s]],
                       "after": [f"I{s}"]})
    return {"format": "loom.blocks", "version": 1, "name": name, "devices": devices,
            "memory_cap": cap, "blocks": blocks}


def loop_setting(row, limit, skew=False, skew_memory=False):
    """The paper's Section 5 setting `row`: p stages on p devices, cap `limit` x p M_B on
    every device; `skew`: the first and last stages' times scaled, `skew_memory`: their
    activations too (the cap stays: the same devices)."""
    p = int(row["p"])
    base = memory(row["model"])
    suffix = ("-skew" if skew else "") + ("mem" if skew and skew_memory else "")
    return block_model(f"zb-{row['model']}-p{p}-m{row['m']}{suffix}", p, list(range(p)),
                       stage_times(row, p, skew=skew), micros(row["t_comm"]),
                       stage_memory(row["model"], p, skew=skew and skew_memory),
                       limit * p * base[0])


def v_setting(row):
    """The paper's Section 6 setting `row`: 2p chunks in a V over p devices, cap p M_B
    (2p chunk activations, ZB-V's default)."""
    p = int(row["p"])
    device_of = list(range(p)) + list(reversed(range(p)))
    return block_model(f"zbv-{row['model']}-p{p}-m{row['m']}", p, device_of,
                       stage_times(row, 2 * p, suffix="_chunk"), micros(row["t_comm"]),
                       stage_memory(row["model"], 2 * p), 2 * p * memory(row["model"])[0])
