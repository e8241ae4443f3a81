"""Mininet fabrics for p4inc: the topology JSON (star, leaf-spine), switch nodes that run
p4sim or BMv2, and the runner behind `make run` and `make demo`.
"""
