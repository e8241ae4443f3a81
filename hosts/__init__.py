"""Host side of p4inc: the INC wire format, worker agents with `allreduce(array)`,
and the host ring AllReduce baseline. Talks to the fabric only through a Transport.
"""
