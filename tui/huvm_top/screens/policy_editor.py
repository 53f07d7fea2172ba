"""Policy editor: node-wide settings and per-GPU role / lending limit / reserve / guest-traffic budget, with a
preset switcher.

Nothing is sent until ctrl+s. Values are parsed and checked first (:mod:`huvm_top.policy_rules`, then the
source's library checks); a refusal, local or by the core, names the field, marks it and leaves every edit
in place. The form is generated from the ABI's policy structs (header comments as help). Fields are named
by ``huvmctl policy set``'s keys (``prefetch_chunks``, ``gpu.2.lend_limit_bytes``) and show their range, so what
works here can be typed there.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Button, Footer, Input, Label, Select, Static

from huvm_top import abi
from huvm_top.model import FieldError, NodeInfo, PolicyRefused, PolicyState, SourceError
from huvm_top.policy_rules import (
    FieldSpec,
    check_policy,
    format_value,
    gpu_specs,
    node_specs,
    parse_value,
    rate_range,
)
from huvm_top.screens.preset_confirm import gpu_key
from huvm_top.sources.base import StatsSource


def widget_id(field: str) -> str:
    """``prefetch_chunks`` -> ``f-prefetch_chunks``; ``gpus[1].role`` -> ``g1-role``."""
    if field.startswith("gpus["):
        index, name = field[len("gpus["):].split("].", 1)
        return f"g{index}-{name}"
    return f"f-{field}"


def _editor(s: FieldSpec, value: int, wid: str) -> Widget:
    if s.is_enum or s.is_bool:
        names = s.choices if s.is_enum else ("off", "on")
        options = [(name, i) for i, name in enumerate(names)]
        current = value if 0 <= value < len(names) else 0
        return Select(options, value=current, allow_blank=False, id=wid, classes="field", compact=True)
    return Input(format_value(s, value), id=wid, classes="field", compact=True)


class PolicyEditor(Screen[PolicyState | None]):
    """Dismisses with the policy now in force after a successful apply, or None."""

    BINDINGS = [
        Binding("ctrl+s", "apply", "apply", priority=True),
        Binding("ctrl+r", "reload", "reload"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, source: StatsSource, info: NodeInfo, policy: PolicyState) -> None:
        super().__init__()
        self.source = source
        self.info = info
        self.policy = policy.copy()  # what the form was filled from
        self.applied: PolicyState | None = None
        self.busy = False

    # layout

    def compose(self) -> ComposeResult:
        presets = [(n, n) for n in abi.preset_names() if n != "custom"]
        yield Static("huvm policy", id="policy-title")
        with VerticalScroll(id="policy-form"):
            with Horizontal(classes="row"):
                yield Label("load preset", classes="name")
                yield Select(presets, prompt="(keep current)", id="preset-switch", classes="field", compact=True)
                yield Static("fills the form; ctrl+s applies", classes="help")
            yield Static("node", classes="section")
            for s in node_specs():
                with Horizontal(classes="row"):
                    yield Label(s.key, classes="name")
                    yield _editor(s, self.policy.node.get(s.name, s.lo), widget_id(s.name))
                    yield Static(self._help(s), classes="help")
            for i, g in enumerate(self.policy.gpus):
                yield Static(self._gpu_title(i), classes="section")
                for s in gpu_specs():
                    with Horizontal(classes="row"):
                        yield Label(gpu_key(self.info, g.uuid, s.key), classes="name")
                        yield _editor(s, int(getattr(g, s.name)), widget_id(f"gpus[{i}].{s.name}"))
                        yield Static(self._help(s), classes="help")
        yield Static("", id="policy-error")
        with Horizontal(id="policy-buttons"):
            yield Button("apply (ctrl+s)", id="apply", variant="primary")
            yield Button("reload (ctrl+r)", id="reload")
            yield Button("back (esc)", id="back")
        yield Footer()

    def _help(self, s: FieldSpec) -> str:
        """The field's range (or choices), then its header comment."""
        if s.is_enum:
            return f"{' | '.join(s.choices)}: {s.help}"
        if s.is_bool:
            return f"on | off: {s.help}"
        if s.is_rate:
            return f"{rate_range(s)}: {s.help} (e.g. 18GB/s, off)"
        return f"{format_value(s, s.lo)}..{format_value(s, s.hi)}: {s.help}" + (
            " (e.g. 8GiB)" if s.is_bytes else "")

    def key_of(self, field: str) -> str:
        """The editor's field (``gpus[1].lend_reserve_bytes``, ``prefetch_chunks``) as huvmctl's key
        (``gpu.1.lend_reserve_bytes``, by the GPU's index on the node)."""
        by_field = {s.name: s.key for s in (*node_specs(), *gpu_specs())}
        if field.startswith("gpus["):
            index, name = field[len("gpus["):].split("].", 1)
            if index.isdigit() and int(index) < len(self.policy.gpus):
                return gpu_key(self.info, self.policy.gpus[int(index)].uuid, by_field.get(name, name))
            return field
        return by_field.get(field, field)

    def _gpu_title(self, i: int) -> str:
        uuid = self.policy.gpus[i].uuid
        for g in self.info.gpus:
            if g.uuid == uuid:
                return f"gpus[{i}]: gpu{g.index} {g.name} {uuid}"
        return f"gpus[{i}]: {uuid} (not on this node now)"

    def on_mount(self) -> None:
        self._show_status(f"generation {self.policy.generation}: edit, then ctrl+s to apply")

    # reading and filling the form

    def _widget(self, field: str) -> Widget | None:
        try:
            return self.query_one(f"#{widget_id(field)}")
        except Exception:
            return None

    def _read(self, s: FieldSpec, field: str, errors: list[FieldError]) -> int | None:
        w = self._widget(field)
        if isinstance(w, Select):
            return int(w.value) if isinstance(w.value, int) else None
        if isinstance(w, Input):
            try:
                return parse_value(s, w.value)
            except ValueError as exc:
                errors.append(FieldError(field, f"{w.value!r}: {exc}"))
        return None

    def read_form(self) -> tuple[PolicyState, list[FieldError]]:
        """The policy the form describes, and what could not be parsed."""
        errors: list[FieldError] = []
        out = self.policy.copy()
        for s in node_specs():
            v = self._read(s, s.name, errors)
            if v is not None:
                out.node[s.name] = v
        for i, g in enumerate(out.gpus):
            for s in gpu_specs():
                v = self._read(s, f"gpus[{i}].{s.name}", errors)
                if v is not None:
                    setattr(g, s.name, v)
        return out, errors

    def fill(self, policy: PolicyState) -> None:
        """Put a policy into the form (a preset, or the current policy after reload)."""
        by_uuid = {g.uuid: g for g in policy.gpus}
        self.policy.node.update(policy.node)
        self.policy.generation = policy.generation
        for s in node_specs():
            self._set(s, s.name, policy.node.get(s.name, s.lo))
        for i, g in enumerate(self.policy.gpus):
            src = by_uuid.get(g.uuid)
            if src is None:
                continue
            for s in gpu_specs():
                self._set(s, f"gpus[{i}].{s.name}", int(getattr(src, s.name)))
        self._clear_marks()

    def _set(self, s: FieldSpec, field: str, value: int) -> None:
        w = self._widget(field)
        if isinstance(w, Select):
            w.value = value
        elif isinstance(w, Input):
            w.value = format_value(s, value)

    # feedback

    def _show_status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#policy-error", Static)
        status.update(text)
        status.set_class(error, "-error")

    def _clear_marks(self) -> None:
        for w in self.query(".field"):
            w.remove_class("-invalid")

    def show_refusal(self, field: str, message: str, by: str) -> None:
        """Name the field, mark and focus its editor; the edits stay as they are."""
        self._clear_marks()
        who = "refused by the core" if by == "core" else "not sent"
        self._show_status(f"{who}: {self.key_of(field)}: {message}", error=True)
        w = self._widget(field)
        if w is not None:
            w.add_class("-invalid")
            w.focus()
            w.scroll_visible()

    # actions

    def action_apply(self) -> None:
        if self.busy:
            return
        policy, errors = self.read_form()
        if not errors:
            errors = check_policy(policy)
        if not errors:
            try:
                errors = self.source.check_policy(policy)
            except SourceError as exc:
                self._show_status(f"cannot check: {exc}", error=True)
                return
        if errors:
            first = errors[0]
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            self.show_refusal(first.field, first.message + more, "check")
            for e in errors[1:]:
                w = self._widget(e.field)
                if w is not None:
                    w.add_class("-invalid")
            return
        self.busy = True
        self._show_status("sending...")
        self._send(policy)

    @work(thread=True, exclusive=True, group="policy")
    def _send(self, policy: PolicyState) -> None:
        try:
            new = self.source.set_policy(policy)
        except PolicyRefused as exc:
            self.app.call_from_thread(self._refused, exc.field, exc.message, exc.by)
        except Exception as exc:  # noqa: BLE001 - SourceError or worse: shown, the edit stays
            self.app.call_from_thread(self._refused, "", str(exc), "core")
        else:
            self.app.call_from_thread(self._applied, new)

    def _refused(self, field: str, message: str, by: str) -> None:
        self.busy = False
        if field:
            self.show_refusal(field, message, by)
        else:
            self._show_status(f"refused: {message}", error=True)

    def _applied(self, new: PolicyState) -> None:
        self.busy = False
        self.applied = new
        self.policy.generation = new.generation
        self.policy.node = dict(new.node)
        self._clear_marks()
        self._show_status(f"applied: generation {new.generation}")
        self.app.notify(f"policy applied (generation {new.generation})")

    def action_reload(self) -> None:
        self._load_current()

    @work(thread=True, exclusive=True, group="policy")
    def _load_current(self) -> None:
        try:
            policy = self.source.get_policy()
        except SourceError as exc:
            self.app.call_from_thread(self._show_status, f"cannot read the policy: {exc}", True)
            return
        self.app.call_from_thread(self._loaded, policy, f"reloaded: generation {policy.generation}")

    def _loaded(self, policy: PolicyState, note: str) -> None:
        self.fill(policy)
        self._show_status(note)

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "preset-switch" and isinstance(event.value, str):
            self._load_preset(event.value)

    @work(thread=True, exclusive=True, group="policy")
    def _load_preset(self, name: str) -> None:
        try:
            policy = self.source.preset(name)
        except SourceError as exc:
            self.app.call_from_thread(self._show_status, f"preset {name}: {exc}", True)
            return
        policy.generation = self.policy.generation
        self.app.call_from_thread(self._loaded, policy, f"preset {name} loaded into the form: ctrl+s applies")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.action_apply()
        elif event.button.id == "reload":
            self.action_reload()
        elif event.button.id == "back":
            self.action_back()

    def action_back(self) -> None:
        self.dismiss(self.applied)
