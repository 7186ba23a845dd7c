"""Migrations build exactly the schema the code uses, and PostgreSQL itself refuses double bookings."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from better_compute.storage.kernel import migrate
from better_compute.storage.kernel.tables import metadata
from better_compute.storage.store import Store


def test_migrated_schema_matches_the_tables(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_downgrade_to_base_and_up_again(store: Store) -> None:
    migrate.downgrade(store.engine, "base")
    assert "bookings" not in inspect(store.engine).get_table_names()
    migrate.upgrade(store.engine)
    assert {"bookings", "atoms", "events", "pools"} <= set(inspect(store.engine).get_table_names())


@pytest.mark.postgres
def test_postgres_exclusion_constraint_refuses_overlap_without_any_application_code(
    pg_store_url: str,
) -> None:
    store = Store.open(pg_store_url, migrate_schema=False)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM bookings WHERE allocation_id LIKE 'raw-%'"))
            conn.execute(
                text(
                    "INSERT INTO clusters (id, region, residency, created_at) VALUES ('raw-c', 'r', '[]', :t) ON CONFLICT DO NOTHING"
                ),
                {"t": now},
            )
            conn.execute(
                text(
                    "INSERT INTO nodes (id, cluster_id, created_at) VALUES ('raw-n', 'raw-c', :t) ON CONFLICT DO NOTHING"
                ),
                {"t": now},
            )
            conn.execute(
                text(
                    "INSERT INTO gpus (id, node_id, gpu_index, product, memory_mib, nvlink_peers, healthy, present,"
                    " mig_mode_current, mig_mode_pending, mig_instances, updated_at) VALUES ('raw-g', 'raw-n', 0, 'x',"
                    " 1, '[]', true, true, false, false, '[]', :t) ON CONFLICT DO NOTHING"
                ),
                {"t": now},
            )
            conn.execute(
                text(
                    "INSERT INTO atoms (id, gpu_id, node_id, class, key, bookable, partition_pending, attributes)"
                    " VALUES ('atm-raw', 'raw-g', 'raw-n', 'gpu', 'gpu', true, false, '{}') ON CONFLICT DO NOTHING"
                )
            )
        insert = text(
            "INSERT INTO bookings (atom_id, gpu_id, class, allocation_id, starts_at, ends_at, state, created_at)"
            " VALUES ('atm-raw', 'raw-g', 'gpu', :id, :s, :e, 'live', :s)"
        )
        with store.engine.begin() as conn:
            conn.execute(insert, {"id": "raw-1", "s": "2026-01-01T00:00Z", "e": "2026-01-01T02:00Z"})
        with pytest.raises(Exception) as err, store.engine.begin() as conn:
            conn.execute(insert, {"id": "raw-2", "s": "2026-01-01T01:00Z", "e": None})
        assert "bookings_no_overlap" in str(err.value)
        with store.engine.begin() as conn:  # adjacent windows do not overlap
            conn.execute(insert, {"id": "raw-3", "s": "2026-01-01T02:00Z", "e": "2026-01-01T03:00Z"})
    finally:
        with store.engine.begin() as conn:
            for table, column in (
                ("bookings", "atom_id"),
                ("atoms", "id"),
                ("gpus", "id"),
                ("nodes", "id"),
                ("clusters", "id"),
            ):
                conn.execute(text(f"DELETE FROM {table} WHERE {column} LIKE '%raw%'"))
        store.close()


def test_capacity_history_starts_with_one_open_period_per_present_gpu(store: Store) -> None:
    """A database from before the history (revision 0006) gets each GPU's state as it is now."""
    from fractions import Fraction

    from better_compute.domain.kernel.timewin import Window
    from better_compute.domain.ops.fleet import parse_fleet
    from better_compute.entrypoints.fleet import load_fleet
    from tests.builders import T0, small_fleet

    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="mixed:3g.40gb+2x2g.20gb")), T0)
    with store.read() as tx:
        recorded = tx.gpu_states.during(None, Window(T0))
    migrate.downgrade(store.engine, "0006")
    assert "gpu_states" not in inspect(store.engine).get_table_names()
    migrate.upgrade(store.engine)
    with store.read() as tx:
        rebuilt = tx.gpu_states.during(None, Window(T0))
    assert sorted(rebuilt, key=lambda p: p.state.gpu_id) == sorted(recorded, key=lambda p: p.state.gpu_id)
    assert len(rebuilt) == 2 and all(p.span == Window(T0) and p.state.pool_id == "p1" for p in rebuilt)
    assert sorted(s for _, s in rebuilt[0].state.shares) == [
        Fraction(2, 7),
        Fraction(2, 7),
        Fraction(3, 7),
        Fraction(1),
    ]


