-- The PyTorch reference (bench/reference) checks itself against the spec:
-- env dynamics, observations, PopArt invariance, bf16 autocast with fp32
-- master weights, and launch.py putting the process on the malloc asked for.
-- Run by the python bench --compare runs it with (build/venv-bench's, else
-- the system's); pending where none imports torch (make bench installs it).

local support = require("support")

describe("bench/reference", function()
  it("passes its self-checks (test_reference.py)", function()
    local py, why = support.bench_python()
    if not py then return pending(why) end
    local f = io.popen(string.format("%q bench/reference/test_reference.py 2>&1; echo rc=$?", py))
    local out = f:read("*a")
    f:close()
    assert.truthy(out:find("\nrc=0\n", 1, true), out)
    assert.truthy(out:find("all reference checks passed", 1, true), out)
    assert.truthy(out:find("launch ok", 1, true), out)
    assert.truthy(out:find("compile ok", 1, true) or out:find("has no torch.compile (skipped)", 1, true), out)
  end)
end)
