#!/usr/bin/env python3
"""A decode loop with two Engram layers whose lookups are prefetched while the model computes.

Each step: the new token extends every sequence; the Engram ids of both Engram layers depend only on the tokens,
so they are hashed (Hasher.hash_chunk) and submitted (Prefetcher.prepare) at the start of the step; the model's
layers run (a matmul stand-in per layer); an Engram layer consumes its staging (Prefetcher.consume), turns the
bf16 bits into float32 and adds a projection of it to the hidden state. The same loop runs in mode 'early'
(lookups overlap the layers before the Engram layer) and 'on_demand' (the lookup starts when the layer needs it:
the baseline), and prints per-layer timeline summaries and step times.

CPU only by default (NumPy). With --torch and PyTorch installed, the stand-in compute is torch.matmul (on CUDA when
available) and the staging is viewed as a torch.bfloat16 tensor without a copy before it is moved there.

Run: PYTHONPATH=build/python /usr/bin/python3 python/examples/decode_loop.py [--steps 20] [--batch 64]
"""
import argparse
import json
import time

import numpy as np

import engram_offload as eo


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64, help="sequences (one new token each per step)")
    ap.add_argument("--layers", type=int, default=16, help="model layers (Engram at the preset's layer ids)")
    ap.add_argument("--hidden", type=int, default=512, help="hidden size of the matmul stand-in")
    ap.add_argument("--table-size", default="256MiB")
    ap.add_argument("--threads", type=int, default=0, help="lookup threads (0 = CPUs - 1)")
    ap.add_argument("--torch", action="store_true", help="torch compute (CUDA when available)")
    ap.add_argument("--trace", help="write the early run's Chrome trace here")
    args = ap.parse_args()

    torch = None
    device = "cpu"
    if args.torch:
        try:
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            print("--torch: PyTorch is not installed; using NumPy")

    layout = eo.Layout.preset("v41-flash-mini", table_size=args.table_size)
    table = eo.SharedTable.create(layout, backing="memfd", placement="none")
    t0 = time.perf_counter()
    table.fill_synthetic(1234)
    print(f"table: {layout}, filled in {time.perf_counter() - t0:.2f} s")
    engram_at = {lid: i for i, lid in enumerate(layout.layer_ids) if lid < args.layers}
    if len(engram_at) < 2:
        raise SystemExit(f"--layers {args.layers} must exceed the Engram layer ids {layout.layer_ids}")

    vocab = 129280
    hasher = eo.Hasher(layout, compressed_vocab=vocab)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, vocab, size=(args.batch, 16))
    H, D = layout.heads, layout.d
    w = (rng.standard_normal((args.hidden, args.hidden)) / np.sqrt(args.hidden)).astype(np.float32)
    proj = (rng.standard_normal((H * D, args.hidden)) / np.sqrt(H * D)).astype(np.float32)
    if torch is not None:
        w_t = torch.from_numpy(w).to(device)
        proj_t = torch.from_numpy(proj).to(device=device, dtype=torch.bfloat16)

    x0 = rng.standard_normal((args.batch, args.hidden)).astype(np.float32)
    step_tokens = rng.integers(0, vocab, size=(args.steps, args.batch))
    results = {}
    for mode in ("on_demand", "early"):
        pf = eo.Prefetcher(table, mode=mode, threads=args.threads)
        seqs = [hasher.begin_sequence() for _ in range(args.batch)]
        for b in range(args.batch):
            hasher.hash_chunk(seqs[b], prompt[b])  # prefill (ids not looked up here)
        x = x0.copy()
        if torch is not None:
            x = torch.from_numpy(x).to(device)
        tokens = step_tokens
        step_s = []
        for step in range(args.steps):
            ts = time.perf_counter()
            pf.begin_step(step)
            # ids of the new token of every sequence: [n_layers, batch, heads]
            ids = np.concatenate([hasher.hash_chunk(seqs[b], tokens[step, b:b + 1]) for b in range(args.batch)],
                                 axis=1)
            for li in range(layout.n_layers):
                pf.prepare(li, ids[li])
            for layer in range(args.layers):
                if torch is not None:
                    x = torch.tanh(x @ w_t)
                else:
                    x = np.tanh(x @ w)
                if layer in engram_at:
                    # uint16 bf16 bits [batch, H, D]; NumPy reads the queue's staging in place, torch gets its own copy
                    # (torch.from_numpy wants a writable array; the staging is read-only)
                    staging = pf.consume(engram_at[layer], copy=torch is not None)
                    if torch is not None:
                        e = torch.from_numpy(staging.reshape(args.batch, H * D).view(np.int16)).view(torch.bfloat16)
                        x = x + (e.to(device) @ proj_t).float()
                    else:
                        e = eo.bf16_to_float32(staging).reshape(args.batch, H * D)
                        x = x + e @ proj
            pf.end_step()
            if torch is not None and device == "cuda":
                torch.cuda.synchronize()
            step_s.append(time.perf_counter() - ts)
        checksum = float(x.sum()) if torch is None else float(x.sum().item())
        results[mode] = (pf, step_s, checksum)

    for mode, (pf, step_s, checksum) in results.items():
        warm = step_s[2:] or step_s
        print(f"\nmode {mode}: median step {np.median(warm) * 1e3:.2f} ms over {len(warm)} steps, "
              f"checksum {checksum:.6e}, totals {pf.totals()}")
        for layer_id, s in pf.summary().items():
            print(f"  engram layer {layer_id}: {s['lookups']} lookups, median L {s['median_lookup_us']:.1f} us, "
                  f"median queue s-r {s['median_queue_us']:.1f} us, median lead c-r {s['median_lead_us']:.1f} us, wait {s['total_wait_us']:.1f} us total, "
                  f"exposed {s['total_exposed_wait_us']:.1f} us total")
    same = results["early"][2] == results["on_demand"][2]
    print(f"\nearly and on_demand give the same hidden state: {same}")
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(results["early"][0].chrome_trace(), f)
        print(f"chrome trace: {args.trace}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