def test_policies_from_before_subjects_become_their_tenants(store: Store) -> None:
    """A database from before placement constraints (revision 0015) keeps its policies: each is its
    tenant's, with no constraints, at generation 1; and going down drops only what it cannot hold."""
    from dataclasses import replace

    from better_compute.domain.ops.fleet import parse_fleet
    from better_compute.domain.placement.constraints import Constraints
    from better_compute.domain.tenancy.iam import Policy
    from better_compute.entrypoints.fleet import load_fleet
    from tests.builders import T0, small_fleet

    load_fleet(store, parse_fleet(small_fleet(nodes=1)), T0)
    migrate.downgrade(store.engine, "0015")
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO policies (id, name, tenant_id, pool_id, limits, created_at)"
                " VALUES ('pol-old', 'two-gpus', 'acme', NULL, '{\"gpuCount\": 2}', :t)"
            ),
            {"t": T0},
        )
    migrate.upgrade(store.engine)
    with store.read() as tx:
        (old,) = tx.policies.find("acme", None)
        assert (old.subject_type, old.subject_id, old.generation, old.gpu_count) == ("tenant", "acme", 1, 2)
        assert old.constraints == Constraints()
    fenced = Policy(
        "us-only",
        None,
        id="pol-c",
        created_at=T0,
        constraints=Constraints(allowed_regions=("us-east",)),
        subject_type="cluster",
        subject_id="c1",
    )
    with store.begin() as tx:
        assert tx.policies.add(fenced)
        # A cluster's policy names are unique though it has no tenant (NULL never collides).
        assert not tx.policies.add(replace(fenced, id="pol-d"))
    migrate.downgrade(store.engine, "0015")
    with store.engine.connect() as conn:
        assert [r[0] for r in conn.execute(text("SELECT id FROM policies"))] == ["pol-old"]
    migrate.upgrade(store.engine)


def test_deployments_from_before_replica_numbering_continue_past_every_index_the_ledger_has_seen(
    store: Store,
) -> None:
    """Before revision 0018 a deployment reused the index of a replica removed earlier; the upgrade
    numbers each deployment onward from the highest index its bookings show, not only its replicas
    left."""
    from tests.api.test_workloads import World, shape

    world = World(store)
    made = world.create({"name": "w", "shape": shape(1), "replicas": 3, "cluster": "sjc-1"})
    down = world.http.post(f"/v1/workloads/{made['id']}/scale", json={"replicas": 1}, headers=world.admin)
    assert down.status_code == 200, down.text
    (dep,) = down.json()["deployments"]
    migrate.downgrade(store.engine, "0017")
    migrate.upgrade(store.engine)
    with store.read() as tx:
        (again,) = tx.workloads.deployments_of([made["id"]])[made["id"]]
    assert again.id == dep["id"]
    assert again.next_replica == 3  # r1 and r2 are in the ledger, though only r0 is left


