"""The source database as a full consumer group reads it (drc.api.group_service.FullSource).

Planning splits the group's tables as ``drc snapshot`` does (drc.bulk.planner: primary-key
ranges of about ``chunk_rows`` rows). Serving a chunk is one consistent read: ``START
TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY`` (no lock; writers go on), whose binlog
position MariaDB reports (``Binlog_snapshot_file`` / ``_position``): the rows hold exactly the
transactions committed before it. With the captured stream's change_id and server_id that
position is an SCN of the stream, ``read_at``; it must be at or after the group's start ``S``
(the server is the one the replicator captures, and the read comes after the group was made),
else the chunk is refused rather than served from another history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drc.bulk.planner import chunk_where, list_tables, order_by, plan_table
from drc.core.chunks import Chunk
from drc.core.consumer_groups import GroupSpec, GroupStateError
from drc.core.group_full import ChunkRows, FullChunk, decode_bound, encode_bound
from drc.core.jsonwire import value_to_json
from drc.core.scn import SCN, split_binlog_name
from drc.core.tablefilter import TableFilter, TableFilterError
from drc.mysql import driver
from drc.mysql.sql import table_name

MAX_CHUNKS = 5_000  # the group's state is one ZooKeeper node (1 MB at most)


class SourceTables:
    """Reads the captured server; ``settings_of()`` gives its connection settings now."""

    def __init__(self, settings_of: Callable[[], Any]) -> None:
        self._settings_of = settings_of

    def _connect(self, what: str) -> Any:
        settings = self._settings_of()
        try:
            return driver.connect(settings)
        except (driver.DriverError, OSError) as exc:
            raise GroupStateError(
                503, f"the source database failed while {what}: {exc}; retry"
            ) from exc

    def plan(self, spec: GroupSpec) -> list[FullChunk]:
        try:
            wanted = TableFilter.parse_list(spec.tables)
        except TableFilterError as exc:
            raise GroupStateError(400, f"tables: {exc}") from exc
        conn = self._connect("planning a full group's chunks")
        try:
            planned = [
                chunk
                for schema, table in list_tables(conn, wanted)
                for chunk in plan_table(conn, schema, table, spec.chunk_rows).chunks
            ]
        except (driver.DriverError, OSError) as exc:
            raise GroupStateError(503, f"the source database failed while planning: {exc}") from exc
        finally:
            conn.close()
        if len(planned) > MAX_CHUNKS:
            raise GroupStateError(400, f"the tables make {len(planned)} chunks of "
                                  f"{spec.chunk_rows} rows, more than {MAX_CHUNKS}: raise "
                                  "chunk_rows")  # fmt: skip
        if not planned:
            raise GroupStateError(400, f"no source table matches {spec.tables or '*.*'}: a "
                                  "full group needs at least one")  # fmt: skip
        return [
            FullChunk(
                i,
                f"{c.schema}.{c.table}",
                c.index_columns,
                encode_bound(c.lower),
                encode_bound(c.upper),
            )  # fmt: skip
            for i, c in enumerate(planned)
        ]

    def read(self, chunk: FullChunk, start: SCN) -> ChunkRows:
        schema, table = chunk.table.split(".", 1)
        planned = Chunk(schema, table, chunk.columns, decode_bound(chunk.lower),
                        decode_bound(chunk.upper), 0)  # fmt: skip
        where = chunk_where(planned)
        conn = self._connect(f"reading chunk {chunk.index} ({chunk.table})")
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@server_id")
                server_id = int(cur.fetchone()[0])
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {str(k).lower(): v for k, v in cur.fetchall()}
                cur.execute(
                    f"SELECT * FROM {table_name(schema, table)} WHERE {where.sql}"
                    f"{order_by(planned)}",
                    where.params or None,
                )
                columns = [str(d[0]) for d in cur.description]
                rows = [[value_to_json(v) for v in row] for row in cur.fetchall()]
                cur.execute("COMMIT")
        except (driver.DriverError, OSError) as exc:
            raise GroupStateError(
                503, f"the source database failed while reading chunk {chunk.index}: {exc}"
            ) from exc
        finally:
            conn.close()
        return ChunkRows(_read_at(status, server_id, start), columns, rows)


def _read_at(status: dict[str, Any], server_id: int, start: SCN) -> SCN:
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or pos is None:
        raise GroupStateError(503, "the source reports no binlog snapshot position: it needs "
                              "log_bin on, and InnoDB tables")  # fmt: skip
    if server_id != start.server_id:
        raise GroupStateError(503, f"the source answering is server_id {server_id}, the "
                              f"group's stream is server_id {start.server_id}: retry once "
                              "the replicator reads its source again")  # fmt: skip
    read_at = SCN(start.change_id, start.server_id, split_binlog_name(str(file))[1], int(pos))
    if read_at < start:
        raise GroupStateError(503, f"the source's snapshot ({read_at}) is before the group's "
                              f"start ({start}): retry")  # fmt: skip
    return read_at
