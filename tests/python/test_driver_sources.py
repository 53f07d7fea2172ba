"""Source-level checks of the kernel glue (driver/uvm) and the patch series (patches/<version>/, one per
upstream branch: 535.261.03 and 580.142).

What the module's behaviour rests on but no machine here can run:
- the tracepoints in driver/uvm/uvm_huvm_trace.h are exactly the events of driver/core/huvm_events.h, with
  the same arguments, and the core fires every one of them (the simulator's USDT probes come from the same
  HUVM_TRACE calls, so kernel and simulator cannot drift);
- the glue makes no decisions: no policy field, threshold or peer choice outside driver/core;
- every new kernel function documents its locking (`// LOCKING:`);
- the series applies with zero fuzz to the pinned upstream and the change to upstream files stays small;
- each hook lands in the function it belongs to (zero fuzz is not enough: on 580 the 535 series' context
  for uvm_huvm_add_gpu() matches the end of init_parent_gpu()).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import require_or_skip

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "driver"
UVM = DRIVER / "uvm"
CORE = DRIVER / "core"
DEFAULT_VERSION = "535.261.03"
VERSIONS = [DEFAULT_VERSION, "580.142"]
PATCHES = ROOT / "patches" / DEFAULT_VERSION
_BUILD = Path(os.environ.get("BUILD", str(ROOT / "build")))


def _patches(version: str) -> Path:
    return ROOT / "patches" / version


def _upstream(version: str) -> Path:
    """The pinned upstream as `make source UPSTREAM=<version>` unpacks it (BUILD from the top Makefile)."""
    return _BUILD / ("upstream" if version == DEFAULT_VERSION else f"upstream-{version}") / "orig"


UPSTREAM = _upstream(DEFAULT_VERSION)

# The whole huvm change to upstream files (patches 0002+), in changed lines. The published prototype
# changed 2,615 lines; issue 4 asks for well under a third of that.
DIFF_BUDGET = 800

EVENT_ARGS = ["gpu", "peer", "reason", "bytes", "va"]
EVENT_TYPES = ["u32", "u32", "u32", "u64", "u64"]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _strip_c_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)


def _core_events() -> list[str]:
    text = _read(CORE / "huvm_events.h")
    block = re.search(r"#define HUVM_EVENTS\(X\)(.*?)\n\n", text, flags=re.DOTALL)
    assert block, "HUVM_EVENTS(X) list not found"
    return re.findall(r"X\((\w+)\)", block.group(1))


def _series(patches: Path = PATCHES) -> list[str]:
    names = []
    for line in _read(patches / "series").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return names


def _huvm_patches(patches: Path = PATCHES) -> list[Path]:
    """Patches 0002 and later: the huvm hooks (0001 is the Kbuild wiring)."""
    return [patches / n for n in _series(patches) if not n.startswith("0001-")]


def _all_huvm_patches() -> list[Path]:
    return [p for v in VERSIONS for p in _huvm_patches(_patches(v))]


def _added_lines(patch: Path) -> list[str]:
    out = []
    for line in _read(patch).splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            out.append(line[1:])
    return out


# ---- tracepoints ---------------------------------------------------------------------------------


def test_event_list_and_args() -> None:
    events = _core_events()
    assert events == ["evict", "preevict", "fetch", "giveback", "prefetch", "policy"]
    args = re.search(r'#define HUVM_EVENT_ARGS\s+"([^"]+)"', _read(CORE / "huvm_events.h"))
    assert args and args.group(1).split(",") == EVENT_ARGS


def test_tracepoints_match_core_events() -> None:
    text = _strip_c_comments(_read(UVM / "uvm_huvm_trace.h"))
    assert re.search(r"#define TRACE_SYSTEM huvm\b", text)
    defined = re.findall(r"DEFINE_EVENT\(\s*(\w+)\s*,\s*(\w+)\s*,\s*TP_PROTO\(([^)]*)\)", text)
    prefix = re.search(r'#define HUVM_EVENT_PREFIX\s+"(\w+)"', _read(CORE / "huvm_events.h"))
    assert prefix and prefix.group(1) == "huvm_", "tracepoint symbols are prefixed (__tracepoint_huvm_evict)"
    assert [name for _, name, _ in defined] == ["huvm_" + e for e in _core_events()], \
        "tracepoints differ from huvm_events.h"
    for _, name, proto in defined:
        params = [p.split() for p in proto.split(",")]
        assert [p[-1] for p in params] == EVENT_ARGS, f"huvm:{name}: argument names"
        assert [p[0] for p in params] == EVENT_TYPES, f"huvm:{name}: argument types"
    # One event class carries the record layout and the print format of all of them.
    assert "TP_STRUCT__entry" in text and all(f"__field({t}, {a})" in text
                                            for t, a in zip(EVENT_TYPES, EVENT_ARGS, strict=False))


def test_core_fires_every_event_through_huvm_trace() -> None:
    fired: set[str] = set()
    for src in sorted(CORE.glob("*.c")):
        for name, nargs in re.findall(r"HUVM_TRACE\((\w+),([^;]*)\);", _strip_c_comments(_read(src))):
            fired.add(name)
            assert nargs.count(",") == len(EVENT_ARGS) - 1, f"{src.name}: HUVM_TRACE({name}) arguments"
    assert fired == set(_core_events()), f"fired {sorted(fired)}"
    port = re.sub(r"\s*\\\n\s*|\s+", " ", _read(CORE / "huvm_port.h"))   # macros on one line each
    # Kernel: tracepoint huvm:huvm_<name> (trace_huvm_<name>()); user space: USDT probe huvm:huvm_<name>.
    assert "trace_huvm_##name(" in port
    assert "DTRACE_PROBE5(huvm, huvm_##name," in port


def test_simulator_probes_come_only_from_the_core() -> None:
    """The simulator's USDT probes are the core's HUVM_TRACE calls: it fires none of its own."""
    sim = DRIVER / "sim"
    assert any(sim.glob("*.c"))
    for src in sorted(sim.glob("*.[ch]")):
        text = _strip_c_comments(_read(src))
        assert "DTRACE_PROBE" not in text and "HUVM_USDT(" not in text and "HUVM_TRACE(" not in text, src.name


def test_tracepoints_created_once_in_the_glue() -> None:
    # In nvidia-uvm.ko (driver/core + driver/uvm) exactly one file creates them.
    files = sorted(CORE.glob("*.c")) + sorted(UVM.glob("*.c"))
    creators = [p.name for p in files if "CREATE_TRACE_POINTS" in _read(p)]
    assert creators == ["uvm_huvm.c"]
    text = _read(UVM / "uvm_huvm.c")
    assert text.index("#define CREATE_TRACE_POINTS") < text.index('#include "uvm_huvm_trace.h"')
    assert text.index('#include "uvm_huvm_trace.h"') < text.index('#include "uvm_huvm_internal.h"')


# ---- no policy in the glue -----------------------------------------------------------------------

POLICY_FIELDS = [
    "peer_select", "nvlink_only", "peer_usage_max_pct", "preevict_chunks", "preevict_batch", "fetch_mode",
    "prefetch_mode", "prefetch_chunks", "prefetch_stride", "hysteresis_ms", "lend_limit_bytes",
    "lend_reserve_bytes", "role", "rr_next", "policy_slot",
]


def _glue_sources() -> str:
    """The kernel glue's .c files (driver/uvm/uvm_huvm*.c), one after the other."""
    return "\n".join(_read(p) for p in sorted(UVM.glob("uvm_huvm*.c")))


