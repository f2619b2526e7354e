"""One schema for a stack (function.stack): the generator builds and writes it, the runtime loads it back.

The generated literals are validated through the same dataclasses the
generator built; malformed data is refused with the module and the field named.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from function import stack
from function.model import Accelerator, Cloud
from generator import build, emit, lock, stackfile
from generator.build import FACTS_DIR, REPO, Inputs, build_stack
from generator.stackfile import CATALOGUE, CHARTS, Catalogue, ChartFacts, Charts, StackFile, every_stack_file, read


@pytest.fixture(scope="module")
def built() -> dict[str, stack.Stack]:
    catalogue = read(REPO / "stacks" / CATALOGUE, Catalogue)
    charts = read(REPO / "stacks" / CHARTS, Charts)
    locked = lock.read(FACTS_DIR)
    out = {}
    for stack_file in every_stack_file(REPO / "stacks"):
        s, _ = build_stack(stack_file, catalogue, charts, locked, Inputs())
        out[s.id] = s
    return out


def _generated(name: str) -> dict[str, Any]:
    data: dict[str, Any] = importlib.import_module(f"function.generated.{name}").STACK
    return data


def test_what_the_generator_builds_reads_back_equal(built: dict[str, stack.Stack]) -> None:
    for s in built.values():
        again = stack.from_data(stack.to_data(s), s.id)
        # Stack compares by identity (renderers are cached by it): compare what it holds.
        assert dataclasses.asdict(again) == dataclasses.asdict(s), s.id
        assert again.components == s.components
        assert again.driver == s.driver


def test_every_generated_stack_validates_and_is_the_build(built: dict[str, stack.Stack]) -> None:
    loaded = {s.id: s for s in stack.every()}
    assert sorted(loaded) == sorted(built)
    for stack_id, s in loaded.items():
        assert dataclasses.asdict(s) == dataclasses.asdict(built[stack_id]), stack_id
        assert all(isinstance(c, stack.Component) for c in s.components)
        assert all(isinstance(i, stack.ImageRef) for c in s.components for i in c.images)


def _refused(data: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    """The error loading ``data`` as the generated EKS module (through stack.load, not its cache)."""
    module = importlib.import_module("function.generated.eks_nvidia")
    monkeypatch.setattr(module, "STACK", data)
    with pytest.raises(stack.StackDataError) as err:
        stack.read_stack(Cloud.EKS, Accelerator.NVIDIA)
    return str(err.value)


def _index(data: dict[str, Any], key: str) -> int:
    return next(i for i, c in enumerate(data["components"]) if c["key"] == key)


def test_a_malformed_generated_stack_is_refused_naming_module_and_field(monkeypatch: pytest.MonkeyPatch) -> None:
    data = copy.deepcopy(_generated("eks_nvidia"))
    cert = _index(data, "cert-manager")
    del data["components"][cert]["chart"]["version"]
    data["components"][cert]["image"] = []  # a typo: unknown fields are refused, not dropped
    message = _refused(data, monkeypatch)
    assert message.startswith("function/generated/eks_nvidia.py: ")
    assert f"components[{cert}].chart.version: Field required" in message
    assert f"components[{cert}].image: unknown field" in message
    assert "Traceback" not in message and len(message) < 1000


def test_a_generated_release_without_its_chart_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    data = copy.deepcopy(_generated("eks_nvidia"))
    data["components"][_index(data, "cert-manager")].pop("chart")
    assert "component cert-manager: a Release needs a chart" in _refused(data, monkeypatch)
    data = copy.deepcopy(_generated("eks_nvidia"))
    data["driver"]["source"] = "operator"
    assert "driver.source: Input should be 'node-image' or 'gpu-operator'" in _refused(data, monkeypatch)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def test_the_image_pdb_and_chart_shapes_have_one_definition() -> None:
    """The stack files' models take the runtime's classes; nothing in the generator restates a stack shape."""
    assert stackfile.ChartFacts.model_fields["images"].annotation == list[stack.ImageRef]
    assert stackfile.ComponentSpec.model_fields["images"].annotation == list[stack.ImageRef]
    assert stackfile.StackFile.model_fields["driver"].annotation == stack.DriverSource
    assert stackfile.ChartFacts.model_fields["podDisruptionBudget"].annotation == stack.PdbPaths | None
    assert stackfile.ComponentSpec.model_fields["chart"].annotation == stack.ChartRef | None
    shapes = [
        (cls, {to_camel(f.name) for f in dataclasses.fields(cls) if all_fields or _required(f)})
        for cls in (stack.ImageRef, stack.PdbPaths, stack.ChartRef, stack.Component, stack.DriverSource)
        for all_fields in (True, False)
    ]
    for module in (stackfile, build, emit, lock):
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue  # imported, not defined here
            if issubclass(cls, BaseModel):
                names = {f.alias or n for n, f in cls.model_fields.items()}
            elif dataclasses.is_dataclass(cls):
                names = {f.name for f in dataclasses.fields(cls)}
            else:
                continue
            camel = {to_camel(n) for n in names}
            for shape, fields in shapes:
                assert camel != fields or len(fields) < 2, f"{module.__name__}.{name} restates {shape.__name__}"


def test_the_stack_files_still_refuse_unknown_image_fields() -> None:
    """extra="forbid" holds for what a person writes: an image in stacks/charts.yaml with a typo is refused."""
    facts = {"version": "v1", "chartRepository": "oci://example", "images": [{"name": "x", "repositry": "a.b"}]}
    with pytest.raises(ValidationError, match=r"images\.0\.repositry"):
        ChartFacts.model_validate(facts)
    with pytest.raises(ValidationError, match=r"podDisruptionBudget\.min_available"):
        ChartFacts.model_validate({**facts, "images": [], "podDisruptionBudget": {"min_available": "a"}})


def test_the_driver_root_is_stated_once_in_the_dra_driver_values() -> None:
    """Stack files state the root where the DRA driver takes it; the stack keeps no second copy."""
    assert "root" not in {f.name for f in dataclasses.fields(stack.DriverSource)}  # what stacks/*.yaml write
    roots = {s.id: s.driver_root for s in stack.every()}
    assert roots["gke-nvidia"] == "/home/kubernetes/bin/nvidia"
    assert roots["existing-nvidia"] == "/run/nvidia/driver"
    assert roots["eks-nvidia"] == "/"
    assert roots["vultr-amd"] == "/"  # no DRA driver: the chart's and v0.3.1's default


def test_a_stack_file_driver_is_the_generated_shape_and_refuses_what_it_lacks() -> None:
    """stacks/*.yaml write the driver as the runtime reads it: unknown fields and a half-described resource fail."""
    base = {"id": "x", "cloud": "Existing", "accelerator": "NVIDIA", "aicr": {"query": {}}, "use": []}
    driver = {"source": "gpu-operator", "operator": "gpu-operator", "resource": {"kind": "NVIDIADriver"}}
    with pytest.raises(ValidationError, match="a driver resource needs its operator, versionPath and nodeSelectorPath"):
        StackFile.model_validate({**base, "driver": driver})
    with pytest.raises(ValidationError, match=r"driver\.root"):
        StackFile.model_validate({**base, "driver": {"source": "node-image", "root": "/"}})
    written = {**driver, "versionPath": "spec.version", "nodeSelectorPath": "spec.nodeSelector"}
    assert StackFile.model_validate({**base, "driver": written}).driver.version_path == "spec.version"


def test_writing_keeps_nulls_in_values_and_image_defaults() -> None:
    """A null in values deletes the chart default in Helm, and an image default of None means "not verified"."""
    release = stack.Component(
        key="k",
        kind="Release",
        origin="platform",
        chart=stack.ChartRef(name="c", repository="oci://example", version="1.0.0"),
        values={"drop": None, "nested": {"drop": None}},
        images=(stack.ImageRef(name="i", repository="image.repository", default={"repository": None}),),
    )
    data = stack.to_data(release)
    assert data["values"] == {"drop": None, "nested": {"drop": None}}
    assert data["images"] == [{"name": "i", "repository": "image.repository", "default": {"repository": None}}]
    assert "ref" not in data["images"][0] and "namespace" not in data  # unset fields are left out
