#!/usr/bin/env python3
"""Times PyTorch's LayerNorm and RMSNorm forward, eager and torch.compile, at the shapes
tilenorm-bench uses, plus the device-to-device copy ceiling, and writes JSON for report.py.

Needs a GPU and PyTorch (with Triton for torch.compile); see bench/README.md.
Exit status: 0 all timed, 1 some (op, implementation, N) failed, 2 bad arguments, 3 no
PyTorch or no GPU.
"""
import argparse
import datetime
import json
import statistics
import sys

DEFAULT_NS = "128,512,1024,2048,4096,5120,8192,16384,32768,65536,131072,262144"
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
OPS = ("layer_norm", "rms_norm")
IMPLS = ("eager", "compile")
EPS = 1e-5
# Calls before timing: they also queue enough GPU work that Python enqueues the timed calls
# ahead of the GPU, so no host gap lands between a pair of events.
WARMUP_CALLS = 10
COPY_BYTES = 2 << 30
COPY_WARMUPS = 2
COPY_REPEATS = 10
# torch.compile against eager on the first input: a couple of units in the last place.
TOLERANCES = {"bf16": 2e-2, "fp16": 2e-3, "fp32": 1e-4}


def comma_list(text, convert):
    items = text.split(",")
    if any(not item for item in items):
        raise argparse.ArgumentTypeError(f"empty item in '{text}'")
    return [convert(item) for item in items]


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"needs a positive integer, got '{text}'")
    return value


def choice_list(choices):
    def convert(item):
        if item not in choices:
            raise argparse.ArgumentTypeError(f"'{item}' is not one of {', '.join(choices)}")
        return item

    return lambda text: comma_list(text, convert)


