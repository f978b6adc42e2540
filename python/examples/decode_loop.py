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
With --device cuda (a CUDA build, torch with a GPU): the table is registered for UVA (never copied to the device),
the lookups run on the Prefetcher's CUDA prefetch stream while the matmuls run on the main stream, and staging
is consumed as torch.bfloat16 CUDA tensors in place. --graph (with --device cuda) also captures one decode step
(prepare of both layers from static device ids, every layer, consume) with torch.cuda.graph and replays it per
step with new ids; it must reach the same hidden state as the eager loop. The CUDA prefetcher is the library's
engine: the planner's fast path and the GPU hot-row cache (--fast-path, --cache-size, --cache-update) run behind
the same prepare/consume calls, and the early run ends with the Path / Cache lines `engram run` prints.

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
    ap.add_argument("--table-size", default="256MiB")
    ap.add_argument("--threads", type=int, default=0, help="lookup threads (0 = CPUs - 1)")
    ap.add_argument("--torch", action="store_true", help="torch compute (CUDA when available)")
    ap.add_argument("--trace", help="write the early run's Chrome trace here")
    ap.add_argument("--device", default="cpu", help="cpu (CPU prefetch queue) or cuda (CUDA prefetch stream, UVA)")
    ap.add_argument("--graph", action="store_true", help="--device cuda: also replay a torch.cuda.graph of each step")
    ap.add_argument("--fast-path", default="planner", help="CUDA lookup path: planner (default), plain, off")
    ap.add_argument("--cache-size", default="5%", help="CUDA hot-row cache per layer (5%% default, 256MiB, off)")
    ap.add_argument("--cache-update", default="every=4,rows=256", help="online cache updates, or off")
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
    table.fill_synthetic(1234)
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
    step_tokens = rng.integers(0, vocab, size=(args.steps, args.batch))
    results = {}
    main_stream = torch.cuda.Stream() if cuda_lookups else None
    for mode in ("on_demand", "early"):
        if cuda_lookups:
            pf = eo.Prefetcher(table, device="cuda", mode=mode, stream=main_stream, max_tokens=args.batch,
                               fast_path=args.fast_path, cache_size=args.cache_size, cache_update=args.cache_update,
                               cache_warmup=2)
        else:
            pf = eo.Prefetcher(table, mode=mode, threads=args.threads)
        seqs = [hasher.begin_sequence() for _ in range(args.batch)]
        for b in range(args.batch):
            hasher.hash_chunk(seqs[b], prompt[b])  # prefill (ids not looked up here)
        x = x0.copy()
        if torch is not None:
            x = torch.from_numpy(x).to(device)
            if cuda_lookups:
                main_stream.wait_stream(torch.cuda.current_stream())
        tokens = step_tokens
        step_s = []
        for step in range(args.steps):
            ts = time.perf_counter()
            pf.begin_step(step)
            # ids of the new token of every sequence: [n_layers, batch, heads]
            ids = np.concatenate([hasher.hash_chunk(seqs[b], tokens[step, b:b + 1]) for b in range(args.batch)],
                                 axis=1)
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
    if cuda_lookups:
        print("\nthe early run's engine (the lines engram run prints):")
        for line in results["early"][0].describe_lines():
            print("  " + line)
    if args.graph and cuda_lookups:
        g_checksum, g_step_s = run_graph(args, torch, layout, table, hasher, prompt, step_tokens, x0, w_t, proj_t,
                                         engram_at, main_stream)
        eager = results["early"][2]
        same_graph = abs(g_checksum - eager) <= 1e-4 * max(1.0, abs(eager))  # cuBLAS may pick other kernels in a graph
        print(f"graph replay: median step {np.median(g_step_s[2:] or g_step_s) * 1e3:.2f} ms, checksum "
              f"{g_checksum:.6e}; same hidden state as the eager loop (rel. 1e-4): {same_graph}")
        same = same and same_graph
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(results["early"][0].chrome_trace(), f)
        print(f"chrome trace: {args.trace}")
    return 0 if same else 1


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run_graph(args, torch, layout, table, hasher, prompt, step_tokens, x0, w_t, proj_t, engram_at, s):
    """The early loop with each step captured once into a CUDA graph (static ids and hidden state) and replayed."""
    H, D = layout.heads, layout.d
    pf = eo.Prefetcher(table, device="cuda", mode="early", stream=s, max_tokens=args.batch)
    seqs = [hasher.begin_sequence() for _ in range(args.batch)]
    for b in range(args.batch):
        hasher.hash_chunk(seqs[b], prompt[b])
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
    for step in range(args.steps):
        ts = time.perf_counter()
        ids = np.concatenate([hasher.hash_chunk(seqs[b], step_tokens[step, b:b + 1]) for b in range(args.batch)], axis=1)
        for li in range(layout.n_layers):
            static_ids[li].copy_(torch.from_numpy(ids[li]), non_blocking=False)
        s.wait_stream(torch.cuda.current_stream())
        graph.replay()
        x_in.copy_(x_out)
        torch.cuda.synchronize()
        step_s.append(time.perf_counter() - ts)
    return float(x_in.sum().item()), step_s


if __name__ == "__main__":
    raise SystemExit(main())
