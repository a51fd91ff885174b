-- The project's own documents are complete without files outside the
-- repository: the environment is described in docs/environment.md (rules,
-- modes, network, PPO, evaluation, the published table), and nothing a user
-- reads (README, docs, the Lua library, configs, examples) points at ENV_SPEC.md, which is not in the repository.

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
end)
