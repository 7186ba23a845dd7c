"""The mig-layout unit's plan for one GPU: idle GPUs reach their layout, held ones are left alone."""

from __future__ import annotations

from dataclasses import replace

from better_compute.bcd.fake import FakeNode
from better_compute.domain.catalog import get_model
from better_compute.domain.fleet.inventory import GpuReport
from better_compute.domain.fleet.mig_plan import converged, plan_gpu, plan_node

H100 = get_model("H100-80GB")


def _gpu(layout: str | None) -> GpuReport:
    node = FakeNode.build("n", "H100-80GB", 1)
    if layout is not None:
        node.apply_layout(layout)
    return node.report().gpus[0]


def test_an_idle_gpu_is_repartitioned_largest_first_keeping_what_stays() -> None:
    gpu = _gpu("mixed:3g.40gb+4x1g.10gb")
    plan = plan_gpu(gpu, H100, "mixed:3g.40gb+2x2g.20gb", held=False)
    assert plan.action == "repartition"
    kept = [i for i in gpu.mig_instances if i.profile == "3g.40gb"]
    assert kept and kept[0].gi_id not in plan.destroy  # the 3g.40gb is where the new layout wants it
    assert sorted(plan.destroy) == sorted(i.gi_id for i in gpu.mig_instances if i.profile == "1g.10gb")
    assert [c.profile for c in plan.create] == ["2g.20gb", "2g.20gb"]


def test_a_gpu_already_at_its_layout_is_kept() -> None:
    assert plan_gpu(_gpu("all-1g.10gb"), H100, "all-1g.10gb", held=False).action == "keep"


def test_a_held_gpu_keeps_its_layout_whatever_it_is_asked() -> None:
    plan = plan_gpu(_gpu("all-1g.10gb"), H100, "all-7g.80gb", held=True)
    assert (plan.action, plan.destroy, plan.create) == ("held", (), ())


def test_turning_mig_on_or_off_is_a_mode_change_awaiting_a_reset() -> None:
    assert plan_gpu(_gpu(None), H100, "all-1g.10gb", held=False).action == "enable-mig"
    assert plan_gpu(_gpu("all-1g.10gb"), H100, "all-disabled", held=False).action == "disable-mig"
    assert plan_gpu(_gpu(None), H100, "all-disabled", held=False).action == "keep"


def test_a_gpu_without_mig_is_never_asked_to_split() -> None:
    l40s = FakeNode.build("l", "L40S-48GB", 1).report().gpus[0]
    plan = plan_gpu(l40s, get_model("L40S-48GB"), "all-1g.10gb", held=False)
    assert plan.action == "not-mig-capable"


def test_a_node_is_planned_gpu_by_gpu_for_the_gpus_its_spec_names() -> None:
    node = FakeNode.build("n", "H100-80GB", 3)
    node.apply_layout("all-1g.10gb")
    gpus = [(g, H100) for g in node.report().gpus]
    layout_of = {gpus[0][0].uuid: "all-3g.40gb", gpus[1][0].uuid: "all-3g.40gb"}
    plans = plan_node(gpus, layout_of, held_gpus={gpus[1][0].uuid})
    assert [(p.gpu_uuid, p.action) for p in plans] == [
        (gpus[0][0].uuid, "repartition"),
        (gpus[1][0].uuid, "held"),
    ]


def test_a_gpu_is_converged_when_the_mig_layout_unit_has_nothing_left_to_do_to_it() -> None:
    assert converged(_gpu("all-1g.10gb"), H100, "all-1g.10gb")
    assert converged(_gpu(None), H100, "all-disabled")
    assert not converged(_gpu(None), H100, "all-1g.10gb")  # whole, told to split
    assert not converged(_gpu("all-3g.40gb"), H100, "all-1g.10gb")  # another layout
    assert not converged(_gpu("all-1g.10gb"), H100, "all-disabled")  # split, told whole
    assert converged(_gpu("all-3g.40gb"), H100, None)  # told none: it keeps what it has
    assert converged(_gpu(None), None, "all-1g.10gb")  # a model the catalog does not know: left alone
    l40s = FakeNode.build("l", "L40S-48GB", 1).report().gpus[0]
    assert converged(l40s, get_model("L40S-48GB"), "all-1g.10gb")  # no MIG: it stays whole
    assert not converged(_gpu(None), H100, "all-1g.5gb")  # a profile the H100 lacks: never reached
    waiting = replace(_gpu(None), mig_mode_pending=True)
    assert not converged(waiting, H100, "all-1g.10gb") and not converged(waiting, None, "all-1g.10gb")


def test_a_gpu_is_re_cut_around_its_held_instances_only_when_the_layout_keeps_them() -> None:
    gpu = _gpu("mixed:4g.40gb+3x1g.10gb")
    kept = next(i.gi_id for i in gpu.mig_instances if (i.profile, i.placement_start) == ("1g.10gb", 4))
    big = next(i.gi_id for i in gpu.mig_instances if i.profile == "4g.40gb")
    plan = plan_gpu(gpu, H100, "all-1g.10gb", held=False, held_instances={kept})
    assert plan.action == "repartition" and plan.destroy == (big,)
    assert [(c.profile, c.start) for c in plan.create] == [("1g.10gb", s) for s in range(4)]
    assert plan_gpu(gpu, H100, "all-1g.10gb", held=False, held_instances={big}).action == "held"
    assert plan_gpu(gpu, H100, "all-disabled", held=False, held_instances={kept}).action == "held"
