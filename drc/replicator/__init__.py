"""The replicator: tails a source binlog and appends committed transactions to the EventBuffer."""
