"""Build of the engram_offload extension for `pip install --no-build-isolation ./python`.

The extension is a target of the project's CMake build (python/CMakeLists.txt): build_ext configures the
repository root (this file's parent directory) into ENGRAM_BUILD_DIR (default <repo>/build-pip), against the
interpreter that runs pip (Python_EXECUTABLE), builds only the `engram_python` target and copies the module into
the wheel. Extra CMake arguments come from ENGRAM_CMAKE_ARGS (e.g. "-DENGRAM_CUDA=OFF" or
"-Dpybind11_DIR=..."); ENGRAM_BUILD_JOBS sets the parallelism (default 2). No network access is needed.
The package's version is the project's, read from project(... VERSION x.y.z) in the top-level CMakeLists.txt.
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"^project\(engram_offload VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read(), re.MULTILINE)
    if not m:
        raise RuntimeError(f"no project(engram_offload VERSION x.y.z) in {ROOT}/CMakeLists.txt")
    return m.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("ENGRAM_BUILD_DIR", os.path.join(ROOT, "build-pip"))
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DENGRAM_BUILD_TESTS=OFF",
                "-DENGRAM_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}",
                f"-DPYTHON_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        try:
            import pybind11  # a pip-installed pybind11 (Debian's pybind11-dev is found by CMake directly)
            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        args += shlex.split(os.environ.get("ENGRAM_CMAKE_ARGS", ""))
        subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "engram_python", "-j",
                               os.environ.get("ENGRAM_BUILD_JOBS", "2")])
        built = glob.glob(os.path.join(build_dir, "python", "engram_offload", "_engram*.so"))
        if not built:
            raise RuntimeError(f"engram_python built no _engram*.so under {build_dir}/python/engram_offload")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(built[0], dest)


setup(version=project_version(), ext_modules=[Extension("engram_offload._engram", sources=[])], cmdclass={"build_ext": CMakeBuild})
