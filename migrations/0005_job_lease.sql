-- 0005_job_lease: the lease a job's current attempt runs under.
--
-- kforge-api records it when it accepts a worker's /start, after checking
-- it against the lease the Redis queue granted (job, attempt, lease token,
-- worker).  Later reports of that attempt are checked against Redis; when
-- Redis cannot tell (unreachable, or the job has left it), against this
-- record instead, so a result is never accepted blindly.  Only the SHA-256
-- of the lease token is kept: the columns are readable with plain SQL.
ALTER TABLE jobs ADD COLUMN lease_token_hash bytea;
