-- 0007_job_provenance: what produced a job's result, so a comparison of two
-- runs can say what changed between them.
--
-- Written by the worker's result report (docs/protocol.md): for the
-- simulator {"worker", "backend", "sim_build", "target_hash",
-- "template_hash"}, and for hardware runs also the compiler and runtime
-- versions.  '{}' for jobs that ended before the field existed or never
-- produced a result.
ALTER TABLE jobs ADD COLUMN provenance jsonb NOT NULL DEFAULT '{}';
