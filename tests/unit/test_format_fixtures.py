"""Upgrades: what an earlier release left on disk is read by this one. Each directory of
tests/fixtures/formats (written once by tests/support/format_fixture.py with the release of
its format, never regenerated) holds an EventBuffer, the metastore beside it, and what they
held as JSON. This release must read every record as it was written, continue the buffer,
serve it to a subscriber (a restart with a backlog pending), and read the schema history."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer
from drc.client import Subscriber
from drc.core.codec import decode_transaction, encode_transaction
from drc.core.jsonwire import transaction_to_json
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.metastore.store import MetaStore
from tests.support.format_fixture import transactions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def test_there_is_a_fixture_of_the_formats_of_this_release() -> None:
    from drc.eventbuffer.format import FORMAT_VERSION as BUFFER_FORMAT
    from drc.metastore.file import FORMAT_VERSION as METASTORE_FORMAT

    kept = [json.loads((FIXTURES / v / "expected.json").read_text())["formats"] for v in VERSIONS]
    # A format change needs a new fixture directory (python -m tests.support.format_fixture).
    assert {"buffer": BUFFER_FORMAT, "metastore": METASTORE_FORMAT} in kept


@pytest.fixture(params=VERSIONS)
def release(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    copy = tmp_path / request.param
    shutil.copytree(FIXTURES / request.param, copy)  # opening may recover, never the original
    return copy, json.loads((copy / "expected.json").read_text())


def _read_all(buffer: EventBuffer) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = SCN.zero()
    while records := buffer.read_after(after, max_records=7):
        for record in records:
            txn, _ = decode_transaction(record.payload, 0)
            out.append(transaction_to_json(txn))
        after = records[-1].scn
    return out


def test_every_record_reads_back_as_written(release: tuple[Path, dict[str, Any]]) -> None:
    directory, expected = release
    with EventBuffer.open_read_only(directory / "buffer") as buffer:
        assert _read_all(buffer) == expected["transactions"]


def test_the_buffer_is_continued_by_this_release(release: tuple[Path, dict[str, Any]]) -> None:
    directory, expected = release
    last = SCN.parse(expected["transactions"][-1]["scn"])
    newer = transactions()[1]
    newer = type(newer)(**{**{f: getattr(newer, f) for f in newer.__slots__}, "scn": SCN(
        last.change_id, last.server_id, last.log_index + 1, 4)})  # fmt: skip
    with EventBuffer.open(directory / "buffer") as buffer:
        buffer.append(newer.scn, encode_transaction(newer), newer.timestamp * 1000)
        buffer.commit()
    with EventBuffer.open_read_only(directory / "buffer") as buffer:
        assert _read_all(buffer) == [*expected["transactions"], transaction_to_json(newer)]


def test_a_backlog_left_by_the_earlier_release_is_served_to_a_subscriber(
    release: tuple[Path, dict[str, Any]],
) -> None:
    directory, expected = release
    with EventBuffer.open(directory / "buffer") as buffer:
        deps = ApiDeps(buffer=buffer)
        server = ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True,
                           stop_event=deps.stop).start()  # fmt: skip
        try:
            got: list[dict[str, Any]] = []
            last = SCN.parse(expected["transactions"][-1]["scn"])
            with Subscriber(server.url, wait_ms=100, drc_applied="marker") as sub:
                while sub.position < last:
                    batch = sub.get(timeout=10)
                    got += [transaction_to_json(t) for t in batch.transactions]
                    sub.ack(batch)
        finally:
            server.stop()
    assert got == expected["transactions"]


def test_the_schema_history_reads_back(release: tuple[Path, dict[str, Any]]) -> None:
    directory, expected = release
    with MetaStore.open(directory / "metastore.sqlite3", read_only=True) as meta:
        for scn_text, columns in expected["schemas"].items():
            schema = meta.schema_at("shop", "kinds", SCN.parse(scn_text))
            assert schema is not None and list(schema.column_names) == columns
        assert meta.tables() == [("shop", "kinds")]
