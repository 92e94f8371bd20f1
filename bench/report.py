#!/usr/bin/env python3
"""Merge tilefuse and peer timings (and optionally ncu DRAM counters) into one result.

    python3 bench/report.py --tilefuse TF.json --peers PEERS.json [--ncu NCU.csv] \\
        --out RESULT.json [--markdown OUT.md]

TF.json comes from the tilefuse CLI, PEERS.json from bench/peers.py, NCU.csv from
    ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv ...
Pure standard library, so it runs anywhere.
"""
import argparse
import csv
import datetime
import json
import re
import statistics
import sys

DASH = "—"
# ncu scales byte counts with SI prefixes (256 MiB prints as 268.44 Mbyte); the
# binary spellings are accepted too in case a version or option emits them.
UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
         "kibyte": 2 ** 10, "mibyte": 2 ** 20, "gibyte": 2 ** 30, "tibyte": 2 ** 40}
READ, WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"


def load_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("report.py: cannot read %s file %s: %s" % (what, path, e))


# ---------------------------------------------------------------- ncu ------

def base_name(name):
    """'void k<int>(float *, int)' / '_Z3fooPf' / 'foo(float*)' -> comparable base name."""
    name = name.strip()
    m = re.match(r"_Z(\d+)", name)  # Itanium-mangled plain function: _Z<len><name>...
    if m:
        return name[m.end():m.end() + int(m.group(1))]
    name = name.split("(")[0].strip()
    if name.startswith("void "):  # ncu's demangler keeps the return type of templates
        name = name[5:]
    return name.strip()


