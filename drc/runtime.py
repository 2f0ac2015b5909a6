"""Composition root: build DRC's services from a validated config and wire them together.

Components never read files or the environment themselves; this module does, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drc.config import DrcConfig
from drc.eventbuffer import EventBuffer
from drc.metastore.store import MetaStore
from drc.replicator.assembler import FragmentLimits
from drc.replicator.replicator import CaptureOptions, Replicator
from drc.replicator.source import SourceSettings

METASTORE_FILE = "metastore.sqlite3"


@dataclass
class ReplicatorService:
    replicator: Replicator
    buffer: EventBuffer
    metastore: MetaStore

    def close(self) -> None:
        self.buffer.close()
        self.metastore.close()


def source_settings(config: DrcConfig) -> SourceSettings:
    src = config.source
    return SourceSettings(
        host=src.host,
        port=src.port,
        user=src.user,
        password=src.secret(),
        replica_server_id=src.replica_server_id,
        heartbeat_s=src.heartbeat_s,
    )


def open_buffer(config: DrcConfig) -> EventBuffer:
    buf = config.replicator.buffer
    return EventBuffer.open(
        config.replicator.buffer_dir,
        segment_bytes=buf.segment_mb << 20,
        fsync=buf.fsync,
        compress=buf.compress,
        retain_bytes=int(buf.retain_gb * (1 << 30)) if buf.retain_gb else None,
        retain_seconds=buf.retain_hours * 3600 if buf.retain_hours else None,
    )


def build_replicator(config: DrcConfig) -> ReplicatorService:
    rep = config.replicator
    Path(rep.buffer_dir).mkdir(parents=True, exist_ok=True)
    buffer = open_buffer(config)
    metastore = MetaStore.open(Path(rep.buffer_dir) / METASTORE_FILE)
    options = CaptureOptions(
        capture=rep.capture_filter(),
        start_from=rep.start_from,
        fragments=FragmentLimits(rows=rep.fragment_rows, bytes=int(rep.fragment_mb * (1 << 20))),
        commit_max_ms=rep.commit_max_ms,
        spill_dir=Path(rep.buffer_dir),
    )
    replicator = Replicator(source_settings(config), buffer, metastore, options)
    return ReplicatorService(replicator, buffer, metastore)
