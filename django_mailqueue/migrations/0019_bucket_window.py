"""A rate's closed-loop window beside its token bucket (issue 20, Done-when line 1): the tokens in flight and those
reported done within the last period (`core.shaping.Window`); on PostgreSQL the function that takes with it, on the
database's own clock (docs/shaping.md, "The window").
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# core/shaping.window_take and take_from_bucket in PL/pgSQL, after the bucket's row is locked: the clock is read
# then (`clock_timestamp()`), so a take that waited for the lock counts the window as it is when it decides. The
# row keeps what take_tokens.sql keeps (the tokens before the take, and what it wanted: here the window's room
# too), so a take without a window reads it the same. p_async 'off': the commit does not wait for the WAL flush.
TAKE = """
CREATE OR REPLACE FUNCTION mailqueue_take_window(
    p_async text, p_name text, p_rate double precision, p_burst integer, p_want integer, p_now bigint,
    p_cap integer, p_period bigint, p_expire bigint, p_report integer, p_ended bigint
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    b record;
    e record;
    clock bigint;
    fl text[] := '{}';
    dn text[] := '{}';
    added text[] := '{}';
    used integer := 0;
    left_over integer;
    v_tokens double precision;
    v_wanted integer;
    taken integer;
BEGIN
    IF p_async IS NOT NULL THEN
        PERFORM set_config('synchronous_commit', p_async, true);
    END IF;
    INSERT INTO mailqueue_bucket (name, rate, burst, tokens, wanted, updated, flying, done)
    VALUES (p_name, p_rate, p_burst, p_burst, 0, p_now, '', '') ON CONFLICT (name) DO NOTHING;
    SELECT * INTO b FROM mailqueue_bucket WHERE name = p_name FOR UPDATE;
    clock := floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    SELECT COALESCE(sum(split_part(x, '*', 2)::integer), 0)::integer INTO left_over
    FROM unnest(string_to_array(NULLIF(b.flying, ''), ',')) AS x WHERE split_part(x, '*', 1)::bigint > clock - p_expire;
    left_over := LEAST(p_report, left_over);
    IF left_over > 0 AND clock - p_ended > clock - p_period THEN
        added := ARRAY[(clock - p_ended)::text || '*' || left_over::text];
    END IF;
    FOR e IN SELECT split_part(x, '*', 1)::bigint AS t, split_part(x, '*', 2)::integer AS n
             FROM unnest(string_to_array(NULLIF(b.flying, ''), ',')) WITH ORDINALITY AS u(x, o) ORDER BY o LOOP
        CONTINUE WHEN e.t <= clock - p_expire;
        IF left_over >= e.n THEN
            left_over := left_over - e.n;
        ELSE
            fl := fl || (e.t::text || '*' || (e.n - left_over)::text);
            used := used + e.n - left_over;
            left_over := 0;
        END IF;
    END LOOP;
    FOR e IN SELECT split_part(x, '*', 1)::bigint AS t, split_part(x, '*', 2)::integer AS n
             FROM unnest(string_to_array(NULLIF(b.done, ''), ',')) WITH ORDINALITY AS u(x, o) ORDER BY o LOOP
        CONTINUE WHEN e.t <= clock - p_period;
        dn := dn || (e.t::text || '*' || e.n::text);
    END LOOP;
    dn := dn || added;
    SELECT COALESCE(sum(split_part(x, '*', 2)::integer), 0)::integer + used INTO used FROM unnest(dn) AS x;
    v_tokens := LEAST(p_burst::double precision, b.tokens - LEAST(b.wanted, floor(b.tokens + 1e-9)::integer)
        + (CASE WHEN p_now > b.updated THEN (p_now - b.updated) * p_rate / 1000000.0 ELSE 0.0 END));
    v_wanted := LEAST(p_want, p_burst, GREATEST(0, p_cap - used));
    taken := LEAST(v_wanted, floor(v_tokens + 1e-9)::integer);
    IF taken > 0 THEN
        fl := fl || (clock::text || '*' || taken::text);
    END IF;
    UPDATE mailqueue_bucket SET tokens = v_tokens, wanted = v_wanted,
        updated = GREATEST(b.updated, p_now), rate = p_rate, burst = p_burst,
        flying = array_to_string(fl, ','), done = array_to_string(dn, ',')
    WHERE name = p_name;
    RETURN taken;
END
$$
"""


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TAKE)


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS mailqueue_take_window")


class Migration(migrations.Migration):
    dependencies = [
        ("django_mailqueue", "0018_suspension_probe"),
    ]

    operations = [
        migrations.AddField(
            model_name="ratebucket",
            name="flying",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="ratebucket",
            name="done",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunPython(create, drop, elidable=False),
    ]
