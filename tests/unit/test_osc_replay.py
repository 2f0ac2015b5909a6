"""An online schema change tool's ALTER replayed instead of its copy: the clause extraction
(drc.core.ddl.alter_clauses), the pending state's transitions (drc.core.osc_replay), the filter
stage that keeps them in drc.osc_pending (drc.apply.osc_pending), the trigger guard's and the
config's side of the mode; the real pt-online-schema-change is in
tests/integration/test_online_schema_change.py."""

from __future__ import annotations

from typing import Any

import pytest

from drc.apply.osc_pending import TABLE, ReplayOnlineSchemaChange, image, parse, select
from drc.apply.service import build_parts
from drc.catchup.executor import Job, _TableNames, ddl_chain
from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.core.ddl import alter_clauses
from drc.core.errors import FatalError
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.online_schema_change import GH_OST, PT_OSC, with_shadows
from drc.core.osc_replay import (
    COPYING,
    CUT,
    Alter,
    Pending,
    UnexpectedChange,
    replay,
)
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.mysql.driver import TargetSettings
from tests.support.config import with_channels
from tests.support.guard_session import GuardSession, guarded


def _scn(n: int) -> SCN:
    return SCN(1, 1, 1, n)


def _txn(n: int, *statements: str, changes: tuple[RowChange, ...] = ()) -> Transaction:
    ddl = tuple(SchemaChange("db", s) for s in statements)
    return Transaction(_scn(n), 1, None, 0, changes, ddl)


def _row(table: str, key: int = 1) -> RowChange:
    return RowChange("db", table, Op.INSERT, None, {"id": key})


PT_OSC_RUN = [
    "CREATE TABLE `db`.`_t_new` (`id` int(11) NOT NULL, PRIMARY KEY (`id`))",
    "ALTER TABLE `db`.`_t_new` ADD COLUMN extra INT NOT NULL DEFAULT 7",
    "CREATE DEFINER=`root`@`%` TRIGGER `pt_osc_db_t_del` AFTER DELETE ON `db`.`t` FOR EACH ROW "
    "DELETE IGNORE FROM `db`.`_t_new` WHERE `db`.`_t_new`.`id` <=> OLD.`id`",
    "RENAME TABLE `db`.`t` TO `db`.`_t_old`, `db`.`_t_new` TO `db`.`t`",
    "DROP TABLE IF EXISTS `db`.`_t_old`",
    "DROP TRIGGER IF EXISTS `db`.`pt_osc_db_t_del`",
]
GH_OST_RUN = [
    "create /* gh-ost */ table `db`.`_t_ghc` (id bigint auto_increment, primary key(id))",
    "create /* gh-ost */ table `db`.`_t_gho` like `db`.`t`",
    "alter /* gh-ost */ table `db`.`_t_gho` add column extra int not null default 7",
    "create /* gh-ost */ table `db`.`_t_del` (id int auto_increment primary key)",
    "drop /* gh-ost */ table if exists `db`.`_t_del`",
    "rename /* gh-ost */ table `db`.`t` to `db`.`_t_del`, `db`.`_t_gho` to `db`.`t`",
    "drop /* gh-ost */ table if exists `db`.`_t_del`",
    "drop /* gh-ost */ table if exists `db`.`_t_ghc`",
]


def _run(statements: list[str], entries: dict[Any, Pending] | None = None) -> list[Any]:
    """Each statement through :func:`replay` in turn: what each left to run."""
    now = dict(entries or {})
    kept = []
    for n, statement in enumerate(statements, start=10):
        out = replay(now, _txn(n, statement))
        for key, entry in out.updates.items():
            if entry is None:
                now.pop(key, None)
            else:
                now[key] = entry
        kept.append(out.ddl)
    assert now == {}, "the run left an entry behind"
    return kept


