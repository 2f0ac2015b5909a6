"""Event buffer workloads: SCNs with room between them, random payloads, transactions split into
fragments, and helpers to fill a buffer and read it all back."""

from __future__ import annotations

import random

from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer, Record

SEG = 4096
Item = tuple[SCN, bytes, int, bool]


def scn(i: int) -> SCN:
    """The i-th test SCN; gaps of 10 leave room for SCNs that fall between records."""
    return SCN(1, 100 + i % 3, 7, 10 * i)


def payload(i: int, size: int) -> bytes:
    return random.Random(i).randbytes(size)


def workload(n: int, seed: int = 1, max_size: int = 600, fragments: bool = True) -> list[Item]:
    """``n`` transactions; about one in five is split into 2-4 fragments sharing its SCN."""
    rnd = random.Random(seed)
    items: list[Item] = []
    for i in range(1, n + 1):
        parts = rnd.randint(2, 4) if fragments and rnd.random() < 0.2 else 1
        for part in range(parts):
            size = rnd.randint(0, max_size)
            items.append((scn(i), payload(i * 10 + part, size), 1_000_000 + i, part < parts - 1))
    return items


def as_items(records: list[Record]) -> list[Item]:
    return [(r.scn, r.payload, r.timestamp_ms, r.more) for r in records]


def read_all(
    buf: EventBuffer, after: SCN = SCN.ZERO, max_records: int = 50, max_bytes: int = 1 << 20
) -> list[Record]:
    out: list[Record] = []
    while True:
        batch = buf.read_after(after, max_records, max_bytes)
        if not batch:
            return out
        out.extend(batch)
        after = batch[-1].scn


def fill(buf: EventBuffer, items: list[Item], commit_every: int = 7) -> None:
    for n, (s, p, ts, more) in enumerate(items, 1):
        buf.append(s, p, ts, more)
        if n % commit_every == 0:
            buf.commit()
    buf.commit()
