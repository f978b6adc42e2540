"""engram_offload.__version__ is the C++ library's version, the one project(VERSION) of CMakeLists.txt gives."""
import os
import re

import engram_offload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_version_is_the_project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"^project\(engram_offload VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read(), re.MULTILINE)
    assert m, "CMakeLists.txt has no project(engram_offload VERSION x.y.z)"
    assert engram_offload.__version__ == m.group(1)
    assert engram_offload._engram.__version__ == m.group(1)
