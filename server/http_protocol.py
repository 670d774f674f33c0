"""uvicorn's h11 protocol with a deadline for each request's head, and quiet about malformed requests.

uvicorn closes an idle kept-alive connection after `timeout_keep_alive`, but it gives a client any
time it likes to send a request's line and headers: a connection that says nothing, or sends its
headers a byte at a time, stays open for ever (a few hundred such connections starve the server).
Here every request cycle, from the connection's start or the end of the previous response, must
deliver its whole head within `header_timeout` seconds, or the connection is closed.

uvicorn answers a request that h11 cannot parse (a malformed chunked body, say) with a 400 and one
warning line, but the app may still be sending its own response to that request, which h11 then
refuses with a 50-line traceback in the log. Once the 400 is out, the app's response is dropped.
"""
from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5.0


class TimedH11Protocol(H11Protocol):
    header_timeout = HEADER_TIMEOUT_S  # set per server by server/cli.py serve

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.head_deadline = None
        self._await_head()

    def _await_head(self) -> None:
        """Starts the clock for the next request's head (a new connection, or a finished response)."""
        if self.head_deadline is None and not self.transport.is_closing():
            self.head_deadline = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _head_too_slow(self) -> None:
        self.head_deadline = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.logger.info("Closed a connection that sent no whole request head in %.0f s.", self.header_timeout)
            self.transport.close()

    def _head_arrived(self) -> None:
        if self.head_deadline is not None and self.conn.their_state is not h11.IDLE:
            self.head_deadline.cancel()
            self.head_deadline = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:  # kept alive: the next head's clock starts now
            self._await_head()
        else:
            self._head_arrived()  # a pipelined request's head was already buffered

    def connection_lost(self, exc) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        super().send_400_response(msg)
        if self.cycle is not None:  # the app's own response to this request has nowhere to go
            self.cycle.disconnected = True
