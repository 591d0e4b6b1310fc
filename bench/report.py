#!/usr/bin/env python3
"""Merges tilenorm-bench JSON and torch_compare.py JSON into markdown tables, one per pass
(forward, backward, recompute), a table of the recomputing backward against the saved one where
a run has both, a table of the --decode measurements when there are any, with
--heuristic a table of the heuristic's run (tilenorm-bench --no-tuning-db) against the tuned one,
with --baseline a table of an older tree's run (scripts/device-run baseline) against this one,
and, when matplotlib imports, a PNG plot of TB/s for each shape with one row of panels per pass.
Rows are matched by (op, pass, M, N, row stride). Standard library + optional matplotlib.

Rows timed by different methods (events or graph; see bench/README.md) are never compared: their
ratio cells say so, they are left out of the geometric means, and the report warns about them.
--strict-timing refuses such a merge instead (exit 1, nothing written).

usage: report.py --tilenorm TILENORM.json [--torch TORCH.json] [--heuristic HEURISTIC.json]
                 [--baseline BASELINE.json] [--markdown OUT.md] [--plot OUT.png] [--strict-timing]
"""
import argparse
import json
import math
import sys

# Goals by pass (issues 7 and 8): this share of the copy ceiling measured in the same run, for
# rows of up to that many elements (the last entry has no limit). A pass without a goal gets no
# ✓ marks and no goal count; the recompute's goal is relative (RECOMPUTE_SHARE).
GOAL_PERCENT = {"forward": ((32768, 95.0), (None, 94.0)),
                "backward": ((1024, 92.0), (None, 85.0))}
# The recompute's goal: at least this share of the saved-statistics backward's TB/s, same shape.
RECOMPUTE_SHARE = 0.95
# Decode goals (issue 8, forwards at 1-256 rows): the kernel within this many times a copy of the
# same bytes, and the host cost of a launch within this many times an empty kernel's.
DECODE_KERNEL_LIMIT = 1.3
DECODE_LAUNCH_LIMIT = 1.2
IMPLEMENTATIONS = ("tilenorm", "eager", "compile")
# Known passes in report order; others follow in alphabetical order.
PASSES = ("forward", "backward", "recompute")
# What each pass's TB/s counts (both tools count the same).
PASS_BYTES = {"forward": "x read + y written",
              "backward": "x and dy read + dx written",
              "recompute": "x and dy read + dx written"}
# tilenorm-bench rows written before --timing existed: one event pair around each launch.
LEGACY_TIMING = "events per launch"
# The untuned goal: the heuristic's share of the tuned figure (% of the copy ceiling), at least.
UNTUNED_SHARE = 0.90
FALLBACK_MARK = " †"
MIXED_MARK = "‡"


def load(path):
    with open(path) as file:
        return json.load(file)


def row_pass(row):
    """The row's pass; rows written before passes existed are forward rows."""
    return row.get("pass", "forward")


def row_stride(row):
    """The row's row stride in elements; rows written before strides existed are contiguous."""
    return row.get("row_stride") or row["n"]


def row_timing(row, document):
    """How the row was timed: "events" or "graph" (or LEGACY_TIMING for old tilenorm rows)."""
    return row.get("timing") or (LEGACY_TIMING if document.get("tool") == "tilenorm-bench"
                                 else document.get("timing", "unknown"))


def row_key(row):
    """(op, pass, M, N, row stride)."""
    return (row["op"], row_pass(row), row["m"], row["n"], row_stride(row))


def shape_text(key):
    _, _, m, n, stride = key
    return f"{m}x{n}" + (f" (stride {stride})" if stride != n else "")


def rows_by_key(document, impl=None):
    """{(op, pass, M, N, row stride): row} for one implementation; each row gets "_timing"."""
    if document is None:
        return {}
    found = {}
    for row in document["rows"]:
        if impl is None or row.get("impl") == impl:
            found[row_key(row)] = dict(row, _timing=row_timing(row, document))
    return found


def ordered_passes(names):
    known = [name for name in PASSES if name in names]
    return known + sorted(name for name in names if name not in PASSES)


def sort_key(key):
    """Keys in report order: op, then N, M and row stride."""
    op, pass_name, m, n, stride = key
    return (op, pass_name, n, m, stride)


