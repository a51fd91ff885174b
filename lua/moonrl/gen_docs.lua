-- moonrl.gen_docs - writes docs/config.md from the schema.
--
-- As a script (from the repository root):   luajit lua/moonrl/gen_docs.lua [out.md]
-- As a module:  require("moonrl.gen_docs").text() -> the markdown
--               require("moonrl.gen_docs").write(path) -> true | nil, err
-- spec/gen_docs_spec.lua fails when docs/config.md differs from text().

local gen_docs = {}

gen_docs.DEFAULT_PATH = "docs/config.md"

function gen_docs.text()
  return require("moonrl.config").reference_markdown()
end

function gen_docs.write(path)
  path = path or gen_docs.DEFAULT_PATH
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot write " .. tostring(err) end
  f:write(gen_docs.text())
  f:close()
  return true
end

local first = ...
if first ~= "moonrl.gen_docs" then
  -- Run as a script: find lua/ from this file's own path.
  local here = (arg and arg[0] or ""):match("^(.*)moonrl/gen_docs%.lua$") or "./lua/"
  package.path = here .. "?.lua;" .. here .. "?/init.lua;" .. package.path
  local out = first or gen_docs.DEFAULT_PATH
  local ok, err = gen_docs.write(out)
  if not ok then
    io.stderr:write("gen_docs: ", err, "\n")
    os.exit(1)
  end
  print("wrote " .. out)
end

return gen_docs
