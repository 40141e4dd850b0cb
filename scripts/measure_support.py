"""What the measure_*.py scripts share: the integration tests' process helpers on
the import path, the binary they run, and two `thermocline store --replSet`
processes (archive rs0, fast tier rs1) in a fresh directory."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))


def use_binary(binary):
    """The test helpers start binary from here on."""
    os.environ["THERMOCLINE_BIN"] = os.path.abspath(binary)


def start_tiers(binary):
    """Runs binary from here on; returns (base directory, archive, fast tier)."""
    use_binary(binary)
    from conftest import StoreProcess
    base = tempfile.mkdtemp()
    archive = StoreProcess(base + "/archive", replica_set="rs0").start()
    fast = StoreProcess(base + "/fast", replica_set="rs1").start()
    return base, archive, fast


def holds_feeder(proxy):
    """Whether this proxy holds the feeder's lease (a dead one holds nothing)."""
    from tier_support import status
    try:
        return status(proxy)["workers"]["feeder"].get("lease", {}).get("heldHere", False)
    except Exception:  # noqa: BLE001 - a killed proxy does not answer
        return False
