#!/usr/bin/env python3
"""Where a CUDA-graph decode step's time goes, from a trace_shim.cpp CSV.

    python3 scripts/cuda_trace/analyze.py TRACE.csv [--sequence N]

A replay of a captured graph is the kernels of one launch (one correlation id, a graph id);
the replays with the most common kernel count are the steps of one batch size, of which the
first two are skipped. Every kernel is given the step's time from the latest end before it
to its own end ("in-graph time": under programmatic dependent launch kernels overlap, so
their own durations overlap too, while these times add up to the step's span), and each
kernel's median over the replays is taken. Prints the step's span, the per-kernel table
(grouped by name and grid size, largest share first), the first N kernels of one step in
order, and the kernels outside the graph up to the next replay (the sampler).
"""
import argparse
import collections
import csv
import statistics
import sys


def short_name(name):
    """The kernel's name without 'void', namespaces and the parameter list."""
    for prefix in ("void ", "(anonymous namespace)::", "vllm::cuda::", "detail::"):
        name = name.replace(prefix, "")
    depth, out = 0, []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        out.append(ch)
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--sequence", type=int, default=40, help="kernels of one step to list")
    args = ap.parse_args()
    rows = list(csv.DictReader(open(args.trace)))
    for r in rows:
        for k in ("start", "end", "correlation", "graph", "grid", "block"):
            r[k] = int(r[k])
        r["short"] = short_name(r["name"])
    launches = collections.defaultdict(list)
    for r in rows:
        if r["graph"]:
            launches[r["correlation"]].append(r)
    if not launches:
        print(f"no CUDA-graph replays among {len(rows)} kernels")
        return 1
    count = collections.Counter(len(v) for v in launches.values()).most_common(1)[0][0]
    steps = sorted((sorted(v, key=lambda r: r["start"]) for v in launches.values()
                    if len(v) == count), key=lambda v: v[0]["start"])
    steps = steps[2:] if len(steps) > 4 else steps
    spans = [v[-1]["end"] - v[0]["start"] for v in steps]
    starts = [v[0]["start"] for v in steps]
    periods = [b - a for a, b in zip(starts, starts[1:])]
    print(f"{len(steps)} replays of {count} kernels: span median {statistics.median(spans) / 1e3:.1f} us"
          + (f", replay to replay median {statistics.median(periods) / 1e3:.1f} us" if periods else ""))

    times = []  # per step, per kernel position: the in-graph time
    for v in steps:
        last_end, t = v[0]["start"], []
        for r in v:
            t.append(max(0, r["end"] - last_end))
            last_end = max(last_end, r["end"])
        times.append(t)
    median = [statistics.median(t[i] for t in times) for i in range(count)]
    first = steps[len(steps) // 2]
    groups = collections.OrderedDict()
    for i, r in enumerate(first):
        g = groups.setdefault((r["short"], r["grid"]), [0, 0.0])
        g[0] += 1
        g[1] += median[i]
    total = sum(median)
    print(f"\n{'kernel':72s} {'grid':>5s} {'calls':>5s} {'us/call':>8s} {'us':>8s} {'share':>6s}")
    for (name, grid), (calls, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:72]:72s} {grid:5d} {calls:5d} {t / calls / 1e3:8.2f} {t / 1e3:8.1f} "
              f"{100 * t / total:5.1f}%")
    print(f"{'sum':72s} {'':5s} {count:5d} {'':8s} {total / 1e3:8.1f}")

    print(f"\nthe first {min(args.sequence, count)} kernels of one step: start, duration and "
          "in-graph time (us), grid")
    for i, r in enumerate(first[:args.sequence]):
        print(f"{(r['start'] - first[0]['start']) / 1e3:9.2f} {(r['end'] - r['start']) / 1e3:7.2f} "
              f"{median[i] / 1e3:7.2f} {r['grid']:6d} {r['short'][:70]}")
    i = steps.index(first)
    if i + 1 < len(steps):
        a, b = first[-1]["end"], steps[i + 1][0]["start"]
        outside = sorted((r for r in rows if not r["graph"] and a <= r["start"] < b),
                         key=lambda r: r["start"])
        print(f"\noutside the graph until the next replay ({(b - a) / 1e3:.1f} us):")
        for r in outside:
            print(f"{(r['start'] - a) / 1e3:9.2f} {(r['end'] - r['start']) / 1e3:7.2f} "
                  f"{r['grid']:6d} {r['short'][:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
