"""MetaStore: schema versions by SCN, append-only and idempotent on replay; the schema CLI."""

from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.cli.main import cli
from drc.core.errors import DrcError, FatalError
from drc.core.events import Column, SchemaChange, TableSchema
from drc.core.scn import SCN
from drc.metastore import (
    DEFAULT_FILENAME,
    HistoryEntry,
    MetaStore,
    MetaStoreCorruptError,
    MetaStoreError,
    SchemaHistoryConflictError,
)


def scn(pos: int, change_id: int = 0, server_id: int = 7, log_index: int = 1) -> SCN:
    return SCN(change_id, server_id, log_index, pos)


def table(*extra: Column, name: str = "orders", db: str = "shop") -> TableSchema:
    columns = (Column("id", "bigint", False), Column("note", "varchar(20)", True, "utf8mb4"))
    return TableSchema(db, name, columns + extra, ("id",))


V1 = table()
V2 = table(Column("amount", "decimal(10,2)", False))
V3 = table(Column("amount", "decimal(12,2)", False))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetaStore]:
    with MetaStore.open(tmp_path / DEFAULT_FILENAME) as opened:
        yield opened


def test_schema_at_picks_the_newest_version_at_or_before_the_scn(store: MetaStore) -> None:
    assert store.record_schema(scn(100), V1) is True
    assert store.record_schema(scn(200), V2) is True
    assert store.schema_at("shop", "orders", scn(99)) is None
    assert store.schema_at("shop", "orders", scn(100)) == V1
    assert store.schema_at("shop", "orders", scn(150)) == V1
    assert store.schema_at("shop", "orders", scn(200)) == V2
    assert store.schema_at("shop", "orders", scn(10**9)) == V2
    assert store.schema_at("shop", "orders", scn(0, change_id=1)) == V2  # after a failover
    assert store.schema_at("shop", "nope", scn(150)) is None


def test_server_id_is_not_compared(store: MetaStore) -> None:
    store.record_schema(scn(100, server_id=7), V1)
    store.record_schema(scn(200, server_id=7), V2)
    assert store.schema_at("shop", "orders", scn(200, server_id=0)) == V2
    assert store.schema_at("shop", "orders", scn(199, server_id=2**32 - 1)) == V1
    assert store.record_schema(scn(200, server_id=9), V2) is False


def test_identical_schema_is_a_no_op(store: MetaStore) -> None:
    assert store.record_schema(scn(100), V1) is True
    assert store.record_schema(scn(100), V1) is False
    assert store.record_schema(scn(300), V1) is False
    assert [e.scn for e in store.history("shop", "orders")] == [scn(100)]


def test_type_nullability_charset_and_key_each_make_a_new_version(store: MetaStore) -> None:
    base = TableSchema("shop", "t", (Column("a", "int", False), Column("b", "text", True)), ("a",))
    variants = [
        TableSchema("shop", "t", (Column("a", "bigint", False), base.columns[1]), ("a",)),
        TableSchema("shop", "t", (Column("a", "bigint", True), base.columns[1]), ("a",)),
        TableSchema(
            "shop", "t", (Column("a", "bigint", True), Column("b", "text", True, "utf8")), ("a",)
        ),
        TableSchema(
            "shop", "t", (Column("a", "bigint", True), Column("b", "text", True, "utf8")), ("b",)
        ),
    ]
    assert store.record_schema(scn(1), base)
    for pos, version in enumerate(variants, start=2):
        assert store.record_schema(scn(pos), version) is True
        assert store.schema_at("shop", "t", scn(pos)) == version


