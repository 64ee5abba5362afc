"""SessionID: strict parse, lenient from_key, round trips."""

from __future__ import annotations

import pytest

from sessionledger.eventlog import InvalidEventError
from sessionledger.projections import SessionID


def test_parse_three_and_four_parts() -> None:
    sid = SessionID.parse("bot:telegram:42")
    assert (sid.agent, sid.channel, sid.peer, sid.thread) == ("bot", "telegram", "42", None)
    sid = SessionID.parse("bot:slack:C1:1700.5:x")
    assert (sid.agent, sid.channel, sid.peer, sid.thread) == ("bot", "slack", "C1", "1700.5:x")


@pytest.mark.parametrize("key", ["bot:telegram:42", "a:b:c:d", "a:b:c:d:e:f"])
def test_str_gives_the_key_back(key: str) -> None:
    assert str(SessionID.parse(key)) == key
    assert SessionID.parse(key).key == key


@pytest.mark.parametrize("key", ["", "a", "a:b", "a::c", ":b:c", "a:b:", "a:b:c:"])
def test_parse_rejects(key: str) -> None:
    with pytest.raises(InvalidEventError, match="agent:channel:peer"):
        SessionID.parse(key)


def test_parse_rejects_non_str() -> None:
    with pytest.raises(InvalidEventError, match="must be a str"):
        SessionID.parse(42)  # type: ignore[arg-type]


def test_from_key_reads_nanobot_keys_as_channel_and_peer() -> None:
    sid = SessionID.from_key("telegram:42")
    assert sid is not None
    assert (sid.agent, sid.channel, sid.peer) == ("", "telegram", "42")
    assert str(sid) == "telegram:42"


@pytest.mark.parametrize("key", ["plain", "a::b", ":x"])
def test_from_key_without_structure(key: str) -> None:
    assert SessionID.from_key(key) is None


def test_from_key_agrees_with_parse_on_strict_keys() -> None:
    assert SessionID.from_key("a:b:c:d") == SessionID.parse("a:b:c:d")
