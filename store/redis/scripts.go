package redis

import "github.com/redis/go-redis/v9"

// Every write is one Lua script, so that it is atomic for all replicas:
// Redis runs a script to its end before any other command. The scripts
// name their keys from the prefix in ARGV[1] rather than in KEYS, which
// suits one server (or a primary with replicas), not Redis Cluster.
//
// Keys, under the prefix P:
//
//	P r:<id>       hash: parent, items (JSON array), data, created (ns), visible (1/0)
//	P order        zset of visible responses by a counter of when each was stored
//	P stored       that counter
//	P created      zset of visible responses by created (µs)
//	P item:<item>  string: the visible response an output item resolves to
//	P kids:<id>    set: the held responses that name <id> as parent
//	P s:<id>       hash: status, data, created, updated (ns), bytes (its data and events')
//	P sorder       zset of streams by updated (µs)
//	P e:<id>       zset: stream <id>'s events, scored by seq, each member "<seq>:<data>"
//	P bytes        the Data held, all told
//
// A sorted set rather than a Redis Stream holds a log: stream IDs must
// rise above 0-0, and the contract's seqs are any int64; the member's seq
// prefix keeps members of equal data apart.
const prelude = `
local P = ARGV[1]

local function hide(id)
  local k = P .. 'r:' .. id
  if redis.call('HGET', k, 'visible') ~= '1' then return 0 end
  redis.call('HSET', k, 'visible', '0')
  redis.call('ZREM', P .. 'order', id)
  redis.call('ZREM', P .. 'created', id)
  local items = redis.call('HGET', k, 'items')
  if items and items ~= '' then
    for _, it in ipairs(cjson.decode(items)) do
      if redis.call('GET', P .. 'item:' .. it) == id then redis.call('DEL', P .. 'item:' .. it) end
    end
  end
  return 1
end

-- collect removes hidden response id for good when nothing names it, then
-- its parent if that leaves it hidden and unnamed, and so on up.
local function collect(id)
  local freed = 0
  while id and id ~= '' do
    local k = P .. 'r:' .. id
    if redis.call('HGET', k, 'visible') ~= '0' or redis.call('SCARD', P .. 'kids:' .. id) > 0 then break end
    local parent = redis.call('HGET', k, 'parent')
    freed = freed + redis.call('HSTRLEN', k, 'data')
    redis.call('DEL', k)
    if parent == id or parent == '' then break end
    redis.call('SREM', P .. 'kids:' .. parent, id)
    id = parent
  end
  redis.call('DECRBY', P .. 'bytes', freed)
end

local function dropStream(id)
  local k = P .. 's:' .. id
  local b = redis.call('HGET', k, 'bytes')
  if not b then return 0 end
  redis.call('DECRBY', P .. 'bytes', tonumber(b))
  redis.call('DEL', k, P .. 'e:' .. id)
  redis.call('ZREM', P .. 'sorder', id)
  return 1
end
`

// putResponse: ARGV id, parent, items, data, created ns, created µs.
var putResponse = redis.NewScript(prelude + `
local id, parent, items, data, created, score = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local k = P .. 'r:' .. id
local oldParent = nil
if redis.call('EXISTS', k) == 1 then
  hide(id)
  oldParent = redis.call('HGET', k, 'parent')
  redis.call('DECRBY', P .. 'bytes', redis.call('HSTRLEN', k, 'data'))
  if oldParent ~= '' and oldParent ~= id then redis.call('SREM', P .. 'kids:' .. oldParent, id) end
end
redis.call('HSET', k, 'parent', parent, 'items', items, 'data', data, 'created', created, 'visible', '1')
redis.call('ZADD', P .. 'order', redis.call('INCR', P .. 'stored'), id)
redis.call('ZADD', P .. 'created', score, id)
if items ~= '' then
  for _, it in ipairs(cjson.decode(items)) do redis.call('SET', P .. 'item:' .. it, id) end
end
if parent ~= '' and parent ~= id then redis.call('SADD', P .. 'kids:' .. parent, id) end
redis.call('INCRBY', P .. 'bytes', string.len(data))
if oldParent and oldParent ~= parent and oldParent ~= id then collect(oldParent) end
return 1
`)

