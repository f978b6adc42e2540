"""Token ids to Engram row ids from Python: the reference N-gram hash (Hasher: whole sequences, chunks, decode
steps, prefix-cache resume) and the ids `engram run` replays (DecodeIds)."""
import numpy as _np

from . import _engram
from ._arrays import _as_numpy, _like_input
from ._engram import default_compression_table_path


class DecodeIds:
    """The ids of a decode replay, chosen exactly as `engram run` chooses them for the same options, so that a Python
    decode loop looks up the rows `engram run` looks up.

    ids: 'text' (a token file hashed with the reference N-gram hash: slot b of a batch of B reads the text from
    token b*N/B on, one token per step; a slot starts a new sequence at a document boundary or after seq_len
    tokens), 'zipf', 'uniform', or 'auto' (text when the token file exists, else zipf; .note says why).
    tokens: the token file ('' = the text scripts/setup tokenizes); model: a model directory whose compression table
    and pad id hash the text; seed: the seed of zipf and uniform ids (engram run --seed); switch_tokens, switch_at:
    text ids from step switch_at on read this other token file (engram run --switch-tokens/--switch-at).
    step(i, batch) -> int64 [n_layers, batch, heads] global row ids of step i; steps come in order 0, 1, 2, ...
    (step 0 again restarts every slot).
    """

    def __init__(self, layout, ids="auto", tokens="", model="", tensor_names="", zipf_alpha=1.0, seed=1,
                 seq_len=2048, switch_tokens="", switch_at=0):
        self.layout = layout
        self._d = _engram._DecodeIds(layout, ids, tokens or "", model or "", tensor_names or "", float(zipf_alpha),
                                     int(seed), int(seq_len), switch_tokens or "", int(switch_at))

    note = property(lambda self: self._d.note, doc="Why auto did not take text ('' when it did, or was not auto).")

    def describe(self):
        """What the ids are (e.g. the token file and its size)."""
        return self._d.describe()

    def step(self, step, batch):
        """Step `step`'s ids: int64 [n_layers, batch, heads]."""
        return self._d.step(int(step), int(batch))


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
        self.compression_table = compression_table or ""
        self.compression_table_source = "file" if compression_table else None
        self.pad_id = pad_id
        self._read_info()

    @classmethod
    def from_model(cls, model_dir, tensor_names="", seed=0, max_rollback=64):
        """The hasher of a Hugging Face model directory: the layout, pad id and V' of its config.json and its
        compression table (the directory's engram.compress.bin, else built from its tokenizer.json in C++ and
        cached under $XDG_CACHE_HOME/engram/compress; no Node). .layout is the model's layout;
        .compression_table names the file used ('' when built and not cached).
        Errors: EngramError not_found (no directory, config.json or tokenizer.json), invalid_argument (malformed
        files, V' of the table != engram_compressed_vocab_size, naming both)."""
        layout, handle, info = _engram._model_hasher(str(model_dir), tensor_names or "", int(seed), int(max_rollback))
        self = cls.__new__(cls)
        self.layout = layout
        self._h = handle
        self.compression_table = info["compression_table"]
        self.compression_table_source = info["compression_table_source"]
        self.pad_id = info["pad_id"]
        self._read_info()
        return self

    def _read_info(self):
        info = _engram._hasher_info(self._h)
        self.compressed_vocab = info["compressed_vocab"]
        self.vocab_size = info["vocab_size"]
        self.compressed_pad_id = info["compressed_pad_id"]
        self.multipliers = info["multipliers"]  # [n_layers][max_ngram] int64

    def hash(self, tokens, layer_index=0, global_ids=True, dead=None):
        """Ids of a whole sequence starting at tokens[0] for one Engram layer.

        tokens: 1-D integer array of raw token ids (< vocab_size). dead: optional boolean (or integer) mask of
        the tokens' length marking DEAD tokens (image spans), as the device kernel's dead_mask does: a DEAD
        token takes part in no n-gram; walking an n-gram back from its newest token, the first DEAD token and
        every older one count as the pad (as positions before the sequence start do), so a DEAD position
        itself gets the all-pad n-grams' ids. Returns int64 [T, heads]: global row ids (head_offsets[h] + hash
        mod p_h) or, with global_ids=False, per-head ids in [0, p_h); a torch tensor for torch input, else a
        NumPy array.
        Errors: EngramError invalid_argument (bad layer index, token id >= vocab_size naming its position, a
        mask of another length).
        """
        mask = None if dead is None else _as_numpy(dead, "dead")
        return _like_input(_engram._hash(self._h, _as_numpy(tokens, "tokens"), layer_index, global_ids, mask), tokens)

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

    def hash_chunk(self, sequence, tokens, global_ids=True, dead=None):
        """Hash the next tokens of ``sequence`` (prefill chunk or decode step) for every Engram layer and
        advance it: int64 [n_layers, T, heads]. Chunks give exactly the ids of hashing the whole sequence.
        dead: optional DEAD mask of the chunk's tokens (see hash()); the sequence remembers DEAD tokens, so
        later chunks' n-grams stop at them too. On error the sequence is unchanged. A torch tensor for torch
        input, else a NumPy array."""
        mask = None if dead is None else _as_numpy(dead, "dead")
        return _like_input(_engram._hash_chunk(sequence, _as_numpy(tokens, "tokens"), global_ids, mask), tokens)
