"""How the package's arrays cross into the C++ module and back: NumPy arrays as they are, torch CPU tensors and
__dlpack__ producers zero copy, results returned as the kind of array the caller passed (torch for torch), and
EngramError built the way the C++ side builds it."""
import numpy as _np

from ._engram import EngramError, InvalidArgumentError


def _error(code, message):
    """An EngramError as the C++ side builds it (code name, message, sys_error 0); invalid_argument is also a
    ValueError (InvalidArgumentError)."""
    e = (InvalidArgumentError if code == "invalid_argument" else EngramError)(f"{code}: {message}")
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


def _like_input(result, inp):
    """The result as the kind of array the caller passed: a torch tensor (sharing the memory) for torch input,
    else the NumPy array as is."""
    if _is_torch_tensor(inp):
        return _torch().from_numpy(result)
    return result


def _bf16_like_input(staging, torch_input):
    """uint16 bf16 bits as a torch.bfloat16 tensor sharing the memory for torch input, else as is."""
    if not torch_input:
        return staging
    t = _torch()
    import warnings
    with warnings.catch_warnings():  # a read-only zero-copy view stays read-only; torch only warns about it
        warnings.simplefilter("ignore", UserWarning)
        return t.from_numpy(staging.view(_np.int16)).view(t.bfloat16)


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
