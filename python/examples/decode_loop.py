#!/usr/bin/env python3
"""A decode loop with two Engram layers whose lookups are prefetched while the model computes.

Each step: the new token extends every sequence; the Engram ids of both Engram layers depend only on the tokens,
so they are made at the start of the step and submitted (Prefetcher.prepare); the model's
layers run (a matmul stand-in per layer); an Engram layer consumes its staging (Prefetcher.consume), turns the
bf16 bits into float32 and adds a projection of it to the hidden state. The same loop runs in mode 'early'
(lookups overlap the layers before the Engram layer) and 'on_demand' (the lookup starts when the layer needs it:
the baseline), and prints per-layer timeline summaries and step times.

CPU only by default (NumPy). With --torch and PyTorch installed, the stand-in compute is torch.matmul (on CUDA when
available) and the staging is viewed as a torch.bfloat16 tensor without a copy before it is moved there.
With --device cuda (a CUDA build, torch with a GPU): the table is registered for UVA (never copied to the device),
the lookups run on the Prefetcher's CUDA prefetch stream while the matmuls run on the main stream, and staging
is consumed as torch.bfloat16 CUDA tensors in place. --graph (with --device cuda) also captures one decode step
(prepare of both layers from static device ids, every layer, consume) with torch.cuda.graph and replays it per
step with new ids; it must reach the same hidden state as the eager loop. The CUDA prefetcher is the library's
engine: the planner's fast path and the GPU hot-row cache (--fast-path, --cache-size, --cache-update) run behind
the same prepare/consume calls, and the early run ends with the Path / Cache lines `engram run` prints.

Ids (--ids): auto (default), text, zipf and uniform are DecodeIds, the ids `engram run` replays for the same
--ids/--tokens/--seed/--table-size/--batch (so the hit rate of the cache built from the same warm-up window can be
set beside `engram run`'s); hasher hashes random prompts and random next tokens with Hasher.hash_chunk, one
sequence per batch slot, as an engine's own decode loop would. The first --warmup steps are not timed and are the
cache's warm-up window. --check compares every consumed staging with the CPU lookup of the same ids, bit for bit.

Run: PYTHONPATH=build/python /usr/bin/python3 python/examples/decode_loop.py [--steps 20] [--batch 64]
     PYTHONPATH=build/python python3 python/examples/decode_loop.py --device cuda --graph
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
    ap.add_argument("--table-size", default="512MiB", help="table bytes (default 512MiB, engram run's default)")
    ap.add_argument("--ids", default="auto", choices=["auto", "text", "zipf", "uniform", "hasher"],
                    help="decode ids: DecodeIds as engram run makes them (auto, text, zipf, uniform) or hasher")
    ap.add_argument("--tokens", default="", help="token file of --ids text (default: the text scripts/setup makes)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the table rows and of zipf/uniform ids (default 1)")
    ap.add_argument("--warmup", type=int, default=4,
                    help="steps run first, not timed; the cache's warm-up window (default 4, as engram run)")
    ap.add_argument("--threads", type=int, default=0, help="lookup threads (0 = one per CPU this process may run on)")
    ap.add_argument("--torch", action="store_true", help="torch compute (CUDA when available)")
    ap.add_argument("--trace", help="write the early run's Chrome trace here")
    ap.add_argument("--device", default="cpu", help="cpu (CPU prefetch queue) or cuda (CUDA prefetch stream, UVA)")
    ap.add_argument("--graph", action="store_true", help="--device cuda: also replay a torch.cuda.graph of each step")
    ap.add_argument("--fast-path", default="planner", help="CUDA lookup path: planner (default), plain, off")
    ap.add_argument("--cache-size", default="5%", help="CUDA hot-row cache per layer (5%% default, 256MiB, off)")
    ap.add_argument("--cache-update", default="every=4,rows=256", help="online cache updates, or off")
    ap.add_argument("--cache-profile", default=None, help="fill the cache from this profile (engram profile)")
    ap.add_argument("--check", action="store_true", help="compare every staging with the CPU lookup, bit for bit")
    ap.add_argument("--json-out", dest="json_out", help="write the runs' figures and the early engine's report here")
    args = ap.parse_args()

    torch = None
    device = "cpu"
    if args.device != "cpu":
        args.torch = True
    if args.torch:
        try:
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            print("--torch: PyTorch is not installed; using NumPy")

    layout = eo.Layout.preset("v41-flash-mini", table_size=args.table_size)
    table = eo.SharedTable.create(layout, backing="memfd", placement="none")
    t0 = time.perf_counter()
    table.fill_synthetic(args.seed)
    print(f"table: {layout}, filled in {time.perf_counter() - t0:.2f} s")
    cuda_lookups = args.device != "cpu"
    if cuda_lookups:
        if torch is None or device != "cuda" or not eo.cuda_backend_built():
            raise SystemExit("--device cuda needs PyTorch with a GPU and engram_offload built with CUDA")
        reg = table.register_cuda(torch.cuda.current_device())
        print(f"registered {reg['bytes'] / 2**20:.0f} MiB in {reg['chunks']} chunks for UVA "
              f"({reg['register_ns'] / 1e6:.1f} ms); device memory allocated by torch: {torch.cuda.memory_allocated()} B")
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
    total_steps = args.warmup + args.steps
    step_tokens = rng.integers(0, vocab, size=(total_steps, args.batch))

    def step_ids():
        """A fresh id stream: step -> int64 [n_layers, batch, heads]."""
        if args.ids != "hasher":
            d = eo.DecodeIds(layout, ids=args.ids, tokens=args.tokens, seed=args.seed)
            if d.note:
                print(f"ids: {d.note}")
            return lambda step: d.step(step, args.batch), d.describe()
        seqs = [hasher.begin_sequence() for _ in range(args.batch)]
        for b in range(args.batch):
            hasher.hash_chunk(seqs[b], prompt[b])  # prefill (ids not looked up here)
        return (lambda step: np.concatenate([hasher.hash_chunk(seqs[b], step_tokens[step, b:b + 1])
                                             for b in range(args.batch)], axis=1),
                "random prompts and tokens hashed with Hasher.hash_chunk")

    checked = {"lookups": 0, "mismatches": 0}

    def check(li, ids, staging):
        """Bit-for-bit comparison of a consumed staging with the CPU lookup of the same ids."""
        if not args.check:
            return
        want = eo.lookup(table, li, ids)
        got = staging.view(torch.int16).cpu().numpy().view(np.uint16) if cuda_lookups else np.asarray(staging)
        checked["lookups"] += 1
        if not np.array_equal(got.reshape(want.shape), want):
            checked["mismatches"] += 1
    results = {}
    main_stream = torch.cuda.Stream() if cuda_lookups else None
    for mode in ("on_demand", "early"):
        if cuda_lookups:
            pf = eo.Prefetcher(table, device="cuda", mode=mode, stream=main_stream, max_tokens=args.batch,
                               fast_path=args.fast_path, cache_size=args.cache_size, cache_update=args.cache_update,
                               cache_warmup=max(1, args.warmup), cache_profile=args.cache_profile)
        else:
            pf = eo.Prefetcher(table, mode=mode, threads=args.threads)
        next_ids, ids_text = step_ids()
        x = x0.copy()
        if torch is not None:
            x = torch.from_numpy(x).to(device)
            if cuda_lookups:
                main_stream.wait_stream(torch.cuda.current_stream())
        step_s = []
        for step in range(total_steps):
            ids = next_ids(step)  # ids of the new token of every sequence: [n_layers, batch, heads]
            ts = time.perf_counter()
            pf.begin_step(step)
            ctx = torch.cuda.stream(main_stream) if cuda_lookups else _nullcontext()
            ctx.__enter__()
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
                    check(engram_at[layer], ids[engram_at[layer]], staging)
                    if cuda_lookups:  # a torch.bfloat16 CUDA tensor over the prefetch staging, no copy
                        x = x + (staging.reshape(args.batch, H * D) @ proj_t).float()
                    elif torch is not None:
                        e = torch.from_numpy(staging.reshape(args.batch, H * D).view(np.int16)).view(torch.bfloat16)
                        x = x + (e.to(device) @ proj_t).float()
                    else:
                        e = eo.bf16_to_float32(staging).reshape(args.batch, H * D)
                        x = x + e @ proj
            ctx.__exit__(None, None, None)
            pf.end_step()
            if torch is not None and device == "cuda":
                torch.cuda.synchronize()
            if step >= args.warmup:
                step_s.append(time.perf_counter() - ts)
        checksum = float(x.sum()) if torch is None else float(x.sum().item())
        results[mode] = (pf, step_s, checksum)

    print(f"ids: {ids_text}")
    for mode, (pf, step_s, checksum) in results.items():
        warm = step_s
        print(f"\nmode {mode}: median step {np.median(warm) * 1e3:.2f} ms over {len(warm)} steps, "
              f"checksum {checksum:.6e}, totals {pf.totals()}")
        for layer_id, s in pf.summary().items():
            print(f"  engram layer {layer_id}: {s['lookups']} lookups, median L {s['median_lookup_us']:.1f} us, "
                  f"median queue s-r {s['median_queue_us']:.1f} us, median lead c-r {s['median_lead_us']:.1f} us, wait {s['total_wait_us']:.1f} us total, "
                  f"exposed {s['total_exposed_wait_us']:.1f} us total")
    same = results["early"][2] == results["on_demand"][2]
    print(f"\nearly and on_demand give the same hidden state: {same}")
    if args.check:
        print(f"checked {checked['lookups']} stagings against the CPU lookup: {checked['mismatches']} differ")
        same = same and checked["mismatches"] == 0
    if cuda_lookups:
        print("\nthe early run's engine (the lines engram run prints):")
        for line in results["early"][0].describe_lines():
            print("  " + line)
    if args.graph and cuda_lookups:
        g_checksum, g_step_s = run_graph(args, torch, layout, table, step_ids()[0], x0, w_t, proj_t,
                                         engram_at, main_stream)
        eager = results["early"][2]
        same_graph = abs(g_checksum - eager) <= 1e-4 * max(1.0, abs(eager))  # cuBLAS may pick other kernels in a graph
        print(f"graph replay: median step {np.median(g_step_s) * 1e3:.2f} ms, checksum "
              f"{g_checksum:.6e}; same hidden state as the eager loop (rel. 1e-4): {same_graph}")
        same = same and same_graph
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(results["early"][0].chrome_trace(), f)
        print(f"chrome trace: {args.trace}")
    if args.json_out:
        doc = {"ids": ids_text, "batch": args.batch, "warmup_steps": args.warmup, "steps": args.steps,
               "table_size": args.table_size, "seed": args.seed,
               "checked_lookups": checked["lookups"] if args.check else None,
               "mismatches": checked["mismatches"] if args.check else None,
               "modes": {m: {"median_step_ms": float(np.median(v[1])) * 1e3, "checksum": v[2]}
                         for m, v in results.items()},
               "engine": results["early"][0].describe() if cuda_lookups else None}
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0 if same else 1


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run_graph(args, torch, layout, table, next_ids, x0, w_t, proj_t, engram_at, s):
    """The early loop with each step captured once into a CUDA graph (static ids and hidden state) and replayed."""
    H, D = layout.heads, layout.d
    pf = eo.Prefetcher(table, device="cuda", mode="early", stream=s, max_tokens=args.batch)
    static_ids = [torch.zeros((args.batch, H), dtype=torch.int64, device="cuda") for _ in range(layout.n_layers)]
    x_in = torch.from_numpy(x0.copy()).cuda()
    s.wait_stream(torch.cuda.current_stream())

    def step_body():
        for li in range(layout.n_layers):
            pf.prepare(li, static_ids[li])
        x = x_in
        for layer in range(args.layers):
            x = torch.tanh(x @ w_t)
            if layer in engram_at:
                x = x + (pf.consume(engram_at[layer]).reshape(args.batch, H * D) @ proj_t).float()
        return x

    with torch.cuda.stream(s):  # warm-up (cuBLAS workspaces) outside the capture
        pf.begin_step(0)
        step_body()
    pf.end_step()
    graph = torch.cuda.CUDAGraph()
    pf.begin_step(1)
    with torch.cuda.graph(graph, stream=s, capture_error_mode="thread_local"):
        x_out = step_body()
    pf.end_step()  # closes the capture step (its timeline rows carry no times)
    step_s = []
    for step in range(args.warmup + args.steps):
        ids = next_ids(step)
        ts = time.perf_counter()
        for li in range(layout.n_layers):
            static_ids[li].copy_(torch.from_numpy(ids[li]), non_blocking=False)
        s.wait_stream(torch.cuda.current_stream())
        graph.replay()
        x_in.copy_(x_out)
        torch.cuda.synchronize()
        if step >= args.warmup:
            step_s.append(time.perf_counter() - ts)
    return float(x_in.sum().item()), step_s


if __name__ == "__main__":
    raise SystemExit(main())