def timed(row):
    return row is not None and "error" not in row


def same_timing(first, second):
    return first["_timing"] == second["_timing"]


def goal_percent(pass_name, n):
    """The pass's goal in % of the ceiling for rows of n elements, or None."""
    for longest, percent in GOAL_PERCENT.get(pass_name, ()):
        if longest is None or n <= longest:
            return percent
    return None


def goal_text(pass_name):
    """The pass's goals in words: "≥ 95% up to N = 32768, ≥ 94% beyond"."""
    steps = GOAL_PERCENT[pass_name]
    return ", ".join(f"≥ {percent:.0f}% " + (f"up to N = {longest}" if longest is not None
                                             else "beyond" if len(steps) > 1 else "at every N")
                     for longest, percent in steps)


def tbps_cell(row):
    if row is None:
        return "—"
    if "error" in row:
        return "FAILED"
    mark = FALLBACK_MARK if "graph_error" in row else ""
    return f"{row['tbps']:.2f}{mark}"


def percent_cell(row, goal=None):
    if not timed(row):
        return "—"
    mark = " ✓" if goal is not None and row["percent_of_ceiling"] >= goal else ""
    return f"{row['percent_of_ceiling']:.1f}%{mark}"


def ratio_cell(numerator, denominator):
    if not (timed(numerator) and timed(denominator)):
        return "—"
    if not same_timing(numerator, denominator):
        return f"{MIXED_MARK} {numerator['_timing']} vs {denominator['_timing']}"
    return f"{numerator['tbps'] / denominator['tbps']:.2f}×"


def us_cell(row):
    return f"{row['median_us']:.2f}" if timed(row) else "—"


def config_cell(row):
    if row is None or "config_text" not in row:
        return ""
    return f"{row['config_text']}, {row['config_source']}"


def ceiling_line(name, document):
    ceiling = document["copy_ceiling"]
    return (f"- {name}: **{ceiling['tbps']:.2f} TB/s** ({ceiling['method']} of 2 GiB, "
            f"{ceiling['median_us']:.1f} µs median, bytes read + written), "
            f"{document['device']}, {document['date_utc']}")


def timing_summary(name, rows):
    methods = sorted({row["_timing"] for row in rows.values() if timed(row)})
    return f"{name} {' and '.join(f'`{method}`' for method in methods) or '—'}"


def mixed_timing(ours, torch_rows):
    """[(key, impl, tilenorm timing, torch timing)] for every timed pair timed differently."""
    mixed = []
    for impl, theirs in torch_rows.items():
        for key in sorted(set(ours) & set(theirs), key=sort_key):
            mine, other = ours[key], theirs[key]
            if timed(mine) and timed(other) and not same_timing(mine, other):
                mixed.append((key, impl, mine["_timing"], other["_timing"]))
    return mixed


def consistency_warnings(tilenorm, torch, ours, torch_rows):
    """Header fields that differ between the runs, shapes whose rows count different bytes
    (their TB/s would not compare), and rows timed by different methods."""
    if torch is None:
        return []
    lines = [f"- **Warning:** {field} differs: tilenorm-bench {tilenorm[field]!r}, "
             f"torch_compare {torch[field]!r}."
             for field in ("device", "dtype") if tilenorm[field] != torch[field]]
    if (tilenorm.get("elements") is not None and torch.get("elements") is not None
            and tilenorm["elements"] != torch["elements"]):
        lines.append(f"- **Warning:** elements differs: tilenorm-bench {tilenorm['elements']!r}, "
                     f"torch_compare {torch['elements']!r}.")
    for impl, theirs in torch_rows.items():
        for key in sorted(set(ours) & set(theirs), key=sort_key):
            mine, other = ours[key].get("bytes"), theirs[key].get("bytes")
            if mine is not None and other is not None and mine != other:
                op, pass_name = key[:2]
                lines.append(f"- **Warning:** {op} {pass_name} {shape_text(key)} counts "
                             f"{mine:.0f} bytes in tilenorm-bench and {other:.0f} in "
                             f"torch_compare ({impl}).")
    mixed = mixed_timing(ours, torch_rows)
    if mixed:
        lines.append(f"- **Warning: {len(mixed)} matched rows were timed by different methods; "
                     f"they are not compared ({MIXED_MARK} in the ratio cells, left out of the "
                     "geometric means):**")
        lines += [f"  - {key[0]} {key[1]} {shape_text(key)}: tilenorm `{mine}`, {impl} `{other}`"
                  for key, impl, mine, other in mixed]
    return lines


