"""`better-compute nodes show NODE` (admin): one node as `kubectl describe node` shows one.

It calls `nodes.get` and prints the node's state, then each GPU with the atoms cut from it and
the bookings holding each. Every line is broken at spaces only, to the terminal's width (80 when
piped), so an id or a timestamp is never cut; timestamps are UTC to the second.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from better_compute.cli import config
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import error_object, fail_json, print_json, stderr, stdout
from better_compute.cli.resources_cmd import nodes_app
from better_compute.wire import codes

if TYPE_CHECKING:
    from better_compute.client import Compute
    from better_compute.wire.inventory import LayoutRefusalPublic
    from better_compute.wire.node_detail import NodeAtomPublic, NodeDetailPublic, NodeGpuPublic

KNOWN_SHOWN = 5
"""How many known nodes an unknown node's refusal names."""

LABEL = 17
"""The width of the label column of the detail view."""

_STAMP = re.compile(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\dZ)")
_KEEP = "\u00a0"
"""Joins a timestamp's date and time while a line is broken (textwrap breaks at ASCII space only)."""


def stamp(value: datetime) -> str:
    """A time in UTC to the second, e.g. `2030-01-01 10:00:05Z`."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def age(then: datetime, now: datetime) -> str:
    """How long before `now` `then` was, in its two largest units (`3h 12m ago`, `40s ago`)."""
    seconds = int((now - then).total_seconds())
    if seconds < 0:
        return "in the future"
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2]) + " ago"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _refusal(r: LayoutRefusalPublic) -> str:
    return f"{r.action} refused since {stamp(r.since)}: {r.reason}"


def _holders_text(atom: NodeAtomPublic) -> list[str]:
    lines = []
    for h in atom.holders:
        who = h.tenant_id or "no tenant"
        until = "never ends" if h.ends_at is None else f"until {stamp(h.ends_at)}"
        lines.append(f"held by {who}, {h.kind} {h.allocation_id}, from {stamp(h.starts_at)} {until}")
    return lines


def _atom_kind(atom: NodeAtomPublic) -> str:
    attributes = atom.attributes
    if attributes.get("migProfile"):
        return f"MIG {attributes['migProfile']}"
    if "slot" in attributes:
        return f"slot {attributes['slot']} of {attributes.get('slots', '?')}"
    return "whole GPU"


def _atom_state(atom: NodeAtomPublic, now: datetime) -> str:
    if not atom.present:
        return "not present"
    if atom.partition_pending:
        return "layout changing"
    if atom.booked_now:
        free = "never" if atom.next_free_at is None else stamp(atom.next_free_at)
        return f"booked now, free {free}"
    if not atom.bookable:
        return "not bookable (split into MIG instances)" if atom.cls == "gpu" else "not bookable"
    return "free"


def _mig_mode(gpu: NodeGpuPublic) -> str:
    current = "enabled" if gpu.mig_mode.current else "disabled"
    if gpu.mig_mode.pending == gpu.mig_mode.current:
        return current
    return f"{current}, {'enabled' if gpu.mig_mode.pending else 'disabled'} after a reset (pending)"


def _applied(gpu: NodeGpuPublic) -> str:
    if not gpu.mig_instances:
        return "no MIG instances"
    counts: dict[str, int] = {}
    for i in gpu.mig_instances:
        counts[i.profile] = counts.get(i.profile, 0) + 1
    return ", ".join(f"{n} x {p}" for p, n in counts.items())


def _layout(gpu: NodeGpuPublic, applied_layout: bool) -> str:
    if gpu.told_layout is None:
        return "none told (the node is in no pool; left as it is)"
    return f"{gpu.told_layout} ({'applied' if applied_layout else 'pending'})"


def _converged(detail: NodeDetailPublic, gpu: NodeGpuPublic) -> bool:
    """Whether the GPU runs what it is told, as far as the server can tell: the node observed the
    spec generation that told it, reported no refusal, and no atom of it waits for a change."""
    node = detail.node
    pending = any(a.partition_pending for a in detail.atoms if a.gpu_id == gpu.id)
    return node.observed_generation >= node.spec_generation and gpu.layout_refused is None and not pending


def _gate(detail: NodeDetailPublic) -> list[str]:
    gate = detail.gate
    if gate is None:
        return ["no layout change under way"]
    lines = [
        f"{gate.state}: {gate.frozen_layout or 'none'} -> {gate.pending_layout} (pool {gate.pool_id})",
        f"requested {stamp(gate.requested_at)}",
    ]
    if gate.scheduled_from is not None:
        lines.append(f"holds start {stamp(gate.scheduled_from)}")
    if gate.granted_at is not None:
        lines.append(f"granted {stamp(gate.granted_at)}")
    return lines


class _Lines:
    """The view's lines, each broken at spaces to `width`: a label column, then its value; a
    continuation is indented under the value."""

    def __init__(self, width: int) -> None:
        self.width = max(width, 40)
        self.out: list[str] = []

    def row(self, label: str, values: Sequence[str] | str, indent: int = 0) -> None:
        shown = [values] if isinstance(values, str) else list(values) or ["-"]
        lead = " " * indent + label.ljust(LABEL - indent) + " "
        for n, value in enumerate(shown):
            first = lead if n == 0 else " " * len(lead)
            self.text(value, first, " " * (len(lead) + 2))

    def text(self, value: str, first: str, rest: str) -> None:
        """`value` broken at spaces, never inside a timestamp; when a token is too long for the
        continuation indent (a partition booking's id), continuations start at column 4 instead."""
        lines = self._wrapped(value, first, rest)
        if len(rest) > 4 and any(len(line) > self.width for line in lines[1:]):
            lines = self._wrapped(value, first, "    ")
        self.out += lines

    def _wrapped(self, value: str, first: str, rest: str) -> list[str]:
        kept = _STAMP.sub(rf"\1{_KEEP}\2", value)
        lines = textwrap.wrap(
            kept,
            self.width,
            initial_indent=first,
            subsequent_indent=rest,
            break_long_words=False,
            break_on_hyphens=False,
        )
        return [line.replace(_KEEP, " ") for line in lines] or [first.rstrip()]

    def blank(self) -> None:
        self.out.append("")

    def __iter__(self) -> Iterator[str]:
        return iter(self.out)


def render(detail: NodeDetailPublic, width: int) -> list[str]:
    """The detail view of a node, as lines at most `width` wide (an id alone may be wider)."""
    node, now = detail.node, detail.at
    view = _Lines(width)
    view.row("node", node.id)
    view.row("cluster", node.cluster_id)
    view.row("pool", node.pool_id or "none")
    view.row("joined", "never" if detail.joined_at is None else stamp(detail.joined_at))
    contact = node.last_contact_at
    view.row("last contact", "never" if contact is None else f"{stamp(contact)} ({age(contact, now)})")
    report = node.last_report_at
    view.row("last report", "never" if report is None else f"{stamp(report)} ({age(report, now)})")
    behind = node.spec_generation - node.observed_generation
    step = "in step" if behind <= 0 else f"{behind} behind"
    view.row("generation", f"observed {node.observed_generation} of spec {node.spec_generation} ({step})")
    view.row("cordoned", _yes(node.cordoned))
    view.row("pool layout", "carried" if node.carries_pool_layout else "kept its own")
    view.row("reboot required", _yes(node.reboot_required))
    view.row("layout refused", [f"{r.gpu}: {_refusal(r)}" for r in node.layout_refused] or ["none"])
    view.row("layout gate", _gate(detail))
    view.row("read at", stamp(now))
    for gpu in detail.gpus:
        view.blank()
        view.row(f"GPU {gpu.index}", gpu.uuid)
        model = gpu.model or "unknown model"
        view.row("model", f"{model} ({gpu.product}), {gpu.memory_mib} MiB", indent=2)
        health = ("healthy" if gpu.healthy else "unhealthy") + ("" if gpu.present else ", not present")
        view.row("health", health, indent=2)
        view.row("MIG mode", _mig_mode(gpu), indent=2)
        view.row("instances", _applied(gpu), indent=2)
        view.row("layout", _layout(gpu, _converged(detail, gpu)), indent=2)
        if gpu.layout_refused is not None:
            view.row("refused", _refusal(gpu.layout_refused), indent=2)
        atoms = [a for a in detail.atoms if a.gpu_id == gpu.id]
        # a GPU held whole (maintenance, a layout change, an endpoint) by one allocation: said once
        whole = _holders_text(atoms[0]) if atoms and atoms[0].holders else []
        whole = whole if all(_holders_text(a) == whole for a in atoms) else []
        if whole:
            view.row("held whole", whole, indent=2)
        view.row("atoms", str(len(atoms)) if atoms else "none", indent=2)
        for atom in atoms:
            uuid = atom.attributes.get("migUuid")
            head = f"{atom.id} {_atom_kind(atom)}" + (f" {uuid}" if uuid else "")
            view.text(f"{head}: {_atom_state(atom, now)}", "    ", "        ")
            for line in [] if whole else _holders_text(atom):
                view.text(line, "      ", "        ")
    orphans = [a for a in detail.atoms if a.gpu_id not in {g.id for g in detail.gpus}]
    for atom in orphans:
        view.text(f"{atom.id} of GPU {atom.gpu_id} (not reported): {_atom_state(atom, now)}", "", "    ")
    return list(view)


def _known(c: Compute) -> list[str]:
    page = c.nodes.list(limit=KNOWN_SHOWN + 1)
    return [str(n["id"]) for n in page.items]


@nodes_app.command("show")
def nodes_show(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One node (admin): its state, GPUs, MIG layout, atoms and who holds them, and its layout
    change under way, as `kubectl describe node` shows a node."""
    from better_compute.client import NotFoundError

    def action(c: Compute) -> NodeDetailPublic | list[str]:
        try:
            return c.nodes.get(node)
        except NotFoundError:
            return _known(c)

    found = call(server, token, as_json, action)
    if isinstance(found, list):
        named = ", ".join(found[:KNOWN_SHOWN]) + (", ..." if len(found) > KNOWN_SHOWN else "")
        message = (
            f"no node {node}; known nodes: {named}" if found else f"no node {node}; the fleet has no nodes"
        )
        if as_json:
            fail_json(
                error_object(codes.NOT_FOUND, message, {"node": node, "knownNodes": found[:KNOWN_SHOWN]})
            )
        stderr().print(f"error: {message}", markup=False)
        raise typer.Exit(1)
    if as_json:
        print_json(found.model_dump(mode="json", by_alias=True))
        return
    console = stdout()
    for line in render(found, console.width):
        console.print(line, markup=False, soft_wrap=True)
