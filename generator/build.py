"""Resolve every stack file into one baked-in Python module per stack."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from function.__version__ import __version__
from function.paths import get_path
from function.stack import AicrProvenance, ChartRef, Component, Provenance, Stack, module_name, to_data
from function.values import deep_merge
from generator import comments, emit, lock
from generator.stackfile import (
    CATALOGUE,
    CHARTS,
    VARIANTS,
    Catalogue,
    ChartFacts,
    Charts,
    ComponentPatch,
    ComponentSpec,
    StackFile,
    StackFileError,
    read,
    stack_paths,
    variant_files,
)

REPO = Path(__file__).resolve().parents[1]
STACKS_DIR = REPO / "stacks"
FACTS_DIR = REPO / "facts"
MANIFESTS = "manifests"  # facts/manifests/: the external manifests stacks ship, by file name (and extra-manifests/)


@dataclass(frozen=True)
class Inputs:
    stacks: Path = STACKS_DIR
    facts: Path = FACTS_DIR


def _topological(components: dict[str, Component]) -> list[str]:
    """Dependencies first, alphabetical among equals (as AICR orders its deployments)."""
    pending = {key: set(c.depends_on) for key, c in components.items()}
    order: list[str] = []
    while pending:
        ready = sorted(k for k, deps in pending.items() if not deps)
        if not ready:
            raise StackFileError(f"dependency cycle among: {', '.join(sorted(pending))}")
        key = ready[0]
        order.append(key)
        del pending[key]
        for deps in pending.values():
            deps.discard(key)
    return order


def _chart_facts(chart: ChartRef, charts: Charts, key: str, facts_dir: Path) -> dict[str, Any]:
    """Where the chart takes images, replicas, resources, budgets and pull secrets: Component fields by name."""
    facts: ChartFacts | None = charts.charts.get(chart.name)
    if facts is None:
        # Without its image paths a registry mirror would silently miss this chart.
        raise StackFileError(f"component {key}: chart {chart.name} has no entry in stacks/charts.yaml")
    if (facts.version, facts.chartRepository) != (chart.version, chart.repository):
        # Value paths move between chart versions: facts read at another
        # version could leave images pointing upstream behind a mirror.
        raise StackFileError(
            f"component {key}: chart {chart.name} {chart.version} from {chart.repository}, but "
            f"stacks/charts.yaml describes {facts.version} from {facts.chartRepository}: re-check its value paths"
        )
    pdbs = [facts.podDisruptionBudget] if facts.podDisruptionBudget else []
    budgets = (*pdbs, *facts.extraPodDisruptionBudgets)
    if budgets:
        defaults = _chart_defaults(chart, facts_dir)
        budgets = tuple(
            replace(b, defaulted=tuple(p for p in (b.min_available, b.max_unavailable) if p and _holds(defaults, p)))
            for b in budgets
        )
    return {
        "images": tuple(facts.images),
        "replicas": tuple(facts.replicas),
        "resources": tuple(facts.resources),
        "pull_secret_ref_list_paths": tuple(facts.pullSecretRefListPaths),
        "pull_secret_name_list_paths": tuple(facts.pullSecretNameListPaths),
        "pull_secret_name_paths": tuple(facts.pullSecretNamePaths),
        "pull_secret_ref_paths": tuple(facts.pullSecretRefPaths),
        "pod_disruption_budgets": budgets,
    }


def _chart_defaults(chart: ChartRef, facts_dir: Path) -> dict[str, Any]:
    """The chart's default values with its subcharts', as its inventory records them (facts/charts/)."""
    path = facts_dir / "charts" / f"{chart.name}-{chart.version}.yaml"
    if not path.is_file():
        raise StackFileError(f"chart {chart.name} {chart.version}: no inventory {path.name} in facts/charts")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    values: dict[str, Any] = yaml.load(path.read_text(), Loader=loader)["values"]
    return values


def _holds(values: dict[str, Any], path: str) -> bool:
    """Whether the key at ``path`` is in ``values`` (whatever it holds, null included)."""
    parent, _, leaf = path.rpartition(".")
    node = get_path(values, parent) if parent else values
    return isinstance(node, dict) and leaf in node


def _strip(doc: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    doc = deep_merge(doc, {})
    for path in paths:
        parent, _, leaf = path.rpartition(".")
        node = get_path(doc, parent) if parent else doc
        if isinstance(node, dict):
            node.pop(leaf, None)
    return doc


def _object(key: str, manifest: dict[str, Any], spec: ComponentSpec | None, origin: str) -> Component:
    if spec is None:
        return Component(key=key, kind="Object", origin=origin, manifest=manifest)
    return Component(
        key=key,
        kind="Object",
        origin=origin,
        manifest=manifest,
        readiness=spec.readiness,
        xr_fields=spec.xrFields,
        depends_on=tuple(spec.dependsOn),
        finalized_by_dependencies=spec.finalizedByDependencies,
        images=tuple(spec.images),
        pull_secret_ref_list_paths=tuple(spec.pullSecretRefListPaths),
    )


def _object_key(parent: str, doc: dict[str, Any]) -> str:
    return f"{parent}-{doc['kind'].lower()}-{doc['metadata']['name']}"


def _expand(
    *,
    key: str,
    spec: ComponentSpec,
    patch: ComponentPatch,
    recipe: lock.LockedQuery,
    taken: dict[str, str],
    charts: Charts,
    facts: Path,
) -> list[Component]:
    """One catalogue entry → its generated components (a Release may bring Objects)."""
    depends = [*spec.dependsOn, *patch.dependsOn]
    skip = {*spec.skipManifests, *patch.skipManifests}
    if spec.manifest is not None:
        return [_object(key, deep_merge(spec.manifest, patch.manifest), spec, "platform")]
    if spec.manifestFile is not None:
        path = facts / spec.manifestFile.folder / spec.manifestFile.file
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        except OSError as err:
            raise StackFileError(f"component {key}: {err}") from None
        return [
            _object(
                spec.manifestFile.keyPrefix + d["metadata"]["name"],
                _strip(d, spec.manifestFile.strip),
                spec,
                "platform",
            )
            for d in docs
        ]
    values = deep_merge(spec.values, patch.values)
    extra: list[Component] = []
    if spec.aicr is not None:
        resolved = recipe.components.get(spec.aicr)
        if resolved is None:
            why = "resolved but not locked: run `./dev refresh`" if spec.aicr in recipe.notTaken else "not resolved"
            raise StackFileError(f"component {key}: AICR component {spec.aicr} is {why} for this stack's query")
        chart = ChartRef(name=resolved.chart, repository=resolved.repository, version=resolved.version)
        namespace = spec.namespace or resolved.namespace
        values = deep_merge(resolved.values, values)
        # Dependencies on AICR components this stack does not take are dropped.
        depends = [taken[d] for d in resolved.dependencyRefs if d in taken] + depends
        origin = f"aicr:{spec.aicr}"
        for manifest in resolved.manifests:
            if manifest.path in skip:
                continue
            extra += [_object(_object_key(key, d), d, None, origin) for d in manifest.objects]
    elif spec.chart is not None:
        chart = spec.chart
        namespace = spec.namespace or ""
        origin = "platform"
    else:
        raise StackFileError(f"component {key}: needs one of aicr, chart, manifest, manifestFile")
    release = Component(
        key=key,
        kind="Release",
        origin=origin,
        chart=chart,
        # The release names clusters already run: mp-<chart>, short and unlikely to collide.
        release_name=spec.releaseName or f"mp-{chart.name}",
        namespace=namespace,
        values=values,
        depends_on=tuple(sorted(set(depends))),
        finalized_by_dependencies=spec.finalizedByDependencies,
        **_chart_facts(chart, charts, key, facts),
    )
    return [release, *extra]


def build_stack(
    stack_file: StackFile, catalogue: Catalogue, charts: Charts, locked: lock.Lock, inputs: Inputs
) -> tuple[Stack, dict[str, str]]:
    """The stack, and for each generated component the catalogue entry it comes from."""
    recipe = locked.find(stack_file.aicr.query, stack_file.id)
    keys: list[str] = []
    for set_name in stack_file.use:
        if set_name not in catalogue.sets:
            raise StackFileError(
                f"{stack_file.id}: use: unknown set {set_name}; sets: {', '.join(sorted(catalogue.sets))}"
            )
        keys += [k for k in catalogue.sets[set_name] if k not in keys]
    unknown = sorted(set(keys) - set(catalogue.components)) + sorted(set(stack_file.components) - set(keys))
    if unknown:
        raise StackFileError(f"{stack_file.id}: components not in the catalogue or not used: {', '.join(unknown)}")
    taken = {aicr_name: k for k in keys if (aicr_name := catalogue.components[k].aicr)}
    generated: dict[str, Component] = {}
    sources: dict[str, str] = {}
    for key in keys:
        patch = stack_file.components.get(key, ComponentPatch())
        for component in _expand(
            key=key,
            spec=catalogue.components[key],
            patch=patch,
            recipe=recipe,
            taken=taken,
            charts=charts,
            facts=inputs.facts,
        ):
            generated[component.key] = component
            sources[component.key] = key
    for component in generated.values():
        missing = [d for d in component.depends_on if d not in generated]
        if missing:
            raise StackFileError(f"{stack_file.id}: {component.key} depends on {', '.join(missing)}, not in the stack")
    if stack_file.driver.resource and stack_file.driver.operator not in generated:
        raise StackFileError(f"{stack_file.id}: driver.operator {stack_file.driver.operator} is not in the stack")
    stack = Stack(
        id=stack_file.id,
        cloud=stack_file.cloud,
        accelerator=stack_file.accelerator,
        kind=stack_file.kind,
        provenance=Provenance(
            generator=__version__,
            aicr=AicrProvenance(
                version=locked.aicr.version,
                commit=locked.aicr.commit,
                query=stack_file.aicr.query.model_dump(),
                applied_overlays=tuple(recipe.appliedOverlays),
            ),
        ),
        driver=stack_file.driver,
        components=tuple(generated[k] for k in _topological(generated)),
    )
    return stack, sources


def _titled(title: str, lines: tuple[str, ...]) -> tuple[str, ...]:
    """Comments under the place they were read from; nothing when there are none."""
    return (title, *(f"  {line}" if line else "" for line in lines)) if lines else ()


def _component_comments(key: str, component: Component, texts: dict[str, str]) -> tuple[str, ...]:
    """The why-comments of a catalogue entry and of its chart's facts, each under the place it comes from."""
    out: list[str] = []
    for file, path in (
        (CATALOGUE, ("components", key)),
        (CHARTS, ("charts", component.chart.name if component.chart else "")),
    ):
        out += _titled(f"stacks/{file} {'.'.join(path)}:", comments.section(texts[file], *path) if path[1] else ())
    return tuple(out)