def read_ncu(path):
    """{kernel name as printed by ncu: {"launches", "read", "write", "total"}} (medians, bytes)."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    # ncu mixes "==PROF==" lines and the program's own stdout into the file;
    # the CSV proper starts at the header row.
    start = next((i for i, l in enumerate(lines) if '"Kernel Name"' in l and '"Metric Name"' in l), None)
    if start is None:
        sys.exit("report.py: %s has no ncu CSV header (\"Kernel Name\", \"Metric Name\")" % path)
    launches = {}  # (launch id, kernel) -> {metric: bytes}
    for i, row in enumerate(csv.DictReader(lines[start:])):
        metric = (row.get("Metric Name") or "").strip()
        if metric not in (READ, WRITE):
            continue
        raw = (row.get("Metric Value") or "").replace(",", "").strip()  # "1,234.5" -> "1234.5"
        unit = (row.get("Metric Unit") or "byte").strip().lower()
        try:
            value = float(raw) * UNITS[unit]
        except (ValueError, KeyError):
            print("report.py: ncu row %d: skipping value %r unit %r" % (i, raw, unit), file=sys.stderr)
            continue
        # One row per launch per metric; the "ID" column ties a launch's rows together.
        launch = (row.get("ID", "row%d" % i), row["Kernel Name"])
        launches.setdefault(launch, {})[metric] = value
    per_kernel = {}
    for (_, kernel), m in launches.items():
        k = per_kernel.setdefault(kernel, {"read": [], "write": [], "total": []})
        if READ in m:
            k["read"].append(m[READ])
        if WRITE in m:
            k["write"].append(m[WRITE])
        if READ in m and WRITE in m:
            k["total"].append(m[READ] + m[WRITE])
    med = lambda v: statistics.median(v) if v else None  # noqa: E731
    return {name: {"launches": max(len(k["read"]), len(k["write"])), "read": med(k["read"]),
                   "write": med(k["write"]), "total": med(k["total"])} for name, k in per_kernel.items()}


def match_ncu(name, ncu):
    """ncu entries for a tilefuse kernel: exact name first, else same base name."""
    if name in ncu:
        return [ncu[name]]
    return [v for k, v in ncu.items() if base_name(k) == base_name(name)]


def annotate_kernels(tf, ncu):
    """Add ncu_* fields beside predicted_bytes in every tilefuse kernel entry."""
    seen = {}
    for r in tf.get("results", []):
        for k in r.get("kernels") or []:
            name = k.get("name", "")
            if name in seen and seen[name] != k.get("predicted_bytes"):
                # ncu only sees the name, so launches of both get pooled together.
                print("report.py: warning: kernel %s appears with different predicted_bytes; "
                      "its ncu numbers mix both" % name, file=sys.stderr)
            seen[name] = k.get("predicted_bytes")
            hits = match_ncu(name, ncu)
            if len(hits) != 1:
                if len(hits) > 1:
                    print("report.py: warning: kernel %s matches %d ncu names; left unmatched"
                          % (name, len(hits)), file=sys.stderr)
                k.update(ncu_dram_read_bytes=None, ncu_dram_write_bytes=None, ncu_dram_bytes=None,
                         ncu_launches=0, ncu_vs_predicted=None)
                continue
            h = hits[0]
            pred = k.get("predicted_bytes")
            k.update(ncu_dram_read_bytes=h["read"], ncu_dram_write_bytes=h["write"], ncu_dram_bytes=h["total"],
                     ncu_launches=h["launches"],
                     ncu_vs_predicted=h["total"] / pred if h["total"] is not None and pred else None)


# -------------------------------------------------------------- table ------

def key_of(r):
    return (r.get("case"), r.get("dtype"), tuple(r.get("shape") or ()))


def ok(r):
    return r is not None and not r.get("error") and r.get("median_ms")


def gbps_of(r):
    if not ok(r):
        return None
    if r.get("gbps") is not None:
        return r["gbps"]
    return r["bytes"] / (r["median_ms"] * 1e-3) / 1e9 if r.get("bytes") else None


def summarize(tf, peers):
    """One summary row per (case, dtype, shape, impl), tilefuse's impls first."""
    tf_ceil = (tf.get("ceiling") or {}).get("copy_gbps")
    pe_ceil = (peers.get("ceiling") or {}).get("copy_gbps")
    groups = {}  # insertion-ordered: tilefuse's case order, then cases only peers have
    for source, doc in (("tilefuse", tf), ("peers", peers)):
        for r in doc.get("results", []):
            groups.setdefault(key_of(r), []).append((source, r))
    # Keep a case's shapes together even when only the peers have some of them.
    cases = list(dict.fromkeys(k[0] for k in groups))
    summary = []
    for (case, dtype, shape), rows in sorted(groups.items(), key=lambda g: cases.index(g[0][0])):
        tf_rows = [r for s, r in rows if s == "tilefuse"]
        # The reference is the impl called "tilefuse" if there is one, else tilefuse's first row.
        ref = next((r for r in tf_rows if r.get("impl") == "tilefuse"), tf_rows[0] if tf_rows else None)
        ref_ms = ref["median_ms"] if ok(ref) else None
        if not tf_rows:  # peers-only case: still list it, with tilefuse as missing
            rows = [("tilefuse", {"impl": "tilefuse", "missing": True})] + rows
        for source, r in rows:
            g = gbps_of(r)
            ceil = tf_ceil if source == "tilefuse" else pe_ceil
            ms = r["median_ms"] if ok(r) else None
            # The cost model's prediction for tilefuse's plan: the sum over its kernels.
            kernels = r.get("kernels") or []
            pred = sum(k.get("predicted_ms") or 0 for k in kernels) if source == "tilefuse" and kernels else None
            summary.append({
                "case": case, "dtype": dtype, "shape": list(shape), "impl": r.get("impl"), "source": source,
                "median_ms": ms, "predicted_ms": pred,
                "measured_vs_predicted": ms / pred if ms and pred else None,
                "gbps": g, "ceiling_gbps": ceil,
                "pct_of_copy": 100.0 * g / ceil if g is not None and ceil else None,
                # speedup of tilefuse over this impl: time_impl / time_tilefuse
                "tilefuse_speedup": ms / ref_ms if ms and ref_ms else None,
                "error": r.get("error") or ("missing" if r.get("missing") else None)})
    return summary


def fmt(v, f):
    return DASH if v is None else f % v


def table_rows(summary):
    out = []
    for s in summary:
        out.append([s["case"] or DASH, s["dtype"] or DASH, "x".join(map(str, s["shape"])) or DASH,
                    s["impl"] or DASH, fmt(s["median_ms"], "%.4f"), fmt(s.get("predicted_ms"), "%.4f"),
                    fmt(s.get("measured_vs_predicted"), "%.2f"), fmt(s["gbps"], "%.0f"),
                    fmt(s["pct_of_copy"], "%.1f%%"), fmt(s["tilefuse_speedup"], "%.2fx"),
                    (s["error"] or "")[:60]])
    return out


HEAD = ["case", "dtype", "shape", "impl", "median ms", "predicted ms", "measured/predicted", "GB/s", "% copy",
        "tilefuse speedup", "note"]


