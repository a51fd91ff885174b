-- spec/util_spec.lua - moonrl.util's helpers that several layers share: shell quoting (sweep.json's
-- command, Slurm's scripts) and the markdown tables of moonrl eval, sweep status and sweep report.

describe("moonrl.util.shell_word (sweep.json's command, Slurm's scripts)", function()
  it("gives words that a POSIX shell reads back as they were", function()
    local util = require("moonrl.util")
    assert.equal("total_steps=1024", util.shell_word("total_steps=1024"))   -- plain words stay plain
    for _, w in ipairs({ "a b", "it's", "$HOME", "x;rm -rf y", "", "tab\there", "'" }) do
      local p = io.popen("printf '%s' " .. util.shell_word(w))
      local got = p:read("*a")
      p:close()
      assert.equal(w, got)
    end
  end)
end)

describe("moonrl.util.md_table", function()
  local util = require("moonrl.util")
  it("pads every column to its widest cell, right-aligned columns marked --: in the rule", function()
    local rows = { { "trial", "value", "dir" }, { "trial-1", "3.5", "a" }, { "t2", "10", "bb" } }
    -- the text as written by hand (GitHub's table syntax), not by the function
    assert.equal(table.concat({
      "| trial   | value | dir |",
      "|---------|------:|-----|",
      "| trial-1 |   3.5 | a   |",
      "| t2      |    10 | bb  |",
    }, "\n"), util.md_table(rows, { [2] = true }))
    -- a number k: every column after the first k is right-aligned (the default k is 1)
    assert.equal(table.concat({
      "| trial   | value | dir |",
      "|---------|------:|----:|",
      "| trial-1 |   3.5 |   a |",
      "| t2      |    10 |  bb |",
    }, "\n"), util.md_table(rows))
    assert.equal(util.md_table(rows), util.md_table(rows, 1))
    assert.equal("| a |\n|---|", util.md_table({ { "a" } }, 1))
  end)
end)
