-- Runs on the holding connection, between renewals: the session watch. $1 is
-- idle_session_timeout in ms: the time left until the lease's deadline, so the ping proves
-- the session alive without moving the moment the server ends a silent holder's session.
SELECT set_config('idle_session_timeout', $1, false) AS armed
