"""The maintainers' checks, shipped with the package so ``sessionstate check`` can run them.

- ``modelcheck``: exhaustive bounded BFS over an abstract reference model and the
  ``transitions`` machine path, every invariant in every state, liveness, real-store replay;
  a second configuration shares the database between two processes (INV10, INV11);
- ``crash``: SIGKILL a worker process at random points, reopen, check durability;
- ``concurrency``: two gateway processes appending to one SQLite file;
- ``fuzz``: a seeded stateful fuzz of the real gateway against the in-package reference.
"""
