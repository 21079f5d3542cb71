-- The readers of each key's read phase (shared locks): one row per reader, named by the
-- reader's own id, carrying the phase's fence (token and owner) and when the reader's lease
-- runs out on the server's clock (UTC_TIMESTAMP). A reader is live while expires_at is after
-- now; a key's read phase lives exactly while one of its readers is live, and every live row
-- of a key carries the same phase fence (a phase starts only when none is live, and a joining
-- reader copies a live row's fence).
--
-- Readers hold no session, so nothing else keeps them: the key's next phase deletes the rows
-- its previous phases left, a reader's release deletes its own row, and a full table is purged
-- of expired rows. MEMORY, like the leases table: held locks do not survive a restart, and
-- extend and release cost no log flush; every statement on it is atomic (it locks the table).
CREATE TABLE IF NOT EXISTS {prefix}readers (
    lock_key VARBINARY(512) NOT NULL,
    reader BINARY(16) NOT NULL,
    phase_token BIGINT NOT NULL,
    phase_owner BINARY(16) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    -- BTREE, not the MEMORY default HASH: a hash index serves only lookups of the whole key,
    -- and every phase query looks up a key's readers by lock_key alone.
    PRIMARY KEY USING BTREE (lock_key, reader)
) ENGINE = MEMORY
