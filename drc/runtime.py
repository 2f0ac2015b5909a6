"""Composition root: build DRC's services from a validated config and wire them together.

Components never read files or the environment themselves; this module does, once. It also
joins what the package order keeps apart (docs/architecture.md): a streaming channel is handed
the catch-up that finishes its interrupted run (:func:`catchup_finisher`), so apply never
imports catch-up.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from drc.api.app import create_app
from drc.api.budget import ReaderBudget
from drc.api.deps import ApiDeps, ChannelDesk
from drc.api.group_service import GroupService, GroupStore, MemoryGroupStore
from drc.api.longpolls import LongPollGate, LongPollLimits
from drc.api.pullquery import ServerLimits
from drc.api.server import ApiServer, ApiServerError
from drc.apply.handover import FinishRun
from drc.apply.service import target_settings
from drc.apply.sink import TargetSession
from drc.apply.trigger_guard import LocalTriggerGuard
from drc.catchup.driver import Where, finish_interrupted
from drc.client.peers import Peer, PeerStatus
from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.config_replicator import ConsumerGroupConfig
from drc.core.consumer_groups import GroupSpec
from drc.core.errors import ConfigError, RetriableError
from drc.core.online_schema_change import with_shadows
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.metastore.store import MetaStore
from drc.mysql.driver import TargetSettings
from drc.replicator.assembler import FragmentLimits
from drc.replicator.backfill import BinlogBackfill
from drc.replicator.fencing import FencedMetaStore, GroupBuffer
from drc.replicator.full_source import SourceTables
from drc.replicator.group import GroupSettings
from drc.replicator.group_store import ZkGroupStore
from drc.replicator.heartbeat import (
    HeartbeatWriter,
    NoWritableServer,
    connector,
    writable_connector,
    writable_server,
)
from drc.replicator.member import GroupMemberRunner
from drc.replicator.replicator import CaptureOptions, Replicator
from drc.replicator.source import SourceSettings, inspect_source
from drc.tls import https_context

log = logging.getLogger(__name__)

METASTORE_FILE = "metastore.sqlite3"


@dataclass
class ReplicatorService:
    """A replicator, its buffer and metastore, and the pull API serving that buffer."""

    replicator: Replicator
    buffer: EventBuffer | GroupBuffer
    metastore: MetaStore
    config: DrcConfig | None = None
    api: ApiServer | None = None
    failure: BaseException | None = None  # what stopped capture, for /healthz
    # lww protection of this datacenter (set by the node when it runs the lww guard here)
    protection: Callable[[], dict[str, Any]] | None = None
    # the apply channels this process runs, for status and metrics (set by the node)
    channels: Callable[[], list[dict[str, Any]]] | None = None
    # components of this process that stopped on an error, for /healthz (set by the node)
    failures: Callable[[], list[tuple[str, BaseException]]] | None = None
    heartbeat: Callable[[], dict[str, Any] | None] | None = None  # the writer's stats
    trigger_guard: LocalTriggerGuard | None = None  # guards triggers created here
    desk: ChannelDesk | None = None  # channel control (set by the node when it runs channels)
    group: GroupMemberRunner | None = None  # with [group]: follows or leads (and captures)
    # this host's clock, for lag (drc.core.heartbeat); tests set one that runs off (clock skew)
    wall_clock: Callable[[], float] = time.time
    groups: GroupService | None = None  # consumer groups, served by the API

    def run_capture(self, stop: threading.Event) -> None:
        """Capture (or, in a group, follow or lead) until ``stop``; a fatal error is kept (the
        API reports it) and re-raised."""
        try:
            if self.group is not None:
                self.group.run(stop)
            else:
                self.replicator.run(stop)
        except BaseException as exc:
            self.failure = exc
            raise

    def start_api(self) -> ApiServer:
        """Serve the pull API on the configured address in this process, and rebalance its
        consumer groups while it leads; returns the server."""
        if self.config is None:
            raise RuntimeError("start_api needs the service built from a config")
        api, groups, stop = build_api(self.config, self)
        self.groups = groups
        self.api = api.start()
        threading.Thread(
            target=groups.run_rebalancer, args=(stop,), name="drc-group-rebalancer", daemon=True
        ).start()
        return self.api

    def close(self) -> None:
        if self.api is not None:  # first: no request may read a closed buffer
            self.api.stop()
        if self.groups is not None:
            self.groups.close()
        if self.trigger_guard is not None:
            self.trigger_guard.close()
        self.buffer.close()
        self.metastore.close()


def source_settings(config: DrcConfig) -> list[SourceSettings]:
    """One SourceSettings per configured source server (``[source] servers``, else host/port)."""
    src = config.source
    password = src.secret()
    return [
        SourceSettings(
            host=host,
            port=port,
            user=src.user,
            password=password,
            replica_server_id=src.replica_server_id,
            heartbeat_s=src.heartbeat_s,
            tls=src.mysql_tls(),
        )
        for host, port in src.addresses()
    ]


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
    buffer: EventBuffer | GroupBuffer
    buffer = (
        open_buffer(config) if config.group is None else GroupBuffer(lambda: open_buffer(config))
    )
    metastore = MetaStore.open(Path(rep.buffer_dir) / METASTORE_FILE)
    options = CaptureOptions(
        capture=capture_filter(config),
        start_from=rep.start_from,
        fragments=FragmentLimits(rows=rep.fragment_rows, bytes=int(rep.fragment_mb * (1 << 20))),
        commit_max_ms=rep.commit_max_ms,
        spill_dir=Path(rep.buffer_dir),
        omit_drc_rows=rep.drc_applied == "marker",
        mask=rep.masker(),
    )
    writes = (
        metastore if not isinstance(buffer, GroupBuffer) else FencedMetaStore(metastore, buffer)
    )
    replicator = Replicator(source_settings(config), buffer, writes, options)
    service = ReplicatorService(replicator, buffer, metastore, config)
    if isinstance(buffer, GroupBuffer):
        service.group = build_member(config, replicator, buffer, writes)
    if guards_local_triggers(config):
        service.trigger_guard = LocalTriggerGuard(
            lambda: TargetSession(local_primary(config)),
            replicator.stats,
            replays_tools=config.replays_online_schema_changes,
        )
        replicator.set_local_ddl(service.trigger_guard.submit)
    return service


def build_member(
    config: DrcConfig, replicator: Replicator, buffer: GroupBuffer, metastore: Any
) -> GroupMemberRunner:
    group = config.group
    assert group is not None
    settings = GroupSettings(
        hosts=group.zookeeper,
        path=group.group_path(config.datacenter.name),
        member_id=group.member_id,
        datacenter=config.datacenter.name,
        advertise_url=group.advertise_url.rstrip("/"),
        session_timeout_s=group.session_timeout_s,
        connect_retry_s=group.connect_retry_s,
        catch_up_wait_s=group.catch_up_wait_s,
    )
    tokens = config.api.secrets()
    source = source_settings(config)
    verify: Any = True
    if group.tls_ca is not None:
        verify = https_context(group.tls_ca, names=("group.tls_ca", "", ""))
    return GroupMemberRunner(
        settings,
        replicator,
        buffer,
        metastore,
        tokens[0] if tokens else None,
        lambda: _source_server_ids(source),
        verify=verify,
    )


def _source_server_ids(sources: list[SourceSettings]) -> frozenset[int] | None:
    """The server_ids of the configured source servers that answer (the group's identity
    check, drc.replicator.group); None when none does."""
    found: set[int] = set()
    failure: RetriableError | None = None
    for settings in sources:
        try:
            found.add(inspect_source(settings).server_id)
        except RetriableError as exc:
            failure = exc
    if not found and failure is not None:
        raise failure
    return frozenset(found) or None


def capture_filter(config: DrcConfig) -> TableFilter:
    """What capture selects: ``[replicator] include``/``exclude``, and where channels replay an
    online schema change tool's ALTER, the shadow tables of the included tables (the other
    datacenters' channels must see them to leave them out; drc.core.osc_replay)."""
    rep = config.replicator
    if not config.replays_online_schema_changes:
        return rep.capture_filter()
    return TableFilter.build(with_shadows(rep.include), rep.exclude)


