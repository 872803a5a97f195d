"""Drop our own echoed prompts from a provider's activities.

Providers report every human-looking turn; deciding which ones are echoes of
the gateway's own messages needs the session's recent gateway-side messages,
which only the monitor knows. This helper keeps that decision in one place,
including for overflowed bursts, whose individual texts travel along so that
echoes inside a burst are not counted as human turns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from .normalize import is_self_echo
from .providers.base import UpstreamActivity


def drop_self_echoes(
    activities: Iterable[UpstreamActivity],
    recent_gateway_user_messages: Sequence[str],
) -> list[UpstreamActivity]:
    """Return ``activities`` without self-echoes, bursts recounted.

    A burst whose every text is an echo disappears; otherwise its ``turns``
    and ``burst_texts`` keep only the non-echo turns.
    """
    kept: list[UpstreamActivity] = []
    for activity in activities:
        if activity.burst_overflow and activity.burst_texts:
            human = tuple(
                text
                for text in activity.burst_texts
                if not is_self_echo(text, recent_gateway_user_messages)
            )
            if human:
                kept.append(
                    dataclasses.replace(
                        activity, turns=len(human), text=human[-1], burst_texts=human
                    )
                )
            continue
        if not is_self_echo(
            activity.text,
            recent_gateway_user_messages,
            truncated=activity.text_truncated,
        ):
            kept.append(activity)
    return kept
