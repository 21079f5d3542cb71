-- fencelock schema, version 5: one lock mechanism per schema, and transactions that exclude
-- lease holders. Applied like the earlier versions, with search_path set to fencelock's
-- schema.
--
-- The lease backend (rows of fencelock_leases) and the advisory backend (session advisory
-- locks) keep their holders in two places that do not see each other: two holders of one
-- key, one of each kind, would both hold it. So a schema serves one of them, recorded here by
-- the first grant of either; the other refuses to grant there (InvalidConfig naming the
-- schema and the mechanism). To switch, delete the row while no lock is held.
CREATE TABLE fencelock_mechanism (
    one       boolean     PRIMARY KEY DEFAULT true CHECK (one),
    mechanism text        NOT NULL CHECK (mechanism IN ('lease', 'advisory')),
    bound_at  timestamptz NOT NULL DEFAULT now()
);

-- A transaction of the transaction API in a schema not bound to advisory locks claims its
-- key's lease row (expires_at = 'infinity') after its advisory lock, so lease grants and the
-- transaction exclude each other: a grant finds the row live, or waits for its row lock
-- (bounded by the grant's lock_timeout). At commit this deferred trigger deletes the claim
-- (the delete trigger wakes waiters); a rollback undoes the claim with the rest. No grant
-- ever writes 'infinity' (its expiry is the ttl from now, at most a year).
CREATE FUNCTION fencelock_end_transaction_claim() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM fencelock_leases
     WHERE key = NEW.key AND owner = NEW.owner AND token = NEW.token
       AND expires_at = 'infinity';
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER fencelock_transaction_claim_ends
    AFTER INSERT OR UPDATE ON fencelock_leases
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.expires_at = 'infinity')
    EXECUTE FUNCTION fencelock_end_transaction_claim();
