/*
 * kf_queue_lua — Lua sources of the queue transitions (see kf_queue_lua.h
 * and docs/protocol.md for the key layout).
 *
 * Numbers are formatted with '%.0f' before they reach Redis: Lua 5.1's
 * tostring() keeps only 14 significant digits, which would round the
 * 15-digit waiting scores and millisecond timestamps.
 */
#include "kf_queue_lua.h"

#include <stddef.h>

/* Shared helpers, prepended to every script. */
#define PRELUDE                                                                        \
    "local function now_ms()\n"                                                        \
    "  local t = redis.call('TIME')\n"                                                 \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"            \
    "end\n"                                                                            \
    "local function n2s(x) return string.format('%.0f', x) end\n"                      \
    "local function wait_score(prio, ms) return (10 - prio) * 1e13 + ms end\n"        \
    "local function pair(backend, target)\n"                                          \
    "  if not backend or backend == '' then backend = 'sim' end\n"                    \
    "  return backend .. ':' .. target\n"                                             \
    "end\n"                                                                            \
    "local function wait_key(backend, target) return 'kf:wait:' .. pair(backend, target) end\n" \
    "local function signal(backend, target)\n"                                        \
    "  local k = 'kf:signal:' .. pair(backend, target)\n"                             \
    "  if redis.call('RPUSH', k, '1') > 64 then redis.call('LTRIM', k, -64, -1) end\n" \
    "end\n"                                                                           \
    "local function fail_job(id, err, retryable, base, cap, rnd, now)\n"               \
    "  local jk = 'kf:job:' .. id\n"                                                   \
    "  local h = redis.call('HMGET', jk, 'attempt', 'max_attempts', 'released', 'cancel')\n" \
    "  redis.call('ZREM', 'kf:active', id)\n"                                          \
    "  local attempt = tonumber(h[1]) or 0\n"                                          \
    "  if h[4] == '1' then\n"                                                          \
    "    redis.call('DEL', jk)\n"                                                      \
    "    return {'CANCELLED', now, attempt}\n"                                         \
    "  end\n"                                                                          \
    "  local used = attempt - (tonumber(h[3]) or 0)\n"                                 \
    "  if retryable and used < (tonumber(h[2]) or 1) then\n"                           \
    "    local d = base * (2 ^ (math.max(used, 1) - 1))\n"                             \
    "    if d > cap then d = cap end\n"                                                \
    "    d = math.floor(d / 2 + rnd * d / 2)\n"                                        \
    "    local due = now + d\n"                                                        \
    "    redis.call('HSET', jk, 'state', 'retrying', 'lease_token', '', 'worker', '',\n" \
    "               'last_error', err, 'due_ms', n2s(due))\n"                          \
    "    redis.call('ZADD', 'kf:delayed', n2s(due), id)\n"                             \
    "    return {'RETRYING', due, attempt}\n"                                          \
    "  end\n"                                                                          \
    "  redis.call('HSET', jk, 'state', 'dead', 'lease_token', '', 'worker', '',\n"     \
    "             'last_error', err, 'died_ms', n2s(now))\n"                           \
    "  redis.call('ZADD', 'kf:dead', n2s(now), id)\n"                                  \
    "  if redis.call('RPUSH', 'kf:deaths', id) > 100000 then redis.call('LPOP', 'kf:deaths') end\n" \
    "  return {'DEAD', now, attempt}\n"                                                \
    "end\n"

/* One or more jobs, in order: KEYS[2i-1] job hash, KEYS[2i] waiting set;
 * the hash gets only the fields a waiting job has (the others are written
 * when they first matter; every reader takes an absent one as its
 * default: released 0, cancel 0, lease_token/worker/last_error empty);
 * ARGV[8i-7..8i]: id kind target backend priority attempt max_attempts
 * payload.  Replies {'OK', c1, ..., cn}: ci is 1 when job i was created, 0
 * when it was already in Redis, or earlier in the same call (left as it
 * was).  One TIME for the batch, so job i's waiting score gets (i-1)/64 of
 * a millisecond on top to keep the batch's order (exact in a double:
 * scores stay below 2^47, where the step is 1/64, and a call holds at most
 * 64 jobs).  The score is written as the whole milliseconds and the
 * sixty-fourths' exact decimal fraction (".015625"...), which Redis reads
 * back as that same double, so no 17-digit formatting per job.  Each
 * target's wake-up list gets one signal per new job (at most 64).
 *
 * The calls are per batch where they can be: one EXISTS over every job
 * key (one per job only when some already exist), one ZADD per waiting
 * set; only the HSET is per job.  (Redis's CPU per job did not measurably
 * change with this; most of it is the hash's creation and the AOF.  It
 * is fewer commands for the AOF and the replicas.) */
