"""The override document's JSON Schema, exported for editors and CI.

``python -m function.overrides.schema`` rewrites the files under ``schema/``;
``--check`` exits 1 naming the stale ones (a test runs it). The schema comes
from the same pydantic models the function validates with, so it cannot drift
from them; what a schema cannot say (a retired document carries nothing else,
no two rules from one source) the function and ``function validate`` still check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .collect import ENVIRONMENT_CONFIG_API, ENVIRONMENT_CONFIG_KIND
from .document import DOCUMENT_KEY, OverrideDocument

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schema"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def document_schema() -> dict[str, Any]:
    """The schema of ``data.servingStack``."""
    schema = OverrideDocument.model_json_schema(by_alias=True)
    return {
        "$schema": DIALECT,
        "title": "ServingStack override document",
        "description": f"data.{DOCUMENT_KEY} of an EnvironmentConfig read by compose-serving-stack.",
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }


def environment_config_schema() -> dict[str, Any]:
    """An EnvironmentConfig whose ``data.servingStack`` is an override document (for YAML editors)."""
    document = document_schema()
    defs = document.pop("$defs", {})
    document.pop("$schema")
    return {
        "$schema": DIALECT,
        "title": "EnvironmentConfig carrying a ServingStack override document",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": {"const": ENVIRONMENT_CONFIG_API},
            "kind": {"const": ENVIRONMENT_CONFIG_KIND},
            "metadata": {"type": "object"},
            # Other keys may serve other functions; only ours is described.
            "data": {"type": "object", "properties": {DOCUMENT_KEY: {"$ref": "#/$defs/OverrideDocument"}}},
        },
        "$defs": {**defs, "OverrideDocument": document},
    }


def rendered() -> dict[Path, str]:
    return {
        SCHEMA_DIR / name: json.dumps(schema, indent=2) + "\n"
        for name, schema in (
            ("override-document.schema.json", document_schema()),
            ("environmentconfig.schema.json", environment_config_schema()),
        )
    }


def main(argv: list[str]) -> int:
    files = rendered()
    if argv == ["--check"]:
        stale = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
        if stale:
            print(f"stale: {', '.join(stale)}; run python -m function.overrides.schema", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python -m function.overrides.schema [--check]", file=sys.stderr)
        return 2
    SCHEMA_DIR.mkdir(exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
