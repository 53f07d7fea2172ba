"""Build-pipeline and lab-server lifecycle scripts (driver/scripts), run against fake trees.

- huvm-load.sh: every refusal and the dry-run plans, against a fake /sys and /proc (SYSFS_ROOT,
  PROCFS_ROOT) and fake modules (ELF objects with a .modinfo section, read by the real modinfo).
- huvm-source.sh: wrong version / corrupted upstream trees are refused with one line, nothing left behind.
- huvm-patch.sh / huvm-refresh-patches.sh: zero-fuzz application, idempotence, refresh round trip.
- huvm-source.sh for other upstreams: the pinned 580.142 tarball by path, a manifest recorded on first use.
- huvm-dkms.sh: the modprobe.d rule that wins over nvidia.conf, the package's own module file name,
  BUILD_DEPENDS and its version check.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import require_or_skip

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "driver" / "scripts"
VERSION = "535.261.03"
KREL = platform.release()


def run(
    script: str, *args: str, env: dict[str, str] | None = None, user: int | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = ["bash", str(SCRIPTS / script), *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    drop = ("DRY_RUN", "MODULE_PARAMS", "UPSTREAM_DIR", "UPSTREAM_TARBALL", "FORCE", "PATCH", "UPSTREAM_PATCHES",
            "HUVM_SHARED_DIR", "NVIDIA_DKMS_PACKAGE")
    full_env = {k: v for k, v in os.environ.items() if k not in drop}
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=120, check=False)


# ---- fake modules ---------------------------------------------------------------------------------

def make_ko(path: Path, **fields: str) -> Path:
    """An ELF object whose .modinfo section holds fields (modinfo reads it like a real module)."""
    have = shutil.which("gcc") is not None and shutil.which("modinfo") is not None
    require_or_skip(have, "needs gcc and modinfo (kmod)")
    src = path.with_suffix(".c")
    lines = [
        f'__attribute__((section(".modinfo"), used, aligned(1))) static const char f{i}[] = "{k}={v}";'
        for i, (k, v) in enumerate(fields.items())
    ]
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-c", "-o", str(path), str(src)], check=True)
    return path


HUVM_SRC = "HUVMSRCVERSION0000001"
STOCK_SRC = "STOCKSRCVERSION000002"


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ko")
    vermagic = f"{KREL} SMP preempt mod_unload modversions"
    return {
        "huvm": make_ko(d / "nvidia-uvm.ko", version=VERSION, srcversion=HUVM_SRC, vermagic=vermagic,
                        huvm_version="0.1.0", huvm_abi="1.0", name="nvidia_uvm"),
        "stock": make_ko(d / "stock-nvidia-uvm.ko", version=VERSION, srcversion=STOCK_SRC, vermagic=vermagic,
                         name="nvidia_uvm"),
        "old": make_ko(d / "old-nvidia-uvm.ko", version="535.247.01", srcversion="X", vermagic=vermagic,
                       huvm_version="0.1.0", name="nvidia_uvm"),
        "otherkernel": make_ko(d / "ok-nvidia-uvm.ko", version=VERSION, srcversion="Y",
                               vermagic="5.10.0-99-amd64 SMP", huvm_version="0.1.0", name="nvidia_uvm"),
    }


class FakeHost:
    """A fake /sys and /proc: nvidia (version), nvidia_uvm (srcversion, refcnt), processes and their fds."""

    def __init__(self, base: Path) -> None:
        self.sys = base / "sys"
        self.proc = base / "proc"
        (self.sys / "module").mkdir(parents=True)
        self.proc.mkdir()

    def nvidia(self, version: str = VERSION) -> FakeHost:
        d = self.sys / "module" / "nvidia"
        d.mkdir(exist_ok=True)
        (d / "version").write_text(version + "\n")
        return self

    def uvm(self, srcversion: str = STOCK_SRC, refcnt: int = 0) -> FakeHost:
        d = self.sys / "module" / "nvidia_uvm"
        (d / "parameters").mkdir(parents=True, exist_ok=True)
        (d / "version").write_text(VERSION + "\n")
        (d / "srcversion").write_text(srcversion + "\n")
        (d / "refcnt").write_text(f"{refcnt}\n")
        return self

    def process(self, pid: int, comm: str, *targets: str) -> FakeHost:
        d = self.proc / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
        for i, t in enumerate(targets):
            os.symlink(t, d / "fd" / str(i))
        return self

    def env(self, stock: Path, **extra: str) -> dict[str, str]:
        return {"SYSFS_ROOT": str(self.sys), "PROCFS_ROOT": str(self.proc), "STOCK_MODULE": str(stock),
                "KERNEL_RELEASE": KREL, **extra}


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


LoadRun = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def load(host: FakeHost, modules: dict[str, Path]) -> LoadRun:
    def _run(action: str = "load", ko: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        e = host.env(modules["stock"], DRY_RUN="1")
        e.update(env)
        return run("huvm-load.sh", action, str(ko or modules["huvm"]), env=e)
    return _run


def refused(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert line.startswith("huvm-load: refusing:"), line
    assert "\n" not in line, "refusal must be one line"
    for w in words:
        assert w in line, (w, line)
    assert "[dry-run] insmod" not in r.stdout and "[dry-run] rmmod" not in r.stdout


# ---- huvm-load.sh: plans ------------------------------------------------------------------------

def test_load_dry_run_prints_the_plan(host: FakeHost, load: LoadRun, modules: dict[str, Path]) -> None:
    host.nvidia().uvm().process(10, "bash", "/dev/null", "/dev/pts/0")
    r = load(MODULE_PARAMS="uvm_perf_prefetch_threshold=1 uvm_huvm_enable=1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    steps = [ln for ln in lines if ln.startswith("[dry-run]")]
    assert steps[0] == "[dry-run] rmmod nvidia_uvm"
    assert steps[1] == f"[dry-run] insmod {modules['huvm']} uvm_perf_prefetch_threshold=1 uvm_huvm_enable=1"
    assert steps[2].startswith("[dry-run] verify") and HUVM_SRC in steps[2] and "uvm_huvm_enable=1" in steps[2]
    assert "nvidia_uvm loaded: stock" in r.stdout


def test_load_when_uvm_not_loaded_skips_rmmod(host: FakeHost, load: LoadRun) -> None:
    host.nvidia()
    r = load()
    assert r.returncode == 0, r.stderr
    assert "[dry-run] rmmod" not in r.stdout
    assert "[dry-run] insmod" in r.stdout


def test_load_when_already_loaded_does_nothing(host: FakeHost, load: LoadRun) -> None:
    host.nvidia().uvm(srcversion=HUVM_SRC)
    r = load()
    assert r.returncode == 0, r.stderr
    assert "already loaded" in r.stdout
    assert "[dry-run]" not in r.stdout


def test_unload_dry_run_restores_stock(host: FakeHost, load: LoadRun, modules: dict[str, Path]) -> None:
    host.nvidia().uvm(srcversion=HUVM_SRC)
    r = load("unload")
    assert r.returncode == 0, r.stderr
    steps = [ln for ln in r.stdout.splitlines() if ln.startswith("[dry-run]")]
    assert steps[0] == "[dry-run] rmmod nvidia_uvm"
    assert steps[1] == f"[dry-run] modprobe {modules['stock']}"
    assert STOCK_SRC in steps[2]
    assert "this huvm build" in r.stdout


def test_unload_with_stock_loaded_does_nothing(host: FakeHost, load: LoadRun) -> None:
    host.nvidia().uvm(srcversion=STOCK_SRC)
    r = load("unload")
    assert r.returncode == 0
    assert "nothing to do" in r.stdout and "[dry-run]" not in r.stdout


def test_status(host: FakeHost, load: LoadRun) -> None:
    host.nvidia().uvm(srcversion=HUVM_SRC).process(42, "cuda-app", "/dev/nvidia-uvm")
    r = load("status")
    assert r.returncode == 0
    assert f"nvidia loaded: version {VERSION}" in r.stdout
    assert "this huvm build" in r.stdout and "42 (cuda-app)" in r.stdout


# ---- huvm-load.sh: refusals ---------------------------------------------------------------------

def test_refuses_missing_build(host: FakeHost, load: LoadRun, tmp_path: Path) -> None:
    host.nvidia().uvm()
    refused(load(ko=tmp_path / "nope" / "nvidia-uvm.ko"), "no module build at", "make module")


def test_refuses_non_huvm_module(host: FakeHost, load: LoadRun, modules: dict[str, Path]) -> None:
    host.nvidia().uvm()
    refused(load(ko=modules["stock"]), "not a huvm build")


def test_refuses_module_for_other_upstream(host: FakeHost, load: LoadRun, modules: dict[str, Path]) -> None:
    host.nvidia().uvm()
    refused(load(ko=modules["old"]), "535.247.01", VERSION)


def test_refuses_module_for_other_kernel(host: FakeHost, load: LoadRun, modules: dict[str, Path]) -> None:
    host.nvidia().uvm()
    refused(load(ko=modules["otherkernel"]), "5.10.0-99-amd64", KREL)


def test_refuses_without_nvidia(host: FakeHost, load: LoadRun) -> None:
    refused(load(), "nvidia.ko is not loaded")


def test_refuses_wrong_nvidia_version(host: FakeHost, load: LoadRun) -> None:
    host.nvidia("550.163.01").uvm()
    refused(load(), "550.163.01", VERSION)


@pytest.mark.parametrize("action", ["load", "unload"])
def test_refuses_and_names_holders(host: FakeHost, load: LoadRun, action: str) -> None:
    host.nvidia().uvm(srcversion=HUVM_SRC, refcnt=3)
    host.process(1234, "python3", "/dev/null", "/dev/nvidia-uvm")
    host.process(77, "nvidia-smi", "/dev/nvidia-uvm-tools")
    host.process(5, "sshd", "/dev/nvidia0", "socket:[1]")
    r = load(action)
    refused(r, "in use by", "77 (nvidia-smi)", "1234 (python3)")
    assert "sshd" not in r.stderr


def test_refuses_busy_module_without_holders(host: FakeHost, load: LoadRun) -> None:
    host.nvidia().uvm(refcnt=1)
    refused(load(), "refcnt 1")


def test_unload_refuses_without_stock_module(host: FakeHost, load: LoadRun, tmp_path: Path) -> None:
    host.nvidia().uvm(srcversion=HUVM_SRC)
    refused(load("unload", STOCK_MODULE=str(tmp_path / "missing.ko")), "no stock", "nothing to restore")


def test_refuses_non_root_without_dry_run(host: FakeHost, modules: dict[str, Path]) -> None:
    host.nvidia().uvm()
    if os.geteuid() == 0:
        require_or_skip(shutil.which("setpriv") is not None, "needs setpriv (util-linux) to drop root")
        r = run("huvm-load.sh", "load", str(modules["huvm"]), env=host.env(modules["stock"]), user=65534)
    else:
        r = run("huvm-load.sh", "load", str(modules["huvm"]), env=host.env(modules["stock"]))
    refused(r, "must run as root", "DRY_RUN=1")


# ---- huvm-load.sh: signed modules (Secure Boot) ---------------------------------------------------

def _lockdown(host: FakeHost) -> None:
    d = host.sys / "kernel" / "security"
    d.mkdir(parents=True)
    (d / "lockdown").write_text("none [integrity] confidentiality\n")


def test_refuses_unsigned_under_lockdown_without_key(host: FakeHost, load: LoadRun, tmp_path: Path) -> None:
    host.nvidia().uvm()
    _lockdown(host)
    r = load(DKMS_MOK_KEY=str(tmp_path / "no.key"), DKMS_MOK_CERT=str(tmp_path / "no.pub"))
    refused(r, "Secure Boot/lockdown requires signed modules", "unsigned", "mokutil --import")


def test_signs_a_copy_under_lockdown_with_the_dkms_key(host: FakeHost, load: LoadRun, tmp_path: Path) -> None:
    host.nvidia().uvm()
    (host.sys / "module" / "module" / "parameters").mkdir(parents=True)
    (host.sys / "module" / "module" / "parameters" / "sig_enforce").write_text("Y\n")
    key, cert, sf = tmp_path / "mok.key", tmp_path / "mok.pub", tmp_path / "sign-file"
    key.write_text("k\n")
    cert.write_text("c\n")
    sf.write_text("#!/bin/sh\nexit 0\n")
    sf.chmod(0o755)
    r = load(DKMS_MOK_KEY=str(key), DKMS_MOK_CERT=str(cert), SIGN_FILE=str(sf))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[dry-run] {sf} sha512 {key} {cert} " in r.stdout and ".signed.ko" in r.stdout
    insmod = [ln for ln in r.stdout.splitlines() if ln.startswith("[dry-run] insmod")]
    assert len(insmod) == 1 and insmod[0].split()[2].endswith("nvidia-uvm.signed.ko"), r.stdout


def test_no_signing_without_lockdown(host: FakeHost, load: LoadRun) -> None:
    host.nvidia().uvm()
    r = load()
    assert r.returncode == 0 and "sign-file" not in r.stdout and ".signed.ko" not in r.stdout, r.stdout


# ---- huvm-load.sh: the real (non-dry) path, with fake rmmod/insmod/modprobe acting on the fake sysfs ----

FAKE_TOOLS = {
    "insmod": """#!/bin/bash
