-- fencelock schema, version 20: the head of an advisory key's queue waits inside the server
-- (DESIGN 5.3, "The head waits in the server"). Applied like the earlier versions, with
-- search_path set to fencelock's schema.
--
-- Until now a released advisory lock was free until its head, woken by a NOTIFY, sent its
-- next try: a message, then a second request. Now the head of the queue blocks in
-- pg_advisory_lock on the session that will hold the lock, so the server's lock manager
-- hands the lock over inside the release and the head's grant comes back in the reply to the
-- statement it is already waiting on. Only the head blocks (at most one blocked session per
-- key and process, fencelock_advisory_await), so the queue's order and its place ttl are
-- kept, and the grant itself is still fencelock_advisory_acquire_queued's: the blocked wait
-- only decides when that try runs.

-- fencelock_advisory_acquire_queued, answering also whether the waiter, refused, heads its
-- key's live queue (`head`): the waiter that may wait for the lock inside the server. Once a
-- try granted the lock, the key's next place is told its turn by name (the hand-off payload,
-- which wakes that waiter only), so that it blocks in the server before the lock comes free.
-- A second statement of the same function, not a subquery of the first, so that it reads the
-- place the try wrote.
CREATE FUNCTION fencelock_advisory_queue(
    p_lock_id  bigint,
    p_key      text,
    p_waiter   bytea,
    p_ttl_us   float8,
    p_idle_ms  text,
    p_place_us float8
) RETURNS TABLE (got boolean, token bigint, live bigint, exhausted boolean, bound text,
                 held_us bigint, head boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r    record;
    next bytea;
BEGIN
    SELECT * INTO r
      FROM fencelock_advisory_acquire_queued(p_lock_id, p_key, p_waiter, p_ttl_us, p_idle_ms,
                                             p_place_us) q;
    IF r.got AND r.token IS NOT NULL THEN
        next := fencelock_advisory_head(p_key);
        IF next IS NOT NULL THEN
            PERFORM pg_notify('fencelock_' || current_schema(), fencelock_handed_payload(next));
        END IF;
    END IF;
    RETURN QUERY SELECT r.got, r.token, r.live, r.exhausted, r.bound, r.held_us,
        COALESCE(NOT r.got AND r.bound = 'advisory'
                 AND fencelock_advisory_head(p_key) = p_waiter, false);
END
$$;

-- The head's wait: blocks in pg_advisory_lock(`p_lock_id`) for at most `p_block_ms`
-- (lock_timeout), while the server checks every 100 ms that the client is still there
-- (client_connection_check_interval: a waiter that went away ends its session, and with it
-- the wait), then sends the queued try, which decides as for any try and refreshes the place.
-- A waiter that does not head the queue (any more) does not block: its try is sent at once.
-- The lock taken by the wait is held once more than the try leaves it (session advisory locks
-- count), so it is unlocked once after the try: granted, the session holds it as any grant's;
-- refused (the queue moved on while it waited: its place lapsed or was given up), it is free
-- again, and the key's queue is told so. Nothing is written before the wait, so a blocked
-- statement holds no row lock and leaves every place it does not own as it was.
CREATE FUNCTION fencelock_advisory_await(
    p_lock_id  bigint,
    p_key      text,
    p_waiter   bytea,
    p_ttl_us   float8,
    p_idle_ms  text,
    p_place_us float8,
    p_block_ms text
) RETURNS TABLE (got boolean, token bigint, live bigint, exhausted boolean, bound text,
                 held_us bigint, head boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    waited  text := current_setting('lock_timeout');
    blocked boolean := false;
    r       record;
BEGIN
    IF fencelock_advisory_head(p_key) = p_waiter THEN
        PERFORM set_config('client_connection_check_interval', '100', true);
        PERFORM set_config('lock_timeout', p_block_ms, true);
        BEGIN
            PERFORM pg_advisory_lock(p_lock_id);
            blocked := true;
        EXCEPTION WHEN lock_not_available THEN
            blocked := false;
        END;
        PERFORM set_config('lock_timeout', waited, true);
    END IF;
    SELECT * INTO r
      FROM fencelock_advisory_queue(p_lock_id, p_key, p_waiter, p_ttl_us, p_idle_ms,
                                    p_place_us) q;
    IF blocked THEN
        PERFORM pg_advisory_unlock(p_lock_id);
        IF NOT r.got THEN
            PERFORM fencelock_advisory_wake(p_key);
        END IF;
    END IF;
    RETURN QUERY SELECT r.got, r.token, r.live, r.exhausted, r.bound, r.held_us, r.head;
END
$$;
