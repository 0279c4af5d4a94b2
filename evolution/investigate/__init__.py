"""What the proposer agent may read while it investigates (issue 33; seed 003 R8.17, R8.18, R22.18, R22.21).

Every tool here only reads, and reads only what the proposer's grant reaches:

- ``files``: the brain at the cycle's base commit, through git (never the working tree), without the judge's
  files, loop modules, secrets or anything outside the brain;
- ``database``: a fixed set of read-only views, on Postgres through a role that can only SELECT them, on SQLite
  through a read-only connection whose authorizer allows nothing else;
- ``toolbox``: the tools as the model is offered them (OpenAI function tools), loop_history, the chat episodes,
  and what each call answered, kept for the round's record.

The loop's proposer stage does not import this package (it sits above ``evolution.reads``): ``evolution.hooks``
hands ``toolbox.for_round`` to ``evolution.loop.proposer.use_toolbox``.
"""
