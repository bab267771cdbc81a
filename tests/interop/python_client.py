"""The official Python MCP SDK (`mcp` 2.3.0, pinned by scripts/interop-clients) driving taskgate.

The SDK speaks 2026-07-28 (server/discover, stateless requests, per-request `_meta`, the
`Mcp-*` headers) but ships no client for the Tasks extension. Its own extension hooks add one
here: a `ClientExtension` that declares `io.modelcontextprotocol/tasks` and claims
`resultType: "task"` on tools/call, and request classes for tasks/get|update|cancel whose
`name_param` makes the session send `Mcp-Name: <taskId>`.

It polls every 50 ms, faster than any task's pollIntervalMs, and never retries a refusal:
the gateway's defaults must serve it as it is. A short tool (`noop`) is answered with its
result in the tools/call reply at the gateway's default `--complete-within-ms`; it prints
`{"short": "result"}` once it has checked that answer. Each request is printed as one JSON line
(`request`, `ms`, `ok`), then `{"done": true}`.

Usage: python python_client.py http://127.0.0.1:PORT/mcp
       python python_client.py http://127.0.0.1:PORT/mcp call TOOL '{"json": "arguments"}'
The second form calls one tool as a task, lets the extension's claim poll it to its end, and
prints `{"result": <CallToolResult>}`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Literal

import mcp_types
from mcp import Client
from mcp.client import ClientExtension, ResultClaim
from mcp.client.extension import ClaimContext
from mcp.client.session import ClientSession
from mcp_types import CallToolResult, RequestParams, Result
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "failed", "cancelled"}
POLL_SECONDS = 0.05


class _TaskFields(Result):
    model_config = ConfigDict(populate_by_name=True, extra="allow")
    task_id: str = Field(alias="taskId")
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class CreateTaskResult(_TaskFields):
    result_type: Literal["task"] = Field(alias="resultType")


class GetTaskResult(_TaskFields):
    result_type: Literal["complete"] = Field(alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class TaskIdParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(serialization_alias="taskId")


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(serialization_alias="inputResponses")


class GetTaskRequest(mcp_types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTaskRequest(mcp_types.Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams
    name_param = "taskId"


class CancelTaskRequest(mcp_types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


async def timed(request: str, call):
    """Runs one request, printing its timing; any error (a 429 included) ends the run."""
    started = time.monotonic()
    try:
        result = await call
    except Exception as err:
        print(json.dumps({"request": request, "ms": round((time.monotonic() - started) * 1000, 1), "ok": False,
                          "error": repr(err)}), flush=True)
        raise
    print(json.dumps({"request": request, "ms": round((time.monotonic() - started) * 1000, 1), "ok": True}), flush=True)
    return result


async def get_task(s: ClientSession, task_id: str) -> GetTaskResult:
    return await timed("tasks/get", s.send_request(GetTaskRequest(params=TaskIdParams(task_id=task_id)), GetTaskResult))


async def poll(s: ClientSession, task_id: str, until: set[str]) -> GetTaskResult:
    deadline = time.monotonic() + 30
    while True:
        got = await get_task(s, task_id)
        if got.status in until:
            return got
        assert time.monotonic() < deadline, f"task {task_id} stuck in {got.status}"
        await asyncio.sleep(POLL_SECONDS)


class TasksExtension(ClientExtension):
    """Declares the Tasks extension on every request and claims `resultType: "task"`."""

    identifier = TASKS

    def claims(self):
        async def resolve(created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
            final = await poll(ctx.session, created.task_id, TERMINAL)
            if final.status == "completed":
                return CallToolResult.model_validate(final.result, by_name=False)
            raise RuntimeError(f"task {final.task_id} ended {final.status}: {final.error}")

        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=resolve)]


async def on_elicit(context, params):
    # Having a callback is what declares the elicitation capability; answers go through
    # tasks/update below, as a task's input requests do.
    return mcp_types.ElicitResult(action="decline")


async def main(url: str) -> None:
    started = time.monotonic()
    client = Client(url, mode="auto", extensions=[TasksExtension()], elicitation_callback=on_elicit)
    async with client:
        print(json.dumps({"request": "server/discover", "ms": round((time.monotonic() - started) * 1000, 1),
                          "ok": True, "protocol": str(client.protocol_version)}), flush=True)
        s = client.session
        tools = await timed("tools/list", client.list_tools())
        names = [t.name for t in tools.tools]
        assert "sleep" in names and "generate_report" in names, names

        # A short tool: at the gateway's default completion budget its result comes in the one
        # reply (the claim for "task" does not apply), and the task it made, named in _meta, is
        # readable as completed.
        short = await timed("tools/call", s.call_tool("noop", {}, allow_claimed=True))
        assert isinstance(short, CallToolResult), short
        task_id = (short.model_dump(by_alias=True).get("_meta") or {}).get("io.taskgate/taskId")
        assert task_id, short
        got = await get_task(s, task_id)
        assert got.status == "completed", got
        print(json.dumps({"short": "result"}), flush=True)

        # A task to completion: it runs longer than the budget, so the reply is its handle.
        created = await timed("tools/call", s.call_tool("sleep", {"ms": 1500}, allow_claimed=True))
        assert isinstance(created, CreateTaskResult), created
        final = await poll(s, created.task_id, TERMINAL)
        assert final.status == "completed" and final.result["structuredContent"]["sleptMs"] == 1500, final

        # A running task, cancelled.
        created = await timed("tools/call", s.call_tool("sleep", {"ms": 60000}, allow_claimed=True))
        await poll(s, created.task_id, {"working"})
        await timed("tasks/cancel", s.send_request(
            CancelTaskRequest(params=TaskIdParams(task_id=created.task_id)), Result))
        final = await poll(s, created.task_id, TERMINAL)
        assert final.status == "cancelled", final

        # Input asked mid-task, answered through tasks/update.
        created = await timed("tools/call", s.call_tool("generate_report", {"size": "small"}, allow_claimed=True))
        parked = await poll(s, created.task_id, TERMINAL | {"input_required"})
        assert parked.status == "input_required" and "approve_outline" in (parked.input_requests or {}), parked
        answer = {"approve_outline": {"action": "accept", "content": {"approved": True}}}
        await timed("tasks/update", s.send_request(
            UpdateTaskRequest(params=UpdateParams(task_id=created.task_id, input_responses=answer)), Result))
        final = await poll(s, created.task_id, TERMINAL)
        assert final.status == "completed", final
    print(json.dumps({"done": True}), flush=True)


async def call(url: str, tool: str, arguments: dict[str, Any]) -> None:
    client = Client(url, mode="auto", extensions=[TasksExtension()])
    async with client:
        result = await timed("tools/call", client.call_tool(tool, arguments))
        print(json.dumps({"result": result.model_dump(by_alias=True, mode="json", exclude_none=True)}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[2] == "call":
        asyncio.run(call(sys.argv[1], sys.argv[3], json.loads(sys.argv[4])))
    else:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
