"""The ``function`` command: serve gRPC the Crossplane way, or render offline."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
import yaml
from crossplane.function import logging, runtime

from function import stack
from function.compose import renderer
from function.fn import FunctionRunner
from function.model import Accelerator, Cloud


def _fail(message: str) -> NoReturn:
    click.echo(f"function: {message}", err=True)
    sys.exit(1)


def _warm_up() -> None:
    """Load and convert every stack before the first request arrives."""
    for cloud, accelerator in stack.available():
        loaded = stack.load(Cloud(cloud), Accelerator(accelerator))
        if loaded is not None:
            renderer(loaded)


@click.group(invoke_without_command=True)
@click.option("--debug", "-d", is_flag=True, envvar="DEBUG", help="Emit debug logs.")
@click.option(
    "--address", default="0.0.0.0:9443", envvar="ADDRESS", show_default=True, help="Address to serve gRPC on."
)
@click.option(
    "--tls-certs-dir",
    "--tls-server-certs-dir",
    envvar="TLS_SERVER_CERTS_DIR",
    type=click.Path(path_type=Path),
    help="Directory with tls.crt, tls.key and ca.crt (mTLS).",
)
@click.option("--insecure", is_flag=True, envvar="INSECURE", help="Serve without TLS (crossplane render, local work).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, address: str, tls_certs_dir: Path | None, insecure: bool) -> None:
    """Serve the compose-serving-stack function, or render a ServingStack offline."""
    if ctx.invoked_subcommand is not None:
        return
    logging.configure(logging.Level.DEBUG if debug else logging.Level.INFO)
    log = logging.get_logger()
    if insecure and tls_certs_dir is not None:
        # Binding both would put a TLS and a plaintext listener on one address,
        # and connections would land on either at random.
        log.warning("--insecure given: ignoring the TLS certificates directory", dir=str(tls_certs_dir))
        tls_certs_dir = None
    if not insecure and tls_certs_dir is None:
        _fail("either --insecure or --tls-certs-dir (TLS_SERVER_CERTS_DIR) is required")
    try:
        creds = runtime.load_credentials(str(tls_certs_dir)) if tls_certs_dir is not None else None
    except OSError as err:
        _fail(f"cannot read TLS certificates from {tls_certs_dir}: {err.strerror}: {err.filename}")
    _warm_up()
    try:
        # No SO_REUSEPORT: a second server on a busy port must fail, not
        # silently share the port and split Crossplane's calls between two
        # possibly different versions of the function.
        runtime.serve(FunctionRunner(), address, creds=creds, insecure=insecure, options=[("grpc.so_reuseport", 0)])
    except Exception as err:  # a server that cannot start says why in one line
        _fail(f"cannot serve on {address}: {err}")


def _read_documents(paths: tuple[Path, ...]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for file in files:
            try:
                docs += [d for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict)]
            except (OSError, yaml.YAMLError) as err:
                _fail(f"cannot read {file}: {err}")
    return docs


def _render_inputs(command: Callable[..., None]) -> Callable[..., None]:
    """The inputs render and explain share: the XR, EnvironmentConfigs and the function Input."""
    for option in reversed(
        (
            click.argument("xr_file", type=click.Path(exists=True, dir_okay=False, path_type=Path)),
            click.option(
                "--required-resources",
                "-e",
                "required",
                multiple=True,
                type=click.Path(exists=True, path_type=Path),
                help="EnvironmentConfigs and other required resources (file or directory).",
            ),
            click.option(
                "--input",
                "input_file",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                help="The function's Input (as in the Composition's pipeline step).",
            ),
        )
    ):
        command = option(command)
    return command


def _read_one(path: Path | None, what: str) -> dict[str, Any] | None:
    if path is None:
        return None
    docs = _read_documents((path,))
    if len(docs) != 1:
        _fail(f"{path}: expected one {what}, found {len(docs)} documents")
    return docs[0]


@cli.command()
@_render_inputs
@click.option(
    "--observed",
    "-o",
    "observed",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Observed composed resources (file or directory), as crossplane render -o.",
)
@click.option("--include-function-results", "-r", "include_results", is_flag=True, help="Print results too.")
@click.option("--include-context", "-c", "include_context", is_flag=True, help="Print the context too.")
def render(
    xr_file: Path,
    observed: tuple[Path, ...],
    required: tuple[Path, ...],
    input_file: Path | None,
    include_results: bool,
    include_context: bool,
) -> None:
    """Render a ServingStack offline and print the result as crossplane render does."""
    from function.render_loop import RenderError, dump_yaml, render_documents, run_pipeline

    logging.configure(logging.Level.DISABLED)
    xr = _read_one(xr_file, "ServingStack")
    assert xr is not None
    runner = FunctionRunner()
    try:
        result = asyncio.run(
            run_pipeline(
                runner.RunFunction,
                xr=xr,
                input=_read_one(input_file, "Input"),
                observed=_read_documents(observed),
                required=_read_documents(required),
            )
        )
    except RenderError as err:
        _fail(str(err))
    docs = render_documents(result, include_results=include_results, include_context=include_context)
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
    from function.errors import InputError
    from function.fn import parse_xr, select_stack
    from function.overrides import explain as explaining  # the module
    from function.render_loop import dump_yaml, fetch_resources, to_jsonable

    logging.configure(logging.Level.DISABLED)
    supplied = _read_documents(required)
    try:
        raw = to_jsonable(_read_one(xr_file, "ServingStack"))
        xr = parse_xr(raw)
        chosen = select_stack(xr)
        req = explaining.request_for(raw, to_jsonable(_read_one(input_file, "Input")))
        found = explaining.found_offline(req, xr, lambda selector: fetch_resources(selector, supplied))
        components, notes = explaining.explain(chosen, found)
    except InputError as err:
        _fail(str(err))
    if output == "yaml":
        click.echo(dump_yaml([explaining.as_data(chosen, found, components, notes)]), nl=False)
    else:
        click.echo(explaining.format_text(chosen, found, components, notes, only_changed=only_changed), nl=False)


if __name__ == "__main__":
    cli()
