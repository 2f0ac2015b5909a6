"""A channel's start: its tables on the target, and where it resumes.

The checkpoint table (drc.apply.checkpoint) and the DDL journal, the conflict tables and
triggers (drc.conflicts.target), the catch-up lease and run journal (drc.apply.handover) and the
snapshot tables (drc.apply.windows) are made if missing; the tables snapshots joined are read,
then the lease as the checkpoint is read, then the channel's rewinds and its checkpoint row.
"""

from __future__ import annotations

import logging

from drc.apply import actions, ddl_journal, windows
from drc.apply.control import ChannelControl
from drc.apply.handover import CatchupHandover
from drc.apply.source import ChannelSource
from drc.apply.target import Target
from drc.config_channels import ChannelConfig
from drc.conflicts.target import ConflictTarget
from drc.core.errors import DrcError
from drc.core.scn import SCN
from drc.core.target_errors import CheckpointMismatchError

log = logging.getLogger(__name__)


class ChannelStartup:
    def __init__(
        self,
        target: Target,
        source: ChannelSource,
        handover: CatchupHandover,
        control: ChannelControl,
        conflicts: ConflictTarget | None = None,
    ) -> None:
        self.target = target
        self.source = source
        self.handover = handover
        self.control = control  # its replay window is read back (drc.apply.actions: rewind)
        self.conflicts = conflicts

    def open(self, channel: ChannelConfig, applied: SCN) -> SCN:
        """One attempt: the target prepared, the checkpoint's SCN (``applied``, the channel's
        position so far, while it has no checkpoint row)."""
        target, name = self.target, channel.name
        target.ensure_checkpoint_table()
        target.execute(ddl_journal.purge(name), "purging the DDL journal")
        target.commit()
        if self.conflicts is not None:
            self.conflicts.setup()
        target.run_setup(
            [*self.handover.create_statements(), *windows.create_statements()[1:]],
            "creating the catch-up and snapshot tables",
        )
        self.source.read_windows()
        target.commit()
        self.handover.opened()
        # Read before the checkpoint, whose read commits: no transaction is left open (a
        # catch-up driver keeps this channel's session, idle, for the whole run).
        rewinds = target.query(actions.rewinds(name), "reading the channel's rewinds")
        row = target.read_checkpoint(name)
        if row is not None:
            if row.origin and row.origin != channel.origin:
                raise _origin_mismatch(name, row.origin, channel.origin)
            applied = row.scn
        self.control.replay_until = actions.replay_until([r[0] for r in rewinds], applied)
        log.info("channel %s (from %s) resumes after %s", name, channel.origin, applied)
        return applied


def _origin_mismatch(name: str, found: str, configured: str) -> DrcError:
    return CheckpointMismatchError(
        f"drc.checkpoint row {name!r} was written for origin {found!r} but the channel is "
        f"configured for origin {configured!r}: resuming would use another stream's SCN. "
        "Delete that row (the channel then starts from the beginning of the remote buffer) "
        "or give the channel a new name"
    )