static const char lua_enqueue[] = PRELUDE
    "local now = now_ms()\n"
    "local now_s, bases, n = n2s(now), {}, #KEYS / 2\n"
    "local out, adds, seen, jks = {'OK'}, {}, {}, {}\n"
    "for i = 1, n do jks[i] = KEYS[2 * i - 1] end\n"
    "local some = redis.call('EXISTS', unpack(jks)) > 0\n"
    "for i = 1, n do\n"
    "  local jk, wk, a = KEYS[2 * i - 1], KEYS[2 * i], 8 * (i - 1)\n"
    "  if seen[jk] or (some and redis.call('EXISTS', jk) == 1) then\n"
    "    out[i + 1] = 0\n"
    "  else\n"
    "    seen[jk] = true\n"
    "    local target, prio = ARGV[a + 3], ARGV[a + 5]\n"
    "    local score = bases[prio]\n"
    "    if not score then\n"
    "      score = n2s(wait_score(tonumber(prio), now))\n"
    "      bases[prio] = score\n"
    "    end\n"
    "    if i > 1 then score = score .. string.sub(string.format('%.6f', (i - 1) / 64), 2) end\n"
    "    redis.call('HSET', jk, 'kind', ARGV[a + 2], 'target', target, 'backend', ARGV[a + 4],\n"
    "      'priority', prio, 'attempt', ARGV[a + 6], 'max_attempts', ARGV[a + 7],\n"
    "      'state', 'queued', 'payload', ARGV[a + 8], 'enqueued_ms', now_s)\n"
    "    local z = adds[wk]\n"
    "    if not z then\n"
    "      z = {target = target, backend = ARGV[a + 4]}\n"   /* unpack(z) reads only its array part */
    "      adds[wk] = z\n"
    "    end\n"
    "    z[#z + 1] = score\n"
    "    z[#z + 1] = ARGV[a + 1]\n"
    "    out[i + 1] = 1\n"
    "  end\n"
    "end\n"
    "for wk, z in pairs(adds) do\n"
    "  redis.call('ZADD', wk, unpack(z))\n"
    "  local target, ones = z.target, {}\n"
    "  redis.call('SADD', 'kf:targets', target)\n"
    "  redis.call('SADD', 'kf:queues', pair(z.backend, target))\n"
    "  for j = 1, math.min(#z / 2, 64) do ones[j] = '1' end\n"
    "  local k = 'kf:signal:' .. pair(z.backend, target)\n"
    "  if redis.call('RPUSH', k, unpack(ones)) > 64 then redis.call('LTRIM', k, -64, -1) end\n"
    "end\n"
    "return out\n";

/* KEYS[1] kf:active, KEYS[2..] waiting sets.  ARGV: worker lease_ms token.
 * granted_token / granted_worker keep this lease after it ends (fail,
 * reap and release clear lease_token and worker): the API checks a late
 * report of the latest attempt against them (kf_queue_grant). */
static const char lua_lease[] = PRELUDE
    "local now = now_ms()\n"
    "for _ = 1, 1000 do\n"
    "  local best, bestkey, bestscore = nil, nil, nil\n"
    "  for i = 2, #KEYS do\n"
    "    local r = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')\n"
    "    if r[1] and (bestscore == nil or tonumber(r[2]) < bestscore) then\n"
    "      best, bestkey, bestscore = r[1], KEYS[i], tonumber(r[2])\n"
    "    end\n"
    "  end\n"
    "  if not best then return {'EMPTY'} end\n"
    "  redis.call('ZREM', bestkey, best)\n"
    "  local jk = 'kf:job:' .. best\n"
    "  if redis.call('HGET', jk, 'state') == 'queued' then\n"
    "    local attempt = redis.call('HINCRBY', jk, 'attempt', 1)\n"
    "    local exp = now + tonumber(ARGV[2])\n"
    "    redis.call('HSET', jk, 'state', 'running', 'lease_token', ARGV[3], 'worker', ARGV[1],\n"
    "               'lease_expires_ms', n2s(exp), 'granted_token', ARGV[3], 'granted_worker', ARGV[1])\n"
    "    redis.call('ZADD', KEYS[1], n2s(exp), best)\n"
    "    local h = redis.call('HMGET', jk, 'target', 'kind', 'backend', 'payload', 'max_attempts', 'released')\n"
    "    return {'OK', best, h[1], h[2], h[3], h[4], ARGV[3], attempt,\n"
    "            (tonumber(h[5]) or 1) + (tonumber(h[6]) or 0), exp}\n"
    "  end\n"
    "end\n"
    "return {'EMPTY'}\n";

