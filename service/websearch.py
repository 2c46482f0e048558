"""Web search behind a small provider protocol; the one provider is Bocha Web Search.

`build_web_search` wraps it in a cache (`WEB_CACHE_TTL_S`) and a site filter
(`WEB_ALLOW_SITES`, `WEB_DENY_SITES`), applied to cached and fresh results alike.

Failures are distinct exceptions (time-out, HTTP status, API `code`, bad JSON) so the
workflow can say precisely why it could not search; it never crashes on them.

Retry policy (`core.retry.WEB_SEARCH`, the only layer; docs/reliability.md): one retry, 0.2 s later, on a
time-out or a 5xx; none on 4xx (a bad key or request fails the same way again, and 429 means
slow down) nor on a refused connection (the service is not there).
"""

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
from cachetools import TTLCache
from pydantic import BaseModel, SecretStr

from core.config import Settings
from core.retry import WEB_SEARCH, async_retrying

logger = logging.getLogger(__name__)


class WebResult(BaseModel):
    title: str
    url: str
    snippet: str = ""
    summary: str = ""
    site_name: str = ""
    date: str | None = None

    @property
    def text(self) -> str:
        """The longest description Bocha gave (its `summary` when asked for, else the snippet)."""
        return self.summary or self.snippet


class WebSearchError(RuntimeError):
    """Base of every web-search failure; `reason` is a short Chinese phrase for users, `transient`
    whether one more attempt may succeed (`core.retry.WEB_SEARCH`)."""

    reason = "网络搜索失败"
    transient = False


class WebSearchTimeout(WebSearchError):
    reason = "网络搜索超时"
    transient = True


class WebSearchHTTPError(WebSearchError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"web search returned HTTP {status}: {body[:200]}")
        self.status = status
        self.reason = f"网络搜索服务返回 HTTP {status}"
        self.transient = status >= 500


class WebSearchAPIError(WebSearchError):
    def __init__(self, code: object, msg: object) -> None:
        super().__init__(f"web search API error code={code!r} msg={msg!r}")
        self.reason = f"网络搜索服务返回错误码 {code}"


class WebSearchBadResponse(WebSearchError):
    reason = "网络搜索返回了无法解析的数据"


class WebSearch(Protocol):
    async def search(self, query: str, count: int | None = None) -> list[WebResult]: ...


class BochaWebSearch:
    """`POST {BOCHA_API_URL}` with a bearer key; see DESIGN.md for the protocol."""

    def __init__(self, api_key: SecretStr, url: str, timeout: float = 10.0, count: int = 8) -> None:
        self._api_key = api_key
        self.url = url
        self.timeout = timeout
        self.count = count

    async def search(self, query: str, count: int | None = None) -> list[WebResult]:
        body = {"query": query, "freshness": "noLimit", "summary": True, "count": count or self.count}
        headers = {"Authorization": f"Bearer {self._api_key.get_secret_value()}"}
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            retrying = async_retrying(WEB_SEARCH, "web search", logger)
            results: list[WebResult] = await retrying(self._post, client, body, headers)
            return results

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]) -> list[WebResult]:
        try:
            response = await client.post(self.url, json=body, headers=headers)
        except httpx.TimeoutException as err:
            raise WebSearchTimeout(f"web search timed out after {self.timeout}s") from err
        except httpx.TransportError as err:
            raise WebSearchError(f"web search unreachable at {self.url}: {err}") from err
        return _parse(response)


