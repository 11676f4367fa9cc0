-- 0006_worker_sandbox: how each worker isolates user code.
--
-- Workers say so in every heartbeat: 'strict' (the evaluation sandbox of
-- docs/security.md) or 'unconfined' (KFORGE_SANDBOX=unconfined, limits
-- only).  NULL: a worker that predates the field.  /readyz names the live
-- workers that run unconfined.
ALTER TABLE workers ADD COLUMN sandbox text CHECK (sandbox IN ('strict', 'unconfined'));
