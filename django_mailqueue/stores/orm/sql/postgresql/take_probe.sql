-- A destination's probe taken in one statement (QueueStore.take_probe): the row made with the probe if missing
-- (no strike: a probe, no suspension record), else the probe written unless a suspension (until > now) or
-- another holder's probe (probe_until > now) is in force. ON CONFLICT DO UPDATE locks the row and tests the
-- latest version: of concurrent takers, and a concurrent suspend, one wins. A row is returned when taken.
-- Parameters: destination, now (µs), probe until (µs), holder.
INSERT INTO {suspensions} AS s (destination, until, since, strikes, reply_code, reply_status, reply_text,
    probe_until, probe_holder)
VALUES (%b, 0, %b, 0, NULL, '', '', %b, %b)
ON CONFLICT (destination) DO UPDATE SET probe_until = EXCLUDED.probe_until, probe_holder = EXCLUDED.probe_holder
WHERE s.until <= EXCLUDED.since AND (s.probe_until <= EXCLUDED.since OR s.probe_holder = EXCLUDED.probe_holder)
RETURNING 1
