"""engram_offload on a CUDA device with PyTorch tensors (skipped without torch, a GPU or the CUDA build): UVA
lookups bit-identical to the NumPy reference on fresh random bytes (poisoned outputs, both row formats, a side
stream, grid caps), no device copy of the table (torch.cuda.memory_allocated and cudaMemGetInfo around
registration and lookups), the CUDA Prefetcher (host and device ids, early == on_demand, after_event, timeline)
and a prefetch step captured with torch.cuda.graph and replayed with new ids."""
import numpy as np
import pytest

import engram_offload as eo
from conftest import random_ids, reference_lookup

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not eo.cuda_backend_built():
    pytest.skip("engram_offload built without the CUDA backend", allow_module_level=True)

DEV = 0


def bits(t):
    """CUDA bf16 tensor -> NumPy uint16 bits (host copy, synchronising)."""
    return t.view(torch.int16).cpu().numpy().view(np.uint16)


def poisoned(shape):
    return torch.full(shape, -23131, dtype=torch.int16, device=f"cuda:{DEV}").view(torch.bfloat16)  # 0xA5A5


def test_lookup_bit_identical(random_table, rng):
    lay = random_table.layout
    reg = random_table.register_cuda(DEV)
    assert reg["bytes"] > 0 and reg["chunks"] >= 1 and random_table.cuda_devices == [DEV]
    assert random_table.register_cuda(DEV)["bytes"] == reg["bytes"]  # idempotent
    side = torch.cuda.Stream()
    for tokens in (1, 7, 300):
        ids_np = random_ids(rng, lay, 0, tokens)
        ids = torch.from_numpy(ids_np).cuda()
        expect = reference_lookup(random_table, 0, ids_np)
        got = eo.lookup(random_table, 0, ids)
        assert got.dtype == torch.bfloat16 and got.device.type == "cuda" and tuple(got.shape) == expect.shape
        np.testing.assert_array_equal(bits(got), expect)
        out = poisoned(expect.shape)
        side.wait_stream(torch.cuda.current_stream())
        res, info = eo.lookup(random_table, 0, ids, out=out, stream=side, grid_cap=3, return_stats=True)
        assert res is out and info["rows"] == ids_np.size and 1 <= info["grid"] <= 3
        side.synchronize()
        np.testing.assert_array_equal(bits(out), expect)
        out2 = poisoned(expect.shape)
        _, info = eo.lookup(random_table, 0, ids, out=out2, stream=side.cuda_stream, grid_cap=0.25, return_stats=True)
        side.synchronize()
        np.testing.assert_array_equal(bits(out2), expect)


def test_lookup_errors(rng):
    lay = eo.Layout.preset("tiny")
    table = eo.SharedTable.create(lay)
    ids = torch.from_numpy(random_ids(rng, lay, 0, 4)).cuda()
    with pytest.raises(eo.EngramError) as e:
        eo.lookup(table, 0, ids)
    assert e.value.code == "invalid_argument" and "register_cuda" in e.value.message
    table.register_cuda(DEV)
    with pytest.raises(eo.EngramError) as e:
        eo.lookup(table, 0, ids.to(torch.int32))
    assert e.value.code == "invalid_argument"
    with pytest.raises(eo.EngramError) as e:
        eo.lookup(table, 0, ids, out=torch.empty((4, lay.heads, lay.d + 1), dtype=torch.bfloat16, device="cuda"))
    assert e.value.code == "invalid_argument"
    with pytest.raises(eo.EngramError) as e:
        eo.lookup(table, 0, ids, grid_cap=0)
    assert e.value.code == "invalid_argument"


def test_no_device_copy_of_the_table(rng):
    lay = eo.Layout.preset("v41-flash-mini", table_size="1GiB")
    table = eo.SharedTable.create(lay)
    table.fill_synthetic(int(rng.integers(1, 1 << 62)))
    torch.cuda.synchronize()
    alloc0 = torch.cuda.memory_allocated(DEV)
    free0, _ = torch.cuda.mem_get_info(DEV)
    # The engine's own device buffers (queue staging, fast-path scratch) scale with max_tokens, not with the table:
    # sized for 512 tokens here so that a table copy would stand out against them.
    table.register_cuda(DEV, max_tokens=512)
    ids_np = random_ids(rng, lay, 1, 64)
    ids = torch.from_numpy(ids_np).cuda()
    out = eo.lookup(table, 1, ids)
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info(DEV)
    staging_bytes = out.numel() * 2 + ids.numel() * 8
    assert torch.cuda.memory_allocated(DEV) - alloc0 <= staging_bytes + (1 << 20)
    # cudaMemGetInfo sees every allocation, ours included: far less than the table's size went to the device
    assert free0 - free1 < lay.total_bytes // 8, (free0 - free1, lay.total_bytes)
    np.testing.assert_array_equal(bits(out), reference_lookup(table, 1, ids_np))


