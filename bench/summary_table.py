#!/usr/bin/env python3
"""The README's results table from one `scripts/device-run bench torch` run per dtype: for each
op and N, per run, tilenorm's % of the copy ceiling for the forward, backward and recompute, and
its speed over torch.compile's for the forward and backward; then, per run, the geometric mean
of those ratios over the N, and the shapes where tilenorm is slower than torch.compile.

A run given a third document, tilenorm-bench's `--no-tuning-db` run on the same machine, is a
tuned run: each % cell also gives the heuristic's, in brackets, and a line per run gives the
lowest heuristic / tuned ratio (each % of its own run's ceiling) and how many shapes reach the
untuned goal, 0.90.

Rows are matched as bench/report.py matches them, and a ratio of rows timed by different
methods (events or graph) is never taken: its cell says so and the means leave it out.

usage: summary_table.py --run NAME=TILENORM.json,TORCH.json[,HEURISTIC.json] [--run ...]
                        [--markdown OUT.md]
"""
import argparse
import sys

import report

OPS = {"layer_norm": "LayerNorm", "rms_norm": "RMSNorm"}
COMPARED_PASSES = ("forward", "backward")
# A ratio under this rounds below 1.00×: such shapes are listed as slower than torch.compile.
SLOWER_BELOW = 0.995
# Issue 8's untuned goal: the heuristic's % at least this share of the tuned one.
UNTUNED_GOAL = 0.90


def percent(row):
    return f"{row['percent_of_ceiling']:.1f}" if report.timed(row) else "—"


def ratio(mine, theirs, field="tbps"):
    """mine[field] / theirs[field]; None where either is missing, MIXED_MARK where they were
    timed differently."""
    if not (report.timed(mine) and report.timed(theirs)):
        return None
    if not report.same_timing(mine, theirs):
        return report.MIXED_MARK
    return mine[field] / theirs[field]


def ratio_text(value):
    if value is None:
        return "—"
    return value if isinstance(value, str) else f"{value:.2f}×"


def run_paths(spec):
    """(name, tilenorm path, torch path, heuristic path or "") of a --run
    NAME=TILENORM.json,TORCH.json[,HEURISTIC.json], or None."""
    name, _, paths = spec.partition("=")
    parts = paths.split(",")
    if not name or len(parts) not in (2, 3) or not all(parts):
        return None
    return (name, parts[0], parts[1], parts[2] if len(parts) == 3 else "")


class Run:
    """One dtype's documents, each keyed by (op, pass, N): one M per N (M·N fixed) here."""

    def __init__(self, name, tilenorm_path, torch_path, heuristic_path):
        def by_op_pass_n(rows):
            return {(key[0], key[1], key[3]): row for key, row in rows.items()
                    if key[4] == key[3]}
        self.name = name
        self.ours = by_op_pass_n(report.rows_by_key(report.load(tilenorm_path)))
        self.compiled = by_op_pass_n(report.rows_by_key(report.load(torch_path), "compile"))
        self.heuristic = (by_op_pass_n(report.rows_by_key(report.load(heuristic_path)))
                          if heuristic_path else None)


def summary(runs):
    head = "| op | N |"
    rule = "|---|---:|"
    for run in runs:
        name = run.name
        head += (f" {name} fwd % | fwd / compile | {name} bwd % | bwd / compile | "
                 f"{name} rec % |")
        rule += "---:|" * 5
    lines = [head, rule]
    ratios = {}
    slower = {}
    shares = {}
    for op, label in OPS.items():
        sizes = sorted({key[2] for run in runs for key in run.ours if key[0] == op})
        for n in sizes:
            cells = [label, str(n)]
            for run in runs:
                name = run.name
                for pass_name in report.PASSES:
                    mine = run.ours.get((op, pass_name, n))
                    cell = percent(mine)
                    if run.heuristic is not None:
                        untuned = run.heuristic.get((op, pass_name, n))
                        cell += f" ({percent(untuned)})"
                        # Each % of its own run's ceiling.
                        share = ratio(untuned, mine, "percent_of_ceiling")
                        if isinstance(share, float):
                            shares.setdefault(name, []).append((share, f"{label} {pass_name} {n}"))
                    cells.append(cell)
                    if pass_name not in COMPARED_PASSES:
                        continue
                    value = ratio(mine, run.compiled.get((op, pass_name, n)))
                    cells.append(ratio_text(value))
                    if isinstance(value, float):
                        ratios.setdefault((name, label, pass_name), []).append(value)
                        if value < SLOWER_BELOW:
                            slower.setdefault(name, []).append(
                                f"{label} {pass_name} {n} ({value:.2f}×)")
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for run in runs:
        name = run.name
        means = [f"{label} {pass_name} {report.geometric_mean(values):.2f}× over {len(values)}"
                 for (run, label, pass_name), values in ratios.items() if run == name]
        lines.append(f"- {name}, tilenorm / torch.compile, geometric mean: " +
                     ("; ".join(means) if means else "no shape timed by both the same way") + ".")
        listed = slower.get(name, [])
        lines.append(f"- {name}, slower than torch.compile: " +
                     (", ".join(listed) if listed else "none") + ".")
        if run.heuristic is not None:
            compared = shares.get(name, [])
            if compared:
                lowest, where = min(compared)
                reached = sum(1 for share, _ in compared if share >= UNTUNED_GOAL)
                lines.append(f"- {name}, heuristic / tuned: at least {UNTUNED_GOAL:.2f} at "
                             f"{reached} of {len(compared)} shapes; lowest {lowest:.2f} "
                             f"({where}).")
            else:
                lines.append(f"- {name}, heuristic / tuned: no shape timed by both the same way.")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description="The README's table from tilenorm-bench and "
                                     "torch_compare JSON, one run per dtype.")
    parser.add_argument("--run", action="append", required=True,
                        metavar="NAME=TILENORM.json,TORCH.json[,HEURISTIC.json]",
                        help="one dtype's run (the bench stage's tilenorm-bench.json and the "
                        "torch stage's torch.json of scripts/device-run, and optionally the "
                        "same machine's --no-tuning-db run, whose %% each cell gives in "
                        "brackets); repeat for several")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table to PATH")
    args = parser.parse_args()
    specs = [run_paths(spec) for spec in args.run]
    for spec, paths in zip(args.run, specs):
        if paths is None:
            parser.error("--run takes NAME=TILENORM.json,TORCH.json[,HEURISTIC.json], "
                         f"got {spec!r}")
    try:
        runs = [Run(*paths) for paths in specs]
        text = summary(runs)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"summary_table.py: cannot read the results: {type(error).__name__}: {error}",
              file=sys.stderr)
        return 2
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as file:
            file.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
