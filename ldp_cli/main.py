"""The ``ldp`` command group. Each subcommand lives in its own module and calls the library."""

from __future__ import annotations

try:
    import click
except ImportError:  # the SDK alone does not install the CLI's dependencies
    raise SystemExit(
        "ldp needs the collector's dependencies: pip install 'ldp-telemetry[collector]' "
        "(or '[sim]' for ldp demo and ldp simulate)"
    ) from None

from client_sdk import __version__
from ldp_cli.audit_cmd import audit_command
from ldp_cli.campaign_cmd import campaign_group
from ldp_cli.demo_cmd import demo_command
from ldp_cli.estimate_cmd import estimate_command
from ldp_cli.mechanisms_cmd import mechanisms_command
from ldp_cli.mix_cmd import mix_command
from ldp_cli.retention_cmd import retention_group
from ldp_cli.serve_cmd import serve_command
from ldp_cli.shuffle_cmd import shuffle_command
from ldp_cli.simulate_cmd import simulate_command
from ldp_cli.tally_cmd import tally_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ldp")
def cli() -> None:
    """ldp-telemetry: local differential privacy telemetry.

    Devices send only perturbed reports; the collector stores them and the aggregator turns
    them into estimates with error bars.
    """


cli.add_command(mechanisms_command)
cli.add_command(audit_command)
cli.add_command(estimate_command)
cli.add_command(serve_command)
cli.add_command(campaign_group)
cli.add_command(tally_group)
cli.add_command(retention_group)
cli.add_command(mix_command)
cli.add_command(simulate_command)
cli.add_command(demo_command)
cli.add_command(shuffle_command)
