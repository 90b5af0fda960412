"""Kubernetes plumbing every layer may use: API client factory, quantities, pod-spec walker."""
