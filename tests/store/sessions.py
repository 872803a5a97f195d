"""The session keys the store's contract tests are written against (all of agent ``a``)."""

A, B, W = "agent:a:one", "agent:a:two", "agent:a:watcher"
