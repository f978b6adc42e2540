"""engram_offload: serve DeepSeek Engram tables from host memory, from Python.

A thin layer over the C++ library (extension module ``_engram``). Terms:

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
the ids were a torch tensor.

CUDA (a build with the CUDA backend): ``SharedTable.register_cuda(device)`` registers the host memory for UVA
(nothing is copied to the device); ``lookup`` on CUDA ids (torch tensors or any CUDA ``__dlpack__`` producer)
launches the UVA lookup kernel on the given stream (``torch.cuda.Stream``, a raw ``cudaStream_t`` handle, or
the current torch stream) and returns without synchronising; ``Prefetcher(table, device="cuda:0")`` runs the
serial prefetch stream whose staging comes back zero copy as torch.bfloat16 tensors (``DeviceArray`` with
``__dlpack__`` without torch).

Shared groups: ``SharedTable.create(layout, group=channel)`` on rank 0 and ``SharedTable.attach(channel)`` on
the other ranks run the shared-table protocol (describe, attach, register, census, load, ready) over a
channel: ``UnixGroupChannel`` (memfds over a Unix socket), ``TorchGroupChannel`` (a torch.distributed CPU
process group, e.g. gloo) or any ``GroupChannel`` subclass.

Errors: every failing call raises ``EngramError`` (a RuntimeError) with ``.code`` (the C++ status code name,
e.g. ``'invalid_argument'``), ``.message`` and ``.sys_error`` (errno behind it, 0 if none).
"""

import numpy as _np

from . import _engram
from ._engram import (DeviceArray, EngramError, InvalidArgumentError, Layout, Sequence, SharedTable, UnixGroupChannel,
                      UnixGroupListener, code_names, cuda_backend_built, decode_rows, default_compression_table_path,
                      engine_option_keys, synth_rows)
from ._arrays import _as_numpy, _bf16_like_input, _error, _is_torch_tensor, _out_numpy, _torch
from ._group import GroupChannel, TorchGroupChannel
from ._hashing import DecodeIds, Hasher

__all__ = [
    "EngramError", "InvalidArgumentError", "Layout", "SharedTable", "Engine", "Hasher", "Sequence", "Prefetcher",
    "DecodeIds",
    "lookup", "decode_rows", "engine_option_keys",
    "synth_rows", "code_names", "cuda_backend_built", "timeline_summary", "DEAD_ID", "DeviceArray",
    "GroupChannel", "TorchGroupChannel", "UnixGroupChannel", "UnixGroupListener",
]

__version__ = _engram.__version__  # the C++ library's version (project(VERSION) in CMakeLists.txt)

DEAD_ID = -1  # an id that gives a zero row (padding / dead positions)


