#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Join flashattn-bench rows (ours.json) with the peers' rows (peers.json, from peers.py) and print a table.

Prefill rows join on (dtype, D, Dv, S, B, H, causal) and the operation (peers carry fwd_* and bwd_* in one row); decode
rows on (B, L, heads, KV heads, D). Deterministic backward rows (op "bwd-det", flashattn-bench --deterministic) have
no peers: they show the ratio to our own bwd row of the same shape instead (column "det/bwd"). Rows with attention
sinks (flashattn-bench --sinks, "sinks": true) have no peers either: they are listed as "fwd sinks" and so on, with
the ratio to our row of the same operation and shape without sinks (column "sinks/plain"). Either file may be
missing or lack a shape: the table keeps the rows it has and shows '-' for the other side. Decode rows also show the
fraction of the measured copy bandwidth (peers.py's device-to-device copy, read + write counted) that the KV read
reaches. Chunked-prefill rows (flashattn-bench --op chunked / --sweep chunked, "kind": "chunked") have no peers: each
shape's paged-cache row is shown beside its dense-cache row, with their ratio (column "paged/dense").

The decode table holds the dense one-token rows, the peers' problem. The serving sweep's other decode rows
(flashattn-bench --sweep serving) have tables of their own: paged rows ("page_size" > 0) under their dense row of the
same problem, with the ratio paged/dense; multi-token rows ("Sq" > 1, dense cache) with the number of tokens and the
ratio to our one-token row of the shape ("vs 1 token"). Both show the fraction of the copy bandwidth and the ratio to
the best peer's dense one-token decode of the same (B, L, heads, KV heads, D), the best of every peer backend measured
(EFFICIENT included), column "ours/best": the peers read the cache once per call too, so GB/s compare across them.

Prefill rows whose V/O head dim differs from Q/K's ("Dv", taken as D where a row lacks it: every older file), such
as DeepSeek-V3's MLA prefill (flashattn-bench --sweep mla, bench/peers_mla.py: D192 with Dv128), leave the prefill
table for one of their own per (D, Dv), "MLA prefill (D192/Dv128)": every peer backend measured (EFFICIENT too, since
FLASH may refuse the shape), "not served" where a peer refused it, and ours / the best peer that served it (column
"ours/best", "not served" when none did). FLOPs there are 2*B*H*S*S*(D + Dv), halved when causal; backward 2.5x.

Absorbed-MLA decode rows (flashattn-bench --sweep mla: decode rows whose "Dv" differs from "D", D576/Dv512 with
"v_aliases_k": V read from K's first 512 columns) leave the decode and serving tables for one of their own: no peer
measures them, so each shows its cache size, its KV-read GB/s (the cache counted once when V is inside K), its share of
the copy bandwidth (the ceiling row of peers.py or bench/peers_mla.py) and its TFLOP/s, 2*B*H*Sq*L*(D + Dv).

FlashAttention-3 rows (fa3_jax.py's fa3.json, backend "fa3") are peers like the others: give them as one more --peers
file (by default $OUT/fa3.json is read when it exists); prefill rows then also show ours / the best peer of cuDNN and
FA3 (column "ours/best"), the bar the kernels are held to.

usage: report.py [--ours FILE]... [--peers FILE]... [--markdown FILE] [--json FILE]
       defaults: $OUT/ours.json, $OUT/peers.json (+ $OUT/fa3.json), $OUT/report.md, no JSON ($OUT defaults to the
       current folder)
Repeated --ours/--peers files (a sweep split over several device calls) are joined; a shape measured twice keeps
the last figure. --json writes {"ours": [...], "peers": [...]}: the rows behind the table, as bench/results/ keeps
them.
"""
import argparse
import json
import math
import os
import sys

DTYPE_NAMES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
               "float32": "fp32", "fp32": "fp32"}
PEERS = ("flash", "cudnn", "fa3")
MLA_PEERS = ("flash", "cudnn", "efficient", "fa3")  # FLASH refuses Dv != D: EFFICIENT may be the one that serves
BEST_OF = ("cudnn", "fa3")  # the peers a kernel must beat (FLASH is FlashAttention-2, behind both)


def load(path, what):
    if not path or not os.path.exists(path):
        print(f"report: no {what} file ({path}); that side stays empty", file=sys.stderr)
        return []
    try:
        with open(path) as f:
            rows = json.load(f)
    except (OSError, ValueError) as ex:
        print(f"report: cannot read {what} file {path}: {ex}", file=sys.stderr)
        return []
    if not isinstance(rows, list):
        print(f"report: {path} is not a list of rows", file=sys.stderr)
        return []
    return [r for r in rows if isinstance(r, dict)]


def prefill_key(r):
    return (DTYPE_NAMES.get(str(r.get("dtype")), str(r.get("dtype"))), int(r["D"]), int(r["S"]), int(r["B"]),
            int(r["H"]), int(r.get("HK") or r["H"]), bool(r["causal"]), head_dim_v(r))


def head_dim_v(r):
    """The V/O head dim of a prefill row; rows written before the field was there had D's."""
    return int(r.get("Dv") or r["D"])


def decode_key(r, heads_field, kv_field):
    return (int(r["B"]), int(r["L"]), int(r.get(heads_field, 32)), int(r.get(kv_field, 8)), int(r.get("D", 128)))


def tokens(r):
    """Query tokens per sequence of a decode row (rows written before the field was there had one)."""
    return int(r.get("Sq") or 1)


def page_size(r):
    return int(r.get("page_size") or 0)


def is_mla_decode(r):
    """A decode row whose V/O head dim differs from Q/K's (absorbed MLA, flashattn-bench --sweep mla)."""
    return r.get("kind") == "decode" and head_dim_v(r) != int(r["D"])


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def fmt(x, digits=0):
    if x is None:
        return "-"
    return f"{x:.{digits}f}"


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def ours_cell(r, field):
    """The figure of one of our rows, or why there is none."""
    if r is None:
        return None, "-"
    if "error" in r:
        return None, "NOT_SUPPORTED" if r.get("not_supported") else "ERROR"
    v = r.get(field)
    return v, fmt(v, 0 if field == "kv_GBps" else 1)


def check_cell(r):
    if r is None or "error" in r:
        return ""
    if r.get("pass") is None:
        return "unchecked"
    nw = r.get("normwise")
    return ("PASS" if r["pass"] else "FAIL") + (f" {nw:.1e}" if isinstance(nw, (int, float)) else "")


def copy_bandwidth(ceiling):
    """peers.py's device-to-device copy in GB/s (read + write counted), or None without a ceiling row."""
    return ceiling.get("copy_TBps", 0) * 1000 or None


def build(ours, peers):
    meta = next((r for r in ours if r.get("kind") == "meta"), {})
    ceiling = next((r for r in peers if r.get("kind") == "ceiling"), {})
    copy_gbps = copy_bandwidth(ceiling)

    peer_prefill, peer_decode = {}, {}
    for r in peers:
        backend = r.get("backend")
        if backend not in PEERS:
            continue
        if r.get("kind") == "prefill":
            peer_prefill.setdefault(prefill_key(r), {})[backend] = r
        elif r.get("kind") == "decode":
            peer_decode.setdefault(decode_key(r, "Hq", "Hkv"), {})[backend] = r

    our_prefill, our_decode = {}, {}
    for r in ours:
        if r.get("kind") == "prefill":
            # Sinks rows (--sinks) are their own operation, so a run with them and one without join side by side.
            our_prefill[(prefill_key(r), r.get("op") + (" sinks" if r.get("sinks") else ""))] = r
        elif r.get("kind") == "decode" and tokens(r) == 1 and not page_size(r) and not is_mla_decode(r):
            # Several of our decode variants (chunk counts, sinks) may share one peer shape.
            our_decode.setdefault(decode_key(r, "H", "HK"), []).append(r)

    prefill_rows = []
    # Rows of two head dims (MLA) have a table of their own (mla_rows).
    keys = set(k for k, _ in our_prefill if k[1] == k[7]) | set(k for k in peer_prefill if k[1] == k[7])
    for key in sorted(keys, key=lambda k: (k[0], k[1], k[4] != k[5], k[6], k[2])):
        for op in ("fwd", "bwd", "bwd-det", "fwd sinks", "bwd sinks", "bwd-det sinks"):
            mine = our_prefill.get((key, op))
            theirs = peer_prefill.get(key, {}) if op in ("fwd", "bwd") else {}
            peer_vals = {}
            for p in PEERS:
                pr = theirs.get(p)
                peer_vals[p] = pr.get(f"{op}_tflops") if pr and "error" not in pr else None
            if mine is None and all(v is None for v in peer_vals.values()):
                continue
            value, text = ours_cell(mine, "tflops")
            vs_bwd = vs_plain = None
            if op.startswith("bwd-det"):
                plain, _ = ours_cell(our_prefill.get((key, op.replace("bwd-det", "bwd"))), "tflops")
                vs_bwd = ratio(value, plain)
            if op.endswith(" sinks"):
                plain, _ = ours_cell(our_prefill.get((key, op[:-len(" sinks")])), "tflops")
                vs_plain = ratio(value, plain)
            dtype, D, S, B, H, HK, causal, _ = key
            best = max((peer_vals[p] for p in BEST_OF if peer_vals[p] is not None), default=None)
            row = dict(shape=f"{op.split()[0]} {dtype} D{D} S{S} B{B} H{H}" + (f"/{HK}" if HK != H else "") +
                       f"{' causal' if causal else ''}{' sinks' if op.endswith(' sinks') else ''}", ours=value,
                       ours_text=text, vs_best=ratio(value, best), vs_bwd=vs_bwd, vs_plain=vs_plain,
                       check=check_cell(mine))
            for p in PEERS:
                row[p] = peer_vals[p]
                row[f"vs_{p}"] = ratio(value, peer_vals[p])
            prefill_rows.append(row)

    decode_rows = []
    for key in sorted(set(our_decode) | set(peer_decode)):
        theirs = peer_decode.get(key, {})
        peer_vals = {p: (theirs[p].get("kv_GBps") if p in theirs and "error" not in theirs[p] else None) for p in PEERS}
        B, L, H, HK, D = key
        for mine in our_decode.get(key, [None]):
            value, text = ours_cell(mine, "kv_GBps")
            # The peers run without sinks: a sinks row of ours is no like-for-like match for them.
            vs = {p: None if mine and mine.get("sinks") else ratio(value, peer_vals[p]) for p in PEERS}
            extra = ""
            if mine is not None:
                if mine.get("chunks"):
                    extra += f" chunks{mine['chunks']}"
                if mine.get("sinks"):
                    extra += " sinks"
            row = dict(shape=f"decode B{B} L{L} H{H}/{HK} D{D}{extra}", ours=value, ours_text=text,
                       of_copy=ratio(value, copy_gbps), check=check_cell(mine))
            for p in PEERS:
                row[p] = peer_vals[p]
                row[f"vs_{p}"] = vs[p]
            decode_rows.append(row)
    return meta, ceiling, prefill_rows, decode_rows


def mla_rows(ours, peers):
    """Prefill rows whose V/O head dim differs from Q/K's, ours beside every peer backend's: one dict per operation
    and shape, with "peers" {backend: TFLOP/s, or the string "not served" for a refusal} and the best that served."""
    theirs, mine = {}, {}
    for r in peers:
        if r.get("kind") == "prefill" and r.get("backend") in MLA_PEERS and head_dim_v(r) != int(r["D"]):
            theirs.setdefault(prefill_key(r), {})[r["backend"]] = r
    for r in ours:
        if r.get("kind") == "prefill" and head_dim_v(r) != int(r["D"]):
            mine[(prefill_key(r), r.get("op") + (" sinks" if r.get("sinks") else ""))] = r
    rows = []
    keys = set(k for k, _ in mine) | set(theirs)
    for key in sorted(keys, key=lambda k: (k[1], k[7], k[0], k[4] != k[5], k[6], k[2])):
        for op in ("fwd", "bwd", "bwd-det", "fwd sinks", "bwd sinks", "bwd-det sinks"):
            r = mine.get((key, op))
            # The peers run without sinks and have no deterministic mode: those rows of ours have no peer.
            peer_rows = theirs.get(key, {}) if op in ("fwd", "bwd") else {}
            if r is None and not peer_rows:
                continue
            cells = {}
            for p, pr in peer_rows.items():
                # peers_mla.py keeps a forward figure when only the backward was refused ("bwd_error").
                value = pr.get(f"{op}_tflops")
                cells[p] = "not served" if value is None and ("error" in pr or f"{op}_error" in pr) else value
            served = {p: v for p, v in cells.items() if isinstance(v, (int, float))}
            best_backend = max(served, key=served.get) if served else None
            value, text = ours_cell(r, "tflops")
            dtype, D, S, B, H, HK, causal, Dv = key
            rows.append(dict(group=(D, Dv), shape=f"{op.split()[0]} {dtype} S{S} B{B} H{H}" +
                             (f"/{HK}" if HK != H else "") + f"{' causal' if causal else ''}" +
                             f"{' sinks' if op.endswith(' sinks') else ''}", ours=value, ours_text=text,
                             peers=cells, best=served.get(best_backend), best_backend=best_backend,
                             vs_best=ratio(value, served.get(best_backend)), any_peer=bool(peer_rows),
                             check=check_cell(r)))
    return rows


def mla_tables(rows):
    """(title, header, cells, summary lines) per (D, Dv) of mla_rows()."""
    out = []
    for group in sorted({r["group"] for r in rows}):
        part = [r for r in rows if r["group"] == group]
        backends = [p for p in MLA_PEERS if any(p in r["peers"] for r in part)]
        header = ["shape", "ours TFLOP/s"] + [p.upper() for p in backends] + ["best peer", "ours/best", "check"]
        cells = []
        for r in part:
            peer_cells = []
            for p in backends:
                v = r["peers"].get(p)
                peer_cells.append(v if isinstance(v, str) else fmt(v, 1))
            if r["best_backend"]:
                best, vs = f"{r['best']:.1f} {r['best_backend'].upper()}", fmt(r["vs_best"], 2)
            elif r["any_peer"]:
                best = vs = "not served"
            else:
                best = vs = "-"
            cells.append([r["shape"], r["ours_text"]] + peer_cells + [best, vs, r["check"]])
        summary = []
        vs = [r["vs_best"] for r in part if r["vs_best"] is not None]
        if vs:
            summary.append(f"ours/best peer that served: geometric mean {geomean(vs):.2f} over {len(vs)} rows, "
                           f"at or above it on {sum(1 for v in vs if v >= 1)}")
        unserved = sum(1 for r in part if r["any_peer"] and not r["best_backend"])
        if unserved:
            summary.append(f"{unserved} rows that no peer served")
        missing = sum(1 for r in part if r["ours"] is None)
        if missing:
            summary.append(f"{missing} rows without a figure of ours (missing, not supported or failed)")
        failed = sum(1 for r in part if r["check"].startswith("FAIL"))
        if failed:
            summary.append(f"{failed} rows FAILED the correctness check")
        out.append((f"MLA prefill (D{group[0]}/Dv{group[1]})", header, cells, summary))
    return out


def table(header, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def markdown_table(header, rows):
    align = "|".join("---" if i == 0 else "---:" for i in range(len(header)))
    out = ["| " + " | ".join(header) + " |", "|" + align + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def chunked_rows(ours):
    """One line per chunked-prefill shape and page size: the paged cache's figure, the dense cache's and their ratio.
    A paged row pairs with the dense row of its shape measured last before it (flashattn-bench times the dense cache
    first, once per page size)."""
    shapes = {}
    for r in ours:
        if r.get("kind") != "chunked":
            continue
        key = (DTYPE_NAMES.get(str(r.get("dtype")), str(r.get("dtype"))), int(r["B"]), int(r["H"]), int(r["HK"]),
               int(r["S"]), int(r["Sk"]), int(r["D"]), int(r.get("Dv", r["D"])), bool(r["causal"]))
        entry = shapes.setdefault(key, {"dense": None, "pairs": {}})
        page = int(r.get("page_size", 0))
        if page:
            entry["pairs"][page] = (r, entry["dense"])
        else:
            entry["dense"] = r
    rows = []
    for key in sorted(shapes):
        dtype, b, h, hk, new, keys, d, dv, causal = key
        pairs = shapes[key]["pairs"] or {0: (None, shapes[key]["dense"])}
        for page_size in sorted(pairs):
            paged, dense = pairs[page_size]
            p_val = paged.get("tflops") if paged and not paged.get("error") else None
            d_val = dense.get("tflops") if dense and not dense.get("error") else None
            check = "-"
            if paged and paged.get("error"):
                check = ("NOT_SUPPORTED " if paged.get("not_supported") else "ERROR ") + paged["error"]
            elif paged and paged.get("pass") is not None:
                check = "PASS" if paged["pass"] else "FAIL " + paged.get("check", "")
            page = f" page={page_size}" if paged else ""
            rows.append({"shape": f"{dtype} B={b} H={h}/{hk} new={new} keys={keys} D={d}{'/' + str(dv) if dv != d else ''}"
                                  f"{' causal' if causal else ''}{page}",
                         "paged": p_val, "dense": d_val, "ratio": ratio(p_val, d_val), "check": check})
    return rows


def best_peer_decode(peers):
    """(B, L, heads, KV heads, D) -> (GB/s, backend) of the fastest peer's dense one-token decode, over every peer
    backend measured."""
    best = {}
    for r in peers:
        if r.get("kind") != "decode" or "error" in r or not r.get("kv_GBps"):
            continue
        key = decode_key(r, "Hq", "Hkv")
        if key not in best or r["kv_GBps"] > best[key][0]:
            best[key] = (r["kv_GBps"], str(r.get("backend", "?")))
    return best


def variant_key(r):
    """Everything that names one of our decode problems but the page size: a paged row and its dense row share it.
    With one query token the causal mask changes nothing, so it is not part of the key then."""
    t = tokens(r)
    return (DTYPE_NAMES.get(str(r.get("dtype")), str(r.get("dtype"))), int(r["B"]), int(r["L"]), int(r["H"]),
            int(r["HK"]), int(r["D"]), t, bool(r.get("causal")) and t > 1, int(r.get("chunks") or 0),
            bool(r.get("sinks")))


def decode_label(key, with_tokens=True):
    dtype, b, length, h, hk, d, t, causal, chunks, sinks = key
    text = f"B{b} L{length} H{h}/{hk} D{d}" + ("" if dtype == "bf16" else f" {dtype}")
    if with_tokens and t > 1:
        text += f" T{t}"
    if causal:
        text += " causal"
    if chunks:
        text += f" chunks{chunks}"
    if sinks:
        text += " sinks"
    return text


def serving_rows(ours, peers, copy_gbps):
    """The serving sweep's decode rows: (paged rows, each problem's dense row first; dense multi-token rows)."""
    best_peer = best_peer_decode(peers)
    by_variant = {}
    for r in ours:
        if r.get("kind") == "decode" and not is_mla_decode(r):
            by_variant.setdefault(variant_key(r), {})[page_size(r)] = r

    def line(key, r):
        value, text = ours_cell(r, "kv_GBps")
        dtype, b, length, h, hk, d = key[:6]
        peer, backend = best_peer.get((b, length, h, hk, d), (None, None))
        if dtype != "bf16" or key[-1]:  # the peers time bf16 without sinks: no like-for-like match
            peer = backend = None
        return dict(ours=value, ours_text=text, of_copy=ratio(value, copy_gbps), best=peer, best_backend=backend,
                    vs_best=ratio(value, peer), check=check_cell(r))

    paged, multi = [], []
    for key in sorted(by_variant):
        pages = by_variant[key]
        dense_value = ours_cell(pages.get(0), "kv_GBps")[0]
        if any(pages):
            for page in sorted(pages):
                row = line(key, pages[page])
                row.update(shape=decode_label(key), page=page,
                           vs_dense=ratio(row["ours"], dense_value) if page else None)
                paged.append(row)
        if key[6] > 1 and 0 in pages:
            one = by_variant.get(key[:6] + (1, False) + key[8:], {}).get(0)
            row = line(key, pages[0])
            row.update(shape=decode_label(key, with_tokens=False), tokens=key[6],
                       vs_one=ratio(row["ours"], ours_cell(one, "kv_GBps")[0]))
            multi.append(row)
    return paged, multi


def mla_decode_rows(ours, copy_gbps):
    """The absorbed-MLA decode rows (D576/Dv512, V inside K): no peer measures them, so each shows its KV-read GB/s
    (the cache counted once when V is K's first columns), its share of the copy bandwidth and its TFLOP/s."""
    rows = []
    for r in sorted((r for r in ours if is_mla_decode(r)),
                    key=lambda r: (int(r["D"]), head_dim_v(r), -int(r["H"]), page_size(r), tokens(r), int(r["B"]))):
        value, text = ours_cell(r, "kv_GBps")
        tf = None if value is None else r.get("tflops")
        per_key = int(r["D"]) if r.get("v_aliases_k") else int(r["D"]) + head_dim_v(r)
        cache = int(r["B"]) * int(r.get("HK", 1)) * int(r["L"]) * per_key * (4 if r.get("dtype") == "fp32" else 2)
        t = tokens(r)
        shape = (f"B{r['B']} L{r['L']} H{r['H']}/{r.get('HK', 1)} D{r['D']}/{head_dim_v(r)}" +
                 (" V=K" if r.get("v_aliases_k") else "") +
                 ("" if DTYPE_NAMES.get(str(r.get("dtype"))) == "bf16" else f" {r.get('dtype')}") +
                 (f" T{t}" if t > 1 else "") + (" causal" if r.get("causal") and t > 1 else "") +
                 (f" page {page_size(r)}" if page_size(r) else "") + (f" chunks{r['chunks']}" if r.get("chunks") else "") +
                 (" sinks" if r.get("sinks") else ""))
        rows.append(dict(shape=shape, cache_mib=cache / 2**20, ours=value, ours_text=text, tflops=tf,
                         of_copy=ratio(value, copy_gbps), check=check_cell(r)))
    return rows


def mla_decode_summary(rows):
    lines = []
    large = [r["of_copy"] for r in rows if r["cache_mib"] >= 256 and r["of_copy"] is not None]
    if large:
        lines.append(f"caches of 256 MiB and more: {percent(min(large))}..{percent(max(large))} of copy BW over "
                     f"{len(large)} rows")
    tf = [r["tflops"] for r in rows if r["tflops"] is not None]
    if tf:
        lines.append(f"TFLOP/s (2*B*H*Sq*L*(D+Dv)) {min(tf):.0f}..{max(tf):.0f}")
    missing = sum(1 for r in rows if r["ours"] is None)
    if missing:
        lines.append(f"{missing} MLA decode rows without a figure of ours (not supported or failed)")
    failed = sum(1 for r in rows if r["check"].startswith("FAIL"))
    if failed:
        lines.append(f"{failed} MLA decode rows FAILED the correctness check")
    return lines


def percent(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def best_cell(r):
    return "-" if r["best"] is None else f"{r['best']:.0f} {r['best_backend'].upper()}"


def spread_text(values):
    return (f"geometric mean {geomean(values):.2f} over {len(values)} shapes, "
            f"range {min(values):.2f}..{max(values):.2f}")


def serving_summary(paged, multi):
    lines = []
    for page in sorted({r["page"] for r in paged if r["page"]}):
        rows = [r for r in paged if r["page"] == page]
        vs_dense = [r["vs_dense"] for r in rows if r["vs_dense"] is not None]
        vs_best = [r["vs_best"] for r in rows if r["vs_best"] is not None]
        parts = [f"page {page} / dense: " + (spread_text(vs_dense) if vs_dense else "no pair")]
        if vs_best:
            parts.append("ours/best peer " + spread_text(vs_best))
        lines.append("; ".join(parts))
    for t in sorted({r["tokens"] for r in multi}):
        rows = [r for r in multi if r["tokens"] == t]
        shares = [r["of_copy"] for r in rows if r["of_copy"] is not None]
        vs_one = [r["vs_one"] for r in rows if r["vs_one"] is not None]
        vs_best = [r["vs_best"] for r in rows if r["vs_best"] is not None]
        parts = [f"{t} tokens: {len(rows)} shapes"]
        if shares:
            parts.append(f"{percent(min(shares))}..{percent(max(shares))} of copy BW")
        if vs_one:
            parts.append("vs 1 token " + spread_text(vs_one))
        if vs_best:
            parts.append("ours/best peer " + spread_text(vs_best))
        lines.append("; ".join(parts))
    rows = paged + multi
    missing = sum(1 for r in rows if r["ours"] is None)
    if missing:
        lines.append(f"{missing} serving rows without a figure of ours (not supported or failed)")
    failed = sum(1 for r in rows if r["check"].startswith("FAIL"))
    if failed:
        lines.append(f"{failed} serving rows FAILED the correctness check")
    return lines


def summary_lines(rows, unit):
    lines = []
    for peer in PEERS:
        g = geomean([r[f"vs_{peer}"] for r in rows])
        n = sum(1 for r in rows if r[f"vs_{peer}"] is not None)
        ahead = sum(1 for r in rows if r[f"vs_{peer}"] is not None and r[f"vs_{peer}"] > 1)
        if n:
            lines.append(f"ours/{peer.upper()}: geometric mean {g:.2f} over {n} shapes, ahead on {ahead}")
    best = [r.get("vs_best") for r in rows if r.get("vs_best") is not None]
    if best and any(r.get("vs_fa3") is not None for r in rows):
        lines.append(f"ours/best of CUDNN and FA3: geometric mean {geomean(best):.2f} over {len(best)} shapes, "
                     f"at or above it on {sum(1 for b in best if b >= 1)}")
    missing = sum(1 for r in rows if r["ours"] is None)
    if missing:
        lines.append(f"{missing} {unit} rows without a figure of ours (missing, not supported or failed)")
    dets = [r.get("vs_bwd") for r in rows if r.get("vs_bwd") is not None]
    if dets:
        lines.append(f"deterministic backward / backward: geometric mean {geomean(dets):.2f} over {len(dets)} shapes, "
                     f"range {min(dets):.2f}..{max(dets):.2f}")
    plains = [r.get("vs_plain") for r in rows if r.get("vs_plain") is not None]
    if plains:
        lines.append(f"with sinks / without: geometric mean {geomean(plains):.2f} over {len(plains)} rows, "
                     f"range {min(plains):.2f}..{max(plains):.2f}")
    failed = sum(1 for r in rows if r["check"].startswith("FAIL"))
    if failed:
        lines.append(f"{failed} {unit} rows FAILED the correctness check")
    return lines


def main():
    out_dir = os.environ.get("OUT", ".")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", action="append", help="flashattn-bench rows; repeat to join split runs")
    ap.add_argument("--peers", action="append", help="peers.py rows; repeat to join split runs")
    ap.add_argument("--markdown", default=os.path.join(out_dir, "report.md"),
                    help="where the markdown version goes ('' = nowhere)")
    ap.add_argument("--json", default="", help="where both sides' rows go together ('' = nowhere)")
    args = ap.parse_args()

    ours = [r for path in args.ours or [os.path.join(out_dir, "ours.json")] for r in load(path, "ours")]
    peer_files = args.peers or [os.path.join(out_dir, "peers.json")] + (
        [os.path.join(out_dir, "fa3.json")] if os.path.exists(os.path.join(out_dir, "fa3.json")) else [])
    peers = [r for path in peer_files for r in load(path, "peers")]
    meta, ceiling, prefill_rows, decode_rows = build(ours, peers)
    mla = mla_tables(mla_rows(ours, peers))

    title = "flashattn-bench vs peers"
    info = []
    if meta:
        info.append(f"device {meta.get('device', '?')}, backend {meta.get('backend', '?')}, libflashattn "
                    f"{meta.get('version', '?')}, commit {meta.get('commit') or '?'}, {meta.get('date', '?')}, "
                    f"median of {meta.get('iters', '?')} calls")
    if ceiling:
        info.append(f"ceilings (peers.py, same run): copy {ceiling.get('copy_TBps', 0):.2f} TB/s (read + write), "
                    f"bf16 matmul {ceiling.get('bf16_matmul_tflops', 0):.0f} TFLOP/s")

    p_header = ["shape", "ours TFLOP/s", "FLASH", "CUDNN", "ours/FLASH", "ours/CUDNN", "check"]
    p_cells = [[r["shape"], r["ours_text"], fmt(r["flash"], 1), fmt(r["cudnn"], 1), fmt(r["vs_flash"], 2),
                fmt(r["vs_cudnn"], 2), r["check"]] for r in prefill_rows]
    if any(r["fa3"] is not None for r in prefill_rows):
        p_header[4:4] = ["FA3"]
        p_header[7:7] = ["ours/FA3", "ours/best"]
        for r, cells in zip(prefill_rows, p_cells):
            cells[4:4] = [fmt(r["fa3"], 1)]
            cells[7:7] = [fmt(r["vs_fa3"], 2), fmt(r["vs_best"], 2)]
    if any(r["shape"].startswith("bwd-det") for r in prefill_rows):
        p_header.insert(6, "det/bwd")
        for r, cells in zip(prefill_rows, p_cells):
            cells.insert(6, fmt(r["vs_bwd"], 2))
    if any(r["vs_plain"] is not None for r in prefill_rows):
        p_header.insert(len(p_header) - 1, "sinks/plain")
        for r, cells in zip(prefill_rows, p_cells):
            cells.insert(len(cells) - 1, fmt(r["vs_plain"], 2))
    c_rows = chunked_rows(ours)
    c_header = ["shape", "paged TFLOP/s", "dense TFLOP/s", "paged/dense", "check"]
    c_cells = [[r["shape"], fmt(r["paged"], 1), fmt(r["dense"], 1), fmt(r["ratio"], 2), r["check"]] for r in c_rows]
    c_ratios = [r["ratio"] for r in c_rows if r["ratio"] is not None]
    c_summary = [f"paged / dense cache: geometric mean {geomean(c_ratios):.2f} over {len(c_ratios)} shapes, "
                 f"range {min(c_ratios):.2f}..{max(c_ratios):.2f}"] if c_ratios else []
    paged_rows, multi_rows = serving_rows(ours, peers, copy_bandwidth(ceiling))
    pg_header = ["shape", "cache", "ours GB/s", "of copy BW", "paged/dense", "best peer", "ours/best", "check"]
    pg_cells = [[r["shape"], f"page {r['page']}" if r["page"] else "dense", r["ours_text"], percent(r["of_copy"]),
                 fmt(r["vs_dense"], 2), best_cell(r), fmt(r["vs_best"], 2), r["check"]] for r in paged_rows]
    mt_header = ["shape", "tokens", "ours GB/s", "of copy BW", "vs 1 token", "best peer (1 token)", "ours/best",
                 "check"]
    mt_cells = [[r["shape"], str(r["tokens"]), r["ours_text"], percent(r["of_copy"]), fmt(r["vs_one"], 2),
                 best_cell(r), fmt(r["vs_best"], 2), r["check"]] for r in multi_rows]
    s_summary = serving_summary(paged_rows, multi_rows)
    md_rows = mla_decode_rows(ours, copy_bandwidth(ceiling))
    md_header = ["shape", "cache MiB", "ours GB/s", "of copy BW", "TFLOP/s", "check"]
    md_cells = [[r["shape"], fmt(r["cache_mib"]), r["ours_text"], percent(r["of_copy"]), fmt(r["tflops"], 1),
                 r["check"]] for r in md_rows]
    md_summary = mla_decode_summary(md_rows)
    d_header = ["shape", "ours GB/s", "FLASH", "CUDNN", "ours/FLASH", "ours/CUDNN", "of copy BW", "check"]
    d_cells = [[r["shape"], r["ours_text"], fmt(r["flash"]), fmt(r["cudnn"]), fmt(r["vs_flash"], 2),
                fmt(r["vs_cudnn"], 2), fmt(None if r["of_copy"] is None else 100 * r["of_copy"]) +
                ("%" if r["of_copy"] is not None else ""), r["check"]] for r in decode_rows]

    print(title)
    for line in info:
        print(line)
    if p_cells:
        print("\nPrefill (TFLOP/s; forward 4*B*H*S*S*D, halved when causal; backward 2.5x)")
        print(table(p_header, p_cells))
        for line in summary_lines(prefill_rows, "prefill"):
            print(line)
    if d_cells:
        print("\nDecode (KV bytes read / time; dense cache, 1 query token)")
        print(table(d_header, d_cells))
        for line in summary_lines(decode_rows, "decode"):
            print(line)
    if pg_cells:
        print("\nDecode from a paged cache beside the dense cache (KV bytes read / time; best peer: dense, 1 token)")
        print(table(pg_header, pg_cells))
    if mt_cells:
        print("\nMulti-token decode (query tokens per sequence, causal bottom-right; dense cache; KV bytes read / "
              "time)")
        print(table(mt_header, mt_cells))
    for line in s_summary:
        print(line)
    if c_cells:
        print("\nChunked prefill (TFLOP/s of the visible pairs; a ragged Q over a paged cache and over a dense one)")
        print(table(c_header, c_cells))
        for line in c_summary:
            print(line)
    for m_title, m_header, m_cells, m_summary in mla:
        print(f"\n{m_title} (TFLOP/s; forward 2*B*H*S*S*(D+Dv), halved when causal; backward 2.5x)")
        print(table(m_header, m_cells))
        for line in m_summary:
            print(line)
    if md_cells:
        print("\nAbsorbed-MLA decode (KV bytes read / time, the cache counted once where V is K's first columns; "
              "TFLOP/s 2*B*H*Sq*L*(D+Dv))")
        print(table(md_header, md_cells))
        for line in md_summary:
            print(line)
    if not p_cells and not d_cells and not c_cells and not pg_cells and not mt_cells and not mla and not md_cells:
        print("\nno rows on either side")

    if args.markdown:
        md = [f"# {title}", ""] + [f"- {line}" for line in info]
        if p_cells:
            md += ["", "## Prefill (TFLOP/s)", "", markdown_table(p_header, p_cells), ""]
            md += [f"- {line}" for line in summary_lines(prefill_rows, "prefill")]
        if d_cells:
            md += ["", "## Decode (KV-read GB/s, dense cache, 1 query token)", "", markdown_table(d_header, d_cells),
                   ""]
            md += [f"- {line}" for line in summary_lines(decode_rows, "decode")]
        if pg_cells:
            md += ["", "## Decode, paged cache beside dense (KV-read GB/s)", "", markdown_table(pg_header, pg_cells)]
        if mt_cells:
            md += ["", "## Multi-token decode (KV-read GB/s, causal, dense cache)", "",
                   markdown_table(mt_header, mt_cells)]
        if s_summary:
            md += [""] + [f"- {line}" for line in s_summary]
        if c_cells:
            md += ["", "## Chunked prefill (TFLOP/s, paged vs dense cache)", "", markdown_table(c_header, c_cells), ""]
            md += [f"- {line}" for line in c_summary]
        for m_title, m_header, m_cells, m_summary in mla:
            md += ["", f"## {m_title} (TFLOP/s)", "", markdown_table(m_header, m_cells), ""]
            md += [f"- {line}" for line in m_summary]
        if md_cells:
            md += ["", "## Absorbed-MLA decode (KV-read GB/s, TFLOP/s)", "", markdown_table(md_header, md_cells), ""]
            md += [f"- {line}" for line in md_summary]
        try:
            with open(args.markdown, "w") as f:
                f.write("\n".join(md) + "\n")
            print(f"\nmarkdown: {args.markdown}")
        except OSError as ex:
            print(f"report: cannot write {args.markdown}: {ex}", file=sys.stderr)
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump({"ours": ours, "peers": peers}, f, indent=1)
            print(f"rows: {args.json}")
        except OSError as ex:
            print(f"report: cannot write {args.json}: {ex}", file=sys.stderr)
    # Failed checks show in the table; flashattn-bench's own exit status is what fails a run.
    return 0


if __name__ == "__main__":
    sys.exit(main())
