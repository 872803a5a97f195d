"""The maintainers' checks, shipped with the package so ``sessionstate check`` and
``sessionstate replay`` can run them (``runner`` is ``check``'s driver).

- ``modelcheck``: exhaustive bounded BFS over an abstract reference model (``refmodel``) and
  the ``transitions`` machine path, every invariant in every state, liveness, real-store
  replay (``replay``); a second configuration shares the database between two processes
  (INV10, INV11);
- ``fuzz``: a seeded stateful fuzz of the real gateway against the in-package reference;
- ``crash``: SIGKILL a worker process at random points, reopen, check durability;
- ``concurrency``: two gateway processes appending to one database;
- ``ordering``: writer and reader processes on one database, ordering and cursor consistency;
- ``restart``: immediate restarts of a throwaway PostgreSQL server under load;
- ``failover``: a PostgreSQL primary killed under load and its streaming standby promoted
  (``pgpair``, ``failover_worker``), an unknown commit outcome injected (``pgproxy``);
- ``spin`` (``--spin``): SPIN on the Promela model generated from the table (``promela``);
- ``trace_check``: ``sessionstate replay``, protocol traces checked against the spec.
"""
