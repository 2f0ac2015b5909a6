"""Bulk pipelines over key-range chunks: the partition planner (snapshot and verify share it)."""
