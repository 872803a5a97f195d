"""The public doors: ``Gateway`` and its async twin ``AsyncGateway``."""
