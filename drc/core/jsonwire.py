"""The JSON form of transactions served by the API: lossless, and readable by any client.

JSON has no Decimal, date, time, bytes or set, so those values travel as one-key objects tagged
with ``$`` (a column value is never such an object otherwise: MariaDB JSON columns are text, and
MySQL JSON documents are passed as their text with ``$json``)::

    Decimal('1.50')                 {"$decimal": "1.50"}
    datetime(2024,1,2,3,4,5,6)      {"$datetime": "2024-01-02T03:04:05.000006"}  (aware: +hh:mm)
    date(2024,1,2)                  {"$date": "2024-01-02"}
    timedelta (TIME)                {"$time": "-838:59:59.000000"}
    ZeroDate('0000-00-00')          {"$zerodate": "0000-00-00"}
    Bit(5, 3)                       {"$bit": [5, 3]}
    frozenset({'a','b'}) (SET)      {"$set": ["a", "b"]}   (sorted)
    b'\\x00\\xff'                     {"$bytes": "AP8="}     (base64)
    float                           a JSON number; NaN/inf cannot occur in MySQL
    int (up to 64 bits), str, None  as themselves (Python's json keeps big ints exact)

A transaction is an object with ``scn`` in its text form; see ``transaction_to_json``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.scn import SCN
from drc.core.values import Bit, ZeroDate


class JsonWireError(ValueError):
    """A JSON document that is not a valid DRC transaction or value."""


def _time_text(value: dt.timedelta) -> str:
    micros = abs(value) // dt.timedelta(microseconds=1)
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    sign = "-" if value < dt.timedelta(0) else ""
    return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{micro:06d}"


def _parse_time(text: str) -> dt.timedelta:
    negative = text.startswith("-")
    hours, minutes, rest = text.lstrip("-").split(":")
    seconds, _, micro = rest.partition(".")
    value = dt.timedelta(
        hours=int(hours), minutes=int(minutes), seconds=int(seconds), microseconds=int(micro or 0)
    )
    return -value if negative else value


def value_to_json(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat(timespec="microseconds")}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$time": _time_text(value)}
    if isinstance(value, ZeroDate):
        return {"$zerodate": value.text}
    if isinstance(value, Bit):
        return {"$bit": [value.value, value.width]}
    if isinstance(value, frozenset):
        return {"$set": sorted(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict | list):
        return {"$json": json.dumps(value, ensure_ascii=False, separators=(",", ":"))}
    raise JsonWireError(f"no JSON form for a value of type {type(value).__name__}")


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "$decimal": Decimal,
    "$datetime": dt.datetime.fromisoformat,
    "$date": dt.date.fromisoformat,
    "$time": _parse_time,
    "$zerodate": ZeroDate,
    "$bit": lambda pair: Bit(pair[0], pair[1]),
    "$set": frozenset,
    "$bytes": lambda text: base64.b64decode(text, validate=True),
    "$json": json.loads,
}


def value_from_json(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise JsonWireError(f"a tagged value has exactly one key, got {sorted(value)}")
    ((tag, payload),) = value.items()
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise JsonWireError(f"unknown value tag {tag!r}")
    try:
        return decoder(payload)
    except (ValueError, TypeError, IndexError) as exc:
        raise JsonWireError(f"bad {tag} value {payload!r}: {exc}") from exc


def _row_to_json(row: Any) -> dict[str, Any] | None:
    return None if row is None else {name: value_to_json(v) for name, v in row.items()}


def _row_from_json(row: Any) -> dict[str, Any] | None:
    return None if row is None else {name: value_from_json(v) for name, v in row.items()}


def transaction_to_json(txn: Transaction) -> dict[str, Any]:
    return {
        "scn": str(txn.scn),
        "server_id": txn.server_id,
        "gtid": txn.gtid,
        "timestamp": txn.timestamp,
        "drc_originated": txn.drc_originated,
        "fragment": txn.fragment,
        "last_fragment": txn.last_fragment,
        "changes": [
            {
                "schema": c.schema,
                "table": c.table,
                "op": c.op.value,
                "before": _row_to_json(c.before),
                "after": _row_to_json(c.after),
            }
            for c in txn.changes
        ],
        "ddl": [{"schema": d.schema, "statement": d.statement} for d in txn.ddl],
        **({} if txn.gtid_position is None else {"gtid_position": txn.gtid_position}),
        **({"rows_omitted": True} if txn.rows_omitted else {}),
    }


def transaction_from_json(data: dict[str, Any]) -> Transaction:
    try:
        return Transaction(
            scn=SCN.parse(data["scn"]),
            server_id=int(data["server_id"]),
            gtid=data["gtid"],
            timestamp=int(data["timestamp"]),
            changes=tuple(
                RowChange(
                    c["schema"],
                    c["table"],
                    Op(c["op"]),
                    _row_from_json(c["before"]),
                    _row_from_json(c["after"]),
                )  # fmt: skip
                for c in data["changes"]
            ),
            ddl=tuple(SchemaChange(d["schema"], d["statement"]) for d in data["ddl"]),
            drc_originated=bool(data["drc_originated"]),
            fragment=int(data["fragment"]),
            last_fragment=bool(data["last_fragment"]),
            gtid_position=data.get("gtid_position"),
            rows_omitted=bool(data.get("rows_omitted", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise JsonWireError(f"not a DRC transaction: {exc}") from exc
