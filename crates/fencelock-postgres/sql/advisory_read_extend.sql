-- Runs on the reader's holding connection: the ping that proves the session (and so its
-- shared lock) is alive, and re-arms idle_session_timeout for the new ttl.
-- $1 key, $2 reader id, $3 phase owner, $4 phase token, $5 ttl in microseconds,
-- $6 idle_session_timeout in ms.
-- No row: the reader's record was taken over (its id granted again on another session).
UPDATE {schema}.fencelock_advisory_readers
   SET expires_at = clock_timestamp() + $5::float8 * interval '1 microsecond'
 WHERE key = $1 AND reader = $2 AND owner = $3 AND token = $4 AND pid = pg_backend_pid()
RETURNING set_config('idle_session_timeout', $6, false) AS armed
