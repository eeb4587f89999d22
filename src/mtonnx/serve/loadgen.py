"""The load generator of `mtonnx serve-bench` and the serving lesson: N concurrent clients for a fixed time.

Each client sends one request at a time over its own keep-alive connection (asyncio + httpx) and starts no new
one after `seconds`; the run stops by itself. Throughput counts translated sentences over the run's wall time;
latency percentiles are over the requests answered 200; every other answer or connection error counts as an
error. One httpx client per simulated client, all built before the clock starts and sharing one SSL context:
a single client's connection pool scans every connection for every waiting request (quadratic in the
concurrency), so at high concurrency it would measure itself rather than the service; each client's construction
loads the CA bundle, which is why they are built first. The generator shares the machine with the service, so on
few cores it takes some of the service's CPU.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

PERCENTILES = (50, 95, 99)
SHOWN = ("sentences_per_s", "p50_ms", "p95_ms", "p99_ms")  # per level, in the recorded metrics


def run_load(
    url: str,
    sentences: list[str],
    concurrency: int,
    seconds: float,
    items: int = 1,
    api_key: str | None = None,
    options: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Load `url`/translate with `concurrency` clients for `seconds`; throughput, latency percentiles, errors.

    Runs its own event loop on a helper thread, so it works from a notebook (whose loop is running) too.
    """
    job = _load(url, sentences, concurrency, seconds, items, api_key, options or {}, timeout_s)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, job).result()


def sweep(url: str, sentences: list[str], levels: list[int], seconds: float, **kwargs) -> dict[int, dict[str, Any]]:
    """run_load at each concurrency level, in order: {concurrency: metrics}."""
    return {c: run_load(url, sentences, c, seconds, **kwargs) for c in levels}


def summarize(
    batched: dict[int, dict[str, Any]], unbatched: dict[int, dict[str, Any]] | None = None, speedup_at: int = 16
) -> dict[str, Any]:
    """The metrics notebook 11 records: c<N>.{sentences_per_s,p50_ms,p95_ms,p99_ms}, unbatched.c<N>..., the
    batching speedup at `speedup_at` clients and the errors of every run."""
    out: dict[str, Any] = {f"c{c}": {k: r[k] for k in SHOWN} for c, r in batched.items()}
    runs = list(batched.values())
    if unbatched is not None:
        out["unbatched"] = {f"c{c}": {k: r[k] for k in SHOWN} for c, r in unbatched.items()}
        runs += list(unbatched.values())
        with_b, without = batched.get(speedup_at), unbatched.get(speedup_at)
        ratio = with_b["sentences_per_s"] / without["sentences_per_s"] if with_b and without else None
        out[f"batching_speedup_c{speedup_at}"] = round(ratio, 3) if ratio and np.isfinite(ratio) else None
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def format_table(results: dict[int, dict[str, Any]]) -> str:
    """A plain-text table: one row per concurrency level."""
    head = f"{'clients':>7} {'sentences/s':>11} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'requests':>8} {'errors':>6}"
    rows = [
        f"{c:>7} {r['sentences_per_s']:>11.1f} {_ms(r['p50_ms'])} {_ms(r['p95_ms'])} {_ms(r['p99_ms'])} "
        f"{r['requests']:>8} {r['errors']:>6}"
        for c, r in results.items()
    ]
    return "\n".join([head, *rows])


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    """True when something answers HTTP at url/health/live."""
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/health/live", timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return True


async def _load(
    url: str,
    sentences: list[str],
    concurrency: int,
    seconds: float,
    items: int,
    api_key: str | None,
    options: dict[str, Any],
    timeout_s: float,
) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    context, limits = ssl.create_default_context(), httpx.Limits(max_connections=1, max_keepalive_connections=1)
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    translated, counter = 0, itertools.count()
    clients = [
        httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=timeout_s, verify=context)
        for _ in range(concurrency)
    ]

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal translated
        while time.perf_counter() < deadline:
            n = next(counter) * items
            batch = [sentences[(n + j) % len(sentences)] for j in range(items)]
            body = {"q": batch[0] if items == 1 else batch, "source": "en", "target": "zh", **options}
            sent = time.perf_counter()
            try:
                status = str((await client.post("/translate", json=body)).status_code)
            except httpx.HTTPError as err:
                status = type(err).__name__
            statuses[status] += 1
            if status == "200":
                latencies.append(time.perf_counter() - sent)
                translated += items

    try:
        start = time.perf_counter()  # the clients exist already: their construction is not measured
        deadline = start + seconds
        await asyncio.gather(*(client_loop(client) for client in clients))
        elapsed = time.perf_counter() - start
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))
    ms = np.asarray(latencies) * 1000
    percentiles = {f"p{p}_ms": round(float(np.percentile(ms, p)), 2) if ms.size else None for p in PERCENTILES}
    return {
        "concurrency": concurrency,
        "seconds": round(elapsed, 3),
        "requests": sum(statuses.values()),
        "errors": sum(n for s, n in statuses.items() if s != "200"),
        "statuses": dict(statuses),
        "sentences": translated,
        "sentences_per_s": round(translated / elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        **percentiles,
        "mean_ms": round(float(ms.mean()), 2) if ms.size else None,
        "max_ms": round(float(ms.max()), 2) if ms.size else None,
    }


def _ms(value: float | None) -> str:
    return f"{value:>8.1f}" if value is not None else f"{'-':>8}"
