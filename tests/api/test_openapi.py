"""GET /openapi.json and /docs: the document covers exactly the routes the server has.

The route check reads the live router (falcon.inspect), not the route table the document is
built from, so a route added any other way than with a contract fails here.
"""

from __future__ import annotations

import json
import re

import falcon
import falcon.inspect
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.support import bearer
from titen.api import schemas
from titen.api.cli.main import main
from titen.api.rest.app import create_app
from titen.api.rest.contract import STATUS_OF
from titen.api.rest.errors import CODES
from titen.domain.published import PUBLISHED

REF = "#/components/schemas/"


class AnyText(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = str.__hash__


ANY_TEXT = AnyText()


@pytest.fixture
def document(client) -> dict:
    answer = client.simulate_get("/openapi.json")  # no key
    assert answer.status_code == 200
    return answer.json


def served_operations(app: falcon.App) -> set[tuple[str, str]]:
    """(method, template) of every responder the router really has (not falcon's own, such as
    the OPTIONS every route gets from api/rest/methods.py, nor the HEAD it gets there: the
    document leaves them out, docs/openapi.md)."""
    return {
        (method.method, route.path)
        for route in falcon.inspect.inspect_routes(app)
        for method in route.methods
        if not method.internal and not derived(method)
    }


def derived(method: falcon.inspect.RouteMethodInfo) -> bool:
    """A HEAD that is its route's GET; a resource's own `on_head` would still need a contract."""
    return method.method == "HEAD" and method.function_name == "on_get"


def documented_operations(document: dict) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


def test_the_document_is_valid_openapi_3_1(document):
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_every_route_is_documented_and_every_documented_route_exists(services, document):
    served = served_operations(create_app(services))
    documented = documented_operations(document)
    assert served - documented == set(), "routes the document lacks"
    assert documented - served == set(), "documented routes the server lacks"
    assert ("POST", "/v1/leases") in served  # the check reads real routes


def test_a_route_added_without_a_contract_is_caught(services, document):
    class Undeclared:
        def on_get(self, req, resp):
            resp.media = {}

    app = create_app(services)
    app.add_route("/v1/undeclared", Undeclared())
    assert served_operations(app) - documented_operations(document) == {("GET", "/v1/undeclared")}


def test_request_bodies_are_the_schemas_that_validate_requests(document):
    paths = document["paths"]
    body = lambda path: paths[path]["post"]["requestBody"]["content"]["application/json"]  # noqa: E731
    assert body("/v1/leases")["schema"] == schemas.ACQUIRE
    assert body("/v1/handoffs")["schema"] == schemas.CREATE_HANDOFF
    assert body("/v1/handoffs/{handoff_id}/resolve")["schema"] == schemas.RESOLVE_HANDOFF


def test_every_error_answer_refers_to_the_one_error_schema(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            public = operation.get("security") == []
            assert ("401" in responses) != public, (method, path)
            assert {"431", "500"} <= set(responses)
            assert any(400 <= int(status) < 500 for status in responses), (method, path)
            for status, response in responses.items():
                if int(status) < 400 or (path, status) == ("/readyz", "503"):
                    continue  # /readyz's 503 is the same body as its 200
                schema = response["content"]["application/json"]["schema"]
                mcp = path == "/mcp" and status != "431"  # a head too large: before the path
                assert schema == {"$ref": REF + ("McpError" if mcp else "Error")}
                codes = re.search(r"Codes: ([A-Z_, ]+)\.", response["description"])
                if codes is not None:  # absent on a status only the MCP SDK answers
                    assert all(STATUS_OF[code] == int(status) for code in codes[1].split(", "))
    resolve = document["paths"]["/v1/handoffs/{handoff_id}/resolve"]["post"]["responses"]
    assert set(resolve) == {
        "200", "400", "401", "404", "409", "413", "415", "422", "429", "431", "500", "503"
    }  # fmt: skip
    limited = resolve["429"]
    assert set(limited["headers"]) == {"Retry-After", "RateLimit-Policy", "RateLimit"}
    header = document["paths"]["/v1/leases"]["post"]["parameters"][-1]
    assert header["name"] == "Idempotency-Key" and header["in"] == "header"


def test_the_error_schema_names_every_code_from_the_one_table(document):
    schemas = document["components"]["schemas"]
    assert schemas["ErrorCode"]["enum"] == sorted(STATUS_OF, key=lambda c: (STATUS_OF[c], c))
    code = schemas["Error"]["properties"]["error"]["properties"]["code"]
    assert code == {"$ref": REF + "ErrorCode"}
    data = schemas["McpError"]["properties"]["error"]["properties"]["data"]
    assert data["properties"]["code"] == {"$ref": REF + "ErrorCode"}


def test_mcp_is_one_json_rpc_operation_whose_every_error_is_json_rpc(document):
    (method,) = document["paths"]["/mcp"]
    operation = document["paths"]["/mcp"][method]
    assert (method, operation["operationId"]) == ("post", "mcp")
    responses = operation["responses"]
    assert set(responses) == {
        "200", "202", "400", "401", "403", "404", "406", "413", "415", "429", "431", "500", "503"
    }  # fmt: skip
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body["additionalProperties"] is True  # the protocol's messages, not titen's
    assert {"jsonrpc", "id", "method", "params", "result", "error"} == set(body["properties"])


def test_servers_license_and_free_form_bodies_are_stated(document):
    assert document["servers"] == [{"url": "/", "description": ANY_TEXT}]
    assert document["info"]["license"]["identifier"]
    free_form = [
        document["paths"]["/mcp"]["post"]["requestBody"]["content"]["application/json"],
        document["paths"]["/openapi.json"]["get"]["responses"]["200"]["content"][
            "application/json"
        ],
    ]
    for content in free_form:
        schema = content["schema"]
        assert schema["additionalProperties"] is True and schema["properties"]
        assert set(schema.get("required", [])) <= set(schema["properties"])


def test_event_data_is_told_apart_by_the_event_type(document):
    schemas = document["components"]["schemas"]
    listed = document["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    events = listed["application/json"]["schema"]["properties"]["data"]["properties"]["events"]
    union = events["items"]
    mapping = union["discriminator"]["mapping"]
    assert union["discriminator"]["propertyName"] == "type"
    assert set(mapping) == set(PUBLISHED)
    assert [member["$ref"] for member in union["oneOf"]] == list(mapping.values())
    for kind, target in mapping.items():
        variant = schemas[target.removeprefix(REF)]
        assert variant["properties"]["type"]["enum"] == [kind]
    lease = schemas["LeaseAcquiredEvent"]["properties"]["data"]
    assert "fencing_token" in lease["properties"] and "handoff_id" not in lease["properties"]
    assert "handoff_id" in schemas["HandoffCreatedEvent"]["properties"]["data"]["properties"]


def test_the_document_names_the_bearer_scheme_and_the_event_stream(document):
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key from `titen keys create`.",
    }
    assert document["security"] == [{"bearer": []}]
    stream = document["paths"]["/v1/events/stream"]["get"]["responses"]["200"]
    assert list(stream["content"]) == ["text/event-stream"]


def test_links_lead_from_creating_to_using(document):
    acquire = document["paths"]["/v1/leases"]["post"]["responses"]["201"]["links"]
    assert acquire["ReleaseLease"] == {
        "operationId": "releaseLease",
        "parameters": {"lease_id": "$response.body#/data/lease_id"},
    }
    create = document["paths"]["/v1/handoffs"]["post"]["responses"]["201"]["links"]
    assert create["ResolveHandoff"]["operationId"] == "resolveHandoff"
    operation_ids = {
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
    }
    for link in [*acquire.values(), *create.values()]:
        assert link["operationId"] in operation_ids


def test_real_answers_match_their_documented_schemas(client, document, alice, bob):
    """A few real answers, checked against the document (schemathesis checks every one)."""

    registry = Registry().with_resource("urn:document", Resource(document, DRAFT202012))

    def check(answer, path: str, method: str) -> None:
        """The answer against its schema in place, so its `$ref`s resolve in the document."""
        where = ["paths", path, method, "responses", str(answer.status_code), "content"]
        pointer = "/".join(p.replace("~", "~0").replace("/", "~1") for p in where)
        schema = {"$ref": f"urn:document#/{pointer}/application~1json/schema"}
        Draft202012Validator(schema, registry=registry).validate(answer.json)

    acquire = {"resource_type": "deploy", "resource_id": "x", "purpose": "p", "ttl_seconds": 60}
    acquired = client.simulate_post("/v1/leases", json=acquire, headers=bearer(alice))
    check(acquired, "/v1/leases", "post")
    check(
        client.simulate_post("/v1/leases", json=acquire, headers=bearer(bob)), "/v1/leases", "post"
    )
    lease_id = acquired.json["data"]["lease_id"]
    check(
        client.simulate_get(f"/v1/leases/{lease_id}", headers=bearer(alice)),
        "/v1/leases/{lease_id}",
        "get",
    )
    check(client.simulate_get("/healthz"), "/healthz", "get")
    check(client.simulate_get("/v1/events", headers=bearer(alice)), "/v1/events", "get")
    check(client.simulate_get("/v1/leases/nope"), "/v1/leases/{lease_id}", "get")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    check(client.simulate_post("/mcp", json=ping), "/mcp", "post")


def test_titen_openapi_prints_the_served_document(document, capsys):
    assert main(["openapi"]) == 0
    assert json.loads(capsys.readouterr().out) == document


def test_docs_is_a_page_that_needs_nothing_from_outside(client):
    page = client.simulate_get("/docs")  # no key
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'spec-url="/openapi.json"' in page.text
    assert "Redoc" in page.text  # the bundle itself, inlined
    assert not re.search(r"""<(script|link)[^>]+(src|href)=["']?https?:""", page.text)


def test_error_codes_table_covers_every_status(document):
    codes = document["components"]["schemas"]["ErrorCode"]["enum"]
    assert set(CODES.values()) <= set(codes)
