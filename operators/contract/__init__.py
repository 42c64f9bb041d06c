"""Performance contracts with fuzzy violation levels (METHODS.md §4; Vraalsen, Aydt, Mendes, Reed).

- :mod:`~perfsift.operators.contract.signature`: metric spaces, capabilities, equivalence classes
  derived from a baseline run (:func:`derive_contract`), contract files (:func:`load_contract`);
- :mod:`~perfsift.operators.contract.rules`: the Autopilot-style fuzzy rule language that turns a
  distance into a violation level;
- :mod:`~perfsift.operators.contract.monitor`: :class:`ContractMonitor`, the operator that
  evaluates samples against a contract, and its records.
"""

from perfsift.operators.contract.monitor import (
    STATES,
    ContractMonitor,
    ViolationTracker,
    contract_records,
    job_summary,
)
from perfsift.operators.contract.signature import (
    ContractError,
    Dimension,
    baseline_capabilities,
    capability_column,
    check_contract,
    derive_contract,
    leader_clusters,
    load_contract,
    parse_space,
    space_points,
)

__all__ = [
    "STATES",
    "ContractError",
    "ContractMonitor",
    "Dimension",
    "ViolationTracker",
    "baseline_capabilities",
    "capability_column",
    "check_contract",
    "contract_records",
    "derive_contract",
    "job_summary",
    "leader_clusters",
    "load_contract",
    "parse_space",
    "space_points",
]
