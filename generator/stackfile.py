"""The hand-written stack files under ``stacks/``, as typed models.

``platform.yaml`` is the component catalogue (the platform's own components and
how it takes AICR's); one file per cloud/accelerator picks components from it,
names the AICR query it resolves and adds its per-cloud differences;
``charts.yaml`` records where each chart takes images, replicas, resources,
PodDisruptionBudgets and pull secrets.

Where these files write a shape the generated stack holds (an image, a chart, a
PodDisruptionBudget, the driver), the model takes it from :mod:`function.stack`:
each shape has one definition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, Field, ValidationError

from function.errors import describe
from function.stack import ChartRef, CheckedDriver, ImageRef, PdbPaths
from function.strictmodel import StrictModel as Strict


class ManifestFile(Strict):
    """One Object per document of an external manifest kept in ``facts/manifests/`` or ``facts/extra-manifests/``."""

    file: str  # its name in facts/<folder>/ (manifests: also in the shared directory `./dev refresh` copies from)
    # extra-manifests: a checked copy the shared directory lacks (its SOURCES.yaml names the origin).
    folder: Literal["manifests", "extra-manifests"] = "manifests"
    keyPrefix: str  # noqa: N815 - component key = prefix + metadata.name
    # Server-owned fields: left in, the Object would re-apply on every reconcile.
    strip: list[str] = Field(default_factory=lambda: ["status", "metadata.creationTimestamp"])


class ComponentSpec(Strict):
    """A catalogue entry. Exactly one of aicr, chart, manifest, manifestFile."""

    aicr: str | None = None  # take this AICR component (chart, version, values, manifests)
    chart: ChartRef | None = None
    manifest: dict[str, Any] | None = None
    manifestFile: ManifestFile | None = None  # noqa: N815
    releaseName: str | None = None  # noqa: N815 - default mp-<chart name>
    namespace: str | None = None
    values: dict[str, Any] = Field(default_factory=dict)  # layered on top of AICR's, visibly
    dependsOn: list[str] = Field(default_factory=list)  # noqa: N815
    finalizedByDependencies: bool = False  # noqa: N815
    readiness: dict[str, str] = Field(default_factory=dict)
    xrFields: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    # AICR manifests of this component to leave out, with the reason in a comment.
    skipManifests: list[str] = Field(default_factory=list)  # noqa: N815
    # manifest only: where it takes images a controller runs (paths in the
    # manifest; pod containers are found without being declared) and pull secrets.
    images: list[ImageRef] = Field(default_factory=list)
    pullSecretRefListPaths: list[str] = Field(default_factory=list)  # noqa: N815 - lists of {name: …}


class ComponentPatch(Strict):
    """Per-stack differences on a catalogue entry."""

    values: dict[str, Any] = Field(default_factory=dict)
    manifest: dict[str, Any] = Field(default_factory=dict)  # deep-merged onto a manifest entry
    dependsOn: list[str] = Field(default_factory=list)  # noqa: N815 - added to the entry's
    skipManifests: list[str] = Field(default_factory=list)  # noqa: N815


class Catalogue(Strict):
    components: dict[str, ComponentSpec]
    sets: dict[str, list[str]]


class AicrQuery(Strict):
    service: str = "any"
    accelerator: str = "any"
    os: str = "any"
    intent: str = "any"
    platform: str = "any"


class AicrSource(Strict):
    query: AicrQuery


class StackFile(Strict):
    id: str
    cloud: str
    accelerator: Literal["NVIDIA", "AMD"]
    kind: Literal["Standard", "Dynamo"] = "Standard"  # the spec.stack it serves
    aicr: AicrSource
    driver: CheckedDriver  # the generated shape, as written
    use: list[str]  # catalogue sets, in order
    components: dict[str, ComponentPatch] = Field(default_factory=dict)


class Variant(Strict):
    """Another kind of stack made from stack files: the same query, driver and patches, other catalogue sets."""

    of: list[str]  # ids of the stack files it is a variant of; each variant's id is <id>-<kind, lower case>
    sets: dict[str, str]  # a set of theirs -> the set taking its place


class Variants(Strict):
    variants: dict[Literal["Dynamo"], Variant]


class NotDeployed(Strict):
    """An image value of the chart the stack does not declare, because our configuration never runs it."""

    path: str  # the image's value path in the chart inventory (or a prefix of it, or a dependency's key)
    disabledBy: str  # noqa: N815 - a value path false or empty in every stack's effective values (tested)
    reason: str


class OtherPullSecret(Strict):
    """A pull-secret value the chart's templates read that the layer leaves alone, and why that is enough."""

    path: str
    reason: str