def guards_local_triggers(config: DrcConfig) -> bool:
    """Whether triggers created here get DRC's guard (drc.apply.trigger_guard): when triggers
    are replicated, i.e. unless every channel of this datacenter leaves them out. (A config
    without channels, e.g. a replicator whose channels run elsewhere, guards.)"""
    return not config.channels or any("trigger" in c.objects for c in config.channels)


def peer_status(config: DrcConfig) -> PeerStatus:
    """The remote replicators of this datacenter's channels, for the status page."""
    return PeerStatus(
        [
            Peer(channel.origin, url, channel.secret(), channel.https_verify())
            for channel in config.channels
            for url in channel.remote
        ]
    )


def _source_servers(config: DrcConfig) -> list[TargetSettings] | None:
    """Each of several ``[source] servers`` as a session's settings; None when [target] (or
    the one source server) is where this datacenter's own writes go."""
    if config.target is not None or len(config.source.servers) <= 1:
        return None
    return [
        target_settings(config.source.model_copy(update={"host": host, "port": port}))
        for host, port in config.source.addresses()
    ]


def local_primary(config: DrcConfig) -> TargetSettings:
    """Where DRC writes into this datacenter's own database outside apply channels (trigger
    guards): [target], the source, or the writable one of several source servers (the one
    capture reads; the first listed when none answers, so the failure names a server)."""
    servers = _source_servers(config)
    if servers is None:
        return target_settings(config.target_or_source())
    try:
        return writable_server(servers)
    except NoWritableServer:
        return servers[0]


