"""``drc wait``'s arguments and where --config sends it (no server: the API it names is not
listening, which is exit 2, not a timeout)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from drc.cli.main import cli
from drc.cli.wait import _from_config
from tests.support.config import BASE, write_config


def test_the_api_and_its_token_come_from_the_config(tmp_path: Path) -> None:
    api = '[api]\nhost = "0.0.0.0"\nport = 9100\ntokens = ["reader"]\n'
    assert _from_config(str(write_config(tmp_path, BASE + api)), None) == (
        "http://127.0.0.1:9100",
        "reader",
    )
    split = '[api]\nport = 9100\napply_port = 9200\nadmin_tokens = { ops = "admin" }\n'
    assert _from_config(str(write_config(tmp_path, BASE + split)), "given") == (
        "http://127.0.0.1:9200",
        "given",
    )


def test_exactly_one_of_config_or_api() -> None:
    neither = CliRunner().invoke(cli, ["wait", "--gtid", "1-1-1"])
    assert neither.exit_code == 2 and "exactly one of --config FILE or --api URL" in neither.output


def test_an_api_that_does_not_answer_is_exit_2_not_a_timeout() -> None:
    result = CliRunner().invoke(
        cli, ["wait", "--gtid", "1-1-1", "--timeout-ms", "100", "--api", "http://127.0.0.1:9"]
    )
    assert result.exit_code == 2 and "is drc run up there?" in result.output
