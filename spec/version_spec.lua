-- `moonrl version`: what a bug report needs (issue: a version line per part,
-- the build, CUDA, BLAS and the CPU features), from the built binary.

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil

describe("moonrl version", function()
  it("names the build, CUDA, the BLAS and its kernels, the CPU features and the Lua library", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local p = assert(io.popen(BIN .. " version 2>&1"))
    local out = p:read("*a")
    p:close()
    assert.truthy(out:find("^moonrl %d+%.%d+%.%d+\n"), out)
    assert.truthy(out:find("\nLuaJIT ", 1, true), out)
    assert.truthy(out:find("\nlibuv %d"), out)
    -- the commit (git describe) or "unknown" outside a checkout; the compiler and flags
    assert.truthy(out:find("\nbuild: commit [%w%-]+, %a+, %a+ [%d%.]+.*, flags .*%-march=x86%-64%-v3"), out)
    assert.truthy(out:find("\ncuda: backend built with CUDA [%d%.]+") or out:find("\ncuda: no CUDA backend"), out)
    assert.truthy(out:find("\nblas: OpenBLAS [%d%.]+.*, %w+ kernels\n"), out)
    assert.truthy(out:find("\ncpu: [%w_ ]+ %(compiled for x86%-64%-v3"), out)
    assert.truthy(out:find("\nlua library: "), out)
  end)
end)
