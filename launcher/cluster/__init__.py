"""The launch as one cluster: the ledger of hosts and holders, and placing groups of bundles over hosts."""

from launcher.cluster.capacity import Capacity, Claim
from launcher.cluster.group_placement import place_bundles
from launcher.cluster.ledger import ClusterLedger, Lease, LostHost
from launcher.cluster.ledger_service import LedgerService
from launcher.cluster.placed_actors import PlacedActors

__all__ = ["Capacity", "Claim", "ClusterLedger", "Lease", "LedgerService", "LostHost", "PlacedActors", "place_bundles"]
