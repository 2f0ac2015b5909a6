"""DRC: bidirectional MySQL/MariaDB replication across datacenters."""

from drc import native

__version__ = "0.1.0"

# Before any drc module is imported: the compiled hot path or the pure one (DRC_COMPILED).
native.install()