ko=$1; shift
if [ -n "${FAKE_INSMOD_FAIL:-}" ]; then
    echo "insmod: ERROR: could not insert module $ko: Invalid parameters" >&2; exit 1
fi
d=$SYSFS_ROOT/module/nvidia_uvm; mkdir -p "$d/parameters"
modinfo -F srcversion "$ko" > "$d/srcversion"; modinfo -F version "$ko" > "$d/version"; echo 0 > "$d/refcnt"
for kv in "$@"; do v=${kv#*=}; case $v in 1) v=${FAKE_BOOL:-1};; esac; echo "$v" > "$d/parameters/${kv%%=*}"; done
""",
    "modprobe": """#!/bin/bash
d=$SYSFS_ROOT/module/nvidia_uvm; mkdir -p "$d/parameters"
modinfo -F srcversion "$1" > "$d/srcversion"; modinfo -F version "$1" > "$d/version"; echo 0 > "$d/refcnt"
""",
    "rmmod": """#!/bin/bash
rm -rf "$SYSFS_ROOT/module/$1"
""",
}


@pytest.fixture
def real(host: FakeHost, modules: dict[str, Path], tmp_path: Path) -> LoadRun:
    require_or_skip(os.geteuid() == 0, "the non-dry-run path needs root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in FAKE_TOOLS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def _run(action: str = "load", **env: str) -> subprocess.CompletedProcess[str]:
        e = host.env(modules["stock"], PATH=f"{bin_dir}:{os.environ['PATH']}")
        e.update(env)
        return run("huvm-load.sh", action, str(modules["huvm"]), env=e)
    return _run


def test_real_load_and_unload_verify_sysfs(host: FakeHost, real: LoadRun) -> None:
    host.nvidia().uvm()
    r = real(MODULE_PARAMS="uvm_perf_prefetch_threshold=7 uvm_huvm_enable=1", FAKE_BOOL="Y")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "+ rmmod nvidia_uvm" in r.stdout and "+ insmod" in r.stdout
    assert "verified: nvidia_uvm loaded: this huvm build" in r.stdout
    uvm = host.sys / "module" / "nvidia_uvm"
    assert (uvm / "srcversion").read_text().strip() == HUVM_SRC
    assert (uvm / "parameters" / "uvm_perf_prefetch_threshold").read_text().strip() == "7"
    r = real("unload")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "+ modprobe" in r.stdout and "verified: nvidia_uvm loaded: stock" in r.stdout
    assert (uvm / "srcversion").read_text().strip() == STOCK_SRC


def test_real_load_failure_restores_stock(host: FakeHost, real: LoadRun) -> None:
    host.nvidia().uvm()
    r = real(FAKE_INSMOD_FAIL="1")
    assert r.returncode == 1
    assert "insmod" in r.stderr and "restoring the stock module" in r.stdout
    assert (host.sys / "module" / "nvidia_uvm" / "srcversion").read_text().strip() == STOCK_SRC


# ---- huvm-source.sh -----------------------------------------------------------------------------

def fake_upstream(base: Path, version: str) -> Path:
    """A tree shaped like kernel-open (Kbuild + nvidia-uvm/) but not the real one."""
    t = base / "nvidia-open-kernel"
    (t / "nvidia-uvm").mkdir(parents=True)
    (t / "Kbuild").write_text(f'ccflags-y += -DNV_VERSION_STRING=\\"{version}\\"\n')
    (t / "nvidia-uvm" / "uvm.c").write_text("/* not the real file */\n")
    return t


def tarball(tree: Path, out: Path) -> Path:
    with tarfile.open(out, "w:xz") as tf:
        tf.add(tree, arcname=f"modules/{tree.name}")
    return out


@pytest.mark.parametrize(("version", "words"), [
    ("535.247.01", ["wrong upstream version", "found 535.247.01", f"expected {VERSION}"]),
    (VERSION, ["checksum mismatch", "differ from the pinned", "Kbuild"]),
])
def test_source_refuses_bad_tarball(tmp_path: Path, version: str, words: list[str]) -> None:
    tb = tarball(fake_upstream(tmp_path / "src", version), tmp_path / "upstream.tar.xz")
    dest = tmp_path / "build" / "upstream" / "orig"
    env = {"UPSTREAM_TARBALL": str(tb), "DEST": str(dest), "BUILD": str(tmp_path / "build")}
    r = run("huvm-source.sh", env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr.strip()
    assert "\n" not in err and err.startswith("huvm-source:"), err
    for w in words:
        assert w in err, (w, err)
    assert not dest.exists()
    assert os.listdir(dest.parent) == [], "nothing half-unpacked may remain"


def test_source_refuses_bad_dir(tmp_path: Path) -> None:
    src = fake_upstream(tmp_path, "550.163.01")
    r = run("huvm-source.sh", env={"UPSTREAM_DIR": str(src), "DEST": str(tmp_path / "o"), "BUILD": str(tmp_path)})
    assert r.returncode == 1
    assert "found 550.163.01, expected 535.261.03" in r.stderr
    assert not (tmp_path / "o").exists()


def test_source_refuses_missing_inputs(tmp_path: Path) -> None:
    r = run("huvm-source.sh", env={"UPSTREAM_TARBALL": str(tmp_path / "x.tar.xz"), "DEST": str(tmp_path / "o")})
    assert r.returncode == 1 and "no such file" in r.stderr
    r = run("huvm-source.sh", env={"UPSTREAM_DIR": str(tmp_path / "nodir"), "DEST": str(tmp_path / "o")})
    assert r.returncode == 1 and "no such directory" in r.stderr


# ---- huvm-patch.sh / huvm-refresh-patches.sh ----------------------------------------------------

PATCH_0001 = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: huvm <huvm@localhost>
Subject: [PATCH] test: change line two

Keep this description.
---
 a.txt | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
--\x20
2.39.5

"""


@pytest.fixture
def ptree(tmp_path: Path) -> dict[str, str]:
    orig = tmp_path / "orig"
    orig.mkdir()
    (orig / "a.txt").write_text("one\ntwo\nthree\n")
    (orig / "b.txt").write_text("alpha\nbeta\ngamma\n")
    (orig / ".huvm-upstream").write_text(f"{VERSION} test\n")
    pd = tmp_path / "patches"
    pd.mkdir()
    (pd / "0001-two.patch").write_text(PATCH_0001)
    (pd / "series").write_text("# test series\n0001-two.patch\n")
    return {"ORIG": str(orig), "WORK": str(tmp_path / "work"), "PATCHDIR": str(pd)}


def test_patch_applies_and_is_idempotent(ptree: dict[str, str]) -> None:
    r = run("huvm-patch.sh", env=ptree)
    assert r.returncode == 0, r.stderr
    work = Path(ptree["WORK"])
    assert (work / "a.txt").read_text() == "one\nTWO\nthree\n"
    r = run("huvm-patch.sh", env=ptree)
    assert r.returncode == 0 and "already applied" in r.stdout
    assert (work / "a.txt").read_text() == "one\nTWO\nthree\n"


def test_patch_refuses_fuzz(ptree: dict[str, str]) -> None:
    Path(ptree["ORIG"], "a.txt").write_text("zero\ntwo\nthree\n")  # context line changed: needs fuzz 1
    r = run("huvm-patch.sh", env=ptree)
    assert r.returncode == 1
    assert "0001-two.patch does not apply with zero fuzz" in r.stderr
    assert not Path(ptree["WORK"]).exists()


def test_refresh_round_trip(ptree: dict[str, str]) -> None:
    assert run("huvm-patch.sh", env=ptree).returncode == 0
    work, pd = Path(ptree["WORK"]), Path(ptree["PATCHDIR"])
    # an edit in a file only 0001 changes goes to 0001 by itself
    (work / "a.txt").write_text("one\nTWO!\nthree\n")
    r = run("huvm-refresh-patches.sh", env=ptree)
    assert r.returncode == 0, r.stderr
    p1 = (pd / "0001-two.patch").read_text()
    assert "Keep this description." in p1 and "+TWO!" in p1
    # a file no patch changes needs PATCH=; a new name is appended to the series
    (work / "b.txt").write_text("alpha\nBETA\ngamma\n")
    r = run("huvm-refresh-patches.sh", env=ptree)
    assert r.returncode == 1 and "in no patch yet: b.txt" in r.stderr and "PATCH=" in r.stderr
    r = run("huvm-refresh-patches.sh", env={**ptree, "PATCH": "0002-beta.patch", "SUBJECT": "test: beta"})
    assert r.returncode == 0, r.stderr
    p2 = (pd / "0002-beta.patch").read_text()
    assert "Subject: [PATCH] test: beta" in p2 and "+BETA" in p2 and "a.txt" not in p2
    assert (pd / "series").read_text().splitlines()[-1] == "0002-beta.patch"
    # the work tree now matches the series: make patch has nothing to do, and a fresh tree equals it
    r = run("huvm-patch.sh", env=ptree)
    assert "already applied (2 patch(es))" in r.stdout and "note:" not in r.stdout
    fresh = {**ptree, "WORK": ptree["WORK"] + "2"}
    assert run("huvm-patch.sh", env=fresh).returncode == 0
    for f in ("a.txt", "b.txt"):
        assert Path(fresh["WORK"], f).read_text() == (work / f).read_text()


PATCH_0002_SAME_FILE = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: huvm <huvm@localhost>
Subject: [PATCH] test: change line five

---
diff --git a/c.txt b/c.txt
--- a/c.txt
+++ b/c.txt
@@ -3,5 +3,5 @@
 3
 4
-5
+FIVE
 6
 7
"""


def test_refresh_middle_of_stack(ptree: dict[str, str]) -> None:
    """Two patches change one file; an edit for the first one re-derives the second (its lines moved)."""
    orig, pd, work = Path(ptree["ORIG"]), Path(ptree["PATCHDIR"]), Path(ptree["WORK"])
    (orig / "c.txt").write_text("".join(f"{i}\n" for i in range(1, 9)))
    (pd / "0001-two.patch").write_text(PATCH_0001.replace("a.txt", "c.txt").replace(
        "@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three", "@@ -1,3 +1,3 @@\n 1\n-2\n+TWO\n 3"))
    (pd / "0002-five.patch").write_text(PATCH_0002_SAME_FILE)
    (pd / "series").write_text("0001-two.patch\n0002-five.patch\n")
    r = run("huvm-patch.sh", env=ptree)
    assert r.returncode == 0, r.stderr
    assert (work / "c.txt").read_text() == "1\nTWO\n3\n4\nFIVE\n6\n7\n8\n"
    (work / "c.txt").write_text("1\nTWO\nTWO-AND-A-HALF\n3\n4\nFIVE\n6\n7\n8\n")
    r = run("huvm-refresh-patches.sh", env=ptree)
    assert r.returncode == 1 and "0001-two.patch 0002-five.patch" in r.stderr
    r = run("huvm-refresh-patches.sh", env={**ptree, "PATCH": "0001-two.patch"})
    assert r.returncode == 0, r.stderr
    p1, p2 = (pd / "0001-two.patch").read_text(), (pd / "0002-five.patch").read_text()
    assert "+TWO-AND-A-HALF" in p1 and "Keep this description." in p1
    assert "FIVE" not in p1 and "+TWO-AND-A-HALF" not in p2
    assert "@@ -3,7 +3,7 @@" in p2, p2  # re-derived against the new 0001 (was -3,5)
    fresh = {**ptree, "WORK": ptree["WORK"] + "2"}
    r = run("huvm-patch.sh", env=fresh)
    assert r.returncode == 0, r.stderr
    assert Path(fresh["WORK"], "c.txt").read_text() == (work / "c.txt").read_text()


def test_changed_series_keeps_unsaved_edits(ptree: dict[str, str]) -> None:
    assert run("huvm-patch.sh", env=ptree).returncode == 0
    work, pd = Path(ptree["WORK"]), Path(ptree["PATCHDIR"])
    (work / "b.txt").write_text("edited\n")
    r = run("huvm-patch.sh", env=ptree)
    assert r.returncode == 0 and "b.txt" in r.stdout  # reported as unsaved
    (pd / "0001-two.patch").write_text(PATCH_0001.replace("Keep this", "Changed"))
    r = run("huvm-patch.sh", env=ptree)
    assert r.returncode == 1 and "edits no patch holds" in r.stderr and "b.txt" in r.stderr
    assert (work / "b.txt").read_text() == "edited\n"
    r = run("huvm-patch.sh", env={**ptree, "FORCE": "1"})
    assert r.returncode == 0
    assert (work / "b.txt").read_text() == "alpha\nbeta\ngamma\n"


# ---- huvm-source.sh: other upstreams ---------------------------------------------------------------

def test_source_580_default_is_the_pinned_tarball(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    env = {"UPSTREAM_VERSION": "580.142", "HUVM_SHARED_DIR": str(shared), "BUILD": str(tmp_path / "b")}
    r = run("huvm-source.sh", env=env)
    assert r.returncode == 1 and "pinned tarball" in r.stderr and "is missing" in r.stderr, r.stderr
    # A tarball of the right name but other content: its sha256 is refused before anything is unpacked.
    (shared / "upstream").mkdir(parents=True)
    tarball(fake_upstream(tmp_path / "src", "580.142"),
            shared / "upstream" / "nvidia-open-kernel-580.142-kernel-open.tar.xz")
    r = run("huvm-source.sh", env=env)
    err = r.stderr.strip()
    assert r.returncode == 1 and "checksum mismatch for" in err and "8457440a1b96" in err and "\n" not in err, err
    assert not (tmp_path / "b" / "upstream-580.142" / "orig").exists()


def test_source_records_a_manifest_on_first_use(tmp_path: Path) -> None:
    src = fake_upstream(tmp_path / "src", "580.159.04")
    (src / "common").mkdir()
    (src / "common" / "x.h").write_text("/* x */\n")
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    env = {"UPSTREAM_VERSION": "580.159.04", "UPSTREAM_DIR": str(src), "BUILD": str(tmp_path / "b"),
           "HUVM_MANIFEST_DIR": str(mdir)}
    r = run("huvm-source.sh", env=env)
    assert r.returncode == 0, r.stderr
    assert "trust on first use" in r.stdout
    manifest = (mdir / "upstream-580.159.04.sha256").read_text().split("\n")
    assert [ln.split()[1] for ln in manifest if ln] == ["Kbuild", "common/x.h", "nvidia-uvm/uvm.c"]
    orig = tmp_path / "b" / "upstream-580.159.04" / "orig"
    assert (orig / "nvidia-uvm" / "uvm.c").is_file()
    # The second time the recorded manifest pins the tree: a changed file is refused.
    (src / "nvidia-uvm" / "uvm.c").write_text("/* changed */\n")
    r = run("huvm-source.sh", env=env)
    assert r.returncode == 1 and "checksum mismatch" in r.stderr and "nvidia-uvm/uvm.c" in r.stderr, r.stderr
    # No manifest and no tree given: refused, naming how to record one.
    r = run("huvm-source.sh", env={"UPSTREAM_VERSION": "580.1.1", "BUILD": str(tmp_path / "b"),
                                   "HUVM_MANIFEST_DIR": str(mdir)})
    assert r.returncode == 1 and "no pinned manifest" in r.stderr and "UPSTREAM_DIR=" in r.stderr, r.stderr


# ---- huvm-dkms.sh ----------------------------------------------------------------------------------

def test_modprobe_rule_wins_over_nvidia_conf(tmp_path: Path) -> None:
    """modprobe nvidia-uvm must run huvm's install rule, not Debian's/NVIDIA's (kmod: the first one read)."""
    require_or_skip(shutil.which("modprobe") is not None, "needs modprobe (kmod)")
    d = tmp_path / "modprobe.d"
    d.mkdir()
    (d / "nvidia.conf").write_text(
        "install nvidia-uvm modprobe nvidia ; modprobe -i nvidia-current-open-uvm $CMDLINE_OPTS\n")
    r = run("huvm-dkms.sh", "modprobe-conf", env={"MODPROBE_DIR": str(d), "BUILD": str(tmp_path / "b"),
                                                   "MODULE_PARAMS": "uvm_huvm_preset=huvm"})
    assert r.returncode == 0, r.stderr
    conf = [p.name for p in d.iterdir() if p.name.startswith("00-huvm")]
    assert conf == ["00-huvm-nvidia-uvm.conf"]
    assert "options huvm-nvidia-uvm uvm_huvm_preset=huvm" in (d / conf[0]).read_text()
    p = subprocess.run(["modprobe", "-n", "-v", "-C", str(d), "nvidia-uvm"], capture_output=True, text=True,
                       check=False)
    assert p.returncode == 0, p.stderr
    assert "modprobe -i huvm-nvidia-uvm" in p.stdout and "nvidia-current-open-uvm" not in p.stdout, p.stdout


def test_dkms_package_has_its_own_module_name_and_version_check(tmp_path: Path) -> None:
    orig = Path(os.environ.get("BUILD", str(ROOT / "build"))) / "upstream" / "orig"
    require_or_skip((orig / ".huvm-upstream").is_file(), "pinned upstream not unpacked (make source)")
    env = {"BUILD": str(tmp_path / "b"), "ORIG": str(orig), "NVIDIA_DKMS_PACKAGE": "nvidia"}
    r = run("huvm-dkms.sh", "stage", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    stage = next((tmp_path / "b" / "dkms").glob(f"huvm-nvidia-uvm-{VERSION}-huvm*"))
    conf = (stage / "dkms.conf").read_text()
    assert 'DEST_MODULE_NAME[0]="huvm-nvidia-uvm"' in conf and 'BUILT_MODULE_NAME[0]="nvidia-uvm"' in conf
    assert 'BUILD_DEPENDS[0]="nvidia"' in conf
    assert 'MAKE[0]="sh huvm/dkms-check-nvidia.sh ${kernelver} && ' in conf
    check = stage / "huvm" / "dkms-check-nvidia.sh"
    for have, rc, words in (("580.159.04", 1, ["installed NVIDIA driver is 580.159.04", f"huvm for {VERSION}"]),
                            (VERSION, 0, ["as required"])):
        p = subprocess.run(["sh", str(check), KREL], capture_output=True, text=True, check=False,
                           env={**os.environ, "HUVM_NVIDIA_VERSION": have})
        assert p.returncode == rc, p.stdout + p.stderr
        assert all(w in p.stdout + p.stderr for w in words), p.stdout + p.stderr
    r = run("huvm-dkms.sh", "stage", env={**env, "NVIDIA_DKMS_PACKAGE": "none"})
    assert r.returncode == 0 and "BUILD_DEPENDS[0]" not in (stage / "dkms.conf").read_text()


def test_manifests_of_each_upstream() -> None:
    """535.261.03: Debian's tree and NVIDIA's tag keep the same 286 files, 25 of them different (docs/driver.md);
    580.142: the same list plus header-presence-tests.mk, which its top-level Kbuild includes."""
    def read(name: str) -> dict[str, str]:
        rows = [ln.split() for ln in (SCRIPTS / name).read_text().splitlines() if ln.strip()]
        return {path.lstrip("*"): digest for digest, path in rows}
    debian, nvidia = read("upstream-535.261.03.sha256"), read("upstream-535.261.03.nvidia.sha256")
    assert len(debian) == 286 and debian.keys() == nvidia.keys()
    differ = sorted(p for p in debian if debian[p] != nvidia[p])
    assert len(differ) == 25 and "Kbuild" in differ and "common/inc/nv-linux.h" in differ, differ
    v580 = read("upstream-580.142.sha256")
    assert set(v580) - set(debian) >= {"header-presence-tests.mk"}
    assert "nvidia-uvm/uvm_pmm_gpu.c" in v580 and "nvidia/nvidia.Kbuild" in v580
