"""A trace replayed on MIG (`better-compute replay --trace POD_CSV --as-mig MODEL`; docs/traces.md).

The trace's own GPU models (G1-G3, T4, P100, V100, A10) cannot be partitioned, so under this mapping
every GPU of the node list stands in as a GPU of one MIG-capable catalog model, and each task asks for
the cheapest instance that gives its share (`traces.mig_requests`). What MIG layout those GPUs have is
the user's (`--mig-layout`), or chosen here from the demand (`default_layouts`): the fleet's instances
then follow the mix of profiles the tasks ask for.

The choice is a greedy pass over the nodes in the node list's order (a node's GPUs share one layout:
a node's `migLayout` is one for all its GPUs). The demand is counted as instances per profile, one
per task asking for a share, k per task asking for k whole GPUs (how long each holds it is not
weighed). Each node takes the model's maximal layout (`maximal_layouts`: none a plain profile could be
added to) that serves the most of what is still unserved, counted in compute slices:
`sum over profiles of min(unserved instances, node GPUs x layout's instances) x compute slices`;
ties go to the layout with more compute slices of profiles the demand asks for at all, then to the
first in `maximal_layouts`' order. What it serves is taken off the unserved; when nothing is left
unserved, the next node starts over on the whole demand, so a fleet larger than the demand repeats
its mix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from better_compute.domain import catalog
from better_compute.domain.catalog import GpuModel, layouts
from better_compute.domain.endpoints.endpoint_sizing import maximal_layouts
from better_compute.domain.kernel.errors import InvalidInput, NotFound
from better_compute.domain.ops.traces import TraceNode, TraceTask, mig_requests

__all__ = [
    "MigLayouts",
    "default_layouts",
    "given_layout",
    "layout_text",
    "mig_model",
    "profile_mix",
]


def mig_model(name: str) -> GpuModel:
    """The catalog model `--as-mig` names; refused when the catalog does not know it or it cannot be
    partitioned, listing the models that can."""
    capable = ", ".join(m.id for m in catalog.mig_models())
    try:
        model = catalog.get_model(name)
    except NotFound:
        raise InvalidInput(
            f"unknown GPU model {name!r}: --as-mig takes a MIG-capable catalog model ({capable})",
            {"model": name},
        ) from None
    if not model.mig_capable or not model.profiles:
        raise InvalidInput(
            f"{model.id} does not support MIG: --as-mig takes a MIG-capable catalog model ({capable})",
            {"model": model.id},
        )
    return model


def given_layout(text: str, model: GpuModel) -> str:
    """`--mig-layout`, checked to place on `model` and to turn MIG on, in its canonical spelling."""
    placed = layouts.validate(text, model)
    if not placed.mig_enabled:
        raise InvalidInput(
            f"layout {text} turns MIG off: a MIG replay needs instances to book", {"layout": text}
        )
    return layouts.format_layout(placed.layout)


def profile_mix(tasks: Sequence[TraceTask], model: GpuModel) -> dict[str, int]:
    """Instances per profile the tasks ask for under the MIG mapping (a task of k whole GPUs asks
    for k whole-GPU instances), largest profile first."""
    mix: Counter[str] = Counter()
    for task in tasks:
        for line in mig_requests(task, model):
            (profile,) = line.selector.match_expressions[0].values
            mix[profile] += line.count
    return dict(sorted(mix.items(), key=lambda item: catalog.profile_name_key(item[0])))


def layout_text(counts: Sequence[tuple[str, int]], model: GpuModel) -> str:
    """A layout's counts as its user would write it: `all-<profile>` when it is as many of one
    profile as fit, else `mixed:...` (largest first)."""
    if len(counts) == 1:
        ((profile, count),) = counts
        if count == layouts.fit_count(model, profile):
            return f"all-{profile}"
    return layouts.format_layout(layouts.Layout.mixed(counts))


@dataclass(frozen=True)
class MigLayouts:
    """Each GPU node's layout, with the one its pool names (the layout most GPUs have; a node with
    another keeps its own)."""

    by_node: Mapping[str, str]
    pool_layout: str

    def gpus_by_layout(self, nodes: Sequence[TraceNode]) -> dict[str, int]:
        """GPUs per layout, most first (ties: the layout met first in the node list)."""
        gpus: Counter[str] = Counter()
        for node in nodes:
            if node.name in self.by_node:
                gpus[self.by_node[node.name]] += node.gpus
        return dict(sorted(gpus.items(), key=lambda item: -item[1]))

    @classmethod
    def of(cls, by_node: Mapping[str, str], nodes: Sequence[TraceNode]) -> MigLayouts:
        first = cls(by_node, "")
        mix = first.gpus_by_layout(nodes)
        return cls(by_node, next(iter(mix), "all-disabled"))


def default_layouts(tasks: Sequence[TraceTask], nodes: Sequence[TraceNode], model: GpuModel) -> MigLayouts:
    """Each GPU node's layout, chosen so the fleet's instances follow the demand's profile mix (the
    greedy pass of this module's docstring). A demand asking for no GPU gives every node the
    model's whole-GPU layout."""
    mix = profile_mix(tasks, model)
    slices = {p.name: p.compute_slices for p in model.profiles}
    candidates = maximal_layouts(model.id)
    if not mix:
        whole = max((p for p in model.profiles if not p.attribute), key=lambda p: p.compute_slices)
        mix = {whole.name: 1}
    unserved = dict(mix)
    by_node: dict[str, str] = {}
    for node in nodes:
        if not node.gpus:
            continue
        if not any(unserved.values()):
            unserved = dict(mix)

        best, best_rank = candidates[0], (-1, -1)
        for counts in candidates:  # the first of equals is kept: `maximal_layouts`' order
            served = sum(min(unserved.get(p, 0), node.gpus * n) * slices[p] for p, n in counts)
            useful = sum(n * slices[p] for p, n in counts if p in mix)
            if (served, useful) > best_rank:
                best, best_rank = counts, (served, useful)
        for profile, count in best:
            if profile in unserved:
                unserved[profile] = max(0, unserved[profile] - node.gpus * count)
        by_node[node.name] = layout_text(best, model)
    return MigLayouts.of(by_node, nodes)
