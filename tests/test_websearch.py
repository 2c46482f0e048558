"""The Bocha client against a fake Bocha server speaking the real protocol on 127.0.0.1."""

import asyncio
import logging

import pytest
from pydantic import SecretStr

from core.config import Settings
from service.websearch import (
    BochaWebSearch,
    CachedWebSearch,
    SiteFilter,
    WebResult,
    WebSearchAPIError,
    WebSearchBadResponse,
    WebSearchError,
    WebSearchHTTPError,
    WebSearchTimeout,
    build_web_search,
    dedupe_by_url,
)
from tests.fakes.bocha_server import API_KEY, BAD_JSON, TIMEOUT, FakeBochaServer, page

A = page(
    "赤壁之战",
    "https://example.org/chibi",
    "赤壁之战发生于208年。",
    summary="赤壁之战发生于建安十三年（208年）。",
    site="示例百科",
)
B = page("曹操", "https://example.org/caocao", "曹操，字孟德。")


def search(
    server: FakeBochaServer, query: str = "赤壁之战 年份", key: str = API_KEY, timeout: float = 10.0
) -> list[WebResult]:
    """One search; only the time-out tests pass a short `timeout` (the fake answers after 1 s)."""
    client = BochaWebSearch(SecretStr(key), server.api_url, timeout=timeout, count=5)
    return asyncio.run(client.search(query))


def test_request_shape_and_parsed_results() -> None:
    with FakeBochaServer([A, B]) as server:
        results = search(server)
    [request] = server.requests
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body == {"query": "赤壁之战 年份", "freshness": "noLimit", "summary": True, "count": 5}
    assert results[0] == WebResult(
        title="赤壁之战",
        url="https://example.org/chibi",
        snippet="赤壁之战发生于208年。",
        summary="赤壁之战发生于建安十三年（208年）。",
        site_name="示例百科",
        date="2024-05-01T08:00:00+08:00",
    )
    assert results[0].text == "赤壁之战发生于建安十三年（208年）。"  # the summary beats the snippet
    assert [r.url for r in results] == ["https://example.org/chibi", "https://example.org/caocao"]


def test_results_are_deduplicated_by_url() -> None:
    again = page("赤壁之战（重复）", "https://example.org/chibi/#history", "重复")
    with FakeBochaServer([A, B, again]) as server:
        assert [r.title for r in search(server)] == ["赤壁之战", "曹操"]
    assert (
        dedupe_by_url([WebResult(title="x", url="https://example.org/caocao")], seen={"https://example.org/caocao"})
        == []
    )


@pytest.mark.parametrize(
    ("replies", "error", "requests"),
    [
        ([TIMEOUT], WebSearchTimeout, 2),
        ([500], WebSearchHTTPError, 2),
        ([403], WebSearchHTTPError, 1),
        ([429], WebSearchHTTPError, 1),
        ([BAD_JSON], WebSearchBadResponse, 1),
        ([("code", 400)], WebSearchAPIError, 1),
    ],
    ids=["timeout-twice", "5xx-twice", "403", "429", "bad-json", "api-code"],
)
def test_failures_are_distinct_errors_with_one_retry_on_timeouts_and_5xx(replies, error, requests) -> None:
    with FakeBochaServer(*replies) as server, pytest.raises(error) as raised:
        search(server, timeout=0.3 if error is WebSearchTimeout else 10.0)
    assert len(server.requests) == requests
    assert raised.value.reason.startswith("网络搜索")


@pytest.mark.parametrize("first", [TIMEOUT, 502])
def test_one_transient_failure_is_retried(first) -> None:
    with FakeBochaServer(first, [A]) as server:
        assert [r.url for r in search(server, timeout=0.3 if first == TIMEOUT else 10.0)] == [
            "https://example.org/chibi"
        ]
    assert len(server.requests) == 2