def _glue_texts() -> dict[str, str]:
    texts = {p.name: _strip_c_comments(_read(p)) for p in sorted(UVM.glob("*.[ch]")) if p.name != "uvm_huvm_trace.h"}
    for patch in _all_huvm_patches():
        texts[f"{patch.parent.name}/{patch.name}"] = _strip_c_comments("\n".join(_added_lines(patch)))
    return texts


def test_glue_reads_no_policy_fields() -> None:
    for name, text in _glue_texts().items():
        for field in POLICY_FIELDS:
            assert not re.search(rf"(\.|->)\s*{field}\b", text), f"{name} reads policy field {field}"
        assert not re.search(r"(\.|->)\s*policy\s*(\.|->)", text), f"{name} reads the policy"
        assert "huvm_policy_gpu(" not in text and "huvm_gpu_role(" not in text, name


def test_glue_has_no_thresholds_or_peer_choice() -> None:
    for name, text in _glue_texts().items():
        # Percentages, ratios and time windows are policy: they live in driver/core.
        assert not re.search(r"\b\d+\s*/\s*100\b|\*\s*100\s*/|\bpct\b|_MS\b", text), f"{name}: threshold"
        # Choosing among peers (most free, fewest lent, round robin) is the core's job.
        assert not re.search(r"\b(best|most_free|fewest|least)\w*\s*=", text), f"{name}: peer selection"
    glue = _glue_sources()
    for decision in ["huvm_decide_evict(", "huvm_decide_preevict_plan(", "huvm_decide_giveback(",
                     "huvm_giveback_need(", "huvm_lend_reserve(", "huvm_decide_fetch("]:
        assert decision in glue, f"the glue must ask the core: {decision}"
    # Every outcome is reported back through the core's accounting (which fires the tracepoints).
    for account in ["huvm_account_evict(", "huvm_account_fetch(", "huvm_account_giveback(", "huvm_account_faults("]:
        assert account in glue, account
    tracepoint_call = r"\btrace_huvm_(" + "|".join(_core_events()) + r")\("
    assert not re.search(tracepoint_call, glue), "tracepoints fire only from the core's accounting"


