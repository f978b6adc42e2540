"""engram_offload for PyTorch model code: the Engram lookup, the prefetch pair and the device N-gram hash as
torch.library custom ops in the namespace ``torch.ops.engram``, and ``EngramEmbedding``, an nn.Module that is a
drop-in for an engine's Engram embedding of one layer.

Why custom ops: an engine compiles its model (torch.compile) and captures the pieces as CUDA graphs; a call through
pybind11 breaks the graph, a registered op with a fake (meta) implementation does not. Each op below declares its
shapes and dtypes for tracing, mutates none of its arguments (every output is a new tensor torch owns: no alias of
engine memory that torch cannot see) and keeps the stream contract of the library: it runs on the caller's
current stream, or on the engine's streams ordered both ways with it by events, eagerly and under capture.

Ops (an engine is named by the int handle ``register_engine`` gives; the shape of one Engram layer is
``heads`` = the engine's staging heads and ``d`` = the row width):

  engram::lookup(Tensor ids, int handle, int layer) -> Tensor
      ids [tokens, heads] int64 (CUDA on a cuda engine, CPU on a cpu engine) -> [tokens, heads, d] bfloat16,
      dequantized rows (DEAD_ID = -1 gives zeros). The planner's fast path on CUDA.
  engram::prepare(Tensor ids, int handle, int layer) -> Tensor ticket
      submits the layer's lookup to the engine's serial prefetch queue, overlapping with whatever the caller
      enqueues next; returns a [tokens, 0] int64 ticket (no storage) that consume takes, so the pair stays in
      order in a traced graph. A prepare of a layer whose last prepare was not consumed supersedes it.
  engram::consume(Tensor ticket, int handle, int layer) -> Tensor
      waits (on the GPU) for the layer's prefetched lookup and returns its rows [tokens, heads, d] bfloat16 as a
      new tensor (one device copy out of the queue's staging, which stays at a fixed address for graph replay).
  engram::hash(Tensor tokens, Tensor query_start_loc, Tensor lookback, Tensor slots, Tensor dead, int handle)
      -> Tensor ids
      the Engram N-gram hash of one step of chunks on the device (see ``DeviceHasher``): tokens [T] int64 raw ids,
      query_start_loc [R + 1] int32, lookback [rows, N - 1] int64 (each request's last N - 1 raw ids, oldest
      first), slots [R] int32 (each request's look-back row), dead [T] uint8 (non-zero: the token is DEAD and
      blocks the n-grams through it) -> ids [layers, T, heads] int64 global row ids, the CPU hasher's bit for bit
      (CPU tensors run that reference). A look-back entry of INT64_MIN is a DEAD token (a fresh sequence).

The ops need torch >= 2.4 (torch.library.custom_op). Importing this module registers them.
"""
import itertools
import threading

import torch

import engram_offload as _eo

__all__ = ["EngramEmbedding", "register_engine", "DeviceHasher"]

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"engram_offload.torch needs torch >= 2.4 (torch.library.custom_op); this is {torch.__version__}")


class _Registered:
    """What the ops know of an engine: the engine, its prefetch queue, the staging shape and per layer whether a
    prepared lookup waits for its consume, and the staging of the last consume."""

    def __init__(self, engine):
        self.engine = engine
        self.heads = engine.staging_heads
        self.d = engine.layout.d
        self.n_layers = engine.layout.n_layers
        self.cuda = engine.device >= 0
        self.prefetcher = _eo.Prefetcher(engine)
        self.pending = [False] * self.n_layers
        self.staging = [None] * self.n_layers
        self.tokens = [0] * self.n_layers


_lock = threading.Lock()
_next_handle = itertools.count(1)
_engines = {}  # handle -> _Registered
_handle_of = {}  # id(engine) -> handle
_hashers = {}  # handle -> (DeviceHasher's C++ object, n_layers, heads)


def register_engine(engine):
    """The op handle of an ``engram_offload.Engine`` (the same handle for the same engine). The engine stays
    alive as long as the process (ops in a compiled graph name it by this constant)."""
    if not isinstance(engine, _eo.Engine):
        raise _eo.InvalidArgumentError(f"register_engine: expected engram_offload.Engine, got {type(engine).__name__}")
    with _lock:
        h = _handle_of.get(id(engine))
        if h is None:
            h = next(_next_handle)
            _engines[h] = _Registered(engine)
            _handle_of[id(engine)] = h
        return h