def test_replay_after_reopen_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / DEFAULT_FILENAME
    alter = SchemaChange("shop", "ALTER TABLE orders ADD amount decimal(10,2) NOT NULL")

    def run(store: MetaStore) -> list[bool]:
        results = [store.record_schema(scn(100), V1)]
        store.record_ddl(scn(200), alter)
        results.append(store.record_schema(scn(200), V2))
        store.record_ddl(scn(300), SchemaChange("shop", "DROP TABLE orders"))
        store.record_ddl(scn(400), SchemaChange("shop", "CREATE TABLE orders (id bigint)"))
        results.append(store.record_schema(scn(400), V3))
        return results

    with MetaStore.open(path) as store:
        assert run(store) == [True, True, True]
        before = store.history("shop", "orders")
    with MetaStore.open(path) as store:
        assert run(store) == [False, False, False]
        # Replaying from a resume point in the middle is as quiet.
        assert store.record_schema(scn(200), V2) is False
        store.record_ddl(scn(300), SchemaChange("shop", "DROP TABLE orders"))
        assert store.history("shop", "orders") == before


def test_different_schema_at_an_older_scn_raises(store: MetaStore) -> None:
    store.record_schema(scn(100), V1)
    store.record_schema(scn(200), V2)
    with pytest.raises(SchemaHistoryConflictError, match=r"shop\.orders.*0:7:1:200") as info:
        store.record_schema(scn(150), V3)
    assert isinstance(info.value, FatalError)
    with pytest.raises(SchemaHistoryConflictError):
        store.record_schema(scn(50), V1)  # nothing was there before 100
    with pytest.raises(SchemaHistoryConflictError):
        store.record_ddl(scn(150), SchemaChange("shop", "TRUNCATE orders"))
    assert store.record_schema(scn(150), V1) is False  # what is there: allowed
    assert [e.schema for e in store.history("shop", "orders")] == [V1, V2]


def test_a_history_conflict_names_the_ddl_without_its_literals(store: MetaStore) -> None:
    store.record_schema(scn(100), V1)
    store.record_schema(scn(200), V2)
    statement = "ALTER TABLE orders ADD c INT DEFAULT 'lit-5531', COMMENT 'lit-5532'"
    with pytest.raises(SchemaHistoryConflictError) as info:
        store.record_ddl(scn(150), SchemaChange("shop", statement))
    assert "ALTER TABLE orders ADD c INT DEFAULT '?'" in str(info.value)
    assert "lit-553" not in str(info.value)


def test_a_failed_write_leaves_no_partial_ddl(store: MetaStore) -> None:
    store.record_schema(scn(100), V1)
    store.record_schema(scn(500), table(name="later"))
    with pytest.raises(SchemaHistoryConflictError):
        store.record_ddl(scn(200), SchemaChange("shop", "DROP TABLE orders, later"))
    assert store.schema_at("shop", "orders", scn(300)) == V1


def test_drop_ends_the_table_and_create_starts_a_new_version(store: MetaStore) -> None:
    store.record_schema(scn(100), V1)
    store.record_ddl(scn(200), SchemaChange("shop", "DROP TABLE IF EXISTS `orders`"))
    assert store.schema_at("shop", "orders", scn(199)) == V1
    assert store.schema_at("shop", "orders", scn(200)) is None
    assert store.schema_at("shop", "orders", scn(250)) is None
    store.record_ddl(scn(300), SchemaChange("shop", "CREATE TABLE orders (...)"))
    assert store.schema_at("shop", "orders", scn(300)) is None  # until its schema is recorded
    assert store.record_schema(scn(300), V1) is True  # same columns as before the drop
    assert store.schema_at("shop", "orders", scn(300)) == V1
    kinds = [(e.scn.log_pos, e.kind) for e in store.history("shop", "orders")]
    assert kinds == [(100, "schema"), (200, "drop"), (300, "ddl"), (300, "schema")]


def test_history_is_in_scn_order_with_statements(store: MetaStore) -> None:
    alter = SchemaChange("shop", "ALTER TABLE orders ADD amount decimal(10,2) NOT NULL")
    store.record_schema(scn(100), V1)
    store.record_ddl(scn(200), alter)
    store.record_schema(scn(200), V2)
    store.record_schema(scn(5, change_id=1), V3)  # after a failover, lower log position
    assert store.history("shop", "orders") == [
        HistoryEntry(scn(100), "schema", V1, None),
        HistoryEntry(scn(200), "ddl", None, alter.statement),
        HistoryEntry(scn(200), "schema", V2, None),
        HistoryEntry(scn(5, change_id=1), "schema", V3, None),
    ]


