"""Confirmation of a preset key (1/2/3): what would change, by huvmctl's key names, before anything is sent.

``y`` or ``enter`` applies, ``n`` or ``esc`` cancels. The screen dismisses with True to apply.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from huvm_top.model import NodeInfo, PolicyState
from huvm_top.policy_rules import format_value, gpu_specs, node_specs


def gpu_key(info: NodeInfo | None, uuid: str, name: str) -> str:
    """The per-GPU key as huvmctl writes it: ``gpu.<index>.<name>``, or ``gpu[<uuid>].<name>`` for an entry
    of a GPU not on the node now."""
    for g in info.gpus if info is not None else ():
        if g.uuid.lower() == uuid.lower():
            return f"gpu.{g.index}.{name}"
    return f"gpu[{uuid}].{name}"


def policy_diff(current: PolicyState, new: PolicyState, info: NodeInfo | None) -> list[tuple[str, str, str]]:
    """(key, now, then) for every setting that differs, in huvmctl's key order and value format."""
    out: list[tuple[str, str, str]] = []
    for s in node_specs():
        a, b = current.node.get(s.name), new.node.get(s.name)
        if a != b and a is not None and b is not None:
            out.append((s.key, format_value(s, a), format_value(s, b)))
    old = {g.uuid.lower(): g for g in current.gpus}
    for g in new.gpus:
        before = old.get(g.uuid.lower())
        for s in gpu_specs():
            b = int(getattr(g, s.name))
            a = int(getattr(before, s.name)) if before is not None else None
            if a != b:
                out.append((gpu_key(info, g.uuid, s.key), "-" if a is None else format_value(s, a),
                            format_value(s, b)))
    return out


class PresetConfirm(ModalScreen[bool]):
    BINDINGS = [
        Binding("y,enter", "answer(True)", "apply"),
        Binding("n,escape,q", "answer(False)", "cancel"),
    ]

    def __init__(self, name: str, diff: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.preset = name
        self.diff = diff

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(f"apply preset [b]{self.preset}[/b]?", id="confirm-title")
            if self.diff:
                width = max(len(k) for k, _, _ in self.diff)
                lines = [f"{k:<{width}}  {a} \u2192 {b}" for k, a, b in self.diff]
                yield Static("\n".join(lines), id="confirm-diff", markup=False)
            else:
                yield Static("nothing would change: the policy in force is this preset's", id="confirm-diff")
            yield Static("y / enter: apply    n / esc: cancel", id="confirm-keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
