"""The state tables of jobs and templates, one ``transitions`` machine each.

Each table is the single source of truth for its lifecycle: code moves a
job or template only by firing an event, and an event the table does not
allow in the current state is a bug in pynox, raised as
:class:`ImpossibleTransition` rather than silently ignored.
"""

import enum

from transitions import Machine, MachineError


class ImpossibleTransition(RuntimeError):
    """An event fired in a state whose table has no such transition: a pynox bug."""


class JobState(enum.Enum):
    QUEUED = "queued"
    DISPATCHED = "dispatched"  # a template was asked to fork its child
    RUNNING = "running"  # the child has its job
    FINISHED = "finished"  # the child exited and was reaped (any exit status)
    TIMED_OUT = "timed_out"
    CRASHED = "crashed"  # the pool, not the task, failed it: PoolWorkerError
    REFUSED = "refused"  # never ran: the pool stopped first


JOB_TRANSITIONS = [
    {"trigger": "dispatch", "source": JobState.QUEUED, "dest": JobState.DISPATCHED},
    {"trigger": "refuse", "source": JobState.QUEUED, "dest": JobState.REFUSED},
    {"trigger": "start", "source": JobState.DISPATCHED, "dest": JobState.RUNNING},
    {"trigger": "finish", "source": JobState.RUNNING, "dest": JobState.FINISHED},
    {"trigger": "time_out", "source": [JobState.DISPATCHED, JobState.RUNNING], "dest": JobState.TIMED_OUT},
    {"trigger": "crash", "source": [JobState.DISPATCHED, JobState.RUNNING], "dest": JobState.CRASHED},
]
JOB_EVENTS = ("dispatch", "refuse", "start", "finish", "time_out", "crash")


class TemplateState(enum.Enum):
    STARTING = "starting"
    WARM = "warm"
    BROKEN = "broken"
    REPLACED = "replaced"  # a broken template, killed and reaped, with a successor ordered
    STOPPED = "stopped"  # retired with the pool


TEMPLATE_TRANSITIONS = [
    {"trigger": "ready", "source": TemplateState.STARTING, "dest": TemplateState.WARM},
    {"trigger": "fail", "source": [TemplateState.STARTING, TemplateState.WARM], "dest": TemplateState.BROKEN},
    {"trigger": "replace", "source": TemplateState.BROKEN, "dest": TemplateState.REPLACED},
    {"trigger": "stop", "source": [TemplateState.STARTING, TemplateState.WARM, TemplateState.BROKEN],
     "dest": TemplateState.STOPPED},
]
TEMPLATE_EVENTS = ("ready", "fail", "replace", "stop")


class Lifecycle:
    """A model object carrying one machine; ``fire`` is the only way to move it."""

    def __init__(self, states, transitions, initial):
        self.machine = Machine(model=self, states=states, transitions=transitions, initial=initial,
                               auto_transitions=False, send_event=False)

    def fire(self, event: str) -> None:
        try:
            self.trigger(event)
        except (MachineError, AttributeError) as exc:
            raise ImpossibleTransition(f"{type(self).__name__}: cannot {event} when {self.state}") from exc


def job_lifecycle() -> Lifecycle:
    return Lifecycle(JobState, JOB_TRANSITIONS, JobState.QUEUED)


def template_lifecycle() -> Lifecycle:
    return Lifecycle(TemplateState, TEMPLATE_TRANSITIONS, TemplateState.STARTING)
