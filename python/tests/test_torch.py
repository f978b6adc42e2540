"""PyTorch interop (skipped where PyTorch is not installed, e.g. the CI machine; run on the GPU machine)."""
import numpy as np
import pytest

import engram_offload as eo
from conftest import random_ids, reference_lookup

torch = pytest.importorskip("torch")


def test_torch_cpu_ids_and_bf16_out(random_table, rng):
    lay = random_table.layout
    ids = random_ids(rng, lay, 0, 21)
    res = eo.lookup(random_table, 0, torch.from_numpy(ids))
    assert res.dtype == torch.bfloat16 and tuple(res.shape) == ids.shape + (lay.d,)
    np.testing.assert_array_equal(res.view(torch.int16).numpy().view(np.uint16), reference_lookup(random_table, 0, ids))
    out = torch.empty(ids.shape + (lay.d,), dtype=torch.bfloat16)
    got = eo.lookup(random_table, 0, ids, out=out)
    assert got is out
    np.testing.assert_array_equal(out.view(torch.int16).numpy().view(np.uint16), reference_lookup(random_table, 0, ids))


def test_torch_cuda_tensor_is_refused(random_table, rng):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    ids = torch.from_numpy(random_ids(rng, random_table.layout, 0, 4)).cuda()
    with pytest.raises(eo.EngramError) as e:
        eo.lookup(random_table, 0, ids)
    assert e.value.code == ("invalid_argument" if eo.cuda_backend_built() else "unsupported")


def test_torch_in_torch_out_for_hashing_and_the_cpu_queue(random_table, rng):
    lay = random_table.layout
    h = eo.Hasher(lay, compressed_vocab=1000)
    tokens = rng.integers(0, 1000, size=17)
    ids = h.hash(torch.from_numpy(tokens), 0)
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int64
    np.testing.assert_array_equal(ids.numpy(), h.hash(tokens, 0))  # same ids as for NumPy input
    chunk = h.hash_chunk(h.begin_sequence(), torch.from_numpy(tokens))
    assert isinstance(chunk, torch.Tensor)
    p = eo.Prefetcher(random_table, threads=1)
    p.begin_step(0)
    want = random_ids(rng, lay, 0, 9)
    p.prepare(0, torch.from_numpy(want))
    got = p.consume(0)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.view(torch.int16).numpy().view(np.uint16), reference_lookup(random_table, 0, want))
    for li in range(1, lay.n_layers):
        p.prepare(li, random_ids(rng, lay, li, 9))
        assert isinstance(p.consume(li), np.ndarray)  # NumPy in, NumPy out
    p.end_step()