def _c_function_body(text: str, name: str) -> str:
    start = re.search(rf"^\w[^\n;]*\b{name}\([^;{{]*\)\s*\{{", text, flags=re.MULTILINE | re.DOTALL)
    assert start, f"{name} not defined"
    depth, i = 0, start.end() - 1
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start.start(): i + 1]
        i += 1


def test_peer_allocation_never_evicts() -> None:
    glue = _strip_c_comments(_glue_sources())
    assert "UVM_PMM_ALLOC_FLAGS_EVICT" not in glue, "huvm never allocates with eviction"
    assert "UVM_VA_BLOCK_LOCK_RETRY" not in glue and "UVM_VA_BLOCK_RETRY_LOCKED" not in glue
    # The eviction path (and the helper it shares with prefetch) never drops or takes a block lock.
    for fn in ["uvm_huvm_evict_make_resident", "uvm_huvm_move_with_chunk", "release_peer_chunk"]:
        body = _c_function_body(glue, fn)
        assert "uvm_mutex_unlock(" not in body and "uvm_mutex_lock(" not in body, fn
        assert "uvm_assert_mutex_locked(&va_block->lock)" in body or fn == "release_peer_chunk", fn
    assert "UVM_MAKE_RESIDENT_CAUSE_EVICTION" in _c_function_body(glue, "uvm_huvm_evict_make_resident")


# ---- locking comments ----------------------------------------------------------------------------

FUNC_DEF = re.compile(r"^(?:static\s+)?(?:inline\s+)?[A-Za-z_][\w\s\*]*?\b(\w+)\(")


def _functions_without_locking(lines: list[str]) -> list[str]:
    missing = []
    for i, line in enumerate(lines):
        if line.startswith((" ", "\t", "#", "//", "/*", "*", "}", "{")) or line.rstrip().endswith(";"):
            continue
        m = FUNC_DEF.match(line)
        if not m or line.startswith(("_Static_assert", "module_param", "MODULE_", "static const ")):
            continue
        j = i
        while j < len(lines) and not lines[j].startswith("{") and not lines[j].rstrip().endswith(";"):
            j += 1
        if j >= len(lines) or not lines[j].startswith("{"):
            continue  # a declaration
        k, comment = i - 1, []
        while k >= 0 and lines[k].lstrip().startswith("//"):
            comment.append(lines[k])
            k -= 1
        if not any("LOCKING:" in c for c in comment):
            missing.append(m.group(1))
    return missing


def test_every_glue_function_documents_locking() -> None:
    for src in sorted(UVM.glob("uvm_huvm*.c")):
        missing = _functions_without_locking(_read(src).splitlines())
        assert not missing, f"{src.name}: no // LOCKING: comment above {missing}"


