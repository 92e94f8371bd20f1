#!/usr/bin/env python3
"""Time the PyTorch peers (eager, naive, torch.compile) of the tilefuse bench cases.

    python3 bench/peers.py --out FILE.json [--cases bias_gelu,softmax,layernorm,rmsnorm] [--quick]
    python3 bench/peers.py --out FILE.json --cases none --graphs G1.json G2.json ...

--graphs: graphs as `tilefuse graph NAME --json` writes them; each is run by an interpreter of
its nodes (one PyTorch op per node) in eager mode and under torch.compile, as case NAME.

Everything runs in one process on cuda:0. The device-to-device copy ceiling is
always measured, so GB/s can be put against it. Output keys are the same as the
tilefuse CLI's JSON so that bench/report.py can merge the two.
"""
import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys

CASES = ["bias_gelu", "softmax", "layernorm", "rmsnorm"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--cases", default=",".join(CASES), help="comma list out of " + ",".join(CASES))
    p.add_argument("--quick", action="store_true", help="few repetitions: a smoke run, not a measurement")
    p.add_argument("--graphs", nargs="*", default=[], help="graph JSON files (tilefuse graph NAME --json)")
    a = p.parse_args(argv)
    a.cases = [c.strip() for c in a.cases.split(",") if c.strip() and c.strip() != "none"]
    bad = [c for c in a.cases if c not in CASES]
    if bad:
        p.error("unknown case(s) %s; known: %s" % (",".join(bad), ",".join(CASES)))
    return a


# Parse before importing torch so that --help and bad flags work anywhere, and a
# machine without torch gets one clear line instead of a traceback.
ARGS = parse_args() if __name__ == "__main__" else None
try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.exit("peers.py: PyTorch is required (import torch failed: %s); run it on the GPU machine" % e)

DEVICE = "cuda"  # bench/peers.py runs on the GPU; an import may point it elsewhere
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "bool": torch.bool}
# The benchmark cases run in the two dtypes the benchmark has; graphs (--graphs) may use any above.
BENCH_DTYPES = ("f32", "bf16")

