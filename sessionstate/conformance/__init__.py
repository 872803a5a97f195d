"""The conformance kit: any implementation of the notice protocol, driven through a JSON-lines
adapter (``protocol``), judged by the reference model (``verify/refmodel.py``) as a Hypothesis
state machine (``kit``). ``gateway_adapter`` is this project's own Gateway behind the adapter;
docs/conformance.md describes the protocol and how to read a report."""
