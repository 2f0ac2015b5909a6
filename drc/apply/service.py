"""The apply part of the composition root: channels built from a config and wired together.

``build_parts`` is the one place a channel's parts are made from its config: the target
session, the subscriber to the remote stream, the filter chain, the conflict engine and its
tables, the decision engine, and the channel's collaborators (drc.apply.channel.ChannelParts):
its source, group writer, catch-up handover, DDL, operator actions, start-up, retries and
status. drc.node and ``python -m drc.apply`` build every ``[[channels]]`` entry through
``build_channels``, with what only the composition root may give a channel
(drc.runtime.catchup_finisher); the lww guard is built here too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from drc.apply.actions import OperatorActions
from drc.apply.channel import ApplyChannel, ChannelParts
from drc.apply.control import ChannelControl
from drc.apply.ddl import DdlApplier
from drc.apply.desk import ChannelsDesk, RemoteLookup
from drc.apply.engine import ApplyEngine
from drc.apply.group import GroupLimits
from drc.apply.handover import CatchupHandover, FinishRun
from drc.apply.osc_pending import ReplayOnlineSchemaChange
from drc.apply.parallel import ParallelWriter, Worker
from drc.apply.retrier import Retrier
from drc.apply.rowstages import ExcludeColumns, FilterRows
from drc.apply.sink import TargetSession
from drc.apply.source import ChannelSource, Subscribe, SubscriberLike
from drc.apply.stages import (
    KeepApplicableDdl,
    KeepTables,
    MapNames,
    NameMap,
    SkipDrcOriginated,
    Stage,
)
from drc.apply.startup import ChannelStartup
from drc.apply.status import ChannelStatus
from drc.apply.transforms import Transforms
from drc.apply.writer import GroupWriter
from drc.client import ApiUnavailableError, Subscriber, discovery
from drc.client.status import fetch_position, fetch_status
from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.conflicts.engine import ConflictEngine
from drc.conflicts.policies import Policies
from drc.conflicts.rules import Ranks
from drc.conflicts.settings import ConflictsConfig
from drc.conflicts.target import ConflictTarget
from drc.core.markers import CHECKPOINT_SCHEMA, HEARTBEAT_TABLE, TOMBSTONE_PREFIX
from drc.core.online_schema_change import with_shadows
from drc.core.scn import SCN
from drc.mysql.driver import TargetSettings

log = logging.getLogger(__name__)

JOIN_POLL_S = 0.2

SubscriberFactory = Callable[[ChannelConfig, SCN], SubscriberLike]


def default_subscriber(channel: ChannelConfig, after: SCN) -> SubscriberLike:
    return Subscriber(
        list(channel.remote),
        after=after,
        tables=",".join(channel.tables) or None,
        token=channel.secret(),
        skip_drc=True,
        binary=True,
        wait_ms=channel.wait_ms,
        verify=channel.https_verify(),
        stream=channel.transport == "stream",
        compression=channel.compression,
        # A large transaction in pages of max_bytes: neither side holds all of it.
        split=True,
    )


def target_settings(target: Any) -> TargetSettings:
    """TargetSettings from anything with host, port, user and password (str or SecretStr),
    and TLS settings if it has ``mysql_tls()`` (a TargetConfig)."""
    if isinstance(target, TargetSettings):
        return target
    password: Any = getattr(target, "password", None)
    if hasattr(target, "secret"):
        password = target.secret()
    elif password is not None and hasattr(password, "get_secret_value"):
        password = password.get_secret_value()
    settings = TargetSettings(target.host, target.port, target.user, password or "")
    if hasattr(target, "mysql_tls"):
        settings = replace(settings, tls=target.mysql_tls())
    return settings


def build_channel(
    channel: ChannelConfig,
    target: Any,
    *,
    kind: type[ApplyChannel] = ApplyChannel,
    **options: Any,
) -> ApplyChannel:
    """A channel writing into ``target`` (TargetSettings, or anything :func:`target_settings`
    takes). ``options``: those of :func:`build_parts`."""
    return kind(build_parts(channel, target, **options))


def build_parts(
    channel: ChannelConfig,
    target: Any,
    *,
    conflicts: ConflictsConfig | None = None,
    datacenter: str = "",
    subscriber_factory: SubscriberFactory | None = None,
    connect: Callable[..., Any] | None = None,
    finish: FinishRun | None = None,
    lease_owner: str = "",
    hold_on_error: bool = False,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] | None = None,
) -> ChannelParts:
    """A channel's parts (see :func:`build_channel`); bulk catch-up executors build the same
    target session, filter chain and decisions from the same config.

    ``conflicts``: the config's [conflicts]; ``subscriber_factory`` and ``connect`` replace the
    pull API client and pymysql.connect in tests; ``finish``: how the channel finishes an
    interrupted catch-up run itself (the composition root's, drc.runtime; None: it waits for
    ``drc catchup``); ``lease_owner``: a catch-up driver's, whose own channel writes only under
    its lease; ``hold_on_error``: a rejected change leaves the channel stopped, waiting for an
    operator (drc.apply.actions); ``clock``, ``wall_clock`` and ``sleep`` (a retry's wait,
    else one on the channel's stop flag) replace time's in tests."""
    settings = target_settings(target)
    session = TargetSession(settings) if connect is None else TargetSession(settings, connect)
    names = NameMap(channel.map_tables, channel.map_columns)
    handling = _conflict_target(channel, session, conflicts, datacenter, names)
    filters, subscribe = channel_filters(channel, handling is not None, subscriber_factory)
    status = ChannelStatus(channel.name, channel.wait_ms, wall_clock)
    rejoin = partial(_rejoined, tombstones=handling is not None, factory=subscriber_factory)
    source = ChannelSource(
        channel, session, filters, subscribe, status.progress, rejoin=rejoin, clock=clock
    )
    handover = CatchupHandover(session, channel.name, owner=lease_owner, finish=finish, clock=clock)
    actions = OperatorActions(channel.name, hold_on_error=hold_on_error)
    engine = ApplyEngine(
        session, channel.no_primary_key, None if handling is None else handling.engine
    )
    single = GroupWriter(session, engine, actions.control, handling, channel=channel.name)
    writer: GroupWriter | ParallelWriter = single
    if channel.parallel_workers > 1:
        writer = ParallelWriter(
            single, channel.name, channel.parallel_workers,
            partial(_worker, channel, session, handling, actions.control, conflicts, datacenter,
                    names),
        )  # fmt: skip
    return ChannelParts(
        target=session,
        source=source,
        writer=writer,
        handover=handover,
        ddl=DdlApplier(session, channel.name, channel.definer, handling),
        actions=actions,
        startup=ChannelStartup(session, source, handover, actions.control, handling),
        retrier=Retrier(session, handover, status, retries=channel.retries, sleep=sleep),
        status=status,
        limits=GroupLimits(
            max_txns=channel.max_txns_per_commit,
            max_bytes=int(channel.max_bytes_per_commit_mb * (1 << 20)),
            max_delay_s=channel.max_commit_delay_ms / 1000,
        ),
        clock=clock,
        conflicts=handling,
    )


def _rejoined(
    channel: ChannelConfig,
    extra: Sequence[str],
    *,
    tombstones: bool,
    factory: SubscriberFactory | None,
) -> tuple[list[Stage], Subscribe]:
    """The chain and subscription of ``channel`` with ``extra`` source tables selected too
    (tables a snapshot joined: drc.apply.windows)."""
    wider = channel.model_copy(update={"tables": (*channel.tables, *extra)})
    return channel_filters(wider, tombstones, factory)


def channel_filters(
    channel: ChannelConfig, tombstones: bool, subscriber_factory: SubscriberFactory | None = None
) -> tuple[list[Stage], Subscribe]:
    """The filter chain and the subscription of ``channel`` (also what a config reload gives a
    running channel: a reload, drc.apply.actions)."""
    replays = channel.online_schema_change == "replay"
    if replays:  # the tool's shadow tables too, which the stage leaves out
        channel = channel.model_copy(update={"tables": with_shadows(channel.tables)})
    filters: list[Stage] = [
        SkipDrcOriginated(),
        KeepTables(channel.table_filter(), tombstones=tombstones),
        KeepApplicableDdl(channel.objects),
    ]
    if channel.row_filters:  # only when set: catch-up's fast path knows the other stages
        filters.append(FilterRows(channel.row_predicates()))
    if channel.exclude_columns:  # before the hooks: they never see what is left out
        filters.append(ExcludeColumns(channel.exclude_columns))
    if channel.transforms:
        filters.append(Transforms(channel.transforms))
    if replays:  # after the hooks: they never see its rows
        filters.append(ReplayOnlineSchemaChange(channel.name))
    filters.append(MapNames(NameMap(channel.map_tables, channel.map_columns)))
    subscribed = _subscription(channel, tombstones)
    return filters, partial(subscriber_factory or default_subscriber, subscribed)


def _worker(
    channel: ChannelConfig,
    main: TargetSession,
    handling: ConflictTarget | None,
    control: ChannelControl,
    conflicts: ConflictsConfig | None,
    datacenter: str,
    names: NameMap,
) -> Worker:
    """One more connection of a parallel channel, deciding as the channel's own does."""
    session = TargetSession(main.settings, main.connect)
    shared = None
    if handling is not None:
        own = _conflict_target(channel, session, conflicts, datacenter, names)
        assert own is not None
        shared = handling.sharing(session, own.engine)
    engine = ApplyEngine(session, channel.no_primary_key, None if shared is None else shared.engine)
    return Worker(session, GroupWriter(session, engine, control, shared))


def _conflict_target(
    channel: ChannelConfig,
    session: TargetSession,
    config: ConflictsConfig | None,
    datacenter: str,
    names: NameMap,
) -> ConflictTarget | None:
    policies = Policies.from_config(config) if config is not None else None
    if config is None or policies is None or not policies.active:
        return None
    engine = ConflictEngine(
        policies, Ranks(config.priority), channel=channel.name, origin=channel.origin,
        datacenter=datacenter, tables=session.table, names=names,
    )  # fmt: skip
    retention_s = int(config.tombstone_retention_hours * 3600)
    return ConflictTarget(session, engine, policies, retention_s, config.log_retention_days)


def _subscription(channel: ChannelConfig, tombstones: bool) -> ChannelConfig:
    """The channel's config as subscribed: a table list also asks for the heartbeat rows
    (drc.core.heartbeat) and, with conflicts, the tombstone rows."""
    if not channel.tables:
        return channel
    tables = (*channel.tables, f"{CHECKPOINT_SCHEMA}.{HEARTBEAT_TABLE}")
    if tombstones:
        tables += (f"{CHECKPOINT_SCHEMA}.{TOMBSTONE_PREFIX}*",)
    return channel.model_copy(update={"tables": tables})


def build_channels(
    config: DrcConfig,
    names: Sequence[str] = (),
    *,
    finish: Callable[[ChannelConfig], FinishRun] | None = None,
    hold_on_error: bool = False,
    wall_clock: Callable[[], float] = time.time,
) -> list[ApplyChannel]:
    """One ApplyChannel per ``[[channels]]`` entry (or only those named), writing into
    ``[target]``, or into the ``[source]`` database when there is no [target]. ``finish``:
    how a channel finishes its interrupted catch-up run (drc.runtime.finishing);
    ``hold_on_error``: see :func:`build_parts` (channels an operator controls: drc run);
    ``wall_clock``: this host's clock, for lag."""
    unknown = set(names) - {c.name for c in config.channels}
    if unknown:
        known = ", ".join(c.name for c in config.channels) or "none"
        raise ValueError(f"no channel named {sorted(unknown)} in the config (channels: {known})")
    target = target_settings(config.target_or_source())
    return [
        build_channel(
            channel,
            target,
            conflicts=config.conflicts,
            datacenter=config.datacenter.name,
            finish=None if finish is None else finish(channel),
            hold_on_error=hold_on_error,
            wall_clock=wall_clock,
        )  # fmt: skip
        for channel in config.channels
        if not names or channel.name in names
    ]


def run_channels(
    channels: Sequence[ApplyChannel], stop: threading.Event
) -> dict[str, BaseException]:
    """Run every channel in its own thread until ``stop``; returns the errors that stopped any.

    A channel that fails stops alone; the others go on (their streams are independent).
    """
    failures: dict[str, BaseException] = {}

    def run(channel: ApplyChannel) -> None:
        try:
            channel.run(stop)
        except BaseException as exc:  # reported to the caller, which decides the exit status
            failures[channel.name] = exc

    threads = [
        threading.Thread(target=run, args=(c,), name=f"drc-apply-{c.name}", daemon=True)
        for c in channels
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        # Never an unbounded join: a blocked join keeps the main thread from running a signal
        # handler when the kernel delivers SIGTERM to another thread (the process would hang).
        while thread.is_alive():
            thread.join(JOIN_POLL_S)
    return failures


def build_desk(
    config: DrcConfig,
    channels: Sequence[ApplyChannel],
    report: Callable[[ApplyChannel], dict[str, Any]],
) -> ChannelsDesk:
    """Channel control for ``channels`` (drc.apply.desk), built with ``hold_on_error`` so
    they wait, stopped, for an operator's skip, resume or rewind instead of ending on a change
    the target rejects."""
    settings = target_settings(config.target_or_source())
    by_name = {c.name: c for c in config.channels}

    def ask(channel: ApplyChannel, question: Callable[[str, Any, Any], Any]) -> Any:
        wanted = by_name[channel.name]
        token, verify = wanted.secret(), wanted.https_verify()
        last: Exception | None = None
        for url in discovery.members(wanted.remote):  # the first member that answers
            try:
                return question(url, token, verify)
            except ApiUnavailableError as exc:
                last = exc
        assert last is not None
        raise last

    def position(channel: ApplyChannel, at_ms: int) -> SCN:
        return ask(channel, lambda u, t, v: fetch_position(u, at_ms, t, verify=v))  # type: ignore[no-any-return]

    def oldest(channel: ApplyChannel) -> SCN:
        status = ask(channel, lambda u, t, v: fetch_status(u, t, verify=v))
        return SCN.parse(str(status["buffer"]["oldest_servable"]))

    return ChannelsDesk(
        channels, lambda: TargetSession(settings), RemoteLookup(position, oldest), report
    )