# ------------------------------------------------------------------ the clauses


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("ALTER TABLE `db`.`_t_new` ADD COLUMN x INT", ("db", "_t_new", "ADD COLUMN x INT")),
        ("alter /* gh-ost */ table _t_gho add x int, drop key k;",
         ("db", "_t_gho", "add x int, drop key k")),
        ("ALTER TABLE t ADD c VARCHAR(9) DEFAULT 'a,b' COMMENT '/*'",
         ("db", "t", "ADD c VARCHAR(9) DEFAULT 'a,b' COMMENT '/*'")),
        ("ALTER TABLE t ADD INDEX (a, b), ALGORITHM=INPLACE",
         ("db", "t", "ADD INDEX (a, b), ALGORITHM=INPLACE")),
        ("ALTER TABLE t RENAME TO u", None),
        ("ALTER TABLE t ADD x INT, RENAME AS u", None),
        ("ALTER IGNORE TABLE t ADD UNIQUE (x)", None),
        ("ALTER ONLINE TABLE t ADD x INT", None),
        ("ALTER TABLE IF EXISTS t ADD x INT", None),
        ("ALTER TABLE t", None),
        ("ALTER TABLE t ADD x INT /*!50100 COMMENT 'c' */", None),
        ("ALTER VIEW v AS SELECT 1", None),
        ("ALTER TABLE t ADD x VARCHAR(3) DEFAULT 'unterminated", None),
    ],
)  # fmt: skip
def test_alter_clauses_are_read_with_the_tokenizer(statement: str, expected: Any) -> None:
    assert alter_clauses(SchemaChange("db", statement)) == expected


# ------------------------------------------------------------------ transitions


def test_a_pt_osc_run_becomes_one_alter_at_its_cut_over() -> None:
    kept = _run(PT_OSC_RUN)
    assert kept == [[], [], [], [Alter("db", "t", "ADD COLUMN extra INT NOT NULL DEFAULT 7")],
                    [], []]  # fmt: skip


def test_a_gh_ost_run_becomes_one_alter_and_its_changelog_table_is_replicated() -> None:
    kept = _run(GH_OST_RUN[:-1])  # the changelog's DROP is plain DDL
    assert kept[0] == [SchemaChange("db", GH_OST_RUN[0])]
    assert kept[1:] == [[], [], [], [], [Alter("db", "t", "add column extra int not null "
                                                "default 7")], []]  # fmt: skip


def test_entries_say_what_is_pending() -> None:
    out = replay({}, _txn(10, PT_OSC_RUN[0]))
    entry = out.updates[("db", "t")]
    assert entry == Pending("db", "t", PT_OSC, "_t_new", _scn(10))
    out = replay({entry.key: entry}, _txn(11, PT_OSC_RUN[1]))
    altered = out.updates[("db", "t")]
    assert altered is not None and altered.alters == ("ADD COLUMN extra INT NOT NULL DEFAULT 7",)
    out = replay({entry.key: altered}, _txn(12, PT_OSC_RUN[3]))
    cut = out.updates[("db", "t")]
    assert cut is not None and (cut.state, cut.old, cut.scn) == (CUT, "_t_old", _scn(12))
    gho = replay({}, _txn(10, GH_OST_RUN[1])).updates[("db", "t")]
    assert gho is not None and (gho.tool, gho.shadow, gho.state) == (GH_OST, "_t_gho", COPYING)


def test_rows_of_a_copying_shadow_are_left_out_and_the_tables_rows_kept() -> None:
    entry = Pending("db", "t", PT_OSC, "_t_new", _scn(5))
    out = replay({entry.key: entry}, _txn(10, changes=(_row("_t_new"), _row("t"))))
    assert out.changes == (_row("t"),) and out.updates == {}
    assert replay({}, _txn(10, changes=(_row("_t_new"),))).changes == (_row("_t_new"),)


def test_the_tool_giving_up_forgets_the_run_and_drops_nothing() -> None:
    kept = _run([PT_OSC_RUN[0], PT_OSC_RUN[1], "DROP TABLE IF EXISTS `db`.`_t_new`",
                 "DROP TRIGGER IF EXISTS `db`.`pt_osc_db_t_ins`"])  # fmt: skip
    assert kept == [[], [], [], []]


def test_a_cut_over_seen_again_gives_the_same_alters_and_changes_nothing() -> None:
    entry = Pending("db", "t", PT_OSC, "_t_new", _scn(12), ("ADD x INT",), CUT, "_t_old")
    out = replay({entry.key: entry}, _txn(12, PT_OSC_RUN[3]))
    assert out.ddl == [Alter("db", "t", "ADD x INT")] and out.updates == {}


def test_statements_an_entry_reflects_already_change_nothing_again() -> None:
    entry = Pending("db", "t", PT_OSC, "_t_new", _scn(20), ("ADD x INT",))
    for statement in PT_OSC_RUN[:2]:
        out = replay({entry.key: entry}, _txn(11, statement))
        assert out.ddl == [] and out.updates == {}


