"""Column masking at capture: which values are replaced, how, and what is refused."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from drc.config import config_problems
from drc.config_replicator import ReplicatorConfig
from drc.core.errors import ConfigError
from drc.core.events import Column, Op, RowChange, TableSchema
from drc.core.masking import MaskedKeyError, Masker, hmac_hex
from tests.support.apply_fakes import ins, txn, upd

KEY = b"0123456789abcdef0123"
T = TableSchema(
    "db", "t", (Column("id", "int", False), Column("email", "varchar(64)", True)), ("id",)
)
TABLES = {("db", "t"): T}


def _mac(data: bytes) -> str:
    return hmac.new(KEY, data, hashlib.sha256).hexdigest()


def test_masked_columns_are_replaced_in_both_images_and_others_kept() -> None:
    masker = Masker({"db.t": {"Email": "hmac", "phone": "null"}}, KEY)
    change = upd(
        "t", {"id": 1, "email": "a@x", "phone": "1", "n": 1}, id=1, email="b@x", phone=None, n=2
    )
    masked = masker(txn(1, change, ins("u", id=1, email="c@x")), TABLES)
    before, after = masked.changes[0].before, masked.changes[0].after
    assert before == {"id": 1, "email": _mac(b"a@x"), "phone": None, "n": 1}
    assert after == {"id": 1, "email": _mac(b"b@x"), "phone": None, "n": 2}
    assert masked.changes[1].row == {"id": 1, "email": "c@x"}  # another table: as captured
    assert masker.masked == 3  # NULL stays NULL, not counted


def test_hmac_is_keyed_deterministic_and_typed_by_bytes() -> None:
    assert hmac_hex(KEY, "é") == _mac("é".encode())
    assert hmac_hex(KEY, b"\x00\xff") == _mac(b"\x00\xff")
    assert hmac_hex(KEY, 42) == _mac(b"42")
    assert hmac_hex(KEY, "x") == hmac_hex(KEY, "x") != hmac_hex(KEY + b"!", "x")


def test_a_transaction_without_masked_tables_is_the_same_object() -> None:
    masker = Masker({"db.t": {"email": "null"}}, None)
    plain = txn(1, ins("u", id=1, email="x"))
    assert masker(plain, TABLES) is plain


def test_a_masked_key_column_stops_capture_naming_it() -> None:
    masker = Masker({"db.*": {"ID": "hmac"}}, KEY)
    with pytest.raises(MaskedKeyError, match=r"'id' of db\.t, a primary key column"):
        masker(txn(1, RowChange("db", "t", Op.DELETE, {"id": 1}, None)), TABLES)


def test_hmac_needs_a_key_file(tmp_path: Path) -> None:
    base = '[datacenter]\nname = "dc1"\n[source]\nuser = "u"\n[replicator]\nbuffer_dir = "/x"\n'
    masked = base + 'mask_columns = { "db.t" = { email = "hmac" } }\n'
    assert config_problems(masked) == [
        'line 5: replicator: Value error, mask_columns uses "hmac": set mask_key_file to the '
        "file of its key"
    ]
    assert (
        "Input should be 'hmac' or 'null'"
        in config_problems(base + 'mask_columns = { "db.t" = { email = "md5" } }\n')[0]
    )
    assert config_problems(base + 'mask_columns = { "db.t" = { email = "null" } }\n') == []


def test_the_key_file_is_read_and_must_be_long_enough(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(KEY + b"\n")
    config = ReplicatorConfig(
        buffer_dir=tmp_path, mask_columns={"db.t": {"email": "hmac"}}, mask_key_file=key
    )
    masker = config.masker()
    assert masker is not None
    masked = masker(txn(1, ins("t", id=1, email="a@x")), TABLES)
    assert masked.changes[0].row["email"] == _mac(b"a@x")
    key.write_bytes(b"short")
    with pytest.raises(ConfigError, match="at least 16 random bytes"):
        config.masker()
    key.unlink()
    with pytest.raises(ConfigError, match="cannot read replicator.mask_key_file"):
        config.masker()
    assert ReplicatorConfig(buffer_dir=tmp_path).masker() is None


def test_drcs_own_rows_are_never_masked() -> None:
    tombstone = RowChange("drc", "tomb_x", Op.INSERT, None, {"email": "x"})
    masked = Masker({"*.*": {"email": "null"}}, None)(txn(1, tombstone), TABLES)
    assert masked.changes[0] is tombstone
