"""Per-pool GPU driver resources (NVIDIADriver, AMD DeviceConfig) from the stack's template."""

from __future__ import annotations

import copy

from function.paths import set_path
from function.stack import Component, Stack

from . import images
from .document import DriverOverride, driver_key
from .registry import Mirrors


def driver_component(
    stack: Stack, drv: DriverOverride, document: str, mirrors: Mirrors
) -> tuple[Component, list[images.ImageSeen], dict[str, str]]:
    """One driver resource as an Object that depends on (and is finalized by) the operator.

    Also returns the images it references and the manifest fields the document set.
    """
    source = stack.driver
    key = driver_key(drv.name)
    manifest = copy.deepcopy(source.resource)
    set_path(manifest, "metadata.name", drv.name)
    set_path(manifest, source.version_path, drv.version)
    set_path(manifest, source.node_selector_path, dict(drv.nodeSelector))
    paths = ["metadata.name", source.version_path, source.node_selector_path]
    found: list[images.ImageSeen] = []
    if drv.image is not None:
        # The pool's own repository, where the operator pushes what it builds
        # and pulls it from: the team named it, so registry rules (and strict,
        # which looks for upstream references) leave it as given.
        set_path(manifest, source.image_path, drv.image)
        paths.append(source.image_path)
    provenance = {f"manifest.{path}": document for path in paths}
    for img in source.images:
        if drv.image is not None and source.image_path in (img.ref, img.repository):
            continue
        changes, seen = images.rewrite_values(manifest, img, mirrors.images, key, f"manifest image {img.name}")
        found.append(seen)
        provenance.update((f"manifest.{c.path}", c.document) for c in changes)
    if mirrors.image_pull_secrets:
        for path in images.write_pull_secrets(
            manifest,
            mirrors.image_pull_secrets,
            name_list_paths=source.pull_secret_name_list_paths,
            ref_paths=source.pull_secret_ref_paths,
        ):
            provenance[f"manifest.{path}"] = mirrors.image_pull_secrets_by
    return (
        Component(
            key=key,
            kind="Object",
            origin=f"override:{document}",
            depends_on=(source.operator,),
            # The operator removes the resource's finalizer: it must outlive it.
            finalized_by_dependencies=True,
            manifest=manifest,
        ),
        found,
        provenance,
    )
