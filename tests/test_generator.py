"""The build-time generator: output is current, deterministic and carries its provenance.

It builds from the repository alone (``stacks/`` and ``facts/``), as on a fresh clone.
"""

from __future__ import annotations

import ast
import difflib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.build import FACTS_DIR, REPO, Inputs, generate
from generator.stackfile import StackFileError


def _inputs(stacks: Path | None = None, facts: Path = FACTS_DIR) -> Inputs:
    return Inputs(facts=facts, **({"stacks": stacks} if stacks else {}))


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return generate(_inputs())


def test_committed_output_is_what_the_generator_produces(generated: dict[str, str]) -> None:
    committed = {p.name: p.read_text() for p in (REPO / "function" / "generated").glob("*.py")}
    assert committed == generated


def test_output_is_deterministic(generated: dict[str, str]) -> None:
    assert generate(_inputs()) == generated


def test_header_names_aicr_version_commit_query_and_input_digest(generated: dict[str, str]) -> None:
    header = generated["gke_nvidia.py"].split('"""')[1]
    assert "AICR v0.11.1 (bc05c6be7859cee7ce6680b93333ed03ba795f88)" in header
    assert "query: service=gke, os=cos, intent=inference" in header
    assert "Inputs: sha256:" in header


_IMPORT = "from function.generated.components import COMPONENTS as C"


def _stack(generated: dict[str, str], name: str) -> dict[str, Any]:
    """The module as Python imports it, taking its blocks from the components module generated beside it."""
    shared: dict[str, Any] = {}
    exec(compile(generated["components.py"], "components.py", "exec"), shared)
    assert _IMPORT in generated[name]
    namespace: dict[str, Any] = {"C": shared["COMPONENTS"]}
    exec(compile(generated[name].replace(_IMPORT, ""), name, "exec"), namespace)
    stack: dict[str, Any] = namespace["STACK"]
    return stack


def _component(stack: dict[str, Any], key: str) -> dict[str, Any]:
    return next(c for c in stack["components"] if c["key"] == key)


def test_eks_takes_aicr_versions_and_the_platform_layer(generated: dict[str, str]) -> None:
    stack = _stack(generated, "eks_nvidia.py")
    gpu = _component(stack, "gpu-operator")
    assert gpu["chart"] == {
        "name": "gpu-operator",
        "repository": "https://helm.ngc.nvidia.com/nvidia",
        "version": "v25.10.1",
    }
    assert gpu["origin"] == "aicr:gpu-operator"
    assert gpu["values"]["driver"]["enabled"] is False  # the AL2023 NVIDIA AMI ships the driver
    assert gpu["values"]["driver"]["version"] == "580.105.08"  # AICR's value survives beside ours
    assert gpu["dependsOn"] == ["cert-manager", "prometheus"]  # AICR's dependencyRefs, mapped to our keys
    assert stack["provenance"]["aicr"]["appliedOverlays"] == ["base", "monitoring-hpa", "eks", "eks-inference"]
    assert _component(stack, "cert-manager")["chart"]["version"] == "v1.17.2"
    images = {i["name"] for i in gpu["images"]}
    assert {"operator", "driver", "toolkit", "device-plugin"} <= images


def test_gaie_crds_are_objects_without_server_owned_fields(generated: dict[str, str]) -> None:
    crd = _component(_stack(generated, "aks_nvidia.py"), "gaie-crd-inferencepools.inference.networking.k8s.io")
    assert crd["kind"] == "Object"
    assert "status" not in crd["manifest"]
    assert "creationTimestamp" not in crd["manifest"]["metadata"]


def test_gke_takes_aicr_manifests_rendered_from_their_templates(generated: dict[str, str]) -> None:
    stack = _stack(generated, "gke_nvidia.py")
    quota = _component(stack, "gpu-operator-resourcequota-gcp-critical-pods")
    assert quota["manifest"]["metadata"]["namespace"] == "gpu-operator"
    config = _component(stack, "gpu-operator-configmap-dcgm-exporter")
    assert config["manifest"]["metadata"]["labels"]["helm.sh/chart"] == "gpu-operator-25.10.1"
    assert "{{" not in generated["gke_nvidia.py"]  # no unrendered template ever ships


def _copy_stacks(tmp_path: Path) -> Path:
    stacks = tmp_path / "stacks"
    shutil.copytree(REPO / "stacks", stacks)
    return stacks


