#!/usr/bin/env python3
"""Plots the committed H200 results as PNG for the README.

    python3 bench/plot.py [--bandwidth RESULT.json] [--matmul RUN_PREFIX | --matmul-interleaved LOG]
                          [--out docs/results.png]

RESULT.json is a merged result of bench/report.py (tilefuse and its peers, one run); RUN_PREFIX
names the logs scripts/gpu_matmul.sh wrote (RUN_PREFIX-matmul_runs.log and -matmul_peers.log);
LOG is an interleaved comparison of tilefuse and torch.matmul per shape (lines
"NAME: [ARGS] T ms (R×); torch matmul T ms = …", several rounds), drawn as each side's mean
TFLOP/s over the rounds. Needs matplotlib.
"""
import argparse
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEERS = [("tilefuse", "tilefuse", "#1f6f43"), ("compile", "torch.compile", "#8a8a8a"),
         ("eager", "PyTorch eager", "#c8c8c8"), ("torch.softmax", "PyTorch eager", "#c8c8c8")]


def bandwidth(ax, path):
    with open(path) as f:
        result = json.load(f)
    rows = result["summary"]
    cases = []
    for r in rows:
        key = (r["case"], r["dtype"], tuple(r["shape"]))
        if key not in cases:
            cases.append(key)
    width = 0.27
    seen = set()
    for slot, (impl, label, color) in enumerate([PEERS[0], PEERS[1], PEERS[2]]):
        xs, ys = [], []
        for i, key in enumerate(cases):
            for r in rows:
                name = "eager" if r["impl"] == "torch.softmax" else r["impl"]
                if (r["case"], r["dtype"], tuple(r["shape"])) == key and name == impl and r.get("pct_of_copy"):
                    xs.append(i + (slot - 1) * width)
                    ys.append(r["pct_of_copy"])
        ax.bar(xs, ys, width, color=color, label=None if label in seen else label)
        seen.add(label)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{c}\n{d}\n{'×'.join(str(s) for s in shape)}" for c, d, shape in cases], fontsize=7)
    ax.set_ylabel("% of device-to-device copy bandwidth")
    ax.set_ylim(0, 100)
    ax.axhline(100, color="black", linewidth=0.5)
    commit = result.get("tilefuse", {}).get("commit", "?")
    ax.set_title(f"Bandwidth-bound kernels on the H200 (commit {commit}; higher is better)", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)


def matmul(ax, prefix):
    runs = open(prefix + "-matmul_runs.log").read()
    peers = open(prefix + "-matmul_peers.log").read()
    rates = {}
    for block in runs.split("== tilefuse run ")[1:]:
        name = block.splitlines()[0].strip()
        m = re.search(r"([\d.]+) TFLOP/s", block)
        if m:
            rates[name] = float(m.group(1))
    cublas = float(re.search(r"torch.matmul bf16 8192\^3: [\d.]+ ms, ([\d.]+) TFLOP/s", peers).group(1))
    if "matmul --wgmma 0 --library-gemm never" in rates:  # runs since wgmma (the own kernels with --library-gemm never)
        own = rates.get("matmul --gemm-group 8 --library-gemm never", rates["matmul --library-gemm never"])
        bars = [("cuBLAS", cublas, "#8a8a8a"), ("tilefuse\nwgmma", own, "#1f6f43"),
                ("tilefuse\nmma.sync", rates["matmul --wgmma 0 --library-gemm never"], "#8fbf9f")]
    else:
        bars = [("cuBLAS", cublas, "#8a8a8a"), ("tilefuse\nstaged", rates["matmul"], "#1f6f43"),
                ("tilefuse\ndirect", rates["matmul --stages 0"], "#8fbf9f")]
    ax.bar(range(len(bars)), [b[1] for b in bars], color=[b[2] for b in bars])
    for i, (_, v, _) in enumerate(bars):
        ax.text(i, v + 10, f"{v:.0f}", ha="center", fontsize=8)
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([b[0] for b in bars], fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"bf16 matmul 8192³ (bundle {prefix.split('-')[-1]})", fontsize=10)


# The example GEMMs' extents (M, N, K), as dsl_examples/matmul.cpp builds them.
GEMMS = {"matmul": ("8192³", 8192, 8192, 8192), "matmul_ffn": ("8192×28672×4096", 8192, 28672, 4096),
         "matmul_4096": ("4096³", 4096, 4096, 4096), "matmul_k1024": ("16384×4096×1024", 16384, 4096, 1024)}


def matmul_interleaved(ax, path):
    own, peer = {}, {}
    for line in open(path):
        m = re.match(r"(\w+): \[[^\]]*\] ([\d.]+) ms .*; torch matmul ([\d.]+) ms", line)
        if m and m.group(1) in GEMMS:
            own.setdefault(m.group(1), []).append(float(m.group(2)))
            peer.setdefault(m.group(1), []).append(float(m.group(3)))
    names = [n for n in GEMMS if n in own]
    def tflops(n, ms):
        _, m, nn, k = GEMMS[n]
        return [2.0 * m * nn * k / (t * 1e-3) / 1e12 for t in ms]
    width = 0.38
    for slot, (label, times, color) in enumerate([("cuBLAS (torch.matmul)", peer, "#8a8a8a"),
                                                   ("tilefuse", own, "#1f6f43")]):
        ys = [sum(tflops(n, times[n])) / len(times[n]) for n in names]
        xs = [i + (slot - 0.5) * width for i in range(len(names))]
        ax.bar(xs, ys, width, color=color, label=label)
        for x, y in zip(xs, ys):
            ax.text(x, y + 10, f"{y:.0f}", ha="center", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([GEMMS[n][0] for n in names], fontsize=7)
    ax.set_ylabel("TFLOP/s")
    bundle = re.search(r"h200-([0-9a-f]+)-", path)
    ax.set_title(f"bf16 matmul, interleaved in one call (bundle {bundle.group(1) if bundle else '?'})", fontsize=10)
    ax.set_ylim(0, 1000)
    ax.legend(fontsize=7, loc="upper left", ncol=2, frameon=False)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bandwidth", default="bench/results/2026-11-30-h200-d855a94.json")
    p.add_argument("--matmul", help="a scripts/gpu_matmul.sh run's log prefix (8192³ only)")
    p.add_argument("--matmul-interleaved", default="bench/results/2026-12-02-h200-a8b7729-final_interleaved.log")
    p.add_argument("--out", default="docs/results.png")
    a = p.parse_args()
    fig, (left, right) = plt.subplots(1, 2, figsize=(17, 4.8), gridspec_kw={"width_ratios": [3, 1.4]})
    bandwidth(left, a.bandwidth)
    if a.matmul:
        matmul(right, a.matmul)
    else:
        matmul_interleaved(right, a.matmul_interleaved)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
