#!/usr/bin/env python3
"""DP ranks of one node sharing ONE Engram table through their torch.distributed process group.

torch.multiprocessing starts --ranks processes; each joins a gloo process group (the CPU group an engine already
has next to NCCL) and wraps it in engram_offload.TorchGroupChannel. Rank 0 creates the table (memfd backings,
placement applied before the first page exists, synthetic rows), the other ranks attach to it (the memfds
reach them over a side Unix socket; read-only mappings), so the node holds the table once, not once per rank.
Each rank then runs a few decode steps of prefetched lookups (on its CUDA device when there is one: the table
is registered for UVA, nothing is copied to the device) and reports its staging digest; equal ids give equal
digests on every rank, and the table's resident memory is counted once (Pss).

Run: PYTHONPATH=build/python python3 python/examples/shared_table_mp.py [--ranks 2] [--table-size 256MiB]
"""
import argparse
import hashlib
import os
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import engram_offload as eo


def pss_of_table_kib():
    """Pss (kB) of this process's engram table mappings, from /proc/self/smaps; None if unreadable."""
    try:
        total, inside = 0, False
        with open("/proc/self/smaps") as f:
            for line in f:
                if "-" in line.split(" ")[0]:
                    inside = "engram:" in line
                elif inside and line.startswith("Pss:"):
                    total += int(line.split()[1])
        return total
    except OSError:
        return None


def rank_main(rank, args, init_file, q):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=args.ranks)
    ch = eo.TorchGroupChannel()
    layout = eo.Layout.preset("v41-flash-mini", table_size=args.table_size)
    table = eo.SharedTable.shared(layout, ch, seed=args.seed, placement=args.placement)
    device = "cpu"
    if torch.cuda.is_available() and not args.cpu:
        dev = rank % torch.cuda.device_count()
        torch.cuda.set_device(dev)
        device = f"cuda:{dev}"
        table.register_cuda(dev)
    pf = eo.Prefetcher(table, device=device, threads=1)
    rng = np.random.default_rng(args.seed)  # the same ids on every rank: digests must agree
    h = hashlib.sha256()
    for step in range(args.steps):
        pf.begin_step(step)
        ids = []
        for li in range(layout.n_layers):
            offs = np.asarray(layout.head_offsets[li])
            ids.append((offs[:-1] + (rng.random((args.batch, layout.heads)) * (offs[1:] - offs[:-1]))).astype(np.int64))
            pf.prepare(li, ids[-1])
        for li in range(layout.n_layers):
            st = pf.consume(li)
            host = st.view(torch.int16).cpu().numpy() if isinstance(st, torch.Tensor) else st
            h.update(np.ascontiguousarray(host).tobytes())
        pf.end_step()
    summary = pf.summary()
    q.put((rank, table.group_rank, table.read_only, device, h.hexdigest()[:16], pss_of_table_kib(),
           {k: round(v["median_lookup_us"] or 0, 1) for k, v in summary.items()}))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--table-size", default="256MiB")
    ap.add_argument("--placement", default="none")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--cpu", action="store_true", help="CPU lookups even when a GPU is there")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(rank_main, args=(args, os.path.join(d, "init"), q), nprocs=args.ranks, join=True)
    rows = sorted(q.get() for _ in range(args.ranks))
    table_bytes = eo.Layout.preset("v41-flash-mini", table_size=args.table_size).total_bytes
    print(f"table: v41-flash-mini {table_bytes / 2**20:.0f} MiB shared by {args.ranks} ranks")
    print(f"{'rank':>4} {'group rank':>10} {'read-only':>9} {'device':>8} {'staging digest':>16} {'table Pss MiB':>13}  median lookup us")
    for rank, grank, ro, dev, digest, pss, med in rows:
        pss_s = "n/a" if pss is None else f"{pss / 1024:.1f}"
        print(f"{rank:>4} {grank:>10} {str(ro):>9} {dev:>8} {digest:>16} {pss_s:>13}  {med}")
    same = len({r[4] for r in rows}) == 1
    print(f"every rank staged the same bytes: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
