"""Every (state, event) pair of each state table, exhaustively.

For each pair the machine either moves to the destination the table names,
or raises ImpossibleTransition and stays where it was: no third outcome.
"""

import itertools

import pytest

from pynox.supervisor.machines import (JOB_EVENTS, JOB_TRANSITIONS, TEMPLATE_EVENTS, TEMPLATE_TRANSITIONS,
                                       ImpossibleTransition, JobState, Lifecycle, TemplateState)

TABLES = {
    "job": (JobState, JOB_TRANSITIONS, JOB_EVENTS),
    "template": (TemplateState, TEMPLATE_TRANSITIONS, TEMPLATE_EVENTS),
}


def expected(transitions, state, event):
    for row in transitions:
        sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
        if row["trigger"] == event and state in sources:
            return row["dest"]
    return None


CASES = [(name, state, event)
         for name, (states, _, events) in TABLES.items()
         for state, event in itertools.product(states, events + ("no_such_event",))]


@pytest.mark.parametrize("name, state, event", CASES, ids=[f"{n}-{s.value}-{e}" for n, s, e in CASES])
def test_every_state_event_pair(name, state, event):
    states, transitions, _ = TABLES[name]
    life = Lifecycle(states, transitions, state)
    dest = expected(transitions, state, event)
    if dest is None:
        with pytest.raises(ImpossibleTransition):
            life.fire(event)
        assert life.state is state
    else:
        life.fire(event)
        assert life.state is dest


@pytest.mark.parametrize("name", TABLES)
def test_tables_name_only_their_own_events_and_states(name):
    states, transitions, events = TABLES[name]
    assert {row["trigger"] for row in transitions} == set(events)
    for row in transitions:
        sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
        assert all(isinstance(s, states) for s in sources + [row["dest"]])


def test_no_automatic_transitions():
    life = Lifecycle(JobState, JOB_TRANSITIONS, JobState.QUEUED)
    with pytest.raises(ImpossibleTransition):
        life.fire("to_FINISHED")
    assert life.state is JobState.QUEUED


def test_terminal_job_states_accept_nothing():
    for state in (JobState.FINISHED, JobState.TIMED_OUT, JobState.CRASHED, JobState.REFUSED):
        life = Lifecycle(JobState, JOB_TRANSITIONS, state)
        for event in JOB_EVENTS:
            with pytest.raises(ImpossibleTransition):
                life.fire(event)
