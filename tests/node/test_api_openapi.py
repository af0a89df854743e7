"""The OpenAPI document is complete enough to generate a client from: it validates as OpenAPI
3.1, and requests generated from it alone (parameters, bodies, auth) get documented answers whose
bodies match the documented schemas, from a real node with every application enabled."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from tests.conftest import ROOT
from tests.harness.cluster import preset_identity
from tests.harness.procs import NodeApi, running_node

pytestmark = pytest.mark.timeout(180)

ENV = {
    "SYNCNODE_DB_TABLES": json.dumps({"kv": {"columns": {"v": "text"}}}),
    "SYNCNODE_BLOCKS_ENABLED": "true",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeApi]:
    base = tmp_path_factory.mktemp("openapi")
    # Blocks need their producers named (issue 15): this node produces its own.
    producer = preset_identity(base / "n")
    yield from running_node(base, {**ENV, "SYNCNODE_BLOCKS_PRODUCERS": producer}, in_process=True)


@pytest.fixture(scope="module")
def document(node: NodeApi) -> dict[str, Any]:
    doc: dict[str, Any] = node.get("/openapi.json")
    return doc


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return dict(node)


def sample(schema: dict[str, Any]) -> Any:
    """A value the schema accepts, from the schema alone (examples, enums, bounds, types)."""
    if "examples" in schema:
        return schema["examples"][0]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "oneOf" in schema:
        return sample(schema["oneOf"][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {k: sample(schema["properties"][k]) for k in schema.get("required", [])}
    if kind == "array":
        return [sample(schema["items"]) for _ in range(schema.get("minItems", 0))]
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return 0.0
    if kind == "boolean":
        return True
    if "pattern" in schema and "0-9a-fA-F" in schema["pattern"]:
        return "0x" + "00" * 32
    return "x" * max(int(schema.get("minLength", 1)), 1)


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def build(doc: dict[str, Any], path: str, op: dict[str, Any]) -> dict[str, Any]:
    url = path
    params: dict[str, Any] = {}
    headers: dict[str, str] = {}
    for p in op.get("parameters", []):
        value = sample(p["schema"])
        if p["in"] == "path":
            url = url.replace("{" + p["name"] + "}", str(value))
        elif p["in"] == "query":
            params[p["name"]] = value
        elif p["in"] == "header":
            headers[p["name"]] = str(value)
    request: dict[str, Any] = {"url": url, "params": params, "headers": headers}
    if "requestBody" in op:
        request["json"] = sample(op["requestBody"]["content"]["application/json"]["schema"])
    return request


def test_document_is_valid_openapi_31(document: dict[str, Any]) -> None:
    validate(document)
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearerToken"]["scheme"] == "bearer"
    for method, path, op in operations(document):
        # OpenAPI path templates only: no framework converters like {entity_id:path}.
        assert re.fullmatch(r"/|(/([\w.-]+|\{\w+\}))+", path), path
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"\{(\w+)\}", path)), (method, path)
        assert {"200", "202", "303"} & set(op["responses"]), (method, path)
        assert op["summary"] and op["operationId"]
        if method in ("POST", "PUT", "PATCH") and path not in ("/v1/snapshots",
                                                               "/v1/ui/links"):
            assert "requestBody" in op, (method, path)


def test_generated_requests_get_documented_answers(node: NodeApi,
                                                   document: dict[str, Any]) -> None:
    answered_ok = []
    with httpx.Client(base_url=node.api_url, timeout=30) as client:
        for method, path, op in operations(document):
            request = build(document, path, op)
            token = {} if op["security"] == [] else node.headers
            headers = {**request.pop("headers"), **token}
            if op["responses"].get("200", {}).get("content", {}).get("application/x-ndjson"):
                with client.stream(method, **request, headers=headers) as r:
                    status, body = r.status_code, None
                    if status >= 400:
                        body = json.loads(r.read())
            else:
                r = client.request(method, **request, headers=headers)
                status = r.status_code
                body = r.json() if "json" in r.headers.get("content-type", "") else r.text
            documented = op["responses"].get(str(status))
            assert documented is not None, (method, path, status, body)
            (media, spec), = documented["content"].items()
            if body is not None and media == "application/json":
                jsonschema.validate(body, _resolve(document, spec["schema"]))
            if status < 300:
                answered_ok.append(f"{method} {path}")
            # Without the token: the documented 401.
            if op["security"] != []:
                bare = client.request(method, **build(document, path, op)
                                      | {"headers": {}})
                assert bare.status_code == 401 and "401" in op["responses"], (method, path)
    # The generator alone reaches the working paths, not only errors.
    for needed in ("GET /v1/status", "POST /v1/channels/{channel}/events",
                   "GET /v1/channels/{channel}/events", "GET /v1/channels/{channel}/follow",
                   "GET /v1/channels", "GET /v1/peers", "GET /v1/db", "GET /v1/db/{table}",
                   "GET /metrics", "GET /openapi.json"):
        assert needed in answered_ok, (needed, answered_ok)


def test_out_of_range_parameters_get_the_documented_400(node: NodeApi,
                                                        document: dict[str, Any]) -> None:
    checked = 0
    for method, path, op in operations(document):
        for p in op.get("parameters", []):
            if p["in"] != "query" or "maximum" not in p["schema"]:
                continue
            request = build(document, path, op)
            request["params"][p["name"]] = p["schema"]["maximum"] + 1
            r = httpx.request(method, node.api_url + request["url"], params=request["params"],
                              headers={**request["headers"], **node.headers}, timeout=30)
            assert r.status_code == 400 and "400" in op["responses"], (path, p["name"], r.text)
            checked += 1
    assert checked >= 5


def test_readme_route_table_lists_every_route(document: dict[str, Any]) -> None:
    """The README's route table names exactly the operations of the OpenAPI document."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Local API"):]
    section = section[:section.index("\n## ", 4)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {(m, p) for row in rows
              for m, p in re.findall(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`\s]*)`",
                                     row.split(" | ")[0])}
    documented = {(method, path) for method, path, _op in operations(document)}
    assert documented - listed == set(), f"missing from the README: {documented - listed}"
    assert listed - documented == set(), f"in the README, not served: {listed - documented}"
