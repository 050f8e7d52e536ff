"""Friend requests and the grants they give (DESIGN.md §6.6).

Rule: imports ``inbox``, ``queue.todos``, ``intake``, ``notify.wakes``, ``admin``, ``feed``, ``models``; imported by ``mcp_server``,
``web``, ``cli``, and the hub (which installs the ``friend`` inbox effect,
:func:`switchboard.hub.install_inbox_effects`).

- :mod:`switchboard.friends.requests`: ``friend_request`` / ``friend_respond`` / ``friend_list`` /
  ``friend_revoke``, and what a human's decision on a ``friend`` inbox item does.
- :mod:`switchboard.friends.work`: ``todo_create``, the one thing a friendship allows.

Rule of this folder: only a human approves. A request grants nothing; an approval needs a
bound human decision (the target human decided the ``friend`` item, or allowed the relayed
permission prompt of exactly this ``friend_respond`` call), and each approval is used once.
"""