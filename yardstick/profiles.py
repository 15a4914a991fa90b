"""Measurement profiles: how long and how often each family measures."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RoundTripProfile(BaseModel):
    """PING probe windows, like `redis-cli --latency-history -i window_s`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    windows: int = 3
    window_s: float = 1.0
    # Pause between PINGs: the probe is load too; 1 ms keeps it under ~1000 PING/s.
    interval_ms: float = 1.0


class Profile(BaseModel):
    """A named set of measurement parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    round_trip: RoundTripProfile = RoundTripProfile()
    # Timeout for one measurement family on one environment.
    family_timeout_s: float = 600.0


PROFILES: dict[str, Profile] = {
    "quick": Profile(
        name="quick",
        round_trip=RoundTripProfile(windows=3, window_s=1.0, interval_ms=1.0),
        family_timeout_s=120.0,
    ),
    "nightly": Profile(
        name="nightly",
        round_trip=RoundTripProfile(windows=5, window_s=5.0, interval_ms=1.0),
    ),
}


def get_profile(name: str) -> Profile:
    """Return the built-in profile called `name`, or raise ValueError naming the choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown profile {name!r}: choose one of {', '.join(sorted(PROFILES))}"
        ) from None