/* KEYS[1] job hash, KEYS[2] kf:active.  ARGV: id token lease_ms */
static const char lua_renew[] = PRELUDE
    "local h = redis.call('HMGET', KEYS[1], 'state', 'lease_token', 'cancel')\n"
    "if h[1] ~= 'running' or h[2] ~= ARGV[2] then return {'STALE'} end\n"
    "local exp = now_ms() + tonumber(ARGV[3])\n"
    "redis.call('HSET', KEYS[1], 'lease_expires_ms', n2s(exp))\n"
    "redis.call('ZADD', KEYS[2], n2s(exp), ARGV[1])\n"
    "return {'OK', exp, tonumber(h[3]) or 0}\n";

/* KEYS[1] job hash, KEYS[2] kf:active.  ARGV: id token */
static const char lua_ack[] = PRELUDE
    "local h = redis.call('HMGET', KEYS[1], 'state', 'lease_token')\n"
    "if h[1] ~= 'running' or h[2] ~= ARGV[2] then return {'STALE'} end\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "redis.call('DEL', KEYS[1])\n"
    "return {'OK'}\n";

/* KEYS[1] job hash.  ARGV: id token error retryable(0/1) base_ms cap_ms rnd */
static const char lua_fail[] = PRELUDE
    "local h = redis.call('HMGET', KEYS[1], 'state', 'lease_token')\n"
    "if h[1] ~= 'running' or h[2] ~= ARGV[2] then return {'STALE'} end\n"
    "return fail_job(ARGV[1], ARGV[3], ARGV[4] == '1', tonumber(ARGV[5]), tonumber(ARGV[6]),\n"
    "                tonumber(ARGV[7]), now_ms())\n";

/* KEYS[1] job hash.  ARGV: id token */
static const char lua_release[] = PRELUDE
    "local h = redis.call('HMGET', KEYS[1], 'state', 'lease_token', 'target', 'priority', 'cancel', 'backend')\n"
    "if h[1] ~= 'running' or h[2] ~= ARGV[2] then return {'STALE'} end\n"
    "redis.call('ZREM', 'kf:active', ARGV[1])\n"
    "if h[5] == '1' then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return {'CANCELLED'}\n"
    "end\n"
    "redis.call('HINCRBY', KEYS[1], 'released', 1)\n"
    "redis.call('HSET', KEYS[1], 'state', 'queued', 'lease_token', '', 'worker', '')\n"
    "redis.call('ZADD', wait_key(h[6], h[3]), n2s(wait_score(tonumber(h[4]) or 5, 0)), ARGV[1])\n"
    "signal(h[6], h[3])\n"
    "return {'OK'}\n";

/* ARGV: limit base_ms cap_ms seed.  Reply: flat list id fate at attempt ... */
static const char lua_reap[] = PRELUDE
    "local now = now_ms()\n"
    "math.randomseed(tonumber(ARGV[4]))\n"
    "local ids = redis.call('ZRANGEBYSCORE', 'kf:active', '-inf', n2s(now), 'LIMIT', 0, tonumber(ARGV[1]))\n"
    "local out = {'OK'}\n"
    "for _, id in ipairs(ids) do\n"
    "  if redis.call('HGET', 'kf:job:' .. id, 'state') ~= 'running' then\n"
    "    redis.call('ZREM', 'kf:active', id)\n"
    "  else\n"
    "    local r = fail_job(id, 'lease expired: the worker died, hung or lost Redis', true,\n"
    "                       tonumber(ARGV[2]), tonumber(ARGV[3]), math.random(), now)\n"
    "    table.insert(out, id); table.insert(out, r[1]); table.insert(out, r[2]); table.insert(out, r[3])\n"
    "  end\n"
    "end\n"
    "return out\n";