@pytest.mark.postgres
def test_the_family_fence_migration_could_never_pass_a_ledger_holding_past_parent_child_pairs(
    pg_store_url: str,
) -> None:
    """Revision 0025 fences a GPU's whole against its parts. A ledger written before it may hold a
    GPU booked whole and in parts at once in its history (the defect the fence ends), and nothing
    ends a booking already over: the upgrade leaves history as it is and fences what is not over.
    A pair still to come is named and stops the upgrade until one of it is ended."""
    store = Store.open(pg_store_url, migrate_schema=False)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    insert = text(
        "INSERT INTO bookings (atom_id, gpu_id, class, allocation_id, starts_at, ends_at, state, created_at)"
        " VALUES (:atom, 'fam-g', :cls, :id, :s, :e, 'live', :s)"
    )
    try:
        migrate.downgrade(store.engine, "0024")
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO clusters (id, region, residency, created_at) VALUES ('fam-c', 'r', '[]', :t)"
                ),
                {"t": t},
            )
            conn.execute(
                text("INSERT INTO nodes (id, cluster_id, created_at) VALUES ('fam-n', 'fam-c', :t)"), {"t": t}
            )
            conn.execute(
                text(
                    "INSERT INTO gpus (id, node_id, gpu_index, product, memory_mib, nvlink_peers, healthy, present,"
                    " mig_mode_current, mig_mode_pending, mig_instances, updated_at) VALUES ('fam-g', 'fam-n', 0,"
                    " 'x', 1, '[]', true, true, false, false, '[]', :t)"
                ),
                {"t": t},
            )
            for atom, cls, key in (("atm-fam-whole", "gpu", "gpu"), ("atm-fam-part", "gpu.mig", "mig:1.0")):
                conn.execute(
                    text(
                        "INSERT INTO atoms (id, gpu_id, node_id, class, key, bookable, partition_pending, attributes)"
                        " VALUES (:id, 'fam-g', 'fam-n', :cls, :key, true, false, '{}')"
                    ),
                    {"id": atom, "cls": cls, "key": key},
                )
            past = {"s": t, "e": datetime(2026, 1, 2, tzinfo=UTC)}
            conn.execute(insert, {"atom": "atm-fam-whole", "cls": "gpu", "id": "fam-1", **past})
            conn.execute(insert, {"atom": "atm-fam-part", "cls": "gpu.mig", "id": "fam-2", **past})
            ahead = {"s": datetime(2099, 1, 1, tzinfo=UTC), "e": datetime(2099, 1, 2, tzinfo=UTC)}
            conn.execute(insert, {"atom": "atm-fam-whole", "cls": "gpu", "id": "fam-3", **ahead})
            conn.execute(insert, {"atom": "atm-fam-part", "cls": "gpu.mig", "id": "fam-4", **ahead})
        with pytest.raises(RuntimeError, match=r"fam-3.*fam-4"):
            migrate.upgrade(store.engine)
        with store.engine.begin() as conn:  # one of the pair to come is ended (cancelled)
            conn.execute(text("UPDATE bookings SET state = 'cancelled' WHERE allocation_id = 'fam-4'"))
        migrate.upgrade(store.engine)  # the pair in history stays, and does not stop it
        with pytest.raises(Exception, match="bookings_no_family_overlap"), store.engine.begin() as conn:
            conn.execute(insert, {"atom": "atm-fam-part", "cls": "gpu.mig", "id": "fam-5", **ahead})
    finally:
        migrate.upgrade(store.engine)
        with store.engine.begin() as conn:
            for table, column in (
                ("bookings", "gpu_id"),
                ("atoms", "gpu_id"),
                ("gpus", "id"),
                ("nodes", "id"),
                ("clusters", "id"),
            ):
                conn.execute(text(f"DELETE FROM {table} WHERE {column} LIKE 'fam-%'"))
        migrate.downgrade(store.engine, "0024")  # the fence again as a ledger without history has it
        migrate.upgrade(store.engine)
        store.close()


def test_mig_atoms_and_every_row_naming_them_take_their_slice_on_upgrade(store: Store) -> None:
    """Revision 0027: a MIG atom keyed by the driver's GI/CI ids takes the key and id of its slice
    (its GPU's reported instance at those ids), and its bookings, its capacity history's shares and
    an endpoint copy's span follow it; an absent atom whose placement is unknown keeps its id."""
    from better_compute.domain.fleet.atoms import atom_id_for
    from better_compute.domain.ops.fleet import parse_fleet
    from better_compute.entrypoints.fleet import load_fleet
    from tests.builders import T0, small_fleet

    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="mixed:4g.40gb+3x1g.10gb")), T0)
    migrate.downgrade(store.engine, "0026")
    with store.engine.begin() as conn:
        found = conn.execute(
            text('SELECT id, gpu_id, "key", attributes FROM atoms WHERE "class" = \'gpu.mig\'')
        )
        mig = [(r[0], r[1], r[2], r[3] if isinstance(r[3], dict) else json.loads(r[3])) for r in found]
        old_id, gpu_id, old_key, attrs = next(m for m in mig if m[3]["migProfile"] == "1g.10gb")
        reported = conn.execute(text("SELECT mig_instances FROM gpus WHERE id = :g"), {"g": gpu_id}).scalar()
        reported = reported if isinstance(reported, list) else json.loads(reported)
        [inst] = [i for i in reported if (i["giId"], i["ciId"]) == (attrs["giId"], attrs["ciId"])]
        conn.execute(
            text(
                "INSERT INTO bookings (atom_id, gpu_id, class, tenant_id, allocation_id, starts_at, ends_at,"
                " state, created_at) VALUES (:a, :g, 'gpu.mig', 'acme', 'rsv-old', :s, NULL, 'live', :s)"
            ),
            {"a": old_id, "g": gpu_id, "s": T0},
        )
        conn.execute(
            text(
                'INSERT INTO copy_spans (tenant_id, endpoint, component, "copy", node_id, atom_id, gpu_share,'
                " started_at) VALUES ('acme', 'e', 'c', 0, 'n', :a, '1/7', :s)"
            ),
            {"a": old_id, "s": T0},
        )
        gone = atom_id_for(gpu_id, "mig:9.0")  # an instance gone since, of a profile placed anywhere
        conn.execute(
            text(
                'INSERT INTO atoms (id, gpu_id, node_id, pool_id, class, "key", bookable, partition_pending,'
                " attributes, present) VALUES (:a, :g, 'n', NULL, 'gpu.mig', 'mig:9.0', false, false, :attrs,"
                " false)"
            ),
            {"a": gone, "g": gpu_id, "attrs": json.dumps({"migProfile": "1g.10gb", "giId": 9, "ciId": 0})},
        )
        shares = conn.execute(
            text("SELECT shares FROM gpu_states WHERE gpu_id = :g AND valid_to IS NULL"), {"g": gpu_id}
        ).scalar()
        assert old_id in (shares if isinstance(shares, dict) else json.loads(shares))
    migrate.upgrade(store.engine)
    new_key = f"mig:1g.10gb@{inst['placementStart']}"
    new_id = atom_id_for(gpu_id, new_key)
    with store.engine.connect() as conn:
        assert conn.execute(text('SELECT "key" FROM atoms WHERE id = :a'), {"a": new_id}).scalar() == new_key
        assert conn.execute(text("SELECT count(*) FROM atoms WHERE id = :a"), {"a": old_id}).scalar() == 0
        booked = conn.execute(text("SELECT atom_id FROM bookings WHERE allocation_id = 'rsv-old'")).scalar()
        span = conn.execute(text("SELECT atom_id FROM copy_spans WHERE endpoint = 'e'")).scalar()
        shares = conn.execute(
            text("SELECT shares FROM gpu_states WHERE gpu_id = :g AND valid_to IS NULL"), {"g": gpu_id}
        ).scalar()
        kept = conn.execute(text('SELECT "key" FROM atoms WHERE id = :a'), {"a": gone}).scalar()
    assert old_key.startswith("mig:") and booked == span == new_id
    assert new_id in (shares if isinstance(shares, dict) else json.loads(shares))
    assert kept == "mig:9.0"


