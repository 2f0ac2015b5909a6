"""The tap on a live replication connection (drc.replicator.binlog.wire): once the library has
read the first event, DRC's own packet reads give exactly the packets the library would have
read, byte for byte, to the end of the binlog. (TLS connections: tests/integration/test_tls.py.)
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication import BinLogStreamReader

from drc.replicator.binlog.wire import Tap
from drc.sandbox.sandbox import ServerInfo
from tests.support.servers import connect, master_position


def _reader(server: ServerInfo, start: tuple[str, int], server_id: int, **kw: Any) -> Any:
    return BinLogStreamReader(
        connection_settings={"host": server.host, "port": server.port, "user": server.user,
                             "password": server.password},
        server_id=server_id, log_file=start[0], log_pos=start[1], resume_stream=True,
        blocking=False, filter_non_implemented_events=False, **kw,
    )  # fmt: skip


def test_packets_read_through_the_tap_are_the_librarys(dc1: ServerInfo) -> None:
    start = master_position(dc1)
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS tap_db")
        cur.execute("CREATE OR REPLACE TABLE tap_db.t (id INT PRIMARY KEY, v LONGTEXT)")
        cur.execute("INSERT INTO tap_db.t VALUES (1, 'a'), (2, REPEAT('x', 17000000))")  # > 16 MiB
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("UPDATE tap_db.t SET v = 'b' WHERE id = 1")
    conn.close()

    library = _reader(dc1, start, 99201)
    theirs = [event.packet.packet.get_all_data() for event in library]
    library.close()

    tap = Tap()
    ours_reader = _reader(dc1, start, 99202, pymysql_wrapper=tap.connect)
    try:
        first = ours_reader.fetchone()
        assert tap.reader is not None and tap.control is not None
        ours = [first.packet.packet.get_all_data()]
        frames = tap.frames()
        while (data := frames.next()) is not None:
            ours.append(data)
    finally:
        ours_reader.close()
    assert len(ours) == len(theirs) > 10
    assert ours == theirs
    assert max(map(len, ours)) > 17_000_000  # a payload over several MySQL packets
