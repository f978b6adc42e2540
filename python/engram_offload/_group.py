"""Group channels implemented in Python, for the shared-table protocol of src/host/group.hpp.

The protocol (describe -> attach -> register -> census -> load -> ready -> census) runs in C++ over a
GroupChannel: broadcast from rank 0 (bytes, plus descriptors where the channel can pass them), all-gather of
one status entry per rank, barrier. ``GroupChannel`` is the Python form of that interface: subclass it, and
the C++ protocol calls your methods (the GIL is taken back for each call; an exception becomes an 'io' error
of this rank naming the step).

``TorchGroupChannel`` runs it over an engine's own torch.distributed process group (a CPU one: gloo), so the
DP ranks of one node share one table through the group they already have. Bytes and entries travel with
broadcast_object_list / all_gather_object. torch.distributed cannot carry file descriptors, so memfds go
over a one-shot AF_UNIX socket beside it (SCM_RIGHTS, Python's socket.send_fds): rank 0 listens in a fresh
0700 directory, broadcasts the path through the group, accepts world_size - 1 connections whose peer uid
(SO_PEERCRED) is its own, sends the descriptors, and removes the socket. This needs every rank of the group on
one node -- which sharing host memory needs anyway. Timeouts: each wait on the socket is bounded by the
step's timeout; the collectives are bounded by the process group's own timeout (init_process_group(timeout=)).
"""
import os
import shutil
import socket
import struct
import tempfile
import time


class GroupChannel:
    """Interface of a channel implemented in Python (see the module comment). Attributes: rank (0 = leader),
    world_size, can_pass_fds. Methods:
      describe() -> str
      broadcast(step, data, fds, timeout_s) -> (bytes, list[int])   rank 0 passes data (bytes) and fds (ints,
          still its own); others get them (the descriptors become the caller's: the C++ side closes them)
      all_gather(step, entry, timeout_s) -> list[dict]   entry: {rank, pid, code, sys_error, status_message,
          message}; returns every rank's entry indexed by rank.
    """

    rank = 0
    world_size = 1
    can_pass_fds = False

    def describe(self):
        return f"{type(self).__name__}, rank {self.rank} of {self.world_size}"

    def broadcast(self, step, data, fds, timeout_s):
        raise NotImplementedError

    def all_gather(self, step, entry, timeout_s):
        raise NotImplementedError


def _send_fds_to_peers(listener, n_peers, fds, timeout_s):
    deadline = time.monotonic() + timeout_s
    served = 0
    while served < n_peers:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"descriptor hand-off: {served} of {n_peers} peers connected within {timeout_s:.1f} s")
        listener.settimeout(left)
        conn, _ = listener.accept()
        with conn:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.geteuid():
                continue  # not one of ours: it gets nothing and does not count
            socket.send_fds(conn, [struct.pack("<i", len(fds))], list(fds))
            served += 1


def _receive_fds(path, n_fds, timeout_s):
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        while True:
            try:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                s.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"descriptor hand-off: no leader at {path} within {timeout_s:.1f} s")
                time.sleep(0.01)
        msg, fds, _flags, _addr = socket.recv_fds(s, 16, max(1, n_fds))
        if len(fds) != n_fds:
            for fd in fds:
                os.close(fd)
            raise OSError(f"descriptor hand-off: got {len(fds)} descriptors, expected {n_fds}")
        return fds


class TorchGroupChannel(GroupChannel):
    """A GroupChannel over a torch.distributed process group (default: the world group). Use a CPU backend
    (gloo): the objects travel as pickles through CPU tensors. Every rank of the group must be on this node."""

    can_pass_fds = True

    def __init__(self, group=None):
        import torch.distributed as dist
        if not dist.is_initialized():
            raise RuntimeError("TorchGroupChannel: torch.distributed is not initialized (init_process_group)")
        self._dist = dist
        self._group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._src = dist.get_global_rank(group, 0) if group is not None else 0
        self._backend = str(dist.get_backend(group))

    def describe(self):
        return f"torch.distributed {self._backend} group, rank {self.rank} of {self.world_size}"

    def broadcast(self, step, data, fds, timeout_s):
        listener, tmpdir, path = None, None, None
        try:
            if self.rank == 0:
                if fds:
                    tmpdir = tempfile.mkdtemp(prefix="engram-fds.")  # 0700
                    path = os.path.join(tmpdir, "s")
                    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    listener.bind(path)
                    listener.listen(self.world_size)
                obj = [(bytes(data), path, len(fds))]
            else:
                obj = [None]
            self._dist.broadcast_object_list(obj, src=self._src, group=self._group)
            payload, path, n_fds = obj[0]
            if self.rank == 0:
                if n_fds:
                    _send_fds_to_peers(listener, self.world_size - 1, fds, timeout_s)
                return payload, []
            received = _receive_fds(path, n_fds, timeout_s) if n_fds else []
            return payload, received
        finally:
            if listener is not None:
                listener.close()
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)

    def all_gather(self, step, entry, timeout_s):
        out = [None] * self.world_size
        self._dist.all_gather_object(out, entry, group=self._group)
        return out
