"""Tensor-parallel slices from Python: SharedTable.create(..., tp_size=, tp_rank=) holds one rank's heads (ceil(heads /
tp_size), vLLM's sharding) and only their rows; its lookup is the whole table's restricted to those heads, zeros
for padded heads and for ids of other ranks' rows."""
import numpy as np
import pytest

import engram_offload as eo
from conftest import random_ids


@pytest.mark.parametrize("fmt", ["fused", "split"])
def test_every_shard_is_the_whole_lookup_restricted_to_its_heads(rng, fmt):
    lay = eo.Layout.preset("tiny", format=fmt)
    heads = lay.heads
    seed = int(rng.integers(1, 1 << 62))
    whole = eo.SharedTable.create(lay)
    whole.fill_synthetic(seed)
    for size in (1, 2, 3, 4):
        part = -(-heads // size)
        for rank in range(size):
            shard = eo.SharedTable.create(lay, tp_size=size, tp_rank=rank)
            shard.fill_synthetic(seed)
            for layer in range(lay.n_layers):
                offs = np.asarray(lay.head_offsets[layer])
                ids = random_ids(rng, lay, layer, int(rng.integers(1, 200)))
                # Some ids of another head's rows: a zero on every rank that does not hold them.
                swap = rng.random(ids.shape) < 0.2
                ids[swap] = rng.integers(0, offs[-1], size=int(swap.sum()))
                full = eo.lookup(whole, layer, ids)
                got = eo.lookup(shard, layer, ids)
                local = heads if size == 1 else part
                assert got.shape == (ids.shape[0], local, lay.d)
                begin = rank * local
                lo = offs[min(begin, heads)] if size > 1 else 0
                hi = offs[min(begin + local, heads)] if size > 1 else offs[-1]
                for j in range(local):
                    h = begin + j
                    if h >= heads:
                        assert not got[:, j].any(), f"padded head {j} of rank {rank}/{size}"
                        continue
                    mine = (ids[:, h] >= lo) & (ids[:, h] < hi)
                    np.testing.assert_array_equal(got[mine, j], full[mine, h])
                    assert not got[~mine, j].any()


def test_bad_slices_raise(rng):
    lay = eo.Layout.preset("tiny")
    with pytest.raises(eo.EngramError):
        eo.SharedTable.create(lay, tp_size=2, tp_rank=2)
    with pytest.raises(eo.EngramError):
        eo.SharedTable.create(lay, tp_size=0)


@pytest.mark.parametrize("backing,can_pass_fds,rank", [("memfd", True, 1), ("shm", False, 0), ("memfd", True, 3)])
def test_group_peer_maps_the_leaders_slice(rng, backing, can_pass_fds, rank):
    """The protocol's description carries the slice: a peer maps the leader's slice (rank 3 of 4 on v41-flash-mini's
    24 heads holds heads 18-24) and reads the same rows, [tokens, 6, d]."""
    import socket

    from test_group import PairChannel, _peer_pair, ctx

    lay = eo.Layout.preset("v41-flash-mini", table_size="4MiB")
    seed = int(rng.integers(1, 1 << 62))
    ids = random_ids(rng, lay, 1, 16)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    q = ctx.Queue()
    peer = ctx.Process(target=_peer_pair, args=(b, can_pass_fds, ids, q))
    peer.start()
    b.close()
    table = eo.SharedTable.create(lay, backing=backing, group=PairChannel(a, 0, can_pass_fds), seed=seed, tp_size=4,
                                  tp_rank=rank)
    status, digest, detail = q.get(timeout=60)
    peer.join(60)
    assert status == "ok", (digest, detail)
    mine = eo.lookup(table, 1, ids, threads=1)
    assert mine.shape == (16, 6, lay.d)
    assert digest == mine.tobytes()
    whole = eo.SharedTable.create(lay)
    whole.fill_synthetic(seed)
    np.testing.assert_array_equal(mine, eo.lookup(whole, 1, ids)[:, rank * 6:rank * 6 + 6])
