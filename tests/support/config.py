"""The smallest valid datacenter config, and a helper that writes config text to a file."""

from __future__ import annotations

from pathlib import Path

BASE = """
[datacenter]
name = "dc1"
[source]
user = "drc"
password = "s3cret-value"
[replicator]
buffer_dir = "/tmp/x"
"""


def write_config(tmp_path: Path, text: str) -> Path:
    """``text`` written to ``tmp_path``/dc.toml; its path."""
    path = tmp_path / "dc.toml"
    path.write_text(text)
    return path
