"""The store contract suite: every promise of `QueueStore`, as pytest tests any store can run.

Subclass `QueueStoreContract` in a test module and give it a `make_store`
fixture returning a callable that builds a fresh, empty store::

    class TestMyStore(QueueStoreContract):
        @pytest.fixture
        def make_store(self):
            def make(max_items=None):
                return MyStore({...}, max_items=max_items)
            return make

To test the 5.3.0 flow the suite drops an item's message from outside the
store (`testing.damage.lose_message`, which knows the package's stores); a
store of your own overrides `lose_message(store, item_id)`, else that test
is skipped. Thread tests call `end_thread()` in each thread they start;
the default closes Django's database connections. Each part of the contract
is a class of its own (`Adding`, `Leasing`, `Completing`, `CompletingWithDsns`,
`KeepingFailed`, `Reading`, `Shaping`, `Suppressing`, `ClaimingBatches`), should a store want to run only some.
"""

from __future__ import annotations

from .adding import Adding
from .batches import ClaimingBatches
from .completing import Completing
from .dsns import CompletingWithDsns
from .failed import KeepingFailed
from .leasing import Leasing
from .reading import Reading
from .shaping import Shaping
from .support import LATER, NO, OK, T0, ContractBase, StoreFactory, at, new_item, outcome
from .suppression import Suppressing

__all__ = [
    "LATER",
    "NO",
    "OK",
    "T0",
    "Adding",
    "ClaimingBatches",
    "Completing",
    "CompletingWithDsns",
    "ContractBase",
    "KeepingFailed",
    "Leasing",
    "QueueStoreContract",
    "Reading",
    "Shaping",
    "StoreFactory",
    "Suppressing",
    "at",
    "new_item",
    "outcome",
]


class QueueStoreContract(
    Adding, Leasing, Completing, CompletingWithDsns, KeepingFailed, Reading, Shaping, Suppressing, ClaimingBatches
):
    """The promises of `QueueStore`, checked against the store `make_store` builds."""
