"""The sink's messages (drc.sink.messages), its key cache and its loop with a fake broker."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest

from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.partitions import key_partition, range_index
from drc.core.scn import SCN
from drc.sink.base import SinkUnavailableError
from drc.sink.keys import KeyCache
from drc.sink.messages import Message, change_messages, transaction_messages
from drc.sink.runner import SinkRunner

SCN1 = SCN(7, 1, 2, 300)


def txn(
    *changes: RowChange, fragment: int = 0, last: bool = True, ddl: bool = False
) -> Transaction:
    return Transaction(
        SCN1, 1, "0-1-7", 1_700_000_000, tuple(changes),
        ddl=(SchemaChange("shop", "ALTER TABLE t ADD c INT"),) if ddl else (),
        fragment=fragment, last_fragment=last,
    )  # fmt: skip


def keys_id(schema: str, table: str, t: Transaction) -> tuple[str, ...]:
    return ("id",)


def body(message: Message) -> dict[str, Any]:
    return json.loads(message.body)


def test_an_insert_is_one_message_with_every_field_a_consumer_needs() -> None:
    change = RowChange("shop", "t", Op.INSERT, None, {"id": 5, "price": Decimal("1.50")})
    (message,) = transaction_messages(txn(change, fragment=2, last=False), keys_id, 8)
    partition = key_partition("shop", "t", (5,))
    assert message.message_id == "7:1:2:300/2/0"
    assert message.partition == partition
    assert message.queue == range_index(partition, 8)
    assert message.op == "insert"
    assert body(message) == {
        "id": "7:1:2:300/2/0", "scn": "7:1:2:300", "fragment": 2, "last_fragment": False,
        "row": 0, "gtid": "0-1-7", "timestamp": 1_700_000_000, "schema": "shop", "table": "t",
        "op": "insert", "before": None, "after": {"id": 5, "price": {"$decimal": "1.50"}},
        "key": [5], "partition": partition, "key_change": None,
    }  # fmt: skip


def test_row_indexes_number_the_changes_of_one_fragment_and_ids_differ() -> None:
    changes = [RowChange("shop", "t", Op.DELETE, {"id": n, "v": "x"}, None) for n in range(5)]
    messages = list(transaction_messages(txn(*changes), keys_id, 4))
    assert [body(m)["row"] for m in messages] == [0, 1, 2, 3, 4]
    assert len({m.message_id for m in messages}) == 5
    assert all(body(m)["before"] is not None and body(m)["after"] is None for m in messages)


def test_an_update_keeping_its_key_is_one_message_routed_by_that_key() -> None:
    change = RowChange("shop", "t", Op.UPDATE, {"id": 3, "v": "a"}, {"id": 3, "v": "b"})
    (message,) = change_messages(txn(change), 0, change, ("id",), 16)
    assert message.op == "update"
    assert message.partition == key_partition("shop", "t", (3,))
    assert body(message)["before"] == {"id": 3, "v": "a"}
    assert body(message)["after"] == {"id": 3, "v": "b"}


def test_an_update_changing_the_key_leaves_the_old_key_first_then_enters_the_new_one() -> None:
    change = RowChange("shop", "t", Op.UPDATE, {"id": 3, "v": "a"}, {"id": 90, "v": "a"})
    old, new = change_messages(txn(change), 4, change, ("id",), 65536)
    assert (old.op, new.op) == ("delete", "insert")
    assert old.partition == key_partition("shop", "t", (3,))
    assert new.partition == key_partition("shop", "t", (90,))
    assert old.queue == old.partition and new.queue == new.partition  # 65536 queues: 1 each
    assert (old.message_id, new.message_id) == ("7:1:2:300/0/4/old", "7:1:2:300/0/4/new")
    assert body(old)["before"] == {"id": 3, "v": "a"} and body(old)["after"] is None
    assert body(new)["before"] is None and body(new)["after"] == {"id": 90, "v": "a"}
    assert (body(old)["key_change"], body(new)["key_change"]) == ("old", "new")


def test_a_table_without_a_primary_key_is_keyed_by_all_its_columns() -> None:
    change = RowChange("shop", "log", Op.INSERT, None, {"a": 1, "b": "x"})
    (message,) = change_messages(txn(change), 0, change, (), 4)
    assert body(message)["key"] == [1, "x"]
    assert message.partition == key_partition("shop", "log", (1, "x"))


def test_one_key_always_lands_in_one_queue_whatever_its_other_columns() -> None:
    queues = set()
    for n in range(20):
        change = RowChange("shop", "t", Op.UPDATE, {"id": 42, "v": n}, {"id": 42, "v": n + 1})
        queues |= {m.queue for m in change_messages(txn(change), 0, change, ("id",), 8)}
    assert len(queues) == 1


def test_the_key_cache_asks_once_per_table_and_again_after_ddl() -> None:
    asked: list[tuple[str, str, str, SCN]] = []

    def fetch(url: str, schema: str, table: str, scn: SCN) -> tuple[str, ...]:
        asked.append((url, schema, table, scn))
        return ("id",)

    cache = KeyCache(fetch)
    cache.serve_from("http://r1")
    plain = txn()
    assert cache("shop", "t", plain) == ("id",)
    assert cache("shop", "t", plain) == ("id",)
    cache.seen(plain)
    assert cache("shop", "t", plain) == ("id",)
    assert len(asked) == 1
    cache.seen(txn(ddl=True))
    cache.serve_from("http://r2")
    cache("shop", "t", plain)
    assert asked[-1] == ("http://r2", "shop", "t", SCN1)
    assert cache.fetches == 2


# ---------------------------------------------------------------- the loop, with fakes


class FakeBatch:
    def __init__(self, n: int, transactions: tuple[Transaction, ...]) -> None:
        self.id, self.transactions, self.url = n, transactions, "http://r1"


class FakeSubscriber:
    """get/ack of drc.client.Subscriber, recording when acks happen relative to publishing."""

    def __init__(self, batches: list[FakeBatch], events: list[str]) -> None:
        self.batches, self.events, self.position = batches, events, 0

    def get(self, timeout: float | None = None) -> FakeBatch:
        return self.batches[self.position]

    def ack(self, batch: FakeBatch) -> None:
        self.events.append(f"ack {batch.id}")
        self.position += 1


class FlakyBroker:
    """A Sink that stores what it confirms and loses its connection at chosen publishes."""

    def __init__(self, stored: list[str], events: list[str], fail_at: set[int]) -> None:
        self.stored, self.events, self.fail_at = stored, events, fail_at
        self.unconfirmed: list[str] = []

    def publish(self, messages: Sequence[Message]) -> None:
        for message in messages:
            if len(self.stored) + len(self.unconfirmed) in self.fail_at:
                self.fail_at.discard(len(self.stored) + len(self.unconfirmed))
                raise SinkUnavailableError("connection lost")
            self.unconfirmed.append(message.message_id)

    def confirm(self) -> None:
        self.events.append(f"confirm {len(self.unconfirmed)}")
        self.stored.extend(self.unconfirmed)
        self.unconfirmed = []

    def close(self) -> None:
        self.unconfirmed = []  # unconfirmed messages of a lost connection may be lost


def rows(first: int, count: int) -> Transaction:
    changes = [RowChange("s", "t", Op.INSERT, None, {"id": n}) for n in range(first, first + count)]
    return Transaction(SCN(first + 1, 1, 1, first + 1), 1, None, 0, tuple(changes))


def run_batches(fail_at: set[int], confirm_every: int) -> tuple[list[str], list[str], SinkRunner]:
    events: list[str] = []
    stored: list[str] = []
    batches = [FakeBatch(1, (rows(0, 7),)), FakeBatch(2, (rows(10, 5), rows(20, 3)))]
    sub = FakeSubscriber(batches, events)
    sleeps: list[float] = []
    runner = SinkRunner(
        sub, lambda: FlakyBroker(stored, events, fail_at), KeyCache(lambda *a: ("id",)), 4,  # type: ignore[arg-type]
        confirm_every=confirm_every, sleep=sleeps.append,
    )  # fmt: skip
    runner.step()
    runner.step()
    return stored, events, runner


def test_a_batch_is_acked_only_after_the_broker_confirmed_all_of_it() -> None:
    stored, events, runner = run_batches(set(), confirm_every=3)
    assert events == ["confirm 3", "confirm 3", "confirm 1", "ack 1",
                      "confirm 3", "confirm 3", "confirm 2", "ack 2"]  # fmt: skip
    assert len(stored) == 15 == runner.stats.messages
    assert runner.stats.transactions == 3


def test_a_lost_broker_is_reconnected_and_publishing_resumes_at_the_first_unconfirmed() -> None:
    stored, events, runner = run_batches({4, 11}, confirm_every=3)
    expected = [m.message_id for b in (rows(0, 7), rows(10, 5), rows(20, 3))
                for m in transaction_messages(b, lambda *a: ("id",), 4)]  # fmt: skip
    assert stored == expected  # none lost, none twice (the fake loses what it did not confirm)
    assert runner.stats.reconnects == 2
    assert events.index("ack 1") > events.index("confirm 3")


def test_a_refusal_is_not_retried() -> None:
    class Refusing(FlakyBroker):
        def publish(self, messages: Sequence[Message]) -> None:
            raise ValueError("refused")

    sub = FakeSubscriber([FakeBatch(1, (rows(0, 2),))], [])
    runner = SinkRunner(sub, lambda: Refusing([], [], set()), KeyCache(lambda *a: ()), 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        runner.step()
    assert sub.position == 0  # not acked


# ---------------------------------------------------------------- several connections at once


class Recording:
    """A Sink fake: what each connection published, in order; fails where told."""

    def __init__(self, log: dict[int, list[str]], fail: type[Exception] | None = None) -> None:
        self.log, self.fail, self.closed = log, fail, False
        self.index = len(log)
        log[self.index] = []

    def publish(self, messages: Sequence[Message]) -> None:
        if self.fail is not None and messages:
            raise self.fail("broker trouble")
        self.log[self.index].extend(m.message_id for m in messages)

    def confirm(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_parallel_connections_each_publish_whole_queues_in_stream_order() -> None:
    from drc.sink.parallel import ParallelSink

    log: dict[int, list[str]] = {}
    made: list[Recording] = []

    def connect() -> Recording:
        made.append(Recording(log))
        return made[-1]

    messages = [m for t in (rows(0, 30), rows(40, 30)) for m in transaction_messages(t, keys_id, 8)]
    sink = ParallelSink(connect, 3)
    sink.publish(messages)
    sink.confirm()
    by_id = {m.message_id: m for m in messages}
    published = [i for ids in log.values() for i in ids]
    assert sorted(published) == sorted(by_id)  # each once
    for ids in log.values():
        queues = {by_id[i].queue for i in ids}
        assert len({q % 3 for q in queues}) <= 1  # a queue belongs to one connection
        order = [messages.index(by_id[i]) for i in ids]
        assert order == sorted(order)
    sink.close()
    assert all(r.closed for r in made)


def test_parallel_connections_report_a_refusal_before_a_lost_connection() -> None:
    from drc.sink.base import SinkRejectedError
    from drc.sink.parallel import ParallelSink

    log: dict[int, list[str]] = {}
    kinds = iter([SinkUnavailableError, SinkRejectedError, None])
    sink = ParallelSink(lambda: Recording(log, next(kinds)), 3)
    sink.publish([m for t in (rows(0, 40),) for m in transaction_messages(t, keys_id, 3)])
    with pytest.raises(SinkRejectedError):
        sink.confirm()
    sink.close()
