"""The binlog, decoded by DRC: python-mysql-replication connects, DRC reads and decodes.

    BinlogStream (drc.replicator.source)
      |  python-mysql-replication: connection, checksum and heartbeat set-up, COM_BINLOG_DUMP,
      |  the first event; later the rare TABLE_MAP / QUERY / FORMAT_DESCRIPTION parses
      v
    wire.Frames        MySQL packets of the replication connection        (adapter: pymysql)
      v
    events.EventDecoder  header, GTID, XID, ROTATE, heartbeat, rows -> source events  (pure)
      |                  TableMaps: parsed TABLE_MAPs by their exact bytes
      v                  library.LibraryParser: the packets the library parses  (adapter)
    rows.decode_rows   a rows event body -> (before, after) row dicts          (pure)
      v
    values.read_value  one column value's bytes -> its exact Python value     (pure)
    columns.RowLayout  per table: how each column is read (from the library's TABLE_MAP)

The pure modules are plain typed functions over ``bytes`` and offsets, with frozen layouts and
no dynamic dispatch, so they can be compiled (mypyc, Cython) as they are. No module here
uses a private name of another library (tests/unit/test_private_names.py); what they rely on
of the libraries is pinned by tests/unit/test_binlog_contract.py.
"""
