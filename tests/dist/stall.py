"""Rank 0 enters a barrier that rank 1 never reaches (it waits for a message that never comes):
rank 0's stall inspector must say so. The test kills the job once the report is out."""

import labkit as lk

comm = lk.dist.world()
comm.barrier()
if comm.rank == 0:
    comm.barrier()
else:
    comm.comm.recv(source=0)