def test_mig_atom_rekey_never_gives_a_slice_an_atom_of_its_gpu_already_has(store: Store) -> None:
    """Revision 0027 run again after a downgrade: an absent atom kept at its GI/CI ids (`mig:9.0`) and
    a slice-keyed atom that the downgrade could not take back to `mig:9.0` (the driver gave its slice
    GI id 9 since) both name the same slice; the upgrade leaves the absent one as it is rather than
    writing a second atom of the slice (which failed on the atoms' primary key)."""
    from better_compute.domain.fleet.atoms import atom_id_for
    from better_compute.domain.ops.fleet import parse_fleet
    from better_compute.entrypoints.fleet import load_fleet
    from tests.builders import T0, small_fleet

    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="mixed:4g.40gb+3x1g.10gb")), T0)
    migrate.downgrade(store.engine, "0026")
    with store.engine.begin() as conn:
        gpu_id = conn.execute(text("SELECT gpu_id FROM atoms WHERE \"class\" = 'gpu.mig' LIMIT 1")).scalar()
        conn.execute(
            text(
                'INSERT INTO atoms (id, gpu_id, node_id, pool_id, class, "key", bookable, partition_pending,'
                " attributes, present) VALUES (:a, :g, 'n', NULL, 'gpu.mig', 'mig:9.0', false, false, :attrs,"
                " false)"
            ),
            {
                "a": atom_id_for(gpu_id, "mig:9.0"),
                "g": gpu_id,
                "attrs": json.dumps({"migProfile": "1g.10gb", "giId": 9, "ciId": 0}),
            },
        )
    migrate.upgrade(store.engine)
    with store.engine.begin() as conn:  # the driver renumbers a present 1g.10gb slice to GI id 9
        atom_id, key, raw = conn.execute(
            text(
                'SELECT id, "key", attributes FROM atoms WHERE gpu_id = :g AND "key" LIKE \'mig:1g%\' AND present'
            ),
            {"g": gpu_id},
        ).first()  # type: ignore[misc]
        attrs = raw if isinstance(raw, dict) else json.loads(raw)
        old_gi = attrs["giId"]
        attrs["giId"] = 9
        cast = "CAST(:a AS JSON)" if store.dialect == "postgresql" else ":a"
        conn.execute(
            text(f"UPDATE atoms SET attributes = {cast} WHERE id = :i"),
            {"a": json.dumps(attrs), "i": atom_id},
        )
        reported = conn.execute(text("SELECT mig_instances FROM gpus WHERE id = :g"), {"g": gpu_id}).scalar()
        reported = reported if isinstance(reported, list) else json.loads(reported)
        for inst in reported:
            if inst["giId"] == old_gi:
                inst["giId"] = 9
        cast = "CAST(:m AS JSON)" if store.dialect == "postgresql" else ":m"
        conn.execute(
            text(f"UPDATE gpus SET mig_instances = {cast} WHERE id = :g"),
            {"m": json.dumps(reported), "g": gpu_id},
        )
    migrate.downgrade(store.engine, "0026")
    migrate.upgrade(store.engine)
    with store.engine.connect() as conn:
        keys = [r[0] for r in conn.execute(text('SELECT "key" FROM atoms WHERE gpu_id = :g'), {"g": gpu_id})]
    assert keys.count(key) == 1 and "mig:9.0" in keys
