"""DRC: bidirectional MySQL/MariaDB replication across datacenters."""

__version__ = "0.1.0"