def _parse(response: httpx.Response) -> list[WebResult]:
    if response.status_code != 200:
        raise WebSearchHTTPError(response.status_code, response.text)
    try:
        payload: Any = response.json()
        if payload.get("code") != 200:
            raise WebSearchAPIError(payload.get("code"), payload.get("msg"))
        pages = ((payload.get("data") or {}).get("webPages") or {}).get("value") or []
        results = [
            WebResult(
                title=page.get("name") or page.get("url", ""),
                url=page["url"],
                snippet=page.get("snippet") or "",
                summary=page.get("summary") or "",
                site_name=page.get("siteName") or "",
                date=page.get("datePublished") or page.get("dateLastCrawled"),
            )
            for page in pages
            if page.get("url")
        ]
    except WebSearchAPIError:
        raise
    except (ValueError, AttributeError, KeyError, TypeError) as err:
        raise WebSearchBadResponse(f"web search returned unparseable JSON: {response.text[:200]!r}") from err
    return dedupe_by_url(results)


def url_key(url: str) -> str:
    """A URL without its fragment and trailing slash: two results with one key are one page."""
    return url.split("#", 1)[0].rstrip("/")


def dedupe_by_url(results: list[WebResult], seen: set[str] | None = None) -> list[WebResult]:
    """First occurrence of each page (`url_key`) not already in `seen`, order kept."""
    seen = set() if seen is None else seen
    unique = []
    for result in results:
        key = url_key(result.url)
        if key not in seen:
            seen.add(key)
            unique.append(result)
    return unique


def _site(value: str) -> str:
    """`https://www.Example.org/x` and `example.org` name one site: the lower-case host, no `www.`."""
    host = urlsplit(value if "//" in value else f"//{value}").hostname or ""
    return host.removeprefix("www.")


class SiteFilter:
    """WEB_ALLOW_SITES / WEB_DENY_SITES: a site covers its subdomains; deny wins over allow."""

    def __init__(self, allow: Sequence[str] = (), deny: Sequence[str] = ()) -> None:
        self.allow = [site for site in map(_site, allow) if site]
        self.deny = [site for site in map(_site, deny) if site]

    @staticmethod
    def _within(host: str, sites: list[str]) -> bool:
        return any(host == site or host.endswith(f".{site}") for site in sites)

    def allows(self, url: str) -> bool:
        host = _site(url)
        if not host or self._within(host, self.deny):
            return False
        return not self.allow or self._within(host, self.allow)

    def apply(self, results: list[WebResult]) -> list[WebResult]:
        kept = [result for result in results if self.allows(result.url)]
        if len(kept) < len(results):
            dropped = [url_key(r.url) for r in results if not self.allows(r.url)]
            logger.info("site filter dropped %d web result(s): %s", len(dropped), ", ".join(dropped))
        return kept


class CachedWebSearch:
    """A `WebSearch` whose answers are kept `ttl_s` seconds (failures are not kept) and site-filtered.

    The same query within the TTL makes no second call to the provider; the cache is bounded (LRU).
    """

    def __init__(
        self,
        inner: WebSearch,
        ttl_s: float,
        sites: SiteFilter | None = None,
        size: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.sites = sites or SiteFilter()
        self._cache: TTLCache[tuple[str, int | None], list[WebResult]] = TTLCache(maxsize=size, ttl=ttl_s, timer=clock)
        self._lock = threading.Lock()  # cachetools caches are not thread-safe

    @property
    def ttl_s(self) -> float:
        return float(self._cache.ttl)

    async def search(self, query: str, count: int | None = None) -> list[WebResult]:
        key = (query.strip(), count)
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            results = await self.inner.search(query, count)
            with self._lock:
                self._cache[key] = list(results)
        else:
            logger.info("web results for %r from the cache", query)
            results = list(cached)
        return self.sites.apply(results)


def build_web_search(settings: Settings) -> CachedWebSearch | None:
    """The Bocha client behind the cache and site filter, or None without `BOCHA_API_KEY`."""
    if settings.bocha_api_key is None or not settings.bocha_api_key.get_secret_value():
        return None
    bocha = BochaWebSearch(
        settings.bocha_api_key, settings.bocha_api_url, settings.web_search_timeout, settings.web_search_count
    )
    sites = SiteFilter(settings.web_allow_sites, settings.web_deny_sites)
    return CachedWebSearch(bocha, settings.web_cache_ttl_s, sites)
