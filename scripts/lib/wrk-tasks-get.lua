-- wrk script for scripts/perf-floor: POSTs one tasks/get JSON-RPC request, with the headers a
-- Tasks client sends (the loadtest client's: MCP-Protocol-Version, Mcp-Method, Mcp-Name, _meta), for the
-- task TASK_ID. WRK_REQUESTS=N stops each thread after N replies (a fixed count of requests,
-- for instruction counts under callgrind); without it the response hook is left out, so wrk
-- does not hand every reply to Lua.
local task = os.getenv("TASK_ID") or error("TASK_ID is not set")
wrk.method = "POST"
wrk.path = os.getenv("WRK_PATH") or "/mcp"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tasks/get"
wrk.headers["Mcp-Name"] = task
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"' .. task .. '",'
  .. '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}},"elicitation":{}}}}}'

local limit = tonumber(os.getenv("WRK_REQUESTS") or "0")
if limit > 0 then
  local seen = 0
  function response(status)
    seen = seen + 1
    if status ~= 200 then error("status " .. status) end
    if seen >= limit then wrk.thread:stop() end
  end
end