def lookup(table, layer_index, ids, out=None, checked=False, threads=0, return_stats=False, stream=None,
           grid_cap=None):
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
    CUDA ids (a torch CUDA tensor or a CUDA ``__dlpack__`` producer; the table registered with
      table.register_cuda(device) first): the UVA lookup kernel is enqueued on ``stream`` (torch.cuda.Stream, a raw
      cudaStream_t int, None = torch's current stream of that device, or the legacy default stream without torch)
      and the call returns at once (no synchronisation; keep ids/out alive until the stream passed the lookup --
      torch tensors are marked with record_stream when the stream is not the current one). out: None (a new
      torch.bfloat16 tensor, needs torch) or a contiguous bf16/int16/uint16 CUDA array [tokens, heads, d].
      grid_cap: None (every SM), an int (at most that many blocks) or a float in (0, 1] (that fraction of the SMs).
      stats: the launch {rows, tiles, grid, cap, ...} (dead/invalid counts would need a synchronisation).
      checked=True validates ids on the GPU and synchronises the stream (explicitly asked; not under capture).
    Errors: EngramError invalid_argument (layer index, dtype, shape, device, checked ids, table not registered),
      unsupported (CUDA input to a build without CUDA), cuda (launch failure).
    """
    if _is_cuda_array(ids) or _is_cuda_array(out):
        return _lookup_cuda(table, layer_index, ids, out, checked, stream, grid_cap, return_stats)
    return _lookup_host(lambda i, o: _engram.lookup(table, layer_index, i, o, checked, threads), ids, out, return_stats)


def _lookup_host(run, ids, out, return_stats):
    """A host lookup `run(ids_numpy, out_numpy_or_None) -> (out, stats)` with NumPy or torch CPU arrays in and
    the same kind out (a torch.bfloat16 tensor sharing the memory when ids or out were torch tensors)."""
    torch_io = _is_torch_tensor(ids) or _is_torch_tensor(out)
    res, stats = run(_as_numpy(ids, "ids"), _out_numpy(out))
    if torch_io:
        t = _torch()
        res = out if _is_torch_tensor(out) else t.from_numpy(res.view(_np.int16)).view(t.bfloat16)
    elif out is not None:
        res = out
    return (res, stats) if return_stats else res


# ---- CUDA arrays and streams -------------------------------------------------------------------------------------

_DL_CUDA = 2


def _is_cuda_array(obj):
    if obj is None or isinstance(obj, _np.ndarray):
        return False
    if _is_torch_tensor(obj):
        return obj.device.type == "cuda"
    if hasattr(obj, "__dlpack_device__"):
        return obj.__dlpack_device__()[0] == _DL_CUDA
    return False


def _device_index(device):
    """'cpu' -> -1; 'cuda', 'cuda:N', N, torch.device -> N (default: torch's current device, else 0)."""
    if device is None or device == "cpu":
        return -1
    if isinstance(device, int):
        return device
    s = str(device)
    if s == "cuda":
        t = _torch()
        return t.cuda.current_device() if t is not None and t.cuda.is_available() else 0
    if s.startswith("cuda:"):
        return int(s[5:])
    raise _error("invalid_argument", f"device {device!r}: expected 'cpu', 'cuda', 'cuda:N' or an int")


def _stream_handle(stream, device):
    """A raw cudaStream_t from a torch.cuda.Stream / ExternalStream, a CuPy stream (.ptr), an int, or None (torch's
    current stream of `device`; the legacy default stream 0 without torch)."""
    if stream is None:
        t = _torch()
        if t is not None and t.cuda.is_available():
            return int(t.cuda.current_stream(device).cuda_stream)
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise _error("invalid_argument", f"stream: expected torch.cuda.Stream or a raw cudaStream_t int, got {type(stream)}")


_TORCH_DTYPES = {"torch.int64": "int64", "torch.bfloat16": "bf16", "torch.int16": "i16", "torch.uint16": "u16"}
_DL_DTYPES = {(0, 64): "int64", (4, 16): "bf16", (0, 16): "i16", (1, 16): "u16"}


def _device_view(obj, what, stream_handle):
    """(ptr, device, shape, dtype, keepalive) of a C-contiguous CUDA array (torch tensor or DLPack producer)."""
    if _is_torch_tensor(obj):
        if obj.device.type != "cuda":
            raise _error("invalid_argument", f"{what}: a {obj.device.type} tensor where a CUDA one is needed")
        if not obj.is_contiguous():
            raise _error("invalid_argument", f"{what}: the tensor must be contiguous")
        return obj.data_ptr(), obj.device.index, tuple(obj.shape), _TORCH_DTYPES.get(str(obj.dtype), str(obj.dtype)), obj
    if not hasattr(obj, "__dlpack__"):
        raise _error("invalid_argument", f"{what}: expected a CUDA tensor (torch or any __dlpack__ producer)")
    cap = obj.__dlpack__(stream=stream_handle if stream_handle else 1)
    ptr, dev_type, dev_id, shape, strides, (code, bits, lanes), holder = _engram._read_dlpack_capsule(cap)
    if dev_type != _DL_CUDA:
        raise _error("invalid_argument", f"{what}: DLPack device type {dev_type}, expected CUDA ({_DL_CUDA})")
    if strides is not None:
        expect, acc = [], 1
        for n in reversed(shape):
            expect.append(acc)
            acc *= n
        if list(strides) != list(reversed(expect)) and 0 not in shape:
            raise _error("invalid_argument", f"{what}: the array must be C-contiguous (strides {strides})")
    return ptr, dev_id, tuple(shape), _DL_DTYPES.get((code, bits), f"dlpack({code},{bits})"), (obj, holder)


def _grid_option(grid_cap):
    """grid_cap as the engine option that holds it (checked there): None -> {} (the default cap), an int -> blocks,
    a float -> a fraction of the SMs."""
    if grid_cap is None:
        return {}
    if isinstance(grid_cap, bool) or not isinstance(grid_cap, (int, float)):
        raise _error("invalid_argument", f"grid_cap: expected None, an int (blocks) or a float in (0, 1], got {grid_cap!r}")
    return {"grid_blocks": grid_cap} if isinstance(grid_cap, int) else {"grid_fraction": grid_cap}


def _record_on(tensor, stream_handle, device):
    """Tell torch's caching allocator that `tensor` is used on a stream other than the current one."""
    t = _torch()
    if t is None or not _is_torch_tensor(tensor):
        return
    if stream_handle == int(t.cuda.current_stream(device).cuda_stream):
        return
    tensor.record_stream(t.cuda.ExternalStream(stream_handle, device=t.device("cuda", device)))


def _lookup_cuda(table, layer_index, ids, out, checked, stream, grid_cap, return_stats):
    lay = table.layout
    dev_guess = None
    for a in (ids, out):
        if _is_torch_tensor(a) and a.device.type == "cuda":
            dev_guess = a.device.index
            break
        if a is not None and hasattr(a, "__dlpack_device__") and a.__dlpack_device__()[0] == _DL_CUDA:
            dev_guess = a.__dlpack_device__()[1]
            break
    s = _stream_handle(stream, dev_guess)
    ids_ptr, device, shape, dtype, keep_ids = _device_view(ids, "ids", s)
    if dtype != "int64":
        raise _error("invalid_argument", f"lookup: CUDA ids must be int64, got {dtype}")
    if len(shape) == 1 and lay.heads == 1:
        shape = (shape[0], 1)
    if len(shape) != 2 or shape[1] != lay.heads:
        raise _error("invalid_argument", f"lookup: ids must be [tokens, {lay.heads}], got {list(shape)}")
    tokens = shape[0]
    t = _torch()
    if out is None:
        if t is None:
            raise _error("invalid_argument", "lookup: CUDA ids without torch need an out= array")
        with t.cuda.device(device):
            if s == int(t.cuda.current_stream(device).cuda_stream):
                out = t.empty((tokens, lay.heads, lay.d), dtype=t.bfloat16, device=f"cuda:{device}")
            else:
                with t.cuda.stream(t.cuda.ExternalStream(s, device=t.device("cuda", device))):
                    out = t.empty((tokens, lay.heads, lay.d), dtype=t.bfloat16, device=f"cuda:{device}")
    out_ptr, out_dev, out_shape, out_dtype, keep_out = _device_view(out, "out", s)
    if out_dev != device:
        raise _error("invalid_argument", f"lookup: ids on cuda:{device}, out on cuda:{out_dev}")
    if out_dtype not in ("bf16", "i16", "u16"):
        raise _error("invalid_argument", f"lookup: out dtype {out_dtype}, expected bfloat16 (or 16-bit ints)")
    if tuple(out_shape) != (tokens, lay.heads, lay.d):
        raise _error("invalid_argument", f"lookup: out must have shape [{tokens}, {lay.heads}, {lay.d}], got {list(out_shape)}")
    grid = _grid_option(grid_cap)
    if isinstance(table, Engine):
        if table.device != device:
            raise _error("invalid_argument", f"lookup: ids on cuda:{device}, the engine on cuda:{table.device}")
        info = table._e._device_lookup(layer_index, ids_ptr, tokens, out_ptr, s, grid, checked)
    else:
        info = _engram._cuda_lookup(table, layer_index, ids_ptr, tokens, out_ptr, device, s, grid, checked)
    _record_on(ids, s, device)
    _record_on(out, s, device)
    return (out, info) if return_stats else out


def _staging_tensor(arr):
    """A CUDA DeviceArray as a torch.bfloat16 tensor (zero copy) when torch is there, else the DeviceArray."""
    t = _torch()
    return t.from_dlpack(arr) if t is not None else arr


def bf16_to_float32(bits):
    """bf16 bits (uint16 array) -> float32 array with the same values (exact)."""
    b = _np.asarray(bits, dtype=_np.uint16)
    return (b.astype(_np.uint32) << 16).view(_np.float32)


class Engine:
    """The library's engine: a table, its backend, the registration and the prefetch queue with the lookup path
    behind it (CUDA: the planner's fast path -- dedup, sort, hot-row cache with online updates, host-gather
    hybrid), assembled exactly as `engram run` assembles it.

    Engine(layout, **options): a table of this process (created, placed, filled: seed=N synthetic rows,
      checkpoint=PATH, model=DIR with Layout.from_model(DIR), content='zero'). Engine(table, **options): over an existing SharedTable. Engine(layout,
      group=channel, **options): the leader (channel rank 0) or a peer (rank >= 1; layout may be None: it comes
      from the leader) of a shared group; the protocol's register step registers this rank's memory with its
      backend. options: engine_option_keys() -- backend ('auto', 'cpu', 'cuda'), device, backing, placement,
      fast_path, cache_size, cache_format, cache_update, cache_warmup, cache_profile, grid_fraction, lookup_threads,
      checked, max_tokens, layer_us, ... stream: CUDA main stream to adopt (torch.cuda.Stream or raw handle).
    Use it through Prefetcher(engine) and engine.lookup(); engine.describe() / describe_lines() report the paths,
    reasons and cache figures. Errors raise EngramError (InvalidArgumentError for bad option text).
    """

    def __init__(self, layout_or_table, group=None, job="", stream=None, **options):
        opts = _option_text(options)
        handle = 0
        if stream is not None:
            dev = _device_index(opts.get("device", "cuda"))
            handle = _stream_handle(stream, max(dev, 0))
            self._stream = stream
        if isinstance(layout_or_table, SharedTable):
            if group is not None:
                raise _error("invalid_argument", "Engine(table, group=...): a group engine makes its own table")
            self._e = _engram._Engine.over_table(layout_or_table, opts, handle)
        elif group is not None:
            ch = _channel_arg(group)
            if ch is None:
                raise _error("invalid_argument", "group: expected a GroupChannel (UnixGroupChannel, TorchGroupChannel)")
            if ch.rank == 0:
                if layout_or_table is None:
                    raise _error("invalid_argument", "Engine(group=...): the leader (rank 0) needs the layout")
                self._e = _engram._Engine.lead(layout_or_table, ch, job, opts, handle)
            else:
                self._e = _engram._Engine.join(ch, opts, handle)
        else:
            self._e = _engram._Engine.create(layout_or_table, opts, handle)
        self.table = self._e.table
        self.layout = self._e.layout

    backend = property(lambda self: self._e.backend, doc="'cpu' or 'cuda'.")
    backend_note = property(lambda self: self._e.backend_note, doc="Why auto did not take an earlier backend.")
    device = property(lambda self: self._e.device, doc="CUDA ordinal; -1 on the cpu backend.")
    staging_heads = property(lambda self: self._e.staging_heads,
                             doc="Heads per token of a lookup's rows: the layout's, or a TP slice's local heads.")
    streams = property(lambda self: self._e.streams, doc="(main, prefetch) cudaStream_t handles; None on the CPU.")
    group_rank = property(lambda self: self._e.group_rank, doc="Rank in the shared group; -1 outside one.")
    group_world_size = property(lambda self: self._e.group_world_size)
    group_job = property(lambda self: self._e.group_job, doc="The leader's job text.")

    def describe(self):
        """Backend, device, registration and per layer the lookup path (paths taken, why, cache figures)."""
        return self._e.describe()

    def describe_lines(self):
        """The Path / Cache lines `engram run` prints."""
        return self._e.describe_lines()

    def census(self, point="on_demand", max_samples=1 << 20):
        """Page census of every backing now (PageCensus dicts)."""
        return self._e.census(point, max_samples)

    def censuses(self):
        """The censuses taken while the engine was built (after placement, registration, load)."""
        return self._e.censuses()

    def synchronize(self):
        """Waits for everything the engine enqueued."""
        self._e.synchronize()

    def lookup(self, layer_index, ids, out=None, checked=False, return_stats=False, stream=None, grid_cap=None):
        """One lookup through the engine's lookup path (CUDA: the planner's fast path), outside the queue.
        Host arrays on the cpu backend, CUDA arrays (torch or __dlpack__) on the cuda backend; see lookup().
        CUDA: it shares the layer's buffers and hot-row cache with this engine's Prefetcher, so it must not overlap
        a prefetch step still running on the GPU (order the streams, or synchronize, when both are used)."""
        if _is_cuda_array(ids) or _is_cuda_array(out):
            return _lookup_cuda(self, layer_index, ids, out, checked, stream, grid_cap, return_stats)
        return _lookup_host(lambda i, o: self._e._host_lookup(layer_index, i, o, checked), ids, out, return_stats)


def _option_text(options):
    """Engine keyword arguments as the text set_engine_option parses (None values left out)."""
    return {k: v for k, v in options.items() if v is not None}


class Prefetcher:
    """A rank's serial prefetch queue: the queue of an Engine, on the CPU or a CUDA device.

    source: an Engine (its queue: the lookup path, planner and cache it was built with), or a SharedTable (an engine
    is built over it for this prefetcher, kept alive with the table). layers: table layer indices served (None =
    all); prepare/consume take the table's layer index. device (table only): 'cpu' (default: worker threads) or
    'cuda' / 'cuda:N' / N (one prefetch stream, lookups read the table over UVA; the memory is registered once per
    table). mode: 'early' (prepare() submits the lookup at once, overlapping with whatever the caller does next) or
    'on_demand' (prepare() only records the ids; consume() submits and waits: the B1 baseline, same lookup and
    staging). threads (CPU): gather threads (0 = CPUs - 1). checked: validate ids (host-side pass). rank: carried
    in the timeline. clock_ns (CPU): optional callable returning ns (default: steady clock).
    CUDA only: stream: the queue's main stream to adopt (torch.cuda.Stream or raw handle; default: torch's current
    stream when it is not the legacy default stream, else a stream of the queue's own). Whatever it is, prepare()
    and consume() order themselves with the caller's stream of that call (their `stream` argument, default torch's
    current stream) by events on the GPU, eagerly and under torch.cuda.graph capture alike. max_tokens: per-layer id/staging capacity. grid_cap: fraction of
    the SMs (default 0.5: the lookups run in the background) or an int of blocks. record_timeline: CUDA timeline
    events on/off. Other keyword arguments are engine options (engine_option_keys()): fast_path ('planner',
    'plain', 'off'), cache_size ('5%', '256MiB', 'off'), cache_update, cache_warmup, cache_profile, ...

    Per step: begin_step(step); for each Engram layer prepare(layer_index, ids) as soon as ids are ready,
    consume(layer_index) where the layer needs them; end_step() (CUDA: the step's one host synchronisation;
    not while capturing). describe_lines() gives the Path / Cache lines `engram run` prints. Errors raise
    EngramError.
    """

    def __init__(self, source, layers=None, device="cpu", mode="early", threads=0, checked=False, rank=0,
                 clock_ns=None, stream=None, max_tokens=8192, grid_cap=None, record_timeline=True, **options):
        self._keep = {}
        self._torch_ids = set()  # host layers prepared with torch ids: consume() returns torch
        self._stream = None
        if isinstance(source, Engine):
            if options or device != "cpu" or stream is not None or clock_ns is not None:
                raise _error("invalid_argument", "Prefetcher(engine): the engine's options were fixed when it was made; "
                                                 "give only layers and mode")
            self.table = source.table
            layers = list(range(self.table.n_layers)) if layers is None else [int(x) for x in layers]
            self._q = _engram._Prefetcher.of_engine(source._e, layers, mode)
            self._engine = source
        else:
            self.table = source
            layers = list(range(source.n_layers)) if layers is None else [int(x) for x in layers]
            dev = _device_index(device)
            opts = {"rank": rank, "checked": checked, "record_timeline": record_timeline, **_option_text(options)}
            handle = 0
            if dev < 0:
                opts.update({"backend": "cpu", "lookup_threads": threads})
            else:
                self._stream = stream  # the engine adopts the handle: keep the object alive
                handle = _stream_handle(stream, dev)
                opts.update({"backend": "cuda", "device": dev, "max_tokens": max_tokens, **_grid_option(grid_cap)})
            self._q = _engram._Prefetcher.over_table(source, layers, mode, opts, handle, clock_ns)
        self.device = self._q.device
        self.mode = self._q.mode
        self.layers = self._q.layers
        self.backend = self._q.backend

    def describe(self):
        """The engine's report: backend, device, registration, per layer the paths the planner took, the last
        plan's reasons, costs and the hot-row cache (state, hit rate, link bytes avoided, online updates)."""
        return self._q.describe()

    def describe_lines(self):
        """The Path / Cache lines `engram run` prints for the same engine (after the run: they synchronise)."""
        return self._q.describe_lines()

    @property
    def streams(self):
        """(main, prefetch) raw cudaStream_t handles (CUDA), None on the CPU."""
        return self._q.streams

    def begin_step(self, step):
        """Start decode step ``step`` (timeline rows carry it)."""
        self._q.begin_step(step)

    def prepare(self, layer_index, ids, after_event=None, stream=None):
        """ids: integer [tokens, heads]. Host ids (NumPy / CPU tensor) are copied before return; CUDA ids (int64,
        contiguous, on this device) are copied by the queue before anything the caller enqueues next on `stream`
        runs, so the caller may reuse or free them at once. CUDA ordering: `stream` (torch.cuda.Stream or raw
        handle; None = torch's current stream, the legacy default stream included) is the caller's: the lookup
        starts after everything enqueued on it so far (the ids' producer). after_event: a torch.cuda.Event or raw
        cudaEvent_t the lookup also waits for. Early mode submits now, without blocking; on_demand keeps the ids
        for consume()."""
        caller = self._caller_stream(stream)
        if caller is not None:
            self._q.order_after(caller)
        if after_event is not None:
            h = after_event if isinstance(after_event, int) else int(getattr(after_event, "cuda_event", 0))
            self._q.wait_event(h)
        if _is_cuda_array(ids):
            ptr, dev, shape, dtype, keep = _device_view(ids, "ids", caller if caller is not None else 0)
            if dev != self.device:
                raise _error("invalid_argument", f"prepare: ids on cuda:{dev}, Prefetcher on cuda:{self.device}")
            if dtype != "int64" or len(shape) != 2:
                raise _error("invalid_argument", f"prepare: CUDA ids must be int64 [tokens, heads], got {dtype} {list(shape)}")
            if shape[1] != self.table.layout.heads:
                raise _error("invalid_argument", f"prepare: ids have {shape[1]} heads, the layout has {self.table.layout.heads}")
            self._q.prepare_device(layer_index, ptr, shape[0])
            self._keep[layer_index] = keep
            if self.mode == "early":
                self._q.order_before(caller)  # the queue's copy of the ids precedes the caller's next writes
            return
        self._keep.pop(layer_index, None)
        if _is_torch_tensor(ids):
            self._torch_ids.add(layer_index)
        else:
            self._torch_ids.discard(layer_index)
        self._q.prepare(layer_index, _as_numpy(ids, "ids"))

    def _caller_stream(self, stream):
        """The caller's raw stream handle on a CUDA Prefetcher (None on the CPU)."""
        if self.device < 0:
            if stream is not None:
                raise _error("invalid_argument", "stream: a CPU Prefetcher has no CUDA stream")
            return None
        return _stream_handle(stream, self.device)

    def write_ids(self, layer_index, ids):
        """CUDA, host ids: refill the pinned buffer a captured step's copy reads, before replaying the graph."""
        self._q.write_ids(layer_index, _as_numpy(ids, "ids"))

    def consume(self, layer_index, copy=True, stream=None):
        """Wait for the layer's lookup and return its staging [tokens, heads, d].
        CPU: uint16 bf16 bits, or a torch.bfloat16 tensor over them when the layer's ids were a torch tensor
        (copy=False: a read-only zero-copy view of the queue's staging, valid until the next prepare() of this
        layer). CUDA: `stream` (None = torch's current stream, the legacy default stream included) waits for the
        lookup on the GPU (the host does not), so whatever the caller enqueues next on it reads the staging
        written; returns a torch.bfloat16 CUDA tensor over the queue's staging (zero copy, valid until the
        layer's next prepare; clone it to keep it), or a DeviceArray without torch."""
        caller = self._caller_stream(stream)
        if caller is not None:
            self._q.order_after(caller)  # on_demand submits here: its ids were written on the caller's stream
        r = self._q.consume(layer_index, copy)
        if self.device >= 0:
            self._q.order_before(caller)
            return _staging_tensor(r)
        return _bf16_like_input(r, layer_index in self._torch_ids)

    def last_launch(self, layer_index):
        """CUDA: rows, tiles, grid, cap of the layer's last launch; None on the CPU."""
        return self._q.last_launch(layer_index)

    def end_step(self):
        """End the step (timings of the step become final; CUDA: one host synchronisation)."""
        self._q.end_step()

    def timeline(self):
        """{'unit': 'ns', 'rows': [{rank, step, layer_id, rows, r_ns, submit_ns, s_ns, f_ns, c_ns, wait_end_ns}]}
        (None for a time not recorded: CUDA submit, captured steps)."""
        return self._q.timeline_json()

    def chrome_trace(self):
        """Chrome trace event dict (Perfetto / chrome://tracing): consumer lane and prefetch-queue lane."""
        return self._q.chrome_trace()

    def totals(self):
        """Sum of lookup stats: {'rows', 'dead_rows', 'invalid_ids'} (CUDA: final after end_step)."""
        return self._q.totals()

    def analyze(self):
        """Per (rank, layer) distributions of queue, lookup, exposed wait, lead (ns) from the serial-queue model."""
        return self._q.analyze()

    def summary(self):
        """timeline_summary(self.timeline())."""
        return timeline_summary(self.timeline())


# ---- shared groups: SharedTable.create(group=channel) / SharedTable.attach(channel) --------------------------

_create_host_table = SharedTable.create


def _channel_arg(group):
    if isinstance(group, (_engram._Channel, GroupChannel)):
        return group
    return None


def _create(layout, backing="memfd", placement="none", group="", prefault=True, allow_fallback=False, home_node=-1,
            seed=None, checkpoint=None, group_name="", shm_dir="/dev/shm", step_timeout_s=30.0, load_timeout_s=600.0,
            tp_size=1, tp_rank=0, **options):
    """Creates the table's host memory: one shared backing per Engram layer, NUMA-placed and loaded.

    group: '' or a name (carried in backing names), or a channel (UnixGroupChannel from UnixGroupListener.accept,
    TorchGroupChannel, any GroupChannel) whose rank is 0: then this process is the shared group's leader: it
    creates and places the backings, loads them (seed: synthetic rows; checkpoint: a safetensors file; model: a
    Hugging Face model directory, with layout=Layout.from_model(DIR); none: zero, fill later), and runs the protocol with the channel's other ranks, which call SharedTable.attach(channel)
    at the same time. memfd backings need a channel that passes descriptors; shm (named file, unlinked as soon as
    every peer attached) works over any channel. Engine options as keyword arguments (backend='cuda', device=N,
    ...) make the protocol's register step register this rank's memory for that device. tp_size / tp_rank: the
    table holds only that tensor-parallel rank's heads and their rows (vLLM's ParallelEngramEmbedding sharding).
    """
    ch = _channel_arg(group)
    if ch is None:
        if options:
            raise _error("invalid_argument", f"SharedTable.create: {sorted(options)} apply to a group table only")
        return _create_host_table(layout, backing, placement, group, prefault, allow_fallback, home_node, tp_size,
                                  tp_rank)
    options = dict(options, tp_size=tp_size, tp_rank=tp_rank)
    return _engram._create_shared(layout, ch, backing, placement, group_name, shm_dir, seed, checkpoint,
                                  step_timeout_s, load_timeout_s, _option_text(options))


def _attach(channel, read_only=True, step_timeout_s=30.0, load_timeout_s=600.0, **options):
    """A peer's side of the shared-table protocol: receives the description (layout and backings; memfds over the
    socket), maps every backing (read-only by default: a stray write faults instead of corrupting the other ranks'
    table), waits for the leader's load and returns the SharedTable over the SAME pages. The leader may be another
    process's SharedTable.create(group=...), an Engine, or `engram serve-table` (connect with
    UnixGroupChannel.connect(socket, group)). Engine options (backend='cuda', device=N) register this rank's memory
    at the protocol's register step. Errors name the protocol step and rank."""
    ch = _channel_arg(channel)
    if ch is None:
        raise _error("invalid_argument", "attach: expected a GroupChannel (UnixGroupChannel, TorchGroupChannel)")
    return _engram._attach_shared(ch, read_only, step_timeout_s, load_timeout_s, _option_text(options))


def _shared(layout, channel, **kwargs):
    """Every rank calls this: rank 0 creates (SharedTable.create(group=channel, **kwargs)), others attach."""
    read_only = kwargs.pop("read_only", True)
    if channel.rank == 0:
        return _create(layout, group=channel, **kwargs)
    leader_only = ("backing", "placement", "seed", "checkpoint", "model", "tensor_names", "reader_node", "group_name",
                   "shm_dir", "prefault", "allow_fallback", "home_node", "group")
    peer = {k: v for k, v in kwargs.items() if k not in leader_only}
    return _attach(channel, read_only=read_only, **peer)


_create.__doc__ += "\n" + (_create_host_table.__doc__ or "")
SharedTable.create = staticmethod(_create)
SharedTable.attach = staticmethod(_attach)
SharedTable.shared = staticmethod(_shared)


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


from . import metrics  # noqa: E402,F401  (Engine/Prefetcher.metrics(), .prometheus_text(), metrics.Collector)
