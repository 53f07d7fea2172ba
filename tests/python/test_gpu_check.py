"""huvmctl gpu-check (issue 25): without a GPU one line and exit 0 (this machine), and with fake subprocesses
(probe, the two workers) the sizing to free memory, the refusals, the ratio and the prediction printed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from huvm import jsonout
from huvm.cli import main as huvmctl
from huvm.errors import NoMemory
from huvmlab.experiment import gpucheck as gc
from huvmlab.experiment import managed_alloc as ma

GIB = 1 << 30
H200 = {"available": True, "torch": "2.11.0+cu130", "cuda": "13.0", "device": "NVIDIA H200", "driver": "580.159.04",
        "free_bytes": 140 * GIB, "total_bytes": 141 * GIB, "rmm": True}


class Fake:
    """The subprocesses: the probe's document, then each worker's step times."""

    def __init__(self, probe: dict[str, Any], steps: dict[str, list[float]] | None = None,
                 fail: str | None = None) -> None:
        self.probe, self.steps, self.fail = probe, steps or {}, fail
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> tuple[int, str, str]:
        self.calls.append(args)
        if args[0] == "probe":
            return 0, json.dumps(self.probe) + "\n", ""
        alloc = args[args.index("--allocator") + 1]
        if alloc == self.fail:
            return 1, "", "Traceback...\nerror: RAPIDS RMM is not installed: pip install 'huvm[rmm-cu13]'\n"
        peak = 28_167_412_736 if alloc == "pytorch" else None
        return 0, "noise\n" + json.dumps({"allocator": alloc, "step_s": self.steps[alloc], "peak_bytes": peak}), ""


def predictor(per_batch: int) -> Any:
    return lambda cfg, gpu: per_batch * cfg.batch


def test_no_gpu_here_is_one_line_and_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    """The real probe in a subprocess: this machine's PyTorch is the CPU build."""
    assert huvmctl(["gpu-check"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and len(out.out.splitlines()) == 1
    assert out.out.startswith("gpu-check: no GPU here (") and out.out.rstrip().endswith("nothing measured")


def test_no_gpu_json_follows_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert huvmctl(["gpu-check", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonout.validate(doc)
    assert doc["kind"] == "gpu-check" and doc["measured"] is False and "no GPU" in doc["reason"]


def test_measures_both_allocators_and_prints_the_ratio_and_prediction() -> None:
    fake = Fake(H200, {"pytorch": [2.27, 0.13, 0.130, 0.131, 0.130, 0.130],
                       "managed-pool": [2.13, 0.28, 0.133, 0.130, 0.134, 0.130]})
    lines: list[str] = []
    res = gc.run_check(gc.CheckConfig(), runner=fake, predictor=predictor(3_520_926_592), say=lines.append)
    assert res is not None and res.ok
    assert res.pytorch.steady_s(2) == pytest.approx(0.1300) and res.pool.steady_s(2) == pytest.approx(0.1315)
    assert res.ratio == pytest.approx(0.1315 / 0.1300)
    assert [c[2] for c in fake.calls[1:]] == ["pytorch", "managed-pool"]  # each in its own process
    pool = fake.calls[2]
    assert int(pool[pool.index("--pool-maximum") + 1]) <= int(str(H200["free_bytes"]))
    text = "\n".join(lines)
    assert "NVIDIA H200, driver 580.159.04, PyTorch 2.11.0+cu130 (CUDA 13.0), rmm-cu13" in text
    assert "0.130 s/step" in text and "1.01x PyTorch's (target <= 1.05x): ok" in text
    assert "peak 26.2 GiB" in text and "the trace predicts 26.2 GiB" in text
    doc = jsonout.dump(jsonout.gpu_check(res, target_ratio=gc.TARGET_RATIO))
    jsonout.validate(doc)
    assert doc["ratio"] == pytest.approx(res.ratio) and doc["runs"][0]["peak_bytes"] == 28_167_412_736


def test_a_slow_pool_is_above_target() -> None:
    fake = Fake(H200, {"pytorch": [1.0, 0.1, 0.1, 0.1], "managed-pool": [1.0, 0.2, 0.2, 0.2]})
    res = gc.run_check(gc.CheckConfig(steps=4), runner=fake, predictor=predictor(GIB), say=lambda _: None)
    assert res is not None and not res.ok and res.ratio == pytest.approx(2.0)


def test_batch_halves_to_fit_free_memory_and_refuses_below_one() -> None:
    small = {**H200, "free_bytes": 10 * GIB}
    fake = Fake(small, {"pytorch": [0.1] * 6, "managed-pool": [0.1] * 6})
    lines: list[str] = []
    res = gc.run_check(gc.CheckConfig(batch=8), runner=fake, predictor=predictor(3 * GIB), say=lines.append)
    assert res is not None and res.config.batch == 2  # 8 x 3 GiB, 4 x 3 GiB do not fit 10 GiB with 10 %
    assert "batch 2" in lines[1] and "halved to fit" in lines[1]
    assert all(c[c.index("--batch") + 1] == "2" for c in fake.calls[1:])
    with pytest.raises(NoMemory, match="batch 1 .* needs about 22.0 GiB, 10.0 GiB is free on NVIDIA H200: refusing"):
        gc.run_check(gc.CheckConfig(), runner=Fake(small), predictor=predictor(20 * GIB), say=lambda _: None)


def test_refuses_before_running_without_rmm_or_with_a_cpu_build() -> None:
    with pytest.raises(ma.AllocatorUnavailable, match=r"pip install 'huvm\[rmm-cu12\]'"):
        gc.run_check(gc.CheckConfig(), runner=Fake({**H200, "cuda": "12.8", "rmm": False}), predictor=predictor(GIB),
                     say=lambda _: None)
    lines: list[str] = []
    cpu = {"available": False, "torch": "2.13.0+cpu", "reason": "PyTorch 2.13.0+cpu is CPU-only"}
    assert gc.run_check(gc.CheckConfig(), runner=Fake(cpu), say=lines.append) is None
    assert lines == ["gpu-check: no GPU here (PyTorch 2.13.0+cpu is CPU-only); nothing measured"]


def test_a_failing_worker_is_one_line() -> None:
    fake = Fake(H200, {"pytorch": [0.1] * 6}, fail="managed-pool")
    with pytest.raises(gc.GpuCheckError) as e:
        gc.run_check(gc.CheckConfig(), runner=fake, predictor=predictor(GIB), say=lambda _: None)
    assert str(e.value) == ("the managed-pool run failed (exit status 1): error: RAPIDS RMM is not installed: "
                            "pip install 'huvm[rmm-cu13]'")


def test_gpu_names_pick_the_workspace_size() -> None:
    assert gc.gpu_preset("NVIDIA H200") == "H200" and gc.gpu_preset("NVIDIA H100 80GB HBM3") == "H100"
    assert gc.gpu_preset("NVIDIA A100-SXM4-80GB") == "A100" and gc.gpu_preset("Tesla V100-SXM2-16GB") == "V100"
    assert gc.gpu_preset("NVIDIA L4") is None


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["gpu-check", "--steps", "2"], ["gpu-check", "--model", "llama-7b"]):
        with pytest.raises(SystemExit) as e:
            huvmctl(argv)
        assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("huvmctl: error: ") for line in err)
