"""Bulk catch-up: a backlog replayed in bulk (Spark), reduced to the net change per row, handed
over to streaming apply at an exact SCN. Importing this package loads no Spark: modules that
need pyspark import it themselves. The lease and run journal a streaming channel reads too are
apply's (drc.apply.lease, drc.apply.catchup_journal)."""
