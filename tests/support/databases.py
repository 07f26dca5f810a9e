"""The database aliases a test may use, as the suite's settings define them (PostgreSQL only when reachable)."""

from django.conf import settings

#: SQLite, and PostgreSQL when it is reachable (its tests skip, or fail when required, otherwise).
DATABASES = [alias for alias in ("default", "pg") if alias in settings.DATABASES]
#: The same, with the PostgreSQL alias whose sessions default to SERIALIZABLE.
WITH_SERIALIZABLE = [alias for alias in ("default", "pg", "pg_serializable") if alias in settings.DATABASES]
#: The PostgreSQL alias whose statements psycopg prepares on their first run (none without PostgreSQL).
PREPARED = [alias for alias in ("pg_prepared",) if alias in settings.DATABASES]
