"""`drc config check` and load errors name the line of each problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.config import config_problems, load_config
from drc.config_lines import line_of
from drc.core.errors import ConfigError

BAD = """\
# a comment
[datacenter]
name = "dc 1"

[source]
user = "drc"
port = 99999

[replicator]
buffer_dir = "/tmp/x"
buffer.segment_mb = 0

[[channels]]
name = "a"
origin = "dc2"
remote = ["http://a"]

[[channels]]
name = "b"
origin = "dc2"
remote = ["http://b"]
description = '''
bogus = 1
'''
"""


def test_every_problem_names_its_line() -> None:
    assert config_problems(BAD) == [
        "line 3: datacenter.name: String should match pattern '^[A-Za-z0-9_-]+$'",
        "line 7: source.port: Input should be less than or equal to 65535",
        "line 11: replicator.buffer.segment_mb: Input should be greater than or equal to 1",
        "line 22: channels.1.description: Extra inputs are not permitted",
    ]


def test_a_missing_field_points_at_its_table() -> None:
    text = '[datacenter]\nname = "dc1"\n\n[source]\nhost = "h"\n'
    problems = config_problems(text + '[replicator]\nbuffer_dir = "/x"\n')
    assert problems == ["line 4: source.user: Field required"]


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        (("conflicts", "tables", 1, "policy"), 6),
        (("conflicts", "tables", 0), 2),
        (("conflicts", "priority", 1), 1),
        (("api", "port"), None),
    ],
)
def test_line_of_arrays_of_tables_and_inline_values(loc: tuple, line: int | None) -> None:
    text = (
        'conflicts.priority = ["dc1", "dc2"]\n'
        "[[conflicts.tables]]\n"
        'table = "a.*"\n'
        'policy = "lww"\n'
        "[[conflicts.tables]]\n"
        'policy = "keep"   # [not a header]\n'
    )
    assert line_of(text, loc) == line


def test_check_prints_file_and_line_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD)
    good = Path(__file__).parents[2] / "deploy" / "dc1.example.toml"
    result = CliRunner().invoke(cli, ["config", "check", str(good), str(bad)])
    assert result.exit_code == 1
    assert f"{good}: OK" in result.output
    assert f"{bad}:7: source.port: Input should be less than or equal to 65535" in result.output


def test_check_of_unreadable_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("a = 1\nb = = 2\n")
    result = CliRunner().invoke(cli, ["config", "check", str(bad)])
    assert result.exit_code == 1
    assert "not readable TOML" in result.output and "line 2" in result.output, result.output


def test_run_refuses_with_the_same_lines(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD)
    with pytest.raises(ConfigError, match=r"line 7: source\.port"):
        load_config(bad)


def _with_remote(url: str) -> str:
    return (
        '[datacenter]\nname = "dc1"\n[source]\nuser = "drc"\n[replicator]\nbuffer_dir = "/x"\n'
        f'[[channels]]\nname = "a"\norigin = "dc2"\nremote = ["http://ok:8640", "{url}"]\n'
    )


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("htp//127.0.0.1:99999/x y", "is not an http://, https:// or zk:// URL"),
        ("not a url", "is not an http://, https:// or zk:// URL"),
        ("ftp://dc2:21/drc", "is not an http://, https:// or zk:// URL"),
        ("http://", "names no host"),
        ("http://dc2:99999", "has a port that is not a number in 1-65535"),
        ("https://dc2:0", "has a port that is not a number in 1-65535"),
        ("http://dc2:8640/x y", "contains whitespace"),
        ("zk://zk1:2181", "names no group path"),
        ("zk://zk1:2181,zk2:x/drc/dc2", "has a port that is not a number in 1-65535"),
    ],
)
def test_check_refuses_a_malformed_remote_naming_key_and_value(
    tmp_path: Path, url: str, why: str
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(_with_remote(url))
    result = CliRunner().invoke(cli, ["config", "check", str(bad)])
    assert result.exit_code == 1, result.output
    assert f"{bad}:10: channels.0.remote.1: Value error, {url!r} {why}" in result.output


@pytest.mark.parametrize(
    "url", ["http://10.0.1.1:8421", "https://[::1]:8640/drc", "zk://zk1:2181,zk2/drc/dc2"]
)
def test_well_formed_remotes_pass(url: str) -> None:
    assert config_problems(_with_remote(url)) == []


def test_a_refused_remote_never_shows_its_password(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(_with_remote("http://drc:s3cret@dc2:99999/"))
    with pytest.raises(ConfigError) as raised:
        load_config(bad)
    assert "s3cret" not in str(raised.value)
    assert "'http://***@dc2:99999/'" in str(raised.value)


def test_a_duplicate_channel_name_points_at_the_second_one() -> None:
    text = _with_remote("http://b") + '\n[[channels]]\nname = "a"\norigin = "dc3"\n'
    text += 'remote = ["http://dc3:8640"]\n'
    assert config_problems(text) == [
        "line 13: channels.1.name: channel name 'a' is already used by an earlier [[channels]] "
        "entry: channel names must be unique"
    ]