/* ARGV: limit.  Reply: flat list id attempt ... */
static const char lua_promote[] = PRELUDE
    "local now = now_ms()\n"
    "local ids = redis.call('ZRANGEBYSCORE', 'kf:delayed', '-inf', n2s(now), 'LIMIT', 0, tonumber(ARGV[1]))\n"
    "local out = {'OK'}\n"
    "for _, id in ipairs(ids) do\n"
    "  redis.call('ZREM', 'kf:delayed', id)\n"
    "  local jk = 'kf:job:' .. id\n"
    "  local h = redis.call('HMGET', jk, 'state', 'target', 'priority', 'attempt', 'backend')\n"
    "  if h[1] == 'retrying' then\n"
    "    redis.call('HSET', jk, 'state', 'queued')\n"
    "    redis.call('ZADD', wait_key(h[5], h[2]), n2s(wait_score(tonumber(h[3]) or 5, now)), id)\n"
    "    signal(h[5], h[2])\n"
    "    table.insert(out, id); table.insert(out, tonumber(h[4]) or 0)\n"
    "  end\n"
    "end\n"
    "return out\n";

/* KEYS[1] job hash.  ARGV: id */
static const char lua_cancel[] = PRELUDE
    "local h = redis.call('HMGET', KEYS[1], 'state', 'target', 'backend')\n"
    "if h[1] == 'queued' then\n"
    "  redis.call('ZREM', wait_key(h[3], h[2]), ARGV[1])\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return {'REMOVED'}\n"
    "elseif h[1] == 'retrying' then\n"
    "  redis.call('ZREM', 'kf:delayed', ARGV[1])\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return {'REMOVED'}\n"
    "elseif h[1] == 'running' then\n"
    "  redis.call('HSET', KEYS[1], 'cancel', '1')\n"
    "  redis.call('PUBLISH', 'kf:cancel:' .. ARGV[1], 'cancel')\n"
    "  return {'SIGNALLED'}\n"
    "end\n"
    "return {'ABSENT'}\n";

/* KEYS[1] job hash.  ARGV: id */
static const char lua_forget[] = PRELUDE
    "local h = redis.call('HMGET', KEYS[1], 'target', 'backend')\n"
    "if h[1] then redis.call('ZREM', wait_key(h[2], h[1]), ARGV[1]) end\n"
    "redis.call('ZREM', 'kf:active', ARGV[1])\n"
    "redis.call('ZREM', 'kf:delayed', ARGV[1])\n"
    "redis.call('ZREM', 'kf:dead', ARGV[1])\n"
    "redis.call('DEL', KEYS[1])\n"
    "return {'OK'}\n";

/* ARGV: older_than_ms limit.  Reply: OK count */
static const char lua_trim_dead[] = PRELUDE
    "local cutoff = now_ms() - tonumber(ARGV[1])\n"
    "local ids = redis.call('ZRANGEBYSCORE', 'kf:dead', '-inf', n2s(cutoff), 'LIMIT', 0, tonumber(ARGV[2]))\n"
    "for _, id in ipairs(ids) do\n"
    "  redis.call('ZREM', 'kf:dead', id)\n"
    "  if redis.call('HGET', 'kf:job:' .. id, 'state') == 'dead' then redis.call('DEL', 'kf:job:' .. id) end\n"
    "end\n"
    "return {'OK', #ids}\n";

/* KEYS[1] kf:worker:{id}.  ARGV: id json ttl_ms, then the pairs
 * 'backend:target' the worker leases.  Each pair's kf:cap:{pair} gets the
 * worker with the same expiry as its registry entry (so "live" means what
 * it means for the registry), and kf:caps, which never expires, the pair. */
static const char lua_heartbeat[] = PRELUDE
    "local now = now_ms()\n"
    "local exp = n2s(now + tonumber(ARGV[3]))\n"
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))\n"
    "redis.call('ZADD', 'kf:workers', n2s(now), ARGV[1])\n"
    "for i = 4, #ARGV do\n"
    "  local ck = 'kf:cap:' .. ARGV[i]\n"
    "  redis.call('ZADD', ck, exp, ARGV[1])\n"
    "  redis.call('ZREMRANGEBYSCORE', ck, '-inf', '(' .. n2s(now))\n"
    "  redis.call('SADD', 'kf:caps', ARGV[i])\n"
    "end\n"
    "return {'OK'}\n";

