"""drc verify: compare a channel's source and target tables chunk by chunk on Spark, and repair."""
