"""Measurement profiles: how long and how often each family measures.

A profile has one field per family with settings, holding that family's settings model; the
families declare the model and its values in "quick" and "nightly" (tasks/, `FAMILY.settings`
and `FAMILY.presets`), so this module only composes them. Their names and timeouts are in
yardstick/settings/names.py, which the CLI reads without importing the families."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, create_model

from yardstick.settings.names import FAMILY_TIMEOUTS_S
from yardstick.tasks import registry

# Re-exported: callers name a family's settings model through the profile they belong to.
from yardstick.tasks.agreement import AgreementProfile  # noqa: F401
from yardstick.tasks.contention import ContentionProfile  # noqa: F401
from yardstick.tasks.intrinsic import IntrinsicProfile  # noqa: F401
from yardstick.tasks.keyspace import KeyspaceProfile  # noqa: F401
from yardstick.tasks.memory import MemoryProfile, MemoryShape  # noqa: F401
from yardstick.tasks.memtier import MemtierProfile  # noqa: F401
from yardstick.tasks.round_trip import RoundTripProfile  # noqa: F401
from yardstick.tasks.slow_commands import SlowCommandsProfile  # noqa: F401
from yardstick.tasks.slowlog import SlowlogProfile  # noqa: F401
from yardstick.tasks.throughput import ThroughputProfile  # noqa: F401
from yardstick.tasks.transport import TransportProfile  # noqa: F401


class _ProfileBase(BaseModel):
    """A named set of measurement parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    # Timeout for one measurement family on one environment.
    family_timeout_s: float = 600.0


def _compose() -> type[BaseModel]:
    """The Profile model: the base fields, then one field per family with settings."""
    fields = {
        name: (family.settings, family.settings())
        for name, family in registry.families().items()
        if family.settings is not None
    }
    return create_model("Profile", __base__=_ProfileBase, __module__=__name__, **fields)


Profile = _compose()


def _preset(name: str) -> BaseModel:
    """The built-in profile `name`: each family's preset for it, its defaults otherwise."""
    settings = {}
    for family in registry.families().values():
        unknown = set(family.presets) - set(FAMILY_TIMEOUTS_S)
        if unknown:
            raise RuntimeError(f"family {family.name!r}: presets for no profile {sorted(unknown)}")
        if name in family.presets:
            settings[family.name] = family.presets[name]
    return Profile(name=name, family_timeout_s=FAMILY_TIMEOUTS_S[name], **settings)


PROFILES: dict[str, Profile] = {name: _preset(name) for name in FAMILY_TIMEOUTS_S}


def get_profile(name: str) -> Profile:
    """Return the built-in profile called `name`, or raise ValueError naming the choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown profile {name!r}: choose one of {', '.join(sorted(PROFILES))}"
        ) from None
