"""A wheel install (not editable) works: the wheel carries what huvm reads at run time (the ABI header).

The test builds the wheel from pyctl/ (in-tree, no build isolation: pyctl/build is reused, so a warm build
takes seconds), installs it into a fresh venv made the way the project makes its own (Debian's python with
system site packages), and runs the installed ``huvmctl --sim status`` from outside the source tree with no
$HUVM_ROOT / $HUVM_ABI_HEADER, so nothing can come from the checkout. Third-party dependencies (rich, cffi,
pyarrow, ...) are not what is under test; a .pth file lends them from the running environment's
site-packages, which holds no ``huvm`` package of its own (the project's install is editable).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PY = Path(os.environ.get("SYSTEM_PY", "/usr/bin/python3"))


def _run(*cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.mark.timeout(600)
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    if not SYSTEM_PY.exists():
        pytest.skip(f"{SYSTEM_PY} is missing")
    wheels = tmp_path / "wheels"
    r = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels,
             ROOT / "pyctl")
    assert r.returncode == 0, r.stderr
    (wheel,) = wheels.glob("huvm-*.whl")

    venv = tmp_path / "venv"
    r = _run(SYSTEM_PY, "-m", "venv", "--system-site-packages", venv)
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    r = _run(py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel)
    assert r.returncode == 0, r.stderr
    site = Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "zz-huvm-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith("HUVM_") and k != "PYTHONPATH"}
    where = _run(py, "-c", "import huvm, huvm.header as h; print(huvm.__file__); print(h.header_path())",
                 cwd=tmp_path, env=env)
    assert where.returncode == 0, where.stderr
    module, header = (Path(line) for line in where.stdout.split())
    assert module.is_relative_to(venv), module  # the wheel's huvm, not the checkout's
    assert header == module.parent / "data" / "uvm_huvm_ioctl.h"  # shipped as package data
    assert (module.parent / "data" / "huvm_events.h").is_file()
    lab = module.parent.parent / "huvmlab"  # the lab ships in the same wheel
    assert (lab / "calibration" / "huvm_calibrate.cu").is_file()  # huvmctl calibrate builds it on the target

    # the test doubles stay in the tests: no huvm.testing in the wheel (nor any module left in a reused build
    # directory after it left the source tree)
    for pkg in (module.parent, lab):
        shipped = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")}
        src = ROOT / "pyctl" / pkg.name
        sources = {p.relative_to(src).as_posix() for p in src.rglob("*.py")}
        assert shipped and "testing.py" not in shipped and shipped <= sources, sorted(shipped - sources)
    r = _run(py, "-c", "import huvm.testing", cwd=tmp_path, env=env)
    assert r.returncode != 0 and "No module named 'huvm.testing'" in r.stderr

    r = _run(venv / "bin" / "huvmctl", "--sim", "status", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "on simulated aws-p3.8xlarge" in r.stdout and "preset huvm" in r.stdout and r.stderr == ""
    # the lab comes in by entry point: its subcommands and its old names under huvm work from the wheel too
    r = _run(venv / "bin" / "huvmctl", "sim", "calibrate", "--help", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "--markdown" in r.stdout, r.stderr
    r = _run(py, "-m", "huvm.sim.calibrate", "--help", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "--markdown" in r.stdout, r.stderr
    assert r.stderr.startswith("huvm: `python -m huvm.sim.calibrate` is deprecated") and r.stderr.count("\n") == 1
