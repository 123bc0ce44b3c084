#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The peers on DeepSeek-V3's MLA prefill, the shapes of flashattn-bench --sweep mla: PyTorch SDPA's FLASH, CUDNN and
EFFICIENT backends on bf16 Q, K [B, 128, S, 192] and V [B, 128, S, 128], causal, S 4k/8k/16k with B*S = 16k, forward
and backward, timed by peers.py's own bench() so the figures compare with its other rows and with ours.

    PYTHONPATH=.peers OUT=... python3 bench/peers_mla.py     # writes $OUT/peers.json (ceilings + MLA rows)

Rows are peers.py's prefill rows plus "Dv": 128; FLOPs 2*B*H*S*S*(D + Dv) halved for the causal mask, backward 2.5
times that (4*B*H*S*S*D when Dv == D, peers.py's convention). A backend that refuses the shape (FLASH-2 takes one head
dim for Q, K and V) gets "error" and no figure; one that runs the forward but refuses the backward keeps its forward
figure and gets "bwd_error". bench/report.py shows both as "not served". PEERS_SEQS (default 4096,8192,16384) narrows
the lengths; PEERS (what device_run.sh passes) is not read.
"""
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

import peers  # peers.py, from PYTHONPATH (the git-ignored .peers/ folder the device call carries)

HEADS, D, DV, TOKENS = 128, 192, 128, 16384


def first_line(ex):
    return (str(ex).strip().splitlines() or [type(ex).__name__])[0][:160]


def mla(S, do_bwd=True):
    B = max(1, TOKENS // S)
    dtype = torch.bfloat16
    q = torch.randn(B, HEADS, S, D, dtype=dtype, device=peers.dev, requires_grad=True)
    k = torch.randn(B, HEADS, S, D, dtype=dtype, device=peers.dev, requires_grad=True)
    v = torch.randn(B, HEADS, S, DV, dtype=dtype, device=peers.dev, requires_grad=True)
    flops = 2 * B * HEADS * S * S * (D + DV) * 0.5
    for name, be in peers.BACKENDS.items():
        row = dict(kind="prefill", backend=name, dtype=str(dtype).split(".")[-1], D=D, Dv=DV, S=S, B=B, H=HEADS,
                   HK=HEADS, causal=True)
        with sdpa_kernel([be]):
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            try:
                t = peers.bench(fwd)
                row["fwd_ms"] = t
                row["fwd_tflops"] = flops / (t * 1e-3) / 1e12
            except Exception as ex:
                row["error"] = first_line(ex)
            if do_bwd and "error" not in row:
                try:
                    o = fwd()
                    g = torch.randn_like(o)

                    def bwd():
                        torch.autograd.grad(o, (q, k, v), g, retain_graph=True)

                    tb = peers.bench(bwd, 3, 15)
                    row["bwd_ms"] = tb
                    row["bwd_tflops"] = 2.5 * flops / (tb * 1e-3) / 1e12
                except Exception as ex:
                    row["bwd_error"] = first_line(ex)
                o = g = None
        peers.rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    del q, k, v
    torch.cuda.empty_cache()


def main():
    seqs = [int(s) for s in os.environ.get("PEERS_SEQS", "4096,8192,16384").split(",")]
    print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(),
          flush=True)
    bw, tf = peers.ceilings()
    peers.rows.append(dict(kind="ceiling", copy_TBps=bw, bf16_matmul_tflops=tf))
    for s in seqs:
        mla(s)
    with open(os.path.join(os.environ.get("OUT", "."), "peers.json"), "w") as f:
        json.dump(peers.rows, f, indent=1)


if __name__ == "__main__":
    main()
