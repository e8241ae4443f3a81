"""p4sim's runtime servers, beside the engine as BMv2 keeps bm_runtime beside bm_sim:
P4Runtime over gRPC (p4runtime.py) and BMv2's Thrift runtime (thrift.py), both reading and
writing the one `state.SwitchState` of a `Switch`.
"""
