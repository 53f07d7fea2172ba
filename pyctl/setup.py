"""Builds the cffi extension huvm._huvm_cffi (policy core + simulator); metadata is in pyproject.toml.

The C sources live outside this directory (../driver), so their object files would land beside the build
directory; a one-level-deeper build_temp keeps them inside it.

The ABI header (and the event list next to the core) live outside the package too; build_py copies them
into the built package's ``huvm/data/``, where :mod:`huvm.header` finds them in a wheel install. An
editable install reads them from the source tree instead.
"""

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# The repository root, as huvm/_build.py takes it ($HUVM_ROOT overrides, e.g. for a copy built elsewhere).
ROOT = Path(os.environ.get("HUVM_ROOT", Path(__file__).resolve().parent.parent)).resolve()
SHIPPED_HEADERS = (ROOT / "driver" / "include" / "uapi" / "uvm_huvm_ioctl.h", ROOT / "driver" / "core" / "huvm_events.h")


class BuildExt(build_ext):  # type: ignore[misc]
    def finalize_options(self) -> None:
        super().finalize_options()
        self.build_temp: str = os.path.join(str(self.build_temp), "pyctl")


class BuildPy(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        # A reused build directory keeps modules that have since left the source tree; they must not ship.
        built = {os.path.abspath(f) for f in self.get_outputs()}
        for stale in (p for pkg in ("huvm", "huvmlab") for p in (Path(self.build_lib) / pkg).rglob("*.py")):
            if os.path.abspath(stale) not in built:
                stale.unlink()
        dest = Path(self.build_lib) / "huvm" / "data"
        dest.mkdir(parents=True, exist_ok=True)
        for src in SHIPPED_HEADERS:
            self.copy_file(str(src), str(dest / src.name))


setup(cffi_modules=["huvm/_build.py:ffibuilder"], cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
