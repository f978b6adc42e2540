import pytest

import engram_offload as eo


def test_error_class_and_codes():
    assert issubclass(eo.EngramError, RuntimeError)
    names = eo.code_names()
    assert names[0] == "ok" and "invalid_argument" in names and "unsupported" in names
    with pytest.raises(eo.EngramError) as e:
        eo.Layout.preset("tiny", table_size="12 parsecs")
    err = e.value
    assert err.code in names and err.code != "ok"
    assert err.message and str(err).startswith(err.code + ": ")
    assert isinstance(err.sys_error, int)


def test_missing_file_carries_errno(tmp_path):
    t = eo.SharedTable.create(eo.Layout.preset("tiny"))
    with pytest.raises(eo.EngramError) as e:
        t.load(str(tmp_path / "none.safetensors"))
    assert e.value.code == "not_found"
    assert e.value.sys_error == 2  # ENOENT


def test_cuda_backend_flag_is_bool():
    assert isinstance(eo.cuda_backend_built(), bool)
