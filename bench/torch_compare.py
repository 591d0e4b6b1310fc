#!/usr/bin/env python3
"""Times PyTorch's LayerNorm and RMSNorm (and the residual add before an RMSNorm, as
examples/residual_rms_norm.hpp writes it), eager and torch.compile, at the shapes tilenorm-bench
uses (--shapes MxN,..., or M = --elements // N for each --n; --row-stride pads the rows): the
forward, the backward, and the recomputing backward (forward + backward, as under activation
checkpointing). Also the device-to-device copy ceiling. Writes JSON for report.py.

Needs a GPU and PyTorch (with Triton for torch.compile); see bench/README.md.
Exit status: 0 all timed, 1 some (op, pass, implementation, N) failed, 2 bad arguments, 3 no
PyTorch or no GPU.
"""
import argparse
import datetime
import json
import statistics
import sys
import time
import warnings

DEFAULT_NS = "128,512,1024,2048,4096,5120,8192,16384,32768,65536,131072,262144"
DEFAULT_ELEMENTS = 1 << 26
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# Each op's row inputs (x first), row outputs and column parameters, in call order: the
# function is f(*inputs, *params) and returns its outputs. "rows": the M x N tensors each pass
# counts in its bytes, as tilenorm-bench counts its kernel's row slots. Parameters, their
# gradients and per-row statistics are left out.
NORM_ROWS = {"forward": 2, "backward": 3, "recompute": 3}  # x + y; x, dy + dx
OPS = {
    "layer_norm": {"inputs": ("x",), "outputs": ("y",), "params": ("weight", "bias"),
                   "rows": NORM_ROWS},
    "rms_norm": {"inputs": ("x",), "outputs": ("y",), "params": ("weight",), "rows": NORM_ROWS},
    # h = x + residual, y = RMSNorm(h) * weight: the pre-norm block's add & norm. Forward: x,
    # residual + h, y. Backward: h, dh, dy + dx (the residual's gradient is the same tensor; h
    # is read back in place of x and residual). Recompute: x, residual, dh, dy + dx.
    "residual_rms_norm": {"inputs": ("x", "residual"), "outputs": ("h", "y"),
                          "params": ("weight",),
                          "rows": {"forward": 4, "backward": 4, "recompute": 5}},
}
DEFAULT_OPS = ("layer_norm", "rms_norm")
IMPLS = ("eager", "compile")
# forward: y = f(x). backward: the gradients of a y computed outside the timed region.
# recompute: y = f(x) and its gradients, the unit activation checkpointing runs in the backward.
PASSES = ("forward", "backward", "recompute")
DEFAULT_PASSES = "forward,backward"
# auto: CUDA-graph replays, and CUDA events around back-to-back calls for a row whose capture
# fails; graph: a failed capture fails the row; events: always events.
TIMINGS = ("auto", "graph", "events")
EPS = 1e-5
# Calls before timing: they also queue enough GPU work that Python enqueues the timed calls
# ahead of the GPU, so no host gap lands between a pair of events.
WARMUP_CALLS = 10
COPY_BYTES = 2 << 30
COPY_WARMUPS = 2
COPY_REPEATS = 10
# torch.compile against eager on the first input: a couple of units in the last place.
TOLERANCES = {"bf16": 2e-2, "fp16": 2e-3, "fp32": 1e-4}
# Calls per timing sample, graph or events (rounded up to whole passes over the buffer sets), as
# in tilenorm-bench; and the GPU sleep that keeps the GPU busy while Python queues an events batch.
BATCH_CALLS = 10
# Buffer sets rotate until one pass is larger than twice the L2, but never more than this many
# (tiny shapes: their later sets stay in the L2), as in tilenorm-bench.
MAX_BUFFER_SETS = 8192
SLEEP_CALIBRATION_CYCLES = 10_000_000
SLEEP_MARGIN_US = 50.0


def comma_list(text, convert):
    items = text.split(",")
    if any(not item for item in items):
        raise argparse.ArgumentTypeError(f"empty item in '{text}'")
    return [convert(item) for item in items]


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"needs a positive integer, got '{text}'")
    return value


def non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"needs a non-negative integer, got '{text}'")
    return value