static const char lua_workers_clean[] = PRELUDE
    "local n, now = 0, now_ms()\n"
    "for _, id in ipairs(redis.call('ZRANGE', 'kf:workers', 0, -1)) do\n"
    "  if redis.call('EXISTS', 'kf:worker:' .. id) == 0 then\n"
    "    redis.call('ZREM', 'kf:workers', id)\n"
    "    n = n + 1\n"
    "  end\n"
    "end\n"
    "for _, p in ipairs(redis.call('SMEMBERS', 'kf:caps')) do\n"
    "  redis.call('ZREMRANGEBYSCORE', 'kf:cap:' .. p, '-inf', '(' .. n2s(now))\n"
    "end\n"
    "return {'OK', n}\n";

/* KEYS[1] kf:worker:{id}.  ARGV: id.  The worker leaves the registry and
 * every capability it offered. */
static const char lua_worker_gone[] = PRELUDE
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('ZREM', 'kf:workers', ARGV[1])\n"
    "for _, p in ipairs(redis.call('SMEMBERS', 'kf:caps')) do\n"
    "  redis.call('ZREM', 'kf:cap:' .. p, ARGV[1])\n"
    "end\n"
    "return {'OK'}\n";

/* ARGV: pairs 'backend:target'.  Reply: OK, then per pair: live workers
 * (heartbeat not expired), ever offered (0/1), jobs waiting. */
static const char lua_caps[] = PRELUDE
    "local now, out = n2s(now_ms()), {'OK'}\n"
    "for i = 1, #ARGV do\n"
    "  out[#out + 1] = redis.call('ZCOUNT', 'kf:cap:' .. ARGV[i], now, '+inf')\n"
    "  out[#out + 1] = redis.call('SISMEMBER', 'kf:caps', ARGV[i])\n"
    "  out[#out + 1] = redis.call('ZCARD', 'kf:wait:' .. ARGV[i])\n"
    "end\n"
    "return out\n";

/* ARGV: limit.  The pairs with waiting jobs and no live worker, sorted.
 * Reply: OK, then per pair: pair, ever offered (0/1), jobs waiting. */
static const char lua_caps_missing[] = PRELUDE
    "local now, out, lim = n2s(now_ms()), {'OK'}, tonumber(ARGV[1])\n"
    "local ps = redis.call('SMEMBERS', 'kf:queues')\n"
    "table.sort(ps)\n"
    "for _, p in ipairs(ps) do\n"
    "  if #out > 3 * lim then break end\n"
    "  local w = redis.call('ZCARD', 'kf:wait:' .. p)\n"
    "  if w > 0 and redis.call('ZCOUNT', 'kf:cap:' .. p, now, '+inf') == 0 then\n"
    "    out[#out + 1] = p\n"
    "    out[#out + 1] = redis.call('SISMEMBER', 'kf:caps', p)\n"
    "    out[#out + 1] = w\n"
    "  end\n"
    "end\n"
    "return out\n";

/* ARGV: limit.  Every pair ever queued or offered (kf:queues and
 * kf:caps), sorted, at most `limit`.  Reply: OK, then per pair: pair, live
 * workers, ever offered (0/1), jobs waiting. */
static const char lua_pairs[] = PRELUDE
    "local now, out, lim, seen, ps = n2s(now_ms()), {'OK'}, tonumber(ARGV[1]), {}, {}\n"
    "for _, set in ipairs({'kf:queues', 'kf:caps'}) do\n"
    "  for _, p in ipairs(redis.call('SMEMBERS', set)) do\n"
    "    if not seen[p] then seen[p] = true; ps[#ps + 1] = p end\n"
    "  end\n"
    "end\n"
    "table.sort(ps)\n"
    "for _, p in ipairs(ps) do\n"
    "  if #out > 4 * lim then break end\n"
    "  out[#out + 1] = p\n"
    "  out[#out + 1] = redis.call('ZCOUNT', 'kf:cap:' .. p, now, '+inf')\n"
    "  out[#out + 1] = redis.call('SISMEMBER', 'kf:caps', p)\n"
    "  out[#out + 1] = redis.call('ZCARD', 'kf:wait:' .. p)\n"
    "end\n"
    "return out\n";

/* ARGV: limit.  Moves up to `limit` ids from the waiting sets of before
 * routing by capability, kf:wait:{target} (one per target in kf:targets),
 * to kf:wait:{backend}:{target} with the job's backend from its hash
 * ('sim' when the hash has none), keeping the score; an emptied old set's
 * wake-up list kf:signal:{target} is deleted.  Reply: OK moved. */
