"""Every Prometheus series quotaguard exports, in one registry (`registry`): the serve
process's (`serve_metrics`: webhook, policy file, certificate) and the controller's
(`controller_metrics`: quotas, watches, intervals, writes)."""

from quotaguard.metrics.registry import REGISTRY, counter, gauge, histogram

__all__ = ["REGISTRY", "counter", "gauge", "histogram"]
