"""Loom's schedule search against Zero Bubble's schedulers on the paper's settings.

Usage: python3 compare.py LOOM [--zb-orders DIR] [--skew-orders DIR]
                            [--skew-memory-orders DIR] [--runs N]

LOOM is the loom binary (build/tools/loom). For every setting of settings.csv (at
ZB-1p's memory, p M_B, and ZB-2p's, 2p M_B) and v_settings.csv (ZB-V's, p M_B), and
for each objective (span: the longest device span, iterations back to back, the
paper's cost; makespan: one iteration alone), it runs `loom search --blocks` on the
setting's block model (stage_models.py) as a whole process, N times (default 1; the
median time is printed), and prints Markdown tables: Loom's span or makespan, the
schedule returned (`inflight` and `search` are found by Loom's searches, the others
are its built-in published schedules), the search time, and Zero Bubble's own
figures: the spans of its heuristics as zb_heuristic_results.txt records them
(equal to the paper's Tables 5 and 8), and, given the orders zb_heuristic.py
--export writes (DIR), the makespan of ZB-2p's and ZB-V's device orders re-timed by
`loom simulate` as soon as possible. Then the same loop settings with the first
stage's F, B and W 1.3 times and the last stage's 1.6 times (stage_models.py), where
Loom is compared with every built-in schedule (each timed for the objective) and
with ZB's heuristic (--skew-orders: zb_heuristic.py --skew --export), and the same
with those stages' activations scaled too, within the same caps
(--skew-memory-orders: zb_heuristic.py --skew-memory --export).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import stage_models

HERE = os.path.dirname(os.path.abspath(__file__))
BUILT_IN = ("1f1b", "gpipe", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v")


def zb_spans():
    """{(model, p, m, section): [spans]} from zb_heuristic_results.txt."""
    spans, section = {}, "even"
    with open(os.path.join(HERE, "zb_heuristic_results.txt")) as f:
        for line in f:
            if line.startswith("# --skew-memory"):
                section = "skewmem"
            elif line.startswith("# --skew"):
                section = "skew"
            elif "zb_v_span" in line:
                section = "v"
            fields = line.split()
            if len(fields) >= 5 and fields[1].isdigit():
                spans[(fields[0], fields[1], fields[2], section)] = [
                    int(fields[k]) for k in range(3, len(fields), 2)]
    return spans


def run(argv, runs):
    times, out = [], None
    for _ in range(runs):
        started = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.monotonic() - started)
        if out.returncode not in (0, 1):
            sys.exit(f"{' '.join(argv)}: {out.stderr}")
    return json.loads(out.stdout), statistics.median(times)


def search(loom, model, microbatches, objective, runs):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(model, f)
    try:
        return run([loom, "search", "--blocks", f.name, "--microbatches", str(microbatches),
                    "--objective", objective, "--json"], runs)
    finally:
        os.unlink(f.name)


def retimed(loom, path):
    """ZB's order re-timed by Loom: (makespan as soon as possible, least span)."""
    if not path or not os.path.exists(path):
        return None, None
    asap, _ = run([loom, "simulate", path, "--json"], 1)
    least, _ = run([loom, "simulate", path, "--least-span", "--json"], 1)
    return asap["makespan"], least["span"]


def key(row):
    return row["model"], row["p"], row["m"]


def pct(loom_value, reference):
    return f"{100.0 * (loom_value - reference) / reference:+.2f} %"


