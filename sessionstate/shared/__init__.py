"""Helpers shared by the layers above the store: session keys, argument validation, URLs, fencing,
visibility policy, time formats, provenance and the notice text."""
