"""``drc snapshot``: a live copy of the origin's tables, joined to a channel (docs/snapshot.md)."""
