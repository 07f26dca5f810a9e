"""PostgreSQL: drop the recipients' address trigram index (`mailqueue_recipient_address_trgm`, migration 0010).

The search reads an address start as a range of `mailqueue_recipient_address_start` (migration 0015), a domain
from `mailqueue_recipient_domain`, and a subject word from the subject's trigram index, which stays: nothing reads
the address's GIN index, and every add paid an entry in it per trigram of each recipient's address
(docs/performance.md, "The address trigram index"). Undone, the index is made again where pg_trgm is installed.
Other databases: nothing.
"""

from django.db import migrations

from django_mailqueue.stores.orm.pg_search import DropAddressTrigramIndex


class Migration(migrations.Migration):
    dependencies = [
        ("django_mailqueue", "0015_search_address_start"),
    ]

    operations = [DropAddressTrigramIndex()]
