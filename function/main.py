"""The ``function`` command: serve gRPC the Crossplane way, or render offline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml
from crossplane.function import cli as sdkcli
from crossplane.function import logging, runtime

from function import cache, manifests, offline, overrides, server, stack
from function.cache import DEFAULT_BUDGET_MB, MIB
from function.errors import InputError
from function.files import INPUT_OPTION, fail, read_documents, read_one
from function.fn import FunctionRunner
from function.inputs import GRPC_MAX_RECEIVE_BYTES
from function.offline import RenderError, fetch_resources
from function.overrides import explain as explaining  # the module; `explain` is the command
from function.overrides import pulls
from function.overrides.collect import INPUT_API_VERSION
from function.render_output import dump_yaml, render_documents
from function.stack import select_stack
from function.tree import to_jsonable
from function.validate import validate
from function.xr import parse_xr


def _warm_up() -> None:
    """Before the first request arrives: load and convert every stack, read what planning and rendering read
    of it whatever the documents, then set the collector for serving."""
    for loaded in stack.every():
        overrides.prepare(loaded)
    server.settle_heap()


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        versions = stack.versions()
        click.echo(f"function {versions['function']}")
        click.echo(f"generator {versions['generator']}")
        click.echo(f"aicr {versions['aicr']} {versions['aicrCommit']}")
        ctx.exit()


@click.group(invoke_without_command=True)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the function version, and the generator version and AICR release its stacks were generated with.",
)
@sdkcli.standard_options
@click.option(
    "--reuse-port",
    is_flag=True,
    envvar="REUSE_PORT",
    help="Let several processes serve one address (SO_REUSEPORT; the kernel spreads connections). "
    "Off: a busy port is an error.",
)
@click.option(
    "--cache-size-mb",
    type=click.IntRange(min=0),
    default=DEFAULT_BUDGET_MB,
    show_default=True,
    envvar="CACHE_SIZE_MB",
    help="MiB shared by every cache (responses, plans, parsed documents ...). Smaller: more requests are computed "
    "again, never answered differently.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    debug: bool,
    address: str,
    tls_certs_dir: str | None,
    insecure: bool,
    max_recv_message_size: int,
    max_send_message_size: int | None,
    reuse_port: bool,
    cache_size_mb: int,
) -> None:
    """Serve the compose-serving-stack function, or render a ServingStack offline.

    A fork passes its own runner: ``cli(obj=FunctionRunner(transforms=[...]))``.
    """
    if ctx.invoked_subcommand is not None:
        return
    # Not sdkcli.run: given --insecure and a certificates directory it binds a
    # TLS and a plaintext listener on one address, and it takes no other options.
    logging.configure(logging.Level.DEBUG if debug else logging.Level.INFO)
    log = logging.get_logger()
    if insecure and tls_certs_dir is not None:
        log.warning("--insecure given: ignoring the TLS certificates directory", dir=tls_certs_dir)
        tls_certs_dir = None
    if not insecure and tls_certs_dir is None:
        fail("either --insecure or --tls-certs-dir (TLS_SERVER_CERTS_DIR) is required")
    if max_recv_message_size <= 0 or (max_send_message_size is not None and max_send_message_size <= 0):
        fail("--max-recv-message-size and --max-send-message-size are in MB and must be positive")
    try:
        creds = runtime.load_credentials(tls_certs_dir) if tls_certs_dir is not None else None
    except OSError as err:
        fail(f"cannot read TLS certificates from {tls_certs_dir}: {err.strerror}: {err.filename}")
    cache.set_budget(cache_size_mb)
    _warm_up()
    listen = server.Listen(
        address=address,
        creds=creds,
        max_recv_mb=max_recv_message_size,
        max_send_mb=max_send_message_size if max_send_message_size is not None else max_recv_message_size,
        reuse_port=reuse_port,
    )
    try:
        server.serve(_runner(ctx), listen)
    except Exception as err:  # noqa: BLE001 - a server that cannot start (any cause) says why in one line
        fail(f"cannot serve on {address}: {err}")


# The receive limit's default is the function's own (function/inputs.py: large
# enough that a request above the function's documented limits gets a Fatal
# saying so rather than a gRPC error); the send limit follows it, as in the SDK.
next(p for p in cli.params if p.name == "max_recv_message_size").default = GRPC_MAX_RECEIVE_BYTES // MIB


def _runner(ctx: click.Context) -> FunctionRunner:
    """The fork's runner when it passed one as ``obj``, else the plain function."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, FunctionRunner) else FunctionRunner()


_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_PATHS = click.Path(exists=True, path_type=Path)

_REQUIRED_OPTION = click.option(
    "--required-resources",
    "--extra-resources",
    "-e",
    "required",
    multiple=True,
    type=_PATHS,
    help="EnvironmentConfigs and other required resources (file or directory).",
)


