"""Helpers shared by the layers above the store: session keys, argument validation, URLs, fencing,
visibility policy, time formats, provenance, the notice text and the npm cache of the installers."""
