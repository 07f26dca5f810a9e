"""PostgreSQL: the search's trigram index holds the subject alone (`mailqueue_item_subject_trgm`), replacing
migration 0010's `mailqueue_item_text_trgm` of the sender and the subject.

The search never reads the sender (docs/admin.md, "Search"), yet every add put an entry per trigram of it into
the index: 1,541 → 1,042 bytes of WAL an item added (docs/performance.md, "The address trigram index"). Made only where pg_trgm is installed, as 0010 made the old one; a plain `CREATE INDEX`,
so adds wait while it is built. Reversible. Other databases: nothing.
"""

from django.db import migrations

from django_mailqueue.stores.orm.pg_search import SubjectTrigramIndex


class Migration(migrations.Migration):
    dependencies = [
        ("django_mailqueue", "0016_drop_address_trigram"),
    ]

    operations = [SubjectTrigramIndex()]