def shape(text):
    """'MxN' -> (M, N)."""
    m, sep, n = text.partition("x")
    try:
        if sep:
            return positive_int(m), positive_int(n)
    except argparse.ArgumentTypeError:
        pass
    raise argparse.ArgumentTypeError(f"'{text}' is not MxN with positive M and N "
                                     "(such as 65536x1024)")


def choice_list(choices):
    def convert(item):
        if item not in choices:
            raise argparse.ArgumentTypeError(f"'{item}' is not one of {', '.join(choices)}")
        return item

    return lambda text: comma_list(text, convert)


def parse_args():
    parser = argparse.ArgumentParser(
        description="Time F.layer_norm / F.rms_norm (eager and torch.compile; forward, "
        "backward, recomputing backward) and the copy ceiling; write JSON for bench/report.py.")
    parser.add_argument("--dtype", choices=sorted(DTYPE_NAMES), default="bf16")
    parser.add_argument("--shapes", type=lambda text: comma_list(text, shape),
                        help="shapes MxN, such as 65536x1024,1x4096 (default: from --n and "
                        "--elements)")
    parser.add_argument("--n", type=lambda text: comma_list(text, positive_int),
                        help=f"row lengths, M = elements // N for each (default {DEFAULT_NS})")
    parser.add_argument("--elements", type=positive_int,
                        help="elements per shape with --n; M = elements // N (default 2^26)")
    parser.add_argument("--row-stride", type=positive_int, metavar="S",
                        help="elements from one row's start to the next, >= every N: x (and dy) "
                        "are views x = storage[:, :N] of padded M x S storage; bytes counted are "
                        "still M * N per tensor (default: contiguous rows)")
    parser.add_argument("--ops", type=choice_list(OPS), default=list(DEFAULT_OPS),
                        help="layer_norm (weight + bias), rms_norm (weight), residual_rms_norm "
                        "(h = x + residual returned with y = F.rms_norm(h) * weight); default "
                        "layer_norm,rms_norm")
    parser.add_argument("--impls", type=choice_list(IMPLS), default=list(IMPLS),
                        help="eager, compile; default both")
    parser.add_argument("--pass", dest="passes", type=choice_list(PASSES),
                        default=comma_list(DEFAULT_PASSES, str),
                        help="forward, backward (gradients of the row inputs and parameters), "
                        f"recompute (forward + backward); default {DEFAULT_PASSES}")
    parser.add_argument("--repeats", type=positive_int, default=50,
                        help="timing samples (graph replays or event pairs) per shape; the "
                        "median is reported (default 50)")
    parser.add_argument("--timing", choices=TIMINGS, default="auto",
                        help="graph: the calls captured into one CUDA graph, one replay per "
                        "sample; events: one event pair around back-to-back calls per sample; "
                        "auto (default): graph, and events for a row whose capture fails")
    parser.add_argument("--profile-calls", type=non_negative_int, default=20,
                        help="calls timed once more by the PyTorch profiler, for kernel_us "
                        "(GPU kernel time summed, as the anchors); 0 skips it (default 20)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    args = parser.parse_args()
    if args.shapes is not None:
        if args.n is not None or args.elements is not None:
            parser.error("--shapes excludes --n and --elements")
        args.elements = None
    else:
        args.n = args.n if args.n is not None else comma_list(DEFAULT_NS, int)
        args.elements = args.elements if args.elements is not None else DEFAULT_ELEMENTS
        too_long = [n for n in args.n if n > args.elements]
        if too_long:
            parser.error(f"--n {too_long[0]} exceeds --elements {args.elements}: no full row fits")
        args.shapes = [(args.elements // n, n) for n in args.n]
    if args.row_stride is not None:
        narrow = [(m, n) for m, n in args.shapes if n > args.row_stride]
        if narrow:
            m, n = narrow[0]
            parser.error(f"--row-stride {args.row_stride} is less than N of shape {m}x{n}")
    return args


def row_stride_for(args, n):
    return args.row_stride if args.row_stride is not None else n


def batch_calls(count):
    """Calls per timing sample: whole passes over the `count` buffer sets, at least BATCH_CALLS."""
    return count * -(-BATCH_CALLS // count)


def median_and_min(starts, ends):
    samples = [1e3 * start.elapsed_time(end) for start, end in zip(starts, ends)]
    return statistics.median(samples), min(samples)


def describe(error):
    return f"{type(error).__name__}: {error}".strip()


def warm_up(torch, unit, count, stream):
    """WARMUP_CALLS calls of unit(i) on `stream`. torch.compile's lazy backward compilation and
    Inductor's first-launch autotuning happen here, never inside a capture or a timed region."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(WARMUP_CALLS):
            unit(i % count)
    torch.cuda.current_stream().wait_stream(stream)


def time_graph(torch, unit, count, repeats, stream):
    """Median and minimum microseconds per call of unit(i), from CUDA-graph replays.

    batch_calls(count) calls, rotating over the buffer sets i (through more memory than the L2
    holds), are captured into a graph once, on `stream`; for the backward that is the stream its
    autograd graph was recorded on, so the autograd engine launches the backward kernels into
    the capture. Each replay is timed with its own event pair and divided by the number of
    calls. Python dispatch then cannot stretch the GPU time, which is what the anchors measured
    too (kernel time summed by the profiler)."""
    calls = batch_calls(count)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        # kept alive: the graph writes into them
        outputs = [unit(i % count) for i in range(calls)]
    graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    del outputs, graph
    median_us, min_us = median_and_min(starts, ends)
    return median_us / calls, min_us / calls, calls


_SLEEP_RATE = []  # cycles per microsecond of torch.cuda._sleep (None: no _sleep), measured once


def sleep_cycles_per_us(torch):
    if not _SLEEP_RATE:
        sleep = getattr(torch.cuda, "_sleep", None)
        rate = None
        if sleep is not None:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            sleep(SLEEP_CALIBRATION_CYCLES)
            end.record()
            end.synchronize()
            rate = SLEEP_CALIBRATION_CYCLES / (1e3 * start.elapsed_time(end))
        _SLEEP_RATE.append(rate)
    return _SLEEP_RATE[0]


def time_events(torch, unit, count, repeats, stream):
    """Median and minimum microseconds per call of unit(i), from CUDA events around
    back-to-back calls, for work that cannot be captured into a CUDA graph.

    Each event pair encloses batch_calls(count) calls (whole passes over the buffer sets, at
    least BATCH_CALLS), as many as a graph replay holds. Before each pair the GPU sleeps for
    twice as long as Python took to queue an untimed batch, so the batch is queued (up to the
    launch queue's depth) before the GPU reaches the first event, and the calls run back to
    back without host gaps between them. The queueing time is measured once: a batch longer
    than the launch queue keeps the host waiting on the GPU, sleep included, so timing each
    batch again would double the next sleep every sample."""
    calls = batch_calls(count)
    rate = sleep_cycles_per_us(torch)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        begin = time.perf_counter()
        for i in range(calls):  # untimed: measures how long Python takes to queue a batch
            unit(i % count)
        host_us = 1e6 * (time.perf_counter() - begin)
        for start, end in zip(starts, ends):
            if rate is not None:
                torch.cuda._sleep(int(rate * (2.0 * host_us + SLEEP_MARGIN_US)))
            start.record()
            for i in range(calls):
                unit(i % count)
            end.record()
    torch.cuda.synchronize()
    median_us, min_us = median_and_min(starts, ends)
    return median_us / calls, min_us / calls, calls


def time_unit(torch, args, unit, count, stream):
    """Warm-up, then the timing fields of a row: "timing" ("graph" or "events"),
    launches_per_sample (calls per sample), median_us, min_us, and "graph_error" where --timing
    auto fell back to events."""
    warm_up(torch, unit, count, stream)
    fallback = None
    if args.timing != "events":
        try:
            median_us, min_us, calls = time_graph(torch, unit, count, args.repeats, stream)
            return {"timing": "graph", "launches_per_sample": calls, "median_us": median_us,
                    "min_us": min_us}
        except Exception as error:
            if args.timing == "graph":
                raise
            fallback = describe(error)
            torch.cuda.synchronize()
    median_us, min_us, calls = time_events(torch, unit, count, args.repeats, stream)
    fields = {"timing": "events", "launches_per_sample": calls, "median_us": median_us,
              "min_us": min_us}
    if fallback is not None:
        fields["graph_error"] = fallback
    return fields


def profiled_kernel_us(torch, unit, count, calls, stream):
    """GPU time per call of unit(i), summed by the PyTorch profiler over `calls` calls (whole
    passes over the buffer sets) as the anchors measured it: the self time of the device events,
    which is the profiler table's "Self CUDA time total", user annotations left out."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    calls = count * -(-calls // count)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events")  # one cycle only
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            for i in range(calls):
                unit(i % count)
            torch.cuda.synchronize()
    total_us = 0.0
    for event in profiler.events():
        if event.device_type != DeviceType.CUDA or getattr(event, "is_user_annotation", False):
            continue
        total_us += (event.self_device_time_total if hasattr(event, "self_device_time_total")
                     else event.self_cuda_time_total)
    if total_us <= 0.0:
        raise RuntimeError("the profiler recorded no GPU time")
    return total_us / calls


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
    """The op as a function of (*inputs, *params), the anchors' affine variants."""
    if op == "layer_norm":
        return lambda x, weight, bias: F.layer_norm(x, (x.shape[-1],), weight, bias, EPS)
    if op == "residual_rms_norm":
        def residual_rms_norm(x, residual, weight):
            h = x + residual
            return h, F.rms_norm(h, (h.shape[-1],), weight, EPS)

        return residual_rms_norm
    return lambda x, weight: F.rms_norm(x, (x.shape[-1],), weight, EPS)


def as_tuple(result):
    """A function's outputs as a tuple (one output is a tensor)."""
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def function_source(torch, F, op):
    """impl -> the op's function. One torch.compile per (op, N), shared by that shape's passes
    (inference and training compile as separate entries of it). A fresh, shape-specialised
    compile per shape: without the reset, the recompile limit would silently fall back to eager
    after a few shapes."""
    eager = norm_function(F, op)
    compiled = []

    def get(impl):
        if impl == "eager":
            return eager
        if not compiled:
            torch._dynamo.reset()
            compiled.append(torch.compile(eager, fullgraph=True, dynamic=False))
        return compiled[0]

    return get


def keep_saved_tensors():
    """Lets a compiled backward run more than once on one forward (retain_graph=True), as the
    backward pass times it: AOTAutograd otherwise donates the saved tensors' memory to the
    backward's outputs and refuses a second call. Donation saves memory, not traffic. Returns
    the donated_buffer setting now in force (None where this PyTorch has none)."""
    try:
        from torch._functorch import config
    except ImportError:
        return None
    if not hasattr(config, "donated_buffer"):
        return None
    config.donated_buffer = False
    return False


def make_params(torch, op, n, dtype):
    return [torch.empty(n, dtype=dtype, device="cuda").uniform_(-1.5, 1.5)
            for _ in OPS[op]["params"]]


def pass_tensors(op, pass_name):
    """M x N tensors counted in the bytes (OPS)."""
    return OPS[op]["rows"][pass_name]


def rows(torch, m, n, stride, dtype, low, high):
    """An M x N tensor of values uniform in [low, high): contiguous when stride == N, else the
    view storage[:, :N] of an M x stride storage (a leaf, detached from the storage's graph)."""
    if stride == n:
        return torch.empty(m, n, dtype=dtype, device="cuda").uniform_(low, high)
    storage = torch.zeros(m, stride, dtype=dtype, device="cuda")
    storage[:, :n].uniform_(low, high)
    return storage[:, :n].detach()


def make_slots(torch, op, pass_name, m, n, stride, dtype, l2_bytes):
    """The buffer sets the calls rotate over, each (inputs, output gradients): ((x,), ()) for the
    forward, ((x,), (dy,)) with x a leaf that requires grad otherwise; rows `stride` elements
    apart. At least two, and more until one pass over them exceeds twice the L2 (so every call
    reads its inputs from DRAM), at most MAX_BUFFER_SETS."""
    set_bytes = pass_tensors(op, pass_name) * m * n * dtype.itemsize
    sets = min(max(2, 2 * l2_bytes // set_bytes + 1), MAX_BUFFER_SETS)
    training = pass_name != "forward"
    slots = []
    for _ in range(sets):
        inputs = tuple(rows(torch, m, n, stride, dtype, -2.0, 2.5).requires_grad_(training)
                       for _ in OPS[op]["inputs"])
        grads = tuple(rows(torch, m, n, stride, dtype, -1.0, 1.0)
                      for _ in (OPS[op]["outputs"] if training else ()))
        slots.append((inputs, grads))
    return slots


def make_unit(torch, pass_name, function, params, slots, outputs):
    """The timed unit of a pass as a function of the buffer-set index i. backward: the gradients
    of outputs[i], computed once before timing (retain_graph keeps its saved tensors for the
    next call), so only the backward kernels run. recompute: forward and backward together,
    what activation checkpointing runs in the backward."""
    if pass_name == "forward":
        return lambda i: function(*slots[i][0], *params)
    if pass_name == "backward":
        return lambda i: torch.autograd.grad(outputs[i], (*slots[i][0], *params), slots[i][1],
                                             retain_graph=True)
    return lambda i: torch.autograd.grad(as_tuple(function(*slots[i][0], *params)),
                                         (*slots[i][0], *params), slots[i][1])


def check_forward(torch, eager, function, inputs, params, tolerance):
    actual = function(*inputs, *params)  # compiles
    expected = eager(*inputs, *params)
    torch.testing.assert_close(actual, expected, atol=tolerance, rtol=tolerance)


def check_gradients(torch, op, eager, function, slot, params, tolerance):
    """torch.compile's gradients against eager's on one buffer set (this also compiles the
    training graph and, at the first gradient, its backward). The parameters' gradients are
    sums over M rows: their rounding grows with the summands rather than with each sum, so
    their absolute tolerance scales with the largest of them."""
    inputs, grads = slot
    wrt = (*inputs, *params)
    expected = torch.autograd.grad(as_tuple(eager(*inputs, *params)), wrt, grads)
    actual = torch.autograd.grad(as_tuple(function(*inputs, *params)), wrt, grads)
    rows_wrt = len(inputs)
    names = [f"d{name}" for name in (*OPS[op]["inputs"], *OPS[op]["params"])]
    for index, (name, got, want) in enumerate(zip(names, actual, expected)):
        atol = tolerance if index < rows_wrt else tolerance * max(1.0, want.abs().max().item())
        try:
            torch.testing.assert_close(got, want, atol=atol, rtol=tolerance)
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None


def output_row_stride(result):
    """The row stride of what one call returns: its first output (y, or h), or dx for the
    backward passes."""
    tensor = result if not isinstance(result, (tuple, list)) else result[0]
    return tensor.stride(0)


def run_row(torch, args, op, pass_name, impl, n, slots, params, functions, stream, ceiling_tbps):
    x = slots[0][0][0]
    row = {"op": op, "pass": pass_name, "impl": impl, "m": x.shape[0], "n": n,
           "row_stride": row_stride_for(args, n),
           "bytes": pass_tensors(op, pass_name) * x.numel() * x.element_size(),
           "buffer_sets": len(slots)}
    try:
        eager, function = functions("eager"), functions(impl)
        if impl == "compile":
            tolerance = TOLERANCES[args.dtype]
            if pass_name == "forward":
                check_forward(torch, eager, function, slots[0][0], params, tolerance)
            else:
                check_gradients(torch, op, eager, function, slots[0], params, tolerance)
        torch.cuda.synchronize()
        outputs = None
        if pass_name == "backward":
            # y once, outside the timed region, on the stream the backward is captured on.
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                outputs = [as_tuple(function(*slot[0], *params)) for slot in slots]
        unit = make_unit(torch, pass_name, function, params, slots, outputs)
        row.update(time_unit(torch, args, unit, len(slots), stream))
        # What PyTorch returns for a padded x (eager LayerNorm copies x to contiguous rows).
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            row["output_row_stride"] = output_row_stride(unit(0))
        torch.cuda.current_stream().wait_stream(stream)
        row["tbps"] = row["bytes"] / row["median_us"] / 1e6
        row["percent_of_ceiling"] = 100.0 * row["tbps"] / ceiling_tbps
        if args.profile_calls:
            try:  # optional: a profiler failure does not fail the row
                row["kernel_us"] = profiled_kernel_us(torch, unit, len(slots),
                                                      args.profile_calls, stream)
            except Exception as error:
                row["kernel_us_error"] = describe(error)
    except Exception as error:  # one failing shape must not lose the others
        row["error"] = describe(error)
    return row


HEADER = (f"{'op':<12}{'pass':<11}{'impl':<9}{'M':>10}{'N':>8}{'stride':>8}{'us':>10}{'TB/s':>8}"
          f"{'%ceil':>8}{'kernel us':>11}  timing")


def print_row(row):
    where = (f"{row['op']} {row['pass']} {row['impl']} {row['m']}x{row['n']} "
             f"stride {row['row_stride']}")
    prefix = (f"{row['op']:<12}{row['pass']:<11}{row['impl']:<9}{row['m']:>10}{row['n']:>8}"
              f"{row['row_stride']:>8}")
    if "error" in row:
        print(f"{prefix}  FAILED", flush=True)
        print(f"torch_compare: {where}: {row['error']}", file=sys.stderr)
        return
    kernel = f"{row['kernel_us']:.1f}" if "kernel_us" in row else "-"
    print(f"{prefix}{row['median_us']:>10.2f}{row['tbps']:>8.2f}{row['percent_of_ceiling']:>8.1f}"
          f"{kernel:>11}  {row['timing']}", flush=True)
    if "graph_error" in row:
        print(f"torch_compare: {where}: timed with events, the CUDA-graph capture failed: "
              f"{row['graph_error']}", file=sys.stderr)
    if "kernel_us_error" in row:
        print(f"torch_compare: {where}: no profiler kernel time: {row['kernel_us_error']}",
              file=sys.stderr)


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
    # For every training compile, so that recompute rows do not depend on --pass.
    donated_buffer = (keep_saved_tensors()
                      if any(name != "forward" for name in args.passes) else None)
    print(f"device: {properties.name}, torch {torch.__version__}, triton {triton_version}\n"
          f"dtype {args.dtype}, {len(args.shapes)} shapes"
          f"{f', row stride {args.row_stride}' if args.row_stride is not None else ''}, "
          f"passes {','.join(args.passes)}, "
          f"median of {args.repeats} timings, --timing {args.timing}\n"
          f"bytes: forward x read + y written; backward and recompute x and dy read + dx written "
          f"(residual_rms_norm: forward x, residual + h, y; backward h, dh, dy + dx; recompute "
          f"x, residual, dh, dy + dx)\n"
          f"copy ceiling: {ceiling['tbps']:.2f} TB/s (Tensor.copy_ of 2 GiB, "
          f"{ceiling['median_us']:.1f} us median, bytes read + written)\n")
    print(HEADER)

    rows = []
    stream = torch.cuda.Stream()  # warm-ups, captures and the backward's forward run on it
    for op in args.ops:
        for m, n in args.shapes:
            params = make_params(torch, op, n, dtype)
            functions = function_source(torch, F, op)
            for pass_name in args.passes:
                training = pass_name != "forward"
                with torch.set_grad_enabled(training):
                    slots = make_slots(torch, op, pass_name, m, n, row_stride_for(args, n),
                                       dtype, l2_bytes)
                    pass_params = ([param.detach().requires_grad_() for param in params]
                                   if training else params)
                    for impl in args.impls:
                        rows.append(run_row(torch, args, op, pass_name, impl, n, slots,
                                            pass_params, functions, stream, ceiling["tbps"]))
                        print_row(rows[-1])
                del slots, pass_params
            del params, functions

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
            "shapes": [f"{m}x{n}" for m, n in args.shapes],
            "row_stride": args.row_stride,
            "eps": EPS,
            "repeats": args.repeats,
            "passes": args.passes,
            "timing": args.timing,
            "profile_calls": args.profile_calls,
            "compile_donated_buffer": donated_buffer,
            "copy_ceiling": ceiling,
            "rows": rows,
        }
        with open(args.json, "w") as file:
            json.dump(result, file, indent=2)
            file.write("\n")
    return 0 if all("error" not in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
