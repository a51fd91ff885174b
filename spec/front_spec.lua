-- moonrl.sweep.front: the best result within each budget (the Pareto front of
-- cost against the metric), against fronts worked out by hand for a few
-- synthetic trials (ties, mode min and max, null values, a failed trial, a
-- trial without time_total, smoothing, a metric with no curve); the budget
-- rows and their table; DIR/plots/front.svg read back as XML; and
-- `moonrl sweep status` on a sweep directory written by hand.

local front = require("moonrl.sweep.front")
local plot = require("moonrl.sweep.plot")
local results = require("moonrl.sweep.results")
local json = require("moonrl.formats.json")
local support = require("support")

-- metrics.jsonl lines: { {update, agent_steps, time_total, efficiency}, ... } (false: null)
local function records(rows)
  local out = {}
  for i, r in ipairs(rows) do
    local rec = { update = r[1], agent_steps = r[2], time_total = r[3], efficiency = r[4], wall_time = 1e9 + i }
    if r[3] == false then rec.time_total = json.null end
    if r[4] == false then rec.efficiency = json.null end
    out[i] = rec
  end
  return out
end

-- The trials of the hand-worked example (metric efficiency):
--   trial 1, done:    steps 100 200 300 400, 1 s each   (seconds 1 2 3 4),       values 0.1 0.3 0.2 0.5
--   trial 2, stopped: steps 150 300, 0.5 s each         (seconds 0.5 1.0),       values 0.3 0.05
--   trial 3, running: steps 100 200 300, 1.5 s each     (seconds 1.5 3 4.5),     values 0.1 null 0.45
--   trial 4, failed:  steps 50 100                                              values 0.9 0.95 (no result)
--   trial 5, done:    steps 500 2000, no time_total     (no seconds),            values 0.2 0.7
local RECORDS = {
  [1] = { { 1, 100, 1, 0.1 }, { 2, 200, 1, 0.3 }, { 3, 300, 1, 0.2 }, { 4, 400, 1, 0.5 } },
  [2] = { { 1, 150, 0.5, 0.3 }, { 2, 300, 0.5, 0.05 } },
  [3] = { { 1, 100, 1.5, 0.1 }, { 2, 200, 1.5, false }, { 3, 300, 1.5, 0.45 } },
  [4] = { { 1, 50, 0.1, 0.9 }, { 2, 100, 0.1, 0.95 } },
  [5] = { { 1, 500, false, 0.2 }, { 2, 2000, false, 0.7 } },
}
local STATUS = { "done", "stopped", "running", "failed", "done" }
local LR = { 0.003, 0.001, 0.01, 0.03, 0.002 }

