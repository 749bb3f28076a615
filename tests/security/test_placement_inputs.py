"""What the launch's placement API accepts from a peer (runtime/placement/placement_types.py, checked field by field
when a call arrives): bounded requests, groups and start specs, refused with the field named; the spawn ticket never
shown in a repr; a refusal holds nothing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime.placement import ExitReport, GroupSpec, ResourceRequest, StartSpec
from runtime.placement.placement_types import MAX_BUNDLES, MAX_ENV, MAX_LAST_LINES, MAX_RESOURCE_KINDS


def test_requests_are_bounded_and_well_formed() -> None:
    with pytest.raises(ValidationError, match="at most 32 kinds of resource"):
        ResourceRequest(resources={f"r{i}": 1 for i in range(MAX_RESOURCE_KINDS + 1)})
    with pytest.raises(ValidationError, match="resource name must match"):
        ResourceRequest(resources={"../etc": 1})
    for amount in (float("nan"), float("inf"), -1.0, 1e7):
        with pytest.raises(ValidationError, match="the amount must be between 0 and"):
            ResourceRequest(resources={"CPU": amount})
    with pytest.raises(ValidationError, match="bundle_index"):
        ResourceRequest(bundle_index=MAX_BUNDLES)
    with pytest.raises(ValidationError, match="wait_s"):
        ResourceRequest(wait_s=1e9)
    with pytest.raises(ValidationError, match="extra"):
        ResourceRequest.model_validate({"resources": {}, "command": "rm -rf /"})


def test_groups_start_specs_and_exit_reports_are_bounded() -> None:
    with pytest.raises(ValidationError, match="bundles"):
        GroupSpec(bundles=[{"CPU": 1}] * (MAX_BUNDLES + 1))
    with pytest.raises(ValidationError, match="bundle 1 reserves nothing"):
        GroupSpec(bundles=[{"CPU": 1}, {"CPU": 0}])
    with pytest.raises(ValidationError, match="strategy"):
        GroupSpec(bundles=[{"CPU": 1}], strategy="ANYWHERE")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="ticket_line"):
        StartSpec(label="x", ticket_line="t" * 4097)
    with pytest.raises(ValidationError, match="env"):
        StartSpec(label="x", ticket_line="t", env={f"V{i}": "1" for i in range(MAX_ENV + 1)})
    assert "secret-token" not in repr(StartSpec(label="x", ticket_line="secret-token"))
    report = {"lease_id": "rt-1", "label": "x", "host": "h", "pid": 1, "returncode": 1, "signal": None, "reason": "r"}
    with pytest.raises(ValidationError, match="last_lines"):
        ExitReport(**report, last_lines=["line"] * (MAX_LAST_LINES + 1))
