"""Writes tests/stores/data/layout1: a store as parlour wrote it before layout versions.

Run it against the code at commit dadd0f2 (headers without a version, no meta, no owner
index), never against today's code:

    git worktree add /tmp/old dadd0f2
    PYTHONPATH=<a directory whose parlour/ links to /tmp/old's packages> \
        python tests/stores/data/make_layout1.py tests/stores/data/layout1
"""

import sys

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.stores import LmdbStore

store = LmdbStore(sys.argv[1], map_size=1 << 20)
for user, count in (("alice", 3), ("bob", 2)):
    for i in range(count):
        c = ConversationContext(f"{user}-{i}", user_id=user)
        c.put_main_objective("task", "Be brief.")
        c.add_user_message(f"{user} asks question {i}")
        store.create_context(c.to_snapshot(), user)
        c.add_message(IncomingMessage(f"answer {i} for {user}"))
        store.save_context(c.to_snapshot(), user)
store.delete("alice-2", "alice")
store.close()
