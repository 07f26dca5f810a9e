"""The search's index of the recipients' lowercase addresses (PostgreSQL only).

The queue's search (docs/admin.md, "Search") now matches the start of a recipient's address, a `@domain` or a
whole subject word. An address start is a range of this btree (`lower(address) text_pattern_ops`, the item and
the address included: read from the index alone); the domain has its index already and the subject word the
trigram index of migration 0010. Built with a plain `CREATE INDEX`: it holds off adds while it is built (about
15 s for 1.57 M recipients). SQLite gets no index: its search tests the rows.
"""

from django.db import migrations

from django_mailqueue.stores.orm.pg_search import AddressStartIndex


class Migration(migrations.Migration):
    dependencies = [
        ("django_mailqueue", "0014_queue_untried_index"),
    ]

    operations = [AddressStartIndex()]
