-- Ends the sessions named $1 in pg_stat_activity (the chaos workers'): all of them when $2,
-- else each with probability one half. Never the session asking. Returns how many it ended.
SELECT count(pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE application_name = $1 AND pid <> pg_backend_pid() AND ($2 OR random() < 0.5)