def test_every_function_added_by_the_patches_documents_locking() -> None:
    for patch in _all_huvm_patches():
        hunks = re.split(r"^@@[^\n]*\n", _read(patch), flags=re.MULTILINE)[1:]
        for hunk in hunks:
            lines = [line[1:] for line in hunk.splitlines() if line.startswith("+")]
            missing = _functions_without_locking(lines)
            assert not missing, f"{patch.name}: no // LOCKING: comment above {missing}"


def test_exported_hooks_documented_in_header() -> None:
    header = _read(UVM / "uvm_huvm.h")
    decls = list(re.finditer(r"^\w[\w\s\*]*?\b(uvm_huvm_\w+)\(", header, flags=re.MULTILINE))
    assert len(decls) >= 10
    for m in decls:
        block = header[: m.start()].rsplit("\n\n", 1)[-1]
        assert "LOCKING:" in block, f"uvm_huvm.h: {m.group(1)} has no LOCKING: comment"


# ---- the series ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_series_lists_every_patch_in_order(version: str) -> None:
    patches = _patches(version)
    names = _series(patches)
    assert names == sorted(names)
    assert sorted(p.name for p in patches.glob("*.patch")) == names
    # The branches carry the same series, patch for patch (same names, same subjects).
    assert names == _series(PATCHES)
    for i, name in enumerate(names, start=1):
        assert name.startswith(f"{i:04d}-"), name
        text = _read(patches / name)
        assert text.startswith("From ") and "\nSubject: [PATCH" in text, f"{name}: not git format-patch form"


@pytest.mark.parametrize("version", VERSIONS)
def test_huvm_diff_to_upstream_is_small(version: str) -> None:
    changed = 0
    for patch in _huvm_patches(_patches(version)):
        for line in _read(patch).splitlines():
            if line.startswith(("+++", "---")):
                continue
            if line.startswith(("+", "-")):
                changed += 1
    assert 0 < changed < DIFF_BUDGET, f"{changed} changed lines in upstream files (budget {DIFF_BUDGET})"


def test_patches_touch_only_upstream_nvidia_uvm_files() -> None:
    for patch in _all_huvm_patches():
        for path in re.findall(r"^\+\+\+ b/(\S+)", _read(patch), flags=re.MULTILINE):
            assert path.startswith("nvidia-uvm/"), f"{patch.name}: {path}"
            assert "huvm" not in Path(path).name, f"{patch.name}: new huvm files live in driver/, not in patches"


@pytest.fixture(scope="module", params=VERSIONS)
def patched_tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned upstream nvidia-uvm with the whole series applied with `patch -F0` (no fuzz allowed)."""
    version = request.param
    upstream, patches = _upstream(version), _patches(version)
    require_or_skip((upstream / "nvidia-uvm" / "uvm.c").is_file(),
                    f"pinned upstream {version} not unpacked (make source UPSTREAM={version})")
    require_or_skip(shutil.which("patch") is not None, "patch(1) not installed")
    tree = tmp_path_factory.mktemp("upstream")
    shutil.copytree(upstream / "nvidia-uvm", tree / "nvidia-uvm")
    for name in _series(patches):
        res = subprocess.run(
            ["patch", "-p1", "-F0", "-N", "--no-backup-if-mismatch", "-i", str(patches / name)],
            cwd=tree, capture_output=True, text=True, check=False,
        )
        assert res.returncode == 0, f"{name} does not apply:\n{res.stdout}{res.stderr}"
        assert "fuzz" not in res.stdout.lower(), f"{name} applies only with fuzz:\n{res.stdout}"
    return tree / "nvidia-uvm"


def test_series_applies_with_zero_fuzz(patched_tree: Path) -> None:
    assert "uvm_huvm_ioctl(" in _read(patched_tree / "uvm.c")


def test_va_space_destroy_flushes_huvm_after_bottom_halves(patched_tree: Path) -> None:
    """The prototype's use-after-free: queued prefetch work must be drained before the VA space goes."""
    text = _read(patched_tree / "uvm_va_space.c")
    body = text[text.index("void uvm_va_space_destroy(uvm_va_space_t *va_space)"):]
    body = body[: body.index("\n}\n")]
    flush_bh = body.index("nv_kthread_q_flush(&gpu->parent->isr.bottom_half_q);")
    hook = body.index("uvm_huvm_va_space_destroy(va_space);")
    assert flush_bh < hook < body.index("uvm_tools_flush_events();")


