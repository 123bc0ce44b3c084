#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Compares flashattn-bench runs of two builds taken in the same device call, shape by shape.

usage: compare.py --new A.json [A2.json ...] --old B.json [B2.json ...] [--tolerance 0.02] [--markdown FILE]
                  [--ignore-sinks]
(flashattn-bench --json files, or bench/results/ files, whose "ours" rows are read)

--ignore-sinks matches rows whatever their sinks field says, so that a `--sinks` run (--new) against the same sweep
without sinks (--old) gives the cost of the sinks shape by shape.

Each build may have been run several times (interleaved with the other's runs); a shape's figure is its best run,
for both builds alike. Prints new/old per shape (TFLOP/s for prefill rows, KV-read GB/s for decode) and exits 1 when
a shape of the new build is slower than the old by more than the tolerance, or has no figure (failed or not
supported) where the old build has one. Chunked-prefill rows (paged and dense-cache alike) count as prefill rows.
Decode rows are told apart by their query tokens, causal mask, page size and chunk count too (the serving sweep
times one cache shape several ways). Prefill rows are told apart by the V/O head dim ("Dv", D where a row lacks it)
as well, so MLA rows (D192 with Dv128) never meet the D192 rows of the prefill sweep.
"""
import argparse
import json
import sys


def rows(path):
    with open(path) as f:
        data = json.load(f)
    # A dict is a bench/results/ file ({"ours": [...], "peers": [...]}) or an older {"rows": [...]}.
    listed = data.get("rows", data.get("ours", [])) if isinstance(data, dict) else data
    return [r for r in listed if r.get("kind") in ("prefill", "decode", "chunked")]


def key(r, ignore_sinks=False):
    return (r["kind"], r["op"], r["dtype"], r["D"], r.get("S"), r.get("Sk", r.get("L")), r["B"], r["H"], r.get("HK"),
            r.get("causal"), r.get("Sq", 0), r.get("page_size", 0), False if ignore_sinks else r.get("sinks", False),
            r.get("chunks", 0), r.get("Dv", r["D"]))


def figure(r):
    """The row's TFLOP/s or GB/s; None for a row that failed or was not supported."""
    if "error" in r:
        return None
    return r.get("kv_GBps") if r["kind"] == "decode" else r.get("tflops")


def best(paths, ignore_sinks=False):
    """key -> the best figure of the shape over the runs, None where no run has one."""
    out = {}
    for p in paths:
        for r in rows(p):
            k, f = key(r, ignore_sinks), figure(r)
            if out.get(k) is None or (f is not None and f > out[k]):
                out[k] = f
    return out


def name(k):
    kind, op, dtype, d, s, sk, b, h, hk, causal, sq, page, sinks, chunks, dv = k
    if dv != d:
        d = f"{d}/{dv}"
    if kind == "decode":
        return (f"decode {dtype} B{b} L{sk} H{h}/{hk} D{d}" + (f" T{sq}" if sq and sq > 1 else "") +
                (" causal" if causal and sq and sq > 1 else "") + (f" page {page}" if page else "") +
                (f" chunks {chunks}" if chunks else "") + (" sinks" if sinks else ""))
    if kind == "chunked":
        return (f"chunked {dtype} D{d} new {s} keys {sk} B{b} H{h}/{hk}" + (" causal" if causal else "") +
                (f" page {page}" if page else " dense cache"))
    return f"{op} {dtype} D{d} S{s} B{b} H{h}/{hk}" + (" causal" if causal else "") + (" sinks" if sinks else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", nargs="+", required=True)
    ap.add_argument("--old", nargs="+", required=True)
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--markdown")
    ap.add_argument("--ignore-sinks", action="store_true")
    a = ap.parse_args()
    new, old = best(a.new, a.ignore_sinks), best(a.old, a.ignore_sinks)
    common = sorted(set(new) & set(old), key=lambda k: tuple(str(x) for x in k))
    if not common:
        print("compare.py: no shape in common")
        return 1
    lines = ["| shape | new | old | new/old |", "|---|---:|---:|---:|"]
    slower = []
    ratios = []
    lost = [k for k in common if new[k] is None and old[k] is not None]
    for k in lost:
        lines.append(f"| {name(k)} | - | {old[k]:.1f} | no figure **lost** |")
    for k in common:
        n, o = new[k], old[k]
        if n is None or o is None:
            continue
        r = n / o if o else float("inf")
        ratios.append(r)
        flag = " **slower**" if r < 1 - a.tolerance else ""
        if flag:
            slower.append(name(k))
        lines.append(f"| {name(k)} | {n:.1f} | {o:.1f} | {r:.3f}{flag} |")
    lines.append("")
    if ratios:
        geo = 1.0
        for r in ratios:
            geo *= r
        geo **= 1 / len(ratios)
        lines.append(f"{len(ratios)} shapes, geometric mean new/old {geo:.3f}, min {min(ratios):.3f}, "
                     f"max {max(ratios):.3f}; {len(slower)} more than {a.tolerance:.0%} slower" +
                     (": " + ", ".join(slower) if slower else ""))
    else:
        lines.append("no shape with a figure in both builds")
    if lost:
        lines.append(f"{len(lost)} shapes without a figure in the new build (failed or not supported) that the old "
                     "build measured: " + ", ".join(name(k) for k in lost))
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 1 if slower or lost else 0


if __name__ == "__main__":
    sys.exit(main())
