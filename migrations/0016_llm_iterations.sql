-- 0016_llm_iterations: the LLM planner's part of a run (issue 20,
-- docs/llm.md "Jobs"), stored with the iterations it belongs to.
--
-- llm: NULL for the built-in planners' iterations.  For the LLM planner's:
--   {"mode": "repair" | "restructure" | "write", "accepted": bool,
--    "hack"?: {"rule", "line"?, "message"}, "error"?: the client's failure
--    word, "usage"?: {"prompt_tokens", "completion_tokens"} (the run's
--    totals at that iteration, or one turn's), "turn"?: one model turn,
--    the prompts it added and the raw reply (the API key overwritten),
--    as kforge tune writes transcript.jsonl}.
-- The API checks the shape and the bounds of every member at its edge
-- (api_internal.c); GET /v1/jobs/{id}/transcript reads the turns back, in
-- order, as a file `kforge tune --llm-replay` takes.
ALTER TABLE iterations ADD COLUMN llm jsonb;

-- The transcript of an attempt: its turn rows in seq order.
CREATE INDEX iterations_llm_turn_idx ON iterations (job_id, attempt, seq) WHERE llm ? 'turn';
