#!/usr/bin/env python3
"""Merges tilenorm-bench JSON and torch_compare.py JSON into markdown tables, one per pass
(forward, backward, recompute), and, when matplotlib imports, a PNG plot of TB/s against N
with one row of panels per pass. Standard library + optional matplotlib.

usage: report.py --tilenorm TILENORM.json [--torch TORCH.json] [--markdown OUT.md] [--plot OUT.png]
"""
import argparse
import json
import math
import sys

# Goals by pass: this share of the copy ceiling measured in the same run. Only the forward
# has one so far; a pass without a goal gets no ✓ marks and no goal count.
GOAL_PERCENT = {"forward": 95.0}
IMPLEMENTATIONS = ("tilenorm", "eager", "compile")
# Known passes in report order; others follow in alphabetical order.
PASSES = ("forward", "backward", "recompute")
# What each pass's TB/s counts (both tools count the same).
PASS_BYTES = {"forward": "x read + y written",
              "backward": "x and dy read + dx written",
              "recompute": "x and dy read + dx written"}
EVENTS_MARK = " †"


def load(path):
    with open(path) as file:
        return json.load(file)


def row_pass(row):
    """The row's pass; rows written before passes existed are forward rows."""
    return row.get("pass", "forward")


def rows_by_key(document, impl=None):
    """{(op, pass, n): row} for one implementation."""
    if document is None:
        return {}
    return {(row["op"], row_pass(row), row["n"]): row for row in document["rows"]
            if impl is None or row.get("impl") == impl}


def ordered_passes(names):
    known = [name for name in PASSES if name in names]
    return known + sorted(name for name in names if name not in PASSES)


def timed(row):
    return row is not None and "error" not in row


def tbps_cell(row):
    if row is None:
        return "—"
    if "error" in row:
        return "FAILED"
    mark = EVENTS_MARK if row.get("timing") == "events" else ""
    return f"{row['tbps']:.2f}{mark}"


def percent_cell(row, goal):
    if not timed(row):
        return "—"
    mark = " ✓" if goal is not None and row["percent_of_ceiling"] >= goal else ""
    return f"{row['percent_of_ceiling']:.1f}%{mark}"


def ratio_cell(numerator, denominator):
    if not (timed(numerator) and timed(denominator)):
        return "—"
    return f"{numerator['tbps'] / denominator['tbps']:.2f}×"


def config_cell(row):
    if row is None or "config_text" not in row:
        return ""
    return f"{row['config_text']}, {row['config_source']}"


def ceiling_line(name, document):
    ceiling = document["copy_ceiling"]
    return (f"- {name}: **{ceiling['tbps']:.2f} TB/s** ({ceiling['method']} of 2 GiB, "
            f"{ceiling['median_us']:.1f} µs median, bytes read + written), "
            f"{document['device']}, {document['date_utc']}")


def consistency_warnings(tilenorm, torch, ours, torch_rows):
    """Header fields that differ between the runs, and shapes whose rows count different bytes
    (their TB/s would not compare)."""
    if torch is None:
        return []
    lines = [f"- **Warning:** {field} differs: tilenorm-bench {tilenorm[field]!r}, "
             f"torch_compare {torch[field]!r}."
             for field in ("device", "dtype", "elements") if tilenorm[field] != torch[field]]
    for impl, theirs in torch_rows.items():
        for key in sorted(set(ours) & set(theirs)):
            mine, other = ours[key].get("bytes"), theirs[key].get("bytes")
            if mine is not None and other is not None and mine != other:
                op, pass_name, n = key
                lines.append(f"- **Warning:** {op} {pass_name} N={n} counts {mine:.0f} bytes in "
                             f"tilenorm-bench and {other:.0f} in torch_compare ({impl}).")
    return lines


def geometric_mean(values):
    return math.exp(sum(math.log(value) for value in values) / len(values))


