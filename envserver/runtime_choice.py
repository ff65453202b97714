"""Which runtime a reset asks for, and how one is made with the remote's options.

Holds :func:`check_reset` (refuse a reset that cannot work before anything changes; the
factory of an env switch) and :func:`construct` (a runtime from its factory, given only
the ``serve`` options it accepts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from runtimes import registry
from runtimes.base import Runtime
from runtimes.errors import UnknownEnvironment

from .orders import LOCKSTEP, Refused, ResetOrder

log = logging.getLogger(__name__)


def check_reset(runtime: Runtime, order: ResetOrder) -> Callable[..., Runtime] | None:
    """The factory of the env ``order`` switches to (None: it keeps ``runtime``);
    :class:`Refused` for a switch or mode that cannot work."""
    factory = None
    target: Any = runtime
    if order.env_id is not None and order.env_id != runtime.env_id:
        try:
            factory = registry.lookup(order.env_id)
        except UnknownEnvironment as exc:
            raise Refused(str(exc)) from None
        target = factory
    if order.mode == LOCKSTEP and not getattr(target, "lockstep", True):
        raise Refused(
            f"{target.env_id} runs only in real time (it lives outside this process); "
            "reset without mode 'lockstep'"
        )
    return factory


def construct(
    factory: Callable[..., Runtime], env_id: str, options: Mapping[str, Any]
) -> Runtime:
    """The runtime with the options it accepts (scale only where known); the others are
    logged as ignored."""
    accepted = getattr(factory, "options", ())
    ignored = sorted(set(options) - set(accepted))
    if ignored:
        log.warning("%s takes no %s; ignored", env_id, ", ".join(ignored))
    return factory(**{k: v for k, v in options.items() if k in accepted})
