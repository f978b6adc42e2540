"""The torch custom ops (torch.ops.engram.*) and EngramEmbedding (skipped without torch >= 2.4, a GPU or the CUDA
build): torch.library.opcheck passes on every op; a small model (embedding -> two Engram layers through
EngramEmbedding, looked up and prefetched -> linear) compiles with fullgraph=True and with the default mode with
no graph break (torch._dynamo.explain), gives Engram rows bit-identical to eager and to the NumPy reference lookup
(the dense part within bf16 tolerance: Inductor fuses and rounds it differently),
and replays under CUDA graph capture with fresh ids; the device hash op equals the CPU hasher, DEAD tokens
included."""
import numpy as np
import pytest

import engram_offload as eo
from conftest import numpy_decode, random_ids, table_rows

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (the ops need torch >= 2.4)",
                allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not eo.cuda_backend_built():
    pytest.skip("engram_offload built without the CUDA backend", allow_module_level=True)

import engram_offload.torch as eot  # noqa: E402  (registers the ops)

DEV = 0
TOKENS = 96


@pytest.fixture(scope="module")
def served():
    rng = np.random.default_rng()
    lay = eo.Layout.preset("v41-flash-mini", table_size="32MiB")
    table = eo.SharedTable.create(lay)
    table.fill_synthetic(int(rng.integers(1, 1 << 62)))
    engine = eo.Engine(table, backend="cuda", device=DEV, fast_path="planner", max_tokens=TOKENS)
    rows = [table_rows(table, li) for li in range(lay.n_layers)]
    return table, engine, rows


def reference(rows, ids):
    payload, scales = rows
    valid = (ids >= 0) & (ids < payload.shape[0])
    safe = np.where(valid, ids, 0)
    out = numpy_decode(payload[safe], scales[safe])
    out[~valid] = 0
    return out


def bits(t):
    return t.detach().view(torch.int16).cpu().numpy().view(np.uint16)


def test_opcheck_every_op(served):
    table, engine, _ = served
    lay = table.layout
    h = eot.register_engine(engine)
    rng = np.random.default_rng()
    ids = torch.from_numpy(random_ids(rng, lay, 1, 17)).cuda()
    torch.library.opcheck(torch.ops.engram.lookup.default, (ids, h, 1))
    torch.library.opcheck(torch.ops.engram.prepare.default, (ids, h, 1))
    ticket = torch.ops.engram.prepare(ids, h, 1)
    torch.library.opcheck(torch.ops.engram.consume.default, (ticket, h, 1))
    hasher = eot.DeviceHasher(eo.Hasher(lay, "default"), device=f"cuda:{DEV}")
    args = _hash_args(hasher, rng)
    torch.library.opcheck(torch.ops.engram.hash.default, args + (hasher.handle,))


class Tiny(torch.nn.Module):
    """embedding -> two Engram layers (the first looked up, the second prefetched) -> linear."""

    def __init__(self, engine, width=64):
        super().__init__()
        lay = engine.layout
        self.emb = torch.nn.Embedding(1000, width, device=f"cuda:{DEV}", dtype=torch.bfloat16)
        self.e0 = eot.EngramEmbedding(engine, 0)
        self.e1 = eot.EngramEmbedding(engine, 1)
        self.proj = torch.nn.Linear(lay.heads * lay.d, width, device=f"cuda:{DEV}", dtype=torch.bfloat16)

    def forward(self, tok, ids0, ids1):
        ticket = self.e1.prepare(ids1)
        x = self.emb(tok)
        y0 = self.e0(ids0)
        x = x + self.proj(y0.flatten(1))
        y1 = self.e1(ids1, ticket=ticket)
        return x + self.proj(y1.flatten(1)), y0, y1


def _close_dense(got, want):
    """The dense part (embedding + two linears summed in bf16): equal up to the rounding of a sum whose terms reach
    the magnitude of the largest output (Inductor orders and fuses the adds differently from eager)."""
    scale = float(want.detach().abs().max())
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=scale / 64)


def _inputs(lay, rng):
    tok = torch.from_numpy(rng.integers(0, 1000, TOKENS)).cuda()
    ids = [random_ids(rng, lay, li, TOKENS) for li in range(2)]
    return (tok, torch.from_numpy(ids[0]).cuda(), torch.from_numpy(ids[1]).cuda()), ids


def test_compiled_model_equals_eager_and_the_reference(served):
    table, engine, rows = served
    lay = table.layout
    torch.manual_seed(0)
    model = Tiny(engine)
    rng = np.random.default_rng()
    args, host_ids = _inputs(lay, rng)
    explanation = torch._dynamo.explain(model)(*args)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    eager = model(*args)
    for li in range(2):
        np.testing.assert_array_equal(bits(eager[1 + li]), reference(rows[li], host_ids[li]))
    for kwargs in ({"fullgraph": True}, {}):
        torch._dynamo.reset()
        compiled = torch.compile(model, **kwargs)
        for _ in range(3):  # fresh ids each call
            args, host_ids = _inputs(lay, rng)
            got = compiled(*args)
            want = model(*args)
            # The Engram rows bit for bit; the dense part (embedding + linear) as Inductor's fusion rounds it.
            for g, w in zip(got[1:], want[1:]):
                assert torch.equal(g.view(torch.int16), w.view(torch.int16)), kwargs
            _close_dense(got[0], want[0])
            for li in range(2):
                np.testing.assert_array_equal(bits(got[1 + li]), reference(rows[li], host_ids[li]))


def test_compiled_model_replays_under_cuda_graph_capture(served):
    table, engine, rows = served
    lay = table.layout
    torch.manual_seed(0)
    model = Tiny(engine)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    rng = np.random.default_rng()
    static, _ = _inputs(lay, rng)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            compiled(*static)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = compiled(*static)
    for _ in range(5):
        args, host_ids = _inputs(lay, rng)
        for s, a in zip(static, args):
            s.copy_(a)
        g.replay()
        want = model(*static)
        for o, w in zip(out[1:], want[1:]):
            assert torch.equal(o.view(torch.int16), w.view(torch.int16))
        _close_dense(out[0], want[0])
        for li in range(2):
            np.testing.assert_array_equal(bits(out[1 + li]), reference(rows[li], host_ids[li]))


def _hash_args(hasher, rng, requests=5, dead_fraction=0.1):
    counts = rng.integers(0, 12, requests)
    qsl = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    n = int(qsl[-1])
    tokens = rng.integers(0, 128000, n).astype(np.int64)
    lookback = rng.integers(0, 128000, (requests + 2, hasher.window)).astype(np.int64)
    lookback[0, :] = np.iinfo(np.int64).min  # a fresh sequence: DEAD look-back tokens
    slots = rng.permutation(requests + 2)[:requests].astype(np.int32)
    dead = (rng.random(n) < dead_fraction).astype(np.uint8)
    dev = f"cuda:{hasher.device}"
    return tuple(torch.from_numpy(x).to(dev) for x in (tokens, qsl, lookback, slots, dead))


def test_device_hash_op_equals_the_cpu_hasher(served):
    table, _, _ = served
    lay = table.layout
    dh = eot.DeviceHasher(eo.Hasher(lay, "default"), device=f"cuda:{DEV}")
    rng = np.random.default_rng()
    for _ in range(10):
        args = _hash_args(dh, rng)
        got = dh(*args)
        want = dh(*(a.cpu() for a in args))  # the CPU reference (hash_batch_reference)
        assert got.shape == (lay.n_layers, args[0].shape[0], lay.heads)
        np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())
