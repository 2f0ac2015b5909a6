"""SCN: the position of one committed source transaction, totally ordered.

An SCN is ``(change_id, server_id, log_index, log_pos)``:

- ``change_id`` grows by one whenever extraction moves to a different source server (a MySQL
  failover), so every SCN taken after the switch sorts after every SCN taken before it, even
  though the new server's binlog coordinates start over.
- ``server_id`` is the source server the transaction was read from. It is carried, never
  compared: two SCNs at the same coordinates are the same point in the stream.
- ``log_index`` is the binlog file's number (``mysql-bin.000042`` -> 42).
- ``log_pos`` is the byte position *after* the transaction's commit event (the XID or COMMIT
  query event), i.e. exactly where to resume the binlog to read the next transaction.

Order and equality are by ``(change_id, log_index, log_pos)``. :data:`ZERO_SCN` sorts before
every real SCN and means "from the beginning".

Two encodings, both produced and parsed here only:

- bytes (:meth:`SCN.to_bytes`), fixed :data:`SCN_BYTES` = 20, big-endian::

      0        4          8                16         20
      +--------+----------+----------------+----------+
      |change_id|log_index|    log_pos     |server_id |
      |  u32   |   u32    |      u64       |   u32    |
      +--------+----------+----------------+----------+

  The compared fields come first, so for SCNs that differ, byte order is value order: an index
  or a key-value store can sort encoded SCNs without decoding them.
- text (``str(scn)``), ``"change_id:server_id:log_index:log_pos"`` in canonical decimal, safe in
  URLs and shell arguments. :meth:`SCN.parse` accepts exactly that form: ASCII digits, no sign,
  no underscores, no leading zeros, no surrounding whitespace (rejected, not stripped, so a
  value pasted with stray characters is noticed rather than guessed at).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import ClassVar

from drc.core.errors import MalformedScnError, SourceConfigError

SCN_BYTES = 20
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

_FIELDS = ("change_id", "server_id", "log_index", "log_pos")
_TEXT_FORM = ":".join(_FIELDS)
_LIMITS = {"change_id": U32_MAX, "server_id": U32_MAX, "log_index": U32_MAX, "log_pos": U64_MAX}
_STRUCT = struct.Struct(">IIQI")  # change_id, log_index, log_pos, server_id
_CANONICAL = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_MAX_SHOWN = 80


@dataclass(frozen=True, order=True, slots=True)
class SCN:
    """A resume point in the source binlog; ordered by (change_id, log_index, log_pos)."""

    change_id: int
    server_id: int = field(compare=False)
    log_index: int
    log_pos: int

    ZERO: ClassVar[SCN]

    def __post_init__(self) -> None:
        c, s, i, p = self.change_id, self.server_id, self.log_index, self.log_pos
        # One expression on the hot path (every decoded record builds an SCN); bool is an int
        # subclass and True as a binlog position is always a bug upstream, hence type() is int.
        if (
            type(c) is int
            and type(s) is int
            and type(i) is int
            and type(p) is int
            and 0 <= c <= U32_MAX
            and 0 <= s <= U32_MAX
            and 0 <= i <= U32_MAX
            and 0 <= p <= U64_MAX
        ):
            return
        for name in _FIELDS:  # slow path: find the field to name in the message
            _check_range(name, getattr(self, name))

    @classmethod
    def zero(cls) -> SCN:
        """The SCN before every transaction: pulling after it returns everything."""
        return ZERO_SCN

    def __str__(self) -> str:
        return f"{self.change_id}:{self.server_id}:{self.log_index}:{self.log_pos}"

    def to_bytes(self) -> bytes:
        """The 20-byte order-preserving form (see the module docstring)."""
        return _STRUCT.pack(self.change_id, self.log_index, self.log_pos, self.server_id)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> SCN:
        """Parse :meth:`to_bytes` output; anything but exactly 20 bytes is rejected."""
        if not isinstance(data, (bytes, bytearray, memoryview)):  # noqa: UP038 (tuple is faster)
            raise MalformedScnError(f"SCN bytes must be bytes, got {type(data).__name__}")
        if len(data) != SCN_BYTES:
            raise MalformedScnError(
                f"SCN bytes must be exactly {SCN_BYTES} long, got {len(data)}; "
                "the value is truncated or is not an encoded SCN"
            )
        change_id, log_index, log_pos, server_id = _STRUCT.unpack(data)
        return cls(change_id, server_id, log_index, log_pos)

    @classmethod
    def parse(cls, text: str) -> SCN:
        """Parse the text form ``change_id:server_id:log_index:log_pos``.

        Raises MalformedScnError naming the first problem found: empty text, surrounding
        whitespace, the wrong number of fields, a field that is not a canonical decimal
        integer, or a value outside its range.
        """
        if not isinstance(text, str):
            raise MalformedScnError(f"SCN text must be str, got {type(text).__name__}")
        if not text:
            raise MalformedScnError(f"empty SCN text; expected {_TEXT_FORM}")
        if text != text.strip():
            raise MalformedScnError(
                f"SCN text {_show(text)} has surrounding whitespace; expected {_TEXT_FORM}"
            )
        parts = text.split(":")
        if len(parts) != len(_FIELDS):
            raise MalformedScnError(
                f"SCN text {_show(text)} has {len(parts)} field(s); "
                f"expected {len(_FIELDS)}: {_TEXT_FORM}"
            )
        values = [_parse_field(name, part) for name, part in zip(_FIELDS, parts, strict=True)]
        return cls(*values)

    def bump_change_id(self, server_id: int, log_index: int, log_pos: int) -> SCN:
        """The first SCN on a new source server after a failover.

        ``change_id`` grows by one so the new server's coordinates, which may be smaller than
        the old server's, still sort after everything already extracted.
        """
        return SCN(self.change_id + 1, server_id, log_index, log_pos)


def _check_range(name: str, value: object) -> None:
    limit = _LIMITS[name]
    if type(value) is not int:
        raise MalformedScnError(
            f"SCN field {name} must be an int in 0..{limit}, got {type(value).__name__} {value!r}"
        )
    if not 0 <= value <= limit:
        raise MalformedScnError(f"SCN field {name} = {value} is out of range 0..{limit}")


def _parse_field(name: str, part: str) -> int:
    if not part:
        raise MalformedScnError(f"SCN field {name} is empty; expected {_TEXT_FORM}")
    if part.startswith("-") and _CANONICAL.fullmatch(part[1:]):
        raise MalformedScnError(
            f"SCN field {name} is negative ({_show(part)}); must be in 0..{_LIMITS[name]}"
        )
    if not _CANONICAL.fullmatch(part):
        hint = "has a leading zero" if part.isascii() and part.isdigit() else "is not an integer"
        raise MalformedScnError(
            f"SCN field {name} {hint}: {_show(part)}; expected a decimal integer "
            f"in 0..{_LIMITS[name]} without sign, spaces or underscores"
        )
    if len(part) > len(str(_LIMITS[name])):  # before int(): bounds the work on huge input
        raise MalformedScnError(
            f"SCN field {name} = {_show(part)} is out of range 0..{_LIMITS[name]}"
        )
    value = int(part)
    _check_range(name, value)
    return value


def _show(text: str) -> str:
    if len(text) > _MAX_SHOWN:
        return repr(text[:_MAX_SHOWN]) + f"... ({len(text)} chars)"
    return repr(text)


# After the helpers: constructing an SCN runs _check_range.
ZERO_SCN = SCN(0, 0, 0, 0)
SCN.ZERO = ZERO_SCN


_BINLOG_NAME = re.compile(r"^(?P<base>.+)\.(?P<index>\d+)$")


def split_binlog_name(name: str) -> tuple[str, int]:
    """``mysql-bin.000042`` -> ``("mysql-bin", 42)``: a binlog file's base and its number,
    the SCN's ``log_index``."""
    match = _BINLOG_NAME.match(name)
    if match is None:
        raise SourceConfigError(f"binlog file name {name!r} has no numeric suffix")
    return match["base"], int(match["index"])
