#!/usr/bin/env python3
"""Merges tilenorm-bench JSON and torch_compare.py JSON into one markdown table (and, when
matplotlib imports, a PNG plot of TB/s against N). Standard library + optional matplotlib.

usage: report.py --tilenorm TILENORM.json [--torch TORCH.json] [--markdown OUT.md] [--plot OUT.png]
"""
import argparse
import json
import sys

# The forward goal: this share of the copy ceiling measured in the same run.
GOAL_PERCENT = 95.0
IMPLEMENTATIONS = ("tilenorm", "eager", "compile")


def load(path):
    with open(path) as file:
        return json.load(file)


def rows_by_key(document, impl=None):
    """{(op, n): row} for one implementation."""
    if document is None:
        return {}
    return {(row["op"], row["n"]): row for row in document["rows"]
            if impl is None or row.get("impl") == impl}


def tbps_cell(row):
    if row is None:
        return "—"
    if "error" in row:
        return "FAILED"
    return f"{row['tbps']:.2f}"


def percent_cell(row):
    if row is None or "error" in row:
        return "—"
    mark = " ✓" if row["percent_of_ceiling"] >= GOAL_PERCENT else ""
    return f"{row['percent_of_ceiling']:.1f}%{mark}"


def ratio_cell(numerator, denominator):
    if any(row is None or "error" in row for row in (numerator, denominator)):
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


def consistency_warnings(tilenorm, torch):
    if torch is None:
        return []
    return [f"- **Warning:** {field} differs: tilenorm-bench {tilenorm[field]!r}, "
            f"torch_compare {torch[field]!r}."
            for field in ("device", "dtype", "elements") if tilenorm[field] != torch[field]]


def markdown(tilenorm, torch):
    ours = rows_by_key(tilenorm)
    eager = rows_by_key(torch, "eager")
    compiled = rows_by_key(torch, "compile")
    lines = [f"# tilenorm vs PyTorch, forward, {tilenorm['dtype']}, "
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
    lines += consistency_warnings(tilenorm, torch)
    lines += ["", "TB/s counts x read + y written; ✓ marks the goal of "
              f"≥ {GOAL_PERCENT:.0f}% of the ceiling.", "",
              "| op | N | M | tilenorm TB/s | tilenorm % of ceiling | eager TB/s | compile TB/s "
              "| tilenorm / compile | tilenorm config |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    keys = sorted(set(ours) | set(eager) | set(compiled))
    for op, n in keys:
        mine, theirs = ours.get((op, n)), compiled.get((op, n))
        m = next(row["m"] for row in (mine, eager.get((op, n)), theirs) if row is not None)
        lines.append(f"| {op} | {n} | {m} | {tbps_cell(mine)} | {percent_cell(mine)} "
                     f"| {tbps_cell(eager.get((op, n)))} | {tbps_cell(theirs)} "
                     f"| {ratio_cell(mine, theirs)} | {config_cell(mine)} |")
    timed = [row for row in ours.values() if "error" not in row]
    at_goal = sum(row["percent_of_ceiling"] >= GOAL_PERCENT for row in timed)
    lines += ["", f"tilenorm at ≥ {GOAL_PERCENT:.0f}% of the ceiling: "
              f"{at_goal} of {len(ours)} shapes."]
    if compiled:
        compared = [(row, compiled[key]) for key, row in ours.items()
                    if key in compiled and "error" not in row and "error" not in compiled[key]]
        faster = sum(mine["tbps"] > theirs["tbps"] for mine, theirs in compared)
        lines.append(f"tilenorm faster than torch.compile: {faster} of {len(compared)} shapes "
                     "timed by both.")
    failures = [row for document in (tilenorm, torch) if document is not None
                for row in document["rows"] if "error" in row]
    if failures:
        lines += ["", "Failures:"]
        lines += [f"- {row['op']} {row.get('impl', 'tilenorm')} N={row['n']}: {row['error']}"
                  for row in failures]
    return "\n".join(lines) + "\n"


def plot(tilenorm, torch, path):
    """TB/s against N, one panel per op, one line per implementation; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        return False
    series = {"tilenorm": rows_by_key(tilenorm), "eager": rows_by_key(torch, "eager"),
              "compile": rows_by_key(torch, "compile")}
    ops = sorted({op for rows in series.values() for op, _ in rows})
    figure, axes = pyplot.subplots(1, len(ops), figsize=(7 * len(ops), 5), squeeze=False)
    for axis, op in zip(axes[0], ops):
        for impl in IMPLEMENTATIONS:
            points = sorted((n, row["tbps"]) for (row_op, n), row in series[impl].items()
                            if row_op == op and "error" not in row)
            if points:
                axis.plot(*zip(*points), marker="o", label=impl)
        for name, document, style in (("copy ceiling (tilenorm-bench)", tilenorm, "--"),
                                      ("copy ceiling (torch_compare)", torch, ":")):
            if document is not None:
                axis.axhline(document["copy_ceiling"]["tbps"], color="gray", linestyle=style,
                             label=name)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("N (row length)")
        axis.set_ylabel("TB/s (x read + y written)")
        axis.set_ylim(bottom=0)
        axis.set_title(f"{op}, {tilenorm['dtype']}, {tilenorm['device']}")
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
