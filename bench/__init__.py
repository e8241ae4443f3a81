"""Benchmarks: p4sim's packet rate, and in-network vs host ring AllReduce on one fabric."""
