"""Where the event loop stood still: a stall watch for finding what holds a broker up.

Everything a broker does runs on one event loop, and a callback that runs for long (a
thousand partitions walked in one go) holds up every heartbeat, fetch and request meanwhile.
``kipper_event_loop_lag_seconds`` says how often that happens; this says where. With
``loop_stall_log_ms`` set, a thread looks at the loop every quarter of that time and, when a
beat the loop should have made is that late, logs the stack the loop is in at that moment
(once per stall). It costs a wake-up of the loop and one of the thread per quarter period,
so it is off by default.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger(__name__)
STACK_FRAMES = 14


class StallWatch:
    def __init__(self, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self._beat = time.monotonic()
        self._loop_thread = threading.get_ident()
        self._stopped = threading.Event()

    async def run(self) -> None:
        """Beat on the event loop, and watch the beats from a thread, until cancelled."""
        self._loop_thread = threading.get_ident()
        watcher = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        watcher.start()
        try:
            while True:
                self._beat = time.monotonic()
                await asyncio.sleep(self.threshold_s / 4)
        finally:
            self._stopped.set()

    def _watch(self) -> None:
        reported = 0.0
        while not self._stopped.wait(self.threshold_s / 4):
            beat = self._beat
            held = time.monotonic() - beat - self.threshold_s / 4
            if held < self.threshold_s or beat == reported:
                continue
            reported = beat
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)[-STACK_FRAMES:]) if frame else "?"
            log.warning("event loop held for %.0f ms so far, in:\n%s", held * 1000, stack)