_CHARTS_OPTION = click.option(
    "--charts",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Packaged charts (<chart>-<version>.tgz) to render with real Helm (the helm extra); a clone's facts/helm/.",
)


def _render_inputs(command: Callable[..., None]) -> Callable[..., None]:
    """The inputs render and explain share: the XR, EnvironmentConfigs and the function Input."""
    return click.argument("xr_file", type=_FILE)(_REQUIRED_OPTION(INPUT_OPTION(command)))


def _context(files: tuple[str, ...], values: tuple[str, ...]) -> dict[str, Any]:
    """``--context-files``/``--context-values`` KEY=... pairs; values win on the same key, as in render."""
    out: dict[str, Any] = {}
    for flag, pairs in (("--context-files", files), ("--context-values", values)):
        for pair in pairs:
            key, sep, text = pair.partition("=")
            if not sep or not key:
                fail(f"{flag} {pair}: expected KEY=VALUE")
            if flag == "--context-files":
                try:
                    text = Path(text).read_text()
                except OSError as err:
                    fail(f"{flag} {key}: cannot read {text}: {err.strerror}")
            try:
                out[key] = yaml.safe_load(text)
            except yaml.YAMLError as err:
                fail(f"{flag} {key}: not JSON or YAML: {err}")
    return out


@cli.command()
@_render_inputs
@click.argument("composition_file", required=False, type=_FILE)
@click.argument("functions_file", required=False, type=_PATHS)
@click.option(
    "--observed-resources",
    "--observed",
    "-o",
    "observed",
    multiple=True,
    type=_PATHS,
    help="Observed composed resources (file or directory).",
)
@click.option(
    "--context-files",
    multiple=True,
    metavar="KEY=FILE",
    help="Context key and a JSON/YAML file holding its value (repeatable).",
)
@click.option(
    "--context-values",
    multiple=True,
    metavar="KEY=VALUE",
    help="Context key and its JSON/YAML value (repeatable); wins over --context-files.",
)
@click.option("--include-function-results", "-r", "include_results", is_flag=True, help="Print results too.")
@click.option("--include-full-xr", "-x", "include_full_xr", is_flag=True, help="Print the XR's spec and metadata.")
@click.option("--include-context", "-c", "include_context", is_flag=True, help="Print the context too.")
@click.pass_context
def render(
    ctx: click.Context,
    xr_file: Path,
    composition_file: Path | None,
    functions_file: Path | None,
    observed: tuple[Path, ...],
    required: tuple[Path, ...],
    input_file: Path | None,
    context_files: tuple[str, ...],
    context_values: tuple[str, ...],
    include_results: bool,
    include_full_xr: bool,
    include_context: bool,
) -> None:
    """Render a ServingStack offline and print the result as crossplane render does.

    Takes crossplane render's arguments: XR [COMPOSITION [FUNCTIONS]]. With a
    Composition, the function Input is its pipeline step's. FUNCTIONS is
    accepted so a crossplane render command line works unchanged: the
    function runs in process.
    """

    logging.configure(logging.Level.DISABLED)
    xr = read_one(xr_file, "ServingStack")
    assert xr is not None
    if functions_file is not None:
        read_documents((functions_file,))  # readable YAML, as render requires
    try:
        result = offline.render(
            _runner(ctx),
            xr,
            input_api_version=INPUT_API_VERSION,
            composition=read_one(composition_file, "Composition"),
            input=read_one(input_file, "Input"),
            observed=read_documents(observed),
            required=read_documents(required),
            context=_context(context_files, context_values),
        )
        docs = render_documents(
            result, include_results=include_results, include_context=include_context, include_full_xr=include_full_xr
        )
    except RenderError as err:
        fail(str(err))
    click.echo(dump_yaml(docs), nl=False)


@cli.command()
@_render_inputs
@click.option("--only-changed", is_flag=True, help="Show only components and fields an EnvironmentConfig changed.")
@click.option(
    "--output",
    "-O",
    "output",
    type=click.Choice(["text", "yaml"]),
    default="text",
    show_default=True,
    help="Plain text, or YAML for tools.",
)
def explain(
    xr_file: Path, required: tuple[Path, ...], input_file: Path | None, only_changed: bool, output: str
) -> None:
    """Show, per component, which field comes from the generated stack and which from which EnvironmentConfig."""

    logging.configure(logging.Level.DISABLED)
    supplied = read_documents(required)
    try:
        raw = to_jsonable(read_one(xr_file, "ServingStack"))
        xr = parse_xr(raw)
        chosen = select_stack(xr)
        req = explaining.request_for(raw, to_jsonable(read_one(input_file, "Input")))
        found = explaining.found_offline(req, xr, lambda selector: fetch_resources(selector, supplied))
        components, notes = explaining.explain(chosen, found)
    except InputError as err:
        fail(str(err))
    if output == "yaml":
        click.echo(dump_yaml([explaining.as_data(chosen, found, components, notes)]), nl=False)
    else:
        click.echo(explaining.format_text(chosen, found, components, notes, only_changed=only_changed), nl=False)


