"""The runtime's services and their in-memory helpers, composed by ``Gateway`` (the only door).

- ``notice_protocol`` (``NoticeProtocol``): the signal log, cursors, the queue and wakes; with
  ``claims`` (which sessions this process serves and the sweep that keeps its queue in step),
  ``change_pump`` (the thread that triggers that sweep), ``wakes`` and ``rewake`` (wake
  coalescing, owed wakes, re-wakes), ``group_commit`` (concurrent recorders sharing one
  transaction), ``notices`` (the in-memory queue and the notice text), ``reconcile`` (the
  ``changesSince`` JSON), ``announce_created`` (R27's line) and ``trace`` (the protocol trace);
- ``registry`` (``Registry``): session metadata, routes, the parent chain;
- ``transcripts`` (``Transcripts``): messages and human turns;
- ``child_runs`` (``Runs``): child runs, the runner and the background executor;
- ``producers`` (``Producers``): goal and compaction events.

``locking`` holds the one decorator every service method takes the store's lock through.
"""
