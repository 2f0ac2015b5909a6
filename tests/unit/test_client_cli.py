"""`drc tail` and `drc status` against the fake API (through drc.cli.tail.TRANSPORT)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from drc.cli import tail as tail_module
from drc.cli.main import cli
from drc.core.jsonwire import transaction_from_json
from drc.core.scn import SCN
from tests.support.fake_api import FakeApi, rich_stream, stream

TOKEN = "cli-token-123"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi(rich_stream())
    monkeypatch.setattr(tail_module, "TRANSPORT", fake.transport)
    return fake


def run(*args: str, env: dict[str, str] | None = None) -> object:
    return CliRunner().invoke(cli, list(args), env=env)


def test_tail_json_prints_one_lossless_transaction_per_line(api: FakeApi) -> None:
    result = run("tail", "--api", "http://a", "--format", "json", "--limit", "4")
    assert result.exit_code == 0, result.output
    printed = [transaction_from_json(json.loads(line)) for line in result.output.splitlines()]
    assert printed == rich_stream()


def test_tail_table_prints_one_line_per_row_change(api: FakeApi) -> None:
    result = run("tail", "--api", "http://a", "--limit", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == '1:7:1:100  insert db.t  id=1000 v="r1.0"'
    assert lines[1].startswith("1:7:1:200  update db.t  id=1 id: 1 -> 9223372036854775813 ")
    assert ' s: "old" -> "naïve ✓" ' in lines[1] and " d: null -> -0.00 " in lines[1]
    assert lines[1].endswith("[drc]")
    assert lines[2].startswith("1:7:1:200  delete db.u  id=9 blob=")
    assert len(lines) == 3


def test_tail_stops_at_the_limit_and_resumes_from_its_checkpoint(
    api: FakeApi, tmp_path: Path
) -> None:
    api.txns = stream(10)
    ckpt = str(tmp_path / "tail.ckpt")
    args = ["tail", "--api", "http://a", "--format", "json", "--checkpoint", ckpt]
    first = run(*args, "--limit", "10")
    assert first.exit_code == 0 and len(first.output.splitlines()) == 10
    api.txns = stream(13)
    second = run(*args, "--limit", "3")
    assert [json.loads(line)["scn"] for line in second.output.splitlines()] == [
        str(t.scn) for t in stream(13)[10:]
    ]


def test_tail_passes_filters_token_from_the_environment_and_after(api: FakeApi) -> None:
    api.token = TOKEN
    args = ["tail", "--api", "http://a", "--tables", "db.u", "--skip-drc", "--after", "1:7:1:100"]
    result = run(*args, "--limit", "1", env={"DRC_TOKEN": TOKEN})
    assert result.exit_code == 0, result.output
    seen = api.events_seen()[0]
    assert seen.auth == f"Bearer {TOKEN}"
    assert seen.params["tables"] == "db.u" and seen.params["skip_drc"] == "1"
    assert seen.params["after"] == "1:7:1:100"


def test_tail_without_the_token_says_how_to_pass_it(api: FakeApi) -> None:
    api.token = TOKEN
    result = run("tail", "--api", "http://a", "--token", "wrong-one")
    assert result.exit_code == 1
    assert "401" in result.output and "DRC_TOKEN" in result.output
    assert "wrong-one" not in result.output


def test_tail_of_an_unreachable_url_names_it_and_what_to_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    monkeypatch.setattr(tail_module, "TRANSPORT", httpx.MockTransport(refuse))
    result = run("tail", "--api", "http://dc9:8640", "--retry-for", "0.3")
    assert result.exit_code == 1
    assert "http://dc9:8640" in result.output and "Connection refused" in result.output
    assert "Check the URLs" in result.output


def test_tail_refuses_a_malformed_after() -> None:
    result = run("tail", "--api", "http://a", "--after", "12")
    assert result.exit_code == 2 and "--after" in result.output


def test_status_prints_readably_and_as_json(api: FakeApi) -> None:
    api.status_body = {"role": "leader", "buffer": {"first": "1:7:1:100", "last": None}, "lag": 0}
    text = run("status", "--api", "http://a")
    assert text.exit_code == 0, text.output
    assert text.output.splitlines() == [
        "http://a",
        "  role:   leader",
        "  buffer:",
        "    first: 1:7:1:100",
        "    last:  -",
        "  lag:    0",
    ]
    as_json = run("status", "--api", "http://a", "--format", "json")
    assert json.loads(as_json.output) == api.status_body


def test_status_shows_a_channels_error_and_its_bulk_catchup(api: FakeApi) -> None:
    channel = {
        "name": "from-dc1", "origin": "dc1", "state": "waiting", "lag_seconds": 3600.0,
        "last_scn": "1:7:1:100", "transactions": 5, "rows": 9, "conflicts": 0,
        "error": "channel from-dc1 waits: the interrupted catch-up run h:1:x ...",
        "catchup": {"state": "running", "backlog_mb": 1210.5, "runs": 1},
    }  # fmt: skip
    api.status_body = {"role": "apply", "channels": [channel]}
    text = run("status", "--api", "http://a")
    assert text.exit_code == 0, text.output
    assert text.output.splitlines()[-3:] == [
        "    from-dc1 (from dc1): waiting, lag 3600.0s, applied 1:7:1:100, 5 txns, 9 rows, "
        "0 conflicts",
        "      error: channel from-dc1 waits: the interrupted catch-up run h:1:x ...",
        "      bulk catch-up: running, backlog 1210.5 MB, 1 runs",
    ]


def test_status_errors_are_one_clear_line(api: FakeApi) -> None:
    api.token = TOKEN
    result = run("status", "--api", "http://a")
    assert result.exit_code == 1 and "--token" in result.output


def test_status_reports_every_url_and_marks_the_unreachable_ones(api: FakeApi) -> None:
    api.fail("a", "connect")
    api.status_body = {"role": "apply", "datacenter": "dc2", "channels": [{
        "name": "from-dc1", "origin": "dc1", "state": "stopped", "lag_seconds": 42.25,
        "last_scn": "1:7:1:100", "transactions": 3, "rows": 5, "conflicts": 1,
        "error": "ApplyError: (1050) Table 'x' already exists",
    }]}  # fmt: skip
    result = run("status", "--api", "http://a", "--api", "http://b")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[:2] == ["http://a", lines[1]] and "UNREACHABLE" in lines[1]
    assert "http://b" in lines and "  role:       apply" in lines
    assert (
        "    from-dc1 (from dc1): stopped, lag 42.2s, applied 1:7:1:100, 3 txns, 5 rows, "
        "1 conflicts" in lines
    )
    assert "      error: ApplyError: (1050) Table 'x' already exists" in lines
    assert "1 of 2 API URL(s) did not answer" in lines[-1]


def test_fetch_status_of_an_unreachable_url() -> None:
    from drc.client import ApiUnavailableError, fetch_status

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ApiUnavailableError, match="http://x did not answer"):
        fetch_status("http://x/", transport=httpx.MockTransport(refuse))


def test_scn_of_rich_stream_is_sorted() -> None:
    scns = [t.scn for t in rich_stream()]
    assert scns == sorted(scns) and scns[0] > SCN.zero()


def test_tail_limit_counts_a_fragmented_transaction_once_even_if_its_last_part_is_empty(
    api: FakeApi,
) -> None:
    from tests.support.fake_api import txn

    api.txns = [txn(1), txn(2, rows=2, last=False), txn(2, rows=0, fragment=1), txn(3)]
    result = run("tail", "--api", "http://a", "--format", "json", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["scn"] for line in result.output.splitlines()] == [
        str(txn(1).scn),
        str(txn(2).scn),
    ]
