// The seed's flow through a client generated from titen's OpenAPI document (openapi-typescript
// types, openapi-fetch calls), run by tests/e2e/test_generated_clients.py against a real server.
// `tsc --strict` must accept it: every body, answer and error below is typed from the document.
import createClient from "openapi-fetch";

import { keys, url } from "./config.js";
import type { components, paths } from "./schema.js";

type ErrorCode = components["schemas"]["ErrorCode"];
type Event = paths["/v1/events"]["get"]["responses"][200]["content"]["application/json"]["data"]["events"][number];

function check(condition: boolean, what: string): asserts condition {
  if (!condition) {
    throw new Error(`failed: ${what}`);
  }
}

function as(key: string) {
  return createClient<paths>({ baseUrl: url, headers: { Authorization: `Bearer ${key}` } });
}

function refused(error: components["schemas"]["Error"] | undefined, code: ErrorCode): void {
  check(error !== undefined && error.error.code === code, `${code}: ${JSON.stringify(error)}`);
}

/** What an event tells, narrowed by its type: a lease's fencing token, a handoff's id. */
function summary(event: Event): string {
  if (event.type === "lease.acquired") {
    const token: number = event.data.fencing_token;
    return `${event.type} ${event.data.lease_id} ${token}`;
  }
  const handoff: string = event.data.handoff_id;
  return `${event.type} ${handoff} ${event.data.status}`;
}

async function main(): Promise<void> {
  const agentA = as(keys.agentA);
  const agentB = as(keys.agentB);
  const lease = {
    resource_type: "deploy",
    resource_id: "checkout-service",
    purpose: "run rollback smoke",
    ttl_seconds: 600,
  };

  const acquired = await agentA.POST("/v1/leases", { body: lease });
  check(acquired.response.status === 201 && acquired.data !== undefined, "acquire");
  const leaseId: string = acquired.data.data.lease_id;

  const taken = await agentB.POST("/v1/leases", { body: lease });
  check(taken.response.status === 409, "a second principal is told 409");
  refused(taken.error, "CONFLICT");

  const path = { params: { path: { lease_id: leaseId } } };
  const released = await agentA.DELETE("/v1/leases/{lease_id}", path);
  check(released.response.status === 200 && released.data?.data.lease_id === leaseId, "release");
  const again = await agentA.DELETE("/v1/leases/{lease_id}", path);
  check(again.response.status === 404, "a second release is 404");
  refused(again.error, "NOT_FOUND");

  const sent = await agentA.POST("/v1/handoffs", {
    body: {
      to_principal: "agent_b",
      subject_id: "user_rama",
      message: "Smoke passed, needs approval to promote.",
    },
  });
  check(sent.response.status === 201 && sent.data !== undefined, "handoff");
  const handoffId: string = sent.data.data.handoff_id;

  const inbox = await agentB.GET("/v1/handoffs", {});
  check(inbox.data !== undefined, "inbox");
  const listed = inbox.data.data.handoffs.map((handoff) => handoff.handoff_id);
  check(listed.includes(handoffId), "the handoff is in the recipient's inbox");

  const resolve = {
    params: { path: { handoff_id: handoffId } },
    body: { status: "accepted" as const },
  };
  const resolved = await agentB.POST("/v1/handoffs/{handoff_id}/resolve", resolve);
  check(resolved.data?.data.status === "accepted", "resolve");
  const twice = await agentB.POST("/v1/handoffs/{handoff_id}/resolve", resolve);
  check(twice.response.status === 404, "a second resolve is 404");
  refused(twice.error, "NOT_FOUND");

  const events = await agentA.GET("/v1/events", {});
  check(events.data !== undefined, "events");
  const told = events.data.data.events.map(summary);

  const ping = await agentA.POST("/mcp", {
    body: { jsonrpc: "2.0", id: 1, method: "ping" },
    headers: { Accept: "application/json, text/event-stream" },
  });
  check(ping.data?.jsonrpc === "2.0", "a JSON-RPC message is a body");
  const stranger = await as("titen_" + "0".repeat(48)).POST("/mcp", {
    body: { jsonrpc: "2.0", id: 2, method: "ping" },
    headers: { Accept: "application/json" },
  });
  check(stranger.response.status === 401, "a wrong key over MCP is 401");
  const answered = stranger.error;
  check(answered !== undefined && "jsonrpc" in answered, "a JSON-RPC error (431 alone is not)");
  const mcpError: components["schemas"]["McpError"] = answered;
  check(mcpError.error.data?.code === "UNAUTHORIZED", "titen's code in the error's data");

  console.log(JSON.stringify({ events: told, mcp: mcpError.error.message }));
}

await main();
