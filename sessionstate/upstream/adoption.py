"""Adopting a catalog session, and continuing it again later.

``adopt`` creates the gateway session, records ``adopted`` (log only, actor ``system``) and the
upstream link in one transaction. ``continue_session`` gives an existing session a NEW link
(a new generation): after the link was dropped (three misses) this is what brings the session
back under monitoring; on a live link it replaces it, and any monitor write computed from the
old generation fails its compare-and-set and does not land.

Both prime the link first (see ``linking.prime``) so that history before adoption is never
reported as activity; when the provider cannot answer then, the link starts unprimed and the
monitor's first successful check primes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InvalidArgument, SessionExists, UnknownSession
from ..shared.keys import DEFAULT_AGENT_ID, check_key, resolve_agent_id
from .catalog import CatalogEntry
from .linking import PRIME_MAX_ROUNDS, link_store, prime
from .providers.base import CheckStatus, UpstreamProvider

if TYPE_CHECKING:
    from ..facade.gateway import Gateway


@dataclass(frozen=True, slots=True)
class Adoption:
    session_key: str
    agent_id: str
    generation: int
    primed: bool
    created: bool  # False for a Continue of an existing session
    watched: bool | None = None  # whether ``watcher`` got a new cursor (None: no watcher given)


def adopted_key(entry: CatalogEntry, agent_id: str = DEFAULT_AGENT_ID) -> str:
    """The default, agent-qualified key of an adopted session."""
    return f"agent:{agent_id}:adopted:{entry.provider}:{entry.thread_id}"


class Adopter:
    """Adopts catalog entries into one gateway, with the providers that will monitor them."""

    def __init__(
        self,
        gw: "Gateway",
        providers: Mapping[str, UpstreamProvider],
        *,
        prime_rounds: int = PRIME_MAX_ROUNDS,
    ) -> None:
        self.gw = gw
        self.providers = providers
        self.prime_rounds = prime_rounds
        self.links = link_store(gw)

    def adopt(
        self,
        entry: CatalogEntry,
        *,
        agent_id: str | None = None,
        session_key: str | None = None,
        watcher: str | None = None,
    ) -> Adoption:
        """Create a gateway session for ``entry``; ``watcher`` (if given) then watches it.

        The owning agent is the one the catalog reported (``entry.agent_id``), else ``agent_id``,
        else the one ``session_key`` carries, else the default; a contradiction is refused."""
        if entry.agent_id is not None:
            if agent_id is not None and agent_id != entry.agent_id:
                raise InvalidArgument(f"{entry.provider} reports agent {entry.agent_id!r} for this session, not {agent_id!r}")
            agent_id = entry.agent_id
        key = check_key(session_key or adopted_key(entry, agent_id or DEFAULT_AGENT_ID))
        agent = resolve_agent_id(key, agent_id) or DEFAULT_AGENT_ID
        provider = self._provider(entry)
        with self.gw.locked():
            self._refuse_other_link(entry, (key, agent))
            if self.gw.ops.session_exists(key, agent):
                raise SessionExists(f"session {key!r} already exists; continue it instead of adopting again")
        marker, primed = self._prime(provider, entry)  # provider I/O outside the lock
        with self.gw.transaction():
            self._refuse_other_link(entry, (key, agent))
            now = self.gw.clock()
            self.gw.create_session(key, agent_id=agent)
            self._record_adopted(key, agent, f"adopted from {entry.provider}", entry)
            generation = self.links.replace(
                key, agent, provider=entry.provider, host=entry.host, thread_id=entry.thread_id,
                marker=marker, primed=primed, now=now,
            )
        watched = self.gw.watch(watcher, key, target_agent_id=agent) if watcher else None
        return Adoption(key, agent, generation, primed, True, watched)

    def continue_session(
        self,
        entry: CatalogEntry,
        session_key: str,
        *,
        agent_id: str | None = None,
        watcher: str | None = None,
    ) -> Adoption:
        """Link an existing session to ``entry`` again, as a new generation."""
        check_key(session_key)
        provider = self._provider(entry)
        if entry.agent_id is not None:
            if agent_id is not None and agent_id != entry.agent_id:
                raise InvalidArgument(f"{entry.provider} reports agent {entry.agent_id!r} for this session, not {agent_id!r}")
            agent_id = entry.agent_id
        with self.gw.locked():
            target = self._target(session_key, agent_id)
            self._refuse_other_link(entry, target)
        marker, primed = self._prime(provider, entry)
        with self.gw.transaction():
            target = self._target(session_key, agent_id)  # it may have gone meanwhile
            self._refuse_other_link(entry, target)
            now = self.gw.clock()
            generation = self.links.replace(
                target[0], target[1], provider=entry.provider, host=entry.host,
                thread_id=entry.thread_id, marker=marker, primed=primed, now=now,
            )
            self._record_adopted(target[0], target[1], f"continued from {entry.provider}", entry)
        watched = self.gw.watch(watcher, target[0], target_agent_id=target[1]) if watcher else None
        return Adoption(target[0], target[1], generation, primed, False, watched)

    # -- internals ----------------------------------------------------------------------------

    def _provider(self, entry: CatalogEntry) -> UpstreamProvider:
        provider = self.providers.get(entry.provider)
        if provider is None:
            raise InvalidArgument(f"no provider {entry.provider!r}; known: {sorted(self.providers)}")
        return provider

    def _prime(self, provider: UpstreamProvider, entry: CatalogEntry) -> tuple[str | None, bool]:
        try:
            outcome = prime(provider, entry.thread_id, None, self.prime_rounds)
        except Exception:  # a raising provider: the monitor primes later
            return None, False
        if outcome.status is not CheckStatus.FOUND:
            return None, False
        return outcome.marker, outcome.done

    def _target(self, key: str, agent_id: str | None) -> tuple[str, str]:
        agent = resolve_agent_id(key, agent_id)
        if agent is None:
            agents = self.gw.store.agents_with_session_key(key)
            if len(agents) != 1:
                raise UnknownSession(f"session {key!r} is unknown or ambiguous; give agent_id")
            agent = agents[0]
        if not self.gw.ops.session_exists(key, agent):
            raise UnknownSession(f"unknown session {key!r} (agent {agent!r})")
        return key, agent

    def _refuse_other_link(self, entry: CatalogEntry, target: tuple[str, str]) -> None:
        # One thread feeds one session: activity dedupe keys name the thread, not the session.
        holder = self.links.by_thread(entry.provider, entry.thread_id)
        if holder is not None and (holder.session_key, holder.agent_id) != target:
            raise InvalidArgument(
                f"{entry.provider} thread {entry.thread_id!r} is already linked to {holder.session_key!r}"
            )

    def _record_adopted(self, key: str, agent: str, summary: str, entry: CatalogEntry) -> None:
        sequence = self.gw.record_event(
            key, "adopted", actor_type="system", agent_id=agent, summary=summary,
            payload={"provider": entry.provider},
        )
        if sequence is None:  # storage failed (R15 logged it): undo the whole adoption
            raise RuntimeError(f"recording 'adopted' for {key!r} failed")