def compile_ratios(ours, compiled):
    """{(op, pass): [tilenorm TB/s / compile TB/s for every N timed by both]}."""
    ratios = {}
    for key, mine in ours.items():
        theirs = compiled.get(key)
        if timed(mine) and timed(theirs):
            op, pass_name, _ = key
            ratios.setdefault((op, pass_name), []).append(mine["tbps"] / theirs["tbps"])
    return ratios


def pass_table(pass_name, ours, eager, compiled):
    goal = GOAL_PERCENT.get(pass_name)
    lines = [f"## {pass_name}", "",
             f"TB/s counts {PASS_BYTES.get(pass_name, 'the bytes each tool reports')}.", "",
             "| op | N | M | tilenorm TB/s | tilenorm % of ceiling | eager TB/s | compile TB/s "
             "| tilenorm / compile | tilenorm config |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    keys = sorted(key for key in set(ours) | set(eager) | set(compiled) if key[1] == pass_name)
    for key in keys:
        op, _, n = key
        mine, theirs = ours.get(key), compiled.get(key)
        m = next((row["m"] for row in (mine, eager.get(key), theirs)
                  if row is not None and "m" in row), "—")
        lines.append(f"| {op} | {n} | {m} | {tbps_cell(mine)} | {percent_cell(mine, goal)} "
                     f"| {tbps_cell(eager.get(key))} | {tbps_cell(theirs)} "
                     f"| {ratio_cell(mine, theirs)} | {config_cell(mine)} |")
    mine_rows = [row for key, row in ours.items() if key[1] == pass_name]
    lines.append("")
    if goal is not None:
        at_goal = sum(row["percent_of_ceiling"] >= goal for row in mine_rows if timed(row))
        lines.append(f"tilenorm at ≥ {goal:.0f}% of the ceiling: {at_goal} of {len(mine_rows)} "
                     "shapes.")
    compared = [(row, compiled[key]) for key, row in ours.items()
                if key[1] == pass_name and timed(row) and timed(compiled.get(key))]
    if any(key[1] == pass_name for key in compiled):
        faster = sum(mine["tbps"] > theirs["tbps"] for mine, theirs in compared)
        lines.append(f"tilenorm faster than torch.compile: {faster} of {len(compared)} shapes "
                     "timed by both.")
    return lines


def markdown(tilenorm, torch):
    ours = rows_by_key(tilenorm)
    eager = rows_by_key(torch, "eager")
    compiled = rows_by_key(torch, "compile")
    passes = ordered_passes({key[1] for key in (*ours, *eager, *compiled)})
    lines = [f"# tilenorm vs PyTorch, {' + '.join(passes) or 'no results'}, {tilenorm['dtype']}, "
             f"M·N = {tilenorm['elements']} elements per shape", ""]
    if torch is not None:
        lines.append(f"torch {torch['torch_version']}, Triton {torch['triton_version']}, "
                     f"CUDA {torch['cuda_version']}. tilenorm tuning database: "
                     f"{'on' if tilenorm['tuning_database'] else 'off'}.")
    else:
        lines.append(f"tilenorm tuning database: {'on' if tilenorm['tuning_database'] else 'off'}; "
                     "no torch_compare results given.")
    lines += ["", "Copy ceilings (each implementation's % is against its own run's ceiling):",
              ceiling_line("tilenorm-bench", tilenorm)]
    if torch is not None:
        lines.append(ceiling_line("torch_compare", torch))
    lines += consistency_warnings(tilenorm, torch, ours, {"eager": eager, "compile": compiled})
    goals = ", ".join(f"≥ {percent:.0f}% of the ceiling for the {pass_name}"
                      for pass_name, percent in GOAL_PERCENT.items())
    lines += ["", f"✓ marks the goal: {goals}."]
    if any(row.get("timing") == "events" for row in (*eager.values(), *compiled.values())):
        lines.append(f"{EVENTS_MARK.strip()} marks PyTorch times taken with CUDA events around "
                     "back-to-back calls, where the CUDA-graph capture failed; the others are "
                     "graph replays.")
    for pass_name in passes:
        lines += [""] + pass_table(pass_name, ours, eager, compiled)
    ratios = compile_ratios(ours, compiled)
    if ratios:
        lines += ["", "## tilenorm / torch.compile, geometric mean over N", "",
                  "| op | pass | geometric mean | shapes |", "|---|---|---:|---:|"]
        for op, pass_name in sorted(ratios, key=lambda key: (key[0], passes.index(key[1]))):
            values = ratios[(op, pass_name)]
            lines.append(f"| {op} | {pass_name} | {geometric_mean(values):.2f}× | {len(values)} |")
    failures = [row for document in (tilenorm, torch) if document is not None
                for row in document["rows"] if "error" in row]
    if failures:
        lines += ["", "Failures:"]
        lines += [f"- {row['op']} {row_pass(row)} {row.get('impl', 'tilenorm')} N={row['n']}: "
                  f"{' '.join(row['error'].split())}" for row in failures]  # one line each
    return "\n".join(lines) + "\n"


def plot(tilenorm, torch, path):
    """TB/s against N: one row of panels per pass, one panel per op, one line per
    implementation; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        return False
    series = {"tilenorm": rows_by_key(tilenorm), "eager": rows_by_key(torch, "eager"),
              "compile": rows_by_key(torch, "compile")}
    keys = [key for rows in series.values() for key in rows]
    ops = sorted({op for op, _, _ in keys}) or ["no results"]
    passes = ordered_passes({pass_name for _, pass_name, _ in keys}) or ["forward"]
    figure, axes = pyplot.subplots(len(passes), len(ops), figsize=(7 * len(ops), 5 * len(passes)),
                                   squeeze=False)
    for axis_row, pass_name in zip(axes, passes):
        for axis, op in zip(axis_row, ops):
            for impl in IMPLEMENTATIONS:
                points = sorted((n, row["tbps"]) for (row_op, row_pass_name, n), row
                                in series[impl].items()
                                if row_op == op and row_pass_name == pass_name and timed(row))
                if points:
                    axis.plot(*zip(*points), marker="o", label=impl)
            for name, document, style in (("copy ceiling (tilenorm-bench)", tilenorm, "--"),
                                          ("copy ceiling (torch_compare)", torch, ":")):
                if document is not None:
                    axis.axhline(document["copy_ceiling"]["tbps"], color="gray", linestyle=style,
                                 label=name)
            axis.set_xscale("log", base=2)
            axis.set_xlabel("N (row length)")
            axis.set_ylabel(f"TB/s ({PASS_BYTES.get(pass_name, 'bytes as counted')})")
            axis.set_ylim(bottom=0)
            axis.set_title(f"{op}, {pass_name}, {tilenorm['dtype']}, {tilenorm['device']}")
            axis.grid(True, alpha=0.3)
            axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def main():
    parser = argparse.ArgumentParser(description="Merge tilenorm-bench and torch_compare JSON "
                                     "into a markdown table and an optional PNG plot.")
    parser.add_argument("--tilenorm", required=True, metavar="PATH",
                        help="tilenorm-bench --json output")
    parser.add_argument("--torch", metavar="PATH", help="torch_compare.py --json output")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table to PATH")
    parser.add_argument("--plot", metavar="PATH",
                        help="write a PNG plot to PATH (needs matplotlib)")
    args = parser.parse_args()
    try:
        tilenorm = load(args.tilenorm)
        torch = load(args.torch) if args.torch else None
        text = markdown(tilenorm, torch)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"report.py: cannot read the results: {type(error).__name__}: {error}",
              file=sys.stderr)
        return 2
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as file:
            file.write(text)
    if args.plot and not plot(tilenorm, torch, args.plot):
        print("report.py: matplotlib is not available; no plot written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
