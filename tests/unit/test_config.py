from __future__ import annotations

from pathlib import Path

import pytest

from drc.config import load_config
from drc.core.errors import ConfigError
from tests.support.config import BASE, write_config

EXAMPLE = Path(__file__).parents[2] / "deploy" / "dc1.example.toml"


def test_the_documented_example_loads() -> None:
    config = load_config(EXAMPLE)
    assert config.datacenter.name == "dc1"
    assert config.replicator.capture_filter().matches("shop", "orders")
    assert not config.replicator.capture_filter().matches("shop", "tmp_x")


def test_unknown_keys_are_errors_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"source\.pasword"):
        load_config(write_config(tmp_path, BASE.replace("password =", "pasword =")))


def test_bad_table_pattern_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="db.table"):
        load_config(write_config(tmp_path, BASE + 'include = ["nodot"]\n'))


def test_password_never_shows_in_repr_or_errors(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, BASE))
    assert "s3cret-value" not in repr(config)
    assert config.source.secret() == "s3cret-value"
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path, BASE.replace("port = 3306", "") + "[extra]\n"))
    assert "s3cret-value" not in str(info.value)


def test_missing_file_says_where_the_example_is(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="example"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize("name", ["a'b", "a\\", 'a"b', "a;b", "a b", "a`b", "a#b"])
def test_channel_and_datacenter_names_cannot_carry_sql(tmp_path: Path, name: str) -> None:
    # They reach the target's drc.checkpoint, drc.conflicts and trigger bodies (issue #12):
    # bound or hex-written there, and refused here before they get that far.
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    with pytest.raises(ConfigError, match=r"datacenter\.name"):
        load_config(write_config(tmp_path, BASE.replace('name = "dc1"', f'name = "{quoted}"')))
    channel = f'[[channels]]\nname = "{quoted}"\norigin = "dc2"\nremote = ["http://x"]\n'
    with pytest.raises(ConfigError, match=r"channels\.0\.name"):
        load_config(write_config(tmp_path, BASE + channel))


def test_long_poll_limits_are_read_and_validated(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, BASE))
    assert (config.api.max_long_polls, config.api.max_long_polls_per_token) == (1000, 200)
    limits = "[api]\nmax_long_polls = 50\nmax_long_polls_per_token = 10\n"
    config = load_config(write_config(tmp_path, BASE + limits))
    assert (config.api.max_long_polls, config.api.max_long_polls_per_token) == (50, 10)
    with pytest.raises(ConfigError, match="max_long_polls_per_token"):
        load_config(write_config(tmp_path, BASE + "[api]\nmax_long_polls = 5\n"))
    with pytest.raises(ConfigError, match="max_long_polls"):
        load_config(write_config(tmp_path, BASE + "[api]\nmax_long_polls = 0\n"))


def test_channels_with_several_source_servers_need_a_target(tmp_path: Path) -> None:
    servers = BASE.replace(
        'user = "drc"', 'user = "drc"\nservers = ["10.0.0.1:3306", "10.0.0.2:3306"]'
    )
    channel = (
        '\n[[channels]]\nname = "from-dc2"\norigin = "dc2"\nremote = ["http://10.0.1.1:8421"]\n'
    )
    with pytest.raises(ConfigError, match=r"add a\s+\[target\]"):
        load_config(write_config(tmp_path, servers + channel))
    with_target = (
        servers + '\n[target]\nhost = "10.0.0.9"\nuser = "drc"\npassword = "p"\n' + channel
    )
    assert load_config(write_config(tmp_path, with_target)).target_or_source().host == "10.0.0.9"
    assert load_config(write_config(tmp_path, servers)).channels == ()


def test_lww_tables_with_several_source_servers_need_a_target(tmp_path: Path) -> None:
    servers = BASE.replace(
        'user = "drc"', 'user = "drc"\nservers = ["10.0.0.1:3306", "10.0.0.2:3306"]'
    )
    lww = (
        '\n[conflicts]\npriority = ["dc1"]\n'
        '[[conflicts.tables]]\ntable = "shop.*"\npolicy = "lww"\ncolumn = "updated_at"\n'
    )
    with pytest.raises(ConfigError, match=r"add a\s+\[target\]"):
        load_config(write_config(tmp_path, servers + lww))
