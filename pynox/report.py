"""What a child says about its job, and how much of it may be believed.

A child reports on the same socket its task can write to, so everything it
says after the task started is the task's word.  The trusted part of the
child speaks first: either a ``setup_error`` answer to ``run`` (confinement
failed, the task never ran) or a ``started`` request (confined, the task
runs now).  Whatever arrives after ``started`` can describe only the task's
own exception; pynox's verdicts (timeout, signal, setup failure) come from
the parent's own observation, never from these lines.
"""

from pynox.wire import EOF, NEED_DATA, Connection, Reply, Request

NO_HOST_FUNCTIONS = "no host function is available to this job"


class ChildReport:
    def __init__(self, conn: Connection, run_id: int):
        self.conn = conn
        self.run_id = run_id
        self.started = False
        self.setup_error = None  # believed only when it came before ``started``
        self.final = None  # the task's own account, first one only

    def feed(self, data: bytes) -> list:
        """Take bytes from the child; return the bytes of the answers it is owed."""
        self.conn.receive_data(data)
        answers = []
        while True:
            event = self.conn.next_event()
            if event is NEED_DATA or event is EOF:
                return answers
            if isinstance(event, Request):
                if event.op == "started" and not self.started and self.setup_error is None:
                    self.started = True
                    answers.append(self.conn.send_reply(event))
                else:
                    # Requests up (``host`` calls) get an answer, never silence.
                    answers.append(self.conn.send_reply(event, error=f"{NO_HOST_FUNCTIONS} (op {event.op!r})"))
            elif isinstance(event, Reply) and event.id == self.run_id:
                self._on_reply(event.body)

    def take(self, data: bytes, sock) -> None:
        """Feed bytes read from ``sock`` and send back what the child is owed, without waiting."""
        for answer in self.feed(data):
            try:
                sock.send(answer)
            except OSError:
                pass  # a child that does not read its answers only loses them

    def _on_reply(self, body: dict) -> None:
        if not self.started and self.setup_error is None and isinstance(body.get("setup_error"), dict):
            self.setup_error = body["setup_error"]
        elif self.started and self.final is None:
            self.final = body