def parse_args():
    parser = argparse.ArgumentParser(
        description="Time F.layer_norm / F.rms_norm (eager and torch.compile) and the copy "
        "ceiling; write JSON for bench/report.py.")
    parser.add_argument("--dtype", choices=sorted(DTYPE_NAMES), default="bf16")
    parser.add_argument("--n", type=lambda text: comma_list(text, positive_int),
                        default=comma_list(DEFAULT_NS, int),
                        help=f"row lengths (default {DEFAULT_NS})")
    parser.add_argument("--elements", type=positive_int, default=1 << 26,
                        help="elements per shape; M = elements // N (default 2^26)")
    parser.add_argument("--ops", type=choice_list(OPS), default=list(OPS),
                        help="layer_norm (weight + bias), rms_norm (weight); default both")
    parser.add_argument("--impls", type=choice_list(IMPLS), default=list(IMPLS),
                        help="eager, compile; default both")
    parser.add_argument("--repeats", type=positive_int, default=50,
                        help="timed calls per shape; the median is reported (default 50)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    args = parser.parse_args()
    too_long = [n for n in args.n if n > args.elements]
    if too_long:
        parser.error(f"--n {too_long[0]} exceeds --elements {args.elements}: no full row fits")
    return args


def median_and_min(starts, ends):
    samples = [1e3 * start.elapsed_time(end) for start, end in zip(starts, ends)]
    return statistics.median(samples), min(samples)


def time_calls(torch, call, inputs, repeats):
    """Median and minimum microseconds per call of `call`, from CUDA-graph replays.

    One call per input slot (rotating through more memory than the L2 holds) is captured into
    a graph once; each replay is timed with its own event pair and divided by the number of
    calls. Python dispatch then cannot stretch the GPU time, which is what the anchors
    measured too (kernel time summed by the profiler)."""
    slots = len(inputs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(WARMUP_CALLS):
            call(inputs[i % slots])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = [call(x) for x in inputs]  # kept alive: the graph writes into them
    graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    del outputs
    median_us, min_us = median_and_min(starts, ends)
    return median_us / slots, min_us / slots


def measure_copy_ceiling(torch):
    """A 2 GiB device-to-device Tensor.copy_, counting the bytes read and the bytes written."""
    source = torch.full((COPY_BYTES,), 0x5A, dtype=torch.uint8, device="cuda")
    destination = torch.empty_like(source)
    for _ in range(COPY_WARMUPS):
        destination.copy_(source)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(COPY_REPEATS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(COPY_REPEATS)]
    for start, end in zip(starts, ends):
        start.record()
        destination.copy_(source)
        end.record()
    torch.cuda.synchronize()
    median_us, _ = median_and_min(starts, ends)
    bytes_moved = 2 * COPY_BYTES
    return {"method": "Tensor.copy_", "bytes": bytes_moved, "median_us": median_us,
            "tbps": bytes_moved / median_us / 1e6}


def norm_function(F, op):
    """The op as a function of (x, *params), the anchors' affine variants."""
    if op == "layer_norm":
        return lambda x, weight, bias: F.layer_norm(x, (x.shape[-1],), weight, bias, EPS)
    return lambda x, weight: F.rms_norm(x, (x.shape[-1],), weight, EPS)


def make_params(torch, op, n, dtype):
    count = 2 if op == "layer_norm" else 1
    return [torch.empty(n, dtype=dtype, device="cuda").uniform_(-1.5, 1.5) for _ in range(count)]


def run_shape(torch, F, args, op, impl, n, inputs, params, ceiling_tbps):
    m = inputs[0].shape[0]
    row = {"op": op, "impl": impl, "n": n, "m": m,
           "bytes": 2 * inputs[0].numel() * inputs[0].element_size(), "buffer_sets": len(inputs)}
    try:
        eager = norm_function(F, op)
        if impl == "eager":
            function = eager
        else:
            # A fresh, shape-specialised compile per shape: without the reset, the recompile
            # limit would silently fall back to eager after a few shapes.
            torch._dynamo.reset()
            function = torch.compile(eager, fullgraph=True, dynamic=False)
            actual = function(inputs[0], *params)  # compiles
            expected = eager(inputs[0], *params)
            tolerance = TOLERANCES[args.dtype]
            torch.testing.assert_close(actual, expected, atol=tolerance, rtol=tolerance)
            del actual, expected
        torch.cuda.synchronize()
        median_us, min_us = time_calls(torch, lambda x: function(x, *params), inputs, args.repeats)
        row.update({"median_us": median_us, "min_us": min_us,
                    "tbps": row["bytes"] / median_us / 1e6})
        row["percent_of_ceiling"] = 100.0 * row["tbps"] / ceiling_tbps
    except Exception as error:  # one failing shape must not lose the others
        row["error"] = f"{type(error).__name__}: {error}".strip()
    return row


def print_row(row):
    if "error" in row:
        print(f"{row['op']:<12}{row['impl']:<9}{row['n']:>8}{row['m']:>9}  FAILED", flush=True)
        print(f"torch_compare: {row['op']} {row['impl']} N={row['n']}: {row['error']}",
              file=sys.stderr)
        return
    print(f"{row['op']:<12}{row['impl']:<9}{row['n']:>8}{row['m']:>9}{row['median_us']:>10.1f}"
          f"{row['tbps']:>8.2f}{row['percent_of_ceiling']:>8.1f}", flush=True)


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as error:
        print(f"torch_compare: PyTorch is not available: {error}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_compare: no GPU: torch.cuda.is_available() is False", file=sys.stderr)
        return 3
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None

    properties = torch.cuda.get_device_properties(0)
    l2_bytes = properties.L2_cache_size
    dtype = getattr(torch, DTYPE_NAMES[args.dtype])
    ceiling = measure_copy_ceiling(torch)
    print(f"device: {properties.name}, torch {torch.__version__}, triton {triton_version}\n"
          f"dtype {args.dtype}, M * N <= {args.elements}, median of {args.repeats} calls\n"
          f"copy ceiling: {ceiling['tbps']:.2f} TB/s (Tensor.copy_ of 2 GiB, "
          f"{ceiling['median_us']:.1f} us median, bytes read + written)\n")
    print(f"{'op':<12}{'impl':<9}{'N':>8}{'M':>9}{'us':>10}{'TB/s':>8}{'%ceil':>8}")

    rows = []
    with torch.no_grad():
        for op in args.ops:
            for n in args.n:
                m = args.elements // n
                set_bytes = 2 * m * n * dtype.itemsize  # x read + y written
                # At least two inputs, and more until one pass over them exceeds twice the L2.
                sets = max(2, 2 * l2_bytes // set_bytes + 1)
                inputs = [torch.empty(m, n, dtype=dtype, device="cuda").uniform_(-2.0, 2.5)
                          for _ in range(sets)]
                params = make_params(torch, op, n, dtype)
                for impl in args.impls:
                    rows.append(run_shape(torch, F, args, op, impl, n, inputs, params,
                                          ceiling["tbps"]))
                    print_row(rows[-1])
                del inputs, params

    if args.json:
        result = {
            "tool": "torch_compare",
            "device": properties.name,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "torch_version": torch.__version__,
            "triton_version": triton_version,
            "cuda_version": torch.version.cuda,
            "l2_bytes": l2_bytes,
            "dtype": args.dtype,
            "elements": args.elements,
            "eps": EPS,
            "repeats": args.repeats,
            "copy_ceiling": ceiling,
            "rows": rows,
        }
        with open(args.json, "w") as file:
            json.dump(result, file, indent=2)
            file.write("\n")
    return 0 if all("error" not in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