def test_ddl_with_explicit_tables_and_schema_level_ddl(store: MetaStore) -> None:
    store.record_schema(scn(100), V1)
    store.record_schema(scn(100), table(name="skipped"))
    change = SchemaChange("shop", "DROP TABLE orders, skipped")
    store.record_ddl(scn(200), change, tables=[("shop", "orders")])
    assert store.schema_at("shop", "orders", scn(200)) is None
    assert store.schema_at("shop", "skipped", scn(200)) is not None  # not attached: not captured
    store.record_ddl(scn(300), SchemaChange("shop", "CREATE DATABASE other"), tables=[])
    store.record_ddl(scn(300), SchemaChange("shop", "CREATE DATABASE other"), tables=[])
    assert store.history("shop", "") == [
        HistoryEntry(scn(300), "ddl", None, "CREATE DATABASE other")
    ]
    assert ("shop", "") not in store.tables()


def test_rename_moves_the_schema_and_swaps_work(store: MetaStore) -> None:
    a, b = table(name="a"), table(Column("x", "int", True), name="b")
    store.record_schema(scn(100), a)
    store.record_schema(scn(100), b)
    store.record_ddl(scn(200), SchemaChange("shop", "RENAME TABLE a TO tmp, b TO a, tmp TO b"))
    assert store.schema_at("shop", "a", scn(200)).columns == b.columns  # type: ignore[union-attr]
    assert store.schema_at("shop", "b", scn(200)).columns == a.columns  # type: ignore[union-attr]
    assert store.schema_at("shop", "tmp", scn(200)) is None
    assert store.schema_at("shop", "a", scn(199)) == a
    store.record_ddl(scn(300), SchemaChange("shop", "ALTER TABLE a RENAME TO c"))
    assert store.schema_at("shop", "c", scn(300)) == TableSchema("shop", "c", b.columns, ("id",))
    store.record_ddl(scn(400), SchemaChange("shop", "ALTER TABLE c ADD y INT, RENAME TO d"))
    assert store.schema_at("shop", "d", scn(400)) is None  # altered: its schema comes next
    assert store.schema_at("shop", "c", scn(400)) is None


def test_drop_database_ends_its_tables(store: MetaStore) -> None:
    store.record_schema(scn(100), V1)
    store.record_schema(scn(100), table(db="keep"))
    store.record_ddl(scn(200), SchemaChange("", "DROP DATABASE shop"), tables=[])
    store.record_ddl(scn(200), SchemaChange("", "DROP DATABASE shop"), tables=[])
    assert store.schema_at("shop", "orders", scn(200)) is None
    assert store.schema_at("keep", "orders", scn(200)) is not None
    assert [e.kind for e in store.history("shop", "orders")] == ["schema", "drop"]


def test_tables_and_persistence_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / DEFAULT_FILENAME
    with MetaStore.open(path) as store:
        store.record_schema(scn(100), V1)
        store.record_schema(scn(100), table(name="alpha", db="zoo"))
        store.record_ddl(scn(200), SchemaChange("shop", "DROP TABLE orders"))
    with MetaStore.open(path, read_only=True) as store:
        assert store.tables() == [("shop", "orders"), ("zoo", "alpha")]
        assert store.schema_at("shop", "orders", scn(150)) == V1
        assert store.version_at("shop", "orders") == HistoryEntry(
            scn(200), "drop", None, "DROP TABLE orders"
        )


