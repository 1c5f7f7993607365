"""The URL patterns of the REST API (under ``{base_url}labkit/api/``) and their handlers."""

from __future__ import annotations

from ..runs import RUN_ID
from .handlers import (
                       BadId,
                       Checkpoint,
                       Checkpoints,
                       Command,
                       Commands,
                       Fork,
                       Metrics,
                       NoRoute,
                       NoSuchEndpoint,
                       Run,
)
from .lists import Compare, Lineage, Runs
from .sweeps import BadSweep, Sweep, SweepRequest, Sweeps

HANDLERS = [
    (r"runs/?", Runs),
    (rf"runs/({RUN_ID})/?", Run),
    (rf"runs/({RUN_ID})/metrics/?", Metrics),
    (rf"runs/({RUN_ID})/lineage/?", Lineage),
    (rf"runs/({RUN_ID})/checkpoints/?", Checkpoints),
    (rf"runs/({RUN_ID})/checkpoints/([0-9]{{1,18}})/?", Checkpoint),
    (rf"runs/({RUN_ID})/fork/?", Fork),
    (rf"runs/({RUN_ID})/commands/?", Commands),
    (rf"runs/({RUN_ID})/commands/([0-9]{{1,18}})/?", Command),
    (rf"runs/({RUN_ID})/(.+)", NoSuchEndpoint),
    (r"runs/([^/]+)(/.*)?", BadId),
    (r"compare/?", Compare),
    (r"sweeps/?", Sweeps),
    (rf"sweeps/({RUN_ID})/?", Sweep),
    (rf"sweeps/({RUN_ID})/(stop|pause|resume)/?", SweepRequest),
    (r"sweeps/([^/]+)(/.*)?", BadSweep),
    (r"(.*)", NoRoute),  # NOTE: last: what no pattern above takes
]