def even_tables(loom, orders, runs, spans):
    print("## Zero Bubble's settings (Table 9 inputs), span objective\n")
    print("| setting | F, B, W, C (ms) | Table 5 ZB-1p / ZB-2p | ZB-1p span | Loom at p M_B "
          "| ZB-2p span | Loom at 2p M_B | vs ZB-2p | Loom's search time |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    makespans = []
    for row in stage_models.read_settings("settings.csv"):
        zb = spans[key(row) + ("even",)]
        cells, times = [], []
        for limit in (1, 2):
            model = stage_models.loop_setting(row, limit)
            result, seconds = search(loom, model, int(row["m"]), "span", runs)
            cells.append(f"{result['span']:,} ({result['schedule']})")
            times.append(seconds)
            if limit == 2:
                two = result
                by_makespan, mseconds = search(loom, model, int(row["m"]), "makespan", runs)
                asap, _ = retimed(loom, orders and os.path.join(
                    orders, f"{model['name']}-zb2p.json"))
                makespans.append((row, by_makespan, mseconds, asap))
        print(f"| {row['model']} p{row['p']} m{row['m']} | {row['t_f']}, {row['t_b']}, "
              f"{row['t_w']}, {row['t_comm']} | {row['bubble_zb_1p']} / {row['bubble_zb_2p']} "
              f"| {zb[0]:,} | {cells[0]} | {zb[1]:,} | {cells[1]} | {pct(two['span'], zb[1])} "
              f"| {max(times):.2f} s |")
    print("\n## The same at 2p M_B, makespan objective (one iteration)\n")
    print("| setting | ZB-2p's order re-timed | Loom | vs ZB-2p | lower bound | time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row, result, seconds, asap in makespans:
        reference = f"{asap:,}" if asap else "-"
        versus = pct(result["makespan"], asap) if asap else "-"
        print(f"| {row['model']} p{row['p']} m{row['m']} | {reference} | "
              f"{result['makespan']:,} ({result['schedule']}) | {versus} | "
              f"{result['makespan_lower_bound']:,} | {seconds:.2f} s |")


def v_table(loom, orders, runs, spans):
    print("\n## ZB-V's settings (Table 8), p M_B\n")
    print("| setting | Table 8 ZB-V | ZB-V span | Loom span | vs ZB-V | ZB-V's order "
          "re-timed, makespan | Loom makespan | time (span, makespan) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in stage_models.read_settings("v_settings.csv"):
        zb = spans[key(row) + ("v",)][0]
        model = stage_models.v_setting(row)
        by_span, s_time = search(loom, model, int(row["m"]), "span", runs)
        by_makespan, m_time = search(loom, model, int(row["m"]), "makespan", runs)
        asap, _ = retimed(loom, orders and os.path.join(orders, f"{model['name']}-zbv.json"))
        print(f"| {row['model']} p{row['p']} m{row['m']} | {row['bubble_zb_v']} | {zb:,} | "
              f"{by_span['span']:,} ({by_span['schedule']}) | {pct(by_span['span'], zb)} | "
              f"{asap if asap is None else format(asap, ',')} | "
              f"{by_makespan['makespan']:,} ({by_makespan['schedule']}) | "
              f"{s_time:.2f} s, {m_time:.2f} s |")


def skew_table(loom, orders, runs, spans, memory=False):
    if memory:
        print("\n## First stage x1.3, last stage x1.6, times and activations\n")
    else:
        print("\n## First stage x1.3, last stage x1.6\n")
    print("| setting | memory | objective | best built-in | ZB heuristic | Loom | "
          "vs best built-in | vs ZB | lower bound |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in stage_models.read_settings("settings.csv"):
        zb = spans[key(row) + ("skewmem" if memory else "skew",)]
        for limit in (1, 2):
            model = stage_models.loop_setting(row, limit, skew=True, skew_memory=memory)
            path = orders and os.path.join(orders, f"{model['name']}-zb{limit}p.json")
            zb_makespan, _ = retimed(loom, path)
            for objective in ("span", "makespan"):
                result, _ = search(loom, model, int(row["m"]), objective, runs)
                built_in = [(c[objective], c["name"]) for c in result["candidates"]
                            if c["name"] in BUILT_IN and c["fits"]]
                best, name = min(built_in) if built_in else (None, "none fits")
                reference = zb[limit - 1] if objective == "span" else zb_makespan
                bound = (result["span_lower_bound"] if objective == "span"
                         else result["makespan_lower_bound"])
                print(f"| {row['model']} p{row['p']} m{row['m']} | {limit}p M_B | {objective} "
                      f"| {'-' if best is None else format(best, ',')} ({name}) | "
                      f"{reference if reference is None else format(reference, ',')} "
                      f"| {result[objective]:,} ({result['schedule']}) | "
                      f"{pct(result[objective], best) if best else '-'} | "
                      f"{pct(result[objective], reference) if reference else '-'} | {bound:,} |")


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.exit(__doc__)
    option = lambda name: argv[argv.index(name) + 1] if name in argv else None
    runs = int(option("--runs") or 1)
    spans = zb_spans()
    even_tables(argv[1], option("--zb-orders"), runs, spans)
    v_table(argv[1], option("--zb-orders"), runs, spans)
    skew_table(argv[1], option("--skew-orders"), runs, spans)
    skew_table(argv[1], option("--skew-memory-orders"), runs, spans, memory=True)


if __name__ == "__main__":
    main(sys.argv)
