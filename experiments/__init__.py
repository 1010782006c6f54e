"""Latency, bandwidth and utility experiments, and the local demo."""