static const char lua_migrate_wait[] = PRELUDE
    "local lim, moved = tonumber(ARGV[1]), 0\n"
    "for _, t in ipairs(redis.call('SMEMBERS', 'kf:targets')) do\n"
    "  if not string.find(t, ':', 1, true) then\n"
    "    local old = 'kf:wait:' .. t\n"
    "    if moved < lim then\n"
    "      local r = redis.call('ZRANGE', old, 0, lim - moved - 1, 'WITHSCORES')\n"
    "      for i = 1, #r, 2 do\n"
    "        local b = redis.call('HGET', 'kf:job:' .. r[i], 'backend')\n"
    "        if not b or b == '' then\n"
    "          b = 'sim'\n"
    "          if redis.call('EXISTS', 'kf:job:' .. r[i]) == 1 then redis.call('HSET', 'kf:job:' .. r[i], 'backend', b) end\n"
    "        end\n"
    "        redis.call('ZADD', wait_key(b, t), r[i + 1], r[i])\n"
    "        redis.call('SADD', 'kf:queues', pair(b, t))\n"
    "        redis.call('ZREM', old, r[i])\n"
    "        signal(b, t)\n"
    "        moved = moved + 1\n"
    "      end\n"
    "    end\n"
    "    if redis.call('EXISTS', old) == 0 then redis.call('DEL', 'kf:signal:' .. t) end\n"
    "  end\n"
    "end\n"
    "return {'OK', moved}\n";

/* KEYS[1] kf:leader.  ARGV: token ttl_ms.  Reply: OK 1 (leader) / OK 0 */
static const char lua_leader[] = PRELUDE
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))\n"
    "  return {'OK', 1}\n"
    "end\n"
    "if not cur then\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))\n"
    "  return {'OK', 1}\n"
    "end\n"
    "return {'OK', 0}\n";

/* KEYS[1] kf:leader.  ARGV: token */
static const char lua_resign[] = PRELUDE
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end\n"
    "return {'OK'}\n";

/* KEYS[1] kf:epoch.  Reply: OK 1 (was present) / OK 0 (created now) */
static const char lua_epoch[] = PRELUDE
    "if redis.call('EXISTS', KEYS[1]) == 1 then return {'OK', 1} end\n"
    "redis.call('SET', KEYS[1], n2s(now_ms()))\n"
    "return {'OK', 0}\n";

static const char *const kf_queue_lua_sources[KF_QS__COUNT] = {
    [KF_QS_ENQUEUE] = lua_enqueue,     [KF_QS_LEASE] = lua_lease,
    [KF_QS_RENEW] = lua_renew,         [KF_QS_ACK] = lua_ack,
    [KF_QS_FAIL] = lua_fail,           [KF_QS_RELEASE] = lua_release,
    [KF_QS_REAP] = lua_reap,           [KF_QS_PROMOTE] = lua_promote,
    [KF_QS_CANCEL] = lua_cancel,       [KF_QS_FORGET] = lua_forget,
    [KF_QS_TRIM_DEAD] = lua_trim_dead, [KF_QS_HEARTBEAT] = lua_heartbeat,
    [KF_QS_WORKERS_CLEAN] = lua_workers_clean,
    [KF_QS_LEADER] = lua_leader,       [KF_QS_RESIGN] = lua_resign,
    [KF_QS_EPOCH] = lua_epoch,         [KF_QS_WORKER_GONE] = lua_worker_gone,
    [KF_QS_CAPS] = lua_caps,           [KF_QS_CAPS_MISSING] = lua_caps_missing,
    [KF_QS_MIGRATE_WAIT] = lua_migrate_wait, [KF_QS_PAIRS] = lua_pairs,
};

static const char *const kf_queue_lua_names[KF_QS__COUNT] = {
#define XX(id) [KF_QS_##id] = #id,
    KF_QUEUE_SCRIPTS(XX)
#undef XX
};

const char *kf_queue_lua_source(kf_queue_script s)
{
    return (s >= 0 && s < KF_QS__COUNT) ? kf_queue_lua_sources[s] : NULL;
}

const char *kf_queue_lua_name(kf_queue_script s)
{
    return (s >= 0 && s < KF_QS__COUNT) ? kf_queue_lua_names[s] : "?";
}