def _entry(handle, layer):
    r = _engines.get(handle)
    if r is None:
        raise _eo.InvalidArgumentError(f"engram op: handle {handle} names no registered engine (register_engine)")
    if not 0 <= layer < r.n_layers:
        raise _eo.InvalidArgumentError(f"engram op: layer index {layer} out of range [0, {r.n_layers})")
    return r


def _check_ids(r, ids, what):
    if ids.dtype != torch.int64 or ids.dim() != 2 or ids.shape[1] != r.engine.layout.heads:
        raise _eo.InvalidArgumentError(
            f"{what}: ids must be int64 [tokens, {r.engine.layout.heads}], got {ids.dtype} {list(ids.shape)}")
    if ids.is_cuda != r.cuda:
        raise _eo.InvalidArgumentError(
            f"{what}: ids on {ids.device}, the engine on the {'cuda' if r.cuda else 'cpu'} backend")


def _bf16_from_bits(bits):
    """NumPy uint16 bf16 bits -> a CPU torch.bfloat16 tensor that owns its memory."""
    return torch.from_numpy(bits.view("int16").copy()).view(torch.bfloat16)


# ---- engram::lookup -------------------------------------------------------------------------------------------------

@torch.library.custom_op("engram::lookup", mutates_args=())
def lookup(ids: torch.Tensor, handle: int, layer: int) -> torch.Tensor:
    r = _entry(handle, layer)
    _check_ids(r, ids, "engram::lookup")
    ids = ids.contiguous()
    if r.cuda:
        out = torch.empty((ids.shape[0], r.heads, r.d), dtype=torch.bfloat16, device=ids.device)
        if ids.shape[0]:
            r.engine.lookup(layer, ids, out=out)  # torch's current stream (stream=None)
        return out
    return _bf16_from_bits(r.engine.lookup(layer, ids.numpy()))


@lookup.register_fake
def _lookup_fake(ids, handle, layer):
    r = _entry(handle, layer)
    return ids.new_empty((ids.shape[0], r.heads, r.d), dtype=torch.bfloat16)


# ---- engram::prepare / engram::consume ------------------------------------------------------------------------------

def _drain(r, layer):
    """Consume a prepared, not yet consumed lookup of `layer` (its rows become the layer's last staging)."""
    if r.pending[layer]:
        r.pending[layer] = False
        r.staging[layer] = r.prefetcher.consume(layer)


@torch.library.custom_op("engram::prepare", mutates_args=())
def prepare(ids: torch.Tensor, handle: int, layer: int) -> torch.Tensor:
    r = _entry(handle, layer)
    _check_ids(r, ids, "engram::prepare")
    _drain(r, layer)
    r.prefetcher.prepare(layer, ids.contiguous() if r.cuda else ids.contiguous().numpy())
    r.pending[layer] = True
    r.tokens[layer] = int(ids.shape[0])
    return ids.new_empty((ids.shape[0], 0))


@prepare.register_fake
def _prepare_fake(ids, handle, layer):
    _entry(handle, layer)
    return ids.new_empty((ids.shape[0], 0))


@torch.library.custom_op("engram::consume", mutates_args=())
def consume(ticket: torch.Tensor, handle: int, layer: int) -> torch.Tensor:
    r = _entry(handle, layer)
    _drain(r, layer)
    st = r.staging[layer]
    if st is None:
        raise _eo.InvalidArgumentError(f"engram::consume: layer index {layer} was never prepared")
    if ticket.shape[0] != r.tokens[layer]:
        raise _eo.InvalidArgumentError(
            f"engram::consume: the ticket is for {ticket.shape[0]} tokens, the layer's last prepare had "
            f"{r.tokens[layer]}")
    if r.cuda:
        out = torch.empty((ticket.shape[0], r.heads, r.d), dtype=torch.bfloat16, device=ticket.device)
        out.copy_(st)  # on torch's current stream, which waited for the lookup in Prefetcher.consume
        return out
    return _bf16_from_bits(st)


