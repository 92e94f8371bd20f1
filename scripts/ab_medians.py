#!/usr/bin/env python3
"""Medians of an A/B log's timings by variant, each against the variant named old.

A line reads `VARIANT GRAPH   median M ms (min …` (tilefuse run --bench, tagged); prints, a graph
a line, each variant's median of its runs' medians and its ratio to old's.
"""
import collections
import re
import statistics
import sys

runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\S+) +median ([0-9.]+) ms \(min ([0-9.]+)", line)
    if m:
        runs[(m[2], m[1])].append(float(m[3]))
for graph in dict.fromkeys(k[0] for k in runs):
    old = statistics.median(runs[(graph, "old")])
    print(graph, " ".join(f"{v}={statistics.median(x):.4f}({statistics.median(x) / old:.3f})"
                          for (g, v), x in runs.items() if g == graph))