// deleteResponse: ARGV id; 0 if it was not visible.
var deleteResponse = redis.NewScript(prelude + `
local id = ARGV[2]
if hide(id) == 0 then return 0 end
collect(id)
return 1
`)

// lineage: ARGV id, max; {id, parent, items, data, created} newest first,
// empty if id is not visible. A response met twice (a cycle that replaced
// responses closed) ends the walk.
var lineage = redis.NewScript(prelude + `
local id, max = ARGV[2], tonumber(ARGV[3])
local out = {}
if redis.call('HGET', P .. 'r:' .. id, 'visible') ~= '1' then return out end
local seen = {}
while not seen[id] do
  seen[id] = true
  local r = redis.call('HMGET', P .. 'r:' .. id, 'parent', 'items', 'data', 'created')
  if not r[4] then break end
  table.insert(out, {id, r[1], r[2], r[3], r[4]})
  if (max > 0 and #out >= max) or r[1] == '' then break end
  id = r[1]
end
return out
`)

// putStream: ARGV id, status, data, created ns, updated ns, updated µs.
var putStream = redis.NewScript(prelude + `
local id, status, data, created, updated, score = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local k = P .. 's:' .. id
local grow = string.len(data)
if redis.call('EXISTS', k) == 1 then
  grow = grow - redis.call('HSTRLEN', k, 'data')
  redis.call('HSET', k, 'status', status, 'data', data, 'updated', updated)
  redis.call('HINCRBY', k, 'bytes', grow)
else
  redis.call('HSET', k, 'status', status, 'data', data, 'created', created, 'updated', updated, 'bytes', grow)
end
redis.call('INCRBY', P .. 'bytes', grow)
redis.call('ZADD', P .. 'sorder', score, id)
return 1
`)

// appendEvents: ARGV id, then seq, data pairs; 0 if the stream does not
// exist.
var appendEvents = redis.NewScript(prelude + `
local id = ARGV[2]
local k = P .. 's:' .. id
if redis.call('EXISTS', k) == 0 then return 0 end
local ek = P .. 'e:' .. id
local last = redis.call('ZRANGE', ek, -1, -1, 'WITHSCORES')
local lastSeq = nil
if #last > 0 then lastSeq = tonumber(last[2]) end
local grow = 0
for i = 3, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if lastSeq == nil or seq > lastSeq then
    redis.call('ZADD', ek, seq, ARGV[i] .. ':' .. ARGV[i + 1])
    lastSeq = seq
    grow = grow + string.len(ARGV[i + 1])
  end
end
redis.call('HINCRBY', k, 'bytes', grow)
redis.call('INCRBY', P .. 'bytes', grow)
return 1
`)

// deleteStream: ARGV id; 0 if absent.
var deleteStream = redis.NewScript(prelude + `
return dropStream(ARGV[2])
`)

// sweep: ARGV cut µs (empty for no MaxAge), MaxResponses, MaxBytes (0: no
// bound); {responses, streams}.
var sweep = redis.NewScript(prelude + `
local cut, maxR, maxB = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local responses, streams = 0, 0
if cut ~= '' then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'created', '-inf', '(' .. cut)) do
    if hide(id) == 1 then
      responses = responses + 1
      collect(id)
    end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'sorder', '-inf', '(' .. cut)) do
    streams = streams + dropStream(id)
  end
end
if maxR > 0 then
  local over = redis.call('ZCARD', P .. 'order') - maxR
  if over > 0 then
    for _, id in ipairs(redis.call('ZRANGE', P .. 'order', 0, over - 1)) do
      hide(id)
      collect(id)
      responses = responses + 1
    end
  end
end
if maxB > 0 then
  while tonumber(redis.call('GET', P .. 'bytes') or '0') > maxB do
    local r = redis.call('ZRANGE', P .. 'order', 0, 0)
    local s = redis.call('ZRANGE', P .. 'sorder', 0, 0, 'WITHSCORES')
    if r[1] and (not s[1] or tonumber(s[2]) >= tonumber(redis.call('ZSCORE', P .. 'created', r[1]))) then
      hide(r[1])
      collect(r[1])
      responses = responses + 1
    elseif s[1] then
      streams = streams + dropStream(s[1])
    else
      break
    end
  end
end
return {responses, streams}
`)
