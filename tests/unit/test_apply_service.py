"""Building channels from a datacenter config, and the ``python -m drc.apply`` runner."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from drc.apply.__main__ import main
from drc.apply.channel import ApplyChannel
from drc.apply.service import build_channels, run_channels
from drc.config import DrcConfig, load_config

BASE = """
[datacenter]
name = "dc2"
[source]
host = "10.0.0.2"
port = 3307
user = "drc"
password = "source-secret"
[replicator]
buffer_dir = "/tmp/unused"
"""
CHANNELS = """
[[channels]]
name = "from-dc1"
origin = "dc1"
remote = ["http://dc1:8640"]
[[channels]]
name = "from-dc3"
origin = "dc3"
remote = ["http://dc3:8640"]
"""


def config(tmp_path: Path, text: str) -> DrcConfig:
    path = tmp_path / "dc.toml"
    path.write_text(text)
    return load_config(path)


def test_one_channel_per_entry_writing_into_the_source_without_a_target(tmp_path: Path) -> None:
    channels = build_channels(config(tmp_path, BASE + CHANNELS))
    assert [c.name for c in channels] == ["from-dc1", "from-dc3"]
    assert all(isinstance(c, ApplyChannel) for c in channels)
    settings = channels[0].target.settings  # type: ignore[attr-defined]
    assert (settings.host, settings.port, settings.user, settings.password) == (
        "10.0.0.2", 3307, "drc", "source-secret",
    )  # fmt: skip
    assert "source-secret" not in repr(settings)


def test_a_target_section_and_its_password_file_are_used(tmp_path: Path) -> None:
    secret = tmp_path / "target.password"
    secret.write_text("target-secret\n")
    target = f'[target]\nhost = "db"\nuser = "drc_apply"\npassword_file = "{secret}"\n'
    (channel,) = build_channels(config(tmp_path, BASE + target + CHANNELS), ["from-dc3"])
    settings = channel.target.settings  # type: ignore[attr-defined]
    assert (settings.host, settings.user, settings.password) == ("db", "drc_apply", "target-secret")


def test_unknown_channel_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no channel named \['nope'\].*from-dc1, from-dc3"):
        build_channels(config(tmp_path, BASE + CHANNELS), ["nope"])


def test_the_runner_reports_a_bad_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(tmp_path / "missing.toml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_signal_delivered_to_another_thread_still_stops_the_channels() -> None:
    """The kernel may deliver SIGTERM to any thread; the main thread must still run the
    handler, so it never blocks in an unbounded join (that hung `python -m drc.apply`)."""
    stop = threading.Event()

    class Waiting:
        name = "waiting"

        def run(self, stop: threading.Event) -> None:
            stop.wait()

    def poke() -> None:  # signal this (non-main) thread; give up after 5 s so nothing hangs
        time.sleep(0.2)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        if not stop.wait(5):
            stop.set()

    previous = signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    try:
        threading.Thread(target=poke, daemon=True).start()
        began = time.monotonic()
        assert run_channels([Waiting()], stop) == {}  # type: ignore[list-item]
        assert time.monotonic() - began < 2
    finally:
        signal.signal(signal.SIGUSR1, previous)