def test_a_new_run_replaces_one_whose_old_table_was_kept() -> None:
    entry = Pending("db", "t", PT_OSC, "_t_new", _scn(12), ("ADD x INT",), CUT, "_t_old")
    out = replay({entry.key: entry}, _txn(20, PT_OSC_RUN[0]))
    assert out.updates == {("db", "t"): Pending("db", "t", PT_OSC, "_t_new", _scn(20))}


@pytest.mark.parametrize(
    "statement",
    [
        "RENAME TABLE `db`.`_t_new` TO `db`.`elsewhere`",
        "ALTER TABLE `db`.`_t_new` RENAME TO `db`.`elsewhere`",
        "ALTER IGNORE TABLE `db`.`_t_new` ADD UNIQUE (v)",
        "TRUNCATE TABLE `db`.`_t_new`",
        "DROP TABLE `db`.`_t_new`, `db`.`other`",
    ],
)
def test_anything_else_on_a_copying_shadow_is_unexpected(statement: str) -> None:
    entry = Pending("db", "t", PT_OSC, "_t_new", _scn(5))
    with pytest.raises(UnexpectedChange) as caught:
        replay({entry.key: entry}, _txn(10, statement))
    assert caught.value.entry == entry


def test_names_alone_change_nothing_without_an_entry() -> None:
    for statement in (PT_OSC_RUN[1], PT_OSC_RUN[3], PT_OSC_RUN[4], GH_OST_RUN[3]):
        out = replay({}, _txn(10, statement))
        assert out.ddl == [SchemaChange("db", statement)] and out.updates == {}
    user_trigger = "CREATE TRIGGER mine AFTER INSERT ON t FOR EACH ROW SET @a = 1"
    assert replay({}, _txn(10, user_trigger)).ddl == [SchemaChange("db", user_trigger)]


# ------------------------------------------------------------------ the stage


class _Target:
    def __init__(self, rows: list[tuple[object, ...]]) -> None:
        self.rows = rows
        self.asked: list[Any] = []

    def query(self, statement: Any, what: str) -> list[tuple[object, ...]]:
        self.asked.append(statement)
        return self.rows

    def commit(self) -> None:
        pass


def test_the_stage_writes_each_transition_as_a_row_of_its_table() -> None:
    stage = ReplayOnlineSchemaChange("ch")
    created = stage(_txn(10, PT_OSC_RUN[0]))
    assert created is not None and created.ddl == ()
    (insert,) = created.changes
    assert (insert.schema, insert.table, insert.op) == (CHECKPOINT_SCHEMA, TABLE, Op.INSERT)
    assert insert.after is not None and insert.after["shadow"] == "_t_new"
    altered = stage(_txn(11, PT_OSC_RUN[1]))
    assert altered is not None and altered.changes[0].op == Op.UPDATE
    assert stage(_txn(12, PT_OSC_RUN[2])) is None  # the tool's trigger
    assert stage(_txn(13, changes=(_row("_t_new"),))) is None  # its copy
    cut = stage(_txn(14, PT_OSC_RUN[3]))
    assert cut is not None and [d.statement for d in cut.ddl] == [
        "ALTER TABLE `db`.`t` ADD COLUMN extra INT NOT NULL DEFAULT 7"
    ]
    assert cut.changes[0].op == Op.UPDATE and cut.changes[0].after["state"] == CUT  # type: ignore[index]
    dropped = stage(_txn(15, PT_OSC_RUN[4]))
    assert dropped is not None and dropped.ddl == () and dropped.changes[0].op == Op.DELETE
    assert stage.entries == {}


def test_the_stage_starts_from_what_the_target_holds() -> None:
    entry = Pending("db", "t", PT_OSC, "_t_new", _scn(9), ("ADD x INT",))
    row = image("ch", entry)
    target = _Target([tuple(row[c] for c in ("schema_name", "table_name", "tool", "shadow",
                                             "state", "old_name", "alters", "scn"))])  # fmt: skip
    stage = ReplayOnlineSchemaChange("ch")
    stage.load(target)  # type: ignore[arg-type]
    assert target.asked == [select("ch")] and stage.entries == {entry.key: entry}
    assert parse(target.rows) == stage.entries
    assert stage(_txn(10, changes=(_row("_t_new"),))) is None
    cut = stage(_txn(11, PT_OSC_RUN[3]))
    assert cut is not None and cut.ddl == (SchemaChange("db", "ALTER TABLE `db`.`t` ADD x INT"),)


