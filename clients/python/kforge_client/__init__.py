"""kforge_client -- the Python client of kforge-api, for notebooks.

Standard library only (Python >= 3.9); pandas is used by
IterationList.to_dataframe() when it is installed.  See README.md beside
this package and docs/runs.md in the kforge repository for the routes.

    from kforge_client import Client
    kf = Client("http://127.0.0.1:8080", token)     # or KFORGE_URL / KFORGE_TOKEN
    job = kf.submit("generate", target="trn2", op="softmax", shapes=[[256, 1024]], dtype="bfloat16")
    job = kf.wait(job, on_iteration=print)
    table = kf.iterations(job).to_dataframe()
"""

from ._http import __version__
from .client import FINAL_STATES, Client, Job
from .errors import (
    Conflict,
    Forbidden,
    KforgeError,
    NotFound,
    RateLimited,
    Unauthorized,
    Unavailable,
    Unprocessable,
    WaitTimeout,
)
from .sse import Event, SSEParser, StreamError
from .tables import IterationList

__all__ = [
    "__version__",
    "Client",
    "Job",
    "FINAL_STATES",
    "IterationList",
    "KforgeError",
    "NotFound",
    "Unauthorized",
    "Forbidden",
    "Conflict",
    "Unprocessable",
    "RateLimited",
    "Unavailable",
    "WaitTimeout",
    "Event",
    "SSEParser",
    "StreamError",
]
