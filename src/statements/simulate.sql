-- SIMULATE's results while it runs (statements/simulate.rs): one row per world, written by the workers
-- (each in the transaction that forks, runs and scores its world), read and deleted by the SIMULATE that
-- started them. `run` also keys the run's lock (2092161, run): held by that SIMULATE's transaction.
CREATE TABLE worlds.sim_result (
    run integer NOT NULL,
    idx bigint NOT NULL,
    world text NOT NULL,
    id text,
    seed bigint NOT NULL,
    score double precision,
    error text,
    rank_key double precision,          -- the score, negated for DESC: best first in ascending order; null if failed
    PRIMARY KEY (run, idx)
);
REVOKE ALL ON worlds.sim_result FROM PUBLIC;
-- A run's forked worlds, best first: as each world finishes, the one at place k + 1 is dropped, read in
-- O(k) index entries. The rows are only ever inserted while the run lasts: SIMULATE's own snapshot holds
-- the xmin horizon back for the whole run, so any updated row would leave a dead version every later
-- ranking walks again (O(worlds run so far) per world; measured quadratic before, issue 44's P13f).
CREATE INDEX sim_result_rank ON worlds.sim_result (run, rank_key, idx) WHERE id IS NOT NULL;