local function trials(extra)
  local list = {}
  for i, recs in ipairs(RECORDS) do
    local curve = {}
    for _, rec in ipairs(records(recs)) do results.curve_add(curve, rec, "efficiency") end
    list[i] = { trial = i, label = string.format("trial-%03d", i), status = STATUS[i], curve = curve,
      params = { lr = LR[i] } }
  end
  for _, t in ipairs(extra or {}) do list[#list + 1] = t end
  return list
end

-- a front as { {trial, update, cost, value}, ... } for assert.same
local function brief(f, cost)
  local out = {}
  for i, p in ipairs(f) do out[i] = { p.trial, p.update, p[cost], p.value } end
  return out
end

local function near(want, got, what)
  assert.equal(#want, #got, what .. ": " .. #got .. " points")
  for i = 1, #want do
    for j = 1, 4 do
      local a, b = want[i][j], got[i][j]
      if type(a) == "number" and a ~= math.floor(a) then
        assert.is_true(math.abs(a - b) < 1e-12, string.format("%s: point %d field %d: %s, expected %s", what, i, j, tostring(b), tostring(a)))
      else
        assert.equal(a, b, string.format("%s: point %d field %d", what, i, j))
      end
    end
  end
end

local function reversed(t)
  local out = {}
  for i = #t, 1, -1 do out[#out + 1] = t[i] end
  return out
end

-- the budget tables of trials() at smooth = 1, worked out by hand
local BUDGET_TABLES = table.concat({
  "best efficiency (max) within a budget of agent-steps (the front: every update of every trial; failed trials left out):",
  "| <= steps | efficiency | trial     | update | steps | train s |    lr |",
  "|---------:|-----------:|-----------|-------:|------:|--------:|------:|",
  "|      100 |        0.1 | trial-001 |      1 |   100 |       1 | 0.003 |",
  "|      200 |        0.3 | trial-002 |      1 |   150 |     0.5 | 0.001 |",
  "|      500 |        0.5 | trial-001 |      4 |   400 |       4 | 0.003 |",
  "|    2,000 |        0.7 | trial-005 |      2 | 2,000 |       - | 0.002 |",
  "best efficiency (max) within a budget of training seconds (the front: every update of every trial; failed trials left out):",
  "| <= seconds | efficiency | trial     | update | steps | train s |    lr |",
  "|-----------:|-----------:|-----------|-------:|------:|--------:|------:|",
  "|        0.5 |        0.3 | trial-002 |      1 |   150 |     0.5 | 0.001 |",
  "|          4 |        0.5 | trial-001 |      4 |   400 |       4 | 0.003 |",
}, "\n")

describe("moonrl.sweep.front", function()
  it("sums time_total into each curve entry's seconds; a line without it leaves no seconds from there on", function()
    local list = trials()
    local c1, c3, c5 = list[1].curve, list[3].curve, list[5].curve
    assert.same({ 1, 2, 3, 4 }, { c1[1].seconds, c1[2].seconds, c1[3].seconds, c1[4].seconds })
    assert.same({ 1.5, 3, 4.5 }, { c3[1].seconds, c3[2].seconds, c3[3].seconds })
    assert.is_nil(c3[2].value)   -- the null
    assert.is_nil(c5[1].seconds)
    assert.is_nil(c5[2].seconds)
    -- a resumed run cuts its file back and continues it: update 3 again, its time once
    local curve = {}
    for _, rec in ipairs(records(RECORDS[1])) do results.curve_add(curve, rec, "efficiency") end
    for _, rec in ipairs(records({ { 3, 300, 2, 0.2 }, { 4, 400, 2, 0.6 } })) do results.curve_add(curve, rec, "efficiency") end
    assert.equal(4, #curve)
    assert.equal(6, curve[4].seconds)   -- 1 + 1 + 2 + 2
  end)

  it("is the front worked out by hand: every update a point, ties to the cheaper, then the lower trial; failed trials out", function()
    local pts = front.points(trials(), { smooth = 1 })
    -- trial 1: 4 points, trial 2: 2, trial 3: 2 (not the null), trial 4 (failed): none, trial 5: 2
    assert.equal(10, #pts)
    for _, p in ipairs(pts) do assert.is_true(p.trial ~= 4, "a failed trial's point") end
    -- max, agent-steps: at 100 trials 1 and 3 tie at 0.1 (trial 1 stays); trial 1's 0.3 at 200 ties
    -- trial 2's 0.3 at 150, at more cost (out); at 300 trial 3's 0.45 beats 0.3 and 0.2
    local want = { { 1, 1, 100, 0.1 }, { 2, 1, 150, 0.3 }, { 3, 3, 300, 0.45 }, { 1, 4, 400, 0.5 }, { 5, 2, 2000, 0.7 } }
    near(want, brief(front.pareto(pts, "max", "steps"), "steps"), "max steps")
    near(want, brief(front.pareto(reversed(pts), "max", "steps"), "steps"), "max steps, points reversed")
    -- min, agent-steps: 0.1 at 100, then trial 2's 0.05 at 300 (0.45 and 0.2 at the same cost are worse)
    want = { { 1, 1, 100, 0.1 }, { 2, 2, 300, 0.05 } }
    near(want, brief(front.pareto(pts, "min", "steps"), "steps"), "min steps")
    near(want, brief(front.pareto(reversed(pts), "min", "steps"), "steps"), "min steps, points reversed")
    -- max, seconds: trial 2's 0.3 at 0.5 s; trial 1's 0.3 at 2 s ties it at more cost; 0.5 at 4 s;
    -- trial 3's 0.45 at 4.5 s is worse; trial 5 has no seconds
    want = { { 2, 1, 0.5, 0.3 }, { 1, 4, 4, 0.5 } }
    near(want, brief(front.pareto(pts, "max", "seconds"), "seconds"), "max seconds")
    -- min, seconds: at 1 s trial 2's 0.05 beats trial 1's 0.1
    want = { { 2, 1, 0.5, 0.3 }, { 2, 2, 1, 0.05 } }
    near(want, brief(front.pareto(pts, "min", "seconds"), "seconds"), "min seconds")
    near(want, brief(front.pareto(reversed(pts), "min", "seconds"), "seconds"), "min seconds, points reversed")
    -- the best within a budget: the last front point at or under it
    local f = front.pareto(pts, "max", "steps")
    assert.is_nil(front.best_within(f, "steps", 99))
    assert.equal(2, front.best_within(f, "steps", 299).trial)
    assert.equal(3, front.best_within(f, "steps", 300).trial)
    assert.equal(5, front.best_within(f, "steps", 1e9).trial)
  end)

  it("smooths as the sweep does: a point needs `smooth` values, but a finished trial with fewer counts at its end", function()
    local list = trials({
      { trial = 6, label = "trial-006", status = "done", curve = {}, params = {} },
      { trial = 7, label = "trial-007", status = "running", curve = {}, params = {} },
    })
    for _, rec in ipairs(records({ { 1, 250, 1, 0.3 } })) do results.curve_add(list[6].curve, rec, "efficiency") end
    for _, rec in ipairs(records({ { 1, 120, 1, 0.99 } })) do results.curve_add(list[7].curve, rec, "efficiency") end
    local pts = front.points(list, { smooth = 2 })
    -- trial 1: updates 2-4 (0.2, 0.25, 0.35); trial 2: update 2 (0.175); trial 3: update 3 (mean of 0.1
    -- and 0.45, the null skipped: 0.275); trial 5: update 2 (0.45); trial 6 (done, one value): 0.3 at
    -- its end; trial 7 (running, one value): none
    assert.equal(7, #pts)
    local want = { { 1, 2, 200, 0.2 }, { 6, 1, 250, 0.3 }, { 1, 4, 400, 0.35 }, { 5, 2, 2000, 0.45 } }
    near(want, brief(front.pareto(pts, "max", "steps"), "steps"), "smooth 2, max steps")
    -- the value at a point is the sweep's (results.curve_value)
    local p3
    for _, p in ipairs(pts) do if p.trial == 3 then p3 = p end end
    assert.equal(results.curve_value(list[3].curve, 2, 3), p3.value)
    near({ { 1, 2, 200, 0.2 }, { 2, 2, 300, 0.175 } }, brief(front.pareto(pts, "min", "steps"), "steps"), "smooth 2, min steps")
  end)

  it("takes a metric with no curve (eval.<key>) from the finished trials' results, NaN and failed ones out", function()
    local list = {
      { trial = 1, status = "done", value = 0.8, steps = 1000, train_seconds = 10, updates = 5, curve = {} },
      { trial = 2, status = "done", value = 0.9, steps = 2000, train_seconds = 5, updates = 9, curve = {} },
      { trial = 3, status = "failed", value = 0.99, steps = 500, train_seconds = 1, curve = {} },
      { trial = 4, status = "done", value = 0 / 0, steps = 100, train_seconds = 1, curve = {} },
      { trial = 5, status = "stopped", steps = 100, train_seconds = 1, curve = {} },
      { trial = 6, status = "running", steps = 100, curve = {} },
    }
    local pts = front.points(list, { smooth = 3 })
    assert.equal(3, #pts)   -- trials 1, 2 and 4 (its NaN is left out of every front)
    near({ { 1, 5, 1000, 0.8 }, { 2, 9, 2000, 0.9 } }, brief(front.pareto(pts, "max", "steps"), "steps"), "eval max steps")
    near({ { 2, 9, 5, 0.9 } }, brief(front.pareto(pts, "max", "seconds"), "seconds"), "eval max seconds")
    near({ { 1, 5, 1000, 0.8 } }, brief(front.pareto(pts, "min", "steps"), "steps"), "eval min steps")
    near({ { 2, 9, 5, 0.9 }, { 1, 5, 10, 0.8 } }, brief(front.pareto(pts, "min", "seconds"), "seconds"), "eval min seconds")
    assert.same({}, front.pareto({}, "max", "steps"))
  end)

  it("puts the budget rows at round budgets: 1-2-5 over more than a decade, even steps within one", function()
    local pts = front.points(trials(), { smooth = 1 })
    -- steps 100 .. 2000 (20x): 100 -> 100 (trial 1), 150 -> 200 (trial 2), 300 and 400 -> 500 (trial
    -- 1's 0.5 at 400: trial 3's 0.45 at 300 has no row), 2000 -> 2000
    local rows = front.rows(front.pareto(pts, "max", "steps"), "steps")
    local got = {}
    for i, r in ipairs(rows) do got[i] = { r.budget, r.point.trial, r.point.update } end
    assert.same({ { 100, 1, 1 }, { 200, 2, 1 }, { 500, 1, 4 }, { 2000, 5, 2 } }, got)
    -- seconds 0.5 .. 4 (8x): steps of 4 / 8 = 0.5
    rows = front.rows(front.pareto(pts, "max", "seconds"), "seconds")
    got = {}
    for i, r in ipairs(rows) do got[i] = { r.budget, r.point.trial, r.point.update } end
    assert.same({ { 0.5, 2, 1 }, { 4, 1, 4 } }, got)
    -- a long front: at most 8 rows, round budgets rising, each row the best within its budget, the last the best of all
    local f = {}
    for i = 1, 40 do f[i] = { trial = 1, update = i, steps = 1000 * 1.3 ^ i, value = i } end
    rows = front.rows(f, "steps")
    assert.is_true(#rows >= 3 and #rows <= 8, #rows .. " rows")
    for i, r in ipairs(rows) do
      local m = r.budget / 10 ^ math.floor(math.log10(r.budget) + 1e-9)
      assert.is_true(math.abs(m - 1) < 1e-9 or math.abs(m - 3) < 1e-9, "budget " .. r.budget)   -- 1-2-5 gives 14 rows
      assert.equal(front.best_within(f, "steps", r.budget), r.point)
      if i > 1 then assert.is_true(r.budget > rows[i - 1].budget and r.point.value > rows[i - 1].point.value) end
    end
    assert.equal(f[40], rows[#rows].point)
    -- 1300 .. 3.6e7: 1-2-5 x 10^k gives 14 rows, 1-3 x 10^k 10, 10^k 5: the best within 10^k is
    -- point floor(log(10^k / 1000) / log(1.3))
    got = {}
    for i, r in ipairs(rows) do got[i] = { r.budget, r.point.update } end
    assert.same({ { 1e4, 8 }, { 1e5, 17 }, { 1e6, 26 }, { 1e7, 35 }, { 1e8, 40 } }, got)
    -- fewer rows asked for than any grid gives: evenly spaced, the best of all last
    rows = front.rows(f, "steps", 2)
    assert.equal(2, #rows)
    assert.equal(f[40], rows[2].point)
  end)

  it("writes both budget tables", function()
    local s = front.of_sweep(trials(), { metric = "efficiency", mode = "max", smooth = 1 })
    local want = BUDGET_TABLES
    assert.equal(want, front.text(s, { "lr" }))
    assert.matches("at the mean of its last 3 values", front.text(front.of_sweep(trials(), { smooth = 3 }), {}), 1, true)
    assert.equal("", front.text(front.of_sweep({}, {}), {}))
    local j = front.json(s)
    assert.equal("front", j.event)
    assert.equal(5, #j.steps.front)
    assert.equal(4, #j.steps.rows)
    assert.same({ budget = 500, trial = 1, label = "trial-001", update = 4, steps = 400, seconds = 4, value = 0.5,
      params = { lr = 0.003 } }, j.steps.rows[3])
  end)
end)

-- ------------------------------------------------------- a sweep directory

-- XML well-formedness, by hand: tags nest and close, attributes are name="value", text has no
-- raw '<' and only known entities, one root element.
local function check_xml(text)
  local stack, pos, roots = {}, 1, 0
  local function text_ok(s, where)
    assert.is_nil(s:find("<", 1, true), "a raw < " .. where)
    for ent in s:gmatch("&([^;]*);?") do
      assert.truthy(ent == "amp" or ent == "lt" or ent == "gt" or ent == "quot" or ent == "apos" or ent:match("^#%d+$"),
        "entity &" .. ent .. " " .. where)
    end
  end
  while true do
    local s, e, tag = text:find("<([^<>]*)>", pos)
    if not s then break end
    text_ok(text:sub(pos, s - 1), "before byte " .. s)
    if tag:sub(1, 1) == "/" then
      local name = tag:match("^/([%w:-]+)%s*$")
      assert.truthy(name, "bad closing tag <" .. tag .. ">")
      assert.equal(table.remove(stack), name, "closing tag at byte " .. s)
    else
      local closed = tag:sub(-1) == "/"
      local body = closed and tag:sub(1, -2) or tag
      local name, attrs = body:match("^([%w:-]+)(.*)$")
      assert.truthy(name, "bad tag <" .. tag .. ">")
      local rest = attrs:gsub('%s+[%w:-]+="[^"<]*"', ""):gsub("%s+$", "")
      assert.equal("", rest, "attributes of <" .. name .. ">")
      if #stack == 0 then roots = roots + 1 end
      if not closed then stack[#stack + 1] = name end
    end
    pos = e + 1
  end
  assert.is_nil(text:sub(pos):find("%S"), "text after the root element")
  assert.same({}, stack)
  assert.equal(1, roots)
end

local function jsonl(path, objs)
  local lines = {}
  for i, o in ipairs(objs) do lines[i] = json.encode(o) end
  support.write_file(path, table.concat(lines, "\n") .. "\n")
end

-- The example above as a sweep directory `sw` under root: trial 3 has a start and no result
-- (interrupted), trial 1's result was written before results had train_seconds.
local function sweep_dir(root)
  local uv = support.uv
  local dir = root .. "/sw"
  uv.fs_mkdir(dir, tonumber("755", 8))
  support.write_file(dir .. "/sweep.json", json.encode({ metric = "efficiency", mode = "max", method = "grid", trials = 5,
    smooth = 1, space = { lr = { text = "grid{ 0.003, 0.001, 0.01, 0.03, 0.002 }" } } }) .. "\n")
  local lines = {}
  for i, recs in ipairs(RECORDS) do
    local label, tdir = string.format("trial-%03d", i), "sw/" .. string.format("trial-%03d", i)
    uv.fs_mkdir(root .. "/" .. tdir, tonumber("755", 8))
    jsonl(root .. "/" .. tdir .. "/metrics.jsonl", records(recs))
    lines[#lines + 1] = { event = "start", trial = i, label = label, params = { lr = LR[i] }, seed = 100 + i, dir = tdir }
    if i ~= 3 then
      local last = recs[#recs]
      local r = { trial = i, label = label, status = STATUS[i], metric = "efficiency", value = last[4], steps = last[2],
        updates = last[1], params = { lr = LR[i] }, seed = 100 + i, dir = tdir, seconds = 9 }
      if i == 2 then r.train_seconds = 1 end
      if i == 4 then r.value, r.error = json.null, "killed by signal 9 (SIGKILL)" end
      lines[#lines + 1] = r
    end
  end
  jsonl(dir .. "/results.jsonl", lines)
  return dir
end

describe("a sweep directory's front", function()
  local root
  before_each(function() root = support.tmpdir() end)
  after_each(function() support.rm_rf(root) end)

  it("plot writes front.svg and front_seconds.svg: well-formed, the front as a step line, its points labelled", function()
    local dir = sweep_dir(root)
    local old = support.uv.cwd()
    support.uv.chdir(root)   -- the trials' directories are relative, as a sweep writes them
    local ok, files, err = pcall(plot.write, "sw")
    support.uv.chdir(old)
    assert.is_true(ok, files)
    assert.is_table(files, err)
    local want = { front = true, front_seconds = true }
    for _, f in ipairs(files) do want[f:match("([%w_]+)%.svg$")] = nil end
    assert.same({}, want)
    for _, case in ipairs({
      -- cost, front points, step-line points (the last level drawn on to the costliest point), labels, log axis
      { file = "front.svg", marks = 5, line = 9, labels = { "trial-001", "trial-002", "trial-003", "trial-001", "trial-005" }, log = true },
      { file = "front_seconds.svg", marks = 2, line = 4, labels = { "trial-002", "trial-001" }, log = false },
    }) do
      local text = support.read_file(dir .. "/plots/" .. case.file)
      check_xml(text)
      local xmllint = io.popen("command -v xmllint"):read("*l")
      if xmllint and xmllint ~= "" then
        local rc = os.execute(string.format("xmllint --noout %q", dir .. "/plots/" .. case.file))
        assert.is_true(rc == 0 or rc == true, "xmllint refuses " .. case.file)
      end
      local marks = select(2, text:gsub('<circle [^>]*r="4" fill="#000000"', ""))
      assert.equal(case.marks, marks, case.file .. ": the front's points")
      local line = text:match('<polyline points="([^"]+)" fill="none" stroke="#000000" stroke%-width="2"/>')
      assert.is_string(line, case.file .. ": the step line")
      local xy = {}
      for x, y in line:gmatch("([%d.%-]+),([%d.%-]+)") do xy[#xy + 1] = { tonumber(x), tonumber(y) } end
      assert.equal(case.line, #xy, case.file .. ": step-line points")
      for i = 2, #xy do   -- mode max: rightwards and upwards only, one direction at a time
        assert.is_true(xy[i][1] >= xy[i - 1][1] - 1e-9 and xy[i][2] <= xy[i - 1][2] + 1e-9, case.file .. ": step " .. i)
        assert.is_true(math.abs(xy[i][1] - xy[i - 1][1]) < 1e-9 or math.abs(xy[i][2] - xy[i - 1][2]) < 1e-9,
          case.file .. ": a step goes across or up, not both")
      end
      local labels = {}
      for l in text:gmatch('<text [^>]*font%-size="10"[^>]*>([^<]*)</text>') do labels[#labels + 1] = l end
      assert.same(case.labels, labels, case.file .. ": labels")
      assert.equal(case.log, text:find("(log scale)", 1, true) ~= nil, case.file .. ": log axis")
      -- every trial but the failed one drawn faint
      local faint = select(2, text:gsub('<polyline [^>]*stroke%-opacity="0.35"', ""))
      assert.equal(case.file == "front.svg" and 4 or 3, faint, case.file .. ": faint curves")
    end
  end)

  it("`moonrl sweep status` shows the budget tables, --json the costs and the front", function()
    if not support.have_bin then return pending("no binary at " .. support.BIN .. " (make build)") end
    sweep_dir(root)
    local code, out, err = support.moonrl("sweep status sw", root)
    assert.equal(0, code, err)
    assert.matches("5 trial(s): 2 done, 1 failed, 1 stopped early, 0 running, 1 interrupted, 0 pending", out, 1, true)
    local want = BUDGET_TABLES
    local at = out:find(want, 1, true)
    assert.truthy(at, "no budget tables in:\n" .. out)
    assert.truthy(at > out:find("| trial-001 |", 1, true), "the budget tables come after the trials table")
    code, out, err = support.moonrl("sweep status sw --json", root)
    assert.equal(0, code, err)
    local lines = support.lines(out)
    assert.equal(6, #lines)
    local by = {}
    for i = 1, 5 do
      local r = json.decode(lines[i])
      by[r.trial] = r
    end
    assert.equal(4, by[1].train_seconds)     -- from its curve (its result has none)
    assert.equal(1, by[2].train_seconds)     -- as recorded
    assert.equal(4.5, by[3].train_seconds)   -- interrupted: its curve so far
    assert.equal(300, by[3].steps)
    assert.equal(400, by[1].steps)
    local f = json.decode(lines[6])
    assert.equal("front", f.event)
    assert.equal(4, #f.steps.rows)
    assert.equal(3, f.steps.front[3].trial)
    assert.equal(0.45, f.steps.front[3].value)
    assert.equal(2, #f.seconds.rows)
    assert.equal(0.5, f.seconds.rows[1].budget)
  end)
end)
