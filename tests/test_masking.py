"""One set of masking rules for every secret: a relay's password, a store's password, a password in a URL."""

from __future__ import annotations

import base64

from django_mailqueue.core.masking import MASK, NO_SECRETS, SecretMask, mask_url_passwords


def test_a_password_is_masked_in_every_spelling_a_driver_or_a_server_may_use() -> None:
    password, user = "p@ss/w0rd", "relayuser"
    plain = base64.b64encode(f"\0{user}\0{password}".encode()).decode()
    mask = SecretMask(password, user)
    text = f"said {password}, p%40ss%2Fw0rd, {base64.b64encode(password.encode()).decode()} and {plain}"
    masked = mask(text)
    assert masked == f"said {MASK}, {MASK}, {MASK} and {MASK}"


def test_any_url_password_is_masked_even_with_no_known_secret() -> None:
    text = "redis://bob:hunter2@h:1/0 and postgres://u:pw@db/x, not http://h/a:b@c"
    assert NO_SECRETS(text) == f"redis://bob:{MASK}@h:1/0 and postgres://u:{MASK}@db/x, not http://h/a:b@c"
    assert mask_url_passwords("redis://bob:hunter2@h", "[hidden]") == "redis://bob:[hidden]@h"


def test_adding_a_password_leaves_the_first_mask_as_it_was() -> None:
    first = SecretMask("alpha-secret")
    both = first.adding("beta-secret")
    assert first("alpha-secret beta-secret") == f"{MASK} beta-secret"
    assert both("alpha-secret beta-secret") == f"{MASK} {MASK}"
    assert first.adding(None) is first and not NO_SECRETS and bool(both)
