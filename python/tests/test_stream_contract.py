"""The stream contract of every CUDA entry point (skipped without torch, a GPU or the CUDA build): eo.lookup on a
table, Engine.lookup, the Prefetcher and the torch ops run on the caller's stream (torch's current stream, the
legacy default stream included) or order themselves with it by events. A consumer enqueued right after each call
on the caller's stream copies the rows into a history buffer, 100 times with fresh ids and no host
synchronisation in between, on the default stream and on a side stream, and once more with the call captured in a
torch.cuda.graph and replayed; every copy is compared with the NumPy reference at the end. Then CUDA events on the
caller's stream around a lookup of 196,608 rows of a layer of >= 16 GiB must enclose the work (>= 1 ms)."""
import numpy as np
import pytest

import engram_offload as eo
from conftest import numpy_decode, random_ids, table_rows

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not eo.cuda_backend_built():
    pytest.skip("engram_offload built without the CUDA backend", allow_module_level=True)

DEV = 0
CALLS = 100
TOKENS = 256
POISON = -23131  # 0xA5A5 as int16


def _ops():
    if not hasattr(torch.library, "custom_op"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (the ops need torch >= 2.4)")
    import engram_offload.torch as eot
    return eot


@pytest.fixture(scope="module")
def served():
    """A synthetic 64 MiB table registered for the GPU, an engine over it with the planner's fast path, and the
    layer's rows as NumPy arrays for the reference."""
    rng = np.random.default_rng()
    lay = eo.Layout.preset("v41-flash-mini", table_size="64MiB")
    table = eo.SharedTable.create(lay)
    table.fill_synthetic(int(rng.integers(1, 1 << 62)))
    table.register_cuda(DEV)
    engine = eo.Engine(table, backend="cuda", device=DEV, fast_path="planner", max_tokens=TOKENS)
    return table, engine, table_rows(table, 0)


def reference(rows, ids):
    payload, scales = rows
    valid = (ids >= 0) & (ids < payload.shape[0])
    out = numpy_decode(payload[np.where(valid, ids, 0)], scales[np.where(valid, ids, 0)])
    out[~valid] = 0
    return out


def entry_points(table, engine):
    """name -> call(ids) returning the rows as a CUDA tensor, on torch's current stream."""
    lay = table.layout

    def into_poisoned(fn):
        def call(ids):
            out = torch.full((ids.shape[0], lay.heads, lay.d), POISON, dtype=torch.int16,
                             device=ids.device).view(torch.bfloat16)
            fn(ids, out)
            return out
        return call

    pf = eo.Prefetcher(engine)

    def prefetched(ids):
        pf.prepare(0, ids)
        return pf.consume(0)

    calls = {
        "eo.lookup(table)": into_poisoned(lambda ids, out: eo.lookup(table, 0, ids, out=out)),
        "Engine.lookup": into_poisoned(lambda ids, out: engine.lookup(0, ids, out=out)),
        "Prefetcher": prefetched,
    }
    if hasattr(torch.library, "custom_op"):
        eot = _ops()
        h = eot.register_engine(engine)
        calls["engram::lookup"] = lambda ids: torch.ops.engram.lookup(ids, h, 0)
        calls["engram::prepare+consume"] = lambda ids: torch.ops.engram.consume(torch.ops.engram.prepare(ids, h, 0), h, 0)
    return calls


def fresh_ids(lay, n):
    rng = np.random.default_rng()
    host = [random_ids(rng, lay, 0, TOKENS) for _ in range(n)]
    return host, torch.from_numpy(np.concatenate(host)).to(f"cuda:{DEV}")


def check_history(table, rows, host_ids, history, what):
    """Every consumer's copy equals the CPU lookup of its ids (the library's CPU backend, itself checked against
    the scalar reference by the conformance tests)."""
    torch.cuda.synchronize()
    got = history.view(torch.int16).cpu().numpy().view(np.uint16)
    want = eo.lookup(table, 0, np.concatenate(host_ids)).reshape(got.shape)
    np.testing.assert_array_equal(want[0], reference(rows, host_ids[0]))  # the CPU lookup against NumPy's
    bad = [i for i in range(len(host_ids)) if not np.array_equal(got[i], want[i])]
    assert not bad, f"{what}: {len(bad)} of {len(host_ids)} consumers read rows not yet written (first: call {bad[0]})"


@pytest.mark.parametrize("side", [False, True], ids=["default-stream", "side-stream"])
def test_consumer_on_the_callers_stream_reads_the_rows(served, side):
    table, engine, rows = served
    lay = table.layout
    for name, call in entry_points(table, engine).items():
        host_ids, dev_ids = fresh_ids(lay, CALLS)
        history = torch.full((CALLS, TOKENS, lay.heads, lay.d), POISON, dtype=torch.int16,
                             device=f"cuda:{DEV}").view(torch.bfloat16)
        torch.cuda.synchronize()
        stream = torch.cuda.Stream() if side else torch.cuda.current_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for i in range(CALLS):
                history[i].copy_(call(dev_ids[i * TOKENS:(i + 1) * TOKENS]))
        check_history(table, rows, host_ids, history, f"{name} on the {'side' if side else 'default'} stream")


def test_the_same_under_cuda_graph_capture(served):
    table, engine, rows = served
    lay = table.layout
    for name, call in entry_points(table, engine).items():
        host_ids, dev_ids = fresh_ids(lay, CALLS + 1)
        static_ids = dev_ids[:TOKENS].clone()
        history = torch.full((CALLS, TOKENS, lay.heads, lay.d), POISON, dtype=torch.int16,
                             device=f"cuda:{DEV}").view(torch.bfloat16)
        warm = torch.cuda.Stream()
        warm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warm):
            call(static_ids)
        torch.cuda.current_stream().wait_stream(warm)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = call(static_ids)
        for i in range(CALLS):
            static_ids.copy_(dev_ids[(i + 1) * TOKENS:(i + 2) * TOKENS])
            g.replay()
            history[i].copy_(static_out)
        check_history(table, rows, host_ids[1:], history, f"{name}, captured and replayed")


def test_events_on_the_callers_stream_enclose_the_lookup():
    lay = eo.Layout.preset("v41-flash-mini", table_size="33GiB")
    table = eo.SharedTable.create(lay)  # zero pages: reading them costs the same
    table.register_cuda(DEV)
    engine = eo.Engine(table, backend="cuda", device=DEV, fast_path="off", max_tokens=8192)
    assert table.memory(0)[0].nbytes >= 16 << 30, "the layer must span >= 16 GiB"
    rng = np.random.default_rng()
    calls = entry_points(table, engine)
    for side in (False, True):
        stream = torch.cuda.Stream() if side else torch.cuda.current_stream()
        for name, call in calls.items():
            ids = torch.from_numpy(random_ids(rng, lay, 0, 8192)).to(f"cuda:{DEV}")  # fresh: cold translation caches
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                a.record()
                call(ids)
                b.record()
            b.synchronize()
            ms = a.elapsed_time(b)
            print(f"{name}, {'side' if side else 'default'} stream: {ms:.3f} ms for {8192 * lay.heads} rows")
            assert ms >= 1.0, f"{name}: the caller's events enclosed {ms * 1e3:.1f} us for 196,608 rows"
