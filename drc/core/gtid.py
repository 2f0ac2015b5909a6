"""MariaDB GTIDs and GTID positions (pure).

A MariaDB GTID is ``domain-server_id-seq_no`` (``1-1-42``). Within one replication domain the
sequence number grows with every event group, whichever server wrote it, so the last GTID of
each domain is a complete replication position: MariaDB's ``gtid_binlog_pos`` and
``@slave_connect_state`` are exactly that, one GTID per domain, comma-separated.

DRC keeps the source's position with every captured transaction (the record's ``gtid`` and,
when the source has several domains, ``gtid_position``), so any replicator holding the buffer
can resume on any server of the source's replication group with ``@slave_connect_state``
(``BINLOG_GTID_POS`` only answers on the server that wrote the binlog).

A server *contains* a GTID when its ``gtid_binlog_state`` (the last sequence number per domain
and server id) shows that server id's sequence in that domain reached it: in a healthy chain,
sequence numbers of a domain only grow, so it then holds that transaction too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from drc.core.errors import SourceConfigError

_U32 = 2**32 - 1
_U64 = 2**64 - 1


@dataclass(frozen=True, order=True, slots=True)
class Gtid:
    """One MariaDB GTID; ordered by (domain, seq_no) only through :func:`position`."""

    domain: int
    server_id: int
    seq_no: int

    def __str__(self) -> str:
        return f"{self.domain}-{self.server_id}-{self.seq_no}"

    @classmethod
    def parse(cls, text: str) -> Gtid:
        parts = text.strip().split("-")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            raise SourceConfigError(f"{text!r} is not a MariaDB GTID (domain-server_id-seq_no)")
        domain, server_id, seq_no = map(int, parts)
        if domain > _U32 or server_id > _U32 or seq_no > _U64:
            raise SourceConfigError(f"GTID {text!r} has a field out of range")
        return cls(domain, server_id, seq_no)


GtidPosition = Mapping[int, Gtid]  # domain -> the last GTID of that domain


def parse_gtids(text: str | None) -> tuple[Gtid, ...]:
    """The GTIDs of a comma-separated list (``gtid_binlog_pos``/``_state`` form); '' is none."""
    if not text or not text.strip():
        return ()
    return tuple(Gtid.parse(part) for part in text.split(","))


def position(gtids: Iterable[Gtid]) -> dict[int, Gtid]:
    """Per domain, the GTID with the highest sequence number (a binlog state -> a position)."""
    found: dict[int, Gtid] = {}
    for gtid in gtids:
        known = found.get(gtid.domain)
        if known is None or gtid.seq_no >= known.seq_no:
            found[gtid.domain] = gtid
    return found


def format_position(pos: GtidPosition) -> str:
    """The ``@slave_connect_state`` text of a position, domains in order."""
    return ",".join(str(pos[domain]) for domain in sorted(pos))


def advance(pos: GtidPosition, gtid: Gtid) -> dict[int, Gtid]:
    """The position after the event group ``gtid``."""
    return {**pos, gtid.domain: gtid}


def record_fields(pos: GtidPosition, gtid: Gtid | None) -> tuple[str | None, str | None]:
    """(``gtid``, ``gtid_position``) to store with a transaction: the position is written only
    when it says more than the transaction's own GTID (a source with several domains)."""
    if gtid is not None and len(pos) == 1 and pos.get(gtid.domain) == gtid:
        return str(gtid), None
    return None if gtid is None else str(gtid), format_position(pos)


def stored_position(gtid: str | None, gtid_position: str | None) -> dict[int, Gtid] | None:
    """The source position a stored record stands for (inverse of :func:`record_fields`);
    None when it has no GTID at all (written before DRC kept positions)."""
    if gtid_position is not None:
        return position(parse_gtids(gtid_position))
    if gtid is not None:
        one = Gtid.parse(gtid)
        return {one.domain: one}
    return None


def merged(pos: GtidPosition, newer: GtidPosition) -> dict[int, Gtid]:
    """``pos`` moved on by ``newer``: per domain, the GTID with the higher sequence number (a
    position read later never takes a domain back)."""
    out = dict(pos)
    for domain, gtid in newer.items():
        known = out.get(domain)
        if known is None or gtid.seq_no > known.seq_no:
            out[domain] = gtid
    return out


def covers(pos: GtidPosition, gtid: Gtid) -> bool:
    """True if a stream read up to ``pos`` has passed ``gtid``: its domain's sequence number
    reached it (sequence numbers of a domain only grow, whichever server wrote them)."""
    known = pos.get(gtid.domain)
    return known is not None and known.seq_no >= gtid.seq_no


def missing(pos: GtidPosition, binlog_state: Iterable[Gtid]) -> list[Gtid]:
    """The GTIDs of ``pos`` a server with this ``gtid_binlog_state`` does not contain."""
    reached = {(g.domain, g.server_id): g.seq_no for g in binlog_state}
    return [
        gtid
        for gtid in pos.values()
        if reached.get((gtid.domain, gtid.server_id), -1) < gtid.seq_no
    ]


def shares_domain(pos: GtidPosition, binlog_state: Iterable[Gtid]) -> bool:
    """True if the server has written or replicated anything in a domain of ``pos``."""
    return any(g.domain in pos for g in binlog_state)


__all__ = [
    "Gtid",
    "GtidPosition",
    "advance",
    "covers",
    "format_position",
    "merged",
    "missing",
    "parse_gtids",
    "position",
    "record_fields",
    "shares_domain",
    "stored_position",
]
