"""The service's Prometheus metrics, in a registry of its own (several apps in one process never collide).

Requests by path and status (499: the client went away before its answer), requests in progress, request latency,
sentences per model call, model-call time, queue depth, sentences translated, model failures and readiness; /metrics
renders them in the text exposition format.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class ServiceMetrics:
    """Every collector of one service, registered in `registry`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, queue_depth: Callable[[], float]):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("mtonnx_requests", "HTTP requests answered", ["path", "status"], registry=r)
        self.in_progress = Gauge("mtonnx_requests_in_progress", "HTTP requests being read or answered", registry=r)
        self.latency = Histogram(
            "mtonnx_request_seconds", "HTTP request latency", ["path"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch_size = Histogram(
            "mtonnx_batch_sentences", "sentences per model call", buckets=BATCH_BUCKETS, registry=r
        )
        self.batch_seconds = Histogram(
            "mtonnx_batch_seconds", "time of one model call", buckets=LATENCY_BUCKETS, registry=r
        )
        self.translated = Counter("mtonnx_sentences_translated", "sentences translated", registry=r)
        self.model_errors = Counter("mtonnx_model_errors", "model calls that raised", registry=r)
        self.queue = Gauge("mtonnx_queue_sentences", "sentences waiting for a model call", registry=r)
        self.queue.set_function(queue_depth)
        self.ready = Gauge("mtonnx_ready", "1 once the model is loaded and warmed up", registry=r)

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        self.requests.labels(path=path, status=str(status)).inc()
        self.latency.labels(path=path).observe(seconds)

    def observe_batch(self, sentences: int, seconds: float, failed: bool) -> None:
        """Record one model call (the batcher's `observe` hook)."""
        self.batch_size.observe(sentences)
        self.batch_seconds.observe(seconds)
        if failed:
            self.model_errors.inc()
        else:
            self.translated.inc(sentences)

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
