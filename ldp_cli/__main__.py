from ldp_cli.main import cli

cli()
