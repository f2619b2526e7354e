"""The pydantic base of every model a person writes (the XR, override documents, the Input, stack files)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown fields are refused (a misspelt field is an error naming it, never a setting silently
    ignored) and a parsed model is frozen (parsed documents are shared between requests)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