@pytest.mark.parametrize("device_ids", [False, True])
def test_prefetcher_early_equals_on_demand_equals_reference(rng, device_ids):
    lay = eo.Layout.preset("v41-flash-mini", table_size="8MiB")
    table = eo.SharedTable.create(lay)
    table.fill_synthetic(int(rng.integers(1, 1 << 62)))
    batches = [[random_ids(rng, lay, li, int(rng.integers(1, 96))) for li in range(lay.n_layers)] for _ in range(3)]
    staged = {}
    for mode in ("early", "on_demand"):
        pf = eo.Prefetcher(table, device=f"cuda:{DEV}", mode=mode, max_tokens=128)
        assert pf.backend == "cuda" and pf.layers == list(range(lay.n_layers))
        got = []
        for step, per_layer in enumerate(batches):
            pf.begin_step(step)
            ev = torch.cuda.Event()
            ids_dev = [torch.from_numpy(x).cuda() for x in per_layer]
            ev.record()
            for li in range(lay.n_layers):
                pf.prepare(li, ids_dev[li] if device_ids else per_layer[li], after_event=ev)
            for li in range(lay.n_layers):
                st = pf.consume(li)
                assert st.dtype == torch.bfloat16 and st.device.type == "cuda"
                got.append(bits(st))
            pf.end_step()
        tl = pf.timeline()["rows"]
        assert len(tl) == 3 * lay.n_layers
        for r in tl:
            assert r["s_ns"] is not None and r["f_ns"] is not None and r["f_ns"] >= r["s_ns"]
        assert pf.totals()["rows"] == sum(x.size for b in batches for x in b)
        assert pf.last_launch(0)["grid"] >= 1
        staged[mode] = got
    for i, (a, b) in enumerate(zip(staged["early"], staged["on_demand"])):
        li = i % lay.n_layers
        ref = reference_lookup(table, li, batches[i // lay.n_layers][li])
        np.testing.assert_array_equal(a, ref)
        np.testing.assert_array_equal(b, ref)


def test_prefetcher_layers_subset_and_device_array(rng):
    lay = eo.Layout.preset("v41-flash-mini", table_size="8MiB")
    table = eo.SharedTable.create(lay)
    table.fill_synthetic(7)
    pf = eo.Prefetcher(table, layers=[1], device=DEV)
    ids = random_ids(rng, lay, 1, 10)
    pf.begin_step(0)
    with pytest.raises(eo.EngramError) as e:
        pf.prepare(0, random_ids(rng, lay, 0, 2))
    assert e.value.code == "invalid_argument"
    pf.prepare(1, ids)
    arr = pf._q.consume(1, True)  # the raw DeviceArray
    assert arr.shape == (10, lay.heads, lay.d) and arr.__dlpack_device__() == (2, DEV)
    cai = arr.__cuda_array_interface__
    assert cai["data"][0] == arr.ptr and cai["typestr"] == "<u2"
    t = torch.from_dlpack(arr)
    assert t.data_ptr() == arr.ptr
    np.testing.assert_array_equal(bits(t), reference_lookup(table, 1, ids))
    pf.end_step()


def test_prefetch_step_under_cuda_graph_capture(rng):
    lay = eo.Layout.preset("v41-flash-mini", table_size="8MiB")
    table = eo.SharedTable.create(lay)
    table.fill_synthetic(int(rng.integers(1, 1 << 62)))
    tokens = 48
    s = torch.cuda.Stream()
    pf = eo.Prefetcher(table, device=DEV, stream=s, max_tokens=tokens)
    static_ids = [torch.zeros((tokens, lay.heads), dtype=torch.int64, device="cuda") for _ in range(lay.n_layers)]
    w = torch.randn(lay.heads * lay.d, 64, device="cuda", dtype=torch.bfloat16)
    static_out = [None] * lay.n_layers
    s.wait_stream(torch.cuda.current_stream())  # the static ids were zeroed on the current stream
    # warm-up on the same stream (torch advises it before capture), then capture one step
    with torch.cuda.stream(s):
        pf.begin_step(0)
        for li in range(lay.n_layers):
            pf.prepare(li, static_ids[li])
        for li in range(lay.n_layers):
            st = pf.consume(li)
            _ = (st.reshape(tokens, -1) @ w, st.clone())  # creates the cuBLAS handle outside the capture
    pf.end_step()
    g = torch.cuda.CUDAGraph()
    pf.begin_step(1)
    with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
        for li in range(lay.n_layers):
            pf.prepare(li, static_ids[li])
        for li in range(lay.n_layers):
            st = pf.consume(li)
            static_out[li] = (st.reshape(tokens, -1) @ w, st.clone())
    for step in range(2):
        ids_np = [random_ids(rng, lay, li, tokens) for li in range(lay.n_layers)]
        for li in range(lay.n_layers):
            static_ids[li].copy_(torch.from_numpy(ids_np[li]))
        g.replay()
        torch.cuda.synchronize()
        for li in range(lay.n_layers):
            ref = reference_lookup(table, li, ids_np[li])
            np.testing.assert_array_equal(bits(static_out[li][1]), ref)
            expect_mm = torch.from_numpy(ref.view(np.int16)).view(torch.bfloat16).cuda().reshape(tokens, -1) @ w
            torch.testing.assert_close(static_out[li][0], expect_mm)
    pf.end_step()
