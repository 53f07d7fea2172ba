"""DNN training-step traces on the meta device (needs the ``traces`` extra: torch, transformers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import huvmlab.traces as T
import numpy as np
import pytest
from conftest import require_or_skip  # type: ignore[import-not-found, unused-ignore]
from huvm_testing import dnn_tables, traces_available  # type: ignore[import-not-found, unused-ignore]
from huvmlab.traces.schema import Tables


@pytest.fixture(autouse=True)
def _need_torch() -> None:
    require_or_skip(traces_available(), "torch/transformers not importable: install huvm[traces]")


def tables(model: str, **kw: Any) -> Tables:
    return dnn_tables(model, **kw)  # type: ignore[no-any-return]


def _kind_bytes(t: Tables, kind: str) -> int:
    return int(sum(n for n, k in zip(t.s_nbytes.tolist(), t.s_kind, strict=True) if k == kind))


@pytest.mark.parametrize("model", ["gpt2-tiny", "llama-test", "bert-test", "resnet-test"])
def test_static_16_bytes_per_param_fp32_adamw(model: str) -> None:
    t = tables(model)
    n = t.meta["params"]
    assert _kind_bytes(t, "param") == 4 * n
    assert _kind_bytes(t, "grad") == 4 * n
    assert _kind_bytes(t, "optstate") == 8 * n  # exp_avg + exp_avg_sq
    assert (_kind_bytes(t, "param") + _kind_bytes(t, "grad") + _kind_bytes(t, "optstate")) / n == 16.0
    assert t.o_phase[0] == "fwd" and t.o_phase[-1] == "opt" and "bwd" in t.o_phase
    # the persistent state is live from before the step to its end
    for k, al, fr in zip(t.s_kind, t.s_alloc_op.tolist(), t.s_free_op.tolist(), strict=True):
        if k in ("param", "optstate"):
            assert (al, fr) == (-1, -1)


def _lm_expected(t: Tables, nonmatmul: int) -> float:
    layers, hidden, seq, tokens = t.meta["layers"], t.meta["hidden"], t.meta["seq"], t.meta["tokens"]
    return float(6 * (t.meta["params"] - nonmatmul) * tokens + 12 * layers * hidden * seq * tokens)


def test_flops_gpt2_match_6nt_plus_attention() -> None:
    from huvmlab.traces.models import MODELS

    t = tables("gpt2-tiny")
    cfg = MODELS["gpt2-tiny"].config
    wpe = cfg["n_positions"] * cfg["n_embd"]  # position embedding: a lookup, no matmul
    exp = _lm_expected(t, wpe)
    assert abs(int(t.o_flops.sum()) / exp - 1) < 0.03


def test_flops_llama_match_6nt_plus_attention() -> None:
    from huvmlab.traces.models import MODELS

    t = tables("llama-test")
    cfg = MODELS["llama-test"].config
    emb = cfg["vocab_size"] * cfg["hidden_size"]  # untied input embedding: a lookup
    exp = _lm_expected(t, emb)
    assert abs(int(t.o_flops.sum()) / exp - 1) < 0.03


def test_checkpointing_recomputes_and_saves_memory() -> None:
    base = tables("llama-tiny", batch=2, seq=256)
    ck = tables("llama-tiny", batch=2, seq=256, checkpoint=True)
    # backward recomputes each decoder layer's forward (up to the last saved tensor: early stop)
    recomputed = [n for n, ph in zip(ck.o_name, ck.o_phase, strict=True)
                  if ph == "bwd" and n == "aten._scaled_dot_product_efficient_attention.default"]
    assert len(recomputed) == ck.meta["layers"]
    ratio = int(ck.o_flops.sum()) / int(base.o_flops.sum())
    assert 1.05 < ratio < 1.34

    def saved_activations(t: Tables) -> int:  # live at the end of the forward minus the static state
        last_fwd = max(i for i, ph in enumerate(t.o_phase) if ph == "fwd")
        return int(t.o_live_bytes[last_fwd]) - int(t.s_nbytes[t.s_alloc_op < 0].sum())

    assert saved_activations(ck) < 0.75 * saved_activations(base)


def test_amp_emulation_and_fused_kernels() -> None:
    fp32 = tables("llama-tiny", batch=2, seq=256)
    amp = tables("llama-tiny", batch=2, seq=256, amp="bf16", optimizer="adamw-fused")
    mm = [d for n, d in zip(amp.o_name, amp.o_dtype, strict=True) if n.startswith("aten.mm")]
    assert mm and all(d == "torch.bfloat16" for d in mm)
    assert any("flash_attention" in n for n in amp.o_name)  # bf16, no mask: the flash kernel
    assert any("efficient_attention" in n for n in fp32.o_name)  # fp32: memory-efficient kernel
    assert any("_fused_adamw_" in n for n in amp.o_name)
    assert not any(n.startswith("aten._softmax.") for n in fp32.o_name)  # no unfused math attention
    assert amp.o_live_bytes.max() < fp32.o_live_bytes.max()


def test_dropout_keeps_a_bool_mask() -> None:
    t = tables("bert-test")
    assert any(n.startswith("aten.native_dropout.") for n in t.o_name)
    assert not any(n.startswith("aten.bernoulli") for n in t.o_name)
    assert "torch.bool" in t.s_dtype


def test_dnn_deterministic_and_cli(tmp_path: Path) -> None:
    a = T.generate("resnet-test", tmp_path / "a.trace")
    b = T.generate("resnet-test", tmp_path / "b.trace")
    assert {f.name: f.read_bytes() for f in a.iterdir()} == {f.name: f.read_bytes() for f in b.iterdir()}
    out = tmp_path / "c.trace"
    from huvmlab.traces.cli import main

    assert main(["gen", "gpt2-tiny", str(out), "--batch", "1", "--seq", "64"]) == 0  # with the progress bar
    r = subprocess.run([sys.executable, "-m", "huvmlab.traces", "info", str(out), "--json"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["meta"]["batch"] == 1 and d["meta"]["seq"] == 64 and d["n_ops"] > 50
    assert d["peak_live_bytes"] >= d["static_bytes"] > 0 and d["flops"] > 0
    st = T.load(out).to_sim_events("a100")
    assert st.n_ops == d["n_ops"] and np.all(st.op_time_ns >= 5000)
    assert int(st.op_first_touch[-1]) == st.n_touches == d["n_touches"]
