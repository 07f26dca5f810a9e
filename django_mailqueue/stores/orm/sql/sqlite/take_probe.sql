-- A destination's probe taken in one statement (QueueStore.take_probe): the row made with the probe if missing
-- (no strike: a probe, no suspension record), else the probe written unless a suspension (until > now) or
-- another holder's probe (probe_until > now) is in force. SQLite's one writer at a time makes it atomic.
-- A row is returned when taken. Parameters: destination, now (µs), probe until (µs), holder.
INSERT INTO {suspensions} (destination, until, since, strikes, reply_code, reply_status, reply_text,
    probe_until, probe_holder)
VALUES (%s, 0, %s, 0, NULL, '', '', %s, %s)
ON CONFLICT (destination) DO UPDATE SET probe_until = excluded.probe_until, probe_holder = excluded.probe_holder
WHERE {suspensions}.until <= excluded.since
    AND ({suspensions}.probe_until <= excluded.since OR {suspensions}.probe_holder = excluded.probe_holder)
RETURNING 1
