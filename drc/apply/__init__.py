"""Apply: write a remote datacenter's change stream into the local database, exactly once.

    channel.py     the loop: subscribe, filter, group, write, checkpoint (start here)
    source.py      the stream: subscription, filter chain, tables snapshots joined, the pull
    writer.py      one group's decisions and writes, committed with the checkpoint row
    startup.py     a channel's tables on the target, and the checkpoint it resumes after
    retrier.py     a channel's target transactions retried, and waits counted (rules: retry.py)
    status.py      what a channel shows: counters, state and lag, its stops
    handover.py    the catch-up lease each target transaction reads; an interrupted run finished
    ddl.py         replicated DDL, each statement run exactly once (ddl_journal.py)
    actions.py     every operator action declared (what it takes, checks, does); the queued
                   ones carried out in the channel's thread (desk.py: where the API takes them)
    lease.py       the channel's lease, taken by bulk catch-up and snapshots (a catch-up's run:
                   catchup_journal.py)
    stages.py      the filter chain (loop suppression, tables, mapping, idempotency, conflicts)
    group.py       many source transactions -> one target transaction, and its bounds
    engine.py      the decisions: row changes + the target's rows -> writes, conflict log
                   (conflicts are detected and resolved by drc.conflicts, beside apply)
    plan.py        row changes -> idempotent, grouped writes
    shapes.py      which writes of a transaction may be batched across others (key order)
    checkpoint.py  the drc.checkpoint row
    retry.py       which errors are retried, and how
    target.py      the Target protocol: what apply needs from the database it writes into
    sink.py        TargetSession: the target as a drc.mysql session, writes pipelined
    service.py     build_channel(s)(config): the composition root's apply part
    lww_guard.py   lww triggers and tombstones on the datacenter a table is created on

``python -m drc.apply --config FILE`` runs the channels of a config on their own.
"""
