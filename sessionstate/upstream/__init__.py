"""Gateway-independent parts of the upstream monitor.

The monitor (owned by the gateway) asks a provider for new upstream activity
since a link's marker, drops our own echoed prompts, and records what is left
as ``human_direct_message``. This package holds the pieces that need no
gateway: prompt normalisation and echo filtering, and the providers.
"""
