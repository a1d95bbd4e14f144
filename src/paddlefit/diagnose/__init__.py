"""Machine diagnosis (groundwork for `paddlefit doctor`): collect the environment once into a snapshot.

Checks over the snapshot and the `doctor` command are not part of this release yet.
"""

from paddlefit.diagnose.snapshot import Snapshot, collect_snapshot

__all__ = ["Snapshot", "collect_snapshot"]
