"""The ``ldp`` command group. Each subcommand lives in its own module and calls the library."""

from __future__ import annotations

try:
    import click
except ImportError:  # the SDK alone does not install the CLI's dependencies
    raise SystemExit(
        "ldp needs the collector's dependencies: pip install 'ldp-telemetry[collector]' "
        "(or '[sim]' for ldp demo and ldp simulate)"
    ) from None

import errno
import importlib
import sys
from typing import Any, TextIO, cast

from client_sdk import __version__

#: Subcommand name -> "module:attribute". A subcommand's module is imported when that command
#: runs (or ``ldp --help`` lists it): ``ldp campaign``, ``ldp mechanisms`` and ``ldp estimate``
#: no longer load the simulator, the plots or the privacy audit (2-3x faster to start);
#: ``ldp serve`` still needs the collector's own imports.
SUBCOMMANDS = {
    "mechanisms": "ldp_cli.mechanisms_cmd:mechanisms_command",
    "audit": "ldp_cli.audit_cmd:audit_command",
    "estimate": "ldp_cli.estimate_cmd:estimate_command",
    "serve": "ldp_cli.serve_cmd:serve_command",
    "campaign": "ldp_cli.campaign_cmd:campaign_group",
    "tally": "ldp_cli.tally_cmd:tally_group",
    "retention": "ldp_cli.retention_cmd:retention_group",
    "mix": "ldp_cli.mix_cmd:mix_command",
    "simulate": "ldp_cli.simulate_cmd:simulate_command",
    "demo": "ldp_cli.demo_cmd:demo_command",
    "shuffle": "ldp_cli.shuffle_cmd:shuffle_command",
}


#: Errors only a write raises, and again however often it is retried: a full disk, a quota, a
#: file too large.
WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class _Unflushed:
    """Standard output after a write to it failed: what is left in its buffer is dropped at
    exit instead of failing again as "Exception ignored in: <_io.TextIOWrapper ...>"."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError:
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class LazyGroup(click.Group):
    """A click group whose subcommands (:data:`SUBCOMMANDS`) are imported on first use.

    A write that cannot succeed (:data:`WRITE_ERRORS`: ``ldp tally verify > /full/disk/x``) is
    the one-line error ``cannot write ...: No space left on device`` with exit status 1; it was
    a Python traceback. A broken pipe (``| head``) stays click's own quiet exit. So is an
    answer from ``--url`` that the command cannot read (``ldp_cli.remote.unreadable_answer``).
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        remote = sys.modules.get("ldp_cli.remote")
        if remote is not None:  # a second command in one process (tests) starts afresh
            remote.ANSWERED_BY.clear()
        try:
            return super().main(*args, **kwargs)
        except OSError as exc:
            if exc.errno not in WRITE_ERRORS:
                raise
            sys.stdout = cast(TextIO, _Unflushed(sys.stdout))
            where = exc.filename if exc.filename is not None else "the output"
            self._fail(click.ClickException(f"cannot write {where}: {exc.strerror}"), kwargs)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
            # A 2xx from --url of another shape than the collector's ({"campaigns": 5}, a
            # resource without "mechanism"): a one-line error naming the URL, not a traceback.
            remote = sys.modules.get("ldp_cli.remote")
            error = None if remote is None else remote.unreadable_answer(exc)
            if error is None:
                raise
            self._fail(error, kwargs)

    @staticmethod
    def _fail(error: click.ClickException, kwargs: dict[str, Any]) -> None:
        if not kwargs.get("standalone_mode", True):
            raise error from None
        error.show()
        sys.exit(error.exit_code)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in SUBCOMMANDS:
            module, attribute = SUBCOMMANDS[cmd_name].split(":")
            command: Any = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ldp")
def cli() -> None:
    """ldp-telemetry: local differential privacy telemetry.

    Devices send only perturbed reports; the collector stores them and the aggregator turns
    them into estimates with error bars.
    """
