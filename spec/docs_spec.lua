-- The project's own documents are complete without files outside the
-- repository: the environment is described in docs/environment.md (rules,
-- modes, network, PPO, evaluation, the published table), and nothing a user
-- reads (README, docs, the Lua library, configs, examples) points at ENV_SPEC.md, which is not in the repository.
-- The README starts at the start (what moonrl is, then `make run` and `make
-- test` on the first screen), stays short and sends the reader to docs/ by
-- topic: every docs/*.md is linked from it, every relative link in README,
-- BENCHMARKS.md and docs/ names a file that exists, and its first experiment
-- runs (with a smaller budget) on the built binary.

local support = require("spec.support")

local function files_under(dir, suffix, out)
  local p = assert(io.popen("find " .. dir .. " -type f -name '*" .. suffix .. "' 2>/dev/null"))
  for f in p:lines() do out[#out + 1] = f end
  p:close()
  return out
end

describe("the documents", function()
  it("describe the environment in docs/environment.md", function()
    local text = assert(support.read_file("docs/environment.md"))
    for _, want in ipairs({ "## World", "## Actions and a step", "## Observation", "## Modes and rewards",
                            "## The reference network", "## PPO settings", "## Evaluation",
                            "| ground_truth | +144.6 | 99.9% | 16,364 | 0.00 | 154.7 | 0.1 |",
                            "| proxy | -58.7 | 23.8% | 29.0 | 34.43 | 79.2 | 64.0 |" }) do
      assert.truthy(text:find(want, 1, true), want)
    end
  end)

  it("never send the reader to ENV_SPEC.md", function()
    local files = files_under("lua", ".lua", files_under("docs", ".md", { "README.md" }))
    for _, f in ipairs(files_under("configs", ".lua", {})) do files[#files + 1] = f end
    for _, f in ipairs(files_under("examples", "", {})) do files[#files + 1] = f end
    assert.is_true(#files > 20)
    for _, f in ipairs(files) do
      local text = support.read_file(f) or ""
      assert.falsy(text:find("ENV_SPEC", 1, true), f .. " mentions ENV_SPEC")
    end
  end)

  it("start the README at the start: make run and make test on the first screen, under 250 lines", function()
    local text = assert(support.read_file("README.md"))
    local n, first_screen = 0, {}
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      if n <= 24 then first_screen[#first_screen + 1] = line end
    end
    assert.is_true(n <= 250, "README.md has " .. n .. " lines")
    local top = table.concat(first_screen, "\n")
    assert.truthy(top:find("\nmake run ", 1, true), top)
    assert.truthy(top:find("\nmake test ", 1, true), top)
  end)

  it("link every docs/*.md from the README, and every relative link names a file that exists", function()
    local readme = assert(support.read_file("README.md"))
    for _, f in ipairs(files_under("docs", ".md", {})) do
      assert.truthy(readme:find("(" .. f .. ")", 1, true), f .. " is not linked from README.md")
    end
    local files = files_under("docs", ".md", { "README.md", "BENCHMARKS.md" })
    for _, f in ipairs(files) do
      local dir = f:match("^(.*)/") or "."
      local text = assert(support.read_file(f))
      for target in text:gmatch("%]%(([^)%s]+)%)") do
        local path = target:gsub("#.*$", "")
        if path ~= "" and not path:find("^%a+:") then
          local fh = io.open(dir .. "/" .. path, "rb")
          assert.truthy(fh, f .. " links " .. target .. ", which does not exist")
          if fh then fh:close() end
        end
      end
    end
  end)

  it("run the README's first experiment (its budget cut to one update)", function()
    local bin = support.BIN
    if not support.have_bin then return pending("no binary at " .. bin .. " (build it: make build)") end
    local text = assert(support.read_file("README.md"))
    local block = assert(text:match("## A first experiment\n\n```lua\n(.-)```"), "no Lua block under A first experiment")
    local small = block:gsub("total_steps = 262144", "total_steps = 1"):gsub("num_envs = 256, steps = 1024",
      "num_envs = 4, steps = 16")
    assert.are_not.equal(block, small, "the budget in the README's example changed: update this spec")
    local dir = support.tmpdir()
    finally(function() support.rm_rf(dir) end)
    support.write_file(dir .. "/my_run.lua", small)
    local rc, out, err = support.moonrl("run my_run.lua", dir, { timeout = 300 })
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("efficiency", 1, true), out)
    assert.truthy(io.open(dir .. "/runs", "r"), "no runs/ written")
  end)
end)
