"""TorchGroupChannel: two torch.distributed gloo ranks (torch.multiprocessing.spawn) share ONE table through
their process group -- memfds handed over a side Unix socket, the protocol's entries through
all_gather_object -- and both read the leader's rows (skipped without PyTorch)."""
import os

import numpy as np
import pytest

import engram_offload as eo

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed not available", allow_module_level=True)


def _rank_main(rank, world, init_file, seed, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        ch = eo.TorchGroupChannel()
        lay = eo.Layout.preset("v41-flash-mini", table_size="4MiB")
        table = eo.SharedTable.shared(lay, ch, seed=seed)
        rng = np.random.default_rng(seed)  # same ids on every rank
        offs = np.asarray(lay.head_offsets[1])
        ids = (offs[:-1] + (rng.random((32, lay.heads)) * (offs[1:] - offs[:-1])).astype(np.int64)).astype(np.int64)
        out = eo.lookup(table, 1, ids, threads=1)
        p, s = eo.synth_rows(seed, 1, ids.ravel(), lay.d)
        ok = np.array_equal(out, eo.decode_rows(p, s).reshape(out.shape))
        np.save(os.path.join(out_dir, f"rank{rank}.npy"), out)
        with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
            f.write(f"{table.group_rank} {table.group_world_size} {table.read_only} {ok}")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_share_one_table(tmp_path, rng):
    import torch.multiprocessing as tmp_mp
    seed = int(rng.integers(1, 1 << 62))
    tmp_mp.spawn(_rank_main, args=(2, str(tmp_path / "init"), seed, str(tmp_path)), nprocs=2, join=True)
    a = np.load(tmp_path / "rank0.npy")
    b = np.load(tmp_path / "rank1.npy")
    np.testing.assert_array_equal(a, b)
    assert (tmp_path / "rank0.txt").read_text() == "0 2 False True"
    assert (tmp_path / "rank1.txt").read_text() == "1 2 True True"
