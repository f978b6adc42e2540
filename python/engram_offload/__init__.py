"""engram_offload: serve DeepSeek Engram tables from host memory, from Python.

A thin layer over the C++ library (extension module ``_engram``). Terms follow docs/design.md:

* ``Layout``      the shape of a model's Engram tables (layer ids, heads, prime rows per head, row width d).
* ``SharedTable`` host memory of every Engram layer: shared memfd backings (default), NUMA placement,
                  synthetic fill or checkpoint load, page census.
* ``Hasher``      the reference Engram N-gram hash: token ids -> int64 global row ids [tokens, heads].
* ``lookup``      ids [tokens, heads] -> BF16 staging [tokens, heads, d] (CPU backend, GIL released).
* ``Prefetcher``  a rank's serial prefetch queue: prepare(layer, ids) early, consume(layer) at the consumer,
                  timeline() of r / submit / s / f / c / wait_end per lookup.

Arrays: ids are integer NumPy arrays (int64 read in place) or any ``__dlpack__`` producer on the CPU
(PyTorch CPU tensors), converted zero copy with ``numpy.from_dlpack``. Staging comes back as NumPy uint16
arrays holding bf16 bits (NumPy has no bfloat16), or as ``torch.bfloat16`` tensors sharing that memory when
the ids were a torch tensor. CUDA tensors are refused with EngramError(code='unsupported') by this CPU build.

Errors: every failing call raises ``EngramError`` (a RuntimeError) with ``.code`` (the C++ status code name,
e.g. ``'invalid_argument'``), ``.message`` and ``.sys_error`` (errno behind it, 0 if none).
"""

import numpy as _np

from . import _engram
from ._engram import (EngramError, Layout, Sequence, SharedTable, code_names, cuda_backend_built,
                      decode_rows, default_compression_table_path, synth_rows)

__all__ = [
    "EngramError", "Layout", "SharedTable", "Hasher", "Sequence", "Prefetcher", "lookup", "decode_rows",
    "synth_rows", "code_names", "cuda_backend_built", "timeline_summary", "DEAD_ID",
]

DEAD_ID = -1  # an id that gives a zero row (padding / dead positions)


def _error(code, message):
    """An EngramError as the C++ side builds it (code name, message, sys_error 0)."""
    e = EngramError(f"{code}: {message}")
    e.code = code
    e.message = message
    e.sys_error = 0
    return e


def _torch():
    try:
        import torch  # noqa: F401
        return torch
    except ImportError:
        return None


def _is_torch_tensor(obj):
    t = _torch() if type(obj).__module__.startswith("torch") else None
    return t is not None and isinstance(obj, t.Tensor)


def _as_numpy(obj, what):
    """A CPU NumPy view of an array-like: ndarray as is, torch CPU tensor / __dlpack__ producer zero copy."""
    if isinstance(obj, _np.ndarray):
        return obj
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise _error("unsupported", f"{what}: a {obj.device.type} tensor; this build looks up CPU arrays only")
        return obj.detach().numpy()
    if hasattr(obj, "__dlpack__"):
        dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
        if dev[0] != 1:  # kDLCPU
            raise _error("unsupported", f"{what}: DLPack device type {dev[0]}; this build looks up CPU arrays only")
        return _np.from_dlpack(obj)
    return _np.asarray(obj)


def _out_numpy(out):
    """uint16 NumPy view of a caller's output buffer (NumPy uint16 or torch bfloat16/int16/uint16, CPU)."""
    if out is None or isinstance(out, _np.ndarray):
        return out
    if _is_torch_tensor(out):
        t = _torch()
        if out.device.type != "cpu":
            raise _error("unsupported", f"out: a {out.device.type} tensor; this build writes CPU arrays only")
        if out.dtype not in (t.bfloat16, t.int16) and str(out.dtype) != "torch.uint16":
            raise _error("invalid_argument", f"out: dtype {out.dtype}, expected torch.bfloat16 (or 16-bit ints)")
        return out.view(t.int16).numpy().view(_np.uint16)
    return _as_numpy(out, "out")