def test_the_stage_stops_the_channel_at_an_unexpected_statement() -> None:
    stage = ReplayOnlineSchemaChange("ch")
    stage(_txn(10, PT_OSC_RUN[0]))
    with pytest.raises(FatalError) as caught:
        stage(_txn(11, "RENAME TABLE `db`.`_t_new` TO `db`.`elsewhere`"))
    message = str(caught.value)
    assert str(_scn(11)) in message and "drc channel skip" in message and TABLE in message
    assert caught.value.stoppage is not None and caught.value.stoppage.scn == _scn(11)


def test_quoted_names_stay_quoted_in_the_cut_over_alter() -> None:
    stage = ReplayOnlineSchemaChange("ch")
    for n, statement in enumerate(
        ["CREATE TABLE `my db`.`_a``b_new` (id INT)", "ALTER TABLE `my db`.`_a``b_new` ADD x INT"]
    ):
        stage(Transaction(_scn(n), 1, None, 0, (), (SchemaChange("my db", statement),)))
    rename = "RENAME TABLE `a``b` TO `_a``b_old`, `_a``b_new` TO `a``b`"
    cut = stage(Transaction(_scn(5), 1, None, 0, (), (SchemaChange("my db", rename),)))
    assert cut is not None and cut.ddl[0].statement == "ALTER TABLE `my db`.`a``b` ADD x INT"


# ------------------------------------------------------------------ one mode per datacenter


def _config(*modes: str) -> DrcConfig:
    return with_channels(*({"online_schema_change": mode} for mode in modes))


def test_channels_must_agree_on_the_mode() -> None:
    assert not _config().replays_online_schema_changes
    assert not _config("copy", "copy").replays_online_schema_changes
    assert _config("replay", "replay").replays_online_schema_changes
    with pytest.raises(ValueError, match="disagree on online_schema_change"):
        _config("replay", "copy")


def test_the_tools_triggers_stay_unguarded_only_where_channels_replay() -> None:
    tool = PT_OSC_RUN[2]
    for replays, rewritten in ((True, 0), (False, 1)):
        session = GuardSession(tool[tool.index("DELETE IGNORE") :])
        stats = guarded(session, tool, schema="db", replays_tools=replays)
        assert (stats.triggers_guarded, len(session.ran)) == (rewritten, rewritten)


def test_a_replaying_channel_selects_the_shadow_tables_of_its_tables() -> None:
    assert with_shadows(()) == ()  # every table
    assert with_shadows(("db.t", "db.u*")) == (
        "db.t", "db.u*", "db._t_new", "db._t_old", "db._t_gho", "db._t_del",
        "db._u*_new", "db._u*_old", "db._u*_gho", "db._u*_del",
    )  # fmt: skip
    selected = TableFilter.build(with_shadows(("db.t",)))
    assert selected.matches("db", "_t_new") and not selected.matches("db", "_u_new")


def test_catchup_runs_the_stage_on_its_driver_and_keeps_its_fast_path() -> None:
    channel = ChannelConfig.model_validate({
        "name": "c", "origin": "dc1", "remote": ["http://dc1:8641"], "tables": ["db.t"],
        "online_schema_change": "replay",
    })  # fmt: skip
    settings = TargetSettings("127.0.0.1", 1, "u", "p")
    parts = build_parts(channel, settings)
    assert _TableNames(parts.source.filters, channel).fast  # the stage goes by names
    job = Job(channel, settings, None, "dc2", "owner", "http://dc1:8641", "epoch")
    executors = ddl_chain(job).stages  # every DDL a step, the stage left to the driver
    assert executors and not any(isinstance(s, ReplayOnlineSchemaChange) for s in executors)
    created = parts.source.after_ddl_chain(_txn(10, PT_OSC_RUN[0]))
    assert created is not None and created.ddl == () and created.changes[0].table == TABLE
    plain = build_parts(channel.model_copy(update={"online_schema_change": "copy"}), settings)
    assert plain.source.after_ddl_chain(_txn(10, PT_OSC_RUN[0])) == _txn(10, PT_OSC_RUN[0])
