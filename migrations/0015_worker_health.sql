-- 0015_worker_health: which of a worker's backends failed its health check.
--
-- Workers send {"unhealthy_backends": {backend: why}} in every heartbeat
-- (docs/protocol.md): '{}' when every backend is healthy, else e.g.
-- {"neuron": "kforge-neuron-runner health: exit 75: ... NRT_TIMEOUT ..."}.
-- While a backend is listed the worker neither leases nor advertises its
-- pairs; its other backends go on.  /readyz names the live workers and
-- backends listed here.
ALTER TABLE workers ADD COLUMN unhealthy jsonb NOT NULL DEFAULT '{}'::jsonb;
