"""Fixtures of the software-GPU suite (tests/vm/softgpu): NVIDIA's real nvidia-uvm over huvm-softgpu.ko.

They run only inside the qemu test bed (tests/vm/guest/run-guest.sh, softgpu phase), which loads
huvm-softgpu.ko (HUVM_SOFTGPU_GPUS GPUs of HUVM_SOFTGPU_FB_MIB MiB) and one nvidia-uvm variant
(HUVM_UVM_VARIANT) with uvm_enable_builtin_tests=1, and makes /dev/nvidia-uvm. The UVM binding
(huvm.uvm) must have been built on the host (make uvm-binding): the guest sees the checkout read-only.

At the end of the session: one line per built-in test (``UVM_TEST_<NAME>: passed|failed|not run
(<reason>)``) and $HUVM_OUT/softgpu-builtin-<variant>.json; the measured figures in
$HUVM_OUT/softgpu-perf-<variant>.json.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

IN_GUEST = os.environ.get("HUVM_VM_GUEST") == "1"

if not IN_GUEST:
    # On the host these files are not collected: they need huvm-softgpu.ko and nvidia-uvm, which only
    # the qemu guest loads (tests/vm/run-vm.sh --softgpu-ko ... --uvm ...).
    collect_ignore_glob = ["test_*.py"]
elif not os.environ.get("HUVM_UVM_VARIANT", "").startswith("patched"):
    # huvm's scenarios need the patched module: on NVIDIA's stock module they are not test cases at all (a
    # skipped qemu test fails CI), and the session summary says they were not run.
    collect_ignore = ["test_huvm_scenarios.py", "test_huvm_lifecycle.py", "test_experiment.py", "test_builtin_tier.py"]
elif os.environ.get("HUVM_UVM_VARIANT_ID", os.environ.get("HUVM_UVM_VARIANT")) != "patched-release":
    # The emulated-node experiment (minutes under TCG) and the built-ins under the huvm preset run once per
    # suite, on the default upstream's release build (not on 580.142-patched-release: the qemu bed's time
    # budget, docs/testing.md).
    collect_ignore = ["test_experiment.py", "test_builtin_tier.py"]


#: the files in the order they run: each builds on what the previous one proved. test_huvm_lifecycle.py
#: is last: its final tests close every session-scoped fixture and unload/reload the modules.
ORDER = ("test_builtin.py", "test_roundtrip.py", "test_peer_copy.py", "test_tlb_engines.py", "test_oversub.py",
         "test_huvm_scenarios.py", "test_builtin_tier.py", "test_experiment.py", "test_huvm_lifecycle.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return ORDER.index(name) if name in ORDER else len(ORDER)

    items.sort(key=rank)  # stable: the order inside each file is kept


@pytest.fixture(scope="session")
def sg() -> Iterator[Any]:
    """The software GPU's control device (one RM client for the whole session)."""
    import sglib
    from huvm import softgpu

    dev = softgpu.SoftGpu.open()
    sglib.hold("sg", dev.close)
    try:
        gpus = dev.info().gpus
        if sglib.GPUS_EXPECTED:
            assert len(gpus) == sglib.GPUS_EXPECTED, \
                f"SOFTGPU_GET_INFO: {len(gpus)} GPUs, HUVM_SOFTGPU_GPUS={sglib.GPUS_EXPECTED}"
        sglib.GPUS[:] = [{"index": g.index, "name": g.name, "uuid": g.uuid_str, "pci": g.pci_address,
                          "fb_bytes": g.fb_bytes, "pma_bytes": g.pma_bytes,
                          "links": {str(ln.peer): f"{ln.type}x{ln.count}" for ln in g.links if ln.type != "none"}}
                         for g in gpus]
        for g in gpus:
            print(f"softgpu: GPU{g.index} {g.name} {g.uuid_str} {g.pci_address} fb {g.fb_bytes >> 20} MiB "
                  f"pma {g.pma_bytes >> 20} MiB links "
                  + " ".join(f"{ln.peer}:{ln.type}x{ln.count}" for ln in g.links if ln.type != "none"))
        yield dev
    finally:
        sglib.drop("sg")


@pytest.fixture(scope="session")
def uvm_cpu() -> Iterator[Any]:
    """An initialised UVM file with no GPU: the pure-CPU built-in tests (stage 1)."""
    import sglib
    from huvm import uvm

    u = uvm.Uvm.open()
    sglib.hold("uvm_cpu", u.close)
    try:
        yield u
    finally:
        sglib.drop("uvm_cpu")


@pytest.fixture(scope="session")
def uvm_gpus(sg: Any) -> Iterator[Any]:
    """A UVM session with every GPU registered (UVM_REGISTER_GPU) but no GPU VA space (stages 2-3)."""
    import sglib

    s = sglib.open_session(sg, va_spaces=False)
    sglib.hold("uvm_gpus", lambda: sglib.close_session(s))
    try:
        yield s
    finally:
        sglib.drop("uvm_gpus")


