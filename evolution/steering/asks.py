"""An agent's asks of people, capped per agent across producers: the count lives in ``hitl.asks`` (issue 29: an
agent's relayed rating, a grading card, counts against the same cap as the loop's asks); re-exported here for the
loop's producers."""

from hitl.asks import ASKER as ASKER
from hitl.asks import MAX_PENDING as MAX_PENDING
from hitl.asks import TOO_MANY as TOO_MANY
from hitl.asks import asker_for as asker_for
from hitl.asks import max_pending as max_pending
from hitl.asks import over_cap as over_cap
from hitl.asks import waiting as waiting
