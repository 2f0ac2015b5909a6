"""The MySQL layer: how DRC talks to a MySQL/MariaDB server it reads or writes.

    sql.py       SQL text and identifier quoting, the values bound to it, and ``literal``,
                 the one function that writes a value into SQL text (pure)
    errors.py    what a server's failures become in DRC's error tree; ``translate`` (pure)
    driver.py    connection settings, connections (pymysql), the driver's exception types
    protocol.py  the client protocol DRC pipelines with: COM_QUERY framing, replies read
    session.py   Session: a connection set up for writing (sql_mode, UTC, skip_replication),
                 statements, pipelined SELECTs, DDL sessions (ddl.py)

How a value reaches a statement: bound as a ``%s`` parameter (the rule), or, where a statement
must be text (a pipelined one, a stored trigger body), written by ``sql.literal``; names are
quoted by ``sql.quote``/``sql.ident``/``sql.account``. A snapshot's copied rows are rendered
by the origin server (drc.snapshot.rows), never by Python.

Nothing is imported here: a process that needs only the SQL text (a Spark worker of
``drc verify``) does not load the driver.
"""
