"""Runs Zero Bubble's own schedulers (ZB-1p / ZB-2p heuristic, ZB-V) on the paper's
settings, beside Loom's search: the reference each Loom result is compared with.

Usage: python3 zb_heuristic.py ZB_REPO [--skew]

ZB_REPO is a git checkout or clone of sail-sg/zero-bubble-pipeline-parallelism; its
scheduler modules (graph.py, zb.py, zbv.py) are read from the commit checked out there
(`git show HEAD:...`) and run as they are. They import torch and pulp but their
heuristics use neither (pulp.value on numbers only), so both are stood in for by empty
modules here: nothing else is needed. Settings and memory follow the paper: times in
microseconds (Table 9 x 1000), activation memory per Table 1 in units of sequence x
micro-batch (F adds 34h + 5as, W frees 32h), ZB-1p limited to p M_B, ZB-2p to 2p M_B,
ZB-V to its default p M_B. --skew multiplies the first stage's F, B and W by 1.3 and
the last stage's by 1.6 (an embedding and a large vocabulary projection).

Prints one line per setting: the longest stage's span from its first pass to its last
(the paper's cost; iterations overlap as post-validation allows) and the bubble rate
(span - m (F + B + W)) / span, the work taken from the busiest stage when skewed.
"""

import csv
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULER = "megatron/core/pipeline_parallel/zerobubble/scheduler"
SEQ = 1024
HEADS_AND_HIDDEN = {"1.5B": (24, 2304), "6.2B": (32, 4096), "14.6B": (40, 5120), "28.3B": (48, 6144)}


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


def memory(model):
    heads, hidden = HEADS_AND_HIDDEN[model]
    f = 34 * hidden + 5 * heads * SEQ
    w = -32 * hidden
    return f, -f - w, w


def stage_costs(p, t, skew):
    costs = [float(t)] * p
    if skew:
        costs[0] *= 1.3
        costs[-1] *= 1.6
    return costs


def zb_span(zb, graph, row, limit, skew):
    p, m = int(row["p"]), int(row["m"])
    f, b, w = memory(row["model"])
    cost = {k: stage_costs(p, round(float(row[f"t_{k}"]) * 1000), skew) for k in "fbw"}
    config = graph.GraphConfig(
        mem_f=[float(f)] * p, mem_b=[float(b)] * p, mem_w=[float(w)] * p,
        max_mem=[float(limit * p * f)] * p, cost_f=cost["f"], cost_b=cost["b"],
        cost_w=cost["w"], cost_comm=float(round(float(row["t_comm"]) * 1000)),
        n_stages=p, n_micro=m)
    span, _, _ = zb.initial_solution(zb.Graph.build_graph(p, m, config), print_result=False)
    work = max(m * (cost["f"][s] + cost["b"][s] + cost["w"][s]) for s in range(p))
    return span, (span - work) / span


def zbv_span(zbv, row):
    p, m = int(row["p"]), int(row["m"])
    f, b, w = memory(row["model"])
    t = {k: round(float(row[f"t_{k}_chunk"]) * 1000) for k in "fbw"}
    g = zbv.PipelineGraph(n_stage=p, n_micro=m, f_cost=t["f"], b_cost=t["b"], w_cost=t["w"],
                          c_cost=round(float(row["t_comm"]) * 1000), f_mem=f, b_mem=b, w_mem=w)
    bubble = min(g.try_v_schedule(fill_f=ff, fill_b=fb)[2] for ff in (True, False)
                 for fb in (True, False))
    work = 2 * m * (t["f"] + t["b"] + t["w"])
    return work + bubble, bubble / (work + bubble)


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.exit(__doc__)
    skew = "--skew" in argv[2:]
    modules = load_scheduler(argv[1])
    print("model   p    m  zb_1p_span  bubble  zb_2p_span  bubble")
    with open(os.path.join(HERE, "settings.csv")) as f:
        for row in csv.DictReader(f):
            one = zb_span(modules["zb"], modules["graph"], row, 1, skew)
            two = zb_span(modules["zb"], modules["graph"], row, 2, skew)
            print(f"{row['model']:6} {row['p']:>2} {row['m']:>4} {one[0]:11.0f} {one[1]:7.4f}"
                  f" {two[0]:11.0f} {two[1]:7.4f}")
    if skew:
        return
    print("model   p    m   zb_v_span  bubble")
    with open(os.path.join(HERE, "v_settings.csv")) as f:
        for row in csv.DictReader(f):
            span, bubble = zbv_span(modules["zbv"], row)
            print(f"{row['model']:6} {row['p']:>2} {row['m']:>4} {span:11.0f} {bubble:7.4f}")


if __name__ == "__main__":
    main(sys.argv)