@consume.register_fake
def _consume_fake(ticket, handle, layer):
    r = _entry(handle, layer)
    return ticket.new_empty((ticket.shape[0], r.heads, r.d), dtype=torch.bfloat16)


# ---- engram::hash ---------------------------------------------------------------------------------------------------

class DeviceHasher:
    """The Engram N-gram hash of a layout on a CUDA device, for ``torch.ops.engram.hash``: the hasher's constants
    uploaded once (compression table, multipliers, head primes and offsets). ``hasher`` is an
    ``engram_offload.Hasher`` of the same layout. ``handle`` names it in the op."""

    def __init__(self, hasher, device="cuda"):
        dev = torch.device(device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        self._cpu = hasher._h
        self._h = _eo._engram._DeviceHasher(hasher._h, index)
        self.device = index
        self.n_layers = self._h.n_layers
        self.heads = self._h.heads
        self.window = self._h.window
        with _lock:
            self.handle = next(_next_handle)
            _hashers[self.handle] = self

    def __call__(self, tokens, query_start_loc, lookback, slots, dead=None):
        if dead is None:
            dead = torch.zeros(tokens.shape, dtype=torch.uint8, device=tokens.device)
        return torch.ops.engram.hash(tokens, query_start_loc, lookback, slots, dead, self.handle)


def _hasher_entry(handle):
    h = _hashers.get(handle)
    if h is None:
        raise _eo.InvalidArgumentError(f"engram::hash: handle {handle} names no DeviceHasher")
    return h


@torch.library.custom_op("engram::hash", mutates_args=())
def hash_step(tokens: torch.Tensor, query_start_loc: torch.Tensor, lookback: torch.Tensor, slots: torch.Tensor,
              dead: torch.Tensor, handle: int) -> torch.Tensor:
    h = _hasher_entry(handle)
    want = ((tokens, torch.int64, 1), (query_start_loc, torch.int32, 1), (lookback, torch.int64, 2),
            (slots, torch.int32, 1), (dead, torch.uint8, 1))
    on_cuda = tokens.is_cuda
    where = f"cuda:{h.device}" if on_cuda else "cpu"
    for name, (t, dtype, dim) in zip(("tokens", "query_start_loc", "lookback", "slots", "dead"), want):
        if t.dtype != dtype or t.dim() != dim or t.is_cuda != on_cuda or (on_cuda and t.device.index != h.device):
            raise _eo.InvalidArgumentError(f"engram::hash: {name} must be a {dim}-d {dtype} tensor on {where}, "
                                           f"got {t.dtype} {list(t.shape)} on {t.device}")
    if lookback.shape[1] != h.window:
        raise _eo.InvalidArgumentError(f"engram::hash: lookback rows hold {h.window} ids, got {lookback.shape[1]}")
    if slots.shape[0] + 1 != query_start_loc.shape[0] or dead.shape[0] != tokens.shape[0]:
        raise _eo.InvalidArgumentError("engram::hash: slots need one entry per request (query_start_loc has one "
                                       "more) and dead one per token")
    tokens, query_start_loc, lookback, slots, dead = (
        t.contiguous() for t in (tokens, query_start_loc, lookback, slots, dead))
    out = torch.empty((h.n_layers, tokens.shape[0], h.heads), dtype=torch.int64, device=tokens.device)
    if not on_cuda:  # the CPU reference of the same batch
        _eo._engram._hash_batch_reference(h._cpu, tokens.data_ptr(), tokens.shape[0], query_start_loc.data_ptr(),
                                          slots.shape[0], lookback.data_ptr(), lookback.shape[0], slots.data_ptr(),
                                          dead.data_ptr(), out.data_ptr())
        return out
    h._h.launch(tokens.data_ptr(), tokens.shape[0], query_start_loc.data_ptr(), slots.shape[0],
                lookback.data_ptr(), lookback.shape[0], slots.data_ptr(), dead.data_ptr(), out.data_ptr(),
                torch.cuda.current_stream(tokens.device).cuda_stream)
    return out


@hash_step.register_fake
def _hash_fake(tokens, query_start_loc, lookback, slots, dead, handle):
    h = _hasher_entry(handle)
    return tokens.new_empty((h.n_layers, tokens.shape[0], h.heads), dtype=torch.int64)


# ---- EngramEmbedding ------------------------------------------------------------------------------------------------

class EngramEmbedding(torch.nn.Module):
    """One Engram layer's embedding, served from host memory by engram-offload.

    EngramEmbedding(table_or_engine, layer, device=None, **options): ``table_or_engine`` is an
    ``engram_offload.Engine`` (its backend and lookup path are used as built) or a ``SharedTable`` (an engine is
    built over it: backend 'cuda' on ``device`` (default torch's current device) when CUDA is available, else
    'cpu'; ``options`` are engine options, e.g. fast_path='planner', cache_size='5%'). ``layer`` is the index of
    the Engram layer in the table (an index into ``layout.layer_ids``).

    forward(hash_ids, ticket=None): hash_ids [tokens, n_hash_cols] int64 global row ids (DEAD_ID = -1 gives a zero
    row) -> [tokens, heads, d] bfloat16, the dequantized rows: the released model's ``embed`` of this Engram layer.
    Without a ticket it looks the rows up (torch.ops.engram.lookup); with one it consumes the lookup that
    ``prepare(hash_ids)`` submitted to the prefetch queue earlier (torch.ops.engram.consume), so the lookup
    overlapped with the model's work in between. ``prepare`` returns the ticket and also keeps it: a forward
    without a ticket right after a prepare of the same layer consumes it (eager code); compiled code passes the
    ticket (a value, not module state). The output is a tensor torch owns.
    """

    def __init__(self, table_or_engine, layer, device=None, **options):
        super().__init__()
        if isinstance(table_or_engine, _eo.Engine):
            if options or device is not None:
                raise _eo.InvalidArgumentError("EngramEmbedding(engine, ...): the engine's options are fixed; give "
                                               "only the layer")
            engine = table_or_engine
        elif isinstance(table_or_engine, _eo.SharedTable):
            opts = dict(options)
            if "backend" not in opts:
                opts["backend"] = "cuda" if torch.cuda.is_available() and _eo.cuda_backend_built() else "cpu"
            if opts["backend"] == "cuda":
                dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
                opts.setdefault("device", dev.index if dev.index is not None else torch.cuda.current_device())
            engine = _eo.Engine(table_or_engine, **opts)
        else:
            raise _eo.InvalidArgumentError(
                f"EngramEmbedding: expected an engram_offload.Engine or SharedTable, got {type(table_or_engine).__name__}")
        layer = int(layer)
        if not 0 <= layer < engine.layout.n_layers:
            raise _eo.InvalidArgumentError(f"EngramEmbedding: layer index {layer} out of range "
                                           f"[0, {engine.layout.n_layers})")
        self.engine = engine
        self.layer = layer
        self.layer_id = engine.layout.layer_ids[layer]
        self.handle = register_engine(engine)
        self.heads = engine.staging_heads
        self.d = engine.layout.d
        self._ticket = None

    def extra_repr(self):
        return (f"layer={self.layer} (layer id {self.layer_id}), heads={self.heads}, d={self.d}, "
                f"backend={self.engine.backend}")

    def prepare(self, hash_ids):
        """Submit this layer's lookup of ``hash_ids`` to the prefetch queue now; returns the ticket forward takes."""
        ticket = torch.ops.engram.prepare(hash_ids, self.handle, self.layer)
        if not torch.compiler.is_compiling():
            self._ticket = ticket
        return ticket

    def forward(self, hash_ids, ticket=None):
        if ticket is None and self._ticket is not None and not torch.compiler.is_compiling():
            ticket, self._ticket = self._ticket, None
        if ticket is not None:
            return torch.ops.engram.consume(ticket, self.handle, self.layer)
        return torch.ops.engram.lookup(hash_ids, self.handle, self.layer)

    def end_step(self):
        """The queue's end of step (CUDA: one host synchronisation; the hot-row cache's online updates run here).
        Optional: lookups are correct without it; call it once per model step, outside graph capture, to keep
        the cache following the traffic."""
        r = _engines[self.handle]
        for li in range(r.n_layers):
            _drain(r, li)
        r.prefetcher.end_step()
