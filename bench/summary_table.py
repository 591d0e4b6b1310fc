#!/usr/bin/env python3
"""The README's results table from one `scripts/device-run bench torch` run per dtype: for each
op and N, per run, tilenorm's % of the copy ceiling for the forward, backward and recompute, and
its speed over torch.compile's for the forward and backward; then, per run, the geometric mean
of those ratios over the N, and the shapes where tilenorm is slower than torch.compile.

Rows are matched as bench/report.py matches them, and a ratio of rows timed by different
methods (events or graph) is never taken: its cell says so and the means leave it out.

usage: summary_table.py --run NAME=TILENORM.json,TORCH.json [--run ...] [--markdown OUT.md]
"""
import argparse
import sys

import report

OPS = {"layer_norm": "LayerNorm", "rms_norm": "RMSNorm"}
COMPARED_PASSES = ("forward", "backward")
# A ratio under this rounds below 1.00×: such shapes are listed as slower than torch.compile.
SLOWER_BELOW = 0.995


def percent(row):
    return f"{row['percent_of_ceiling']:.1f}" if report.timed(row) else "—"


def ratio(mine, theirs):
    if not (report.timed(mine) and report.timed(theirs)):
        return None
    if not report.same_timing(mine, theirs):
        return report.MIXED_MARK
    return mine["tbps"] / theirs["tbps"]


def ratio_text(value):
    if value is None:
        return "—"
    return value if isinstance(value, str) else f"{value:.2f}×"


def run_paths(spec):
    """(name, tilenorm path, torch path) of a --run NAME=TILENORM.json,TORCH.json, or None."""
    name, _, paths = spec.partition("=")
    tilenorm_path, _, torch_path = paths.partition(",")
    return (name, tilenorm_path, torch_path) if name and tilenorm_path and torch_path else None


def load_run(name, tilenorm_path, torch_path):
    tilenorm, torch = report.load(tilenorm_path), report.load(torch_path)
    # Keyed by (op, pass, N): one M per N (M·N fixed) in these runs.
    def by_op_pass_n(rows):
        return {(key[0], key[1], key[3]): row for key, row in rows.items() if key[4] == key[3]}
    return name, by_op_pass_n(report.rows_by_key(tilenorm)), by_op_pass_n(
        report.rows_by_key(torch, "compile"))


def summary(runs):
    head = "| op | N |"
    rule = "|---|---:|"
    for name, _, _ in runs:
        head += (f" {name} fwd % | fwd / compile | {name} bwd % | bwd / compile | "
                 f"{name} rec % |")
        rule += "---:|" * 5
    lines = [head, rule]
    ratios = {}
    slower = {}
    for op, label in OPS.items():
        sizes = sorted({key[2] for _, ours, _ in runs for key in ours if key[0] == op})
        for n in sizes:
            cells = [label, str(n)]
            for name, ours, compiled in runs:
                for pass_name in report.PASSES:
                    mine = ours.get((op, pass_name, n))
                    cells.append(percent(mine))
                    if pass_name not in COMPARED_PASSES:
                        continue
                    value = ratio(mine, compiled.get((op, pass_name, n)))
                    cells.append(ratio_text(value))
                    if isinstance(value, float):
                        ratios.setdefault((name, label, pass_name), []).append(value)
                        if value < SLOWER_BELOW:
                            slower.setdefault(name, []).append(
                                f"{label} {pass_name} {n} ({value:.2f}×)")
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for name, _, _ in runs:
        means = [f"{label} {pass_name} {report.geometric_mean(values):.2f}× over {len(values)}"
                 for (run, label, pass_name), values in ratios.items() if run == name]
        lines.append(f"- {name}, tilenorm / torch.compile, geometric mean: " +
                     ("; ".join(means) if means else "no shape timed by both the same way") + ".")
        listed = slower.get(name, [])
        lines.append(f"- {name}, slower than torch.compile: " +
                     (", ".join(listed) if listed else "none") + ".")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description="The README's table from tilenorm-bench and "
                                     "torch_compare JSON, one run per dtype.")
    parser.add_argument("--run", action="append", required=True,
                        metavar="NAME=TILENORM.json,TORCH.json",
                        help="one dtype's run (the bench stage's tilenorm-bench.json and the "
                        "torch stage's torch.json of scripts/device-run); repeat for several")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table to PATH")
    args = parser.parse_args()
    specs = [run_paths(spec) for spec in args.run]
    for spec, paths in zip(args.run, specs):
        if paths is None:
            parser.error(f"--run takes NAME=TILENORM.json,TORCH.json, got {spec!r}")
    try:
        runs = [load_run(*paths) for paths in specs]
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
