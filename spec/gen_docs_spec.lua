local gen_docs = require("moonrl.gen_docs")
local support = require("support")

describe("docs/config.md", function()
  it("is what lua/moonrl/gen_docs.lua generates from the schema (regenerate: luajit lua/moonrl/gen_docs.lua)", function()
    local on_disk = support.read_file("docs/config.md")
    assert.is_string(on_disk, "docs/config.md is missing: run luajit lua/moonrl/gen_docs.lua")
    local want = gen_docs.text()
    if on_disk ~= want then
      -- name the first line that differs, not two whole files
      local a, b = support.lines(on_disk .. "\n"), support.lines(want .. "\n")
      for i = 1, math.max(#a, #b) do
        if a[i] ~= b[i] then
          error(string.format("docs/config.md is out of date at line %d:\n  file:      %s\n  generated: %s\n" ..
            "regenerate it with: luajit lua/moonrl/gen_docs.lua", i, tostring(a[i]), tostring(b[i])))
        end
      end
    end
  end)

  it("the generator writes exactly that text", function()
    local dir = support.tmpdir()
    local path = dir .. "/config.md"
    assert.is_true(gen_docs.write(path))
    assert.equal(gen_docs.text(), support.read_file(path))
    support.rm_rf(dir)
  end)
end)