class ChartFacts(Strict):
    version: str  # the chart version these facts were read at
    chartRepository: str  # noqa: N815
    images: list[ImageRef] = Field(default_factory=list)
    pullSecretRefListPaths: list[str] = Field(default_factory=list)  # noqa: N815 - lists of {name: …}
    pullSecretNameListPaths: list[str] = Field(default_factory=list)  # noqa: N815 - lists of plain names
    pullSecretNamePaths: list[str] = Field(default_factory=list)  # noqa: N815 - one name string
    pullSecretRefPaths: list[str] = Field(default_factory=list)  # noqa: N815 - one {name: …}
    replicas: list[str] = Field(default_factory=list)
    resources: list[str] = Field(default_factory=list)
    podDisruptionBudget: PdbPaths | None = None  # noqa: N815
    extraPodDisruptionBudgets: list[PdbPaths] = Field(default_factory=list)  # noqa: N815
    # Reference facts the runtime does not act on (kept for the humans reviewing).
    globalImageRegistry: str | None = None  # noqa: N815
    driver: dict[str, Any] | None = None
    driverRoot: str | None = None  # noqa: N815
    customResources: dict[str, Any] | None = None  # noqa: N815
    notDeployed: list[NotDeployed] = Field(default_factory=list)  # noqa: N815
    otherPullSecrets: list[OtherPullSecret] = Field(default_factory=list)  # noqa: N815


class Charts(Strict):
    charts: dict[str, ChartFacts]


class StackFileError(Exception):
    pass


T = TypeVar("T", bound=BaseModel)

CATALOGUE, CHARTS, VARIANTS = "platform.yaml", "charts.yaml", "variants.yaml"


def stack_paths(stacks: Path) -> list[Path]:
    """The per-stack files: every YAML file in ``stacks`` but the catalogue, the chart facts and the variants."""
    return [p for p in sorted(stacks.glob("*.yaml")) if p.name not in (CATALOGUE, CHARTS, VARIANTS)]


def every_stack_file(stacks: Path) -> list[StackFile]:
    """The stack files, then the variants made from them."""
    files = [read(p, StackFile) for p in stack_paths(stacks)]
    return files + [made for made, _ in variant_files(stacks, files)]


def variant_files(stacks: Path, files: list[StackFile]) -> list[tuple[StackFile, StackFile]]:
    """Each variant ``variants.yaml`` declares, as a stack file, with the stack file it is made from."""
    path = stacks / VARIANTS
    if not path.is_file():
        return []
    declared = read(path, Variants)
    by_id = {f.id: f for f in files}
    out: list[tuple[StackFile, StackFile]] = []
    for kind, variant in sorted(declared.variants.items()):
        for base_id in variant.of:
            base = by_id.get(base_id)
            if base is None:
                raise StackFileError(f"{VARIANTS}: variants.{kind}.of: no stack file has id {base_id}")
            missing = sorted(set(variant.sets) - set(base.use))
            if missing:
                raise StackFileError(f"{VARIANTS}: variants.{kind}: {base_id} uses no set {', '.join(missing)}")
            use = [variant.sets.get(name, name) for name in base.use]
            made = base.model_copy(update={"id": f"{base_id}-{kind.lower()}", "kind": kind, "use": use})
            out.append((made, base))
    return out


def read(path: Path, model: type[T]) -> T:
    try:
        data = yaml.safe_load(path.read_text())
        return model.model_validate(data)
    except (OSError, yaml.YAMLError) as err:
        raise StackFileError(f"{path}: {err}") from None
    except ValidationError as err:
        raise StackFileError(describe(err, str(path))) from None
