"""Latency model of AllReduce algorithms, its fit to benchmark results, and plots."""