def catchup_finisher(config: DrcConfig) -> Callable[[ChannelConfig], FinishRun]:
    """How a channel of ``config`` finishes its interrupted catch-up run itself once the run's
    lease expired (drc.apply.handover): in this process, without Spark, into the channel's
    target (drc.catchup.driver.finish_interrupted)."""
    settings = target_settings(config.target_or_source())

    def finisher(channel: ChannelConfig) -> FinishRun:
        where = Where(channel, settings, config.conflicts, config.datacenter.name)
        say = partial(log.info, "channel %s: catch-up: %s", channel.name)
        return partial(finish_interrupted, where, out=say)

    return finisher


def build_heartbeat(
    config: DrcConfig, wall_clock: Callable[[], float] = time.time
) -> HeartbeatWriter | None:
    """This datacenter's heartbeat writer (drc.replicator.heartbeat), None when turned off;
    ``wall_clock`` stamps the beats."""
    interval = config.replicator.heartbeat_interval_s
    if not interval:
        return None
    servers = _source_servers(config)
    if servers is not None:
        return HeartbeatWriter(
            config.datacenter.name, writable_connector(servers), interval, writable_only=True,
            wall_clock=wall_clock,
        )  # fmt: skip
    settings = target_settings(config.target_or_source())
    return HeartbeatWriter(
        config.datacenter.name, connector(settings), interval, wall_clock=wall_clock
    )


def build_groups(config: DrcConfig, service: ReplicatorService) -> GroupService:
    """Consumer groups: kept in ZooKeeper in a replicator group (every member serves them, a
    failover keeps them), in memory for a lone replicator; rebalanced by the leader."""
    group = config.group
    store: GroupStore = (
        MemoryGroupStore()
        if group is None
        else ZkGroupStore(
            group.zookeeper, group.group_path(config.datacenter.name), group.session_timeout_s
        )
    )
    member = service.group

    def configured(group: ConsumerGroupConfig) -> Callable[[], GroupSpec]:
        def spec() -> GroupSpec:
            newest = service.buffer.last_scn
            start = group.after or str(newest if newest is not None else SCN.zero())
            return GroupSpec(
                group.name, ",".join(group.tables), group.rows or None, group.partitioning,
                group.ranges, group.heartbeat_timeout_s, start, group.skip_drc, group.full,
                group.chunk_rows,
            )  # fmt: skip

        return spec

    return GroupService(
        store,
        lambda: member is None or member.role == "leader",
        configured=[configured(g) for g in config.consumer_groups],
        full=SourceTables(lambda: _captured_server(config)),
    )


def _captured_server(config: DrcConfig) -> TargetSettings:
    """The source server a full group's chunks are read from: the first configured one (a
    chunk read elsewhere is refused by its server_id, drc.replicator.full_source)."""
    host, port = config.source.addresses()[0]
    return target_settings(config.source.model_copy(update={"host": host, "port": port}))


