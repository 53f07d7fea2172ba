"""Builds the cffi extension huvm._huvm_cffi (policy core + simulator); metadata is in pyproject.toml.

The C sources live outside this directory (../driver), so their object files would land beside the build
directory; a one-level-deeper build_temp keeps them inside it.
"""

import os

from setuptools import setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):  # type: ignore[misc]
    def finalize_options(self) -> None:
        super().finalize_options()
        self.build_temp: str = os.path.join(str(self.build_temp), "pyctl")


setup(cffi_modules=["huvm/_build.py:ffibuilder"], cmdclass={"build_ext": BuildExt})
