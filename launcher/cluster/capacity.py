"""What one host, or one bundle of a placement group, has in total and free: GPUs by id (shared in exact fractions,
as pools share them) and counted resources (CPU and the custom ones of hosts.toml)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from launcher.config.placement import amount_of, gpus_that_fit
from runtime.placement import GPU


@dataclass(frozen=True)
class Claim:
    """What a holder took: counted resources, and ``gpu_share`` of each GPU in ``gpu_ids``."""

    resources: Mapping[str, Fraction] = field(default_factory=dict)
    gpu_ids: tuple[int, ...] = ()
    gpu_share: Fraction = Fraction(0)

    def asked(self) -> dict[str, float]:
        """The claim as a request reads (``{"GPU": 2, "CPU": 1}``)."""
        shown = {**self.resources, **({GPU: self.gpu_share * len(self.gpu_ids)} if self.gpu_ids else {})}
        return {name: float(amount) for name, amount in shown.items()}


def wanted(resources: Mapping[str, float]) -> tuple[dict[str, Fraction], Fraction]:
    """A request's counted resources and its GPU amount, exact."""
    counted = {name: amount_of(amount) for name, amount in resources.items() if name != GPU and amount > 0}
    return counted, amount_of(resources.get(GPU, 0))


@dataclass
class Capacity:
    """Totals and what is free of them; ``fit`` finds room, ``take``/``give_back`` move a claim."""

    total: dict[str, Fraction]
    free: dict[str, Fraction]
    gpu_total: dict[int, Fraction]
    gpus: dict[int, Fraction]  # free share per GPU id

    @classmethod
    def of(
        cls, resources: Mapping[str, float | Fraction], gpu_ids: Iterable[int], gpu_share: Fraction = Fraction(1)
    ) -> Capacity:
        """Full capacity: ``resources`` counted, and ``gpu_share`` of each of ``gpu_ids``."""
        total = {name: Fraction(amount) for name, amount in resources.items()}
        gpus = {gpu: gpu_share for gpu in gpu_ids}
        return cls(total=total, free=dict(total), gpu_total=dict(gpus), gpus=dict(gpus))

    def copy(self) -> Capacity:
        return Capacity(
            total=dict(self.total), free=dict(self.free), gpu_total=dict(self.gpu_total), gpus=dict(self.gpus)
        )

    def fit(self, resources: Mapping[str, float], *, emptiest: bool = False) -> Claim | None:
        """The claim ``resources`` would take here, or None when something is short (nothing is taken)."""
        counted, gpu = wanted(resources)
        if any(self.free.get(name, Fraction(0)) < amount for name, amount in counted.items()):
            return None
        gpu_ids = gpus_that_fit(self.gpus, gpu, emptiest=emptiest)
        if gpu_ids is None:
            return None
        return Claim(counted, gpu_ids, (gpu if gpu < 1 else Fraction(1)) if gpu_ids else Fraction(0))

    def take(self, claim: Claim) -> None:
        for name, amount in claim.resources.items():
            assert self.free[name] >= amount, (name, self.free[name], amount)
            self.free[name] -= amount
        for gpu in claim.gpu_ids:
            assert self.gpus[gpu] >= claim.gpu_share, (gpu, self.gpus[gpu], claim.gpu_share)
            self.gpus[gpu] -= claim.gpu_share

    def give_back(self, claim: Claim) -> None:
        for name, amount in claim.resources.items():
            self.free[name] = min(self.total[name], self.free[name] + amount)
        for gpu in claim.gpu_ids:
            self.gpus[gpu] = min(self.gpu_total[gpu], self.gpus[gpu] + claim.gpu_share)

    def set_total(self, name: str, amount: Fraction) -> None:
        """Change a counted total (a host's CPUs once its agent said how many); what is held stays held."""
        held = self.total.get(name, Fraction(0)) - self.free.get(name, Fraction(0))
        self.total[name] = amount
        self.free[name] = max(Fraction(0), amount - held)

    def totals(self) -> dict[str, float]:
        """Every total, GPUs as their count (or the bundle's share of them)."""
        gpus = {GPU: float(sum(self.gpu_total.values(), Fraction(0)))} if self.gpu_total else {}
        return {**{name: float(amount) for name, amount in self.total.items()}, **gpus}

    def available(self) -> dict[str, float]:
        """What is free, GPUs summed over their free shares."""
        gpus = {GPU: float(sum(self.gpus.values(), Fraction(0)))} if self.gpu_total else {}
        return {**{name: float(amount) for name, amount in self.free.items()}, **gpus}

    def shortfall(self, resources: Mapping[str, float]) -> str:
        """What of ``resources`` is free here, as ``GPU 0/2, CPU 3/4`` (free/total)."""
        totals, available = self.totals(), self.available()
        parts = [f"{name} {available.get(name, 0.0):g}/{totals.get(name, 0.0):g}" for name in resources]
        return ", ".join(parts) or "nothing asked"
