-- moonrl.eval.protocols - which module summarises, tabulates and files the
-- results of each evaluation protocol (docs/evaluation.md): the episodic
-- one every environment has (moonrl.eval.episodic) and foraging's
-- continuous survival (moonrl.eval.table). Both offer the same functions:
-- summarise(res, opts), table(summaries), compare_text(a, b); a summary
-- lists its metrics ({key, label, ...}) as summary.metrics. Their files are
-- moonrl.eval.files' (the episodic records through moonrl.eval.episodic).
--
--   protocols.of(x) -> module       x: a result, a summary, eval.json or a protocol name
--                                   (nil or "survival": the survival protocol's, as files
--                                   written before there were two)
--   protocols.common(summaries) -> module | nil, err   the module of summaries that can
--                                   share a table: one protocol, and (episodic) one environment

local protocols = {}

function protocols.of(x)
  local p = type(x) == "table" and x.protocol or x
  if p == "episodic" then return require("moonrl.eval.episodic") end
  return require("moonrl.eval.table")
end

function protocols.common(summaries)
  local first = summaries[1]
  for k = 2, #summaries do
    local s = summaries[k]
    if (s.protocol or "survival") ~= (first.protocol or "survival") then
      return nil, string.format("%s was evaluated with the %s protocol and %s with the %s one: a table compares " ..
        "results of one protocol (--protocol)", first.label, first.protocol or "survival", s.label,
        s.protocol or "survival")
    end
    if first.protocol == "episodic" and s.environment ~= first.environment then
      return nil, string.format("%s is %s and %s is %s: a table compares checkpoints of one environment",
        first.label, tostring(first.environment), s.label, tostring(s.environment))
    end
  end
  return protocols.of(first)
end

return protocols
