"""Runs Zero Bubble's own schedulers (ZB-1p / ZB-2p heuristic, ZB-V) on the paper's
settings, beside Loom's search: the reference each Loom result is compared with.

Usage: python3 zb_heuristic.py ZB_REPO [--skew | --skew-memory] [--export DIR]

ZB_REPO is a git checkout or clone of sail-sg/zero-bubble-pipeline-parallelism; its
scheduler modules (graph.py, zb.py, zbv.py) are read from the commit checked out there
(`git show HEAD:...`) and run as they are. They import torch and pulp but their
heuristics use neither (pulp.value on numbers only), so both are stood in for by empty
modules here: nothing else is needed. Settings and memory follow the paper: times in
microseconds (Table 9 x 1000), activation memory per Table 1 in units of sequence x
micro-batch (F adds 34h + 5as, W frees 32h), ZB-1p limited to p M_B, ZB-2p to 2p M_B,
ZB-V to its default p M_B. --skew multiplies the first stage's F, B and W by 1.3 and
the last stage's by 1.6 (an embedding and a large vocabulary projection);
--skew-memory scales their activations the same way too, within the same caps.

--export DIR writes each schedule's device orders (in the order of its own start
times) as a Loom schedule file on the same block model as compare.py searches
(stage_models.py), for `loom simulate` to re-time: DIR/<setting>-zb1p.json,
-zb2p.json and zbv-<setting>-zbv.json.

Prints one line per setting: the longest stage's span from its first pass to its last
(the paper's cost; iterations overlap as post-validation allows) and the bubble rate
(span - m (F + B + W)) / span, the work taken from the busiest stage when skewed.
"""

import json
import os
import subprocess
import sys
import types

import stage_models

SCHEDULER = "megatron/core/pipeline_parallel/zerobubble/scheduler"


def load_scheduler(repo):
    """graph, zb and zbv as modules of their own package name, from `repo`'s HEAD."""
    for name in ("torch", "pulp"):
        stub = types.ModuleType(name)
        stub.Tensor = object
        stub.value = lambda x: x
        sys.modules[name] = stub
    parts = SCHEDULER.split("/")
    for i in range(1, len(parts) + 1):
        package = types.ModuleType(".".join(parts[:i]))
        package.__path__ = []
        sys.modules[package.__name__] = package
    loaded = {}
    for name in ("graph", "zb", "zbv"):
        source = subprocess.run(["git", "-C", repo, "show", f"HEAD:{SCHEDULER}/{name}.py"],
                                check=True, capture_output=True, text=True).stdout
        module = types.ModuleType(".".join(parts + [name]))
        sys.modules[module.__name__] = module
        exec(compile(source, f"{repo}/{SCHEDULER}/{name}.py", "exec"), module.__dict__)
        loaded[name] = module
    return loaded


def zb_schedule(zb, graph, row, limit, skew, skew_memory=False):
    """ZB-1p (limit 1) or ZB-2p (limit 2): (span, bubble, per-device orders)."""
    p, m = int(row["p"]), int(row["m"])
    f = stage_models.memory(row["model"])[0]
    mems = stage_models.stage_memory(row["model"], p, skew=skew_memory)
    times = stage_models.stage_times(row, p, skew=skew)
    config = graph.GraphConfig(
        mem_f=[float(x[0]) for x in mems], mem_b=[float(-x[1]) for x in mems],
        mem_w=[float(-x[2]) for x in mems], max_mem=[float(limit * p * f)] * p, cost_f=[float(t[0]) for t in times],
        cost_b=[float(t[1]) for t in times], cost_w=[float(t[2]) for t in times],
        cost_comm=float(stage_models.micros(row["t_comm"])), n_stages=p, n_micro=m)
    span, _, done = zb.initial_solution(zb.Graph.build_graph(p, m, config), print_result=False)
    work = max(m * sum(t) for t in times)
    # Node ids: type * p * m + stage * m + micro-batch, type 0 F, 1 B (input), 2 W.
    orders = []
    for stage in range(p):
        nodes = [(done[kind * p * m + stage * m + mb], kind, mb)
                 for kind in range(3) for mb in range(m)]
        orders.append([[f"{'FIW'[kind]}{stage}", mb] for _, kind, mb in sorted(nodes)])
    return span, (span - work) / span, orders


def zbv_schedule(zbv, row):
    """ZB-V: (span, bubble, per-device orders)."""
    p, m = int(row["p"]), int(row["m"])
    f, b, w = stage_models.memory(row["model"])
    t = stage_models.stage_times(row, 1, suffix="_chunk")[0]
    g = zbv.PipelineGraph(n_stage=p, n_micro=m, f_cost=t[0], b_cost=t[1], w_cost=t[2],
                          c_cost=stage_models.micros(row["t_comm"]), f_mem=f, b_mem=-b,
                          w_mem=-w)
    _, end_time, bubble = min((g.try_v_schedule(fill_f=ff, fill_b=fb) for ff in (True, False)
                               for fb in (True, False)), key=lambda r: r[2])
    work = 2 * m * sum(t)
    # Node ids: (cat * 2 + chunk) * p * m + device * m + micro-batch. The forward's
    # chunk 0 runs down the devices (Loom stage d), chunk 1 back up (stage 2p - 1 - d);
    # the backward's chunk 0 is the second chunk's (it starts at the loss on device 0).
    def stage(cat, chunk, device):
        up = (chunk == 1) if cat == 0 else (chunk == 0)
        return 2 * p - 1 - device if up else device
    orders = []
    for device in range(p):
        nodes = [(end_time[(cat * 2 + chunk) * p * m + device * m + mb], cat, chunk, mb)
                 for cat in range(3) for chunk in range(2) for mb in range(m)]
        orders.append([[f"{'FIW'[cat]}{stage(cat, chunk, device)}", mb]
                       for _, cat, chunk, mb in sorted(nodes)])
    return work + bubble, bubble / (work + bubble), orders


def export(directory, name, model, microbatches, orders):
    """A Loom schedule file (docs/formats.md): the block model and each device's order."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name + ".json"), "w") as f:
        json.dump({"format": "loom.schedule", "version": 1, "name": name,
                   "microbatches": microbatches, "blocks": model, "order": orders}, f)


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.exit(__doc__)
    skew_memory = "--skew-memory" in argv[2:]
    skew = "--skew" in argv[2:] or skew_memory
    out = argv[argv.index("--export") + 1] if "--export" in argv[2:] else None
    modules = load_scheduler(argv[1])
    print("model   p    m  zb_1p_span  bubble  zb_2p_span  bubble")
    for row in stage_models.read_settings("settings.csv"):
        line = f"{row['model']:6} {row['p']:>2} {row['m']:>4}"
        for limit in (1, 2):
            span, bubble, orders = zb_schedule(modules["zb"], modules["graph"], row, limit, skew,
                                               skew_memory)
            line += f" {span:11.0f} {bubble:7.4f}"
            if out:
                model = stage_models.loop_setting(row, limit, skew, skew_memory)
                export(out, f"{model['name']}-zb{limit}p", model, int(row["m"]), orders)
        print(line)
    if skew:
        return
    print("model   p    m   zb_v_span  bubble")
    for row in stage_models.read_settings("v_settings.csv"):
        span, bubble, orders = zbv_schedule(modules["zbv"], row)
        if out:
            model = stage_models.v_setting(row)
            export(out, f"{model['name']}-zbv", model, int(row["m"]), orders)
        print(f"{row['model']:6} {row['p']:>2} {row['m']:>4} {span:11.0f} {bubble:7.4f}")


if __name__ == "__main__":
    main(sys.argv)
