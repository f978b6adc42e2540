import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "decode_loop.py")


def test_decode_loop_example_runs(tmp_path):
    trace = tmp_path / "trace.json"
    r = subprocess.run([sys.executable, EXAMPLE, "--steps", "3", "--batch", "4", "--table-size", "16MiB",
                        "--hidden", "64", "--threads", "1", "--trace", str(trace)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "early and on_demand give the same hidden state: True" in r.stdout
    assert "engram layer 1:" in r.stdout and "engram layer 14:" in r.stdout
    assert trace.stat().st_size > 0
