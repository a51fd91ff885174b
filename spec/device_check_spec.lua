-- device = cuda on a machine without a usable GPU is refused before anything
-- is created: a plain message (no traceback), exit 2 (bad configuration), no
-- run directory.

local support = require("spec.support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
local function abs(p) return p:sub(1, 1) == "/" and p or (os.getenv("PWD") .. "/" .. p) end

describe("moonrl train with device = cuda and no GPU", function()
  for _, set in ipairs({ "--set hardware=cuda", "--set device=cuda --set hardware=ci" }) do
    it("is refused before a run directory exists (" .. set .. ")", function()
      if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
      local dir = support.tmpdir()
      local p = assert(io.popen(string.format("cd %s && %s train --no-eval %s 2>&1; echo rc=$?", dir, abs(BIN), set)))
      local out = p:read("*a")
      p:close()
      if out:find("rc=0") then
        support.rm_rf(dir)
        return pending("this machine has a usable GPU")
      end
      assert.truthy(out:find("rc=2", 1, true), out)
      assert.truthy(out:find("moonrl train: device = cuda", 1, true), out)
      assert.truthy(out:find("accepted here: device = cpu or auto", 1, true), out)
      assert.falsy(out:find("traceback", 1, true), out)
      assert.is_nil(io.open(dir .. "/runs", "r"), "a run directory was created")
      support.rm_rf(dir)
    end)
  end
end)