def build_api(
    config: DrcConfig, service: ReplicatorService
) -> tuple[ApiServer, GroupService, threading.Event]:
    """The API server for ``service`` (not started), its consumer groups and the event that
    stops both; tokens are read from config here, once."""
    api = config.api
    groups = build_groups(config, service)
    deps = ApiDeps(
        buffer=service.buffer,
        metastore=service.metastore,
        datacenter=config.datacenter.name,
        source=",".join(f"{host}:{port}" for host, port in config.source.addresses()),
        limits=_limits(config),
        tokens=_tokens(config),
        long_polls=_long_polls(config),
        budget=_budget(config),
        capture_stats=lambda: service.replicator.stats,
        capture_failure=lambda: service.failure,
        protection=lambda: None if service.protection is None else service.protection(),
        channels=lambda: [] if service.channels is None else service.channels(),
        peers=peer_status(config).snapshot,
        admin_tokens=config.api.admin_secrets(),
        desk=lambda: service.desk,
        back_to_source=_back_to_source(service),
        group=None if service.group is None else service.group.status,
        failures=lambda: [] if service.failures is None else service.failures(),
        heartbeat=lambda: None if service.heartbeat is None else service.heartbeat(),
        drc_applied=config.replicator.drc_applied,
        wall_clock=service.wall_clock,
        groups=groups,
    )
    return _server(config, deps, api.port), groups, deps.stop


def build_apply_api(
    config: DrcConfig,
    channels: Callable[[], list[dict[str, Any]]],
    failures: Callable[[], list[tuple[str, BaseException]]],
    protection: Callable[[], dict[str, Any] | None],
    desk: ChannelDesk | None = None,
) -> ApiServer:
    """What ``drc run --role apply`` serves (not started): /healthz, /metrics and /v1/status
    of its channels, on ``[api] apply_port`` (else ``port``); no buffer, so no /v1/events."""
    deps = ApiDeps(
        buffer=None, datacenter=config.datacenter.name, role="apply",
        source=f"{config.target_or_source().host}:{config.target_or_source().port}",
        tokens=_tokens(config), protection=protection, channels=channels, failures=failures,
        admin_tokens=config.api.admin_secrets(), desk=lambda: desk,
        limits=_limits(config), long_polls=_long_polls(config),  # GET /v1/wait's bounds
    )  # fmt: skip
    port = config.api.apply_port if config.api.apply_port is not None else config.api.port
    try:
        return _server(config, deps, port)
    except ApiServerError as exc:
        raise ApiServerError(
            f"{exc}; if the replicator role runs on this host, give the apply role its own "
            "port with [api] apply_port"
        ) from exc


def _back_to_source(service: ReplicatorService) -> Callable[..., list[Any]]:
    """Pulls older than the buffer: read the source binlog again; a group's follower asks its
    leader instead (drc.replicator.member)."""
    local = BinlogBackfill(service.replicator)
    return local if service.group is None else service.group.back_to_source(local)


def _limits(config: DrcConfig) -> ServerLimits:
    api = config.api
    return ServerLimits(api.max_events, max(1, int(api.max_bytes_mb * (1 << 20))), api.max_wait_ms)


def _long_polls(config: DrcConfig) -> LongPollGate:
    api = config.api
    return LongPollGate(LongPollLimits(api.max_long_polls, api.max_long_polls_per_token))


def _budget(config: DrcConfig) -> ReaderBudget:
    api = config.api
    return ReaderBudget(max(1, int(api.reader_memory_mb * (1 << 20))), api.max_long_polls)


def _tokens(config: DrcConfig) -> tuple[str, ...]:
    tokens = config.api.secrets() + tuple(config.api.admin_secrets().values())  # admins read too
    if not all(tokens):
        raise ConfigError("api.tokens holds an empty token; remove it or give it a value")
    return tokens


def _server(config: DrcConfig, deps: ApiDeps, port: int) -> ApiServer:
    api = config.api
    return ApiServer(
        create_app(deps),
        api.host,
        port,
        open_access=not deps.tokens,
        certfile=api.tls_certfile,
        keyfile=api.tls_keyfile,
        stop_event=deps.stop,
    )


def freeze_startup_heap() -> None:
    """Move what start-up made (modules, models, caches: ~85k objects) out of the collector's
    sight: they live as long as the process, and each full collection walked them again, a
    40-70 ms pause of every thread (capture, API, apply) a few times a minute under load."""
    gc.collect()
    gc.freeze()