def test_readers_in_other_threads_see_the_writer(store: MetaStore) -> None:
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for pos in range(1, 60):
                store.schema_at("shop", "orders", scn(pos))
                store.history("shop", "orders")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for thread in readers:
        thread.start()
    for pos in range(1, 30):
        store.record_schema(scn(2 * pos), V1 if pos % 2 else V2)
    for thread in readers:
        thread.join()
    assert errors == []
    assert len(store.history("shop", "orders")) == 29


@settings(max_examples=25, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 5), st.sampled_from([V1, V2, V3, None])), min_size=1, max_size=12
    ),
    probes=st.lists(st.integers(0, 80), max_size=10),
)
def test_schema_at_matches_a_simple_model_and_replay_is_idempotent(
    steps: list[tuple[int, TableSchema | None]], probes: list[int]
) -> None:
    """A model: the last version (None = dropped) recorded at a position <= the probe."""
    with tempfile.TemporaryDirectory() as tmp, MetaStore.open(Path(tmp) / "m.sqlite3") as store:
        model: list[tuple[int, TableSchema | None]] = []
        for gap, version in steps:
            model.append(((model[-1][0] if model else 0) + gap, version))

        def play() -> None:
            for at, version in model:
                if version is None:
                    store.record_ddl(scn(at), SchemaChange("shop", "DROP TABLE orders"))
                else:
                    store.record_schema(scn(at), version)

        play()
        recorded = store.history("shop", "orders")
        play()
        assert store.history("shop", "orders") == recorded
        for probe in probes:
            expected = [v for at, v in model if at <= probe]
            assert store.schema_at("shop", "orders", scn(probe)) == (
                expected[-1] if expected else None
            )


def test_corrupt_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / DEFAULT_FILENAME
    path.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(MetaStoreCorruptError, match=str(path)) as info:
        MetaStore.open(path)
    assert "move the file aside" in str(info.value)


