#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""A narrowed prefill sweep of the peers: peers.py's own prefill() (its FLOP convention, timing and rows), by
default with the backward left out, so a device call that measures one pass on some head dims has time for the rest.

    PYTHONPATH=.peers OUT=... python3 bench/peers_forward.py     # writes $OUT/peers.json (ceilings + prefill rows)

PEERS_DIMS (default 64,96,128,192,256) and PEERS_SEQS (default 512..16384) narrow the sweep; the GQA 32/8 D128 rows
(S 2k/8k/16k) and fp16 D128 (S 2k/8k) are timed as peers.py times them. PEERS_BACKWARD=1 times the backward too;
PEERS_BACKENDS (default: every SDPA backend peers.py knows) names the ones to time, e.g. "cudnn,flash".
"""
import json
import os

import torch

import peers  # peers.py, from PYTHONPATH (the git-ignored .peers/ folder the device call carries)


def main():
    dims = [int(d) for d in os.environ.get("PEERS_DIMS", "64,96,128,192,256").split(",")]
    seqs = [int(s) for s in os.environ.get("PEERS_SEQS", "512,1024,2048,4096,8192,16384").split(",")]
    bwd = os.environ.get("PEERS_BACKWARD", "0") == "1"
    if os.environ.get("PEERS_BACKENDS"):
        wanted = os.environ["PEERS_BACKENDS"].split(",")
        peers.BACKENDS = {name: be for name, be in peers.BACKENDS.items() if name in wanted}
    bw, tf = peers.ceilings()
    peers.rows.append(dict(kind="ceiling", copy_TBps=bw, bf16_matmul_tflops=tf))
    for d in dims:
        for s in seqs:
            for causal in (False, True):
                peers.prefill(torch.bfloat16, d, s, causal, do_bwd=bwd)
    if 128 in dims:
        for s in (2048, 8192):
            if s in seqs:
                peers.prefill(torch.float16, 128, s, False, do_bwd=bwd)
        for s in (2048, 8192, 16384):
            if s in seqs:
                for causal in (False, True):
                    peers.prefill(torch.bfloat16, 128, s, causal, do_bwd=bwd, hq=32, hkv=8)
    with open(os.path.join(os.environ.get("OUT", "."), "peers.json"), "w") as f:
        json.dump(peers.rows, f, indent=1)


if __name__ == "__main__":
    main()