def generate(inputs: Inputs) -> dict[str, str]:
    """Every generated file's name and text."""
    catalogue = read(inputs.stacks / CATALOGUE, Catalogue)
    charts = read(inputs.stacks / CHARTS, Charts)
    locked = lock.read(inputs.facts)
    texts = {name: (inputs.stacks / name).read_text() for name in (CATALOGUE, CHARTS)}
    variants = inputs.stacks / VARIANTS
    variant_text = variants.read_text() if variants.is_file() else ""
    # (the file its comments come from, the stack file, its own comments beyond that file's, the stack)
    built: list[tuple[Path, StackFile, tuple[str, ...], Stack, dict[str, str]]] = []
    files: dict[str, str] = {}
    stack_files = [(path, read(path, StackFile)) for path in stack_paths(inputs.stacks)]
    by_id = {f.id: path for path, f in stack_files}
    made = [
        (
            by_id[base.id],
            variant,
            _titled(
                f"stacks/{VARIANTS} variants.{variant.kind}:", comments.section(variant_text, "variants", variant.kind)
            ),
        )
        for variant, base in variant_files(inputs.stacks, [f for _, f in stack_files])
    ]
    for path, stack_file, extra in [(p, f, ()) for p, f in stack_files] + made:
        name = f"{module_name(stack_file.cloud, stack_file.accelerator, stack_file.kind)}.py"
        if name in files:
            raise StackFileError(
                f"{path.name}: a second {stack_file.kind} stack for {stack_file.cloud}/{stack_file.accelerator}"
            )
        files[name] = ""
        built.append((path, stack_file, extra, *build_stack(stack_file, catalogue, charts, locked, inputs)))
    taken: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for _, _, _, stack, _ in built:
        for component in stack.components:
            taken.setdefault(component.key, []).append((stack.id, to_data(component)))
    names = emit.name_blocks(taken)
    blocks: dict[str, emit.Block] = {}
    commented: set[str] = set()  # catalogue entries whose comments a block carries already
    for path, stack_file, extra, stack, sources in built:
        refs: list[tuple[str, tuple[str, ...]]] = []
        text = path.read_text()
        patched: set[str] = set()
        keys = {c.key for c in stack.components}
        for component in stack.components:
            key, source = component.key, sources[component.key]
            block = names[(stack.id, key)]
            # A Release carries its patch's comments; objects a manifest file brings, the first of them.
            first = key == source or (source not in keys and source not in patched)
            patch = comments.section(text, "components", source) if first else ()
            patched.add(source)
            refs.append((block, _titled(f"stacks/{path.name} components.{source}:", patch)))
            if block not in blocks:
                why = _component_comments(source, component, texts) if key == source or source not in commented else ()
                commented.add(source)
                blocks[block] = emit.Block(
                    name=block,
                    data=to_data(component),
                    stacks=tuple(sorted(s for (s, k), n in names.items() if n == block)),
                    comments=why,
                )
        own = [
            *extra,
            *(
                line
                for s in ("aicr", "driver")
                for line in _titled(f"stacks/{path.name} {s}:", comments.section(text, s))
            ),
        ]
        module = emit.StackModule(stack=stack, refs=tuple(refs), comments=tuple(own))
        files[f"{module_name(stack_file.cloud, stack_file.accelerator, stack_file.kind)}.py"] = emit.module_text(module)
    files[f"{emit.COMPONENTS_MODULE}.py"] = emit.components_text(sorted(blocks.values(), key=lambda b: b.name))
    files["__init__.py"] = emit.index_text(sorted((f.cloud, f.accelerator, f.kind) for _, f, _, _, _ in built), locked)
    return files
