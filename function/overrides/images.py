"""Container image references: parse them, find them, rewrite them.

Charts take an image in one of four shapes (``function.stack.ImageRef``): a full
``host/path:tag`` string; a full ``host/path`` repository (tag elsewhere); a
registry plus a repository name; or a registry *prefix* alone that the chart
puts in front of every image name (kai-scheduler's ``global.registry``).
Raw manifests carry full references in the ``image`` of pod containers.

Every function here works on a private copy the caller made: generated values
are shared by every request and must never change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from function.cache import PYTHON_FACTOR, BoundedCache
from function.errors import InputError
from function.paths import Target, get_path, holder, opened, set_path, target
from function.stack import ImageRef

from .registry import Rules, host_end, record, rewrite_image_name

# Docker's reference grammar (distribution/reference), enough to refuse what a
# kubelet could not pull: lower-case path components, an optional host[:port],
# a tag of word characters, an optional algorithm:hex digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
REFERENCE = re.compile(
    rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?$"
)

DOCKER_HUB = "docker.io"
# Docker Hub's names (``qualify`` rewrites a reference on them to ``docker.io/library/...``).
HUB_HOSTS = (DOCKER_HUB, "index.docker.io", "registry-1.docker.io")
# Docker Hub's official images live under library/ ("ubuntu" is docker.io/library/ubuntu).
DOCKER_LIBRARY = "library"

CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def is_host(segment: str) -> bool:
    """Whether the first path segment names a registry (Docker's own rule)."""
    return "." in segment or ":" in segment or segment == "localhost"


def split_reference(ref: str) -> tuple[str, str]:
    """``host/path:tag@digest`` -> (``host/path``, ``:tag@digest``)."""
    at = ref.find("@")
    rest, digest = (ref[:at], ref[at:]) if at >= 0 else (ref, "")
    colon, slash = rest.rfind(":"), rest.rfind("/")
    if colon > slash:
        return rest[:colon], rest[colon:] + digest
    return rest, digest


def qualify(name: str) -> str:
    """Make Docker Hub's implicit registry (and library/ namespace) explicit."""
    first, _, rest = name.partition("/")
    if rest and is_host(first):
        if first in HUB_HOSTS and "/" not in rest:
            return f"{DOCKER_HUB}/{DOCKER_LIBRARY}/{rest}"
        return name
    return f"{DOCKER_HUB}/{name}" if rest else f"{DOCKER_HUB}/{DOCKER_LIBRARY}/{name}"


# The records below are tuples: a rebuild for new mirrors makes one or more per image of every component, and a
# tuple is made several times faster than a frozen dataclass (and faster still without the Python-level
# ``__new__`` a NamedTuple's constructor runs: _change and _seen, half the cost of the ~125 a rebuild makes).


class Change(NamedTuple):
    """One value the layer wrote, and the rule (document) behind it."""

    path: str
    value: Any
    document: str  # the name of the document behind it


class ImageSeen(NamedTuple):
    """An image reference in the output, after rewriting.

    ``ref`` is None when the reference is unknown here (a chart default the
    stack does not record) and empty when the position is not in use.
    """

    component: str
    where: str
    ref: str | None
    # The reference before any mirror rule (what a mirroring tool copies from).
    source: str | None = None
    # A registry prefix the chart puts before image names, not a pullable image.
    prefix: bool = False


_change = record(Change)
_seen = record(ImageSeen)


def _read(values: dict[str, Any], img: ImageRef, key: str) -> str | None:
    path = getattr(img, key)
    if path is None:
        return None
    missing = object()
    value = get_path(values, path, missing)
    if value is missing:
        value = img.default.get(key)
    if not value and key in img.builtin:
        # Left empty, the controller uses its own default: that is what runs.
        value = img.builtin[key]
    return value if isinstance(value, str) else None


def image_name(values: dict[str, Any], img: ImageRef) -> tuple[str, str] | None:
    """The image's (name, suffix) as the chart will compose it; None when unknown."""
    if img.ref is not None:
        ref = _read(values, img, "ref")
        return split_reference(ref) if ref else None
    registry = _read(values, img, "registry") if img.registry else None
    if img.repository is not None:
        repository = _read(values, img, "repository")
        if not repository:
            return None
        # The tag where the stack knows it (a chart fills an unknown one in itself).
        tag = _read(values, img, "tag") if img.tag else None
        return (f"{registry.rstrip('/')}/{repository}" if registry else repository), f":{tag}" if tag else ""
    return (registry, "") if registry else None


def _split_registry(name: str, repository: str | None) -> tuple[str, str]:
    # Keep the chart's repository name where the new name still ends with it
    # (a mirror rewrote only the registry part); else split at the host.
    if repository and name.endswith("/" + repository):
        return name[: -len(repository) - 1], repository
    host, _, rest = name.partition("/")
    return host, rest


def _split(values: dict[str, Any], img: ImageRef) -> tuple[bool, str | None]:
    """Whether a new name goes to the registry and repository apart, and the repository it then keeps where it can.

    A chart whose registry key is unset and whose repository is a full
    ``host/path`` (cert-manager) takes the whole name in the repository; one
    whose repository is a bare name (GPU Operator operands, bitnami-style
    charts with an empty registry) needs the registry written beside it.
    """
    if img.ref is not None or img.repository is None or img.registry is None:
        return False, None
    repository = _read(values, img, "repository")
    first, _, rest = (repository or "").partition("/")
    if _read(values, img, "registry") or not (rest and is_host(first)):
        return True, repository
    return False, None


def _targets(img: ImageRef, split: tuple[bool, str | None]) -> tuple[Target, ...]:
    """Where a new name for ``img`` goes (``split``: :func:`_split` of the values): the full reference; the
    registry and the repository apart; or a full host/path repository or a registry prefix alone."""
    if img.ref is not None:
        return (target(img.ref),)
    if img.repository is not None and img.registry is not None and split[0]:
        return target(img.registry), target(img.repository)
    # A full host/path repository (the registry key, if any, left unset), or a registry prefix alone.
    path = img.repository if img.repository is not None else img.registry
    return () if path is None else (target(path),)


def _write_name(
    values: dict[str, Any], targets: tuple[Target, ...], name: str, suffix: str, document: str, *, keep: str | None
) -> list[Change]:
    """Write ``name`` + ``suffix`` at ``targets`` (:func:`_targets`); to a registry and a repository apart,
    ``name`` alone, the repository keeping ``keep`` (the chart's repository name) where it can."""
    written = _split_registry(name, keep) if len(targets) > 1 else (name + suffix,)
    changes = []
    for (path, parents, key), value in zip(targets, written, strict=False):  # (no target: nothing written)
        opened(values, parents)[key] = value
        changes.append(_change((path, value, document)))
    return changes


class Reading(NamedTuple):
    """One declared image as a component's values give it, before any mirror rule: what rewriting it needs.

    It depends on the values alone, never on the registry settings: a component
    rebuilt for other mirrors is read once (``build``), and rewritten from it.
    """

    img: ImageRef
    current: tuple[str, str] | None  # (name, suffix) as the chart composes it; None when unknown
    qualified: str  # the name with Docker Hub's implicit parts explicit (a prefix on a host as it is)
    prefix_only: bool  # a registry prefix the chart puts before image names
    split: tuple[bool, str | None]  # see _split
    host_end: int  # where ``qualified``'s host ends: what a catch-all rule replaces (registry.Rules.rewrite)
    targets: tuple[Target, ...]  # where a new name goes (see _targets)


def read_image(values: dict[str, Any], img: ImageRef) -> Reading:
    """What :func:`rewrite_image` needs of ``values`` for ``img``."""
    current = image_name(values, img)
    prefix_only = img.ref is None and img.repository is None
    if current is None:
        return Reading(img, None, "", prefix_only, (False, None), 0, ())
    name = current[0]
    qualified = name if prefix_only and is_host(name.split("/", 1)[0]) else qualify(name)
    split = _split(values, img)
    return Reading(img, current, qualified, prefix_only, split, host_end(qualified), _targets(img, split))


def rewrite_image(
    values: dict[str, Any], reading: Reading, rules: Rules, key: str, where: str
) -> tuple[list[Change], ImageSeen]:
    """Rewrite one declared image, read before (:func:`read_image`), in place, writing it explicitly."""
    if reading.current is None:
        # A registry prefix left empty is not in use: the chart's own per-image
        # registries apply (kube-prometheus-stack's global.imageRegistry).
        return [], ImageSeen(key, where, "" if reading.prefix_only else None)
    name, suffix = reading.current
    qualified, prefix_only = reading.qualified, reading.prefix_only
    rewrite = rules.rewrite(qualified, reading.host_end)
    if rewrite is None:
        return [], _seen((key, where, name + suffix, qualified + suffix, prefix_only))
    new, rule = rewrite
    written = suffix if reading.img.ref is not None else ""  # (else the tag stays where the chart has it)
    changes = _write_name(values, reading.targets, new, written, rule.document, keep=reading.split[1])
    return changes, _seen((key, where, new + suffix, qualified + suffix, prefix_only))


def seen_from(seen: ImageSeen, before: Reading) -> ImageSeen:
    """``seen`` with the source ``before`` (a reading of the values before any image was rewritten) names."""
    if before.current is None or seen.source is None:
        return seen
    return seen._replace(source=before.qualified + before.current[1])


def rewrite_values(
    values: dict[str, Any], img: ImageRef, rules: Rules, key: str, where: str
) -> tuple[list[Change], ImageSeen]:
    """Rewrite one declared image of a chart's values in place, writing it explicitly."""
    return rewrite_image(values, read_image(values, img), rules, key, where)


def set_image(values: dict[str, Any], img: ImageRef, ref: str, document: str, where: str) -> list[Change]:
    """The ``image`` shortcut: write a full reference into the image's declared paths."""
    if not REFERENCE.match(ref):
        raise InputError(f"{where}: {ref!r} is not an image reference (host/path:tag or host/path@sha256:...)")
    name, suffix = split_reference(ref)
    if img.ref is None and img.repository is None:
        raise InputError(
            f"{where}: image {img.name} takes only a registry prefix ({img.registry}); "
            "point it at a mirror with registry.images instead"
        )
    split = _split(values, img)
    changes = _write_name(
        values, _targets(img, split), name, "" if img.ref is None else suffix, document, keep=split[1]
    )
    if img.ref is None and suffix:
        tag = suffix[1:] if suffix.startswith(":") else None
        if img.tag is None or tag is None:
            what = "a tag" if img.tag is None else "a digest without a tag"
            raise InputError(f"{where}: image {img.name} has no value path for {what}; give {name}:<tag>")
        set_path(values, img.tag, tag)
        changes.append(Change(img.tag, tag, document))
    return changes


def pod_containers(node: Any, path: str = "") -> Iterator[tuple[dict[str, Any], str, dict[str, Any]]]:
    """Every container of every pod spec in a manifest, at any depth: (container, path, pod spec)."""
    # Only maps and lists are descended into (and given a path): most values are scalars.
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                here = f"{path}.{key}" if path else key
                for i, container in enumerate(value):
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        yield container, f"{here}[{i}]", node
            elif isinstance(value, dict | list):
                yield from pod_containers(value, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, dict | list):
                yield from pod_containers(item, f"{path}[{i}]")


def rewrite_manifest(
    containers: Iterable[tuple[dict[str, Any], str, dict[str, Any]]],
    rules: Rules,
    pull_secrets: tuple[str, ...],
    secrets_document: str,
    key: str,
) -> tuple[list[Change], list[ImageSeen]]:
    """Rewrite the images of a manifest's pod ``containers`` (:func:`pod_containers`'s), in place."""
    changes: list[Change] = []
    found: list[ImageSeen] = []
    pods: dict[int, tuple[dict[str, Any], str]] = {}
    for container, path, pod in containers:
        pods.setdefault(id(pod), (pod, path.rsplit(".", 1)[0]))
        ref = container["image"]
        name, suffix = split_reference(ref)
        qualified = qualify(name)
        rewrite = rewrite_image_name(rules, qualified) if rules else None
        if rewrite is not None:
            container["image"] = rewrite.value + suffix
            changes.append(Change(f"{path}.image", container["image"], rewrite.rule.document))
        found.append(ImageSeen(key, f"manifest.{path}.image", container["image"], qualified + suffix))
    if pull_secrets:
        for pod, pod_path in pods.values():
            merged = merge_pull_secrets(pod.get("imagePullSecrets"), pull_secrets)
            if merged != pod.get("imagePullSecrets"):
                pod["imagePullSecrets"] = merged
                changes.append(Change(f"{pod_path}.imagePullSecrets", merged, secrets_document))
    return changes, found


def merge_pull_secrets(
    existing: Any, names: tuple[str, ...], plain: bool | None = None, written: list[Any] | None = None
) -> list[Any]:
    """Add secret names to a pull-secret list, keeping what is there.

    ``plain`` picks the item shape: plain names (the GPU Operator's lists) or
    ``{name: x}`` (pod specs, most charts); None follows the list's own shape,
    and an empty or absent list gets the pod-spec shape.

    The result may be shared (see :func:`pull_secret_list`): ``existing``
    itself when it names them all, else one list per (names, shape) where
    nothing was (``written``, when the caller looked it up). Never change it
    in place.
    """
    if not (isinstance(existing, list) and existing):
        # Nothing there (most paths of the generated values): the names, each once.
        return pull_secret_list(names, bool(plain)) if written is None else written
    if plain is None:
        plain = all(isinstance(e, str) for e in existing)
    have = {e if isinstance(e, str) else e.get("name") for e in existing if isinstance(e, str | dict)}
    missing = [name for name in dict.fromkeys(names) if name not in have]
    if not missing:
        return existing  # what was there names them all already (the list is equal: keep it)
    return [*existing, *(name if plain else {"name": name} for name in missing)]


# The pull-secret lists written where a chart has none, one per (secret names,
# item shape): every rebuild with the same secrets writes them at ~36 paths of
# ~10 components. Nothing changes a built component's values once built
# (tests/test_built_values.py checks a render, explain and later plans leave
# them as built), so one object serves them all: made once, not ~80 objects per
# plan for the collector to walk while the plan lives, and encoded once per
# lasting part (function.encode). Few distinct secret lists exist per fleet.
_LISTS: BoundedCache[tuple[tuple[str, ...], bool], list[Any]] = BoundedCache("pull-secret lists")


def pull_secret_list(names: tuple[str, ...], plain: bool) -> list[Any]:
    """The names, each once, as plain names or ``{name: x}`` items: one shared list per (names, shape)."""
    hit = _LISTS.get((names, plain))
    if hit is None:
        unique = dict.fromkeys(names)
        made = [name if plain else {"name": name} for name in unique]
        # (its names' bytes, plus a list and an item's overhead per name)
        hit = _LISTS.put((names, plain), made, (sum(map(len, unique)) + 128) * PYTHON_FACTOR)
    return hit


def write_pull_secrets(
    target: dict[str, Any],
    names: tuple[str, ...],
    *,
    ref_list_paths: tuple[str, ...] = (),
    name_list_paths: tuple[str, ...] = (),
    name_paths: tuple[str, ...] = (),
    ref_paths: tuple[str, ...] = (),
) -> list[str]:
    """Add pull secrets at every declared path, in the shape each path takes; the paths written.

    ``ref_list_paths`` take ``[{name: x}]``, ``name_list_paths`` ``[x]``,
    ``name_paths`` one name and ``ref_paths`` one ``{name: x}``; the last two
    get the first secret (the mirror's credentials come first).
    """
    for paths, plain in ((ref_list_paths, False), (name_list_paths, True)):
        written = pull_secret_list(names, plain) if paths else None  # (looked up once for all the paths)
        for path in paths:
            node, key = holder(target, path)
            node[key] = merge_pull_secrets(node.get(key), names, plain, written)
    for path in name_paths:
        set_path(target, path, names[0])
    for path in ref_paths:
        # The {name: x} of a one-name list, shared as it is, unless another of
        # these paths goes below this one: writing there would change it.
        below = path + "."
        nested = any(other.startswith(below) for other in ref_paths)
        set_path(target, path, {"name": names[0]} if nested else pull_secret_list(names[:1], False)[0])
    return [*ref_list_paths, *name_list_paths, *name_paths, *ref_paths]