def test_eviction_keeps_cause_and_block_lock(patched_tree: Path) -> None:
    text = _read(patched_tree / "uvm_va_block.c")
    body = text[text.index("NV_STATUS uvm_va_block_evict_chunks("):]
    body = body[: body.index("\n}\n")]
    # The single destination choice is huvm's; there is no other make_resident on this path.
    assert "uvm_huvm_evict_make_resident(" in body
    assert "uvm_va_block_make_resident(" not in body
    assert "uvm_mutex_unlock(&va_block->lock)" not in body


def _function_of(text: str, needle: str) -> str:
    """The name of the C function (a definition at column 0) whose body holds needle."""
    pos = text.index(needle)
    defs = list(re.finditer(r"^(?:static\s+)?[A-Za-z_][\w\s\*]*?\b(\w+)\([^;{]*\)\s*\{", text[:pos],
                            flags=re.MULTILINE | re.DOTALL))
    assert defs, f"{needle}: not inside a function"
    return defs[-1].group(1)


# Where each upstream call of a hook must land, per branch (the function that holds it).
HOOK_FUNCTIONS = {
    "535": [
        ("uvm_gpu.c", "uvm_huvm_add_gpu(gpu);", "init_gpu"),
        ("uvm_gpu.c", "uvm_huvm_remove_gpu(gpu);", "deinit_gpu"),
        ("uvm_gpu.c", "uvm_huvm_add_peer(", "init_peer_access"),
        ("uvm_gpu_replayable_faults.c", "uvm_huvm_fault_batch_done(", "uvm_gpu_service_replayable_faults"),
        ("uvm_va_block.c", "uvm_huvm_block_split_prepare(", "uvm_va_block_split"),
        ("uvm_va_block.c", "uvm_huvm_block_destroy_gpu_state(", "block_destroy_gpu_state"),
        ("uvm_va_space.c", "uvm_huvm_va_space_destroy(", "uvm_va_space_destroy"),
        ("uvm.c", "uvm_huvm_exit();\n\n    uvm_test_unload_state_exit", "uvm_exit"),
    ],
    "580": [
        ("uvm_gpu.c", "uvm_huvm_add_gpu(gpu);", "init_gpu"),
        ("uvm_gpu.c", "uvm_huvm_remove_gpu(gpu);", "deinit_gpu"),
        # 570+: init_peer_access() became peers_init(); the link lives in the parents' peer caps.
        ("uvm_gpu.c", "uvm_huvm_add_peer(", "peers_init"),
        # 570+: faults are serviced per parent GPU; the hook gets the fault entry's GPU.
        ("uvm_gpu_replayable_faults.c", "uvm_huvm_fault_batch_done(last->gpu",
         "uvm_parent_gpu_service_replayable_faults"),
        ("uvm_va_block.c", "uvm_huvm_block_split_prepare(", "uvm_va_block_split"),
        ("uvm_va_block.c", "uvm_huvm_block_destroy_gpu_state(", "block_destroy_gpu_state"),
        ("uvm_va_space.c", "uvm_huvm_va_space_destroy(", "uvm_va_space_destroy"),
        ("uvm.c", "uvm_huvm_exit();\n\n    uvm_test_unload_state_exit", "uvm_exit"),
        ("uvm_tools.c", "tools_is_event_enabled_v2(va_space, UvmEventTypeEviction)", "uvm_tools_record_eviction"),
    ],
}


def test_hooks_land_in_their_functions(patched_tree: Path) -> None:
    text_of = {f: _read(patched_tree / f) for f in {h[0] for hs in HOOK_FUNCTIONS.values() for h in hs}}
    # The branch is told by the tree itself: 570+ services faults per parent GPU.
    key = "580" if "void uvm_parent_gpu_service_replayable_faults(" in text_of["uvm_gpu_replayable_faults.c"] else "535"
    for fname, needle, func in HOOK_FUNCTIONS[key]:
        text = text_of[fname]
        assert text.count(needle) == 1, f"{key}: {fname}: {needle!r} occurs {text.count(needle)} times"
        assert _function_of(text, needle) == func, f"{key}: {fname}: {needle!r} is in {_function_of(text, needle)}()"


