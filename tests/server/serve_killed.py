"""``oarlock serve`` whose every decision kills the process (SIGKILL) once the decision is
committed and before its response is sent: for the test that the decision stands."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from oarlock.cli import main
from oarlock.server import _service

_decide = _service.Service.decide


async def _decide_then_die(self: Any, *args: Any, **kwargs: Any) -> Any:
    doc = await _decide(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
    return doc


_service.Service.decide = _decide_then_die  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