def _every_stack() -> list[dict[str, Any]]:
    """One ServingStack per generated stack, matching documents that select by cloud only."""
    return [
        {
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {"name": f"any-{stack.module_name(cloud, accelerator, kind).replace('_', '-')}"},
            "spec": {
                "cloud": cloud,
                "accelerator": accelerator,
                "stack": kind,
                "secrets": [{"type": "Kubeconfig", "name": "kubeconfig", "key": "kubeconfig"}],
            },
        }
        for cloud, accelerator, kind in stack.available()
    ]


@cli.command()
@click.option(
    "--xr",
    "xr_files",
    multiple=True,
    type=_FILE,
    help="A ServingStack (repeatable); without it, every generated stack.",
)
@_REQUIRED_OPTION
@INPUT_OPTION
@click.option(
    "--format",
    "-O",
    "output",
    type=click.Choice(["lines", "pairs", "skopeo"]),
    default="lines",
    show_default=True,
    help="lines: one image or chart per line; pairs: upstream -> mirror for what a rule moved; "
    "skopeo: skopeo sync YAML (--src yaml), one document per destination.",
)
@_CHARTS_OPTION
def images(
    xr_files: tuple[Path, ...], required: tuple[Path, ...], input_file: Path | None, output: str, charts: Path | None
) -> None:
    """Print every image and chart the stack(s) will pull, after the EnvironmentConfigs' overrides.

    With --charts, the images are read from what real Helm renders (every installed object), not from the
    value paths the stacks declare; the charts are listed as without it.
    """

    logging.configure(logging.Level.DISABLED)
    supplied = read_documents(required)
    given = to_jsonable(read_one(input_file, "Input"))
    xrs = [to_jsonable(read_one(path, "ServingStack")) for path in xr_files] or _every_stack()
    if charts is not None and output != "lines":
        fail(f"--charts lists images as lines only, not --format {output}")
    helm_images = "".join(manifests.image_lines(_installed(r, charts, supplied, given)) for r in xrs) if charts else ""
    found: list[pulls.Pull] = []
    for raw in xrs:
        try:
            xr = parse_xr(raw)
            req = explaining.request_for(raw, given)
            offline = explaining.found_offline(req, xr, lambda selector: fetch_resources(selector, supplied))
            found += pulls.pulls(select_stack(xr), offline)
        except InputError as err:
            fail(f"{_named(raw)}: {err}")
    if charts is not None:
        found = [p for p in found if p.kind != pulls.IMAGE]
    try:
        text = {"lines": pulls.as_lines, "pairs": pulls.as_pairs, "skopeo": pulls.as_skopeo}[output](found)
    except InputError as err:
        fail(str(err))
    if charts is not None:
        text = "".join(sorted(set((text + helm_images).splitlines(keepends=True))))
    click.echo(text, nl=False)


def _installed(
    raw: dict[str, Any], charts: Path, supplied: list[dict[str, Any]], given: dict[str, Any] | None
) -> manifests.Manifests:
    """The objects one ServingStack installs, rendered by real Helm from ``charts``."""
    try:
        return manifests.from_files(raw, charts, required=supplied, input=given)
    except (RenderError, InputError, manifests.HelmError) as err:
        fail(f"{_named(raw)}: {err}")


def _named(raw: dict[str, Any]) -> str:
    """A ServingStack file's name, for a message about it; ``?`` where it has none."""
    meta = raw.get("metadata")
    return str(meta.get("name", "?")) if isinstance(meta, dict) else "?"


@cli.command(name="manifests")
@_render_inputs
@_CHARTS_OPTION
def manifests_command(xr_file: Path, required: tuple[Path, ...], input_file: Path | None, charts: Path | None) -> None:
    """Print every Kubernetes object the stack installs on the ServingStack's cluster, as real Helm renders it.

    Releases are expanded from the chart directory (``<chart>-<version>.tgz`` files; a clone's facts/helm/),
    Objects and per-pool driver resources included; needs the helm extra.
    """
    logging.configure(logging.Level.DISABLED)
    if charts is None:
        fail("--charts DIR is required: the packaged charts to render (a clone's facts/helm/)")
    raw = to_jsonable(read_one(xr_file, "ServingStack"))
    assert raw is not None
    found = _installed(raw, charts, read_documents(required), to_jsonable(read_one(input_file, "Input")))
    click.echo(manifests.as_yaml(found), nl=False)


cli.add_command(validate)

if __name__ == "__main__":
    cli()