def geometric_mean(values):
    return math.exp(sum(math.log(value) for value in values) / len(values))


def ratios(ours, theirs):
    """{(op, pass): [tilenorm TB/s / their TB/s for every shape timed by both, the same way]}."""
    found = {}
    for key, mine in ours.items():
        other = theirs.get(key)
        if timed(mine) and timed(other) and same_timing(mine, other):
            found.setdefault(key[:2], []).append(mine["tbps"] / other["tbps"])
    return found


def pass_table(pass_name, ours, eager, compiled, strided):
    stride_head, stride_rule = (" stride |", "---:|") if strided else ("", "")
    ops = {key[0] for key in set(ours) | set(eager) | set(compiled) if key[1] == pass_name}
    other_ops = sorted(ops - {"layer_norm", "rms_norm"})
    counted = PASS_BYTES.get(pass_name, "the bytes each tool reports")
    if other_ops:  # example programs count their own row tensors (bench/README.md)
        counted += f" ({', '.join(other_ops)}: the row tensors bench/README.md lists)"
    lines = [f"## {pass_name}", "",
             f"TB/s counts {counted}. Each % is of its own run's copy ceiling.", "",
             f"| op | N | M |{stride_head} tilenorm TB/s | tilenorm % of ceiling | eager TB/s "
             "| eager % of ceiling | compile TB/s | compile % of ceiling | tilenorm / compile "
             "| tilenorm / eager | tilenorm config |",
             f"|---|---:|---:|{stride_rule}---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    keys = sorted((key for key in set(ours) | set(eager) | set(compiled) if key[1] == pass_name),
                  key=sort_key)
    for key in keys:
        op, _, m, n, stride = key
        mine, slow, fast = ours.get(key), eager.get(key), compiled.get(key)
        stride_cell = f" {stride} |" if strided else ""
        lines.append(f"| {op} | {n} | {m} |{stride_cell} {tbps_cell(mine)} "
                     f"| {percent_cell(mine, goal_percent(pass_name, n))} | {tbps_cell(slow)} "
                     f"| {percent_cell(slow)} "
                     f"| {tbps_cell(fast)} | {percent_cell(fast)} | {ratio_cell(mine, fast)} "
                     f"| {ratio_cell(mine, slow)} | {config_cell(mine)} |")
    mine_rows = [row for key, row in ours.items() if key[1] == pass_name]
    lines.append("")
    if pass_name in GOAL_PERCENT:
        at_goal = sum(row["percent_of_ceiling"] >= goal_percent(pass_name, row["n"])
                      for row in mine_rows if timed(row))
        lines.append(f"tilenorm at its goal: {at_goal} of {len(mine_rows)} shapes (of the "
                     f"ceiling, {goal_text(pass_name)}).")
    compared = [(row, compiled[key]) for key, row in ours.items()
                if key[1] == pass_name and timed(row) and timed(compiled.get(key))
                and same_timing(row, compiled[key])]
    if any(key[1] == pass_name for key in compiled):
        faster = sum(mine["tbps"] > theirs["tbps"] for mine, theirs in compared)
        lines.append(f"tilenorm faster than torch.compile: {faster} of {len(compared)} shapes "
                     "timed by both, the same way.")
    return lines


