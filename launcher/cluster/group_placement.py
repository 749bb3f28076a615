"""Placing a placement group's bundles over hosts, all or nothing, by Ray's four strategies; only trial copies of
the hosts' capacity are touched, so a refusal leaves nothing reserved."""

from __future__ import annotations

from collections.abc import Mapping

from launcher.cluster.capacity import Capacity, Claim
from runtime.placement import GroupSpec, PlacementShort

MAX_SEARCH_STEPS = 100_000  # STRICT_SPREAD's search for distinct hosts: bounded, then refused


def place_bundles(hosts: Mapping[str, Capacity], spec: GroupSpec) -> list[tuple[str, Claim]]:
    """A host and claim per bundle of ``spec`` over ``hosts`` (alive, in preference order), or PlacementRefused.

    PACK: every bundle on the first host that takes them all, else filling hosts in order. STRICT_PACK: one host
    or refused. SPREAD: each bundle on a host the group does not use yet while one fits, then on the host it uses
    least. STRICT_SPREAD: a distinct host per bundle or refused."""
    trial = {name: capacity.copy() for name, capacity in hosts.items()}
    if spec.strategy in ("PACK", "STRICT_PACK"):
        for name in trial:
            placed = _all_on(name, trial[name].copy(), spec.bundles)
            if placed is not None:
                return placed
        if spec.strategy == "STRICT_PACK":
            raise PlacementShort(f"{_what(spec)}: needs {_sum(spec.bundles)} on one host; {_free(trial, spec)}")
        return _fill(trial, spec)
    if spec.strategy == "SPREAD":
        return _spread(trial, spec)
    return _strict_spread(trial, spec)


def _all_on(name: str, capacity: Capacity, bundles: list[dict[str, float]]) -> list[tuple[str, Claim]] | None:
    placed = []
    for bundle in bundles:
        claim = capacity.fit(bundle)
        if claim is None:
            return None
        capacity.take(claim)
        placed.append((name, claim))
    return placed


def _fill(trial: dict[str, Capacity], spec: GroupSpec) -> list[tuple[str, Claim]]:
    placed: list[tuple[str, Claim]] = []
    names = list(trial)
    current = 0
    for index, bundle in enumerate(spec.bundles):
        for offset in range(len(names)):  # stay on the host being filled, then move on in order
            name = names[(current + offset) % len(names)]
            claim = trial[name].fit(bundle)
            if claim is not None:
                trial[name].take(claim)
                placed.append((name, claim))
                current = (current + offset) % len(names)
                break
        else:
            raise PlacementShort(_no_room(spec, index, trial))
    return placed


def _spread(trial: dict[str, Capacity], spec: GroupSpec) -> list[tuple[str, Claim]]:
    placed: list[tuple[str, Claim]] = []
    uses = dict.fromkeys(trial, 0)
    for index, bundle in enumerate(spec.bundles):
        order = sorted(trial, key=lambda name: uses[name])  # stable: hosts.toml order among equals
        for name in order:
            claim = trial[name].fit(bundle, emptiest=True)
            if claim is not None:
                trial[name].take(claim)
                placed.append((name, claim))
                uses[name] += 1
                break
        else:
            raise PlacementShort(_no_room(spec, index, trial))
    return placed


def _strict_spread(trial: dict[str, Capacity], spec: GroupSpec) -> list[tuple[str, Claim]]:
    bundles, names = spec.bundles, list(trial)
    if len(bundles) > len(names):
        raise PlacementShort(
            f"{_what(spec)}: needs {len(bundles)} distinct alive hosts, the launch has {len(names)} "
            f"({', '.join(names) or 'none'}); nothing was reserved"
        )
    fits = [[name for name in names if trial[name].fit(bundle) is not None] for bundle in bundles]
    order = sorted(range(len(bundles)), key=lambda index: len(fits[index]))  # the most constrained bundle first
    chosen: dict[int, str] = {}
    steps = 0

    def assign(position: int) -> bool:
        nonlocal steps
        if position == len(order):
            return True
        index = order[position]
        for name in fits[index]:
            steps += 1
            if steps > MAX_SEARCH_STEPS:
                return False
            if name not in chosen.values():
                chosen[index] = name
                if assign(position + 1):
                    return True
                del chosen[index]
        return False

    if not assign(0):
        lacking = [index for index, hosts in enumerate(fits) if not hosts]
        why = f"bundle {lacking[0]} {bundles[lacking[0]]} fits on no host" if lacking else "no distinct host each"
        raise PlacementShort(f"{_what(spec)}: {why}; {_free(trial, spec)}")
    placed = []
    for index, bundle in enumerate(bundles):
        claim = trial[chosen[index]].fit(bundle)
        assert claim is not None
        trial[chosen[index]].take(claim)
        placed.append((chosen[index], claim))
    return placed


def _what(spec: GroupSpec) -> str:
    name = f" {spec.name!r}" if spec.name else ""
    return f"placement group{name} ({spec.strategy}, {len(spec.bundles)} bundle(s))"


def _sum(bundles: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for name, amount in bundle.items():
            total[name] = total.get(name, 0.0) + amount
    return total


def _free(trial: dict[str, Capacity], spec: GroupSpec) -> str:
    asked = _sum(spec.bundles)
    hosts = "; ".join(f"{name} {capacity.shortfall(asked)}" for name, capacity in trial.items()) or "no alive host"
    return f"free/total: {hosts}; nothing was reserved"


def _no_room(spec: GroupSpec, index: int, trial: dict[str, Capacity]) -> str:
    after = f" after bundles 0-{index - 1}" if index else ""
    return f"{_what(spec)}: bundle {index} {spec.bundles[index]} fits on no host{after}; {_free(trial, spec)}"
