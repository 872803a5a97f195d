"""Upstream monitoring: sessions that live outside the gateway, adopted and watched.

``catalog`` lists the external sessions an operator could adopt; ``adoption`` adopts one (or
continues it) with an upstream link; ``monitor`` asks each link's provider (``providers``) for
new activity since its marker, drops our own echoed prompts (``echo``, ``normalize``) and
records what is left as ``human_direct_message``; ``linking`` holds the link store and priming
both share. The providers' parsing (``claude_lines``, ``json_stream``) needs no gateway.
See docs/upstream.md.
"""
