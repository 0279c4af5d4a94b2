"""Chat roles: a person's dialog with a role is an execution (run_kind "episode") graded whole once it ends.

``episodes`` opens, runs and closes episodes (``say``, ``close``,
``close_idle_episodes``); ``versions`` hashes what a role does; ``tools``
gives a role the engine tool ``agent_close_episode``; ``transcript`` is what
the episode's judge reads; ``telegram`` routes Telegram chats to roles.
"""
