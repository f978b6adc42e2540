"""Shared-group protocol from Python: a leader (SharedTable.create(group=channel)) and peers
(SharedTable.attach(channel)) end up reading the SAME pages -- over the library's Unix channel (memfds by
SCM_RIGHTS) and over a channel implemented in Python (the callback path TorchGroupChannel uses), with
descriptors and, for a channel that cannot pass them, with a named shm backing; read-only peers cannot write."""
import multiprocessing as mp
import os
import pickle
import socket
import struct

import numpy as np
import pytest

import engram_offload as eo
from conftest import random_ids

ctx = mp.get_context("fork")


def _expected(layout, seed, li, ids):
    flat = ids.ravel()
    live = np.where(flat >= 0, flat, 0)
    p, s = eo.synth_rows(seed, li, live, layout.d)
    out = eo.decode_rows(p, s)
    out[flat < 0] = 0
    return out.reshape(ids.shape + (layout.d,))


class PairChannel(eo.GroupChannel):
    """Two ranks over a socketpair: length-prefixed pickles, descriptors with SCM_RIGHTS when allowed."""

    def __init__(self, sock, rank, can_pass_fds=True):
        self.sock, self.rank, self.world_size, self.can_pass_fds = sock, rank, 2, can_pass_fds

    def _send(self, obj, fds=()):
        b = pickle.dumps(obj)
        socket.send_fds(self.sock, [struct.pack("<q", len(b))], list(fds))
        self.sock.sendall(b)

    def _recv(self):
        head, fds, _, _ = socket.recv_fds(self.sock, 8, 16)
        n = struct.unpack("<q", head)[0]
        b = b""
        while len(b) < n:
            b += self.sock.recv(n - len(b))
        return pickle.loads(b), fds

    def broadcast(self, step, data, fds, timeout_s):
        self.sock.settimeout(timeout_s)
        if self.rank == 0:
            self._send(data, fds)
            return data, []
        data, got = self._recv()
        return data, got

    def all_gather(self, step, entry, timeout_s):
        self.sock.settimeout(timeout_s)
        self._send(entry)
        other, _ = self._recv()
        return [entry, other] if self.rank == 0 else [other, entry]


def _peer_unix(path, group, ids, q):
    try:
        ch = eo.UnixGroupChannel.connect(path, group=group, timeout_s=30)
        t = eo.SharedTable.attach(ch)
        assert t.read_only and t.group_rank == 1
        try:
            t.memory(0, writable=True)
            raise AssertionError("a read-only peer got a writable view")
        except eo.EngramError as e:
            assert e.code == "permission", e.code
        q.put(("ok", eo.lookup(t, 0, ids, threads=1).tobytes(), [s["step"] for s in t.group_steps()]))
    except Exception as e:  # reported to the parent, which fails the test with it
        q.put(("error", repr(e), None))


def _peer_pair(sock, can_pass_fds, ids, q, step_timeout_s=30.0):
    try:
        t = eo.SharedTable.attach(PairChannel(sock, 1, can_pass_fds), step_timeout_s=step_timeout_s)
        q.put(("ok", eo.lookup(t, 1, ids, threads=1).tobytes(), None))
    except eo.EngramError as e:
        q.put(("error", e.code, e.message))


def test_unix_channel_memfd_shares_pages(rng):
    lay = eo.Layout.preset("tiny")
    seed = int(rng.integers(1, 1 << 62))
    ids = random_ids(rng, lay, 0, 32)
    group = f"pytest-{os.getpid()}"
    listener = eo.UnixGroupListener.listen(group)
    q = ctx.Queue()
    peer = ctx.Process(target=_peer_unix, args=(listener.socket_path, group, ids, q))
    peer.start()
    ch = listener.accept(1, timeout_s=60)
    assert ch.rank == 0 and ch.world_size == 2 and ch.can_pass_fds
    table = eo.SharedTable.create(lay, group=ch, seed=seed)
    assert table.group_rank == 0 and table.group_world_size == 2
    status, digest, steps = q.get(timeout=60)
    peer.join(60)
    assert status == "ok", digest
    assert peer.exitcode == 0
    expect = _expected(lay, seed, 0, ids)
    assert digest == expect.tobytes()
    np.testing.assert_array_equal(eo.lookup(table, 0, ids, threads=1), expect)
    assert steps == ["describe", "attach", "register", "census after registration", "load", "ready",
                     "census after load"]


@pytest.mark.parametrize("backing,can_pass_fds", [("memfd", True), ("shm", False)])
def test_python_channel(rng, backing, can_pass_fds):
    lay = eo.Layout.preset("v41-flash-mini", table_size="4MiB")
    seed = int(rng.integers(1, 1 << 62))
    ids = random_ids(rng, lay, 1, 16)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    q = ctx.Queue()
    peer = ctx.Process(target=_peer_pair, args=(b, can_pass_fds, ids, q))
    peer.start()
    b.close()
    table = eo.SharedTable.create(lay, backing=backing, group=PairChannel(a, 0, can_pass_fds), seed=seed)
    status, digest, _ = q.get(timeout=60)
    peer.join(60)
    assert status == "ok", (digest, _)
    assert digest == _expected(lay, seed, 1, ids).tobytes()
    if backing == "shm":  # the named file is gone once every peer attached
        assert not any(f.startswith("engram") and table.group_name in f for f in os.listdir("/dev/shm"))


@pytest.mark.parametrize("backing,placement,can_pass_fds,code,says", [
    ("memfd", "none", False, "unsupported", "cannot pass descriptors"),  # admit refuses the channel
    ("memfd", "bind:63", True, "invalid_argument", "63"),                # create fails: no such node
])
def test_leader_failure_reaches_the_peer(rng, backing, placement, can_pass_fds, code, says):
    # The peer's attach raises the leader's error at once, not a timeout -- it would wait up to
    # 600 s for each step.
    lay = eo.Layout.preset("tiny")
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    q = ctx.Queue()
    peer = ctx.Process(target=_peer_pair, args=(b, can_pass_fds, random_ids(rng, lay, 0, 2), q, 600.0))
    peer.start()
    b.close()
    with pytest.raises(eo.EngramError) as e:
        eo.SharedTable.create(lay, backing=backing, placement=placement, group=PairChannel(a, 0, can_pass_fds),
                              seed=1)
    assert e.value.code == code and says in e.value.message
    status, peer_code, message = q.get(timeout=120)
    peer.join(60)
    assert status == "error" and peer_code == code, (peer_code, message)
    assert "the leader failed" in message and says in message, message


def test_group_argument_errors():
    lay = eo.Layout.preset("tiny")
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(eo.EngramError) as e:
        eo.SharedTable.create(lay, group=PairChannel(a, 1))
    assert e.value.code == "invalid_argument"
    with pytest.raises(eo.EngramError) as e:
        eo.SharedTable.attach(PairChannel(a, 0))
    assert e.value.code == "invalid_argument"
    with pytest.raises(eo.EngramError) as e:
        eo.SharedTable.attach(object())
    assert e.value.code == "invalid_argument"