def test_unknown_catalogue_component_is_a_readable_error(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    eks = yaml.safe_load((stacks / "eks.yaml").read_text())
    eks["components"]["gpu-operater"] = {"values": {}}
    (stacks / "eks.yaml").write_text(yaml.safe_dump(eks))
    with pytest.raises(StackFileError, match="eks-nvidia: components not in the catalogue or not used: gpu-operater"):
        generate(_inputs(stacks))


def test_chart_facts_read_at_another_version_are_refused(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    text = (stacks / "platform.yaml").read_text().replace("version: v0.8.0}", "version: v0.9.0}")
    (stacks / "platform.yaml").write_text(text)
    with pytest.raises(StackFileError, match=r"chart lws v0.9.0 .* describes v0.8.0 .* re-check its value paths"):
        generate(_inputs(stacks))


def test_check_names_stale_files_and_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    shutil.copytree(REPO / "function" / "generated", out)
    (out / "components.py").write_text(
        (out / "components.py").read_text().replace("'version': 'v1.17.2'", "'version': 'v1.17.1'", 1)
    )
    run = subprocess.run(
        [sys.executable, "-m", "generator", "--check", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert run.stdout.splitlines() == ["stale: function/generated/components.py (2 lines differ)"]
    assert "run `python -m generator`" in run.stderr


def test_a_query_the_lock_lacks_is_refused(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    text = (stacks / "gke.yaml").read_text().replace("os: cos, ", "")
    (stacks / "gke.yaml").write_text(text)
    with pytest.raises(StackFileError, match=r"gke-nvidia: the AICR lock has no entry for its query .*\./dev refresh"):
        generate(_inputs(stacks))


def test_an_aicr_component_the_lock_does_not_take_is_refused(tmp_path: Path) -> None:
    stacks = _copy_stacks(tmp_path)
    platform = yaml.safe_load((stacks / "platform.yaml").read_text())
    platform["components"]["cert-manager"]["aicr"] = "kgateway"  # resolved by AICR, not taken by the catalogue
    (stacks / "platform.yaml").write_text(yaml.safe_dump(platform))
    with pytest.raises(StackFileError, match=r"kgateway is resolved but not locked: run `\./dev refresh`"):
        generate(_inputs(stacks))


def test_a_missing_lock_is_a_readable_error(tmp_path: Path) -> None:
    with pytest.raises(StackFileError, match=r"facts/aicr/lock.yaml: .*No such file"):
        generate(_inputs(facts=tmp_path / "facts"))


def _blocks(text: str) -> dict[str, str]:
    """A components module by block name (the header under ""), each block with its comments."""
    head, *blocks = text.split("\n# --- ")
    return {"": head, **{b.split(":", 1)[0]: b for b in blocks}}


def test_a_chart_bump_changes_one_block_and_its_module_header(tmp_path: Path, generated: dict[str, str]) -> None:
    stacks = _copy_stacks(tmp_path)
    for name, old, new in (
        ("platform.yaml", "version: v0.8.0}", "version: v0.9.0}"),
        ("charts.yaml", "  lws:\n    version: v0.8.0", "  lws:\n    version: v0.9.0"),
    ):
        text = (stacks / name).read_text()
        assert text.count(old) == 1
        (stacks / name).write_text(text.replace(old, new))
    bumped = generate(_inputs(stacks))
    assert sorted(n for n in generated if bumped[n] != generated[n]) == ["components.py"]
    before, after = _blocks(generated["components.py"]), _blocks(bumped["components.py"])
    assert before.keys() == after.keys()
    assert sorted(n for n in before if before[n] != after[n]) == ["", "leader-worker-set"]
    changed = [
        line
        for line in difflib.unified_diff(before[""].splitlines(), after[""].splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert [line[:16] for line in changed] == ["-Inputs: sha256:", "+Inputs: sha256:"]
    assert "'version': 'v0.9.0'" in after["leader-worker-set"]


def test_each_distinct_component_is_generated_once(generated: dict[str, str]) -> None:
    blocks = _blocks(generated["components.py"])
    del blocks[""]
    bodies = ["\n".join(line for line in b.splitlines()[1:] if not line.startswith("#")) for b in blocks.values()]
    assert len({b.split(" = ", 1)[1] for b in bodies}) == len(bodies)
    # Variants are overlays on what they share: a chart bump changes the shared block alone.
    assert "SHARED['gpu-operator'] = {" in generated["components.py"]
    variants = [b for name, b in blocks.items() if name.startswith("gpu-operator@")]
    assert len(variants) > 1
    assert all("deep_merge(SHARED['gpu-operator']" in b and "'chart':" not in b for b in variants)
    for name, text in generated.items():
        if name not in ("__init__.py", "components.py"):
            listed = text.split("    'components': [\n", 1)[1].splitlines()[:-2]
            # Stack modules take components by name only, each maybe under its stack file's comments.
            assert all(line.startswith(("        C['", "        #")) for line in listed), name


def test_fields_read_key_kind_origin_first_and_empty_ones_are_left_out(generated: dict[str, str]) -> None:
    for component in _stack(generated, "eks_nvidia.py")["components"]:
        assert list(component)[:3] == ["key", "kind", "origin"]
        assert all(v not in ("", [], {}) for v in component.values()), component["key"]


def test_why_comments_from_stacks_are_carried(generated: dict[str, str]) -> None:
    cert_manager = _blocks(generated["components.py"])["cert-manager"]
    assert "# stacks/platform.yaml components.cert-manager:" in cert_manager
    assert "#   The platform's cert-manager owns its CRDs; keep: false so an uninstall" in cert_manager
    assert "# stacks/charts.yaml charts.cert-manager:" in cert_manager
    assert "#   version: AICR pin" in cert_manager
    eks = generated["eks_nvidia.py"]
    patch = "# stacks/eks.yaml components.gpu-operator:\n        #   Installed by the node image"
    assert patch + ": an operator-managed copy would fight it.\n        C['gpu-operator@" in eks
    assert (
        "# stacks/eks.yaml driver:\n#   The AL2023_x86_64_NVIDIA AMI ships the driver and the container toolkit." in eks
    )


def test_each_header_digests_its_own_module(generated: dict[str, str]) -> None:
    digests = {name: text.split("Inputs: ", 1)[1].split()[0] for name, text in generated.items() if "Inputs: " in text}
    assert len(digests) == len(generated) - 1  # every module but the index
    assert len(set(digests.values())) == len(digests)


def test_the_generator_modules_import_one_way() -> None:
    """No import cycle among generator/ modules, counting imports inside functions too."""
    imports: dict[str, set[str]] = {}
    for path in (REPO / "generator").glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "generator":
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("generator."):
                found.add((node.module or "").split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("generator.")}
        imports[path.stem] = found
    assert imports["gotemplate"] == {"aicr_yaml"}  # the resolver imports the template engine, not the reverse
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module not in done:
            for dep in sorted(imports.get(module, ())):
                visit(dep, (*path, module))
            done.add(module)

    for module in sorted(imports):
        visit(module, ())