@pytest.fixture(scope="session")
def session(sg: Any) -> Iterator[Any]:
    """A UVM session with every GPU registered, a GPU VA space per GPU (UVM_REGISTER_GPU_VASPACE) and a
    registered SM channel per GPU (UVM_REGISTER_CHANNEL): migrations and GPU faults work."""
    import sglib

    s = sglib.open_session(sg, va_spaces=True)
    sglib.hold("session", lambda: sglib.close_session(s))
    try:
        yield s
    finally:
        sglib.drop("session")


@pytest.fixture
def kmsg() -> Iterator[Any]:
    """The kernel log from the test's start (sglib.Kmsg), closed after it."""
    import sglib

    with sglib.kmsg_window() as k:
        yield k


@pytest.fixture
def managed(session: Any) -> Iterator[Callable[..., Any]]:
    """alloc(size, **kw) -> huvm.uvm.ManagedRegion in the session's VA space, unmapped after the test."""
    regions: list[Any] = []

    def alloc(size: int, **kw: Any) -> Any:
        r = session.uvm.alloc_managed(size, **kw)
        regions.append(r)
        return r

    yield alloc
    for r in regions:
        r.close()


# ---- the built-in tests' table -------------------------------------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    _record_scenario(item, rep)
    callspec = getattr(item, "callspec", None)
    spec = callspec.params.get("builtin") if callspec is not None else None
    if spec is None:
        return
    import sglib

    res = sglib.BUILTIN_RESULTS.get(spec.name)
    if res is None:
        return
    if rep.when == "setup":
        if rep.failed:
            res.result, res.reason = "failed", f"setup: {_message(call)}"
        elif rep.skipped:
            res.result, res.reason = "not run", _skip_reason(rep)
    elif rep.when == "call":
        res.seconds = round(rep.duration, 3)
        if rep.passed:
            res.result, res.reason = "passed", ""
        elif rep.skipped:
            res.result, res.reason = "not run", _skip_reason(rep)
        else:
            res.result, res.reason = "failed", _message(call)


def _record_scenario(item: pytest.Item, rep: pytest.TestReport) -> None:
    """huvm scenarios (``@pytest.mark.scenario(name)``): one result per scenario, failed if any phase failed."""
    mark = item.get_closest_marker("scenario")
    if mark is None or not mark.args:
        return
    import sglib

    name = str(mark.args[0])
    if rep.failed:
        sglib.SCENARIOS[name] = "failed"
    elif rep.skipped:
        sglib.SCENARIOS.setdefault(name, f"skipped ({_skip_reason(rep)})")
    elif rep.when == "call":
        sglib.SCENARIOS.setdefault(name, "passed")


def _message(call: pytest.CallInfo[None]) -> str:
    if call.excinfo is None:
        return "failed"
    text = str(call.excinfo.value).strip().splitlines()
    return f"{call.excinfo.typename}: {text[0] if text else ''}"[:300]


def _skip_reason(rep: pytest.TestReport) -> str:
    longrepr = rep.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not IN_GUEST or session.config.option.collectonly:
        return
    import sglib

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)

    if sglib.BUILTIN_RESULTS:
        results = list(sglib.BUILTIN_RESULTS.values())
        say(f"== NVIDIA's built-in tests on the software GPU ({sglib.UPSTREAM} {sglib.VARIANT}):")
        for r in results:
            say(r.line())
        counts = {k: sum(r.result == k for r in results) for k in ("passed", "failed", "not run")}
        say("== built-in tests: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        path = sglib.write_json(f"softgpu-builtin-{sglib.VARIANT_ID}.json", {
            "variant": sglib.VARIANT, "upstream": sglib.UPSTREAM, "fb_mib": sglib.FB_MIB, "gpus": sglib.GPUS,
            "counts": counts,
            "tests": [{"name": f"UVM_TEST_{r.name}", "stage": r.stage, "group": r.group, "result": r.result,
                       "reason": r.reason, "seconds": r.seconds, **({"details": r.details} if r.details else {})}
                      for r in results]})
        if path:
            say(f"== built-in table: {path}")
    for name, result in sglib.SCENARIOS.items():
        say(f"scenario {name}: {result}")
    if sglib.PERF:
        path = sglib.write_json(f"softgpu-perf-{sglib.VARIANT_ID}.json", {
            "variant": sglib.VARIANT, "upstream": sglib.UPSTREAM, "fb_mib": sglib.FB_MIB, "gpus": sglib.GPUS,
            "figures": sglib.PERF})
        for name, fig in sglib.PERF.items():
            say(f"perf {name}: {fig['value']} {fig['unit']}")
        if path:
            say(f"== perf figures: {path}")