# Repetition policy; --quick replaces it.
WARM_CALLS, WARM_MS, TIMED_CALLS, TIMED_MS, MAX_CALLS = 5, 25.0, 50, 200.0, 5000


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def bench(fn):
    """Median/min/p90 of fn() in ms, each call between its own pair of CUDA events."""
    torch.cuda.synchronize()
    # Warm-up: at least WARM_CALLS calls and at least WARM_MS of GPU time. The
    # warm-up time also gives the per-call estimate that sizes the timed loop.
    calls, t0, t1 = 0, torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    while True:
        fn()
        calls += 1
        if calls >= WARM_CALLS:
            t1.record()
            t1.synchronize()
            spent = t0.elapsed_time(t1)
            if spent >= WARM_MS or calls >= MAX_CALLS:
                break
    per_call = max(spent / calls, 1e-3)
    n = min(MAX_CALLS, max(TIMED_CALLS, math.ceil(TIMED_MS / per_call)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize()
    # Park the stream on a sleep kernel so the CPU gets ahead of the GPU: the
    # events then measure GPU time, not Python/launch overhead of an idle GPU.
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(20_000_000)
    for i in range(n):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return {"median_ms": statistics.median(ms), "min_ms": ms[0],
            "p90_ms": ms[min(n - 1, math.ceil(0.9 * n) - 1)], "calls": n}


def entry(case, dtype, shape, impl, nbytes_min, f, args, compile=False):
    """One result row for f(*args). Compiling or running may raise (torch.compile,
    OOM); that is recorded in the row rather than ending the run."""
    row = {"case": case, "dtype": dtype, "shape": list(shape), "impl": impl,
           "median_ms": None, "min_ms": None, "p90_ms": None, "bytes": nbytes_min, "gbps": None}
    try:
        if compile:
            # Fresh dynamo state per case: no recompile-limit pile-up across
            # shapes, and dynamic=False so each shape gets static-shape kernels
            # (what a fixed-shape user gets), not an automatic-dynamic one.
            torch._dynamo.reset()
            f = torch.compile(f, dynamic=False)
        f(*args)  # first call compiles (torch.compile is lazy): keep it out of timing
        torch.cuda.synchronize()
        r = bench(lambda: f(*args))
        row.update(median_ms=r["median_ms"], min_ms=r["min_ms"], p90_ms=r["p90_ms"],
                   gbps=nbytes_min / (r["median_ms"] * 1e-3) / 1e9)
    except Exception as e:  # noqa: BLE001 -- any failure becomes an error row
        row["error"] = ("%s: %s" % (type(e).__name__, " ".join(str(e).split())))[:1000]
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 -- a sticky CUDA error shows up in later rows
            pass
    f = None
    torch.cuda.empty_cache()
    if "error" in row:
        status = "error: " + row["error"][:200]
    else:
        status = "%.4f ms  %.0f GB/s" % (row["median_ms"], row["gbps"])
    print("  %-10s %-4s %-14s %-14s %s" % (case, dtype, "x".join(map(str, shape)), impl, status), flush=True)
    return row


def randn(shape, dt):
    return torch.randn(shape, device=DEVICE, dtype=DTYPES[dt])


def gelu_bias(x, b):
    return F.gelu(x + b)  # exact erf GELU (approximate="none" is the default)


def softmax(x):
    return torch.softmax(x, -1)


def naive_softmax(x):
    m = x.amax(-1, keepdim=True)
    y = x - m
    e = y.exp()
    s = e.sum(-1, keepdim=True)
    return e / s


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rms_norm(x, w):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def run_bias_gelu():
    rows = []
    for dt in BENCH_DTYPES:
        shape = (8192, 8192)
        x, b = randn(shape, dt), randn(shape[-1:], dt)
        nb = nbytes(x, b) + nbytes(x)  # x and b read once, out (same size as x) written once
        rows.append(entry("bias_gelu", dt, shape, "eager", nb, gelu_bias, (x, b)))
        rows.append(entry("bias_gelu", dt, shape, "compile", nb, gelu_bias, (x, b), compile=True))
        del x, b
        torch.cuda.empty_cache()
    return rows


def run_softmax():
    rows = []
    for dt in BENCH_DTYPES:
        for shape in [(16384, 4096), (4096, 32768), (2048, 262144)]:
            x = randn(shape, dt)
            nb = 2 * nbytes(x)
            rows.append(entry("softmax", dt, shape, "torch.softmax", nb, softmax, (x,)))
            rows.append(entry("softmax", dt, shape, "naive", nb, naive_softmax, (x,)))
            rows.append(entry("softmax", dt, shape, "compile", nb, softmax, (x,), compile=True))
            del x
            torch.cuda.empty_cache()
    return rows


def run_layernorm():
    rows = []
    for dt in BENCH_DTYPES:
        shape = (16384, 4096)
        x, w, b = randn(shape, dt), randn(shape[-1:], dt), randn(shape[-1:], dt)
        nb = nbytes(x, w, b) + nbytes(x)
        rows.append(entry("layernorm", dt, shape, "eager", nb, layer_norm, (x, w, b)))
        rows.append(entry("layernorm", dt, shape, "compile", nb, layer_norm, (x, w, b), compile=True))
        del x, w, b
        torch.cuda.empty_cache()
    return rows


def run_rmsnorm():
    rows = []
    for dt in BENCH_DTYPES:
        shape = (16384, 4096)
        x, w = randn(shape, dt), randn(shape[-1:], dt)
        nb = nbytes(x, w) + nbytes(x)
        rows.append(entry("rmsnorm", dt, shape, "eager", nb, rms_norm, (x, w)))
        rows.append(entry("rmsnorm", dt, shape, "compile", nb, rms_norm, (x, w), compile=True))
        del x, w
        torch.cuda.empty_cache()
    return rows


# ---- tilefuse graphs as PyTorch functions ----

UNARY = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
         "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid,
         "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "max": torch.maximum,
          "min": torch.minimum, "pow": torch.pow, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
          "eq": torch.eq, "ne": torch.ne}
REDUCE = {"reduce_sum": lambda x, a, k: torch.sum(x, dim=a, keepdim=k),
          "reduce_max": lambda x, a, k: torch.amax(x, dim=a, keepdim=k),
          "reduce_min": lambda x, a, k: torch.amin(x, dim=a, keepdim=k)}


def graph_function(graph):
    """f(*inputs) -> outputs, one PyTorch op per node of a tilefuse graph (JSON)."""
    nodes = graph["nodes"]
    inputs = [n for n in nodes if n["op"] == "input"]

    def constant(n):
        v = n["value"]
        v = float(v) if isinstance(v, str) else v
        return torch.tensor(v, dtype=DTYPES[n["dtype"]], device=DEVICE)

    def f(*args):
        val = {}
        for n, a in zip(inputs, args):
            val[n["id"]] = a
        for n in nodes:
            op, ops = n["op"], [val.get(o) for o in n["operands"]]
            if op == "input":
                continue
            if op == "constant":
                val[n["id"]] = constant(n)
            elif op in UNARY:
                val[n["id"]] = UNARY[op](ops[0])
            elif op == "cast":
                val[n["id"]] = ops[0].to(DTYPES[n["dtype"]])
            elif op in BINARY:
                val[n["id"]] = BINARY[op](ops[0], ops[1])
            elif op == "where":
                val[n["id"]] = torch.where(ops[0], ops[1], ops[2])
            elif op in REDUCE:
                val[n["id"]] = REDUCE[op](ops[0], tuple(n["axes"]), n["keepdim"])
            elif op == "matmul":
                a, b = ops
                if n["transpose_a"]:
                    a = a.transpose(-1, -2)
                if n["transpose_b"]:
                    b = b.transpose(-1, -2)
                val[n["id"]] = torch.matmul(a, b).to(DTYPES[n["dtype"]])
            elif op == "iota":
                axis, shape = n["axes"][0], n["shape"]
                view = [1] * len(shape)
                view[axis] = shape[axis]
                r = torch.arange(shape[axis], device=DEVICE, dtype=DTYPES[n["dtype"]]).reshape(view)
                val[n["id"]] = r.expand(shape)
            else:
                raise ValueError("no PyTorch op for tilefuse op '%s'" % op)
        return [val[o["node"]] for o in graph["outputs"]]
    return f, inputs


def run_graph(path):
    with open(path) as fh:
        graph = json.load(fh)
    f, inputs = graph_function(graph)
    args = [randn(n["shape"], n["dtype"]) if n["dtype"] != "bool" else torch.rand(n["shape"], device=DEVICE) > 0.5
            for n in inputs]
    nodes = {n["id"]: n for n in graph["nodes"]}
    size = {"f32": 4, "bf16": 2, "f16": 2, "bool": 1}
    nb = nbytes(*args) + sum(math.prod(nodes[o["node"]]["shape"]) * size[nodes[o["node"]]["dtype"]]
                             for o in graph["outputs"])
    first = inputs[0]
    rows = []
    for impl, compiled in (("eager", False), ("compile", True)):
        rows.append(entry(graph["name"], first["dtype"], first["shape"], impl, nb, f, args, compile=compiled))
    return rows


def copy_ceiling():
    size = 2 << 30  # 2 GiB, far beyond the 50 MB L2, so this is DRAM bandwidth
    src = torch.empty(size, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    r = bench(lambda: dst.copy_(src))
    nb = 2 * size  # read + written
    del src, dst
    torch.cuda.empty_cache()
    return {"copy_gbps": nb / (r["median_ms"] * 1e-3) / 1e9, "copy_bytes": nb, "copy_median_ms": r["median_ms"],
            "copy_min_ms": r["min_ms"], "copy_p90_ms": r["p90_ms"]}


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        line = out.stdout.strip().splitlines()
        return line[0].strip() if out.returncode == 0 and line else None
    except (OSError, subprocess.SubprocessError):
        return None


def triton_version():
    try:
        import triton
        return triton.__version__
    except Exception:  # noqa: BLE001 -- absent or broken triton is just "unknown"
        return None


def fmt(v, f):
    return "—" if v is None else f % v


def main():
    global WARM_CALLS, WARM_MS, TIMED_CALLS, TIMED_MS
    args = ARGS
    if not torch.cuda.is_available():
        sys.exit("peers.py: no CUDA device visible to torch")
    if args.quick:
        WARM_CALLS, WARM_MS, TIMED_CALLS, TIMED_MS = 2, 0.0, 5, 0.0
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    out = {"tool": "peers", "date": datetime.date.today().isoformat(),
           "gpu": torch.cuda.get_device_name(0), "driver": driver_version(),
           "torch": torch.__version__, "triton": triton_version(), "quick": bool(args.quick)}
    print("peers on %s (torch %s, triton %s)" % (out["gpu"], out["torch"], out["triton"]), flush=True)
    out["ceiling"] = copy_ceiling()
    print("  copy ceiling: %.1f GB/s (%.4f ms for %d bytes)" % (
        out["ceiling"]["copy_gbps"], out["ceiling"]["copy_median_ms"], out["ceiling"]["copy_bytes"]), flush=True)
    runners = {"bias_gelu": run_bias_gelu, "softmax": run_softmax, "layernorm": run_layernorm, "rmsnorm": run_rmsnorm}
    out["results"] = []
    work = [(c, runners[c]) for c in args.cases] + [(g, lambda g=g: run_graph(g)) for g in args.graphs]
    for c, run in work:
        out["results"] += run()
        # Write after each case so a crash later still leaves the finished ones.
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)

    ceil = out["ceiling"]["copy_gbps"]
    print("\n%-10s %-4s %-14s %-14s %10s %9s %7s" % ("case", "dt", "shape", "impl", "median ms", "GB/s", "%copy"))
    for r in out["results"]:
        pct = None if r["gbps"] is None else 100.0 * r["gbps"] / ceil
        print("%-10s %-4s %-14s %-14s %10s %9s %7s%s" % (
            r["case"], r["dtype"], "x".join(map(str, r["shape"])), r["impl"], fmt(r["median_ms"], "%.4f"),
            fmt(r["gbps"], "%.0f"), fmt(pct, "%.1f"), "  ERROR " + r["error"] if "error" in r else ""))
    print("copy ceiling %.1f GB/s; wrote %s" % (ceil, args.out))


if __name__ == "__main__":
    main()
