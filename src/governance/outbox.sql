-- The effects outbox: NOTIFY (and pg_notify()) inside a world is not sent but kept here, in order, and
-- sent by the merge that lands the world in main, in the merge's transaction (listeners hear it at its
-- commit, never for a merge that failed). A merge INTO another world moves them to that world's outbox;
-- dropping a world discards them. Payloads are the app's: not readable by PUBLIC (DIFF shows them to a
-- role with read).
CREATE TABLE worlds.outbox (
    world   integer NOT NULL,
    seq     bigserial,
    channel text NOT NULL,
    payload text NOT NULL DEFAULT '',
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (world, seq)
);
