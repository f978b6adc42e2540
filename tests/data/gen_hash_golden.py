#!/usr/bin/env python3
"""Golden values for the C++ numpy RNG and Engram N-gram hash, computed with the machine's numpy.

Usage: gen_hash_golden.py REQUEST.json  > RESPONSE.json

The C++ tests (tests/unit/core/test_numpy_rng.cpp, test_ngram_hash.cpp) write a request with fresh
random inputs, run this script with a python3 that has numpy (Debian: python3-numpy) and compare.
Request keys (all optional):
  "seedseq":  [{"entropy_words": [uint32, ...]}]          SeedSequence(int from words, low word first)
  "integers": [{"seed": int, "calls": [[low, high, n], ...]}]
                 successive Generator.integers(low, high, n, dtype=int64) calls on default_rng(seed)
  "layers":   [{"seed", "layer_ids", "max_ngram", "heads_per_order", "vocab_sizes", "compressed_vocab",
                "pad_id", "tokens": [[...], ...], "lookup_table": [...] (optional)}]
                 the reference NgramHashMapping: multipliers, prime head sizes, per-layer hashes
                 (head-local ids, as its hash() returns them) of the batch "tokens" [B][T]. With
                 "lookup_table" the tokens are raw ids and pad_id a raw id, compressed as the reference's
                 CompressedTokenizer does (negative ids pass through); without it they are compressed ids.
The hash below restates the reference algorithm (deepseek-ai/Engram engram_demo_v1.py) with numpy; it
shares no code with the C++ under test.
"""
import json
import sys

import numpy as np


def words_to_int(words):
    value = 0
    for i, w in enumerate(words):
        value |= int(w) << (32 * i)
    return value


def pcg_state(bitgen):
    st = bitgen.state
    s, inc = st["state"]["state"], st["state"]["inc"]
    mask = (1 << 64) - 1
    return {
        "state_high": s >> 64, "state_low": s & mask, "inc_high": inc >> 64, "inc_low": inc & mask,
        "has_uint32": int(st["has_uint32"]), "uinteger": int(st["uinteger"]),
    }


def is_prime(n):
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in small:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def head_sizes(case):
    """calculate_vocab_size_across_layers: primes walk upward, never reused across layers."""
    seen = set()
    out = {}
    for layer_id in case["layer_ids"]:
        per_order = []
        for ngram in range(2, case["max_ngram"] + 1):
            start = case["vocab_sizes"][ngram - 2] - 1
            sizes = []
            for _ in range(case["heads_per_order"]):
                candidate = start + 1
                while not is_prime(candidate) or candidate in seen:
                    candidate += 1
                seen.add(candidate)
                sizes.append(candidate)
                start = candidate
            per_order.append(sizes)
        out[layer_id] = per_order
    return out


def layer_case(case):
    vocab = case["compressed_vocab"]
    max_ngram = case["max_ngram"]
    x = np.asarray(case["tokens"], dtype=np.int64)
    pad_id = case["pad_id"]
    if "lookup_table" in case:
        lookup = np.asarray(case["lookup_table"], dtype=np.int64)
        out = x.copy()
        mask = x >= 0
        out[mask] = lookup[x[mask]]
        x = out
        pad_id = int(lookup[pad_id])
    half_bound = max(1, int(np.iinfo(np.int64).max // vocab) // 2)
    sizes = head_sizes(case)
    result = {"half_bound": half_bound, "multipliers": {}, "head_sizes": {}, "hashes": {}}
    B, T = x.shape
    for layer_id in case["layer_ids"]:
        g = np.random.default_rng(int(case["seed"] + 10007 * int(layer_id)))
        r = g.integers(low=0, high=half_bound, size=(max_ngram,), dtype=np.int64)
        multipliers = r * 2 + 1

        def shift(k):
            if k == 0:
                return x
            return np.pad(x, ((0, 0), (k, 0)), mode="constant", constant_values=pad_id)[:, :T]

        shifts = [shift(k) for k in range(max_ngram)]
        hashes = []
        for n in range(2, max_ngram + 1):
            mix = shifts[0] * multipliers[0]
            for k in range(1, n):
                mix = np.bitwise_xor(mix, shifts[k] * multipliers[k])
            for p in sizes[layer_id][n - 2]:
                hashes.append((mix % int(p)).astype(np.int64, copy=False))
        key = str(layer_id)
        result["multipliers"][key] = [int(v) for v in multipliers]
        result["head_sizes"][key] = [int(p) for order in sizes[layer_id] for p in order]
        result["hashes"][key] = np.stack(hashes, axis=2).tolist()
    return result


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    response = {"numpy_version": np.__version__, "seedseq": [], "integers": [], "layers": []}
    for case in request.get("seedseq", []):
        ss = np.random.SeedSequence(words_to_int(case["entropy_words"]))
        response["seedseq"].append({
            "pool": [int(v) for v in ss.pool],
            "state32": [int(v) for v in ss.generate_state(8, np.uint32)],
            "state64": [int(v) for v in ss.generate_state(4, np.uint64)],
        })
    for case in request.get("integers", []):
        g = np.random.default_rng(case["seed"])
        entry = {"initial_state": pcg_state(g.bit_generator), "results": []}
        for low, high, n in case["calls"]:
            entry["results"].append([int(v) for v in g.integers(low, high, size=n, dtype=np.int64)])
        entry["final_state"] = pcg_state(g.bit_generator)
        entry["raw"] = [int(v) for v in np.random.default_rng(case["seed"]).bit_generator.random_raw(8)]
        response["integers"].append(entry)
    for case in request.get("layers", []):
        response["layers"].append(layer_case(case))
    json.dump(response, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
