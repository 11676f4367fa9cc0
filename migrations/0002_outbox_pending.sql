-- 0002_outbox_pending: an outbox row now exists only while its action is
-- pending.  Whoever delivers it to Redis (the API's fast path after the
-- commit, or the scheduler's relay) deletes it, instead of setting sent_at
-- and leaving the row behind for ever.  Per new job this saves the
-- update's new row version and its index entries, the partial index's
-- entry, and keeps the table as small as what is waiting; the relay reads
-- pending rows in id order through the primary key.
DELETE FROM outbox WHERE sent_at IS NOT NULL;
DROP INDEX outbox_unsent_idx;
ALTER TABLE outbox DROP COLUMN sent_at;