@pytest.mark.parametrize("hook", [
    ("uvm.c", "uvm_huvm_ioctl("),
    ("uvm_gpu.c", "uvm_huvm_add_gpu("),
    ("uvm_gpu.c", "uvm_huvm_remove_gpu("),
    ("uvm_gpu.c", "uvm_huvm_add_peer("),
    ("uvm_va_block.c", "uvm_huvm_evict_make_resident("),
    ("uvm_va_block.c", "uvm_huvm_make_resident_finish("),
    ("uvm_va_block.c", "uvm_huvm_kick_preevict("),
    ("uvm_pmm_gpu.c", "va_block_harvested"),
    ("uvm_perf_prefetch.c", "uvm_huvm_prefetch_whole_block("),
    ("uvm_tools.c", "UvmEventTypeEviction"),
    ("uvm_gpu_replayable_faults.c", "uvm_huvm_fault_batch_done("),
    ("uvm_va_space.c", "uvm_huvm_va_space_destroy("),
])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_hook_is_wired_by_a_patch(version: str, hook: tuple[str, str]) -> None:
    fname, needle = hook
    for patch in _huvm_patches(_patches(version)):
        text = _read(patch)
        for part in re.split(r"^diff --git ", text, flags=re.MULTILINE)[1:]:
            if part.startswith(f"a/nvidia-uvm/{fname} ") and any(needle in line for line in _added_lines_of(part)):
                return
    pytest.fail(f"no patch of {version} adds {needle} to {fname}")


def _added_lines_of(part: str) -> list[str]:
    return [line[1:] for line in part.splitlines() if line.startswith("+") and not line.startswith("+++")]


