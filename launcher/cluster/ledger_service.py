"""The cluster ledger as the launch's placement API: what every process of the launch asks about its hosts."""

from __future__ import annotations

from launcher.cluster.ledger import ClusterLedger
from runtime.placement import LeaseView, NodeView, PlacementApi


class LedgerService(PlacementApi):
    """Answers :class:`runtime.placement.PlacementApi` from ``ledger`` (served by the launcher in-process)."""

    def __init__(self, *, ledger: ClusterLedger) -> None:
        self._ledger = ledger

    def nodes(self) -> list[NodeView]:
        return self._ledger.nodes()

    def holders(self) -> list[LeaseView]:
        return [
            LeaseView(
                lease_id=lease.lease_id,
                owner=lease.owner,
                label=lease.label,
                host=lease.host,
                resources=lease.claim.asked(),
                gpu_ids=list(lease.claim.gpu_ids),
                group_id=lease.group_id,
                bundle_index=lease.bundle_index,
            )
            for lease in self._ledger.leases()
        ]