def header_lines(tf, peers):
    tc, pc = tf.get("ceiling") or {}, peers.get("ceiling") or {}
    g = lambda d, k: DASH if d.get(k) is None else d[k]  # noqa: E731 -- absent or null
    return ["GPU: %s (tilefuse) / %s (peers); driver %s / %s; torch %s, triton %s; tilefuse commit %s" % (
                g(tf, "gpu"), g(peers, "gpu"), g(tf, "driver_version"), g(peers, "driver"),
                g(peers, "torch"), g(peers, "triton"), g(tf, "commit")),
            "copy ceiling: tilefuse %s GB/s (%s), peers %s GB/s (%s); %% copy uses each side's own ceiling" % (
                fmt(tc.get("copy_gbps"), "%.1f"), g(tf, "date"), fmt(pc.get("copy_gbps"), "%.1f"), g(peers, "date")),
            "tilefuse speedup = impl median ms / tilefuse median ms (>1: tilefuse faster)"] + (
               ["WARNING: peers ran with --quick (smoke run, not a measurement)"] if peers.get("quick") else [])


def text_table(rows):
    w = [max(len(str(x)) for x in col) for col in zip(HEAD, *rows)]
    line = lambda r: "  ".join(str(x).ljust(n) for x, n in zip(r, w)).rstrip()  # noqa: E731
    return "\n".join([line(HEAD), line(["-" * n for n in w])] + [line(r) for r in rows])


def markdown_table(rows):
    out = ["| " + " | ".join(HEAD) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * 6 + ["---"]) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |")
    return "\n".join(out)


def kernel_lines(tf):
    rows = []
    for r in tf.get("results", []):
        for k in r.get("kernels") or []:
            if "ncu_vs_predicted" in k:
                rows.append([k.get("name", DASH), r.get("dtype") or DASH, fmt(k.get("predicted_bytes"), "%d"),
                             fmt(k.get("ncu_dram_read_bytes"), "%.0f"), fmt(k.get("ncu_dram_write_bytes"), "%.0f"),
                             fmt(k.get("ncu_vs_predicted"), "%.3f")])
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tilefuse", required=True, help="JSON from the tilefuse CLI")
    p.add_argument("--peers", help="JSON from bench/peers.py (none: tilefuse and its ceiling only)")
    p.add_argument("--ncu", help="ncu --csv output with dram__bytes_read.sum,dram__bytes_write.sum")
    p.add_argument("--out", required=True, help="merged JSON to write")
    p.add_argument("--markdown", help="also write the table as GitHub markdown")
    a = p.parse_args()

    tf = load_json(a.tilefuse, "tilefuse")
    peers = load_json(a.peers, "peers") if a.peers else {}
    ncu = None
    if a.ncu:
        try:
            ncu = read_ncu(a.ncu)
        except OSError as e:
            sys.exit("report.py: cannot read ncu file %s: %s" % (a.ncu, e))
        annotate_kernels(tf, ncu)  # in place, so the merged "tilefuse" block carries them
    summary = summarize(tf, peers)
    merged = {"tool": "report", "date": datetime.date.today().isoformat(),
              "tilefuse": tf, "peers": peers, "ncu": ncu, "summary": summary}
    with open(a.out, "w") as f:
        json.dump(merged, f, indent=1)

    rows = table_rows(summary)
    head = header_lines(tf, peers)
    print("\n".join(head) + "\n\n" + text_table(rows))
    krows = kernel_lines(tf)
    khead = ["kernel", "dtype", "predicted B", "ncu read B", "ncu write B", "ncu/predicted"]
    if krows:
        w = [max(len(str(x)) for x in col) for col in zip(khead, *krows)]
        print("\n" + "\n".join("  ".join(str(x).ljust(n) for x, n in zip(r, w)).rstrip() for r in [khead] + krows))
    if a.markdown:
        md = "\n".join("- " + h for h in head) + "\n\n" + markdown_table(rows) + "\n"
        if krows:
            md += ("\n| " + " | ".join(khead) + " |\n|---|---|" + "---:|" * 4 + "\n"
                   + "\n".join("| " + " | ".join(r) + " |" for r in krows) + "\n")
        with open(a.markdown, "w") as f:
            f.write(md)
    print("\nwrote %s%s" % (a.out, " and " + a.markdown if a.markdown else ""))


if __name__ == "__main__":
    main()
