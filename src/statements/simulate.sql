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
    kept boolean NOT NULL,
    PRIMARY KEY (run, idx)
);
REVOKE ALL ON worlds.sim_result FROM PUBLIC;
-- (the kept ones of a run, ranked as each world finishes: O(k), not O(worlds run so far))
CREATE INDEX sim_result_kept ON worlds.sim_result (run) WHERE kept;