def decode_table(tilenorm, ours, eager, compiled):
    """The --decode measurements: each row's kernel against a copy moving the same bytes, and the
    host cost of a launch; then the CUDA-graph replay checks."""
    rows = sorted(((key, row) for key, row in ours.items() if "decode" in row),
                  key=lambda item: sort_key(item[0]))
    checks = tilenorm.get("graph_checks", [])
    if not rows and not checks:
        return []
    lines = ["## decode", ""]
    if rows:
        lines += [
            "Kernel: tilenorm's time per launch. Copy: `cuMemcpyDtoDAsync` of half the kernel's "
            "bytes, so that it reads and writes as many bytes as the kernel (rows, parameters and "
            "statistics; not the workspace), timed the same way in the same run. Host: µs per "
            "call on the CPU, `Norm::launch` against a bare `cuLaunchKernel` of an empty kernel, "
            "while the GPU is kept busy. eager and compile: PyTorch's time per call, where "
            f"torch_compare timed the same shape. ✗ marks a forward kernel over "
            f"{DECODE_KERNEL_LIMIT}× its copy and a launch over {DECODE_LAUNCH_LIMIT}× the empty "
            "one (the goals).", "",
            "| op | pass | M | N | stride | kernel bytes | kernel µs | copy µs | kernel / copy "
            "| eager µs | compile µs | Norm::launch µs | cuLaunchKernel µs | launch / empty |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        kernels_within, launches_within, forwards = 0, 0, 0
        for key, row in rows:
            op, pass_name, m, n, stride = key
            decode = row["decode"]
            over_copy = timed(row) and pass_name == "forward" and \
                decode["kernel_over_copy"] > DECODE_KERNEL_LIMIT
            kernel = (f"{row['median_us']:.2f}",
                      f"{decode['kernel_over_copy']:.2f}×" + (" ✗" if over_copy else "")) \
                if timed(row) else ("FAILED", "—")
            if pass_name == "forward" and timed(row):
                forwards += 1
                kernels_within += not over_copy
            over_empty = decode["launch_over_empty"] > DECODE_LAUNCH_LIMIT
            launches_within += not over_empty
            lines.append(
                f"| {op} | {pass_name} | {m} | {n} | {stride} | {decode['kernel_bytes']:.0f} "
                f"| {kernel[0]} | {decode['copy_median_us']:.2f} | {kernel[1]} "
                f"| {us_cell(eager.get(key))} | {us_cell(compiled.get(key))} "
                f"| {decode['launch_us']:.2f} | {decode['empty_launch_us']:.2f} "
                f"| {decode['launch_over_empty']:.2f}×{' ✗' if over_empty else ''} |")
        lines += ["", f"Forward kernels within {DECODE_KERNEL_LIMIT}× their copy: {kernels_within} "
                  f"of {forwards}. Launches within {DECODE_LAUNCH_LIMIT}× an empty one: "
                  f"{launches_within} of {len(rows)}.", ""]
    if checks:
        failed = sum(not check["ok"] for check in checks)
        lines += [f"CUDA graph of {' then '.join(checks[0].get('ops', ['layer_norm', 'rms_norm']))},"
                  " replayed and compared bit for bit with direct launches: "
                  f"{len(checks) - failed} of {len(checks)} shapes pass.", ""]
        for check in checks:
            stride = check.get("row_stride", check["n"])
            shape = f"{check['m']}x{check['n']}" + (f" (stride {stride})"
                                                   if stride != check["n"] else "")
            lines.append(f"- {shape}: {'pass' if check['ok'] else '**FAIL**'} "
                         f"({' '.join(check['detail'].split())})")
    return lines


def paired_cell(row, base, measure, text):
    """(value, cell) for two runs' rows of one shape: measure(row, base) and text(value) where
    both were timed, the same way; otherwise no value and a cell that says why."""
    if not (timed(row) and timed(base)):
        return None, "—"
    if not same_timing(row, base):
        return None, f"{MIXED_MARK} {row['_timing']} vs {base['_timing']}"
    value = measure(row, base)
    return value, text(value)


def share_text(limit):
    """The cell text of a share: two decimals, ✗ below limit."""
    return lambda share: f"{share:.2f}" + (" ✗" if share < limit else "")


def share_summary(subject, limit, reference, shares, describe):
    """The line under a table of shares ([(share, key)]): how many reach limit, and the lowest
    (its key in words by describe)."""
    at_goal = sum(share >= limit for share, _ in shares)
    line = (f"{subject} at ≥ {limit:.2f} of {reference}: {at_goal} of {len(shares)} shapes "
            "timed the same way.")
    if shares:
        lowest, key = min(shares)
        line += f" Lowest: {lowest:.2f}, {describe(key)}."
    return line


def untuned_table(ours, heuristic):
    """Each shape's heuristic configuration (a run without the tuning database) against this
    run's, by % of each run's own copy ceiling; ✗ below UNTUNED_SHARE."""
    keys = sorted(set(ours) & set(heuristic), key=sort_key)
    if not keys:
        return []
    lines = ["## untuned against tuned", "",
             "The heuristic's configuration (`tilenorm-bench --no-tuning-db`) against the "
             "configuration of the run above, each as a % of its own run's copy ceiling. "
             f"✗ marks a heuristic below {UNTUNED_SHARE:.2f} of the tuned figure.", "",
             "| op | pass | N | M | tuned % of ceiling | tuned config | heuristic % of ceiling "
             "| heuristic config | heuristic / tuned |",
             "|---|---|---:|---:|---:|---|---:|---|---:|"]
    shares = []
    for key in keys:
        op, pass_name, m, n, _ = key
        tuned, untuned = ours[key], heuristic[key]
        share, cell = paired_cell(
            untuned, tuned,
            lambda row, base: row["percent_of_ceiling"] / base["percent_of_ceiling"],
            share_text(UNTUNED_SHARE))
        if share is not None:
            shares.append((share, key))
        lines.append(f"| {op} | {pass_name} | {n} | {m} | {percent_cell(tuned)} "
                     f"| {config_cell(tuned)} | {percent_cell(untuned)} | {config_cell(untuned)} "
                     f"| {cell} |")
    lines += ["", share_summary("heuristic", UNTUNED_SHARE, "the tuned figure", shares,
                                lambda key: f"{key[0]} {key[1]} {shape_text(key)}")]
    return lines


def recompute_table(ours):
    """Each shape's recomputing backward against its saved-statistics backward, by TB/s (the
    same bytes); ✗ below RECOMPUTE_SHARE."""
    pairs = sorted(((key, ours[(key[0], "backward", *key[2:])]) for key in ours
                    if key[1] == "recompute" and (key[0], "backward", *key[2:]) in ours),
                   key=lambda pair: sort_key(pair[0]))
    if not pairs:
        return []
    strided = any(key[4] != key[3] for key, _ in pairs)
    stride_head, stride_rule = (" stride |", "---:|") if strided else ("", "")
    lines = ["## recompute against saved", "",
             "The backward that recomputes the statistics from x against the one that reads the "
             f"forward's, same shape, same bytes. ✗ marks a recompute below {RECOMPUTE_SHARE:.2f} "
             "of the saved backward.", "",
             f"| op | N | M |{stride_head} saved % of ceiling | recompute % of ceiling "
             "| recompute / saved |",
             f"|---|---:|---:|{stride_rule}---:|---:|---:|"]
    shares = []
    for key, saved in pairs:
        recompute = ours[key]
        share, cell = paired_cell(
            recompute, saved, lambda row, base: row["tbps"] / base["tbps"],
            share_text(RECOMPUTE_SHARE))
        if share is not None:
            shares.append((share, key))
        stride_cell = f" {key[4]} |" if strided else ""
        lines.append(f"| {key[0]} | {key[3]} | {key[2]} |{stride_cell} {percent_cell(saved)} "
                     f"| {percent_cell(recompute)} | {cell} |")
    lines += ["", share_summary("recompute", RECOMPUTE_SHARE, "the saved backward", shares,
                                lambda key: f"{key[0]} {shape_text(key)}")]
    return lines


def points_text(points):
    """A change in points of the ceiling, signed, one decimal, never "-0.0"."""
    return f"{round(points, 1) or 0.0:+.1f}"


def points_between(row, base):
    """Points of the copy ceiling from base to row, each against its own run's ceiling."""
    return row["percent_of_ceiling"] - base["percent_of_ceiling"]


def differs_warnings(tilenorm, label, document):
    """A warning line per run field (device, dtype, elements, programmatic_launch) in which
    `document` (`label`) differs from this run. Runs from before --programmatic-launch have no
    such field: they launched plainly."""
    defaults = {"device": None, "dtype": None, "elements": None, "programmatic_launch": False}
    return [f"- **Warning:** {field} differs: this run {tilenorm.get(field, default)!r}, {label} "
            f"{document.get(field, default)!r}."
            for field, default in defaults.items()
            if tilenorm.get(field, default) != document.get(field, default)]


def changes_summary(changes):
    """How many of the (points, key) changes moved more than a point either way, and the largest
    gain and loss."""
    up = sum(points > 1.0 for points, _ in changes)
    down = sum(points < -1.0 for points, _ in changes)
    text = (f"Of {len(changes)} shapes timed the same way: {up} more than a point faster, "
            f"{down} more than a point slower.")
    if changes:
        (lowest, low_key), (highest, high_key) = min(changes), max(changes)
        text += (f" Largest gain {points_text(highest)} ({high_key[0]} {high_key[1]} "
                 f"{shape_text(high_key)}), largest loss {points_text(lowest)} ({low_key[0]} "
                 f"{low_key[1]} {shape_text(low_key)}).")
    return text


def baseline_table(tilenorm, ours, baseline_document, baseline):
    """Each shape of this run against the same shape of the baseline's run (an older tree's
    tilenorm-bench in the same device call), by time and by % of each run's own copy ceiling."""
    keys = sorted(set(ours) & set(baseline), key=sort_key)
    if not keys:
        return []
    lines = ["## against the baseline", "",
             "This run against the baseline's (an older tree, `scripts/baseline COMMIT` and "
             "`scripts/device-run baseline`), shape by shape; each % is of its own run's copy "
             "ceiling, and points are this run's % minus the baseline's.", "",
             ceiling_line("this run", tilenorm), ceiling_line("baseline", baseline_document)]
    lines += differs_warnings(tilenorm, "baseline", baseline_document)
    lines += ["", "| op | pass | N | M | baseline µs | baseline % | µs | % | points | config |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    changes = []
    for key in keys:
        op, pass_name, m, n, _ = key
        mine, before = ours[key], baseline[key]
        points, cell = paired_cell(mine, before, points_between, points_text)
        if points is not None:
            changes.append((points, key))
        config = config_cell(mine)
        if before.get("config_text") != mine.get("config_text"):
            config += f" (baseline: {config_cell(before) or '—'})"
        lines.append(f"| {op} | {pass_name} | {n} | {m} | {us_cell(before)} "
                     f"| {percent_cell(before)} | {us_cell(mine)} | {percent_cell(mine)} "
                     f"| {cell} | {config} |")
    return lines + ["", changes_summary(changes)]


def variants_table(tilenorm, ours, variants):
    """Several trees' runs (scripts/device-run variants) against this one in one table: each
    shape's % of this run's ceiling, then each variant's points (its % of its own run's ceiling
    minus this run's), and a summary per variant."""
    keys = sorted(set(ours).intersection(*(rows for _, _, rows in variants)), key=sort_key)
    if not keys:
        return []
    names = [name for name, _, _ in variants]
    lines = ["## variants against this run", "",
             "Each variant's % of its own run's copy ceiling minus this run's, shape by shape "
             "(shapes every run timed).", "", ceiling_line("this run", tilenorm)]
    lines += [ceiling_line(f"variant {name}", document) for name, document, _ in variants]
    for name, document, _ in variants:
        lines += differs_warnings(tilenorm, f"variant {name}", document)
    lines += ["", "| op | pass | N | M | % | " + " | ".join(names) + " | config |",
              "|---|---|---:|---:|---:|" + "---:|" * len(names) + "---|"]
    changes = {name: [] for name in names}
    for key in keys:
        op, pass_name, m, n, _ = key
        mine = ours[key]
        cells = []
        for name, _, rows in variants:
            points, cell = paired_cell(rows[key], mine, points_between, points_text)
            if points is not None:
                changes[name].append((points, key))
            if rows[key].get("config_text") != mine.get("config_text"):
                cell += " †"
            cells.append(cell)
        lines.append(f"| {op} | {pass_name} | {n} | {m} | {percent_cell(mine)} | "
                     f"{' | '.join(cells)} | {config_cell(mine)} |")
    lines += ["", "† the variant ran another configuration than this run's.", ""]
    return lines + [f"- {name}: {changes_summary(changes[name])}" for name in names]


def markdown(tilenorm, torch, heuristic=None, baseline=None, variants=()):
    ours = rows_by_key(tilenorm)
    eager = rows_by_key(torch, "eager")
    compiled = rows_by_key(torch, "compile")
    passes = ordered_passes({key[1] for key in (*ours, *eager, *compiled)})
    size = (f"M·N = {tilenorm['elements']} elements per shape"
            if tilenorm.get("elements") is not None else "shapes as listed")
    lines = [f"# tilenorm vs PyTorch, {' + '.join(passes) or 'no results'}, {tilenorm['dtype']}, "
             f"{size}", ""]
    if torch is not None:
        lines.append(f"torch {torch['torch_version']}, Triton {torch['triton_version']}, "
                     f"CUDA {torch['cuda_version']}. tilenorm tuning database: "
                     f"{'on' if tilenorm['tuning_database'] else 'off'}.")
    else:
        lines.append(f"tilenorm tuning database: {'on' if tilenorm['tuning_database'] else 'off'}; "
                     "no torch_compare results given.")
    timing = [timing_summary("tilenorm-bench", ours)]
    if torch is not None:
        timing.append(timing_summary("torch_compare", {**eager, **compiled}) +
                      f" (asked for `{torch.get('timing', 'auto')}`)")
    lines += ["", f"Timing: {'; '.join(timing)}."]
    if tilenorm.get("programmatic_launch"):
        lines += ["", "tilenorm launched with programmatic dependent launch "
                  "(`--programmatic-launch`): back to back, each launch overlaps the end of the "
                  "one before it; PyTorch's launches and the copy ceiling are plain."]
    lines += ["", "Copy ceilings (each implementation's % is against its own run's ceiling):",
              ceiling_line("tilenorm-bench", tilenorm)]
    if torch is not None:
        lines.append(ceiling_line("torch_compare", torch))
    lines += consistency_warnings(tilenorm, torch, ours, {"eager": eager, "compile": compiled})
    goals = "; ".join(f"{pass_name} {goal_text(pass_name)}" for pass_name in GOAL_PERCENT)
    lines += ["", f"✓ marks the goal, of the ceiling: {goals}."]
    if any("graph_error" in row for row in (*eager.values(), *compiled.values())):
        lines.append(f"{FALLBACK_MARK.strip()} marks PyTorch times taken with CUDA events because "
                     "the CUDA-graph capture failed (`--timing auto`).")
    strided = any(key[4] != key[3] for key in (*ours, *eager, *compiled))
    for pass_name in passes:
        lines += [""] + pass_table(pass_name, ours, eager, compiled, strided)
    by_compile, by_eager = ratios(ours, compiled), ratios(ours, eager)
    if by_compile or by_eager:
        lines += ["", "## tilenorm / PyTorch, geometric mean over shapes timed the same way", "",
                  "| op | pass | tilenorm / compile | shapes | tilenorm / eager | shapes |",
                  "|---|---|---:|---:|---:|---:|"]
        for op, pass_name in sorted(set(by_compile) | set(by_eager),
                                    key=lambda key: (key[0], passes.index(key[1]))):
            cells = []
            for found in (by_compile, by_eager):
                values = found.get((op, pass_name))
                cells += [f"{geometric_mean(values):.2f}×", str(len(values))] if values \
                    else ["—", "0"]
            lines.append(f"| {op} | {pass_name} | {' | '.join(cells)} |")
    recompute = recompute_table(ours)
    if recompute:
        lines += [""] + recompute
    decode = decode_table(tilenorm, ours, eager, compiled)
    if decode:
        lines += [""] + decode
    untuned = untuned_table(ours, rows_by_key(heuristic))
    if untuned:
        lines += [""] + untuned
    if baseline is not None:
        lines += [""] + baseline_table(tilenorm, ours, baseline, rows_by_key(baseline))
    if variants:
        runs_by_key = [(name, document, rows_by_key(document)) for name, document in variants]
        lines += [""] + variants_table(tilenorm, ours, runs_by_key)
    runs = (("tilenorm", tilenorm), ("torch", torch), ("heuristic", heuristic),
            ("baseline", baseline), *((f"variant {name}", document) for name, document in variants))
    failures = [(row, run) for run, document in runs if document is not None
                for row in document["rows"] if "error" in row]
    if failures:
        lines += ["", "Failures:"]
        lines += [f"- {row['op']} {row_pass(row)} {row.get('impl', run)} "
                  f"{shape_text(row_key(row))}: {' '.join(row['error'].split())}"
                  for row, run in failures]  # one line each
    # Sections join with a blank line; a table that ends with one would make two.
    lines = [line for index, line in enumerate(lines)
             if line or index == 0 or lines[index - 1]]
    return "\n".join(lines) + "\n"


def plot(tilenorm, torch, path):
    """TB/s for each shape: one row of panels per pass, one panel per op, one line per
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
    ops = sorted({key[0] for key in keys}) or ["no results"]
    passes = ordered_passes({key[1] for key in keys}) or ["forward"]
    figure, axes = pyplot.subplots(len(passes), len(ops), figsize=(8 * len(ops), 5 * len(passes)),
                                   squeeze=False)
    for axis_row, pass_name in zip(axes, passes):
        for axis, op in zip(axis_row, ops):
            shapes = sorted({key[2:] for key in keys if key[:2] == (op, pass_name)},
                            key=lambda shape: (shape[1], shape[0], shape[2]))
            position = {shape: index for index, shape in enumerate(shapes)}
            for impl in IMPLEMENTATIONS:
                points = sorted((position[key[2:]], row["tbps"]) for key, row
                                in series[impl].items()
                                if key[:2] == (op, pass_name) and timed(row))
                if points:
                    axis.plot(*zip(*points), marker="o", label=impl)
            for name, document, style in (("copy ceiling (tilenorm-bench)", tilenorm, "--"),
                                          ("copy ceiling (torch_compare)", torch, ":")):
                if document is not None:
                    axis.axhline(document["copy_ceiling"]["tbps"], color="gray", linestyle=style,
                                 label=name)
            axis.set_xticks(range(len(shapes)))
            axis.set_xticklabels([f"{m}x{n}" + (f"/{stride}" if stride != n else "")
                                  for m, n, stride in shapes], rotation=45, ha="right")
            axis.set_xlabel("shape M x N (/row stride)")
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
    parser.add_argument("--heuristic", metavar="PATH",
                        help="tilenorm-bench --no-tuning-db --json output of the same shapes, "
                        "compared with --tilenorm's (the untuned goal)")
    parser.add_argument("--baseline", metavar="PATH",
                        help="tilenorm-bench --json output of an older tree on the same shapes "
                        "(scripts/device-run baseline), compared with --tilenorm's")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=PATH",
                        help="tilenorm-bench --json output of another tree on the same shapes "
                        "(scripts/device-run variants); repeat for several: one table of each "
                        "one's points against --tilenorm's")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table to PATH")
    parser.add_argument("--plot", metavar="PATH",
                        help="write a PNG plot to PATH (needs matplotlib)")
    parser.add_argument("--strict-timing", action="store_true",
                        help="refuse (exit 1, nothing written) when a tilenorm row and the "
                        "PyTorch row of the same shape were timed by different methods")
    args = parser.parse_args()
    variant_paths = [spec.partition("=")[::2] for spec in args.variant]
    for spec, (name, path) in zip(args.variant, variant_paths):
        if not (name and path and "=" in spec):
            parser.error(f"--variant takes NAME=PATH, got {spec!r}")
    try:
        tilenorm = load(args.tilenorm)
        torch = load(args.torch) if args.torch else None
        heuristic = load(args.heuristic) if args.heuristic else None
        baseline = load(args.baseline) if args.baseline else None
        variants = [(name, load(path)) for name, path in variant_paths]
        mixed = mixed_timing(rows_by_key(tilenorm), {impl: rows_by_key(torch, impl)
                                                     for impl in ("eager", "compile")})
        text = markdown(tilenorm, torch, heuristic, baseline, variants)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"report.py: cannot read the results: {type(error).__name__}: {error}",
              file=sys.stderr)
        return 2
    if mixed and args.strict_timing:
        print(f"report.py: {len(mixed)} matched rows were timed by different methods, e.g. "
              f"{mixed[0][0][0]} {mixed[0][0][1]} {shape_text(mixed[0][0])}: tilenorm "
              f"{mixed[0][2]}, {mixed[0][1]} {mixed[0][3]}; rerun both tools with the same "
              "--timing", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as file:
            file.write(text)
    if args.plot and not plot(tilenorm, torch, args.plot):
        print("report.py: matplotlib is not available; no plot written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