def lookup(table, layer_index, ids, out=None, checked=False, threads=0, return_stats=False):
    """Decode the rows of ``ids`` of one Engram layer into BF16 staging (CPU backend).

    table: SharedTable. layer_index: index into ``table.layout.layer_ids`` (not the model layer id).
    ids: integer array [tokens, heads] of global row ids (int64 C-contiguous is read in place; other integer
      dtypes are converted); -1 (any negative) gives a zero row. NumPy array, torch CPU tensor or any CPU
      ``__dlpack__`` producer.
    out: None, a writable C-contiguous uint16 NumPy array [tokens, heads, d], or a CPU torch.bfloat16 tensor
      of that shape: written in place and returned.
    checked: ids >= rows raise EngramError('invalid_argument') before anything is written; otherwise such
      positions become zero rows, counted in stats['invalid_ids'].
    threads: gather threads (0 = all CPUs, 1 = the calling thread). The GIL is released while decoding.
    Returns the staging: uint16 NumPy array of bf16 bits [tokens, heads, d] (a torch.bfloat16 tensor sharing
    its memory when ids or out were torch tensors); with return_stats=True, (staging, stats) where stats is
    {'rows', 'dead_rows', 'invalid_ids'}.
    Errors: EngramError invalid_argument (layer index, dtype, shape, checked ids), unsupported (CUDA input).
    """
    torch_io = _is_torch_tensor(ids) or _is_torch_tensor(out)
    ids_np = _as_numpy(ids, "ids")
    out_np = _out_numpy(out)
    res, stats = _engram.lookup(table, layer_index, ids_np, out_np, checked, threads)
    if torch_io:
        t = _torch()
        res = out if _is_torch_tensor(out) else t.from_numpy(res.view(_np.int16)).view(t.bfloat16)
    elif out is not None:
        res = out
    return (res, stats) if return_stats else res


def bf16_to_float32(bits):
    """bf16 bits (uint16 array) -> float32 array with the same values (exact)."""
    b = _np.asarray(bits, dtype=_np.uint16)
    return (b.astype(_np.uint32) << 16).view(_np.float32)


class Hasher:
    """The reference Engram N-gram hash (deepseek-ai/Engram NgramHashMapping), bit-compatible.

    layout: Layout. compression_table: None (token ids are already compressed, in [0, compressed_vocab)),
      'default' (the committed DeepSeek-V3 table), or the path of a compression table written by
      tools/tokenize (+ its .json sidecar). seed: EngramConfig.seed. pad_id: pad token id (before compression;
      with compression_table=None, the compressed pad id). compressed_vocab: V' when compression_table is None.
    Errors: EngramError invalid_argument (invalid table, pad id not a token id, V' too large for the
      multiplier bound, unfinalized layout), not_found / io reading the table.
    """

    def __init__(self, layout, compression_table=None, seed=0, pad_id=2, compressed_vocab=129280,
                 expected_compressed_vocab=0, max_rollback=64):
        if compression_table == "default":
            compression_table = default_compression_table_path()
        self.layout = layout
        self._h = _engram._make_hasher(layout, compression_table, compressed_vocab, seed, pad_id,
                                       expected_compressed_vocab, max_rollback)
        info = _engram._hasher_info(self._h)
        self.compressed_vocab = info["compressed_vocab"]
        self.vocab_size = info["vocab_size"]
        self.compressed_pad_id = info["compressed_pad_id"]
        self.multipliers = info["multipliers"]  # [n_layers][max_ngram] int64

    def hash(self, tokens, layer_index=0, global_ids=True):
        """Ids of a whole sequence starting at tokens[0] for one Engram layer.

        tokens: 1-D integer array of raw token ids (< vocab_size). Returns int64 [T, heads]: global row ids
        (head_offsets[h] + hash mod p_h) or, with global_ids=False, per-head ids in [0, p_h).
        Errors: EngramError invalid_argument (bad layer index, token id >= vocab_size naming its position).
        """
        return _engram._hash(self._h, _as_numpy(tokens, "tokens"), layer_index, global_ids)

    def begin_sequence(self):
        """A fresh Sequence (position 0) for incremental hashing with hash_chunk()."""
        return _engram._begin_sequence(self._h)

    def resume(self, prefix):
        """The Sequence after the raw token ids ``prefix`` were consumed (a prefix-cache hit)."""
        return _engram._resume_sequence(self._h, _as_numpy(prefix, "prefix"))

    def restore(self, snapshot):
        """The Sequence saved by Sequence.snapshot() (position, tail)."""
        position, tail = snapshot
        return _engram._restore_sequence(self._h, position, _np.asarray(tail, dtype=_np.int64))

    def hash_chunk(self, sequence, tokens, global_ids=True):
        """Hash the next tokens of ``sequence`` (prefill chunk or decode step) for every Engram layer and
        advance it: int64 [n_layers, T, heads]. Chunks give exactly the ids of hashing the whole sequence.
        On error the sequence is unchanged."""
        return _engram._hash_chunk(sequence, _as_numpy(tokens, "tokens"), global_ids)