def test_a_wrong_key_is_a_4xx_not_retried_and_never_logged(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeBochaServer([A]) as server, pytest.raises(WebSearchHTTPError) as raised:
        search(server, key="wrong-secret-key")
    assert raised.value.status == 401 and len(server.requests) == 1
    assert "wrong-secret-key" not in caplog.text and "wrong-secret-key" not in str(raised.value)


def test_unreachable_server_is_a_web_search_error() -> None:
    with FakeBochaServer([A]) as server:
        url = server.api_url
    client = BochaWebSearch(SecretStr(API_KEY), url)
    with pytest.raises(WebSearchError, match="unreachable"):
        asyncio.run(client.search("x"))


def test_build_web_search_needs_a_key() -> None:
    assert build_web_search(Settings(_env_file=None)) is None
    client = build_web_search(
        Settings(
            _env_file=None, bocha_api_key=SecretStr("secret-bocha-key"), web_search_timeout=2.5, web_search_count=4
        )
    )
    assert isinstance(client, CachedWebSearch) and isinstance(client.inner, BochaWebSearch)
    bocha = client.inner
    assert (bocha.url, bocha.timeout, bocha.count) == ("https://api.bochaai.com/v1/web-search", 2.5, 4)
    assert client.ttl_s == 3600 and (client.sites.allow, client.sites.deny) == ([], [])
    assert "secret-bocha-key" not in repr(vars(bocha))  # SecretStr hides the key


def test_site_filter_allow_and_deny_lists() -> None:
    deny_only = SiteFilter(deny=["spam.example.com"])
    assert not deny_only.allows("https://spam.example.com/a") and not deny_only.allows("http://x.spam.example.com/")
    assert deny_only.allows("https://example.com/a") and deny_only.allows("https://notspam.example.com/")
    sites = SiteFilter(allow=["https://www.Baike.example.org/", "zh.wikipedia.org"], deny=["bad.baike.example.org"])
    assert sites.allow == ["baike.example.org", "zh.wikipedia.org"]
    assert sites.allows("https://baike.example.org/item/1") and sites.allows("https://m.baike.example.org/x")
    assert sites.allows("https://ZH.wikipedia.org/wiki/x")
    assert not sites.allows("https://en.wikipedia.org/wiki/x")  # not listed
    assert not sites.allows("https://evilbaike.example.org/")  # a suffix, not a subdomain
    assert not sites.allows("https://bad.baike.example.org/")  # deny wins over allow
    assert not sites.allows("not a url")


def test_settings_filter_results_and_say_so(caplog: pytest.LogCaptureFixture) -> None:
    evil = page("广告", "https://ads.example.net/luo", "罗贯中……点击领取")
    with FakeBochaServer([A, evil, B]) as server:
        settings = Settings(
            _env_file=None,
            bocha_api_key=SecretStr(API_KEY),
            bocha_api_url=server.api_url,
            web_deny_sites="ads.example.net, tracker.example.net",
        )
        client = build_web_search(settings)
        assert client is not None
        with caplog.at_level(logging.INFO, logger="service.websearch"):
            results = asyncio.run(client.search("罗贯中"))
    assert [r.url for r in results] == ["https://example.org/chibi", "https://example.org/caocao"]
    assert "dropped 1 web result(s): https://ads.example.net/luo" in caplog.text


def test_web_results_are_cached_for_the_ttl() -> None:
    now = [1000.0]
    with FakeBochaServer([A], [B]) as server:
        client = CachedWebSearch(BochaWebSearch(SecretStr(API_KEY), server.api_url), ttl_s=60, clock=lambda: now[0])
        first = asyncio.run(client.search("赤壁之战"))
        now[0] += 59
        again = asyncio.run(client.search(" 赤壁之战 "))
        other = asyncio.run(client.search("曹操"))
        now[0] += 1  # the first answer is now 60 s old: expired
        later = asyncio.run(client.search("赤壁之战"))
    assert [r.title for r in first] == [r.title for r in again] == ["赤壁之战"]
    assert [r.body["query"] for r in server.requests] == ["赤壁之战", "曹操", "赤壁之战"]
    assert [r.title for r in other] == [r.title for r in later] == ["曹操"]


def test_failures_are_not_cached() -> None:
    with FakeBochaServer(403, [A]) as server:
        client = CachedWebSearch(BochaWebSearch(SecretStr(API_KEY), server.api_url), ttl_s=60)
        with pytest.raises(WebSearchHTTPError):
            asyncio.run(client.search("赤壁之战"))
        assert [r.title for r in asyncio.run(client.search("赤壁之战"))] == ["赤壁之战"]
    assert len(server.requests) == 2