SOFTGPU = DRIVER / "softgpu"
SG_BRANCHES = {DEFAULT_VERSION: 535, "580.142": 580}
# nvUvmInterface* of each branch's nv_uvm_interface.h: 535.261.03 declares 71; 580.142 adds GetNvlinkInfo,
# TogglePrefetchFaults, GetExternalAllocPhysAddrs, ReportFatalError, CslRotateKey and CslLogEncryption and
# drops PmaUnpinPages.
SG_EXPORT_COUNTS = {535: 71, 580: 76}
_SG_IF = re.compile(r"#if\s+SG_NV_BRANCH\s*(>=|<|==|!=)\s*(\d+)\s*$")
_SG_OPS: dict[str, Callable[[int, int], bool]] = {
    ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def _softgpu_exports(branch: int) -> set[str]:
    """The nvUvmInterface* the software GPU exports when built for `branch`: the sources read with their
    `#if SG_NV_BRANCH <op> N` / `#else` / `#endif` blocks resolved (other conditionals are kept as true)."""
    exported: set[str] = set()
    for f in sorted(SOFTGPU.glob("*.c")):
        stack: list[tuple[bool, bool]] = []   # (this block's condition, is an SG_NV_BRANCH block)
        for line in _read(f).splitlines():
            stripped = line.strip()
            m = _SG_IF.match(stripped)
            if m:
                stack.append((_SG_OPS[m.group(1)](branch, int(m.group(2))), True))
            elif re.match(r"#\s*if(n?def)?\b", stripped):
                stack.append((True, False))
            elif re.match(r"#\s*elif\b", stripped):
                assert not (stack and stack[-1][1]), f"{f.name}: #elif in an SG_NV_BRANCH block"
            elif re.match(r"#\s*else\b", stripped):
                cond, mine = stack.pop()
                stack.append((not cond if mine else True, mine))
            elif re.match(r"#\s*endif\b", stripped):
                stack.pop()
            elif all(cond for cond, _ in stack):
                exported.update(re.findall(r"EXPORT_SYMBOL(?:_GPL)?\(\s*(nvUvmInterface\w+)\s*\)", line))
        assert not stack, f"{f.name}: unbalanced #if"
    return exported


@pytest.mark.parametrize("branch", sorted(SG_EXPORT_COUNTS))
def test_softgpu_export_count_matches_docs(branch: int) -> None:
    """The software GPU built for each branch exports every nvUvmInterface* of that branch's
    nv_uvm_interface.h (535: 71, nvidia-uvm 535 imports 68 of them; 580: 76; modpost checks the imports in
    the test bed); every "N nvUvmInterface*" of the docs is one of those counts, and each count is stated."""
    exported = _softgpu_exports(branch)
    assert len(exported) == SG_EXPORT_COUNTS[branch], \
        f"driver/softgpu exports {len(exported)} nvUvmInterface* for {branch}: update the docs and this test"
    for doc in ("softgpu.md", "testing.md"):
        stated = re.findall(r"(\d+) (?:exported )?`?nvUvmInterface\*", _read(ROOT / "docs" / doc))
        assert stated and set(stated) <= {str(n) for n in SG_EXPORT_COUNTS.values()}, \
            f"docs/{doc}: {stated} nvUvmInterface* exports"
    stated_sg = re.findall(r"(\d+) (?:exported )?`?nvUvmInterface\*", _read(ROOT / "docs" / "softgpu.md"))
    assert str(len(exported)) in stated_sg, f"docs/softgpu.md does not state the {branch} count"


@pytest.mark.parametrize("version", VERSIONS)
def test_softgpu_exports_equal_the_branch_interface(version: str) -> None:
    """For each pinned upstream, the exports of its branch's build are exactly the functions its
    nv_uvm_interface.h declares: nothing missing (nvidia-uvm would not link), nothing stale."""
    header = _upstream(version) / "common" / "inc" / "nv_uvm_interface.h"
    require_or_skip(header.is_file(), f"{header} missing (make source UPSTREAM={version})")
    declared = set(re.findall(r"^(?:NV_STATUS|void|NvBool|NvU32|NvU64)\s+(nvUvmInterface\w+)\s*\(",
                              _read(header), flags=re.MULTILINE))
    exported = _softgpu_exports(SG_BRANCHES[version])
    assert exported == declared, (f"{version}: missing {sorted(declared - exported)}, "
                                  f"not in the header {sorted(exported - declared)}")


def test_test_commands_are_apart_from_production_dispatch() -> None:
    """Issue 27 item 3: TEST_SET_NODE/TEST_EVENT live in huvm_dispatch_test.c (as NVIDIA's uvm_*_test.c),
    reached from huvm_dispatch() only through huvm_dispatch_test(), after the test gate (allow_test)."""
    prod = _strip_c_comments((CORE / "huvm_dispatch.c").read_text(encoding="utf-8"))
    test = _strip_c_comments((CORE / "huvm_dispatch_test.c").read_text(encoding="utf-8"))
    # no test command's body in production dispatch: its params appear only in the size table
    for name in ("HUVM_TEST_SET_NODE_PARAMS", "HUVM_TEST_EVENT_PARAMS"):
        assert re.findall(rf"\b{name}\b[^)]*\)?", prod) == [f"{name})"], name
        assert f"{name} *" in test, name
    assert not re.search(r"\bcmd_test_\w+|\btest_run_t\b|huvm_decide_|huvm_account_(evict|fetch|giveback)", prod)
    # the one call into the test file comes after the gate that refuses without allow_test
    calls = [m.start() for m in re.finditer(r"\bhuvm_dispatch_test\s*\(", prod)]
    gate = prod.find("if (!caller->allow_test)")
    assert len(calls) == 1 and 0 <= gate < calls[0]
    assert re.search(r"^huvm_status_t huvm_dispatch_test\(", test, re.M)
    # nothing else calls into it: the glue and the simulator reach test commands through huvm_dispatch()
    others = [p for p in DRIVER.rglob("*.c") if p.name not in ("huvm_dispatch.c", "huvm_dispatch_test.c")]
    assert [p.name for p in others if "huvm_dispatch_test" in p.read_text(encoding="utf-8")] == []
    # the kernel's gate is NVIDIA's uvm_enable_builtin_tests
    assert "caller.allow_test = uvm_enable_builtin_tests" in (UVM / "uvm_huvm.c").read_text(encoding="utf-8")