def test_foreign_sqlite_file_and_missing_file(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(MetaStoreCorruptError, match="not a DRC metastore"):
        MetaStore.open(other)
    with pytest.raises(MetaStoreError, match="no metastore"):
        MetaStore.open(tmp_path / "missing.sqlite3", read_only=True)
    assert not (tmp_path / "missing.sqlite3").exists()
    with pytest.raises(MetaStoreError, match="does not exist"):
        MetaStore.open(tmp_path / "nodir" / DEFAULT_FILENAME)


def test_closed_store_raises(tmp_path: Path) -> None:
    store = MetaStore.open(tmp_path / DEFAULT_FILENAME)
    store.close()
    store.close()
    with pytest.raises(DrcError, match="closed"):
        store.tables()


# -- CLI ---------------------------------------------------------------------------------------


@pytest.fixture
def buffer_dir(tmp_path: Path) -> Path:
    with MetaStore.open(tmp_path / DEFAULT_FILENAME) as store:
        store.record_schema(scn(100), V1)
        store.record_ddl(scn(200), SchemaChange("shop", "ALTER TABLE orders ADD amount decimal"))
        store.record_schema(scn(200), V2)
    return tmp_path


def test_cli_history_text(buffer_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["schema", "history", "shop.orders", "--dir", str(buffer_dir)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "SCN 0:7:1:100  schema" in out and "SCN 0:7:1:200  ddl" in out
    assert "ALTER TABLE orders ADD amount decimal" in out
    assert out.index("0:7:1:100") < out.index("0:7:1:200")
    for word in ("column", "type", "null", "charset", "note", "varchar(20)", "utf8mb4", "PK"):
        assert word in out
    assert out.count("amount") == 2  # in the statement and in version 2's columns


def test_cli_history_json(buffer_dir: Path) -> None:
    metastore = str(buffer_dir / DEFAULT_FILENAME)
    args = ["schema", "history", "shop.orders", "--metastore", metastore, "--format", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [(e["scn"], e["kind"]) for e in document["history"]] == [
        ("0:7:1:100", "schema"),
        ("0:7:1:200", "ddl"),
        ("0:7:1:200", "schema"),
    ]
    assert document["history"][0]["columns"][1] == {
        "name": "note",
        "type": "varchar(20)",
        "nullable": True,
        "charset": "utf8mb4",
    }
    assert document["history"][2]["primary_key"] == ["id"]


def test_cli_show_at_scn(buffer_dir: Path) -> None:
    base = ["schema", "show", "shop.orders", "--dir", str(buffer_dir)]
    old = CliRunner().invoke(cli, [*base, "--scn", "0:7:1:150"])
    assert old.exit_code == 0, old.output
    assert "0:7:1:100" in old.output and "note" in old.output and "amount" not in old.output
    newest = CliRunner().invoke(cli, [*base, "--format", "json"])
    assert newest.exit_code == 0, newest.output
    document = json.loads(newest.output)
    assert document["version_scn"] == "0:7:1:200"
    assert [c["name"] for c in document["columns"]] == ["id", "note", "amount"]
    before = CliRunner().invoke(cli, [*base, "--scn", "0:7:1:99"])
    assert before.exit_code == 1 and "no schema of shop.orders" in before.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "orders"], "DB.TABLE"),
        (["show", "shop.orders", "--scn", "1:2:3"], "SCN"),
        (["history", "a.b.c"], "DB.TABLE"),
    ],
)
def test_cli_rejects_malformed_names_and_scns(
    buffer_dir: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(cli, ["schema", *args, "--dir", str(buffer_dir)])
    assert result.exit_code == 2 and message in result.output


def test_cli_needs_one_location_and_explains_unknown_tables(buffer_dir: Path) -> None:
    neither = CliRunner().invoke(cli, ["schema", "history", "shop.orders"])
    assert neither.exit_code == 2 and "--dir" in neither.output
    unknown = CliRunner().invoke(cli, ["schema", "history", "shop.nope", "--dir", str(buffer_dir)])
    assert unknown.exit_code == 1 and "known tables: shop.orders" in unknown.output
    missing = CliRunner().invoke(cli, ["schema", "show", "a.b", "--dir", str(buffer_dir / "x")])
    assert missing.exit_code == 1 and "no metastore" in missing.output


def test_damaged_pages_and_bad_rows_are_reported_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / DEFAULT_FILENAME
    with MetaStore.open(path) as store:
        for pos in range(1, 200):
            store.record_schema(scn(pos), table(Column(f"c{pos}", "int", True)))
    data = bytearray(path.read_bytes())
    data[4096 * 2 : 4096 * 2 + 2000] = b"\x5a" * 2000
    damaged = tmp_path / "damaged.sqlite3"
    damaged.write_bytes(bytes(data))
    with pytest.raises(MetaStoreCorruptError, match="damaged.sqlite3"):
        MetaStore.open(damaged)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE history SET columns = '{not json' WHERE id = 1")
    conn.close()
    with MetaStore.open(path) as store, pytest.raises(MetaStoreCorruptError, match="shop.orders"):
        store.history("shop", "orders")


def test_a_follower_copy_of_the_history_is_identical_and_idempotent(
    store: MetaStore, tmp_path: Path
) -> None:
    store.record_schema(scn(10), V1)
    store.record_ddl(scn(20), SchemaChange("shop", "ALTER TABLE orders ADD amount decimal(10,2)"))
    store.record_schema(scn(20), V2)
    store.record_ddl(scn(30), SchemaChange("shop", "CREATE DATABASE other"))
    with MetaStore.open(tmp_path / "copy.sqlite3") as copy:
        assert copy.import_entries(store.entries_between(SCN.ZERO, scn(20))) == 3
        assert copy.import_entries(store.entries_between(scn(10), scn(30))) == 1  # overlap
        assert copy.entries_between(SCN.ZERO, scn(99)) == store.entries_between(SCN.ZERO, scn(99))
        assert copy.history("shop", "orders") == store.history("shop", "orders")
        assert copy.schema_at("shop", "orders", scn(25)) == V2
