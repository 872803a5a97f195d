"""The notice protocol service (spec R1-R18, R23-R27): the signal log, the cursors, the queue and
the wakes, one module a concern."""
