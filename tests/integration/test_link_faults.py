"""Link faults between the datacenters while both write (issue #27; docs/reliability.md).

Each channel reads the other datacenter's pull API through a faulty link
(tests/support/faults.py); both sides write small transactions on disjoint rows throughout.
Whatever the fault, once the link is healed and the writes stop, both sides are equal row for
row, every transaction was applied exactly once (counted in each side's own capture, no
idempotent fix hiding a duplicate) and none came back to the side that wrote it. Silent links
(blackhole, half-open) must be noticed within seconds: the channel gives the connection up and
connects again while the fault lasts.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from drc.sandbox.sandbox import SandboxDescription
from tests.support.link_faults import Pair, linked_pair, noticed
from tests.support.waits import wait_for

CUT_S = 60.0
FLAPS = 20
FLAP_S = 1.0
BLACKHOLE_S = 30.0
HALF_OPEN_S = 10.0
PULL_SILENT_S = 10.0  # each silent fault of the pulling channels' test
SHAPED_S = 15.0
SHAPED_DELAY_S = 0.15  # each way: 300 ms round trips, another datacenter far away
SHAPED_JITTER_S = 0.1
SHAPED_BPS = 8_000  # narrower than the stream of a workload's changes: lag builds up
AFTER_S = 2.0  # writes go on this long after a fault, through the healed link


def _finish(pair: Pair) -> None:
    time.sleep(AFTER_S)
    pair.stop_writing()
    pair.wait_converged()
    pair.assert_exactly_once()


def _report(what: str, **measured: float | int) -> None:
    shown = ", ".join(
        f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in measured.items()
    )
    print(f"\n[link faults] {what}: {shown}")


@pytest.mark.slow
def test_a_long_cut_during_two_way_writes(sandbox: SandboxDescription, tmp_path: Path) -> None:
    with linked_pair(sandbox, tmp_path) as pair:
        pair.write()
        for link in pair.each_link():
            link.cut()
        time.sleep(CUT_S)
        pair.assert_channels_up()  # a channel waits out a dead link, it does not stop
        healed = time.monotonic()
        for link in pair.each_link():
            link.restore()
        _finish(pair)
        _report(
            "cut",
            cut_s=CUT_S,
            converged_after_restore_s=time.monotonic() - healed - AFTER_S,
            **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
        )


@pytest.mark.slow
def test_a_flapping_link_during_two_way_writes(sandbox: SandboxDescription, tmp_path: Path) -> None:
    with linked_pair(sandbox, tmp_path) as pair:
        pair.write()
        since = time.monotonic()
        flappers = [
            threading.Thread(target=link.flap, args=(FLAPS, FLAP_S, FLAP_S))
            for link in pair.each_link()
        ]
        for flapper in flappers:
            flapper.start()
        for flapper in flappers:
            flapper.join()
        reconnects = {dc: link.connections_since(since) for dc, link in pair.links.items()}
        _finish(pair)
        # Each channel reconnected after most of the flaps (not a timing claim: it had a
        # whole second of link each time, and many connections are the point of the test).
        assert all(n >= FLAPS // 2 for n in reconnects.values()), reconnects
        _report("flaps", flaps=FLAPS, **{f"{dc}_connections": n for dc, n in reconnects.items()})


@pytest.mark.slow
def test_a_blackhole_is_noticed_and_survived(sandbox: SandboxDescription, tmp_path: Path) -> None:
    with linked_pair(sandbox, tmp_path) as pair:
        pair.write()
        since = time.monotonic()
        for link in pair.each_link():
            link.blackhole()
        # Given up and tried again while the link still swallows everything.
        detected = {dc: noticed(link, since, 1, BLACKHOLE_S) for dc, link in pair.links.items()}
        time.sleep(max(0.0, since + BLACKHOLE_S - time.monotonic()))
        attempts = {dc: link.connections_since(since) for dc, link in pair.links.items()}
        healed = time.monotonic()
        for link in pair.each_link():
            link.heal()
        _finish(pair)
        _report(
            "blackhole",
            blackhole_s=BLACKHOLE_S,
            **{f"{dc}_noticed_after_s": s for dc, s in detected.items()},
            **{f"{dc}_connections": n for dc, n in attempts.items()},
            converged_after_heal_s=time.monotonic() - healed - AFTER_S,
        )


@pytest.mark.slow
def test_a_half_open_link_is_noticed_and_survived(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    with linked_pair(sandbox, tmp_path) as pair:
        pair.write()
        # The answers are lost (the server's side falls silent): the open stream stalls.
        since = time.monotonic()
        for link in pair.each_link():
            link.half_open("down")
        answers_lost = {dc: noticed(link, since, 1, HALF_OPEN_S) for dc, link in pair.links.items()}
        time.sleep(max(0.0, since + HALF_OPEN_S - time.monotonic()))
        for link in pair.each_link():
            link.heal()
        time.sleep(AFTER_S)
        # The requests are lost: an open stream is not hurt (it sends nothing up), so the
        # link is cut once as well; every request made again then goes unanswered.
        since = time.monotonic()
        for link in pair.each_link():
            link.half_open("up")
            link.cut()
            link.restore()
        requests_lost = {
            dc: noticed(link, since, 2, HALF_OPEN_S) for dc, link in pair.links.items()
        }
        time.sleep(max(0.0, since + HALF_OPEN_S - time.monotonic()))
        for link in pair.each_link():
            link.heal()
        _finish(pair)
        _report(
            "half-open",
            half_open_s=HALF_OPEN_S,
            **{f"{dc}_answers_lost_noticed_after_s": s for dc, s in answers_lost.items()},
            **{f"{dc}_requests_lost_noticed_after_s": s for dc, s in requests_lost.items()},
        )


@pytest.mark.slow
def test_pulling_channels_notice_a_blackhole_and_lost_answers_within_seconds(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    """``transport = "pull"``: a long poll sends nothing until its answer, so only its read
    timeout (the wait plus a few seconds, drc.client.http.PullTimeout) tells a silent link
    from a quiet stream; noticed while the fault lasts, as the stream's channels do."""
    with linked_pair(sandbox, tmp_path, transport="pull") as pair:
        pair.write()
        noticed_after: dict[str, float] = {}
        for fault in ("blackhole", "answers lost"):
            since = time.monotonic()
            for link in pair.each_link():
                if fault == "blackhole":
                    link.blackhole()
                else:
                    link.half_open("down")
            for dc, link in pair.links.items():
                noticed_after[f"{dc} {fault}"] = noticed(link, since, 1, PULL_SILENT_S)
            time.sleep(max(0.0, since + PULL_SILENT_S - time.monotonic()))
            pair.assert_channels_up()
            before = {dc: link.delivered["down"] for dc, link in pair.links.items()}
            for link in pair.each_link():
                link.heal()
            # A long poll sent during the fault stays silent after the heal until its read
            # timeout, doubled by the timeouts before it: the next fault starts only once an
            # answer got through (which resets the timeout), or it would measure that wait.
            for dc, link in pair.links.items():
                wait_for(
                    lambda link=link, sent=before[dc]: link.delivered["down"] > sent,
                    f"an answer from {dc} through the healed link",
                )
            time.sleep(AFTER_S)
        healed = time.monotonic() - AFTER_S
        _finish(pair)
        _report(
            "pull, silent links",
            fault_s=PULL_SILENT_S,
            **{f"{k.replace(' ', '_')}_noticed_after_s": s for k, s in noticed_after.items()},
            converged_after_heal_s=time.monotonic() - healed - AFTER_S,
        )


@pytest.mark.slow
def test_a_slow_jittery_capped_link(sandbox: SandboxDescription, tmp_path: Path) -> None:
    with linked_pair(sandbox, tmp_path) as pair:
        pair.write()
        since = time.monotonic()
        sent = {dc: link.delivered["down"] for dc, link in pair.links.items()}
        for link in pair.each_link():
            link.shape(delay_s=SHAPED_DELAY_S, jitter_s=SHAPED_JITTER_S, rate_bps=SHAPED_BPS)
        time.sleep(SHAPED_S)
        reconnects = {dc: link.connections_since(since) for dc, link in pair.links.items()}
        rates = {
            dc: (link.delivered["down"] - sent[dc]) / SHAPED_S for dc, link in pair.links.items()
        }
        healed = time.monotonic()
        for link in pair.each_link():
            link.shape()
        _finish(pair)
        _report(
            "slow link",
            shaped_s=SHAPED_S,
            converged_after_heal_s=time.monotonic() - healed - AFTER_S,
            **{f"{dc}_bytes_per_s": r for dc, r in rates.items()},
            **{f"{dc}_connections": n for dc, n in reconnects.items()},
            **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
        )
