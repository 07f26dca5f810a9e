"""Every key a Redis store script touches is declared in KEYS (Redis Cluster runs a script on its declared keys'
node; the scripting documentation requires it): the contract suite with each declaring script run under a check
that refuses any other key (tests/support/declared_keys.py), and the scripts' text read for keys built from the
prefix."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from django_mailqueue.core.errors import QueueError
from django_mailqueue.stores import redis_scripts as scripts
from django_mailqueue.testing import QueueStoreContract
from django_mailqueue.testing.contract import T0, StoreFactory, at, new_item
from tests.stores.conftest import Maker
from tests.support.declared_keys import checked

pytestmark = pytest.mark.redis

#: The scripts that touch only keys declared in KEYS: every one.
DECLARING = (
    scripts.SCHEMA,
    scripts.ADD,
    scripts.CLAIM,
    scripts.RENEW,
    scripts.COMPLETE,
    scripts.RESCHEDULE,
    scripts.CANCEL,
    scripts.TAKE_TOKENS,
    scripts.SUSPEND,
    scripts.SUSPENSIONS,
    scripts.CLEAR_SUSPENSION,
    scripts.TAKE_PROBE,
    scripts.END_PROBE,
    scripts.SUPPRESSION,
    scripts.REINDEX,
    scripts.FAILED,
    scripts.DEFER_DESTINATION,
    scripts.SELECT,
    scripts.OVERVIEW,
)
#: A key named inside a script from the prefix: `prefix .. ` followed by anything but the wake-up channel's name.
BUILT = re.compile(r"\bprefix \.\. (?!'wakeup')")


def test_every_script_declares_its_keys() -> None:
    assert sorted(s.name for s in DECLARING) == sorted(s.name for s in scripts.ALL)


@pytest.mark.parametrize("script", DECLARING, ids=lambda s: s.name)
def test_a_declaring_script_builds_no_key_from_the_prefix(script: scripts.LuaScript) -> None:
    built = [
        line.strip() for line in script.source.splitlines() if BUILT.search(line) and not line.lstrip().startswith("--")
    ]
    assert built == [], built


def test_the_check_refuses_a_key_left_undeclared(make: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make()
    (item,) = store.add_many([new_item()], now=T0)
    dropped = store.keys.item(item.id)
    real = scripts.LuaScript.run

    def leaving_one_out(self: scripts.LuaScript, client: object, keys: list[str], *rest: object) -> object:
        return real(self, client, [k for k in keys if k != dropped], *rest)  # type: ignore[arg-type]

    with checked(monkeypatch, DECLARING):
        monkeypatch.setattr(scripts.LuaScript, "run", leaving_one_out)
        with pytest.raises(QueueError, match="did not declare|UNDECLARED"):
            store.reschedule(item.id, at=at(5))


class TestDeclaredKeysOnly(QueueStoreContract):
    """The whole contract, each declaring script refused any key it did not declare."""

    @pytest.fixture
    def make_store(self, make: Maker, monkeypatch: pytest.MonkeyPatch) -> Iterator[StoreFactory]:
        with checked(monkeypatch, DECLARING):
            yield lambda max_items=None: make(max_items)
