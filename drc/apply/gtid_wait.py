"""Read your writes across datacenters: has this process applied a source GTID yet?

A client that wrote on dc1 reads its GTID there (``@@last_gtid``) and asks dc2's API
``GET /v1/wait?gtid=...`` (drc.api.waits) before reading on dc2. The answer comes from the
channels' passed positions (drc.apply.gtids), never from the target: in memory, so a waiting
request costs no query.

Which channel: the one whose position holds the GTID's domain (each datacenter writes its own
``gtid_domain_id``, which its captured positions carry). Several channels with that domain
(sources that share a domain number): the one whose position in it was written by the GTID's
server id, else the request must name the channel. A domain none of the channels holds is a
404 once every channel asked has passed a transaction since it started (before that its
domains are not known yet, and the wait goes on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from drc.apply.gtids import AppliedGtids, Passed, domains
from drc.core.control import ControlError
from drc.core.errors import shown
from drc.core.gtid import Gtid


class GtidWait:
    """``channels``: name -> its passed GTIDs; ``describe``: name -> "running, lag 0.4s"."""

    def __init__(
        self, channels: Mapping[str, AppliedGtids], describe: Callable[[str], str]
    ) -> None:
        self._channels = dict(channels)
        self._describe = describe

    def check(self, gtids: Sequence[Gtid], channel: str | None = None) -> dict[str, Any]:
        """``{"applied": True, "gtids": [...]}`` once every GTID is passed, else
        ``{"applied": False, "waiting_for": why}``; raises ControlError 404 (no channel has
        that domain, an unknown channel) or 400 (which channel is ambiguous)."""
        names = self._asked(channel)
        done: list[dict[str, Any]] = []
        for gtid in gtids:
            name = self._receiver(gtid, names)
            if name is None:
                return {"applied": False, "waiting_for": self._unknown(names)}
            passed = self._channels[name].passed(gtid)
            if passed is None:
                return {"applied": False, "waiting_for": self._behind(gtid, name)}
            done.append(_shown(name, passed))
        return {"applied": True, "gtids": done}

    def _asked(self, channel: str | None) -> list[str]:
        if channel is None:
            return list(self._channels)
        if channel not in self._channels:
            known = ", ".join(self._channels) or "-"
            raise ControlError(f"no channel {shown(channel)} here; channels: {known}", 404)
        return [channel]

    def _receiver(self, gtid: Gtid, names: list[str]) -> str | None:
        """The channel that receives ``gtid``'s domain; None while it cannot be known yet."""
        positions = {name: self._channels[name].position() for name in names}
        having = [name for name in names if gtid.domain in positions[name]]
        if len(having) > 1:
            by_server = [n for n in having if positions[n][gtid.domain].server_id == gtid.server_id]
            if len(by_server) != 1:
                raise ControlError(
                    f"GTID {gtid}: domain {gtid.domain} is received by channels "
                    f"{', '.join(having)}; name one with channel=NAME (drc wait --channel)",
                    400,
                )
            having = by_server
        if having:
            return having[0]
        if all(positions.values()):  # every channel knows its domains: none is this one
            received = "; ".join(f"{n} receives {domains(positions[n])}" for n in names)
            raise ControlError(
                f"no channel here receives GTID domain {gtid.domain} ({gtid}): {received}; "
                "ask the API of a datacenter that applies the one the GTID was written on",
                404,
            )
        return None

    def _unknown(self, names: list[str]) -> str:
        starting = [n for n in names if not self._channels[n].position()]
        return ", ".join(
            f"channel {n} ({self._describe(n)}) has passed no transaction since it started"
            for n in starting
        )

    def _behind(self, gtid: Gtid, name: str) -> str:
        at = self._channels[name].position()[gtid.domain]
        return (
            f"channel {name} ({self._describe(name)}) has applied domain {gtid.domain} "
            f"up to {at}, not {gtid} yet"
        )


def _shown(name: str, passed: Passed) -> dict[str, Any]:
    return {
        "gtid": str(passed.gtid),
        "channel": name,
        "position": str(passed.position),  # the channel's position in that domain, now
        "applied_at": passed.at,  # Unix time of the commit that passed it; None: earlier
    }
