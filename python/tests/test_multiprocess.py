"""Sharing one table between processes: a memfd-backed SharedTable is one set of pages, so what a forked
process writes into it, its parent reads (a private table is copy-on-write: it does not), and processes
reading it concurrently get the same staging."""
import multiprocessing as mp

import numpy as np
import pytest

import engram_offload as eo
from conftest import random_ids

ctx = mp.get_context("fork")


def _fill(table, seed):
    table.fill_synthetic(seed, threads=1)


def _lookup_digest(table, ids, conn):
    # A pipe, not a multiprocessing.Queue: the queue starts a feeder thread in the forked child, and a thread
    # started in a fork of a process that holds CUDA and torch threads can crash there.
    out = eo.lookup(table, 0, ids, threads=1)
    conn.send_bytes(out.tobytes())
    conn.close()


def _expected(layout, seed, ids):
    flat = ids.ravel()
    live = np.where(flat >= 0, flat, 0)
    p, s = eo.synth_rows(seed, 0, live, layout.d)
    out = eo.decode_rows(p, s)
    out[flat < 0] = 0
    return out.reshape(ids.shape + (layout.d,))


def test_child_writes_are_seen_by_parent(rng):
    lay = eo.Layout.preset("tiny")
    table = eo.SharedTable.create(lay, backing="memfd")
    seed = int(rng.integers(1, 1 << 62))
    child = ctx.Process(target=_fill, args=(table, seed))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    ids = random_ids(rng, lay, 0, 40)
    np.testing.assert_array_equal(eo.lookup(table, 0, ids), _expected(lay, seed, ids))


def test_private_table_is_not_shared(rng):
    lay = eo.Layout.preset("tiny")
    table = eo.SharedTable.allocate(lay)
    child = ctx.Process(target=_fill, args=(table, 99))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    ids = random_ids(rng, lay, 0, 16, dead_fraction=0.0)
    assert (eo.lookup(table, 0, ids) == 0).all()


def test_two_processes_read_the_same_table(rng):
    lay = eo.Layout.preset("tiny")
    table = eo.SharedTable.create(lay)
    seed = int(rng.integers(1, 1 << 62))
    table.fill_synthetic(seed)
    ids = random_ids(rng, lay, 0, 64)
    pipes = [ctx.Pipe(duplex=False) for _ in range(2)]
    procs = [ctx.Process(target=_lookup_digest, args=(table, ids, w)) for _, w in pipes]
    for p in procs:
        p.start()
    got = []
    for r, _ in pipes:
        assert r.poll(60), "a reader process sent nothing within 60 s"
        got.append(r.recv_bytes())
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    expect = _expected(lay, seed, ids).tobytes()
    assert got[0] == expect and got[1] == expect
