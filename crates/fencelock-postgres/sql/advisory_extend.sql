-- Runs on the holding connection: the ping that proves the session (and so the lock) is
-- alive, and re-arms idle_session_timeout for the new ttl.
-- $1 key, $2 owner, $3 token, $4 ttl in microseconds, $5 idle_session_timeout in ms.
UPDATE {schema}.fencelock_advisory_holders
   SET expires_at = clock_timestamp() + $4::float8 * interval '1 microsecond'
 WHERE key = $1 AND owner = $2 AND token = $3 AND pid = pg_backend_pid()
RETURNING set_config('idle_session_timeout', $5, false) AS armed
