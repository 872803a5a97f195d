"""The runtime's services and their in-memory helpers, composed by ``Gateway`` (the only door).
Each public part has one name: its module, its class and the gateway's attribute agree.

- ``notice`` (``notice.protocol.NoticeProtocol``, ``gw.ops``): the signal log, cursors, the
  queue and wakes; with ``wakes`` and ``rewake`` (wake coalescing, owed wakes, re-wakes),
  ``group_commit`` (concurrent recorders sharing one transaction), ``queue`` (the in-memory
  queue), ``reconcile`` (the ``changesSince`` JSON), ``announce`` (R27's line);
- ``cluster`` (``Cluster``, ``gw.cluster``): which sessions this process serves and the sweep
  that keeps its queue in step, which ``change_pump`` (the thread) triggers;
- ``registry`` (``Registry``, ``gw.registry``): session metadata, routes, the parent chain;
- ``transcripts`` (``Transcripts``, ``gw.transcripts``): messages and human turns;
- ``runs`` (``Runs``, ``gw.runs``): child runs, the runner and the background executor;
- ``producers`` (``Producers``, ``gw.producers``): goal and compaction events;
- ``trace`` (the protocol trace), ``observing`` (observers), ``retention`` (R30's schedule).

``locking`` holds the one decorator every service method takes the store's lock through.
"""
