-- The PyTorch reference (bench/reference) checks itself against the spec:
-- env dynamics, observations, PopArt invariance, bf16 autocast with fp32
-- master weights, and launch.py putting the process on the malloc asked for.
-- Pending where PyTorch is absent (make bench-deps installs it).

describe("bench/reference", function()
  it("passes its self-checks (test_reference.py)", function()
    local ok = os.execute("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1")
    if not (ok == 0 or ok == true) then return pending("no PyTorch (make bench-deps installs it)") end
    local f = io.popen("/usr/bin/python3 bench/reference/test_reference.py 2>&1; echo rc=$?")
    local out = f:read("*a")
    f:close()
    assert.truthy(out:find("\nrc=0\n", 1, true), out)
    assert.truthy(out:find("all reference checks passed", 1, true), out)
    assert.truthy(out:find("launch ok", 1, true), out)
  end)
end)
