# SPDX-License-Identifier: BSD-3-Clause
"""Summarize the decode phase stamps (FLASHATTN_DECODE_PHASES file) over the driver's RANGES line.
usage: analyze.py PHASES_FILE DRIVER_LOG"""
import re, sys, statistics as st
from collections import defaultdict

calls = {"decode": defaultdict(list), "merge": defaultdict(list)}
for line in open(sys.argv[1]):
    f = line.split()
    tag, call, grid, block = f[0], int(f[1]), int(f[2]), int(f[3])
    stamps = [int(x) for x in f[4:]]
    calls[tag][call].append(stamps)
log = open(sys.argv[2]).read()
m = re.search(r"RANGES events (\d+) (\d+) b2b (\d+) (\d+) graph (\d+) (\d+)", log)
ranges = {"events": (int(m[1]), int(m[2])), "b2b": (int(m[3]), int(m[4])), "graph": (int(m[5]), int(m[6]))}
names = {0: "start", 8: "barInit", 10: "ranged", 9: "issue1", 1: "issued", 2: "firstTile", 3: "lastTile", 4: "epilogue",
         11: "stored", 12: "fenced", 5: "merge1", 13: "merged", 6: "end"}


def q(v):
    v = sorted(v)
    return v[0], v[len(v) // 2], v[-1]


for rname, (a, b) in ranges.items():
    rows = defaultdict(list)
    spans, gaps, mspans = [], [], []
    for c in range(a, b + 1):
        blocks = calls["decode"].get(c)
        if not blocks:
            continue
        base = min(s[0] for s in blocks)
        end = max(s[6] for s in blocks)
        mb = calls["merge"].get(c)
        if mb:
            end = max(end, max(s[6] for s in mb))
            rows["merge.start"].append(min(s[0] for s in mb) - base)
            rows["merge.waited"].append(min(s[2] for s in mb) - base)
            rows["merge.end"].append(max(s[6] for s in mb) - base)
        spans.append(end - base)
        for slot, nm in names.items():
            vals = [s[slot] - base for s in blocks if s[slot]]
            if vals:
                lo, med, hi = q(vals)
                rows[nm + ".min"].append(lo)
                rows[nm + ".med"].append(med)
                rows[nm + ".max"].append(hi)
        nxt = calls["decode"].get(c + 1)
        if nxt and c + 1 <= b:
            gaps.append(min(s[0] for s in nxt) - end)
    if not spans:
        print(f"PHASES {rname}: no stamps")
        continue
    us = lambda v: f"{st.median(v) / 1000:.2f}"
    if rname != "b2b":
        print(f"PHASES {rname}: span {us(spans)} us, gap to next {us(gaps) if gaps else '-'} us")
    if rname != "events":
        continue
    parts = []
    for nm in ["start", "barInit", "ranged", "issue1", "firstTile", "lastTile", "epilogue", "stored", "fenced", "merge1",
               "merged", "end"]:
        if nm + ".med" in rows:
            parts.append(f"{nm} {us(rows[nm + '.med'])}/{us(rows[nm + '.max'])}")
    if "merge.end" in rows:
        parts.append(f"merge {us(rows['merge.waited'])}->{us(rows['merge.end'])}")
    print("    med/max:", ", ".join(parts))
    # SM spread: tiles per CTA and how many CTAs share an SM in the last call of the range
    blocks = calls["decode"].get(b) or calls["decode"].get(b - 1)
    if blocks:
        sms = defaultdict(int)
        for s in blocks:
            sms[s[7] & 0xffffffff] += 1
        tiles = sorted(set(s[7] >> 32 for s in blocks))
        mergers = sum(1 for s in blocks if len(s) > 13 and s[13])
        mhz = sorted((s[15] - s[14]) / (s[6] - s[0]) * 1e3 for s in blocks if len(s) > 15 and s[15] and s[6] > s[0])
        if mhz:
            print(f"    SM clock over each CTA's life (MHz): min {mhz[0]:.0f}, median {mhz[len(mhz) // 2]:.0f}")
        print(f"    last call: {len(blocks)} CTAs on {len(sms)} SMs (max {max(sms.values())} per SM), tiles/CTA {tiles}"
              + (f", {mergers} merging CTAs" if mergers else ""))