class Prefetcher:
    """A rank's serial prefetch queue on the CPU backend (design.md "Prefetch").

    table: SharedTable (kept alive). mode: 'early' (prepare() submits the lookup at once, overlapping with
    whatever the caller does next) or 'on_demand' (prepare() only records the ids; consume() submits and waits:
    the B1 baseline, same lookup and staging). threads: gather threads (0 = CPUs - 1). checked: validate ids.
    rank: carried in the timeline. clock_ns: optional callable returning ns (default: steady clock).

    Per step: begin_step(step); for each Engram layer prepare(layer_index, ids) as soon as ids are ready,
    consume(layer_index) where the layer needs them; end_step(). Errors raise EngramError.
    """

    def __init__(self, table, mode="early", threads=0, checked=False, rank=0, clock_ns=None):
        self.table = table
        self._q = _engram._Prefetcher(table, mode, threads, checked, rank, clock_ns)
        self.mode = self._q.mode

    def begin_step(self, step):
        """Start decode step ``step`` (timeline rows carry it)."""
        self._q.begin_step(step)

    def prepare(self, layer_index, ids):
        """ids: integer [tokens, heads] (copied before return). Early mode submits the lookup now (r and submit
        stamped), without blocking; on_demand keeps the ids for consume()."""
        self._q.prepare(layer_index, _as_numpy(ids, "ids"))

    def consume(self, layer_index, copy=True):
        """Wait for the layer's lookup; staging uint16 [tokens, heads, d] bf16 bits. copy=False returns a
        read-only zero-copy view of the queue's staging, valid only until the next prepare() of this layer."""
        return self._q.consume(layer_index, copy)

    def end_step(self):
        """End the step (timings of the step become final)."""
        self._q.end_step()

    def timeline(self):
        """{'unit': 'ns', 'rows': [{rank, step, layer_id, rows, r_ns, submit_ns, s_ns, f_ns, c_ns, wait_end_ns}]}
        (None for a time not recorded)."""
        return self._q.timeline_json()

    def chrome_trace(self):
        """Chrome trace event dict (Perfetto / chrome://tracing): consumer lane and prefetch-queue lane."""
        return self._q.chrome_trace()

    def totals(self):
        """Sum of lookup stats: {'rows', 'dead_rows', 'invalid_ids'}."""
        return self._q.totals()

    def analyze(self):
        """Per (rank, layer) distributions of queue, lookup, exposed wait, lead (ns) from the serial-queue model."""
        return self._q.analyze()

    def summary(self):
        """timeline_summary(self.timeline())."""
        return timeline_summary(self.timeline())


def timeline_summary(timeline):
    """Per Engram layer: lookups, median lookup time L = f - s, median queue time s - r, median lead c - r, total measured wait
    (wait_end - c) and total exposed wait max(0, f - c), in microseconds. ``timeline`` is Prefetcher.timeline()."""
    per = {}
    for r in timeline["rows"]:
        per.setdefault(r["layer_id"], []).append(r)
    out = {}

    def med(v):
        v = [x for x in v if x is not None]
        return float(_np.median(v)) / 1e3 if v else None

    for layer_id, rows in sorted(per.items()):
        def d(a, b, rr):
            return rr[a] - rr[b] if rr.get(a) is not None and rr.get(b) is not None else None
        waits = [d("wait_end_ns", "c_ns", r) for r in rows]
        exposed = [max(0.0, d("f_ns", "c_ns", r)) for r in rows if d("f_ns", "c_ns", r) is not None]
        out[layer_id] = {
            "lookups": len(rows),
            "median_lookup_us": med([d("f_ns", "s_ns", r) for r in rows]),
            "median_queue_us": med([d("s_ns", "r_ns", r) for r in rows]),
            "median_lead_us": med([d("c_ns", "r_ns", r) for r in rows]),
            "total_wait_us": sum(w for w in waits if w is not None) / 1e3,
            "total_exposed_wait_us": sum(exposed) / 1e3,
        }
    return out
